//! [`RemoteBackend`]: a [`BatchBackend`] made of a scheduler's command-line tools
//! ([`CliScheduler`]) and the job directories every such backend keeps ([`JobDirs`]).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::answers::{each_answered, unanswered};
use super::job_dirs::{STAGED_INPUTS_FILE, WORKING_DIR_FILE};
use super::{
    JobDirs, StagingDir, SubmitJob, SubmitLocks, Submitted, WorkSettings, environment_file,
};
use crate::backend::{
    BatchBackend, Capabilities, JobId, JobOutput, OutputRequest, Withdrawal, cannot_withdraw,
    succeeded_once_ended,
};
use crate::directives::DirectiveReport;
use crate::error::{Error, ErrorKind, Refusal, Result, excerpt};
use crate::estimate::{StartEstimate, cannot_estimate, refused_by_submit};
use crate::events::EventSource;
use crate::shell::{Command, Output, Shell};
use crate::spec::{JobKey, JobSpec};
use crate::staging::{StageLimits, StageOut, StagedOutputs, Transfer};
use crate::state::JobStatus;
use crate::wrapper::{job_number_of, job_numbers};

/// The most job ids a status query puts on its scheduler's command line: 1000 of at most
/// 20 digits stay well under a remote shell's 128 KiB argument limit. Above it a backend
/// asks for a listing instead (all of the user's jobs, or a range) and picks its ids out.
///
/// ```
/// use batchbridge_core::remote::MAX_IDS_ON_COMMAND_LINE;
/// use batchbridge_core::shell::MAX_COMMAND_LINE;
///
/// assert!(MAX_IDS_ON_COMMAND_LINE * 21 < MAX_COMMAND_LINE);
/// ```
pub const MAX_IDS_ON_COMMAND_LINE: usize = 1000;

/// What submits one job: the files of the scheduler's own written into the job directory
/// beside `script.sh`, `env.sh` and `tasks` (which [`RemoteBackend`] writes), and the
/// command run once they are there. The command runs where the shell starts commands (the
/// login directory over SSH), not in the job directory: it names the files by the absolute
/// `dir` that [`CliScheduler::render_submit`] gets, and its stdin is empty. It prints the
/// job's id first (submit.sh records its leading digits): `sbatch --parsable` and
/// `condor_submit -terse` do; a tool that says more wraps itself in a small script that
/// prints the number alone. A process it leaves running in the background must not keep
/// its stdout open, or the submit waits for that process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitCommand {
    /// Files by name: `job.sh` (made executable) is the usual wrapper.
    pub files: Vec<(&'static str, String)>,
    /// The program and its arguments.
    pub command: Vec<String>,
}

impl SubmitCommand {
    /// A batch scheduler's submit of one wrapper: `wrapper` written as `DIR/job.sh`, and
    /// `tool` (the program and the flags that make it print the id alone), then `options`,
    /// then the wrapper's path. SLURM's and PBS's submits are this.
    ///
    /// ```
    /// use batchbridge_core::remote::SubmitCommand;
    ///
    /// let submit = SubmitCommand::batch_job(
    ///     &["sbatch", "--parsable"],
    ///     vec!["--job-name=n".to_owned()],
    ///     "/w/jobs/k",
    ///     "#!/bin/sh\n".to_owned(),
    /// );
    /// assert_eq!(submit.command, ["sbatch", "--parsable", "--job-name=n", "/w/jobs/k/job.sh"]);
    /// assert_eq!(submit.files, [("job.sh", "#!/bin/sh\n".to_owned())]);
    /// ```
    pub fn batch_job(tool: &[&str], options: Vec<String>, dir: &str, wrapper: String) -> Self {
        let command = tool
            .iter()
            .map(|word| (*word).to_owned())
            .chain(options)
            .chain([format!("{dir}/job.sh")])
            .collect();
        Self {
            files: vec![("job.sh", wrapper)],
            command,
        }
    }
}

/// The part of a command-line backend that is its scheduler's: how a submit is rendered,
/// how the scheduler is asked about many jobs at once and its answer read, the cancel and
/// version commands, and which of its failures mean "it did not answer" (temporary). The
/// rest of [`BatchBackend`] is [`RemoteBackend`]'s: validation, the idempotent submit,
/// `find`, output, cleanup and the exit-code files.
///
/// Every command runs through the [`JobDirs`] given, within the configured time limit.
///
/// # Who calls what, when
///
/// [`RemoteBackend`] is the only caller; each method's doc says what it must return in
/// every case. In short: `configure` once, in [`RemoteBackend::new`], then `events` once;
/// every submit (and [`estimate_start`](Self::estimate_start)) runs `check` and
/// `render_submit`, and after a refusal `failure`, `refusal` and `rejection_context`; `find`
/// when a key has no recorded id (a submit cut off, another process's submit in flight,
/// [`BatchBackend::find`], [`BatchBackend::cleanup`]); `status` for every
/// [`BatchBackend::status`] (the tracker's polls, cleanup's check); `cancel_command` and
/// `cancelled` for every cancel; `withdraw_command` for every withdraw; `version_command`
/// and `parse_version` for every version (the operator's probe). A method returning
/// `Err` makes the caller's call fail with that error; it is temporary only when the error
/// says so ([`failure`](Self::failure) decides from [`UNREACHABLE`](Self::UNREACHABLE)).
///
/// # Job ids
///
/// What the skeleton assumes of the id the submit command prints:
///
/// - It is a job number ([`job_number`](super::job_number)): digits only, at most 20, so
///   that a malformed id never reaches a command line or a path. Any id a caller passes
///   that is not one is refused or Unknown without a command.
/// - It is unique forever within the work directory, not only among the scheduler's live
///   jobs: `WORK/ids/ID` links the number to its key's directory, the wrapper's events are
///   `WORK/events/ID.*`, and callers (the tracker, the operator's status) keep an id for
///   as long as they keep the job. A submit that gets a number already linked to another
///   key's job fails ([`SUBMIT_ID_TAKEN_EXIT_CODE`](super::SUBMIT_ID_TAKEN_EXIT_CODE)) and
///   leaves the old job's link, status and output alone; a number whose old job was
///   cleaned up is free again.
///
/// SLURM, PBS, HTCondor and at never repeat a number (at keeps its sequence on disk). A
/// scheduler whose numbering restarts (task-spooler restarts at 0 with its server) makes
/// its ids unique itself, within 20 digits: its submit command prints the server's start
/// time and its number as one (`1732600000` and `42` as `17326000000000000042`: ten digits
/// of epoch, ten of number), and its `status`, `cancel_command` and `find` take the number
/// apart again (the first ten digits, the last ten) and ask whether the server's start
/// time still matches, answering Unknown (the job is gone with its server) when it does not.
///
/// ```
/// use batchbridge_core::remote::job_number;
///
/// let (epoch, number) = (1_732_600_000_u64, 42_u64);
/// let id = format!("{epoch}{number:010}");
/// assert_eq!(job_number(&id), Some("17326000000000000042"));
/// let (started, number) = id.split_at(10);
/// assert_eq!((started, number.parse::<u64>().unwrap()), ("1732600000", 42));
/// ```
///
/// A whole backend for a scheduler whose `qsub`-like tool prints the new job's number and
/// whose `qstat`-like tool lists running jobs, one a line (here plain processes run with
/// `nohup`, so that the example runs anywhere):
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use batchbridge_core::remote::{
///     CliScheduler, JobDirs, NOT_STARTED_EXIT_CODE, RemoteBackend, SubmitCommand,
///     WorkSettings, render_script,
/// };
/// use batchbridge_core::shell::{Command, LocalShell, Output};
/// use batchbridge_core::{
///     BatchBackend, Capabilities, Error, ErrorKind, JobId, JobKey, JobSpec, JobState,
///     JobStatus, Result,
/// };
///
/// /// Each job a background process: its number is its process id.
/// #[derive(Debug)]
/// struct Nohup;
///
/// // A wrapper that records how the script ended where JobDirs::job_files reads it.
/// const WRAPPER: &str = r#"dir=$PWD
/// @ENTER_WORKING_DIR@
/// rc=0
/// if enter_working_dir "$dir" "$dir/task-0.reason"; then
///     (. "$dir/env.sh" && exec sh "$dir/script.sh") >"$dir/task-0.stdout" 2>"$dir/task-0.stderr"
///     rc=$?
/// else
///     rc=@NOT_STARTED@
/// fi
/// echo "exit $rc" >"$dir/task-0.exit.tmp" && mv "$dir/task-0.exit.tmp" "$dir/task-0.exit""#;
///
/// #[batchbridge_core::async_trait]
/// impl CliScheduler for Nohup {
///     type Config = String;
///     const NAME: &'static str = "nohup";
///     const SCHEDULER: &'static str = "nohup";
///     const JOB_ID: &'static str = "a process id";
///     const UNREACHABLE: &'static [&'static str] = &[];
///
///     fn configure(work_dir: String) -> Result<(Self, WorkSettings)> {
///         Ok((Nohup, WorkSettings { work_dir, command_timeout: Duration::from_secs(10) }))
///     }
///
///     fn capabilities(&self) -> Capabilities {
///         Capabilities::NONE
///     }
///
///     fn render_submit(&self, _spec: &JobSpec, dir: &str) -> Result<SubmitCommand> {
///         let start = "cd \"$1\" && nohup sh job.sh >/dev/null 2>&1 & echo $!";
///         Ok(SubmitCommand {
///             files: vec![("job.sh", render_script(WRAPPER))],
///             command: ["sh", "-c", start, "sh", dir].map(str::to_owned).to_vec(),
///         })
///     }
///
///     async fn find(&self, _: &JobDirs, _: &JobKey, _: &str) -> Result<Option<JobId>> {
///         Ok(None) // processes carry no key
///     }
///
///     async fn status(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>> {
///         let files = jobs.job_files(numbers).await?;
///         Ok(numbers
///             .iter()
///             .map(|n| match files.get(*n).and_then(|f| f.ended.get(&0)) {
///                 Some(end) => end.status(false),
///                 None => JobStatus::new(JobState::Running, "running"),
///             })
///             .collect())
///     }
///
///     fn cancel_command(&self, _work: &str, number: &str) -> Command {
///         Command::new("kill").arg(number)
///     }
///
///     fn cancelled(&self, number: &str, output: &Output) -> Result<()> {
///         match output.success() {
///             true => Ok(()),
///             false => Err(self.failure(&format!("kill {number}"), output)),
///         }
///     }
///
///     fn version_command(&self) -> Command {
///         Command::new("nohup").arg("--version")
///     }
///
///     fn parse_version(&self, output: &Output) -> Result<String> {
///         let text = output.stdout_text();
///         let first = text.lines().next().unwrap_or_default();
///         Ok(first.to_owned())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<()> {
/// let tmp = tempfile::tempdir()?;
/// let work = tmp.path().to_str().unwrap().to_owned();
/// let backend = RemoteBackend::<Nohup>::new(Arc::new(LocalShell), work)?;
/// let key = JobKey::new("hello-1")?;
/// let id = backend.submit(&JobSpec::new(key.clone(), "hello", "echo hello; exit 3")).await?;
/// assert_eq!(backend.submit(&JobSpec::new(key.clone(), "hello", "true")).await?, id);
/// assert_eq!(backend.find(&key).await?, Some(id.clone()));
/// while backend.status_of(&id).await?.state == JobState::Running {
///     tokio::time::sleep(Duration::from_millis(20)).await;
/// }
/// assert_eq!(backend.status_of(&id).await?.exit_code, Some(3));
/// let output = backend.fetch_output(&id, &batchbridge_core::OutputRequest::tail(100)).await?;
/// assert_eq!(output.stdout.data, b"hello\n");
/// backend.cleanup(&key).await?;
/// assert_eq!(backend.find(&key).await?, None);
/// # Ok(()) }
/// ```
#[async_trait]
pub trait CliScheduler: Debug + Send + Sync + Sized + 'static {
    /// How the backend is configured ([`RemoteBackend::new`] takes it).
    type Config;
    /// The backend's name ([`BatchBackend::name`]), e.g. `slurm`.
    const NAME: &'static str;
    /// The scheduler's name in messages, e.g. `SLURM`.
    const SCHEDULER: &'static str;
    /// What one of its job ids is, in the error or Unknown status for an id that is not
    /// one, e.g. `a SLURM job id`.
    const JOB_ID: &'static str;
    /// Words in a failed command's message that show the scheduler did not answer (its
    /// daemon down or unreachable), so that the failure is temporary ([`Self::failure`]).
    const UNREACHABLE: &'static [&'static str];

    /// The scheduler and where its jobs live, from `config`; a config it cannot work with
    /// is refused here ([`InvalidInput`](ErrorKind::InvalidInput)), before anything runs.
    /// Called once, by [`RemoteBackend::new`]; it runs no command.
    fn configure(config: Self::Config) -> Result<(Self, WorkSettings)>;

    /// What it can run ([`BatchBackend::capabilities`]): the same value every time, with
    /// `withdraw` when it has a [`withdraw_command`](Self::withdraw_command) and
    /// `estimates` when it overrides [`estimate_start`](Self::estimate_start) (cleanup
    /// [`RemoteBackend`] declares itself). A
    /// submit asking for more is refused by [`Capabilities::check`] before `check` and
    /// `render_submit` see it, and the conformance suite skips or adapts the checks each
    /// capability gates (the `conformance` module, behind the feature of that name).
    fn capabilities(&self) -> Capabilities;

    /// Refuses a spec it cannot run beyond what [`Capabilities::check`] refuses, before
    /// anything is sent: [`Unsupported`](ErrorKind::Unsupported) for what this scheduler
    /// never runs, [`InvalidInput`](ErrorKind::InvalidInput) for a value it cannot take.
    /// Called by every submit and estimate, after [`JobSpec::validate`]; it runs no command.
    /// Nothing more by default.
    fn check(&self, spec: &JobSpec) -> Result<()> {
        let _ = spec;
        Ok(())
    }

    /// `spec` with its script's directives applied, and what became of each line
    /// ([`BatchBackend::apply_directives`], which [`RemoteBackend`] forwards here). The
    /// scheduler's directive vocabulary stays here, in its backend. None by default: `spec`
    /// unchanged, an empty report.
    fn apply_directives(&self, spec: JobSpec) -> Result<(JobSpec, DirectiveReport)> {
        Ok((spec, DirectiveReport::default()))
    }

    /// The files and command that submit `spec` from its job directory `dir` (absolute;
    /// `WORK/jobs/KEY`, which exists and holds `script.sh`, `env.sh` and `tasks` when the
    /// command runs; it does not run there, so it names `dir` itself). The command prints the
    /// new job's id first and exits 0, or exits non-zero with the scheduler's refusal on
    /// stderr; it runs once per key (the submit is idempotent around it). Called by every
    /// submit that passed `check`, and by estimates, whose rendering is thrown away; an
    /// `Err` here refuses the spec.
    fn render_submit(&self, spec: &JobSpec, dir: &str) -> Result<SubmitCommand>;

    /// What to add to the [`Rejected`](ErrorKind::Rejected) error of a refused submit
    /// (e.g. ` on partition "debug"`), from the spec and what the scheduler said. Called
    /// only for a refusal [`failure`](Self::failure) did not find temporary. Nothing by
    /// default.
    fn rejection_context(&self, spec: &JobSpec, refusal: &Output) -> String {
        let _ = (spec, refusal);
        String::new()
    }

    /// The kind of a refused submit, from what the scheduler said (`refusal` failed, and
    /// not because the scheduler did not answer); `None` when its words are not known,
    /// which leaves the refusal permanent. The scheduler's vocabulary stays here, in its
    /// backend: a submit limit or a closed queue makes the refusal temporary, so callers
    /// retry instead of failing the job.
    fn refusal(&self, refusal: &Output) -> Option<Refusal> {
        let _ = refusal;
        None
    }

    /// The job the scheduler itself holds with `key` (whose directory is `dir`): how a key
    /// whose submit was cut off before its id was recorded finds its job.
    ///
    /// Called only when `WORK/jobs/KEY/job_id` holds no id: by a submit that found the key
    /// claimed (polled for up to 20 s while another process's submit may be in flight), by
    /// [`BatchBackend::find`], and by [`BatchBackend::cleanup`], which then asks `status`
    /// of what it returns and refuses with [`JobActive`](ErrorKind::JobActive) unless that
    /// status is terminal (Unknown counts as active).
    ///
    /// Return `Ok(Some(id))` for the key's job only while `status` can answer for it with
    /// a known state (the scheduler still holds it, or it ended and says how); `Ok(None)`
    /// when the scheduler holds no job with the key, and for a finished job `status` would
    /// call Unknown (one the scheduler forgot, whose directory cleanup removed): else a
    /// second cleanup of the key fails with JobActive. `Err` only when the scheduler could
    /// not be asked. A scheduler whose jobs carry no key (plain
    /// processes) returns `Ok(None)`: a cut-off submit is then
    /// [`SubmitOutcomeUnknown`](ErrorKind::SubmitOutcomeUnknown) until the key is cleaned up.
    async fn find(&self, jobs: &JobDirs, key: &JobKey, dir: &str) -> Result<Option<JobId>>;

    /// The status of each of `numbers` (job numbers, sorted, without repeats), one per
    /// number and in order, asked in a number of commands that does not grow with theirs.
    ///
    /// Called by every [`BatchBackend::status`] (a tracker's poll of every followed job, a
    /// poll an event asks for, cleanup's check) with the ids that are job numbers; other
    /// ids are Unknown without a call. Per number: the scheduler's state while it holds the
    /// job (Queued with a reason, Held, Running); once it ended, the end, from the
    /// scheduler or from the wrapper's files ([`JobDirs::job_files`],
    /// [`JobFiles::task_status`](super::JobFiles::task_status)), whichever knows (a recorded
    /// end wins over a scheduler still showing the job for a moment), Cancelled for a job
    /// that ended after a cancel (`cancel-requested`); Unknown, with a reason, for a number neither the scheduler
    /// nor this work directory knows. Never a terminal state that can change later, never
    /// a status of another job under a repeated number (see "Job ids"). `Err` when the
    /// scheduler could not be asked: the whole batch fails, and the caller polls again;
    /// a vector of another length is an [`UnexpectedOutput`](ErrorKind::UnexpectedOutput)
    /// error.
    async fn status(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>>;

    /// The command that cancels job `number` (`work` is the work directory, for a mark in
    /// the job's directory, `WORK/ids/NUMBER/cancel-requested`, which `status` reads as
    /// Cancelled). Called by every [`BatchBackend::cancel`] of a job number, whatever the
    /// job's state: queued (the scheduler must drop it, so that it never runs), running,
    /// ended or unknown.
    fn cancel_command(&self, work: &str, number: &str) -> Command;

    /// What the cancel command's `output` means: Ok when the job is cancelled or has
    /// nothing left to cancel (it ended, or the scheduler never had it); else the error,
    /// usually [`failure`](Self::failure). Called after every cancel command, whatever its
    /// exit code.
    fn cancelled(&self, number: &str, output: &Output) -> Result<()>;

    /// The command that withdraws job `number` ([`BatchBackend::withdraw`]): it cancels the
    /// job only if no part of it started, without a race with the scheduler starting it
    /// (a hold, a check, then the cancel or a release), and prints on its last line of
    /// stdout [`WITHDRAWN`], [`STARTED`] or [`ENDED`]. `None`, the default: the scheduler
    /// cannot, and withdraw is Unsupported. Called by every [`BatchBackend::withdraw`] of
    /// a job number; an output whose last line is none of the three is
    /// [`failure`](Self::failure)'s error.
    fn withdraw_command(&self, work: &str, number: &str) -> Option<Command> {
        let _ = (work, number);
        None
    }

    /// The command whose output names the scheduler's version, without asking its daemon.
    /// Called by every [`BatchBackend::version`]; a non-zero exit is
    /// [`failure`](Self::failure)'s error and `parse_version` is not called.
    fn version_command(&self) -> Command;

    /// The version in the version command's output (which succeeded): one printable line
    /// (the conformance suite checks it), or
    /// [`UnexpectedOutput`](ErrorKind::UnexpectedOutput) when the output names none.
    fn parse_version(&self, output: &Output) -> Result<String>;

    /// When and where `spec` would start if it were submitted now
    /// ([`BatchBackend::estimate_start`]), asked through `jobs` without submitting; `dir` is
    /// the job directory its submit would use. [`RemoteBackend`] has already refused what
    /// its submit would refuse. Unsupported ([`cannot_estimate`]) by default.
    async fn estimate_start(
        &self,
        jobs: &JobDirs,
        spec: &JobSpec,
        dir: &str,
    ) -> Result<StartEstimate> {
        let _ = (jobs, dir);
        Err(cannot_estimate(Self::NAME, &spec.key))
    }

    /// Where the backend's job events come from ([`BatchBackend::events`]), asked once when
    /// the backend is made: none by default. A scheduler whose job wrapper records each
    /// task's start and end with `job_event` ([`JOB_EVENT`](super::JOB_EVENT)) returns
    /// [`JobDirs::wrapper_events`]; one with an event log of its own, its own source.
    fn events(&self, jobs: &JobDirs) -> Option<Arc<dyn EventSource>> {
        let _ = jobs;
        None
    }

    /// The error for a command of the scheduler that failed (`what` names it):
    /// [`CommandFailed`](ErrorKind::CommandFailed) quoting what it said (stderr, or stdout
    /// when stderr is empty), temporary when that shows one of [`Self::UNREACHABLE`].
    /// Called for a refused submit (a temporary failure is returned as it is, anything else
    /// becomes [`Rejected`](ErrorKind::Rejected)), a failed version or withdraw command, and
    /// by the scheduler's own code. Override it only for failures the words cannot tell.
    fn failure(&self, what: &str, output: &Output) -> Error {
        scheduler_failure(what, output, Self::UNREACHABLE)
    }
}

/// The error for a scheduler command that failed: temporary when its message holds one of
/// `unreachable`. Quotes stderr, or stdout when stderr is empty, in part.
fn scheduler_failure(what: &str, output: &Output, unreachable: &[&str]) -> Error {
    let stderr = output.stderr_text();
    let stdout = output.stdout_text();
    let said = match stderr.trim() {
        "" => stdout.trim(),
        stderr => stderr,
    };
    let error = Error::new(
        ErrorKind::CommandFailed,
        format!(
            "{what} failed (exit code {:?}): {}",
            output.exit_code,
            excerpt(said)
        ),
    );
    if unreachable.iter().any(|sign| said.contains(sign)) {
        error.temporary()
    } else {
        error
    }
}

/// What a [`CliScheduler::withdraw_command`] prints when the job had not started and is
/// now cancelled.
pub const WITHDRAWN: &str = "withdrawn";
/// What a [`CliScheduler::withdraw_command`] prints when a part of the job had started (and
/// it was left running).
pub const STARTED: &str = "started";
/// What a [`CliScheduler::withdraw_command`] prints when the job had ended or is unknown.
pub const ENDED: &str = "ended";

/// What a withdraw command that succeeded printed last; `None` for a failure or a word of
/// its own.
fn withdrawal(output: &Output) -> Option<Withdrawal> {
    if !output.success() {
        return None;
    }
    match output.stdout_text().lines().last()?.trim() {
        WITHDRAWN => Some(Withdrawal::Withdrawn),
        STARTED => Some(Withdrawal::Started),
        ENDED => Some(Withdrawal::Ended),
        _ => None,
    }
}

/// A [`BatchBackend`] driving scheduler `S`'s command-line tools through a [`Shell`]
/// (usually one multiplexed SSH connection), with its jobs in [`JobDirs`]. A submit is
/// one remote command, idempotent on the key; status, find, cancel and version are `S`'s
/// commands; output, cleanup and the exit-code files are the job directories'.
#[derive(Debug)]
pub struct RemoteBackend<S> {
    scheduler: S,
    jobs: JobDirs,
    submits: SubmitLocks,
    events: Option<Arc<dyn EventSource>>,
}

impl<S: CliScheduler> RemoteBackend<S> {
    /// A backend that works through `shell`, configured by `config`
    /// ([`CliScheduler::configure`]). Nothing runs until the first call.
    pub fn new(shell: Arc<dyn Shell>, config: S::Config) -> Result<Self> {
        let (scheduler, settings) = S::configure(config)?;
        let jobs = JobDirs::new(shell, &settings.work_dir, settings.command_timeout)?;
        Ok(Self {
            events: scheduler.events(&jobs),
            scheduler,
            jobs,
            submits: SubmitLocks::default(),
        })
    }

    /// The scheduler half.
    pub fn scheduler(&self) -> &S {
        &self.scheduler
    }

    /// The job directories.
    pub fn jobs(&self) -> &JobDirs {
        &self.jobs
    }

    /// The directory of `key`'s job.
    async fn dir_of(&self, key: &JobKey) -> Result<String> {
        Ok(format!("{}/jobs/{key}", self.jobs.work().await?))
    }

    /// Where `spec`'s files are staged: its working directory, or `WORK/staged/KEY`.
    async fn stage_root(&self, spec: &JobSpec) -> Result<String> {
        match &spec.working_dir {
            Some(dir) => Ok(dir.clone()),
            None => Ok(format!("{}/staged/{}", self.jobs.work().await?, spec.key)),
        }
    }

    /// Refuses what `S` cannot run (the checks of every submit) before anything is sent;
    /// the environment file the submit writes.
    fn submittable(&self, spec: &JobSpec) -> Result<String> {
        spec.validate()?;
        self.capabilities().check(spec, S::NAME)?;
        self.scheduler.check(spec)?;
        environment_file(spec)
    }

    /// The job of a key another submit claimed: in flight in another process (another
    /// backend, another program), its scheduler may not list the job until its submit
    /// command returns (condor_submit takes longer than sbatch), so the key's recorded id
    /// and the scheduler are asked until that submit could have ended
    /// ([`CLAIM_WAIT`], at most the command time limit). A claim still without a job then
    /// was cut off: [`SubmitOutcomeUnknown`](ErrorKind::SubmitOutcomeUnknown).
    async fn claimed(&self, key: &JobKey, dir: &str) -> Result<JobId> {
        let deadline = tokio::time::Instant::now() + CLAIM_WAIT.min(self.jobs.timeout());
        loop {
            if let Some(id) = self.jobs.recorded_id(key).await? {
                return Ok(JobId::from(id));
            }
            if let Some(id) = self.scheduler.find(&self.jobs, key, dir).await? {
                return Ok(id);
            }
            if tokio::time::Instant::now() + CLAIM_POLL > deadline {
                return Err(claimed_without_job(key, S::SCHEDULER, dir));
            }
            tokio::time::sleep(CLAIM_POLL).await;
        }
    }

    /// The error for a submit `S` refused: temporary when the scheduler did not answer,
    /// else [`Rejected`](ErrorKind::Rejected) with what it said and, when `S` knows its
    /// words, the kind of refusal (which decides whether it is temporary).
    fn refused(&self, spec: &JobSpec, program: &str, refusal: &Output) -> Error {
        let failure = self.scheduler.failure(program, refusal);
        if failure.is_temporary() {
            return failure;
        }
        let context = self.scheduler.rejection_context(spec, refusal);
        let rejected = super::rejected(&spec.key, S::SCHEDULER, &context, refusal);
        match self.scheduler.refusal(refusal) {
            Some(kind) => rejected.with_refusal(kind),
            None => rejected,
        }
    }
}

/// A spec ready to send: what [`JobDirs::submit_many`] writes and runs for it.
struct Prepared<'a> {
    spec: Cow<'a, JobSpec>,
    dir: String,
    files: Vec<(&'static str, String)>,
    command: Vec<String>,
}

impl<S: CliScheduler> RemoteBackend<S> {
    /// The files and command of `spec` (checked by [`Self::submittable`], which gave
    /// `environment`); `inputs_manifest` lists the inputs staged into a working directory of
    /// the user's own.
    async fn prepare<'a>(
        &self,
        spec: Cow<'a, JobSpec>,
        environment: String,
        inputs_manifest: String,
    ) -> Result<Prepared<'a>> {
        let dir = self.dir_of(&spec.key).await?;
        let rendered = self.scheduler.render_submit(&spec, &dir)?;
        // The task count, for fetch_output to tell a task the job does not have.
        let tasks = format!("{}\n", spec.task_count());
        // Where the job runs, for a stage-out by its id alone.
        let working_dir = spec.working_dir.clone().unwrap_or_else(|| dir.clone());
        let mut files = vec![
            ("env.sh", environment),
            ("tasks", tasks),
            (WORKING_DIR_FILE, working_dir),
        ];
        if !inputs_manifest.is_empty() {
            files.push((STAGED_INPUTS_FILE, inputs_manifest));
        }
        files.extend(rendered.files);
        Ok(Prepared {
            spec,
            dir,
            files,
            command: rendered.command,
        })
    }

    /// Submits `prepared` ([`JobDirs::submit_many`]), their keys locked by the caller, and
    /// turns each outcome into the job's id or its own error.
    async fn send(&self, prepared: Vec<Prepared<'_>>) -> Vec<Result<JobId>> {
        let jobs: Vec<SubmitJob<'_>> = prepared
            .iter()
            .map(|job| SubmitJob {
                spec: &job.spec,
                files: job.files.iter().map(|(n, c)| (*n, c.as_str())).collect(),
                command: job.command.clone(),
            })
            .collect();
        let outcomes = self.jobs.submit_many(&jobs).await;
        let mut answers = Vec::with_capacity(prepared.len());
        for (job, outcome) in prepared.iter().zip(outcomes) {
            answers.push(match outcome {
                Ok(Submitted::New(id) | Submitted::Existing(id)) => Ok(JobId::from(id)),
                Ok(Submitted::Claimed) => self.claimed(&job.spec.key, &job.dir).await,
                Ok(Submitted::Refused(output)) => {
                    let program = job.command.first().map_or("", String::as_str);
                    Err(self.refused(&job.spec, program, &output))
                }
                Err(err) => Err(err),
            });
        }
        answers
    }
}

/// The error for a spec a batch left without an answer, which would be a bug of the batch.
fn left_out<T>() -> Result<T> {
    Err(Error::new(
        ErrorKind::UnexpectedOutput,
        "the batched submit left a job without an answer",
    ))
}

#[async_trait]
impl<S: CliScheduler> BatchBackend for RemoteBackend<S> {
    fn name(&self) -> &str {
        S::NAME
    }

    /// `S`'s, and cleanup, which the job directories bring.
    fn capabilities(&self) -> Capabilities {
        self.scheduler
            .capabilities()
            .with_cleanup(true)
            .with_staging(true)
    }

    fn apply_directives(&self, spec: JobSpec) -> Result<(JobSpec, DirectiveReport)> {
        self.scheduler.apply_directives(spec)
    }

    async fn submit(&self, spec: &JobSpec) -> Result<JobId> {
        self.submit_with(spec, &Transfer::default()).await
    }

    /// The idempotent submit; a spec that stages files first sends them
    /// ([`StagingDir::stage_in`]) to its working directory, its `workingDir` or else
    /// `WORK/staged/KEY`, which then becomes the job's working directory. A key that
    /// already has a job sends nothing. The submit itself is a batch of one
    /// ([`submit_many`](Self::submit_many)'s path).
    async fn submit_with(&self, spec: &JobSpec, transfer: &Transfer) -> Result<JobId> {
        let environment = self.submittable(spec)?;
        let _in_flight = self.submits.lock(&spec.key).await;
        if !spec.stages_files() {
            let prepared = self
                .prepare(Cow::Borrowed(spec), environment, String::new())
                .await?;
            return self
                .send(vec![prepared])
                .await
                .pop()
                .unwrap_or_else(left_out);
        }
        if let Some(id) = self.jobs.recorded_id(&spec.key).await? {
            return Ok(JobId::from(id));
        }
        let root = self.stage_root(spec).await?;
        let staging = StagingDir::new(self.jobs.shell(), &root, self.jobs.timeout());
        let inputs = staging
            .stage_in(&spec.stage_in, &spec.stage_limits, transfer)
            .await?;
        // Inputs staged into a working directory of the user's own are removed one by
        // one by cleanup; WORK/staged/KEY goes whole.
        let inputs_manifest = match spec.working_dir {
            Some(_) => inputs.files.join("\n"),
            None => String::new(),
        };
        let mut staged = spec.clone();
        staged.working_dir = Some(inputs.root);
        let prepared = self
            .prepare(Cow::Owned(staged), environment, inputs_manifest)
            .await?;
        self.send(vec![prepared])
            .await
            .pop()
            .unwrap_or_else(left_out)
    }

    /// Sends the specs in as few remote commands as fit ([`JobDirs::submit_many`]: one `sh`
    /// session per batch of at most [`MAX_JOBS_PER_BATCH`](super::MAX_JOBS_PER_BATCH) jobs
    /// whose command line fits), each job keeping [`submit`](Self::submit)'s guarantees: its
    /// key's lock in this process is held for the whole batch, a key claimed in the work
    /// directory is never submitted twice, and each job gets its own answer. A spec that
    /// stages files, and a key that appears again later in `specs`, are submitted after the
    /// batch, one by one, as [`submit`](Self::submit) does.
    async fn submit_many(&self, specs: &[JobSpec]) -> Vec<Result<JobId>> {
        let mut answers: Vec<Option<Result<JobId>>> = specs.iter().map(|_| None).collect();
        // Locked in key order, so that two overlapping batches cannot wait for each other.
        let mut batch: Vec<(usize, &JobSpec)> = Vec::new();
        let mut later = Vec::new();
        let mut seen = HashSet::new();
        for (index, spec) in specs.iter().enumerate() {
            if spec.stages_files() || !seen.insert(&spec.key) {
                later.push(index);
            } else {
                batch.push((index, spec));
            }
        }
        batch.sort_by(|a, b| a.1.key.cmp(&b.1.key));
        let mut guards = Vec::with_capacity(batch.len());
        for (_, spec) in &batch {
            guards.push(self.submits.lock(&spec.key).await);
        }
        let mut sent = Vec::new();
        let mut prepared = Vec::new();
        for (index, spec) in batch {
            let ready = match self.submittable(spec) {
                Ok(environment) => {
                    self.prepare(Cow::Borrowed(spec), environment, String::new())
                        .await
                }
                Err(err) => Err(err),
            };
            match ready {
                Ok(ready) => {
                    sent.push(index);
                    prepared.push(ready);
                }
                Err(err) => answers[index] = Some(Err(err)),
            }
        }
        for (index, answer) in sent.into_iter().zip(self.send(prepared).await) {
            answers[index] = Some(answer);
        }
        drop(guards);
        for index in later {
            answers[index] = Some(self.submit(&specs[index]).await);
        }
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(left_out))
            .collect()
    }

    /// Fetches the outputs of job `id` from the working directory its submit recorded
    /// (see [`StagingDir::stage_out`]), once its status shows it ended.
    async fn stage_out(
        &self,
        id: &JobId,
        outputs: &[StageOut],
        limits: &StageLimits,
        transfer: &Transfer,
    ) -> Result<StagedOutputs> {
        let number = job_number_of(id.as_str(), S::JOB_ID)?;
        // First, so that a job cleaned up (whose scheduler may then not know it) is NotFound.
        let root = self.jobs.working_dir_of(number).await?;
        let succeeded = succeeded_once_ended(id, &self.status_of(id).await?)?;
        StagingDir::new(self.jobs.shell(), &root, self.jobs.timeout())
            .stage_out(outputs, succeeded, limits, transfer)
            .await
    }

    async fn find(&self, key: &JobKey) -> Result<Option<JobId>> {
        match self.jobs.recorded_id(key).await? {
            Some(id) => Ok(Some(JobId::from(id))),
            None => {
                let dir = self.dir_of(key).await?;
                self.scheduler.find(&self.jobs, key, &dir).await
            }
        }
    }

    async fn status(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobStatus>> {
        let (numbers, mut statuses) = job_numbers(ids, S::JOB_ID);
        if numbers.is_empty() {
            return Ok(statuses);
        }
        let found = self.scheduler.status(&self.jobs, &numbers).await?;
        if found.len() != numbers.len() {
            return Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!(
                    "the {} backend gave {} statuses for {} jobs",
                    S::NAME,
                    found.len(),
                    numbers.len()
                ),
            ));
        }
        // A valid id is its own job number.
        statuses.extend(numbers.iter().map(|number| JobId::from(*number)).zip(found));
        Ok(statuses)
    }

    async fn cancel(&self, id: &JobId) -> Result<()> {
        let number = job_number_of(id.as_str(), S::JOB_ID)?;
        let work = self.jobs.work().await?;
        let output = self
            .jobs
            .run(self.scheduler.cancel_command(work, number))
            .await?;
        self.scheduler.cancelled(number, &output)
    }

    async fn withdraw(&self, id: &JobId) -> Result<Withdrawal> {
        let number = job_number_of(id.as_str(), S::JOB_ID)?;
        let work = self.jobs.work().await?;
        let Some(command) = self.scheduler.withdraw_command(work, number) else {
            return Err(cannot_withdraw(S::NAME, id));
        };
        let output = self.jobs.run(command).await?;
        withdrawal(&output).ok_or_else(|| self.scheduler.failure("withdraw", &output))
    }

    async fn fetch_output(&self, id: &JobId, request: &OutputRequest) -> Result<JobOutput> {
        let number = job_number_of(id.as_str(), S::JOB_ID)?;
        self.jobs.fetch_output(number, request).await
    }

    /// Reads up to 100 windows in one command ([`JobDirs::fetch_outputs`]); an id that is
    /// not the scheduler's answers InvalidInput without being sent.
    async fn fetch_outputs(&self, requests: &[(JobId, OutputRequest)]) -> Vec<Result<JobOutput>> {
        let mut answers = unanswered(requests.len());
        let (mut sent, mut windows) = (Vec::new(), Vec::new());
        for (index, (id, request)) in requests.iter().enumerate() {
            match job_number_of(id.as_str(), S::JOB_ID) {
                Ok(number) => {
                    sent.push(index);
                    windows.push((number, request));
                }
                Err(err) => answers[index] = Some(Err(err)),
            }
        }
        for (index, read) in sent
            .into_iter()
            .zip(self.jobs.fetch_outputs(&windows).await)
        {
            answers[index] = Some(read);
        }
        each_answered(answers, "an output window")
    }

    /// Removes the job's directory (script, output, exit codes) once the scheduler reports
    /// the job ended; see [`JobDirs::cleanup`].
    async fn cleanup(&self, key: &JobKey) -> Result<()> {
        self.jobs.cleanup(self, key).await
    }

    /// Refuses what a submit would refuse (the checks and the rendering, with Unsupported
    /// as InvalidInput: [`refused_by_submit`]), then asks `S`
    /// ([`CliScheduler::estimate_start`]).
    async fn estimate_start(&self, spec: &JobSpec) -> Result<StartEstimate> {
        self.submittable(spec).map_err(refused_by_submit)?;
        let dir = self.dir_of(&spec.key).await?;
        self.scheduler
            .render_submit(spec, &dir)
            .map_err(refused_by_submit)?;
        self.scheduler.estimate_start(&self.jobs, spec, &dir).await
    }

    /// [`CliScheduler::events`]: for SLURM, PBS and at the job wrapper's records, followed
    /// by one command per work directory ([`WrapperEvents`](super::WrapperEvents)); for
    /// HTCondor its user job event log.
    fn events(&self) -> Option<Arc<dyn EventSource>> {
        self.events.clone()
    }

    async fn version(&self) -> Result<String> {
        let command = self.scheduler.version_command();
        let what = std::iter::once(command.get_program())
            .chain(command.get_args().iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let output = self.jobs.run(command).await?;
        if !output.success() {
            return Err(self.scheduler.failure(&what, &output));
        }
        self.scheduler.parse_version(&output)
    }
}

/// How long a submit that found its key claimed by another waits for that submit's job.
const CLAIM_WAIT: Duration = Duration::from_secs(20);
/// How often it looks meanwhile.
const CLAIM_POLL: Duration = Duration::from_millis(250);

/// The error for [`Submitted::Claimed`] when the scheduler holds no job with the key
/// either: a submit is in flight or was cut off; temporary, since trying again soon answers.
fn claimed_without_job(key: &JobKey, scheduler: &str, dir: &str) -> Error {
    Error::new(
        ErrorKind::SubmitOutcomeUnknown,
        format!(
            "another submit of job {key} is in flight or was cut off before {scheduler} \
             answered; try again shortly (its job directory is {dir})"
        ),
    )
    .temporary()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::MockShell;

    /// A scheduler that answers for the first job number asked about only.
    #[derive(Debug)]
    struct ForgetsAllButOne;

    #[async_trait]
    impl CliScheduler for ForgetsAllButOne {
        type Config = ();
        const NAME: &'static str = "forgetful";
        const SCHEDULER: &'static str = "Forgetful";
        const JOB_ID: &'static str = "a forgetful job id";
        const UNREACHABLE: &'static [&'static str] = &[];

        fn configure((): ()) -> Result<(Self, WorkSettings)> {
            let settings = WorkSettings {
                work_dir: "/w".to_owned(),
                command_timeout: Duration::from_secs(1),
            };
            Ok((Self, settings))
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::NONE
        }

        fn render_submit(&self, _: &JobSpec, _: &str) -> Result<SubmitCommand> {
            Ok(SubmitCommand {
                files: Vec::new(),
                command: vec!["submit".to_owned()],
            })
        }

        async fn find(&self, _: &JobDirs, _: &JobKey, _: &str) -> Result<Option<JobId>> {
            Ok(None)
        }

        async fn status(&self, _: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>> {
            Ok(numbers
                .iter()
                .take(1)
                .map(|n| JobStatus::unknown(format!("job {n}")))
                .collect())
        }

        fn cancel_command(&self, _: &str, number: &str) -> Command {
            Command::new("cancel").arg(number)
        }

        fn cancelled(&self, _: &str, _: &Output) -> Result<()> {
            Ok(())
        }

        fn version_command(&self) -> Command {
            Command::new("version")
        }

        fn parse_version(&self, output: &Output) -> Result<String> {
            Ok(output.stdout_text())
        }
    }

    /// The backend, through a shell that must never be asked to run anything.
    fn backend() -> RemoteBackend<ForgetsAllButOne> {
        let mut shell = MockShell::new();
        shell.expect_run().never();
        RemoteBackend::new(Arc::new(shell), ()).unwrap()
    }

    #[tokio::test]
    async fn ids_that_are_no_job_numbers_are_unknown_without_a_command() {
        let ids = [JobId::from("x;y"), JobId::from("")];
        let statuses = backend().status(&ids).await.unwrap();
        assert_eq!(statuses.len(), 2);
        let reason = statuses[&ids[0]].reason.as_deref().unwrap();
        assert_eq!(reason, "\"x;y\" is not a forgetful job id");
    }

    #[tokio::test]
    async fn a_scheduler_that_leaves_jobs_out_is_a_clear_error() {
        let forgetful = backend();
        let one = forgetful.status(&[JobId::from("1")]).await.unwrap();
        assert_eq!(one[&JobId::from("1")].reason.as_deref(), Some("job 1"));
        let err = forgetful
            .status(&[JobId::from("1"), JobId::from("2")])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnexpectedOutput);
        assert_eq!(
            err.message(),
            "the forgetful backend gave 1 statuses for 2 jobs"
        );
    }

    #[tokio::test]
    async fn estimates_refuse_what_a_submit_refuses_and_are_unsupported_by_default() {
        let key = JobKey::new("k").unwrap();
        let mut boxed = JobSpec::new(key.clone(), "n", "true");
        boxed.container = Some(crate::spec::Container::new("docker://alpine"));
        let err = backend().estimate_start(&boxed).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(
            err.message().contains("does not support containers"),
            "{err}"
        );

        let (shell, _) = crate::conformance::scripted::scripted_shell("/w", Vec::new());
        let err = RemoteBackend::<ForgetsAllButOne>::new(shell, ())
            .unwrap()
            .estimate_start(&JobSpec::new(key, "n", "true"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert_eq!(
            err.message(),
            "the forgetful backend cannot estimate when job k would start"
        );
    }

    /// A scheduler whose numbering restarts at every submit: it runs the job to its end
    /// at once and always answers 7.
    #[derive(Debug)]
    struct Repeats;

    #[async_trait]
    impl CliScheduler for Repeats {
        type Config = String;
        const NAME: &'static str = "repeats";
        const SCHEDULER: &'static str = "Repeats";
        const JOB_ID: &'static str = "a repeats job id";
        const UNREACHABLE: &'static [&'static str] = &[];

        fn configure(work_dir: String) -> Result<(Self, WorkSettings)> {
            let command_timeout = Duration::from_secs(10);
            Ok((
                Self,
                WorkSettings {
                    work_dir,
                    command_timeout,
                },
            ))
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::NONE
        }

        fn render_submit(&self, _: &JobSpec, dir: &str) -> Result<SubmitCommand> {
            let run = "cd \"$1\" && sh script.sh >task-0.stdout 2>task-0.stderr; \
                       echo \"exit $?\" >task-0.exit; echo 7";
            Ok(SubmitCommand {
                files: Vec::new(),
                command: ["sh", "-c", run, "sh", dir].map(str::to_owned).to_vec(),
            })
        }

        async fn find(&self, _: &JobDirs, _: &JobKey, _: &str) -> Result<Option<JobId>> {
            Ok(None)
        }

        async fn status(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>> {
            let files = jobs.job_files(numbers).await?;
            Ok(numbers
                .iter()
                .map(|n| match files.get(*n).and_then(|f| f.task_status(0)) {
                    Some(status) => status,
                    None => JobStatus::unknown(format!("job {n}")),
                })
                .collect())
        }

        fn cancel_command(&self, _: &str, number: &str) -> Command {
            Command::new("true").arg(number)
        }

        fn cancelled(&self, _: &str, _: &Output) -> Result<()> {
            Ok(())
        }

        fn version_command(&self) -> Command {
            Command::new("true")
        }

        fn parse_version(&self, output: &Output) -> Result<String> {
            Ok(output.stdout_text())
        }
    }

    /// The skeleton's half of "a reused native id never shows an old job's status or
    /// output": a number the scheduler gives again is refused while another key's job holds
    /// it, and that job keeps its status and output. (The scheduler's half, a status by
    /// number that asks about the new job, only unique ids avoid.)
    #[tokio::test]
    async fn an_id_given_again_never_takes_over_the_old_job() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().to_str().unwrap().to_owned();
        let shell = Arc::new(crate::shell::LocalShell);
        let backend = RemoteBackend::<Repeats>::new(shell, work).unwrap();
        let old = JobSpec::new(JobKey::new("old").unwrap(), "n", "echo old");
        let new = JobSpec::new(JobKey::new("new").unwrap(), "n", "echo new; exit 3");
        let id = backend.submit(&old).await.unwrap();
        assert_eq!(id, JobId::from("7"));

        for _ in 0..2 {
            let err = backend.submit(&new).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{err}");
            assert!(!err.is_temporary());
            for words in [
                "gave job new the id 7, which job old already holds",
                "never repeat",
            ] {
                assert!(err.message().contains(words), "{words:?} in {err}");
            }
        }
        let status = backend.status_of(&id).await.unwrap();
        assert_eq!(status.exit_code, Some(0), "{status:?}");
        let output = backend.fetch_output(&id, &OutputRequest::tail(100)).await;
        assert_eq!(output.unwrap().stdout.data, b"old\n");
        assert_eq!(backend.find(&old.key).await.unwrap(), Some(id.clone()));
        assert_eq!(backend.find(&new.key).await.unwrap(), None);

        // Once the old job is cleaned up, its number is free for another key.
        backend.cleanup(&old.key).await.unwrap();
        let again = JobSpec::new(JobKey::new("again").unwrap(), "n", "echo again");
        assert_eq!(backend.submit(&again).await.unwrap(), id);
        let output = backend.fetch_output(&id, &OutputRequest::tail(100)).await;
        assert_eq!(output.unwrap().stdout.data, b"again\n");
    }

    #[test]
    fn failures_are_temporary_only_with_a_sign_the_scheduler_did_not_answer() {
        let signs = ["Connection refused", "timed out"];
        for (stdout, stderr, temporary, quoted) in [
            (
                "",
                "error: Connection refused\n",
                true,
                "error: Connection refused",
            ),
            (
                "",
                "squeue: error: Socket timed out\n",
                true,
                "Socket timed out",
            ),
            (
                "",
                "Invalid partition name specified\n",
                false,
                "Invalid partition",
            ),
            // HTCondor's tools say some things on stdout alone.
            (
                "ERROR: Connection refused\n",
                "",
                true,
                "ERROR: Connection refused",
            ),
            (
                "Connection refused\n",
                "bad attribute\n",
                false,
                "bad attribute",
            ),
            ("", "", false, "failed (exit code Some(1)): "),
        ] {
            let output = Output {
                exit_code: Some(1),
                stdout: stdout.into(),
                stderr: stderr.into(),
                ..Output::default()
            };
            let error = scheduler_failure("tool", &output, &signs);
            assert_eq!(error.kind(), ErrorKind::CommandFailed);
            assert_eq!(error.is_temporary(), temporary, "{stdout:?} {stderr:?}");
            assert!(error.message().contains(quoted), "{error}");
            assert!(error.message().starts_with("tool failed"), "{error}");
        }
    }
}
