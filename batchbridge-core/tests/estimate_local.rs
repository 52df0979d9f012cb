//! Start estimates of the local backend with real jobs holding its CPU slots, and placement
//! between two local backends.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::conformance::{Config, wait_for, wait_terminal};
use batchbridge_core::estimate::EstimatedStart;
use batchbridge_core::placement::{Answer, Candidate, Placer, Policy, Skipped};
use batchbridge_core::{
    BatchBackend, Container, ErrorKind, JobKey, JobSpec, JobState, LocalBackend,
};

fn spec(key: &str, script: &str, cpus: u32) -> JobSpec {
    let mut spec = JobSpec::new(JobKey::new(key).unwrap(), key, script);
    spec.resources.cpus = Some(cpus);
    spec
}

fn config() -> Config {
    let mut config = Config::default();
    config.timeout = Duration::from_secs(60);
    config.poll_interval = Duration::from_millis(50);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_holding_every_slot_makes_a_new_one_wait_and_placement_go_elsewhere() {
    let (full_dir, idle_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let full = Arc::new(LocalBackend::with_capacity(full_dir.path(), 2).unwrap());
    let idle = Arc::new(LocalBackend::with_capacity(idle_dir.path(), 2).unwrap());
    let one_cpu = spec("one", "true", 1);

    let now = full.estimate_start(&one_cpu).await.unwrap();
    assert_eq!(now.start, EstimatedStart::Now, "{now:?}");
    assert_eq!(now.detail.as_deref(), Some("2 of 2 CPU slots free"));

    let blocker = full.submit(&spec("blocker", "sleep 60", 2)).await.unwrap();
    wait_for(full.as_ref(), &blocker, &config(), "running", |s| {
        s.state == JobState::Running
    })
    .await
    .unwrap();
    let later = full.estimate_start(&one_cpu).await.unwrap();
    assert_eq!(later.start, EstimatedStart::Later, "{later:?}");
    assert_eq!(later.detail.as_deref(), Some("0 of 2 CPU slots free"));

    let placement = Placer::default()
        .place(
            Policy::EarliestStart,
            &[
                Candidate::new("full", full.clone()),
                Candidate::new("idle", idle.clone()),
            ],
            &one_cpu,
        )
        .await;
    assert_eq!(placement.chosen.as_deref(), Some("idle"), "{placement:?}");

    // What neither can run counts both out, saying why.
    let mut boxed = one_cpu.clone();
    boxed.container = Some(Container::new("docker://alpine"));
    let err = idle.estimate_start(&boxed).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let placement = Placer::default()
        .place(Policy::Ordered, &[Candidate::new("idle", idle)], &boxed)
        .await;
    assert_eq!(placement.chosen, None, "{placement:?}");
    assert!(
        matches!(&placement.seen[0].answer, Answer::Skipped(Skipped::Unsuitable(why)) if why.contains("containers")),
        "{placement:?}"
    );

    full.cancel(&blocker).await.unwrap();
    wait_terminal(full.as_ref(), &blocker, &config())
        .await
        .unwrap();
    let freed = full.estimate_start(&one_cpu).await.unwrap();
    assert_eq!(freed.start, EstimatedStart::Now, "{freed:?}");
}
