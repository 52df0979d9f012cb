//! The hostile-input table (`tests/hostile/`) through the local backend: every case
//! refused with a clear error or run with its values intact, no canary file anywhere, and
//! bounded memory while reading 100 MB of output.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod hostile;

use std::sync::Arc;

use batchbridge_core::LocalBackend;
use batchbridge_core::shell::LocalShell;
use hostile::{Backend, Bed};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_inputs_through_the_local_backend() {
    let state = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let run = format!("{}", std::process::id());
    let hostile_dir = home.path().join(hostile::hostile_dir_name(&run));
    std::fs::create_dir_all(&hostile_dir).unwrap();
    let bed = Bed {
        which: Backend::Local,
        backend: Arc::new(LocalBackend::with_capacity(state.path(), 8).unwrap()),
        cluster: Arc::new(LocalShell),
        canary_dir: home.path().to_string_lossy().into_owned(),
        search_dirs: vec![
            home.path().to_string_lossy().into_owned(),
            state.path().to_string_lossy().into_owned(),
        ],
        hostile_dir: hostile_dir.to_string_lossy().into_owned(),
        with_account: None,
        version_except: &[],
        batched: false,
    };
    let report = hostile::run(bed).await;
    hostile::print(&report, Backend::Local);
    report.assert_clean();
}
