//! A job pending for resources on the real cluster. Its own test binary, because it fills the
//! node, and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use batchbridge_core::{BatchBackend, JobState};

#[tokio::test]
async fn a_job_waits_for_resources_then_runs() {
    let slurm = common::backend();
    let mut blocker = common::spec("whole-node", "sleep 600\n");
    blocker.resources.cpus = Some(16);
    let blocker = slurm.submit(&blocker).await.unwrap();
    common::wait_for(&slurm, &blocker, "the node full", |s| {
        s.state == JobState::Running
    })
    .await;

    let waiting = slurm
        .submit(&common::spec("waiting", "echo ran\n"))
        .await
        .unwrap();
    let queued = common::wait_for(&slurm, &waiting, "pending for resources", |s| {
        s.reason.as_deref() == Some("Resources")
    })
    .await;
    assert_eq!(queued.state, JobState::Queued, "{queued:?}");
    assert_eq!(queued.native_state, "PENDING");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = slurm.status(std::slice::from_ref(&waiting)).await.unwrap()[&waiting].clone();
    assert_eq!(
        still.state,
        JobState::Queued,
        "the node is still full: {still:?}"
    );

    slurm.cancel(&blocker).await.unwrap();
    let done = common::wait_for(&slurm, &waiting, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    let blocker_status =
        common::wait_for(&slurm, &blocker, "cancelled", |s| s.state.is_terminal()).await;
    assert_eq!(
        blocker_status.state,
        JobState::Cancelled,
        "{blocker_status:?}"
    );
}
