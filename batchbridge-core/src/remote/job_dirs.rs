//! [`JobDirs`]: the half of a command-line backend that does not depend on its scheduler.
//! Its submit is in `submit.rs`, its output windows in `output.rs`.

use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use super::staging::STAGING;
use super::work_dir::{EventsOf, WorkDir};
use crate::backend::{BatchBackend, refuse_active};
use crate::error::{Error, ErrorKind, Result};
use crate::shell::{Command, Output, Shell};
use crate::spec::JobKey;
use crate::wrapper::{JobFiles, WrapperEvents, parse_job_files};

/// `sh -c JOB_FILES sh WORK ID...`: what each job's directory says ([`parse_job_files`]).
const JOB_FILES: &str = include_str!("job_files.sh");
/// `sh -c CLEANUP sh WORK KEY STAGING`: removes a job's directory, its id link, its events
/// and what it staged.
const CLEANUP: &str = include_str!("cleanup.sh");
/// The job directory's record of where the job runs (its working directory), for a
/// stage-out by job id.
pub(super) const WORKING_DIR_FILE: &str = "working_dir";
/// The job directory's list of the inputs staged into a working directory of the user's
/// own, one path a line, which cleanup removes.
pub(super) const STAGED_INPUTS_FILE: &str = "staged_inputs";

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

    /// What the directories of jobs `numbers` (under `WORK/ids/`) say, in one remote
    /// command, and none for no numbers (a status cycle that needs no job directory costs
    /// nothing more); numbers not submitted through this work directory are left out.
    pub async fn job_files(&self, numbers: &[&str]) -> Result<HashMap<String, JobFiles>> {
        if numbers.is_empty() {
            return Ok(HashMap::new());
        }
        let work = self.work().await?;
        let command = Command::sh(
            JOB_FILES,
            std::iter::once(work).chain(numbers.iter().copied()),
        );
        let output = self.run(command).await?.check("reading job directories")?;
        Ok(parse_job_files(&output.stdout_text()))
    }

    /// The working directory job `number` (under `WORK/ids/`) runs in, as its submit
    /// recorded it; its job directory for a job submitted before that record existed.
    pub async fn working_dir_of(&self, number: &str) -> Result<String> {
        let work = self.work().await?;
        let command = Command::sh(
            "d=$1/ids/$2; [ -d \"$d\" ] || { echo \"no job $2 in $1\" >&2; exit 3; }; \
             if [ -s \"$d/working_dir\" ]; then cat -- \"$d/working_dir\"; else cd -P -- \"$d\" && pwd -P; fi",
            [work, number],
        );
        let output = self.run(command).await?;
        if output.exit_code == Some(3) {
            return Err(Error::new(ErrorKind::NotFound, output.stderr_text()));
        }
        let dir = output
            .check("reading a job's working directory")?
            .stdout_text();
        Ok(dir.trim_end_matches('\n').to_owned())
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
        let events = EventsOf {
            work_dir: Arc::clone(&self.work_dir),
            timeout: self.timeout,
        };
        WrapperEvents::resolved(Arc::clone(&self.shell), Arc::new(events))
    }

    /// [`BatchBackend::cleanup`] for a backend keeping its jobs here: finds the key's job
    /// (through `backend`, so a job only its scheduler remembers counts too), refuses it
    /// ([`JobActive`](crate::ErrorKind::JobActive)) unless its status shows it ended, then
    /// removes `WORK/jobs/KEY`, its `WORK/ids/ID` link and its `WORK/events/ID.*` in one
    /// remote command. A key without a job, or whose directory is gone, is Ok.
    pub async fn cleanup<B: BatchBackend + ?Sized>(&self, backend: &B, key: &JobKey) -> Result<()> {
        if let Some(id) = backend.find(key).await? {
            refuse_active(key, &id, &backend.status_of(&id).await?)?;
        }
        let work = self.work().await?;
        self.run(Command::sh(CLEANUP, [work, key.as_str(), STAGING]))
            .await?
            .check("removing a job directory")?;
        Ok(())
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

    #[tokio::test]
    async fn the_cleanup_script_removes_only_its_own_job() {
        let work = tempfile::tempdir().unwrap();
        let root = work.path().to_str().unwrap();
        let make = |key: &str, id: &str| {
            let dir = work.path().join("jobs").join(key);
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join("job_id"), format!("{id}\n")).unwrap();
            std::fs::write(dir.join("sub/task-0.stdout"), "out").unwrap();
            std::fs::create_dir_all(work.path().join("ids")).unwrap();
            std::os::unix::fs::symlink(format!("../jobs/{key}"), work.path().join("ids").join(id))
                .unwrap();
        };
        make("gone", "11");
        make("kept", "12");
        std::fs::create_dir_all(work.path().join("events")).unwrap();
        for name in [
            "11.0.started",
            "11.0.exit.0",
            "12.0.started",
            "112.0.started",
        ] {
            std::fs::write(work.path().join("events").join(name), "").unwrap();
        }
        let run = |key: &str| {
            let command = Command::sh(CLEANUP, [root, key]);
            async move { crate::shell::LocalShell.run(&command).await.unwrap() }
        };
        for _ in 0..2 {
            let output = run("gone").await;
            assert_eq!(output.exit_code, Some(0), "{output:?}");
        }
        assert!(!work.path().join("jobs/gone").exists());
        assert!(work.path().join("ids/11").symlink_metadata().is_err());
        assert!(work.path().join("jobs/kept/sub/task-0.stdout").is_file());
        assert!(work.path().join("ids/12").is_dir(), "the other link stays");
        let mut events: Vec<_> = std::fs::read_dir(work.path().join("events"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        events.sort();
        assert_eq!(
            events,
            ["112.0.started", "12.0.started"],
            "only its own events go"
        );

        // A job_id file that is not a number removes no link outside ids/.
        make("odd", "13");
        std::fs::write(work.path().join("jobs/odd/job_id"), "../jobs/kept\n").unwrap();
        assert_eq!(run("odd").await.exit_code, Some(0));
        assert!(work.path().join("jobs/kept/job_id").is_file());
        assert!(!work.path().join("jobs/odd").exists());
    }

    #[tokio::test]
    async fn cleanup_removes_what_a_job_staged_and_nothing_else() {
        let work = tempfile::tempdir().unwrap();
        let own = tempfile::tempdir().unwrap();
        let root = work.path().to_str().unwrap();
        // A job that staged into WORK/staged/KEY, and one into a working directory of its
        // own, where the user also keeps a file of theirs and a symlink out.
        for (key, id) in [("in-staged", "21"), ("in-own", "22")] {
            let dir = work.path().join("jobs").join(key);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("job_id"), format!("{id}\n")).unwrap();
        }
        std::fs::create_dir_all(work.path().join("staged/in-staged/data")).unwrap();
        std::fs::write(work.path().join("staged/in-staged/data/x"), "x").unwrap();
        std::fs::create_dir_all(own.path().join("inputs")).unwrap();
        for name in ["inputs/a.csv", "b.txt", "mine.txt"] {
            std::fs::write(own.path().join(name), name).unwrap();
        }
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "keep").unwrap();
        std::os::unix::fs::symlink(outside.path(), own.path().join("link")).unwrap();
        let job = work.path().join("jobs/in-own");
        std::fs::write(job.join("working_dir"), own.path().to_str().unwrap()).unwrap();
        std::fs::write(
            job.join("staged_inputs"),
            "inputs/a.csv\nb.txt\nlink/keep\n../x",
        )
        .unwrap();
        for key in ["in-staged", "in-own"] {
            let command = Command::sh(CLEANUP, [root, key, STAGING]);
            let output = crate::shell::LocalShell.run(&command).await.unwrap();
            assert_eq!(output.exit_code, Some(0), "{output:?}");
        }
        assert!(!work.path().join("staged/in-staged").exists());
        assert!(!work.path().join("jobs/in-own").exists());
        assert!(!own.path().join("inputs/a.csv").exists());
        assert!(!own.path().join("b.txt").exists());
        assert!(
            own.path().join("mine.txt").is_file(),
            "the user's own file stays"
        );
        assert!(
            outside.path().join("keep").is_file(),
            "nothing outside through a symlink"
        );
    }

    #[tokio::test]
    async fn a_job_directory_without_a_tasks_file_has_one_task() {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("jobs/key-1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir(work.path().join("ids")).unwrap();
        std::os::unix::fs::symlink("../jobs/key-1", work.path().join("ids/7")).unwrap();
        std::fs::write(dir.join("task-0.exit"), "exit 0\n").unwrap();
        let command = Command::sh(JOB_FILES, [work.path().to_str().unwrap(), "7", "8"]);
        let output = crate::shell::LocalShell.run(&command).await.unwrap();
        assert_eq!(output.stdout_text(), "7 tasks 1 0\n7 task 0 exit 0\n");
        assert_eq!(output.stderr_text(), "");
    }
}
