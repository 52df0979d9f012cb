//! An example batchbridge backend for Debian's task-spooler (`tsp`), a per-user queue that
//! runs jobs on one machine, so many at a time (its slots). Built on the documented
//! command-line skeleton alone: [`Tsp`] is the [`CliScheduler`], [`TspBackend`] the
//! [`BatchBackend`](batchbridge_core::BatchBackend), the job wrapper is core's
//! [`BatchJobWrapper`], and the remote half is one script, `src/sh/tsp.sh`.
//!
//! Each work directory has a tsp server of its own (socket `WORK/tsp.socket`), started by
//! the first command that needs it with [`TspConfig::slots`] slots. tsp numbers its jobs
//! from 0 again whenever that server starts, so a job's id is the server's start time and
//! tsp's number as one, as `CliScheduler`'s "Job ids" describes; a job of an earlier server
//! is told by its directory's files alone.
//!
//! ```no_run
//! use std::sync::Arc;
//! use batchbridge_core::shell::LocalShell;
//! use batchbridge_tsp::{TspBackend, TspConfig};
//!
//! let backend = TspBackend::new(Arc::new(LocalShell), TspConfig::new("/tmp/tsp-jobs").with_slots(2))?;
//! # Ok::<(), batchbridge_core::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use batchbridge_core::events::EventSource;
use batchbridge_core::remote::{CliScheduler, JobDirs, RemoteBackend, SubmitCommand, WorkSettings};
use batchbridge_core::shell::{Command, Output};
use batchbridge_core::wrapper::{BatchJobWrapper, JobFiles};
use batchbridge_core::{
    CancelledBy, Capabilities, Error, ErrorKind, FailureCause, JobId, JobKey, JobSpec, JobState,
    JobStatus, Result,
};

/// The tsp backend.
pub type TspBackend = RemoteBackend<Tsp>;

/// How the tsp backend is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TspConfig {
    /// Where the jobs and the tsp server's socket live, and how long a command may take.
    pub work: WorkSettings,
    /// How many jobs the server runs at once; a job takes `resources.cpus` of them (1 by
    /// default) and waits in tsp's queue until that many are free. Read when the server
    /// starts ([`restart_server`] applies a new value).
    pub slots: u32,
}

impl TspConfig {
    /// Jobs under `work_dir`, four at a time.
    pub fn new(work_dir: impl Into<String>) -> Self {
        Self {
            work: WorkSettings::new(work_dir),
            slots: 4,
        }
    }

    /// The server runs `slots` jobs at once.
    pub fn with_slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }
}

batchbridge_core::work_settings_builders!(TspConfig);

/// task-spooler, the scheduler half of [`TspBackend`].
#[derive(Debug)]
pub struct Tsp {
    slots: String,
}

/// The remote half: every command is this script with an action and its values.
const TSP_SH: &str = include_str!("sh/tsp.sh");

/// The job wrapper: core's batch-job wrapper, with the task and job from the job directory.
/// A cancel's SIGTERM comes from `tsp -k`, which reads any exit.
const WRAPPER: BatchJobWrapper =
    BatchJobWrapper::new("/bin/bash", include_str!("sh/task_and_job.sh"), "exit 143");

impl Tsp {
    /// `tsp.sh ACTION WORK SLOTS ARGS...`.
    fn command<'a>(&'a self, action: &'a str, work: &'a str, args: &[&'a str]) -> Command {
        Command::sh(
            TSP_SH,
            [action, work, &self.slots].iter().chain(args).copied(),
        )
    }

    /// Runs `action` through `jobs`: its output when it succeeded, else tsp's failure.
    async fn run(&self, jobs: &JobDirs, action: &str, args: &[&str]) -> Result<Output> {
        let output = jobs
            .run(self.command(action, jobs.work().await?, args))
            .await?;
        match output.success() {
            true => Ok(output),
            false => Err(self.failure(&format!("tsp.sh {action}"), &output)),
        }
    }
}

/// `command` as a program and its arguments.
fn argv(command: &Command) -> Vec<String> {
    let program = std::iter::once(command.get_program());
    program
        .chain(command.get_args().iter().map(String::as_str))
        .map(str::to_owned)
        .collect()
}

/// A job's state in tsp's list, and its exit level once it finished.
type Listed = (String, Option<i32>);

/// Each job the server holds, by id, from `listing`'s output: tsp's list (number, state,
/// output, then the exit level of a finished job), then `epoch SECONDS`, when the server
/// started.
fn parse_listing(text: &str) -> HashMap<String, Listed> {
    let epoch = text.lines().find_map(|line| line.strip_prefix("epoch "));
    let jobs = text.lines().filter_map(|line| {
        let mut fields = line.split_whitespace();
        // The header and the epoch line start with no number.
        let number: u64 = fields.next()?.parse().ok()?;
        let state = fields.next()?.to_owned();
        let level = fields.nth(1).and_then(|level| level.parse().ok());
        Some((format!("{}{number:010}", epoch?), (state, level)))
    });
    jobs.collect()
}

/// The status of job `id`, from the server's list (`listed`: its state and exit level) and
/// what its directory says (`files`; `None` for a job this work directory does not have,
/// or no longer has). A recorded end wins; a job the server no longer runs or queues is
/// Cancelled when a cancel took it out of the queue, else Unknown (it went with its
/// server, or never was), or as tsp says it ended.
fn status_of(id: &str, listed: Option<&Listed>, files: Option<&JobFiles>) -> JobStatus {
    if let Some(ended) = files.and_then(|files| files.task_status(0)) {
        return ended;
    }
    let listed = listed.map(|(state, level)| (state.as_str(), *level));
    match listed {
        Some(("running", _)) => JobStatus::new(JobState::Running, "running"),
        Some(("finished" | "skipped", _)) | None if files.is_some_and(|f| f.cancel_requested) => {
            JobStatus::new(JobState::Cancelled, "removed")
                .with_cause(FailureCause::Cancelled(CancelledBy::Request))
        }
        Some(("finished", Some(0))) => {
            JobStatus::new(JobState::Succeeded, "finished").with_exit_code(0)
        }
        Some((state @ ("finished" | "skipped"), _)) => JobStatus::new(JobState::Failed, state)
            .with_reason("tsp says it ended, but its wrapper recorded no end"),
        Some((state, _)) => JobStatus::new(JobState::Queued, state)
            .with_reason("waiting in tsp's queue for free slots"),
        None => JobStatus::new(JobState::Unknown, "unknown").with_reason(format!(
            "neither tsp's server nor the work directory holds job {id}"
        )),
    }
}

#[batchbridge_core::async_trait]
impl CliScheduler for Tsp {
    type Config = TspConfig;
    const NAME: &'static str = "tsp";
    const SCHEDULER: &'static str = "task-spooler";
    const JOB_ID: &'static str = "a tsp job id";
    // What tsp says when it could not start or reach its server.
    const UNREACHABLE: &'static [&'static str] = &["didn't come up", "Connection refused"];

    fn configure(config: TspConfig) -> Result<(Self, WorkSettings)> {
        let slots = (config.slots > 0).then(|| config.slots.to_string());
        let slots =
            slots.ok_or_else(|| Error::invalid_input("slots: tsp runs at least one job"))?;
        Ok((Self { slots }, config.work))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }

    /// tsp runs a job on this machine as soon as enough slots are free: it has no memory,
    /// disk, time or node limits to hold one to.
    fn check(&self, spec: &JobSpec) -> Result<()> {
        let r = &spec.resources;
        let more = [
            r.memory.is_some(),
            r.disk.is_some(),
            r.wall_time.is_some(),
            r.nodes > Some(1),
        ];
        match more.contains(&true) {
            true => Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "tsp counts slots (resources.cpus) alone; job {} asks for more",
                    spec.key
                ),
            )),
            false => Ok(()),
        }
    }

    fn render_submit(&self, spec: &JobSpec, dir: &str) -> Result<SubmitCommand> {
        let work = dir
            .strip_suffix(&format!("/jobs/{}", spec.key))
            .unwrap_or(dir);
        let slots = spec.resources.cpus.unwrap_or(1).to_string();
        Ok(SubmitCommand {
            files: vec![("job.sh", WRAPPER.render(spec, dir, Self::NAME)?)],
            command: argv(&self.command("submit", work, &[spec.key.as_str(), &slots, dir])),
        })
    }

    async fn find(&self, jobs: &JobDirs, key: &JobKey, _dir: &str) -> Result<Option<JobId>> {
        let output = self.run(jobs, "newest", &[key.as_str()]).await?;
        let id = output.stdout_text().trim().to_owned();
        Ok((!id.is_empty()).then(|| JobId::from(id)))
    }

    async fn status(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>> {
        // The list first: a job it shows running that then ends has recorded its end by the
        // time its files are read.
        let listing = self.run(jobs, "listing", &[]).await?.stdout_text();
        let listed = parse_listing(&listing);
        let files = jobs.job_files(numbers).await?;
        let status = |id: &&str| status_of(id, listed.get(*id), files.get(*id));
        Ok(numbers.iter().map(status).collect())
    }

    fn cancel_command(&self, work: &str, number: &str) -> Command {
        // An id of another shape names no job of a server: the script finds no such epoch.
        let (epoch, job) = number.split_at(number.len().min(10));
        let job = job
            .parse::<u64>()
            .map_or_else(|_| String::new(), |n| n.to_string());
        self.command("cancel", work, &[number, epoch, &job])
    }

    fn cancelled(&self, number: &str, output: &Output) -> Result<()> {
        match output.success() {
            true => Ok(()),
            false => Err(self.failure(&format!("cancelling tsp job {number}"), output)),
        }
    }

    fn version_command(&self) -> Command {
        Command::new("tsp").arg("-V")
    }

    fn parse_version(&self, output: &Output) -> Result<String> {
        match output.stdout_text().lines().next().map(str::trim) {
            Some(line) if !line.is_empty() => Ok(line.to_owned()),
            _ => Err(Error::new(
                ErrorKind::UnexpectedOutput,
                "tsp -V printed no version",
            )),
        }
    }

    fn events(&self, jobs: &JobDirs) -> Option<Arc<dyn EventSource>> {
        Some(Arc::new(jobs.wrapper_events()))
    }
}

/// Ends the work directory's tsp server once no job is queued, running or being submitted,
/// so that the next command starts a new one: it applies a new [`TspConfig::slots`], and
/// restarts tsp's numbering (what the conformance suite's `restart_numbering` asks for).
pub async fn restart_server(backend: &TspBackend) -> Result<()> {
    backend
        .scheduler()
        .run(backend.jobs(), "restart", &[])
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tsp -l` of task-spooler 1.0.1, as `listing` prints it.
    const LISTING: &str = "\
ID   State      Output               E-Level  Times(r/u/s)   Command [run=1/4]
3    running    stdout                                       [k3]/w/jobs/k3/job.sh
4    queued     stdout                                       [k4]/w/jobs/k4/job.sh
1    finished   stdout               0        0.00/0.00/0.00 [k1]/w/jobs/k1/job.sh
2    finished   stdout               -1       0.31/0.00/0.00 [k2]/w/jobs/k2/job.sh
epoch 1795678438
";

    #[test]
    fn states_come_from_the_list_of_the_ids_own_server() {
        let listed = parse_listing(LISTING);
        let state = |id: &str| status_of(id, listed.get(id), None).state;
        assert_eq!(state("17956784380000000003"), JobState::Running);
        assert_eq!(state("17956784380000000004"), JobState::Queued);
        assert_eq!(state("17956784380000000001"), JobState::Succeeded);
        assert_eq!(state("17956784380000000002"), JobState::Failed);
        // Number 3 of an earlier server is another job.
        assert_eq!(state("17956780000000000003"), JobState::Unknown);
    }
}
