//! The tracker following real jobs of the local backend: many waits on one batched poll,
//! the change stream, a wait that times out while its job goes on.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::tracker::Submitted;
use batchbridge_core::{
    BatchBackend, ErrorKind, JobId, JobKey, JobSpec, JobState, LocalBackend, Tracker,
};

const INTERVAL: Duration = Duration::from_millis(200);

fn spec(key: &str, script: &str) -> JobSpec {
    JobSpec::new(JobKey::new(key).unwrap(), key, script)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_waits_share_one_status_call_per_interval() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::new(dir.path()).unwrap());
    let tracker = Arc::new(Tracker::new(backend.clone(), INTERVAL).unwrap());
    let mut changes = tracker.changes();
    let started = tokio::time::Instant::now();

    let mut expected = HashMap::new();
    for n in 0..12 {
        let (script, state) = match n {
            0 => ("sleep 1; exit 3", JobState::Failed),
            _ => ("sleep 1; echo done", JobState::Succeeded),
        };
        let id = backend
            .submit(&spec(&format!("tracked-{n}"), script))
            .await
            .unwrap();
        expected.insert(id, state);
    }
    let mut waits = tokio::task::JoinSet::new();
    for id in expected.keys().cloned() {
        let tracker = Arc::clone(&tracker);
        waits.spawn(async move {
            let status = tracker.wait(&id, Duration::from_secs(60)).await;
            (id, status)
        });
    }
    let ended: HashMap<JobId, JobState> = waits
        .join_all()
        .await
        .into_iter()
        .map(|(id, status)| (id, status.unwrap().state))
        .collect();
    assert_eq!(ended, expected);

    // One poll at once for the new jobs, then one per interval; never one per job.
    let intervals = started.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    let polls = tracker.polls() as f64;
    assert!(
        polls <= intervals + 2.0,
        "{polls} polls in {intervals:.1} intervals for 12 jobs"
    );
    assert_eq!(tracker.followed(), 0, "the waits are over");

    // Every job's change to its terminal state reached the stream, once.
    let mut terminal = HashMap::new();
    while terminal.len() < expected.len() {
        let (id, status) = changes.recv().await.unwrap();
        if status.state.is_terminal() {
            assert_eq!(terminal.insert(id, status.state), None, "delivered twice");
        }
    }
    assert_eq!(terminal, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_times_out_leaves_the_job_running() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::new(dir.path()).unwrap());
    let tracker = Tracker::new(backend.clone(), INTERVAL).unwrap();
    let id = backend.submit(&spec("long", "sleep 600")).await.unwrap();

    let err = tracker.wait(&id, Duration::from_secs(2)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WaitTimedOut, "{err}");
    assert!(err.is_temporary());
    assert_eq!(
        err.message(),
        format!("job {id} did not end within 2s: last seen Running")
    );
    assert_eq!(
        backend.status_of(&id).await.unwrap().state,
        JobState::Running,
        "the job goes on"
    );

    backend.cancel(&id).await.unwrap();
    let ended = tracker.wait(&id, Duration::from_secs(30)).await.unwrap();
    assert_eq!(ended.state, JobState::Cancelled);
}

/// Forty jobs given to the tracker in one batch with `max_queued(8)`: 8 go to the local
/// scheduler at once, the rest are held and drained in batches as room frees, never more
/// than 8 in the scheduler; one set-wait by key yields each job once with its own end, a
/// failing one included, and leaves nothing followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_drains_through_max_queued_and_one_set_wait_sees_every_end() {
    const LIMIT: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::new(dir.path()).unwrap());
    let tracker = Tracker::builder(backend, INTERVAL)
        .max_queued(LIMIT)
        .build()
        .unwrap();
    let specs: Vec<JobSpec> = (0..40)
        .map(|n| match n {
            13 => spec(&format!("batch-{n}"), "exit 4"),
            _ => spec(&format!("batch-{n}"), "sleep 0.2"),
        })
        .collect();
    let answers = tracker.submit_many(specs.clone()).await;
    let submitted = answers
        .iter()
        .filter(|answer| matches!(answer, Ok(Submitted::Job(_))))
        .count();
    assert_eq!(submitted, LIMIT);
    assert_eq!(tracker.held().len(), 40 - LIMIT);

    let mut most = 0;
    let mut ends = tracker.wait_each_submitted(
        specs.iter().map(|spec| spec.key.clone()),
        Duration::from_secs(120),
    );
    let mut ended = HashMap::new();
    while let Some(end) = ends.next().await {
        most = most.max(tracker.in_scheduler());
        let end = end.unwrap();
        assert_eq!(ended.insert(end.key.unwrap(), end.status.state), None);
    }
    assert!(most <= LIMIT, "{most} in the scheduler at once");
    assert_eq!(ended.len(), 40);
    let failed: Vec<&JobKey> = ended
        .iter()
        .filter(|(_, state)| **state != JobState::Succeeded)
        .map(|(key, _)| key)
        .collect();
    assert_eq!(failed, [&specs[13].key]);
    assert_eq!(ended[&specs[13].key], JobState::Failed);
    assert!(tracker.held().is_empty());
}
