//! The per-cluster poller: one batched status call per interval for every job the cluster's
//! BatchJobs follow, and a wake-up for the BatchJobs whose scheduler status changed.
//!
//! Observations are kept by job id, so the reconciler reads the latest one without asking
//! the scheduler itself; the scheduler is asked once per interval whatever the number of
//! jobs (the backends answer any number of ids in a constant number of commands).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use batchbridge_core::{BatchBackend, Error, JobId, JobStatus};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

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

/// Follows the active jobs of one cluster. Dropping it stops the polling.
pub struct Poller {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

struct Shared {
    backend: Arc<dyn BatchBackend>,
    interval: Duration,
    state: Mutex<State>,
    /// Polls at once, without waiting out the interval (a new job was followed).
    poll_now: Notify,
    wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
    health: Option<HealthReport>,
    duration: Histogram,
}

struct State {
    followed: HashMap<JobId, ObjectRef<BatchJob>>,
    observed: HashMap<JobId, JobStatus>,
    /// Why the last poll or probe failed; `None` once one succeeds.
    failure: Option<Arc<Error>>,
    /// Whether the poller's own last status call failed (probes do not change it).
    last_poll_failed: bool,
    polls: u64,
}

impl Poller {
    /// Starts polling `backend` every `interval`, sending the BatchJobs whose status
    /// changed to `wake`, a word to `health` whenever polls begin or stop failing, and each
    /// poll's duration to `duration`.
    pub fn start(
        backend: Arc<dyn BatchBackend>,
        interval: Duration,
        wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
        health: Option<HealthReport>,
        duration: Histogram,
    ) -> Self {
        let shared = Arc::new(Shared {
            backend,
            interval,
            state: Mutex::new(State {
                followed: HashMap::new(),
                observed: HashMap::new(),
                failure: None,
                last_poll_failed: false,
                polls: 0,
            }),
            poll_now: Notify::new(),
            wake,
            health,
            duration,
        });
        let task = tokio::spawn(poll_forever(Arc::clone(&shared)));
        Self { shared, task }
    }

    /// Follows job `id` for the BatchJob `job`; a job followed for the first time is
    /// polled at once.
    pub fn follow(&self, id: JobId, job: ObjectRef<BatchJob>) {
        let new = self.shared.lock().followed.insert(id, job).is_none();
        if new {
            self.shared.poll_now.notify_one();
        }
    }

    /// Stops following job `id` and forgets what was seen of it.
    pub fn forget(&self, id: &JobId) {
        let mut state = self.shared.lock();
        state.followed.remove(id);
        state.observed.remove(id);
    }

    /// The latest status the scheduler reported for job `id`.
    pub fn observation(&self, id: &JobId) -> Option<JobStatus> {
        self.shared.lock().observed.get(id).cloned()
    }

    /// How many jobs are followed.
    pub fn followed(&self) -> usize {
        self.shared.lock().followed.len()
    }

    /// Why the last poll or probe of the cluster failed, unless one succeeded since.
    pub fn failure(&self) -> Option<Arc<Error>> {
        self.shared.lock().failure.clone()
    }

    /// Records what a probe outside the poller found.
    pub fn record(&self, outcome: std::result::Result<(), Error>) {
        self.shared.lock().failure = outcome.err().map(Arc::new);
    }

    /// How many status calls the poller has made.
    pub fn polls(&self) -> u64 {
        self.shared.lock().polls
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent under a panic (plain map updates), so a poisoned lock
        // is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn poll(&self) {
        let ids: Vec<JobId> = self.lock().followed.keys().cloned().collect();
        if ids.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let result = self.backend.status(&ids).await;
        self.duration.observe(started.elapsed().as_secs_f64());
        let mut state = self.lock();
        state.polls += 1;
        let failed = result.is_err();
        if std::mem::replace(&mut state.last_poll_failed, failed) != failed
            && let Some(health) = &self.health
        {
            // The receiver is gone only when the operator shuts down.
            let _ = health.wake.send(health.cluster.clone());
        }
        let statuses = match result {
            Ok(statuses) => statuses,
            Err(err) => {
                tracing::warn!(backend = self.backend.name(), error = %err, "status poll failed");
                state.failure = Some(Arc::new(err));
                return;
            }
        };
        state.failure = None;
        let mut changed = Vec::new();
        for (id, status) in statuses {
            // A job forgotten while the call was in flight stays forgotten.
            let Some(job) = state.followed.get(&id).cloned() else {
                continue;
            };
            if state.observed.get(&id) != Some(&status) {
                state.observed.insert(id, status);
                changed.push(job);
            }
        }
        drop(state);
        for job in changed {
            // The receiver is gone only when the operator shuts down.
            let _ = self.wake.send(job);
        }
    }
}

/// The least time between the starts of two polls when newly followed jobs ask for one
/// early: a burst of submits costs a poll per gap, not one per job.
const EARLY_POLL_GAP: Duration = Duration::from_secs(1);

async fn poll_forever(shared: Arc<Shared>) {
    let gap = shared.interval.min(EARLY_POLL_GAP);
    let start = tokio::time::Instant::now() + shared.interval;
    let mut ticks = tokio::time::interval_at(start, shared.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shared.poll_now.notified() => {
                if let Some(last) = last {
                    tokio::time::sleep_until(last + gap).await;
                }
            }
        }
        last = Some(tokio::time::Instant::now());
        shared.poll().await;
        // A poll for a newly followed job counts as the interval's poll.
        ticks.reset();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use async_trait::async_trait;
    use batchbridge_core::{
        Capabilities, ErrorKind, JobKey, JobOutput, JobSpec, JobState, OutputRequest, Result,
    };
    use mockall::mock;

    use super::*;

    mock! {
        #[derive(Debug)]
        Backend {}
        #[async_trait]
        impl BatchBackend for Backend {
            fn name(&self) -> &str;
            fn capabilities(&self) -> Capabilities;
            async fn submit(&self, spec: &JobSpec) -> Result<JobId>;
            async fn find(&self, key: &JobKey) -> Result<Option<JobId>>;
            async fn status(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobStatus>>;
            async fn cancel(&self, id: &JobId) -> Result<()>;
            async fn fetch_output(&self, id: &JobId, request: &OutputRequest) -> Result<JobOutput>;
            async fn version(&self) -> Result<String>;
            async fn cleanup(&self, key: &JobKey) -> Result<()>;
        }
    }

    fn job(name: &str) -> ObjectRef<BatchJob> {
        ObjectRef::new(name).within("research")
    }

    /// One status call per poll for all followed jobs; only changes wake their job; a
    /// failed call marks the cluster unhealthy and wakes nobody.
    #[tokio::test(start_paused = true)]
    async fn one_call_per_interval_and_wake_only_on_change() {
        let mut backend = MockBackend::new();
        backend.expect_name().return_const("mock".to_owned());
        let mut calls = 0;
        backend.expect_status().returning(move |ids| {
            calls += 1;
            if calls == 3 {
                return Err(Error::new(ErrorKind::Unreachable, "connection refused"));
            }
            let running = calls >= 2;
            Ok(ids
                .iter()
                .map(|id| {
                    let state = if running && id.as_str() == "1" {
                        JobState::Running
                    } else {
                        JobState::Queued
                    };
                    (id.clone(), JobStatus::new(state, "X"))
                })
                .collect())
        });
        let (wake, mut woken) = mpsc::unbounded_channel();
        let duration = Histogram::new([1.0]);
        let poller = Poller::start(
            Arc::new(backend),
            Duration::from_secs(10),
            wake,
            None,
            duration.clone(),
        );
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
        assert!(woken.try_recv().is_err(), "a failed poll wakes nobody");
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
        assert_eq!(poller.observation(&JobId::from("1")), None);
    }

    /// The cluster's reconciler hears when polls begin to fail and when they stop failing,
    /// once each, not at every poll; a probe recorded in between changes nothing of that.
    #[tokio::test(start_paused = true)]
    async fn polls_beginning_or_ending_to_fail_wake_the_cluster() {
        let mut backend = MockBackend::new();
        backend.expect_name().return_const("mock".to_owned());
        // Polls 1 and 2 answer, 3 to 5 fail, 6 and 7 answer.
        let mut calls = 0;
        backend.expect_status().returning(move |ids| {
            calls += 1;
            if (3..=5).contains(&calls) {
                return Err(Error::new(ErrorKind::Unreachable, "connection refused"));
            }
            Ok(ids
                .iter()
                .map(|id| (id.clone(), JobStatus::new(JobState::Running, "RUNNING")))
                .collect())
        });
        let (wake, _woken) = mpsc::unbounded_channel();
        let (probe, mut probed) = mpsc::unbounded_channel();
        let cluster = ObjectRef::<BatchCluster>::new("hpc").within("research");
        let health = HealthReport {
            cluster: cluster.clone(),
            wake: probe,
        };
        let poller = Poller::start(
            Arc::new(backend),
            Duration::from_secs(10),
            wake,
            Some(health),
            Histogram::new([1.0]),
        );
        poller.follow(JobId::from("1"), job("a"));
        let mut heard = Vec::new();
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
        }
        assert_eq!(
            heard,
            [3, 6],
            "told at the first failed and the first good poll"
        );
        assert!(poller.failure().is_none());
    }

    /// A burst of newly followed jobs (a thousand BatchJobs created at once) costs a poll
    /// per second, not a poll per job.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_new_jobs_is_polled_once_per_gap() {
        let mut backend = MockBackend::new();
        backend.expect_name().return_const("mock".to_owned());
        backend.expect_status().returning(|ids| {
            Ok(ids
                .iter()
                .map(|id| (id.clone(), JobStatus::new(JobState::Queued, "PENDING")))
                .collect())
        });
        let (wake, _woken) = mpsc::unbounded_channel();
        let poller = Poller::start(
            Arc::new(backend),
            Duration::from_secs(10),
            wake,
            None,
            Histogram::new([1.0]),
        );
        for i in 0..100 {
            poller.follow(JobId::from(i.to_string().as_str()), job(&format!("j{i}")));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Two seconds of new jobs: the first polled at once, then one poll a second.
        assert!(
            (2..=3).contains(&poller.polls()),
            "{} polls",
            poller.polls()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(poller.polls() <= 4, "{} polls", poller.polls());
    }
}
