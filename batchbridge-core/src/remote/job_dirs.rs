//! [`JobDirs`]: the half of a command-line backend that does not depend on its scheduler.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Submitted, WorkDir, WrapperEvents, cleanup, fetch_output, job_files, recorded_id, submit,
};
use crate::backend::{BatchBackend, JobOutput, OutputRequest};
use crate::error::Result;
use crate::remote::JobFiles;
use crate::shell::{Command, Output, Shell};
use crate::spec::{JobKey, JobSpec};

/// Where a command-line backend keeps its jobs: the shell that reaches the cluster, the
/// work directory there, and the time limit of every command. A backend holds one and adds
/// only its scheduler's commands; SLURM, HTCondor and the at example share it.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use batchbridge_core::remote::JobDirs;
/// use batchbridge_core::shell::{Command, LocalShell};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let tmp = tempfile::tempdir()?;
/// let work = tmp.path().join("work");
/// let dirs = JobDirs::new(Arc::new(LocalShell), work.to_str().unwrap(), Duration::from_secs(10))?;
/// assert_eq!(dirs.work().await?, work.to_str().unwrap()); // created on first use
/// assert!(dirs.run(Command::new("true")).await?.success());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct JobDirs {
    shell: Arc<dyn Shell>,
    /// Shared with the event follower, which resolves it once with the rest.
    work_dir: Arc<WorkDir>,
    timeout: Duration,
}

impl JobDirs {
    /// Jobs under `work_dir` (absolute, or relative to the login directory) on the host
    /// `shell` reaches, each command limited to `timeout`. Nothing runs until first use.
    pub fn new(shell: Arc<dyn Shell>, work_dir: &str, timeout: Duration) -> Result<Self> {
        Ok(Self {
            shell,
            work_dir: Arc::new(WorkDir::new(work_dir)?),
            timeout,
        })
    }

    /// The shell, for commands of the backend's own.
    pub fn shell(&self) -> &dyn Shell {
        self.shell.as_ref()
    }

    /// The time limit of each command.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `command` within the time limit.
    pub async fn run(&self, command: Command) -> Result<Output> {
        self.shell.run(&command.timeout(self.timeout)).await
    }

    /// The work directory's absolute path ([`WorkDir::resolve`]).
    pub async fn work(&self) -> Result<&str> {
        self.work_dir.resolve(self.shell(), self.timeout).await
    }

    /// Submits `spec` in one remote command, idempotent on its key: claims
    /// `WORK/jobs/KEY` with an atomic `mkdir`, writes the script and `files` (name, content)
    /// there, runs `scheduler_command` in it and records the id it prints. A key already
    /// claimed yields the job recorded for it; a connection lost mid-way is
    /// [`SubmitOutcomeUnknown`](crate::ErrorKind::SubmitOutcomeUnknown).
    pub async fn submit(
        &self,
        spec: &JobSpec,
        files: &[(&str, &str)],
        scheduler_command: Vec<String>,
    ) -> Result<Submitted> {
        let work = self.work().await?;
        submit(
            self.shell(),
            work,
            spec,
            files,
            scheduler_command,
            self.timeout,
        )
        .await
    }

    /// The id recorded for `key` in `WORK/jobs/KEY/job_id`, if any.
    pub async fn recorded_id(&self, key: &JobKey) -> Result<Option<String>> {
        recorded_id(self.shell(), self.work().await?, key, self.timeout).await
    }

    /// What the directories of jobs `numbers` (under `WORK/ids/`) say, in one remote
    /// command, and none for no numbers (a status cycle that needs no job directory costs
    /// nothing more); numbers not submitted through this work directory are left out.
    pub async fn job_files(
        &self,
        numbers: &[&str],
    ) -> Result<std::collections::HashMap<String, JobFiles>> {
        if numbers.is_empty() {
            return Ok(std::collections::HashMap::new());
        }
        job_files(self.shell(), self.work().await?, numbers, self.timeout).await
    }

    /// A bounded part of job `number`'s stdout and stderr: NotFound for a job not
    /// submitted here, InvalidInput for a task the job does not have.
    pub async fn fetch_output(&self, number: &str, request: &OutputRequest) -> Result<JobOutput> {
        fetch_output(
            self.shell(),
            self.work().await?,
            number,
            request,
            self.timeout,
        )
        .await
    }

    /// The shell, for an event source that keeps a command of its own running on it.
    pub fn shared_shell(&self) -> Arc<dyn Shell> {
        Arc::clone(&self.shell)
    }

    /// The work directory as configured: absolute, or relative to the login directory.
    pub fn configured_work_dir(&self) -> &str {
        self.work_dir.configured()
    }

    /// The events the job wrappers of this work directory record in `WORK/events/`
    /// ([`WrapperEvents`]), followed through the same shell.
    pub fn wrapper_events(&self) -> WrapperEvents {
        WrapperEvents::in_work_dir(self.shell.clone(), self.work_dir.clone(), self.timeout)
    }

    /// Removes `WORK/jobs/KEY`, its `WORK/ids/ID` link and its `WORK/events/ID.*` once
    /// `backend` reports the job ended ([`JobActive`](crate::ErrorKind::JobActive) before); Ok for a key without a job.
    pub async fn cleanup<B: BatchBackend + ?Sized>(&self, backend: &B, key: &JobKey) -> Result<()> {
        cleanup(backend, self.shell(), self.work().await?, key, self.timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::MockShell;

    #[tokio::test]
    async fn no_job_numbers_cost_no_command() {
        let mut shell = MockShell::new();
        shell.expect_run().never();
        let jobs = JobDirs::new(Arc::new(shell), "/w", Duration::from_secs(1)).unwrap();
        assert!(jobs.job_files(&[]).await.unwrap().is_empty());
    }
}
