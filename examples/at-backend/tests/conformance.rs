//! The shared conformance suite against the test bed's real atd (tests/testbed/at.sh),
//! reached as the regular user `batch` through the test bed's sshd.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_at::{AtBackend, AtConfig};
use batchbridge_core::conformance::Config;
use batchbridge_testbed::{at_facts, ssh_facts};

async fn backend() -> AtBackend {
    // Fails with the command that starts it when the at component is not up.
    assert_eq!(at_facts().user, ssh_facts().user);
    AtBackend::new(Arc::new(ssh_facts().key_shell()), AtConfig::default()).unwrap()
}

fn config() -> Config {
    let mut config = Config::default();
    // at keeps no account of resources: nothing holds a job back, and a resource request
    // is refused.
    config.unsatisfiable = None;
    config
}

batchbridge_core::conformance_tests!(backend(), config());
