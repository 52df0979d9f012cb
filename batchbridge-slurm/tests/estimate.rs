//! Start estimates (`sbatch --test-only`) on each real cluster: an idle node, a node a
//! blocking job fills, a spec no node can run, and placement between the two clusters. Its
//! own test binary, because it fills the node, and cargo runs test binaries one after
//! another; the two clusters' tests take turns, as each places onto the other.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
use batchbridge_core::placement::{Answer, Candidate, Placer, Policy};
use batchbridge_core::{BatchBackend, ErrorKind, JobSpec, JobState};
use batchbridge_slurm::SlurmBackend;
use batchbridge_testbed::SlurmCluster;

on_both_clusters!(estimates_follow_what_the_cluster_can_do);

/// One cluster's test at a time: each fills its node while it places onto the other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn other(cluster: SlurmCluster) -> SlurmCluster {
    match cluster {
        SlurmCluster::Slurm2205 => SlurmCluster::Slurm2411,
        SlurmCluster::Slurm2411 => SlurmCluster::Slurm2205,
    }
}

/// The estimate for `spec` on `slurm` once it says Now (other suites' jobs share the
/// clusters); fails after 5 minutes.
async fn once_idle(slurm: &SlurmBackend, spec: &JobSpec) -> StartEstimate {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let estimate = slurm.estimate_start(spec).await.unwrap();
        if estimate.start == EstimatedStart::Now {
            return estimate;
        }
        assert!(Instant::now() < deadline, "never idle; last {estimate:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn estimates_follow_what_the_cluster_can_do(cluster: SlurmCluster) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let slurm = Arc::new(common::backend(cluster));

    // An idle node: now, on the partition asked for, and nothing is queued.
    let mut one_cpu = common::spec("estimate", "true\n");
    one_cpu.resources.wall_time = Some(Duration::from_secs(60));
    let idle = once_idle(&slurm, &one_cpu).await;
    assert_eq!(idle.queue.as_deref(), Some("debug"), "{idle:?}");
    assert!(idle.nodes.is_some(), "{idle:?}");
    assert_eq!(
        slurm.find(&one_cpu.key).await.unwrap(),
        None,
        "an estimate submits nothing"
    );

    // More CPUs than any node has: refused, saying why.
    let mut too_big = common::spec("too-big", "true\n");
    too_big.resources.cpus = Some(cluster.cpus() * 256);
    let err = slurm.estimate_start(&too_big).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    assert!(
        err.message()
            .contains("Requested node configuration is not available"),
        "{err}"
    );
    assert!(err.message().contains("on partition \"debug\""), "{err}");

    // The node full until a blocker's time limit: a time after now, within that limit; or
    // Later, behind other suites' jobs without a time limit queued ahead.
    let mut blocker = common::spec("estimate-blocker", "sleep 300\n");
    blocker.resources.cpus = Some(cluster.cpus());
    blocker.resources.wall_time = Some(Duration::from_secs(300));
    let blocker = slurm.submit(&blocker).await.unwrap();
    let running = common::wait_for(&slurm, &blocker, "the node full", |s| {
        s.state == JobState::Running
    })
    .await;
    let full = slurm.estimate_start(&one_cpu).await.unwrap();
    let asked = SystemTime::now();
    match full.start {
        EstimatedStart::At(at) => {
            assert!(at > asked, "{full:?}");
            let blocker_end = running.started_at.unwrap() + Duration::from_secs(300);
            assert!(
                at <= blocker_end + Duration::from_secs(120),
                "{full:?} vs the blocker's end {blocker_end:?}"
            );
        }
        EstimatedStart::Later => {}
        _ => panic!("a full node starts the job later: {full:?}"),
    }

    // Placement picks the other cluster, and says what it saw on both.
    let other = Arc::new(common::backend(other(cluster)));
    once_idle(&other, &one_cpu).await;
    let candidates = [
        Candidate::new("full", slurm.clone()),
        Candidate::new("idle", other),
    ];
    let placement = Placer::default()
        .place(Policy::EarliestStart, &candidates, &one_cpu)
        .await;
    assert_eq!(placement.chosen.as_deref(), Some("idle"), "{placement:?}");
    assert!(
        matches!(&placement.seen[0].answer, Answer::Estimate(e) if e.start != EstimatedStart::Now),
        "{placement:?}"
    );
    assert!(
        matches!(&placement.seen[1].answer, Answer::Estimate(e) if e.start == EstimatedStart::Now),
        "{placement:?}"
    );

    slurm.cancel(&blocker).await.unwrap();
    common::wait_for(&slurm, &blocker, "cancelled", |s| s.state.is_terminal()).await;
}
