//! The hostile-input table (`batchbridge-core/tests/hostile/`, shared with the local, SLURM
//! and HTCondor backends) through the PBS backend on the test bed's server, over SSH as the
//! regular user `batch`: every case refused with a clear error or run with its values
//! intact, no canary file on the server's host or here, and bounded memory while reading
//! 100 MB of output.
//! Run alone: `cargo test -p batchbridge-pbs --test hostile_input -- --nocapture`.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[path = "../../batchbridge-core/tests/hostile/mod.rs"]
mod hostile;

use std::sync::Arc;

use batchbridge_core::shell::Shell;
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::pbs_shell;
use hostile::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_inputs_through_the_pbs_backend() {
    let shell: Arc<dyn Shell> = Arc::new(pbs_shell());
    let backend = PbsBackend::new(Arc::clone(&shell), PbsConfig::default()).unwrap();
    hostile::run_on_cluster(Backend::Pbs, shell, Arc::new(backend), None).await;
}
