//! With the schedd stopped: calls fail with temporary errors, nothing is marked ended or
//! lost, and everything converges once it is back. Its own test binary, because it takes
//! the schedd away from the whole pool, and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_core::{BatchBackend, ErrorKind, JobState};
use batchbridge_testbed::{RunOnDrop, testbed_script};
use common::{backend, spec, wait_for};

#[tokio::test]
async fn with_the_schedd_down_calls_fail_temporarily_and_recover() {
    let condor = backend();
    let running = condor
        .submit(&spec("schedd-running", "sleep 5\necho done\n"))
        .await
        .unwrap();
    wait_for(&condor, &running, "Running", |s| {
        s.state == JobState::Running
    })
    .await;

    testbed_script("htcondor.sh", &["stop-schedd"]);
    let restart = RunOnDrop::script("htcondor.sh", &["start-schedd"]);
    let err = condor
        .status(std::slice::from_ref(&running))
        .await
        .unwrap_err();
    assert!(
        err.is_temporary(),
        "a schedd that is down is worth a retry: {err}"
    );
    let later = spec("schedd-later", "echo later\n");
    let err = condor.submit(&later).await.unwrap_err();
    assert!(err.is_temporary(), "{err}");
    assert_ne!(
        err.kind(),
        ErrorKind::Rejected,
        "the job itself is fine: {err}"
    );
    assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");

    drop(restart);
    let end = wait_for(&condor, &running, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Succeeded, "{end:?}");
    // The refused submit released its key: the same spec now runs.
    let id = condor.submit(&later).await.unwrap();
    let end = wait_for(&condor, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Succeeded, "{end:?}");
}
