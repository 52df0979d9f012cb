//! Job events of the local backend, and the follower every wrapper-event backend runs, on
//! this machine: what the follower passes on, what it skips, what it replays, what it
//! removes, and that it asks no scheduler anything.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::events::{EventKind, EventSource, JobEvent};
use batchbridge_core::remote::WrapperEvents;
use batchbridge_core::shell::{LineStream, LocalShell, Shell};
use batchbridge_core::{BatchBackend, JobKey, JobSpec, LocalBackend};
use batchbridge_testbed::events::{self, of_job, read_until};

/// A spec with a key unique in its test's own state directory.
fn spec(name: &str, script: &str) -> JobSpec {
    JobSpec::new(JobKey::new(name).unwrap(), name, script)
}

fn backend(dir: &Path) -> LocalBackend {
    LocalBackend::with_capacity(dir, 4).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pushes_its_start_and_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    events::start_and_end(&backend(dir.path()), spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_pushes_its_signal() {
    let dir = tempfile::tempdir().unwrap();
    events::cancel_running(&backend(dir.path()), spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_pushes_each_tasks_start_and_end() {
    let dir = tempfile::tempdir().unwrap();
    events::array_tasks(&backend(dir.path()), spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_follower_ends_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let events_dir = dir.path().join("events");
    std::fs::create_dir(&events_dir).unwrap();
    let events_dir = events_dir.to_str().unwrap();
    let source = WrapperEvents::in_dir(Arc::new(LocalShell), events_dir);
    events::killed_follower_ends_the_stream(&LocalShell, &source, events_dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_runs_no_scheduler_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("events")).unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    events::follower_runs_no_scheduler_command(
        &LocalShell,
        &path("events"),
        &path("scratch"),
        &["squeue", "sacct", "scontrol", "qstat", "condor_q", "atq"],
    )
    .await;
}

/// A follower of a directory that is not there ends at once instead of listing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_of_a_missing_directory_ends_its_stream() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gone");
    let source = WrapperEvents::in_dir(Arc::new(LocalShell), missing.to_str().unwrap());
    let mut stream = source.open().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(60), stream.recv()).await;
    assert_eq!(end.unwrap(), None);
}

/// Cleanup removes the job's event files and no other job's, even one whose id starts
/// with the same digits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_removes_the_jobs_event_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let backend = backend(dir.path());
    let mut stream = events::open(&backend).await;
    let job = spec("cleaned", "true\n");
    let id = backend.submit(&job).await.unwrap();
    read_until(&mut stream, "the job's end", |events| {
        of_job(events, &id).len() == 2
    })
    .await;
    let events_dir = dir.path().join("events");
    let other = format!("{id}1.0.started");
    std::fs::write(events_dir.join(&other), "").unwrap();
    backend.cleanup(&job.key).await.unwrap();
    assert_eq!(names(&events_dir), [other]);
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Reads events from a follower of `dir` until it has seen `count`.
async fn follow(dir: &Path, count: usize) -> Vec<JobEvent> {
    let source = WrapperEvents::in_dir(Arc::new(LocalShell), dir.to_str().unwrap());
    let mut stream = source.open().await.unwrap();
    read_until(&mut stream, "the follower's events", |events| {
        events.len() >= count
    })
    .await
}

/// The lines the follower prints up to and with its next heartbeat: one whole listing.
async fn next_listing(lines: &mut LineStream) -> Vec<String> {
    let mut listing = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if line == "." {
            return listing;
        }
        listing.push(line);
    }
}

/// Names a job can create in the events directory (it runs as the same user) that are no
/// events, or that try to pass for one across a line break: none comes out, each real
/// event comes out once, starts before ends, and a new follower replays them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_passes_on_events_only_and_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let events_dir = dir.path();
    let hostile = [
        "garbage",
        "7.0.started\n",
        "x\n8.0.exit.0",
        "\n9.0.exit.0",
        "9.0.exit.0\n",
        "010.0.started",
        "10.0.exit.-1",
        "10.0.exit.1.2",
        "10.0.signal",
        "10.0.exit.",
        ".10.0.started",
        "10..started",
    ];
    for name in hostile {
        std::fs::write(events_dir.join(name), "").unwrap();
    }
    std::fs::write(events_dir.join(format!("{}.0.started", "1".repeat(70))), "").unwrap();
    std::fs::create_dir(events_dir.join("sub")).unwrap();
    // Ten thousand names that are no events cost the follower one listing a tick.
    for n in 0..10_000 {
        std::fs::write(events_dir.join(format!("junk-{n}")), "").unwrap();
    }
    for name in ["5.1.exit.0", "5.1.started", "6.0.signal.15"] {
        std::fs::write(events_dir.join(name), "").unwrap();
    }
    let follower = WrapperEvents::follower(events_dir.to_str().unwrap());
    for run in ["first", "restarted"] {
        let mut lines = LocalShell.stream(&follower).await.unwrap();
        let mut first = next_listing(&mut lines).await;
        assert_eq!(first[0], "5.1.started", "{run}: starts before ends");
        first.sort();
        assert_eq!(
            first,
            ["5.1.exit.0", "5.1.started", "6.0.signal.15"],
            "{run}"
        );
        std::fs::write(events_dir.join(format!("11.2.exit.{}", run.len())), "").unwrap();
        let mut later = Vec::new();
        while later.is_empty() {
            later = next_listing(&mut lines).await;
        }
        assert_eq!(
            later,
            [format!("11.2.exit.{}", run.len())],
            "{run}: only the new one"
        );
        std::fs::remove_file(events_dir.join(format!("11.2.exit.{}", run.len()))).unwrap();
    }
}

/// On start (and every hour) the follower removes files older than a week: events of jobs
/// nobody cleaned up, and junk; newer ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_removes_event_files_older_than_a_week() {
    let dir = tempfile::tempdir().unwrap();
    let events_dir = dir.path();
    for name in ["1.0.started", "1.0.exit.0", "junk", "2.0.started"] {
        std::fs::write(events_dir.join(name), "").unwrap();
    }
    let aged = Command::new("touch")
        .args(["-d", "8 days ago"])
        .args(["1.0.started", "1.0.exit.0", "junk"].map(|n| events_dir.join(n)))
        .status()
        .unwrap();
    assert!(aged.success());
    let events = follow(events_dir, 1).await;
    assert_eq!(events, [JobEvent::new("2".into(), 0, EventKind::Started)]);
    assert_eq!(names(events_dir), ["2.0.started"]);
}
