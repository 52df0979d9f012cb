//! The shared conformance suite against the test bed's real OpenPBS server
//! (tests/testbed/pbs.sh), reached as a regular user over SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_core::JobId;
use batchbridge_core::conformance::Config;
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::{pbs_shell, testbed_script};

async fn backend() -> PbsBackend {
    PbsBackend::new(Arc::new(pbs_shell()), PbsConfig::default()).unwrap()
}

/// `qrerun` of job `id` as root: PBS lets only its operators and managers rerun a job.
async fn requeue(id: JobId) -> batchbridge_core::Result<()> {
    tokio::task::spawn_blocking(move || testbed_script("pbs.sh", &["qrerun", id.as_str()]))
        .await
        .unwrap();
    Ok(())
}

fn config() -> Config {
    Config::with_requeue(|id| Box::pin(requeue(id)))
}

// The default unsatisfiable request (1024 CPUs) is more than the single node has, so the
// job stays Queued with PBS's comment "Can Never Run: Insufficient amount of resource".
batchbridge_core::conformance_tests!(backend(), config());
