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
//! The wake-up can come before the watch brings the action's own status write, so the job
//! as the write left it is kept until the job's cache has it, and a reconcile before that
//! steps from the kept job ([`Actions::newer_than_cache`]) instead of reading it again.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::AbortHandle;

use crate::crd::BatchJob;
use crate::metrics::Metrics;

/// The actions in progress, one at most per BatchJob, keyed by the job's UID.
#[derive(Debug)]
pub struct Actions {
    running: Arc<Mutex<HashMap<String, (ActionKind, AbortHandle)>>>,
    /// Each job as its last action's status write left it, until the cache has that write.
    written: Mutex<HashMap<String, Arc<BatchJob>>>,
    /// Where an ended output collection wakes its job ([`Lane::Woken`](super::intake::Lane::Woken)).
    woken: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
    /// Where an ended submit or placement wakes its job ([`Lane::Acted`](super::intake::Lane::Acted)).
    acted: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
    metrics: Arc<Metrics>,
}

/// What an action does, as the `action` label of `batchbridge_actions_in_progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// Submits an attempt.
    Submit,
    /// Fetches a finished job's output and keeps it.
    CollectOutput,
    /// Asks a placed job's candidates when it would start and chooses one.
    Place,
}

impl ActionKind {
    /// The label value: `submit`, `collect_output` or `place`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::CollectOutput => "collect_output",
            Self::Place => "place",
        }
    }
}

impl Actions {
    /// No action in progress; jobs are woken through `woken` (an output collected) or
    /// `acted` (a submit or placement), when theirs is over.
    pub fn new(
        woken: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
        acted: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            running: Arc::default(),
            written: Mutex::default(),
            woken,
            acted,
            metrics,
        }
    }

    /// Whether `job` has an action in progress.
    pub fn is_running(&self, job: &BatchJob) -> bool {
        self.lock().contains_key(&job.uid().unwrap_or_default())
    }

    /// Records that an action of `job` wrote its status, leaving the job as `written` (the
    /// API server's answer to the write); `None` forgets what the last one wrote.
    pub fn wrote(&self, job: &BatchJob, written: Option<BatchJob>) {
        let mut kept = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let uid = job.uid().unwrap_or_default();
        match written {
            Some(mut written) => {
                // Kept as lean as the cache's copy (docs/PERFORMANCE.md, finding 5).
                written.make_lean();
                kept.insert(uid, Arc::new(written))
            }
            None => kept.remove(&uid),
        };
    }

    /// The job as its last action's status write left it, when `job`, as the cache has it,
    /// may be older than that write (the caller steps from the job returned). The write
    /// is forgotten once the cache has it; every reconcile before that is given it, since
    /// any of them could act again on the older status (submit the same key a second
    /// time). Nothing but the operator's own actions and reconciles writes the status, so
    /// the API server's answer to the write is what a read would return.
    pub fn newer_than_cache(&self, job: &BatchJob) -> Option<Arc<BatchJob>> {
        let uid = job.uid().unwrap_or_default();
        let mut kept = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let written = kept.get(&uid)?;
        let version = written.resource_version().unwrap_or_default();
        let cached = job.resource_version().unwrap_or_default();
        let (lags, forget) = match (cached.parse::<u64>(), version.parse::<u64>()) {
            // The API server's versions are etcd revisions, which only grow.
            (Ok(cached), Ok(version)) => (cached < version, cached >= version),
            // Versions that are not numbers are opaque: only equality says the cache has
            // the write, and a cache that skipped it would never show it. Tell once.
            _ => (cached != version, true),
        };
        let newer = lags.then(|| Arc::clone(written));
        if forget {
            kept.remove(&uid);
        }
        newer
    }

    /// Runs the action `build` makes for `job` as a task of its own, once `gate` (when
    /// there is one) has a permit for it, held until the action is over. The action
    /// answers how long to wait before the job is looked at again, when it should be (it
    /// failed). Once it is over, and after that wait, the job is woken, so that a change
    /// made meanwhile (a new spec, a deletion) is acted on.
    ///
    /// The action is built only once it may run: a task's memory is its future's, and an
    /// action's (its SSH command, its status write) is about 4 KB, while a job waiting at
    /// the gate holds only what `build` captured. In a burst of 10,000 BatchJobs nearly all
    /// wait at once, for the submit pipeline and then for an output fetch.
    pub fn start<Action>(
        &self,
        job: &BatchJob,
        kind: ActionKind,
        gate: Option<Arc<Semaphore>>,
        build: impl FnOnce() -> Action + Send + 'static,
    ) where
        Action: Future<Output = Option<Duration>> + Send + 'static,
    {
        let uid = job.uid().unwrap_or_default();
        let reference = ObjectRef::from(job);
        let running = Arc::clone(&self.running);
        // A collected output is the job's end, which a user waits for; a submit's or a
        // placement's end waits its turn.
        let wake = match kind {
            ActionKind::CollectOutput => self.woken.clone(),
            ActionKind::Submit | ActionKind::Place => self.acted.clone(),
        };
        let metrics = Arc::clone(&self.metrics);
        // The lock is held until the task is registered, so that the task's own removal
        // cannot come first.
        let mut tasks = self.lock();
        let task = tokio::spawn({
            let uid = uid.clone();
            async move {
                // The gate is never closed, so a permit always comes.
                let permit = match gate {
                    Some(gate) => gate.acquire_owned().await.ok(),
                    None => None,
                };
                // Boxed, so that its state is allocated now, not with the waiting task.
                let retry_after = Box::pin(build()).await;
                drop(permit);
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
        let (act, mut acted) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        let actions = Actions::new(wake, act, Arc::clone(&metrics));
        let (finish, finished) = oneshot::channel::<()>();
        let a = job("a");
        actions.start(&a, ActionKind::Submit, None, move || async move {
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
        let reference = acted.recv().await.expect("the job is woken");
        assert_eq!(reference, ObjectRef::from(&a));
        assert!(woken.try_recv().is_err(), "a submit's end is not a change");
        assert!(!actions.is_running(&a));
        assert_eq!(
            in_progress(&metrics).as_deref(),
            Some(r#"batchbridge_actions_in_progress{action="submit"} 0"#)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_action_wakes_its_job_only_after_the_wait() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let (act, _acted) = mpsc::unbounded_channel();
        let actions = Actions::new(wake, act, Arc::new(Metrics::new()));
        let a = job("a");
        let started = tokio::time::Instant::now();
        actions.start(&a, ActionKind::CollectOutput, None, || async {
            Some(Duration::from_secs(5))
        });
        woken.recv().await.expect("the job is woken");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        // The job may be reconciled (and act) again during the wait.
        assert!(!actions.is_running(&a));
    }

    /// Behind a gate of one, the second job's action is not even built until the first's
    /// is over, though the job counts as acting (its reconciles stand aside) meanwhile.
    #[tokio::test(start_paused = true)]
    async fn a_gated_action_is_built_only_when_the_gate_lets_it_run() {
        let (wake, _woken) = mpsc::unbounded_channel();
        let (act, mut acted) = mpsc::unbounded_channel();
        let actions = Actions::new(wake, act, Arc::new(Metrics::new()));
        let gate = Arc::new(Semaphore::new(1));
        let built = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (finish, finished) = oneshot::channel::<()>();
        let (a, b) = (job("a"), job("b"));
        for (job, finished) in [(&a, Some(finished)), (&b, None)] {
            let built = Arc::clone(&built);
            let name = job.name_any();
            actions.start(
                job,
                ActionKind::Submit,
                Some(Arc::clone(&gate)),
                move || {
                    built
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(name);
                    async move {
                        if let Some(finished) = finished {
                            let _ = finished.await;
                        }
                        None
                    }
                },
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let names = |built: &std::sync::Mutex<Vec<String>>| {
            built.lock().unwrap_or_else(PoisonError::into_inner).clone()
        };
        assert_eq!(names(&built), ["job-a"]);
        assert!(actions.is_running(&b), "b waits at the gate as an action");
        finish.send(()).expect("a's action waits");
        assert_eq!(acted.recv().await, Some(ObjectRef::from(&a)));
        assert_eq!(acted.recv().await, Some(ObjectRef::from(&b)));
        assert_eq!(names(&built), ["job-a", "job-b"]);
        assert_eq!(gate.available_permits(), 1);
    }

    #[test]
    fn a_cache_older_than_an_actions_write_gets_the_written_job_until_it_has_it() {
        let (wake, _woken) = mpsc::unbounded_channel();
        let (act, _acted) = mpsc::unbounded_channel();
        let actions = Actions::new(wake, act, Arc::new(Metrics::new()));
        let at = |version: &str| {
            let mut job = job("a");
            job.metadata.resource_version = Some(version.into());
            job
        };
        let newer = |cached: &str| {
            actions
                .newer_than_cache(&at(cached))
                .and_then(|job| job.resource_version())
        };
        assert_eq!(newer("7"), None, "no action wrote");
        actions.wrote(&at("7"), Some(at("9")));
        assert_eq!(
            newer("7").as_deref(),
            Some("9"),
            "the cache has 7, the action wrote 9"
        );
        assert_eq!(
            newer("8").as_deref(),
            Some("9"),
            "lags until the cache has 9"
        );
        assert!(actions.newer_than_cache(&job("b")).is_none(), "another job");
        assert_eq!(newer("10"), None, "the cache is past the write");
        assert_eq!(newer("7"), None, "the write is forgotten");
        actions.wrote(&at("7"), Some(at("9")));
        assert_eq!(newer("9"), None, "the cache has the write");
        assert_eq!(newer("7"), None, "the write is forgotten");
        actions.wrote(&at("7"), Some(at("v9")));
        assert_eq!(newer("v7").as_deref(), Some("v9"), "opaque and different");
        assert_eq!(newer("v7"), None, "opaque: told once");
        actions.wrote(&at("7"), Some(at("9")));
        actions.wrote(&at("7"), None);
        assert_eq!(newer("7"), None, "forgotten on request");
    }

    #[tokio::test(start_paused = true)]
    async fn aborted_actions_end_without_waking() {
        let (wake, _woken) = mpsc::unbounded_channel();
        let (act, mut acted) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        let actions = Actions::new(wake, act, Arc::clone(&metrics));
        let a = job("a");
        actions.start(&a, ActionKind::Submit, None, std::future::pending);
        actions.abort_all();
        assert!(!actions.is_running(&a));
        assert!(
            metrics
                .encode()
                .contains(r#"batchbridge_actions_in_progress{action="submit"} 0"#)
        );
        drop(actions);
        assert!(acted.recv().await.is_none(), "nothing woke the job");
    }
}
