//! Stage-out beside the tracker: a job's outputs fetched once the tracker saw it end.

use std::time::Duration;

use super::Tracker;
use crate::backend::JobId;
use crate::error::Result;
use crate::spec::JobSpec;
use crate::staging::{EndedAndStaged, Transfer};
use crate::state::JobStatus;

impl Tracker {
    /// Waits (at most `timeout`) for job `id` to end, then runs the backend's
    /// [`stage_out`](crate::BatchBackend::stage_out) of `spec`'s stage-out list. The status
    /// is reported through `on_end` as soon as it is known, before the files move, so a
    /// caller can show the job's end and then its outputs' arrival.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, Tracker};
    /// use batchbridge_core::staging::{StageOut, Transfer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path().join("state"))?);
    /// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
    /// let out = StageOut::new("result.txt", dir.path().join("out"));
    /// let spec = JobSpec::new(JobKey::new("greet")?, "greet", "echo hi > result.txt")
    ///     .with_stage_out(out.clone());
    /// let id = backend.submit(&spec).await?;
    /// let ended = tracker.stage_out_when_ended(&id, &spec, &Transfer::default(), Duration::from_secs(60), |_| {}).await?;
    /// assert_eq!(ended.status.state, JobState::Succeeded);
    /// assert_eq!(ended.outputs?.files.len(), 1);
    /// assert_eq!(std::fs::read_to_string(dir.path().join("out/result.txt"))?, "hi\n");
    /// # Ok(()) }
    /// ```
    pub async fn stage_out_when_ended(
        &self,
        id: &JobId,
        spec: &JobSpec,
        transfer: &Transfer,
        timeout: Duration,
        on_end: impl FnOnce(&JobStatus),
    ) -> Result<EndedAndStaged> {
        let status = self.wait(id, timeout).await?;
        on_end(&status);
        let outputs = self
            .backend()
            .stage_out(id, &spec.stage_out, &spec.stage_limits, transfer)
            .await;
        Ok(EndedAndStaged { status, outputs })
    }
}
