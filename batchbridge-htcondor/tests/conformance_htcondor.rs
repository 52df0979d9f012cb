//! The shared conformance suite against the test bed's real HTCondor pool
//! (tests/testbed/htcondor.sh), reached as a regular user over SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_core::conformance::Config;
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::htcondor_shell;

async fn backend() -> HtcondorBackend {
    HtcondorBackend::new(Arc::new(htcondor_shell()), HtcondorConfig::default()).unwrap()
}

// The default unsatisfiable request (1024 CPUs) matches no slot of the pool, so the job
// stays Idle with "no match found".
batchbridge_core::conformance_tests!(backend(), Config::default());
