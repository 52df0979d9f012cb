//! The conformance suite against `LocalBackend`, with a capacity of 2 CPUs.

use batchbridge_core::LocalBackend;

batchbridge_core::conformance_tests!(async {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    LocalBackend::with_capacity(dir, 2).expect("local backend")
});

mod leftover {
    //! `cancel_queued_job` catches a backend whose own files say Cancelled while its
    //! scheduler keeps the job queued (task-spooler's `tsp -r` refuses the first queued
    //! job): here the local backend's job, cancelled on paper only. The same backend
    //! declares the local backend's capabilities without passing withdraw on, which the
    //! withdraw check catches.

    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;
    use std::time::Duration;

    use batchbridge_core::conformance::{
        Config, cancel_queued_job, withdraw_takes_only_a_job_that_has_not_started,
    };
    use batchbridge_core::{
        BatchBackend, CancelledBy, Capabilities, FailureCause, JobId, JobKey, JobOutput, JobSpec,
        JobState, JobStatus, LocalBackend, OutputRequest, Result, async_trait,
    };

    /// Cancels by a mark of its own that its status reads, until cleanup removes the mark.
    struct CancelledOnPaper {
        local: LocalBackend,
        marked: Mutex<HashSet<JobId>>,
    }

    #[async_trait]
    impl BatchBackend for CancelledOnPaper {
        fn name(&self) -> &str {
            "cancelled-on-paper"
        }
        fn capabilities(&self) -> Capabilities {
            self.local.capabilities()
        }
        async fn submit(&self, spec: &JobSpec) -> Result<JobId> {
            self.local.submit(spec).await
        }
        async fn find(&self, key: &JobKey) -> Result<Option<JobId>> {
            self.local.find(key).await
        }
        async fn status(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobStatus>> {
            let mut statuses = self.local.status(ids).await?;
            for id in self.marked.lock().expect("marks").iter() {
                let cancelled = JobStatus::new(JobState::Cancelled, "marked")
                    .with_cause(FailureCause::Cancelled(CancelledBy::Request));
                statuses.entry(id.clone()).and_modify(|s| *s = cancelled);
            }
            Ok(statuses)
        }
        async fn cancel(&self, id: &JobId) -> Result<()> {
            self.marked.lock().expect("marks").insert(id.clone());
            Ok(())
        }
        async fn fetch_output(&self, id: &JobId, request: &OutputRequest) -> Result<JobOutput> {
            self.local.fetch_output(id, request).await
        }
        async fn cleanup(&self, _: &JobKey) -> Result<()> {
            self.marked.lock().expect("marks").clear();
            Ok(())
        }
    }

    fn backend(dir: &tempfile::TempDir) -> CancelledOnPaper {
        CancelledOnPaper {
            local: LocalBackend::with_capacity(dir.path(), 2).expect("local backend"),
            marked: Mutex::default(),
        }
    }

    fn config() -> Config {
        let mut config = Config::default();
        config.timeout = Duration::from_secs(3);
        config
    }

    #[tokio::test]
    #[should_panic(expected = "gone from the scheduler after its cancel")]
    async fn a_queued_job_only_marked_cancelled_is_a_leftover() {
        let dir = tempfile::tempdir().unwrap();
        cancel_queued_job(&backend(&dir), &config()).await.unwrap();
    }

    #[tokio::test]
    #[should_panic(expected = "declares withdraw in its capabilities, yet answered")]
    async fn a_declared_withdraw_that_says_unsupported_fails() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config();
        // The check fails before it cancels its running job: let that job end by itself.
        config.customize = |spec| spec.script = spec.script.replace("sleep 600", "sleep 3");
        withdraw_takes_only_a_job_that_has_not_started(&backend(&dir), &config)
            .await
            .unwrap();
    }
}
