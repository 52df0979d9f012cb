//! A job pending for resources on each real cluster. Its own test binary, because it fills
//! the node, and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use batchbridge_core::shell::Command;
use batchbridge_core::{BatchBackend, CancelledBy, FailureCause, JobState};
use batchbridge_testbed::{SlurmCluster, stdout_of};

on_both_clusters!(
    a_job_waits_for_resources_then_runs,
    behind_a_job_without_a_time_limit_there_is_no_start_estimate,
);

/// One test at a time fills a cluster's node: the tests of one binary run at once.
fn node_of(cluster: SlurmCluster) -> &'static tokio::sync::Mutex<()> {
    static NODES: [tokio::sync::Mutex<()>; 2] = [
        tokio::sync::Mutex::const_new(()),
        tokio::sync::Mutex::const_new(()),
    ];
    &NODES[usize::from(cluster == SlurmCluster::Slurm2411)]
}

async fn a_job_waits_for_resources_then_runs(cluster: SlurmCluster) {
    let _node = node_of(cluster).lock().await;
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

/// SLURM plans a job without a time limit to end a year after it started, so a job queued
/// behind one gets a "start" about a year ahead (squeue's %S, once the backfill scheduler
/// has run): no estimate, and the status says none (issue 27).
async fn behind_a_job_without_a_time_limit_there_is_no_start_estimate(cluster: SlurmCluster) {
    let _node = node_of(cluster).lock().await;
    let slurm = common::backend(cluster);
    let shell = cluster.shell();
    let mut blocker = common::spec("unlimited-whole-node", "sleep 600\n");
    blocker.resources.cpus = Some(cluster.cpus());
    let blocker = slurm.submit(&blocker).await.unwrap();
    let _cancel = CancelOnDrop(cluster, blocker.clone());
    common::wait_for(&slurm, &blocker, "the node full", |s| {
        s.state == JobState::Running
    })
    .await;
    // Backfill plans only jobs with a time limit.
    let mut waiting = common::spec("behind-unlimited", "true\n");
    waiting.resources.wall_time = Some(Duration::from_secs(60));
    let waiting = slurm.submit(&waiting).await.unwrap();
    let _cancel_waiting = CancelOnDrop(cluster, waiting.clone());

    // What SLURM itself says, until backfill has planned the job.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (submitted, start) = loop {
        let fields = stdout_of(
            &shell,
            Command::new("env").args([
                "SLURM_TIME_FORMAT=%s",
                "squeue",
                "-h",
                "-j",
                waiting.as_str(),
                "-o",
                "%V %S",
            ]),
        )
        .await;
        let times: Vec<u64> = fields
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        if let [submitted, start] = times[..] {
            break (submitted, start);
        }
        assert!(Instant::now() < deadline, "no start in squeue: {fields:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    assert!(
        start > submitted + 300 * 24 * 3600,
        "SLURM's start {start} is its placeholder, about a year after the submit {submitted}"
    );
    let status = slurm.status_of(&waiting).await.unwrap();
    assert_eq!(status.state, JobState::Queued, "{status:?}");
    assert_eq!(status.expected_start_at, None, "no estimate: {status:?}");
    assert_eq!(status.started_at, None, "{status:?}");
}

/// Cancels the job when dropped, so that a failed test does not leave the node full.
struct CancelOnDrop(SlurmCluster, batchbridge_core::JobId);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = self.0.as_root("scancel").arg(self.1.as_str()).status();
    }
}
