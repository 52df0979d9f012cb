//! The hostile-input table (`batchbridge-core/tests/hostile/`, shared with the local and
//! SLURM backends) through the HTCondor backend on the test bed's pool, over SSH as the
//! regular user `batch`: every case refused with a clear error or run with its values
//! intact, no canary file on the submit node or here, and bounded memory while reading
//! 100 MB of output. Canaries point into the home directory: HTCondor gives every job a
//! private /tmp, where a file would vanish with the job.
//! Run alone: `cargo test -p batchbridge-htcondor --test hostile_input -- --nocapture`.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[path = "../../batchbridge-core/tests/hostile/mod.rs"]
mod hostile;

use std::sync::Arc;

use batchbridge_core::shell::Shell;
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::htcondor_shell;
use hostile::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_inputs_through_the_htcondor_backend() {
    let shell: Arc<dyn Shell> = Arc::new(htcondor_shell());
    let backend = HtcondorBackend::new(Arc::clone(&shell), HtcondorConfig::default()).unwrap();
    hostile::run_on_cluster(Backend::Htcondor, shell, Arc::new(backend), None).await;
}
