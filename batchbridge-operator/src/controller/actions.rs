//! A BatchJob's actions on its cluster (a submit, an output collection) run beside the
//! reconciles, not inside them.
//!
//! An action is a command on the login node and waits for a free slot on its cluster's
//! connection; in a burst of new BatchJobs, thousands can be waiting. Were they
//! reconciles, they would hold every reconcile worker, and a job the poller saw finish
//! would wait behind all of them for its status. So a reconcile that decides on an action
//! hands it over here and returns; the job's further reconciles stand aside while its
//! action runs, and the action wakes the job when it is over.
//!
//! The wake-up can come before the watch brings the action's own status write, so the
//! version written is kept until the job's cache has it, and a reconcile before that reads
//! the job afresh ([`Actions::cache_lags`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::crd::BatchJob;
use crate::metrics::Metrics;

/// The actions in progress, one at most per BatchJob, keyed by the job's UID.
#[derive(Debug)]
pub struct Actions {
    running: Arc<Mutex<HashMap<String, (ActionKind, AbortHandle)>>>,
    /// The resourceVersion each job's last action wrote, until its next reconcile.
    written: Mutex<HashMap<String, String>>,
    wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
    metrics: Arc<Metrics>,
}

/// What an action does, as the `action` label of `batchbridge_actions_in_progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// Submits an attempt.
    Submit,
    /// Fetches a finished job's output and keeps it.
    CollectOutput,
}

impl ActionKind {
    /// The label value: `submit` or `collect_output`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::CollectOutput => "collect_output",
        }
    }
}

impl Actions {
    /// No action in progress; jobs are woken through `wake` when theirs is over.
    pub fn new(wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>, metrics: Arc<Metrics>) -> Self {
        Self {
            running: Arc::default(),
            written: Mutex::default(),
            wake,
            metrics,
        }
    }

    /// Whether `job` has an action in progress.
    pub fn is_running(&self, job: &BatchJob) -> bool {
        self.lock().contains_key(&job.uid().unwrap_or_default())
    }

    /// Records that an action of `job` wrote its status, giving it `version`; `None`
    /// forgets what the last one wrote.
    pub fn wrote(&self, job: &BatchJob, version: Option<String>) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let uid = job.uid().unwrap_or_default();
        match version {
            Some(version) => written.insert(uid, version),
            None => written.remove(&uid),
        };
    }

    /// Whether `job`, as the cache has it, may be older than its last action's status
    /// write (the caller reads the job afresh). The write is forgotten once the cache has
    /// it; every reconcile before that is told, since any of them could act again on the
    /// older status (submit the same key a second time).
    pub fn cache_lags(&self, job: &BatchJob) -> bool {
        let uid = job.uid().unwrap_or_default();
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(version) = written.get(&uid) else {
            return false;
        };
        let cached = job.resource_version().unwrap_or_default();
        let (lags, forget) = match (cached.parse::<u64>(), version.parse::<u64>()) {
            // The API server's versions are etcd revisions, which only grow.
            (Ok(cached), Ok(version)) => (cached < version, cached >= version),
            // Versions that are not numbers are opaque: only equality says the cache has
            // the write, and a cache that skipped it would never show it. Tell once.
            _ => (cached != *version, true),
        };
        if forget {
            written.remove(&uid);
        }
        lags
    }

    /// Runs `action` for `job` as a task of its own. `action` answers how long to wait
    /// before the job is looked at again, when it should be (it failed). Once it is over,
    /// and after that wait, the job is woken, so that a change made meanwhile (a new spec,
    /// a deletion) is acted on.
    pub fn start(
        &self,
        job: &BatchJob,
        kind: ActionKind,
        action: impl Future<Output = Option<Duration>> + Send + 'static,
    ) {
        let uid = job.uid().unwrap_or_default();
        let reference = ObjectRef::from(job);
        let running = Arc::clone(&self.running);
        let wake = self.wake.clone();
        let metrics = Arc::clone(&self.metrics);
        // The lock is held until the task is registered, so that the task's own removal
        // cannot come first.
        let mut tasks = self.lock();
        let task = tokio::spawn({
            let uid = uid.clone();
            async move {
                let retry_after = action.await;
                let removed = running
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&uid);
                if removed.is_some() {
                    metrics.action_ended(kind.label());
                }
                if let Some(wait) = retry_after {
                    tokio::time::sleep(wait).await;
                }
                // A closed channel means the controllers have stopped: nobody to wake.
                let _ = wake.send(reference);
            }
        });
        tasks.insert(uid, (kind, task.abort_handle()));
        self.metrics.action_started(kind.label());
    }

    /// Stops every action in progress, as when the operator stops leading. An action cut
    /// short is safe: the next leader submits the same key, and the backend answers with
    /// the job it may already have; an output is fetched again.
    pub fn abort_all(&self) {
        for (_, (kind, task)) in self.lock().drain() {
            task.abort();
            self.metrics.action_ended(kind.label());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (ActionKind, AbortHandle)>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::BatchJobSpec;
    use tokio::sync::oneshot;

    fn job(uid: &str) -> BatchJob {
        let spec: BatchJobSpec = serde_json::from_value(
            serde_json::json!({"clusterRef": {"name": "hpc"}, "script": "true"}),
        )
        .expect("a valid spec");
        let mut job = BatchJob::new(&format!("job-{uid}"), spec);
        job.metadata.namespace = Some("research".into());
        job.metadata.uid = Some(uid.into());
        job
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_is_busy_until_its_action_ends_then_woken() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        let actions = Actions::new(wake, Arc::clone(&metrics));
        let (finish, finished) = oneshot::channel::<()>();
        let a = job("a");
        actions.start(&a, ActionKind::Submit, async move {
            let _ = finished.await;
            None
        });
        assert!(actions.is_running(&a));
        assert!(!actions.is_running(&job("b")));
        let in_progress = |metrics: &Metrics| {
            metrics
                .encode()
                .lines()
                .find(|line| {
                    line.starts_with(r#"batchbridge_actions_in_progress{action="submit"}"#)
                })
                .map(str::to_owned)
        };
        assert_eq!(
            in_progress(&metrics).as_deref(),
            Some(r#"batchbridge_actions_in_progress{action="submit"} 1"#)
        );
        finish.send(()).expect("the action waits");
        let reference = woken.recv().await.expect("the job is woken");
        assert_eq!(reference, ObjectRef::from(&a));
        assert!(!actions.is_running(&a));
        assert_eq!(
            in_progress(&metrics).as_deref(),
            Some(r#"batchbridge_actions_in_progress{action="submit"} 0"#)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_action_wakes_its_job_only_after_the_wait() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let actions = Actions::new(wake, Arc::new(Metrics::new()));
        let a = job("a");
        let started = tokio::time::Instant::now();
        actions.start(&a, ActionKind::CollectOutput, async {
            Some(Duration::from_secs(5))
        });
        woken.recv().await.expect("the job is woken");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        // The job may be reconciled (and act) again during the wait.
        assert!(!actions.is_running(&a));
    }

    #[test]
    fn a_cache_older_than_an_actions_write_lags_until_it_has_it() {
        let (wake, _woken) = mpsc::unbounded_channel();
        let actions = Actions::new(wake, Arc::new(Metrics::new()));
        let at = |version: &str| {
            let mut job = job("a");
            job.metadata.resource_version = Some(version.into());
            job
        };
        assert!(!actions.cache_lags(&at("7")), "no action wrote");
        actions.wrote(&at("7"), Some("9".into()));
        assert!(
            actions.cache_lags(&at("7")),
            "the cache has 7, the action wrote 9"
        );
        assert!(actions.cache_lags(&at("8")), "lags until the cache has 9");
        assert!(!actions.cache_lags(&job("b")), "another job");
        assert!(
            !actions.cache_lags(&at("10")),
            "the cache is past the write"
        );
        assert!(!actions.cache_lags(&at("7")), "the write is forgotten");
        actions.wrote(&at("7"), Some("9".into()));
        assert!(!actions.cache_lags(&at("9")), "the cache has the write");
        assert!(!actions.cache_lags(&at("7")), "the write is forgotten");
        actions.wrote(&at("7"), Some("v9".into()));
        assert!(actions.cache_lags(&at("v7")), "opaque and different");
        assert!(!actions.cache_lags(&at("v7")), "opaque: told once");
    }

    #[tokio::test(start_paused = true)]
    async fn aborted_actions_end_without_waking() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        let actions = Actions::new(wake, Arc::clone(&metrics));
        let a = job("a");
        actions.start(&a, ActionKind::Submit, std::future::pending());
        actions.abort_all();
        assert!(!actions.is_running(&a));
        assert!(
            metrics
                .encode()
                .contains(r#"batchbridge_actions_in_progress{action="submit"} 0"#)
        );
        drop(actions);
        assert!(woken.recv().await.is_none(), "nothing woke the job");
    }
}
