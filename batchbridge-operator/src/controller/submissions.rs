//! Submits run beside the BatchJob reconciles, not inside them.
//!
//! A submit is a command on the login node and waits for a free slot on its cluster's
//! connection; while a burst of new BatchJobs is being submitted, thousands can be waiting.
//! Were they reconciles, they would hold every reconcile worker, and a job the poller saw
//! finish would wait behind all of them for its status. So a reconcile that decides to
//! submit hands the submit over here and returns; the job's further reconciles stand aside
//! while its submit runs, and the submit wakes the job when it is over.

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

/// The submits in progress, one at most per BatchJob, keyed by the job's UID.
#[derive(Debug)]
pub struct Submissions {
    running: Arc<Mutex<HashMap<String, AbortHandle>>>,
    wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
    metrics: Arc<Metrics>,
}

impl Submissions {
    /// No submit in progress; jobs are woken through `wake` when theirs is over.
    pub fn new(wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>, metrics: Arc<Metrics>) -> Self {
        Self {
            running: Arc::default(),
            wake,
            metrics,
        }
    }

    /// Whether `job` has a submit in progress.
    pub fn is_running(&self, job: &BatchJob) -> bool {
        self.lock().contains_key(&job.uid().unwrap_or_default())
    }

    /// Runs `submit` for `job` as a task of its own. `submit` answers how long to wait
    /// before the job is looked at again, when it should be (a failed submit). Once it is
    /// over, and after that wait, the job is woken, so that a change made meanwhile (a new
    /// spec, a deletion) is acted on.
    pub fn start(
        &self,
        job: &BatchJob,
        submit: impl Future<Output = Option<Duration>> + Send + 'static,
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
                let retry_after = submit.await;
                {
                    let mut tasks = running.lock().unwrap_or_else(PoisonError::into_inner);
                    tasks.remove(&uid);
                    metrics.set_submits_in_progress(tasks.len());
                }
                if let Some(wait) = retry_after {
                    tokio::time::sleep(wait).await;
                }
                // A closed channel means the controllers have stopped: nobody to wake.
                let _ = wake.send(reference);
            }
        });
        tasks.insert(uid, task.abort_handle());
        self.metrics.set_submits_in_progress(tasks.len());
    }

    /// Stops every submit in progress, as when the operator stops leading. A submit cut
    /// short is safe: the next leader submits the same key, and the backend answers with
    /// the job it may already have.
    pub fn abort_all(&self) {
        let mut tasks = self.lock();
        for (_, task) in tasks.drain() {
            task.abort();
        }
        self.metrics.set_submits_in_progress(0);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AbortHandle>> {
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
    async fn a_job_is_running_until_its_submit_ends_then_woken() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        let submissions = Submissions::new(wake, Arc::clone(&metrics));
        let (finish, finished) = oneshot::channel::<()>();
        let a = job("a");
        submissions.start(&a, async move {
            let _ = finished.await;
            None
        });
        assert!(submissions.is_running(&a));
        assert!(!submissions.is_running(&job("b")));
        assert!(
            metrics
                .encode()
                .contains("batchbridge_submits_in_progress 1")
        );
        finish.send(()).expect("the submit waits");
        let reference = woken.recv().await.expect("the job is woken");
        assert_eq!(reference, ObjectRef::from(&a));
        assert!(!submissions.is_running(&a));
        assert!(
            metrics
                .encode()
                .contains("batchbridge_submits_in_progress 0")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_submit_wakes_its_job_only_after_the_wait() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let submissions = Submissions::new(wake, Arc::new(Metrics::new()));
        let a = job("a");
        let started = tokio::time::Instant::now();
        submissions.start(&a, async { Some(Duration::from_secs(5)) });
        woken.recv().await.expect("the job is woken");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        // The job may be submitted again during the wait.
        assert!(!submissions.is_running(&a));
    }

    #[tokio::test(start_paused = true)]
    async fn aborted_submits_end_without_waking() {
        let (wake, mut woken) = mpsc::unbounded_channel();
        let submissions = Submissions::new(wake, Arc::new(Metrics::new()));
        let a = job("a");
        submissions.start(&a, std::future::pending());
        submissions.abort_all();
        assert!(!submissions.is_running(&a));
        drop(submissions);
        assert!(woken.recv().await.is_none(), "nothing woke the job");
    }
}
