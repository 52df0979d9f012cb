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
use hostile::{Backend, Bed};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_inputs_through_the_pbs_backend() {
    let shell: Arc<dyn Shell> = Arc::new(pbs_shell());
    let dirs = hostile::RemoteDirs::make(shell.as_ref()).await;

    let bed = Bed {
        which: Backend::Pbs,
        backend: Arc::new(PbsBackend::new(Arc::clone(&shell), PbsConfig::default()).unwrap()),
        cluster: Arc::clone(&shell),
        canary_dir: dirs.home.clone(),
        search_dirs: vec![dirs.home.clone(), "/tmp".to_owned()],
        hostile_dir: dirs.hostile_dir.clone(),
        with_account: None,
        version_except: &[],
    };
    let report = hostile::run(bed).await;
    hostile::print(&report, Backend::Pbs);
    dirs.remove(shell.as_ref(), "pbs").await;
    report.assert_clean();
}
