//! The per-cluster poller: the core [`Tracker`] following every job the cluster's BatchJobs
//! follow (one batched status call per interval, whatever the number of jobs), adapted to
//! the operator: a wake-up for the BatchJobs whose scheduler status changed, a word to the
//! cluster's reconciler when polls begin or stop failing, and each poll's duration in the
//! metrics.
//!
//! Observations are kept by the tracker, so the reconciler reads the latest one without
//! asking the scheduler itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use batchbridge_core::{BatchBackend, Error, JobId, JobStatus, Tracker};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::crd::{BatchCluster, BatchJob};

/// Where a poller says that its polls began or stopped failing: the BatchCluster's
/// reconciler, which then probes the cluster and updates its `Reachable` condition at once
/// rather than at its next periodic probe.
#[derive(Debug, Clone)]
pub struct HealthReport {
    /// The BatchCluster whose jobs the poller follows.
    pub cluster: ObjectRef<BatchCluster>,
    /// Wakes the BatchCluster's reconciler.
    pub wake: mpsc::UnboundedSender<ObjectRef<BatchCluster>>,
}

/// Why a poll or probe failed, and when that was seen.
struct Failure {
    error: Arc<Error>,
    at: Instant,
}

impl Failure {
    fn now(error: Arc<Error>) -> Self {
        Self {
            error,
            at: Instant::now(),
        }
    }
}

/// Follows the active jobs of one cluster. Dropping it stops the polling.
pub struct Poller {
    tracker: Tracker,
    /// The BatchJob each followed job belongs to, for the wake-ups.
    jobs: Arc<Mutex<HashMap<JobId, ObjectRef<BatchJob>>>>,
    /// The last poll's or probe's failure; `None` once one succeeds.
    failure: Arc<Mutex<Option<Failure>>>,
    /// Turns the tracker's changes into wake-ups.
    waker: JoinHandle<()>,
}

impl Poller {
    /// Starts polling `backend` every `interval` (and following its pushed job events if
    /// `events` and it has any), sending the BatchJobs whose status changed to `wake` (and
    /// every followed one when polls begin or stop failing), a word to `health` whenever
    /// polls begin or stop failing, and each poll's duration to `duration`.
    pub fn start(
        backend: Arc<dyn BatchBackend>,
        interval: Duration,
        events: bool,
        wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
        health: Option<HealthReport>,
        duration: Histogram,
    ) -> batchbridge_core::Result<Self> {
        let failure = Arc::new(Mutex::new(None));
        let recorded = Arc::clone(&failure);
        let last_poll_failed = AtomicBool::new(false);
        let jobs: Arc<Mutex<HashMap<JobId, ObjectRef<BatchJob>>>> = Arc::default();
        let affected = Arc::clone(&jobs);
        let wake_all = wake.clone();
        let tracker = Tracker::builder(backend, interval)
            .events(events)
            .on_poll(move |poll| {
                duration.observe(poll.duration.as_secs_f64());
                *lock(&recorded) = poll.failure.cloned().map(Failure::now);
                let failed = poll.failure.is_some();
                if last_poll_failed.swap(failed, Ordering::Relaxed) != failed {
                    if let Some(health) = &health {
                        // The receiver is gone only when the operator shuts down.
                        let _ = health.wake.send(health.cluster.clone());
                    }
                    // Every followed job's ClusterReady follows the cluster's reachability.
                    for job in lock(&affected).values() {
                        let _ = wake_all.send(job.clone());
                    }
                }
            })
            .build()?;
        let mut changes = tracker.changes();
        let followed = Arc::clone(&jobs);
        let waker = tokio::spawn(async move {
            while let Some((id, _)) = changes.recv().await {
                // A job forgotten since the poll stays forgotten.
                let job = lock(&followed).get(&id).cloned();
                if let Some(job) = job {
                    // The receiver is gone only when the operator shuts down.
                    let _ = wake.send(job);
                }
            }
        });
        Ok(Self {
            tracker,
            jobs,
            failure,
            waker,
        })
    }

    /// Follows job `id` for the BatchJob `job`; a job followed for the first time is
    /// polled at once.
    pub fn follow(&self, id: JobId, job: ObjectRef<BatchJob>) {
        lock(&self.jobs).insert(id.clone(), job);
        self.tracker.follow(id);
    }

    /// Stops following job `id` and forgets what was seen of it.
    pub fn forget(&self, id: &JobId) {
        self.tracker.forget(id);
        lock(&self.jobs).remove(id);
    }

    /// The latest status the scheduler reported for job `id`.
    pub fn observation(&self, id: &JobId) -> Option<JobStatus> {
        self.tracker.status(id)
    }

    /// The jobs followed, each with its BatchJob: what a connection built anew takes over.
    pub fn followed_jobs(&self) -> Vec<(JobId, ObjectRef<BatchJob>)> {
        lock(&self.jobs)
            .iter()
            .map(|(id, job)| (id.clone(), job.clone()))
            .collect()
    }

    /// How many jobs are followed.
    pub fn followed(&self) -> usize {
        self.tracker.followed()
    }

    /// Why the last poll or probe of the cluster failed, unless one succeeded since.
    pub fn failure(&self) -> Option<Arc<Error>> {
        lock(&self.failure).as_ref().map(|f| Arc::clone(&f.error))
    }

    /// Why the last poll or probe failed, if it did no longer than `age` ago.
    pub fn failure_within(&self, age: Duration) -> Option<Arc<Error>> {
        lock(&self.failure)
            .as_ref()
            .filter(|f| f.at.elapsed() <= age)
            .map(|f| Arc::clone(&f.error))
    }

    /// Records what a probe outside the poller found.
    pub fn record(&self, outcome: std::result::Result<(), Error>) {
        *lock(&self.failure) = outcome.err().map(|err| Failure::now(Arc::new(err)));
    }

    /// How many status calls the poller has made.
    pub fn polls(&self) -> u64 {
        self.tracker.polls()
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.waker.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The values stay consistent under a panic (plain replacements), so a poisoned lock is
    // still usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use batchbridge_core::backend::MockBatchBackend;
    use batchbridge_core::{ErrorKind, JobState};

    use super::*;

    fn job(name: &str) -> ObjectRef<BatchJob> {
        ObjectRef::new(name).within("research")
    }

    /// One status call per poll for all followed jobs; only changes wake their job; a
    /// failed call marks the cluster unhealthy and wakes every followed job once.
    #[tokio::test(start_paused = true)]
    async fn one_call_per_interval_and_wake_only_on_change() {
        let mut backend = MockBatchBackend::new();
        backend.expect_name().return_const("mock".to_owned());
        backend.expect_events().returning(|| None);
        // Poll 1: both queued; poll 2: job 1 runs; poll 3: the cluster is unreachable.
        let mut polls = 0;
        backend.expect_status().returning(move |ids| {
            polls += 1;
            let state_of = |id: &JobId| match (polls, id.as_str()) {
                (3, _) => None,
                (2.., "1") => Some(JobState::Running),
                _ => Some(JobState::Queued),
            };
            ids.iter()
                .map(|id| match state_of(id) {
                    Some(state) => Ok((id.clone(), JobStatus::new(state, "X"))),
                    None => Err(Error::new(ErrorKind::Unreachable, "connection refused")),
                })
                .collect()
        });
        let (wake, mut woken) = mpsc::unbounded_channel();
        let duration = Histogram::new([1.0]);
        let poller = Poller::start(
            Arc::new(backend),
            Duration::from_secs(10),
            true,
            wake,
            None,
            duration.clone(),
        )
        .unwrap();
        poller.follow(JobId::from("1"), job("a"));
        poller.follow(JobId::from("2"), job("b"));
        let mut first = vec![woken.recv().await, woken.recv().await];
        first.sort_by_key(|j| j.as_ref().map(|j| j.name.clone()));
        assert_eq!(
            first,
            [Some(job("a")), Some(job("b"))],
            "both seen for the first time"
        );
        assert_eq!(poller.polls(), 1, "two jobs, one call");

        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            woken.recv().await,
            Some(job("a")),
            "only the job that changed"
        );
        assert!(woken.try_recv().is_err());
        assert_eq!(
            poller.observation(&JobId::from("1")).map(|s| s.state),
            Some(JobState::Running)
        );

        while poller.polls() < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(matches!(poller.failure(), Some(err) if err.kind() == ErrorKind::Unreachable));
        assert!(poller.failure_within(Duration::from_secs(2)).is_some());
        let mut told = vec![woken.try_recv().ok(), woken.try_recv().ok()];
        told.sort_by_key(|j| j.as_ref().map(|j| j.name.clone()));
        assert_eq!(
            told,
            [Some(job("a")), Some(job("b"))],
            "the first failed poll wakes every followed job once, for its ClusterReady"
        );
        assert!(woken.try_recv().is_err());
        assert_eq!(poller.polls(), 3);
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("poll_duration", "", duration);
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("poll_duration_count 3"),
            "every poll is timed, failed ones too: {text}"
        );

        poller.forget(&JobId::from("1"));
        poller.forget(&JobId::from("2"));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(poller.polls(), 3, "nothing followed, nothing asked");
        assert!(poller.failure().is_some(), "no poll since told otherwise");
        assert!(
            poller.failure_within(Duration::from_secs(2)).is_none(),
            "a failure 30 s old does not stand for a probe"
        );
        assert_eq!(poller.observation(&JobId::from("1")), None);
    }

    /// The cluster's reconciler hears when polls begin to fail and when they stop failing,
    /// once each, not at every poll, and so do the jobs it follows; a probe recorded in between
    /// changes nothing of that.
    #[tokio::test(start_paused = true)]
    async fn polls_beginning_or_ending_to_fail_wake_the_cluster() {
        let mut backend = MockBatchBackend::new();
        backend.expect_name().return_const("mock".to_owned());
        backend.expect_events().returning(|| None);
        // Polls 1 and 2 answer, 3 to 5 fail, 6 and 7 answer.
        let mut calls = 0;
        backend.expect_status().returning(move |ids| {
            calls += 1;
            if (3..=5).contains(&calls) {
                return Err(Error::new(ErrorKind::Unreachable, "connection refused"));
            }
            Ok(ids
                .iter()
                .map(|id| (id.clone(), JobStatus::new(JobState::Running, "native")))
                .collect())
        });
        let (wake, mut woken) = mpsc::unbounded_channel();
        let (probe, mut probed) = mpsc::unbounded_channel();
        let cluster = ObjectRef::<BatchCluster>::new("hpc").within("research");
        let health = HealthReport {
            cluster: cluster.clone(),
            wake: probe,
        };
        let poller = Poller::start(
            Arc::new(backend),
            Duration::from_secs(10),
            true,
            wake,
            Some(health),
            Histogram::new([1.0]),
        )
        .unwrap();
        poller.follow(JobId::from("1"), job("a"));
        let (mut heard, mut jobs_woken) = (Vec::new(), Vec::new());
        for poll in 1..=7 {
            while poller.polls() < poll {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if poll == 4 {
                // A successful probe clears the failure the jobs see, not the poller's own.
                poller.record(Ok(()));
            }
            while let Ok(woken) = probed.try_recv() {
                assert_eq!(woken, cluster);
                heard.push(poll);
            }
            while let Ok(reference) = woken.try_recv() {
                assert_eq!(reference, job("a"));
                jobs_woken.push(poll);
            }
        }
        assert_eq!(
            heard,
            [3, 6],
            "told at the first failed and the first good poll"
        );
        assert_eq!(
            jobs_woken,
            [1, 3, 6],
            "its job: first seen, then when polls begin and stop failing"
        );
        assert!(poller.failure().is_none());
    }
}
