//! The shared conformance suite against the test bed's real HTCondor pool
//! (tests/testbed/htcondor.sh), reached as a regular user over SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_core::JobId;
use batchbridge_core::conformance::Config;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::htcondor_shell;

async fn backend() -> HtcondorBackend {
    HtcondorBackend::new(Arc::new(htcondor_shell()), HtcondorConfig::default()).unwrap()
}

/// `condor_vacate_job` of job `id`, as its owner: HTCondor stops it and puts it back to
/// Idle, to be matched and started again.
async fn requeue(id: JobId) -> batchbridge_core::Result<()> {
    let output = htcondor_shell()
        .run(&Command::new("condor_vacate_job").arg(id.as_str()))
        .await?;
    assert!(
        output.success(),
        "condor_vacate_job {id}: {}",
        output.stderr_text()
    );
    Ok(())
}

fn config() -> Config {
    Config::with_requeue(|id| Box::pin(requeue(id)))
}

// The default unsatisfiable request (1024 CPUs) matches no slot of the pool, so the job
// stays Idle with "no match found".
batchbridge_core::conformance_tests!(backend(), config());
