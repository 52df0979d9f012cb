//! A job pending for resources on each real cluster. Its own test binary, because it fills
//! the node, and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::time::Duration;

use batchbridge_core::{BatchBackend, CancelledBy, FailureCause, JobState};
use batchbridge_testbed::SlurmCluster;

on_both_clusters!(a_job_waits_for_resources_then_runs);

async fn a_job_waits_for_resources_then_runs(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut blocker = common::spec("whole-node", "sleep 600\n");
    blocker.resources.cpus = Some(cluster.cpus());
    // A time limit lets the scheduler estimate when the node frees up.
    blocker.resources.wall_time = Some(Duration::from_secs(600));
    let blocker = slurm.submit(&blocker).await.unwrap();
    common::wait_for(&slurm, &blocker, "the node full", |s| {
        s.state == JobState::Running
    })
    .await;

    // Backfill plans only jobs with a time limit.
    let mut waiting = common::spec("waiting", "echo ran\n");
    waiting.resources.wall_time = Some(Duration::from_secs(60));
    let waiting = slurm.submit(&waiting).await.unwrap();
    // Priority when another user's job waits for the node too.
    let queued = common::wait_for(&slurm, &waiting, "pending for resources", |s| {
        matches!(s.reason.as_deref(), Some("Resources" | "Priority"))
    })
    .await;
    assert_eq!(queued.state, JobState::Queued, "{queued:?}");
    assert_eq!(queued.native_state, "PENDING");
    assert_eq!(queued.queue.as_deref(), Some("debug"), "{queued:?}");
    // Issue 21 case 3: SLURM's estimate of the start is no start.
    let estimated = common::wait_for(&slurm, &waiting, "a start estimate", |s| {
        assert_eq!(s.started_at, None, "a waiting job has not started: {s:?}");
        s.expected_start_at.is_some()
    })
    .await;
    assert_eq!(estimated.state, JobState::Queued, "{estimated:?}");
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
    assert!(done.started_at.is_some(), "{done:?}");
    let blocker_status =
        common::wait_for(&slurm, &blocker, "cancelled", |s| s.state.is_terminal()).await;
    assert_eq!(
        blocker_status.state,
        JobState::Cancelled,
        "{blocker_status:?}"
    );
    assert_eq!(
        blocker_status.cause,
        Some(FailureCause::Cancelled(CancelledBy::Request)),
        "batchbridge cancelled it: {blocker_status:?}"
    );
}
