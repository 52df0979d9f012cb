//! With pbs_server stopped: calls fail with temporary errors, nothing is marked ended or
//! lost, and everything converges once it is back. Its own test binary, because it takes
//! the server away from every other test, and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_core::{BatchBackend, ErrorKind, JobState};
use batchbridge_testbed::{RunOnDrop, testbed_script};
use common::{backend, spec, wait_for};

#[tokio::test]
async fn with_the_server_down_calls_fail_temporarily_and_recover() {
    let pbs = backend();
    let running = pbs
        .submit(&spec("server-running", "sleep 8\necho done\n"))
        .await
        .unwrap();
    wait_for(&pbs, &running, "Running", |s| s.state == JobState::Running).await;

    testbed_script("pbs.sh", &["stop-server"]);
    let restart = RunOnDrop::script("pbs.sh", &["start-server"]);
    let err = pbs
        .status(std::slice::from_ref(&running))
        .await
        .unwrap_err();
    assert!(
        err.is_temporary(),
        "a server that is down is worth a retry: {err}"
    );
    let later = spec("server-later", "echo later\n");
    let err = pbs.submit(&later).await.unwrap_err();
    assert!(err.is_temporary(), "{err}");
    assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");

    drop(restart);
    let end = wait_for(&pbs, &running, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Succeeded, "{end:?}");
    // The refused submit released its key: the same spec now runs.
    let id = pbs.submit(&later).await.unwrap();
    let end = wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Succeeded, "{end:?}");
}
