//! Start estimates on the test bed's real pool: room now, the pool filled by a blocker (and
//! a job idle behind it), and a spec HTCondor cannot run. Its own test binary, because it
//! fills the pool, and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_core::estimate::EstimatedStart;
use batchbridge_core::shell::Command;
use batchbridge_core::{BatchBackend, ErrorKind, JobState};
use batchbridge_testbed::{estimate_once, htcondor_shell, stdout_of};
use common::{backend, spec, wait_for};

/// The CPUs of the pool's partitionable slots.
async fn pool_cpus() -> u32 {
    let shell = htcondor_shell();
    let command = Command::new("condor_status").args([
        "-constraint",
        "PartitionableSlot =?= true",
        "-af",
        "TotalSlotCpus",
    ]);
    stdout_of(&shell, command)
        .await
        .split_whitespace()
        .map(|cpus| cpus.parse::<u32>().unwrap())
        .sum()
}

#[tokio::test]
async fn estimates_follow_the_pool_s_idle_slots() {
    let condor = backend();
    let cpus = pool_cpus().await;
    assert!(cpus > 0, "the pool has CPUs");

    // A spec HTCondor cannot run: counted out, not "no estimate".
    let mut queued = spec("estimate-queue", "true\n");
    queued.queue = Some("debug".into());
    let err = condor.estimate_start(&queued).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.message().contains("HTCondor has no queues"), "{err}");

    // More CPUs than the pool has: no slot matches, ever.
    let mut too_big = spec("estimate-too-big", "true\n");
    too_big.resources.cpus = Some(cpus * 64);
    let never = condor.estimate_start(&too_big).await.unwrap();
    assert_eq!(never.start, EstimatedStart::Later, "{never:?}");

    // Room for one CPU: now (once other tests' jobs leave it).
    let one_cpu = spec("estimate", "true\n");
    let idle = estimate_once(&backend(), &one_cpu, EstimatedStart::Now).await;
    assert!(idle.detail.unwrap().contains("matching idle slot"));
    assert_eq!(
        condor.find(&one_cpu.key).await.unwrap(),
        None,
        "nothing submitted"
    );

    // Every CPU taken by a blocker, and a job idle behind it: later, the queue counted.
    let mut blocker = spec("estimate-blocker", "sleep 300\n");
    blocker.resources.cpus = Some(cpus);
    let blocker = condor.submit(&blocker).await.unwrap();
    wait_for(&condor, &blocker, "the pool full", |s| {
        s.state == JobState::Running
    })
    .await;
    let behind = condor
        .submit(&spec("estimate-behind", "true\n"))
        .await
        .unwrap();
    let full = estimate_once(&backend(), &one_cpu, EstimatedStart::Later).await;
    let detail = full.detail.unwrap();
    assert!(detail.starts_with("0 matching idle slots; "), "{detail}");
    assert!(
        !detail.contains("; 0 idle jobs"),
        "the job behind: {detail}"
    );

    condor.cancel(&blocker).await.unwrap();
    condor.cancel(&behind).await.unwrap();
}
