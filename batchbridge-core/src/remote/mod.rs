//! Backends that drive a scheduler's command-line tools over a [`Shell`]: the shared
//! skeleton, the job directories they keep on the cluster, and the remote commands that
//! create and read them. SLURM, HTCondor and the at example are built on it.
//!
//! # Writing a command-line backend
//!
//! A backend for a scheduler driven by its command-line tools is render + parse + a small
//! impl: implement [`CliScheduler`] (render the submit, find a key's job in the
//! scheduler's own records, ask about many jobs at once and parse the answer, the cancel
//! and version commands, the words that make a failure temporary), and
//! [`RemoteBackend<YourScheduler>`](RemoteBackend) is the [`BatchBackend`]. It brings
//! the rest, the same for every scheduler:
//!
//! - validation ([`JobSpec::validate`], [`Capabilities::check`](crate::Capabilities::check),
//!   then [`CliScheduler::check`]) before anything is sent;
//! - the idempotent submit: one remote command that claims `WORK/jobs/KEY` with an atomic
//!   `mkdir`, writes the script, `env.sh`, `tasks` and the scheduler's files, runs its
//!   command and records the id it prints, so a key never makes two jobs; a second submit
//!   of a key in flight in this process waits for the first ([`SubmitLocks`]); a key claimed
//!   by a submit cut off mid-way is looked up with [`CliScheduler::find`];
//! - `find` by the recorded id, `status` by job number (any other id is Unknown), `cancel`,
//!   `version`, bounded `fetch_output`, and `cleanup` of an ended job's directory;
//! - the exit-code files a job wrapper writes, read for many jobs in one command
//!   ([`JobDirs::job_files`]), and the wrapper's shared parts ([`render_script`], and
//!   [`job_wrapper`] for a wrapper that a batch scheduler runs).
//!
//! [`CliScheduler`] has a whole backend as its example. Exit codes the scripts and Rust
//! share are constants here (`*_EXIT_CODE`), which scripts name by placeholder.
//!
//! # Job directories
//!
//! Under a work directory `WORK` (resolved to an absolute path once, so that a path reads
//! the same on the login node and inside a job):
//!
//! ```text
//! WORK/jobs/KEY/        one per job, claimed by an atomic mkdir: script.sh (the user's
//!                       script), env.sh, the backend's own files, job_id, and per task
//!                       task-N.stdout and task-N.stderr
//! WORK/ids/ID           a symlink to ../jobs/KEY, so a job is found by its id
//! WORK/events/ID.TASK.started, ID.TASK.exit.N, ID.TASK.signal.N
//!                       empty files, one per task start and end, that a wrapper calling
//!                       job_event writes and one follower per work directory reads
//!                       (WrapperEvents)
//! ```
//!
//! A backend whose job wrapper records how each task ended, `exit N` or `signal N` in
//! `task-N.exit` (written to a temporary name and renamed), and whose cancel leaves a
//! `cancel-requested` file, reads both for any number of jobs with one [`JobDirs::job_files`]: the
//! end of a job its scheduler has forgotten.
//!
//! They, and the job's event files, stay until [`JobDirs::cleanup`] removes them, once the
//! job has ended.
//!
//! # The job wrapper protocol
//!
//! The job wrapper is the script the scheduler runs for each task (`job.sh` among
//! [`SubmitCommand::files`], or SLURM's batch script); it is the backend's, and
//! [`RemoteBackend`] reads what it leaves. In the job directory `WORK/jobs/KEY` (`DIR`):
//!
//! | file | written by | what it holds, and who reads it |
//! | --- | --- | --- |
//! | `script.sh`, `env.sh`, `tasks` | the submit, before the scheduler is asked | the user's script; the environment (`export` lines the wrapper sources in the shell that runs the script, after it found `bash`: the job's `PATH` need not hold it); the task count, which `fetch_output` checks a task against |
//! | `job_id` | the submit, once the scheduler printed the id | the id; a wrapper that needs it (for `BATCHBRIDGE_JOB_ID` or its events) waits for it, as a scheduler may start the job first |
//! | `task-N.stdout`, `task-N.stderr` | the wrapper, for task N (0 without an array) | the script's output, which `fetch_output` reads in bounded windows |
//! | `task-N.exit` | the wrapper, when task N ended, to a temporary name then renamed | one line, `exit CODE` or `signal NUMBER`: the end [`JobDirs::job_files`] reads once the scheduler has forgotten the job; a script that never ran is `exit 70` ([`NOT_STARTED_EXIT_CODE`]) |
//! | `task-N.reason` | [`ENTER_WORKING_DIR`], for a task whose working directory cannot be entered | why the script never ran, its first line the status's reason |
//! | `cancel-requested` | the backend's cancel command (through the `WORK/ids/ID` link) | a mark: a task that then ends by a signal is Cancelled, not Failed; a wrapper that finds it on start runs nothing (a scheduler may start a job a cancel just reached) |
//! | `WORK/events/ID.TASK.*` | the wrapper's `job_event` ([`JOB_EVENT`]), after `task-N.exit` | the start and end of each task, for the follower ([`WrapperEvents`]) |
//!
//! Any other file in `DIR` is the backend's own (at's wrapper keeps its pid in
//! `wrapper.pid` for its cancel). The script runs with `BATCHBRIDGE_TASK_INDEX` set, in the
//! spec's working directory, else `DIR`.
//!
//! A wrapper is written with placeholders, which [`render_script`] fills in:
//! `@ENTER_WORKING_DIR@` and `@JOB_EVENT@` (the shell functions [`ENTER_WORKING_DIR`] and
//! [`JOB_EVENT`]) and the exit codes (`@NOT_STARTED@` and the other `*_EXIT_CODE`s); a
//! wrapper that a batch scheduler runs with the spec's values written in goes through
//! [`job_wrapper`], which adds `@KEY@`, `@DIR@`, `@WORKDIR@`, `@RUNNER@` and
//! `@RUNNER_ARGS@` (the container runtime). [`CliScheduler`]'s example is a whole wrapper
//! of ten lines that keeps this protocol.
//!
//! Every remote command is a constant script whose values arrive as positional parameters
//! ([`Command::sh`]); nothing a user wrote is ever parsed as shell code.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OnceCell, OwnedMutexGuard};

use crate::backend::{
    BatchBackend, JobId, JobOutput, MAX_OUTPUT_CHUNK, OutputChunk, OutputRange, OutputRequest,
    refuse_active,
};
use crate::cause::{CancelledBy, FailureCause};
use crate::error::{Error, ErrorKind, Result, excerpt};
use crate::shell::{Command, MAX_COMMAND_LINE, Output, Shell};
use crate::spec::{JobKey, JobSpec};
use crate::state::{JobState, JobStatus};

mod backend;
mod events;
mod job_dirs;
mod wrapper;

pub use backend::{
    CliScheduler, ENDED, RemoteBackend, STARTED, SubmitCommand, WITHDRAWN, WorkSettings,
};
pub use events::{
    EVENT_MAX_AGE_DAYS, EVENT_TICK, JOB_EVENT, MAX_EVENT_NAME, WrapperEvents, parse_event,
};
pub use job_dirs::JobDirs;
pub use wrapper::job_wrapper;

/// The submit script, with its exit codes filled in.
static SUBMIT: LazyLock<String> = LazyLock::new(|| render_script(include_str!("submit.sh")));
/// A POSIX shell function, `enter_working_dir DIR REASON_FILE`, that every job wrapper
/// (the local backend's, SLURM's batch script, HTCondor's `job.sh`) defines and runs before
/// anything of the job's own: it enters the spec's working directory, or writes why it
/// cannot (`the script never ran: cannot enter its working directory DIR: it does not
/// exist`) to the task's stderr and to REASON_FILE, and the wrapper then exits
/// [`NOT_STARTED_EXIT_CODE`]. Backends report REASON_FILE as the status's reason. A
/// scheduler's own handling of a missing directory is never relied on: SLURM runs such a
/// job in /tmp.
///
/// ```
/// use batchbridge_core::remote::ENTER_WORKING_DIR;
///
/// let dir = tempfile::tempdir()?;
/// let reason = dir.path().join("reason");
/// let script = format!("{ENTER_WORKING_DIR}\nenter_working_dir \"$1\" \"$2\" || exit 70\npwd");
/// let run = |target: &str| {
///     std::process::Command::new("sh")
///         .args(["-c", script.as_str(), "sh", target, reason.to_str().unwrap()])
///         .output()
/// };
/// let entered = run(dir.path().to_str().unwrap())?;
/// assert_eq!(entered.status.code(), Some(0));
/// let missing = run("/nonexistent/dir")?;
/// assert_eq!(missing.status.code(), Some(70));
/// assert_eq!(
///     std::fs::read_to_string(&reason)?,
///     "the script never ran: cannot enter its working directory /nonexistent/dir: \
///      it does not exist (or a parent directory cannot be searched)\n"
/// );
/// # Ok::<(), std::io::Error>(())
/// ```
pub const ENTER_WORKING_DIR: &str = include_str!("enter_working_dir.sh");
/// The exit code of a task whose wrapper could not start the script: its working directory
/// could not be entered ([`ENTER_WORKING_DIR`]) or its environment could not be set. Why is
/// in the task's stderr (and, for the working directory, in the status's reason). Wrappers
/// write it as `@NOT_STARTED@` ([`render_script`]).
pub const NOT_STARTED_EXIT_CODE: i32 = 70;
/// The exit code of the submit script when the scheduler refused the job (its message on
/// stderr): [`Submitted::Refused`]. `@SUBMIT_REFUSED@` in a script.
pub const SUBMIT_REFUSED_EXIT_CODE: i32 = 71;
/// The exit code of the submit script when the scheduler accepted the job but printed no
/// job id. `@SUBMIT_NO_ID@` in a script.
pub const SUBMIT_NO_ID_EXIT_CODE: i32 = 72;
/// The exit code of the submit script when it stopped before the scheduler was asked (a
/// file could not be written, the script arrived cut short); the key is free again.
/// `@SUBMIT_NOT_SENT@` in a script.
pub const SUBMIT_NOT_SENT_EXIT_CODE: i32 = 73;
/// The exit code of the submit script when the scheduler gave the new job an id that
/// `WORK/ids/` already links to another key's job (its numbering restarted): the link is
/// left as it is, so the old job keeps its status, output and events. `ID OTHER_KEY` on
/// stderr. `@SUBMIT_ID_TAKEN@` in a script.
pub const SUBMIT_ID_TAKEN_EXIT_CODE: i32 = 74;
/// The exit code of the output script for a job number the work directory has no job for.
/// `@NO_SUCH_JOB@` in a script.
pub const NO_SUCH_JOB_EXIT_CODE: i32 = 3;
/// The exit code of the output script for a task the job does not have (after printing
/// its task count). `@NO_SUCH_TASK@` in a script.
pub const NO_SUCH_TASK_EXIT_CODE: i32 = 4;

/// Every exit code the remote scripts and Rust share, by the placeholder a script writes.
const EXIT_CODES: [(&str, i32); 7] = [
    ("@NOT_STARTED@", NOT_STARTED_EXIT_CODE),
    ("@SUBMIT_REFUSED@", SUBMIT_REFUSED_EXIT_CODE),
    ("@SUBMIT_NO_ID@", SUBMIT_NO_ID_EXIT_CODE),
    ("@SUBMIT_NOT_SENT@", SUBMIT_NOT_SENT_EXIT_CODE),
    ("@SUBMIT_ID_TAKEN@", SUBMIT_ID_TAKEN_EXIT_CODE),
    ("@NO_SUCH_JOB@", NO_SUCH_JOB_EXIT_CODE),
    ("@NO_SUCH_TASK@", NO_SUCH_TASK_EXIT_CODE),
];

/// A shell script written with placeholders, ready to run: each exit code's placeholder
/// (`@NOT_STARTED@`, `@SUBMIT_REFUSED@`, … see the `*_EXIT_CODE` constants) becomes its
/// number, `@ENTER_WORKING_DIR@` the function [`ENTER_WORKING_DIR`] and `@JOB_EVENT@` the
/// function [`JOB_EVENT`], so that the
/// scripts and the Rust reading their exit codes share one definition. Job wrappers and
/// core's own scripts go through it.
///
/// ```
/// use batchbridge_core::remote::{NOT_STARTED_EXIT_CODE, render_script};
///
/// let wrapper = render_script("@ENTER_WORKING_DIR@\nenter_working_dir \"$1\" r || exit @NOT_STARTED@");
/// assert!(wrapper.starts_with("# `enter_working_dir DIR REASON_FILE`"));
/// assert!(wrapper.ends_with(&format!("|| exit {NOT_STARTED_EXIT_CODE}")));
/// ```
pub fn render_script(template: &str) -> String {
    let mut script = template
        .replace("@ENTER_WORKING_DIR@", ENTER_WORKING_DIR.trim_end())
        .replace("@JOB_EVENT@", JOB_EVENT.trim_end());
    for (placeholder, code) in EXIT_CODES {
        script = script.replace(placeholder, &code.to_string());
    }
    script
}

/// The output script, with its exit codes filled in.
static FETCH_OUTPUT: LazyLock<String> =
    LazyLock::new(|| render_script(include_str!("fetch_output.sh")));
const JOB_FILES: &str = include_str!("job_files.sh");
const CLEANUP: &str = include_str!("cleanup.sh");

/// The most bytes an environment file may have once quoted: it travels as one argument of
/// the submit command, which must stay well under the remote shell's 128 KiB limit.
pub const MAX_ENVIRONMENT_BYTES: usize = 64 * 1024;

/// A work directory on a cluster, resolved to an absolute path (and created) on first use.
///
/// ```
/// use batchbridge_core::remote::WorkDir;
///
/// assert!(WorkDir::new(".batchbridge/slurm").is_ok());
/// assert!(WorkDir::new("").is_err());
/// assert!(WorkDir::new("two\nlines").is_err());
/// ```
#[derive(Debug)]
pub struct WorkDir {
    configured: String,
    absolute: OnceCell<String>,
}

impl WorkDir {
    /// A work directory at `path`: absolute, or relative to the login directory.
    pub fn new(path: impl Into<String>) -> Result<Self> {
        let configured = path.into();
        if configured.is_empty() || configured.contains(['\0', '\n', '\r']) {
            return Err(Error::invalid_input(
                "work_dir: must be a non-empty path without NUL bytes or line breaks",
            ));
        }
        Ok(Self {
            configured,
            absolute: OnceCell::new(),
        })
    }

    /// The path as configured.
    pub fn configured(&self) -> &str {
        &self.configured
    }

    /// The absolute path, with `jobs/`, `ids/` and `events/` created the first time it is
    /// asked for.
    pub async fn resolve(&self, shell: &dyn Shell, timeout: Duration) -> Result<&str> {
        let dir = self
            .absolute
            .get_or_try_init(|| async {
                let command = Command::sh(
                    "mkdir -p -- \"$1/jobs\" \"$1/ids\" \"$1/events\" && cd -- \"$1\" && pwd -P",
                    [self.configured.as_str()],
                )
                .timeout(timeout);
                let output = shell
                    .run(&command)
                    .await?
                    .check("creating the work directory")?;
                let dir = output.stdout_text().trim_end_matches('\n').to_owned();
                if !dir.starts_with('/') || dir.contains(['\n', '\r']) {
                    return Err(Error::new(
                        ErrorKind::UnexpectedOutput,
                        format!("the work directory resolved to {dir:?}, not an absolute path"),
                    ));
                }
                Ok(dir)
            })
            .await?;
        Ok(dir)
    }
}

/// `env.sh`: the spec's [`environment_script`](JobSpec::environment_script), refused (with
/// a clear error) beyond [`MAX_ENVIRONMENT_BYTES`].
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_core::remote::{MAX_ENVIRONMENT_BYTES, environment_file};
///
/// let mut spec = JobSpec::new(JobKey::new("k")?, "n", "true");
/// spec.environment.insert("BIG".into(), "x".repeat(MAX_ENVIRONMENT_BYTES));
/// assert!(environment_file(&spec).is_err());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn environment_file(spec: &JobSpec) -> Result<String> {
    let file = spec.environment_script()?;
    if file.len() > MAX_ENVIRONMENT_BYTES {
        return Err(Error::invalid_input(format!(
            "environment: {} bytes once quoted, more than the {MAX_ENVIRONMENT_BYTES} a submit \
             can carry; put large values in a file the script reads",
            file.len()
        )));
    }
    Ok(file)
}

/// The submits in flight in this process, one lock per key. [`RemoteBackend`] holds the
/// key's lock around its [`JobDirs::submit`], so a second submit of the same key waits for
/// the first and then finds its job (`existing`), instead of seeing the key claimed by a
/// submit that has not answered yet. Submits in other processes still meet
/// [`Submitted::Claimed`].
///
/// ```
/// use batchbridge_core::JobKey;
/// use batchbridge_core::remote::SubmitLocks;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let locks = SubmitLocks::default();
/// let key = JobKey::new("k-1")?;
/// let soon = std::time::Duration::from_millis(50);
/// let first = locks.lock(&key).await;
/// let second = tokio::time::timeout(soon, locks.lock(&key)).await;
/// assert!(second.is_err(), "the key's submit is in flight");
/// let other = tokio::time::timeout(soon, locks.lock(&JobKey::new("k-2")?)).await;
/// assert!(other.is_ok(), "other keys are free");
/// drop(first);
/// assert!(tokio::time::timeout(soon, locks.lock(&key)).await.is_ok());
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct SubmitLocks {
    /// Weak, so that a key's lock goes away with its last submit.
    by_key: Mutex<HashMap<JobKey, Weak<AsyncMutex<()>>>>,
}

impl SubmitLocks {
    /// Waits until no other submit of `key` in this process is in flight, and holds the
    /// key until the guard is dropped.
    pub async fn lock(&self, key: &JobKey) -> OwnedMutexGuard<()> {
        self.lock_of(key).lock_owned().await
    }

    fn lock_of(&self, key: &JobKey) -> Arc<AsyncMutex<()>> {
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        by_key.retain(|_, lock| lock.strong_count() > 0);
        if let Some(lock) = by_key.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(AsyncMutex::new(()));
        by_key.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }
}

/// What [`JobDirs::submit`] found or did.
#[derive(Debug)]
pub enum Submitted {
    /// The scheduler accepted the job and gave it this id.
    New(String),
    /// The key already had a job, with this id; nothing was submitted.
    Existing(String),
    /// Another submit of the key is in flight (in another process: see [`SubmitLocks`]), or
    /// was cut off before the scheduler answered; only the scheduler itself can tell which
    /// job, if any, holds the key.
    Claimed,
    /// The scheduler refused the job; its output says why. The key was released.
    Refused(Output),
}

/// The error for [`Submitted::Refused`] when the scheduler refused the job itself (not
/// because it was unreachable): permanent [`Rejected`](ErrorKind::Rejected), with
/// `context` (e.g. ` on partition "debug"`) and the scheduler's message.
pub fn rejected(key: &JobKey, scheduler: &str, context: &str, refusal: &Output) -> Error {
    Error::new(
        ErrorKind::Rejected,
        format!(
            "{scheduler} refused job {key}{context}: {}",
            excerpt(refusal.stderr_text().trim())
        ),
    )
}

/// The job numbers among `ids`, sorted and without repeats, and an Unknown status for
/// every id that is not one (`what` says what it is not, e.g. "a SLURM job id").
///
/// ```
/// use batchbridge_core::{JobId, JobState};
/// use batchbridge_core::remote::job_numbers;
///
/// let ids = [JobId::from("12"), JobId::from("x;y"), JobId::from("3"), JobId::from("12")];
/// let (numbers, unknown) = job_numbers(&ids, "a job id");
/// assert_eq!(numbers, ["12", "3"]);
/// assert_eq!(unknown[&JobId::from("x;y")].state, JobState::Unknown);
/// ```
pub fn job_numbers<'a>(ids: &'a [JobId], what: &str) -> (Vec<&'a str>, HashMap<JobId, JobStatus>) {
    let mut numbers = Vec::with_capacity(ids.len());
    let mut unknown = HashMap::new();
    for id in ids {
        match job_number_of(id.as_str(), what) {
            Ok(number) => numbers.push(number),
            Err(err) => {
                unknown.insert(id.clone(), JobStatus::unknown(err.message()));
            }
        }
    }
    numbers.sort_unstable();
    numbers.dedup();
    (numbers, unknown)
}

/// A submit in one remote command: claims `WORK/jobs/KEY` with an atomic `mkdir`, writes
/// the spec's script (as `script.sh`, from stdin, any size) and each of `files` (name,
/// content; `job.sh` is made executable), then runs `scheduler_command` and records the job
/// id it prints first (its leading digits).
///
/// Everything but the script travels on the command line, which is refused (as
/// [`InvalidInput`](ErrorKind::InvalidInput), before anything is sent) when it would be
/// longer than a remote shell accepts ([`MAX_COMMAND_LINE`]).
///
/// A script that arrives shorter than it was sent (the connection dropped while it was on
/// its way) is never submitted: the remote command releases the key and fails.
///
/// A connection lost or a timeout mid-way is
/// [`SubmitOutcomeUnknown`](ErrorKind::SubmitOutcomeUnknown), temporary: submitting the same
/// key again returns the same job.
async fn submit(
    shell: &dyn Shell,
    work: &str,
    spec: &JobSpec,
    files: &[(&str, &str)],
    scheduler_command: Vec<String>,
    timeout: Duration,
) -> Result<Submitted> {
    let mut args = vec![
        work.to_owned(),
        spec.key.to_string(),
        spec.script.len().to_string(),
        files.len().to_string(),
    ];
    for (name, content) in files {
        args.push((*name).to_owned());
        args.push((*content).to_owned());
    }
    args.push("--".to_owned());
    args.extend(scheduler_command);
    let command = Command::sh(&SUBMIT, args)
        .stdin(spec.script.as_bytes())
        .timeout(timeout);
    check_command_line(&command, spec)?;
    let output = match shell.run(&command).await {
        Ok(output) => output,
        Err(err) if matches!(err.kind(), ErrorKind::ConnectionLost | ErrorKind::Timeout) => {
            return Err(Error::new(
                ErrorKind::SubmitOutcomeUnknown,
                format!(
                    "the submit of job {} may or may not have reached the scheduler ({err}); \
                     submit it again or call find: its key never makes a second job",
                    spec.key
                ),
            )
            .temporary());
        }
        Err(err) => return Err(err),
    };
    match output.exit_code {
        Some(0) => {}
        Some(SUBMIT_REFUSED_EXIT_CODE) => return Ok(Submitted::Refused(output)),
        Some(SUBMIT_ID_TAKEN_EXIT_CODE) => return Err(id_taken(&spec.key, &output)),
        _ => {
            return Err(Error::new(
                ErrorKind::CommandFailed,
                format!(
                    "submitting job {} failed (exit code {:?}): {}",
                    spec.key,
                    output.exit_code,
                    excerpt(output.stderr_text().trim())
                ),
            ));
        }
    }
    let reply = output.stdout_text();
    let mut words = reply.split_whitespace();
    match (words.next(), words.next().and_then(job_number)) {
        (Some("submitted"), Some(id)) => Ok(Submitted::New(id.to_owned())),
        (Some("existing"), Some(id)) => Ok(Submitted::Existing(id.to_owned())),
        (Some("claimed"), None) => Ok(Submitted::Claimed),
        _ => Err(Error::new(
            ErrorKind::UnexpectedOutput,
            format!("submitting job {} printed {reply:?}", spec.key),
        )),
    }
}

/// The error for a submit whose scheduler gave an id that another key's job holds: ids
/// must never repeat within a work directory ([`CliScheduler`]'s "Job ids"). Permanent:
/// the key's job is not recorded, and submitting the key again says the same.
fn id_taken(key: &JobKey, output: &Output) -> Error {
    let text = output.stderr_text();
    let (id, other) = text.trim().split_once(' ').unwrap_or(("?", "?"));
    Error::new(
        ErrorKind::UnexpectedOutput,
        format!(
            "the scheduler gave job {key} the id {}, which job {} already holds in this work \
             directory: job ids must never repeat (a scheduler whose numbering restarts needs \
             ids that carry their epoch); the new job was submitted but is not recorded for \
             {key}: cancel it with the scheduler's own tools",
            excerpt(id),
            excerpt(other)
        ),
    )
}

/// Refuses a submit command too long for a remote shell with a message that names the
/// spec fields that travel on the command line, so that the caller knows what to shorten.
fn check_command_line(command: &Command, spec: &JobSpec) -> Result<()> {
    let length = command.to_shell_line()?.len();
    if length > MAX_COMMAND_LINE {
        return Err(Error::invalid_input(format!(
            "job spec {}: the submit command is {length} bytes once quoted, more than the \
             {MAX_COMMAND_LINE} a remote shell accepts on one command line; shorten the \
             environment, workingDir or passthrough options (the script travels apart and \
             may be any size)",
            spec.key
        )));
    }
    Ok(())
}

/// The id recorded in `WORK/jobs/KEY/job_id`, if the key has a job submitted through this
/// work directory.
async fn recorded_id(
    shell: &dyn Shell,
    work: &str,
    key: &JobKey,
    timeout: Duration,
) -> Result<Option<String>> {
    let command = Command::sh(
        "cat -- \"$1/jobs/$2/job_id\" 2>/dev/null; exit 0",
        [work, key.as_str()],
    )
    .timeout(timeout);
    let output = shell.run(&command).await?.check("reading a job id")?;
    Ok(job_number(output.stdout_text().trim()).map(str::to_owned))
}

/// `text` if it is a job number: digits only, at most 20 of them. Anything else never
/// reaches a command line or a path.
///
/// ```
/// use batchbridge_core::remote::job_number;
///
/// assert_eq!(job_number("4242"), Some("4242"));
/// assert_eq!(job_number("../etc"), None);
/// assert_eq!(job_number(""), None);
/// ```
pub fn job_number(text: &str) -> Option<&str> {
    (!text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit()))
        .then_some(text)
}

/// `id`'s [`job_number`], or the [`InvalidInput`](ErrorKind::InvalidInput) error every
/// backend gives for an id that cannot be one of its jobs (`what` names what it is not,
/// e.g. "a SLURM job id").
///
/// ```
/// use batchbridge_core::ErrorKind;
/// use batchbridge_core::remote::job_number_of;
///
/// assert_eq!(job_number_of("42", "a job id").unwrap(), "42");
/// let err = job_number_of("../42", "a SLURM job id").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert_eq!(err.message(), "\"../42\" is not a SLURM job id");
/// ```
pub fn job_number_of<'a>(id: &'a str, what: &str) -> Result<&'a str> {
    job_number(id).ok_or_else(|| Error::invalid_input(format!("{:?} is not {what}", excerpt(id))))
}

/// A bounded window of one task's stdout and stderr from `WORK/ids/ID/`, streamed with
/// `dd` so that no file is ever read whole. `id` must be a [`job_number`]: anything else is
/// [`InvalidInput`](ErrorKind::InvalidInput) (see [`job_number_of`]); a number this work
/// directory has no job for is [`NotFound`](ErrorKind::NotFound). A task the job does not
/// have (by its `tasks` file, which holds the task count) is
/// [`InvalidInput`](ErrorKind::InvalidInput).
async fn fetch_output(
    shell: &dyn Shell,
    work: &str,
    id: &str,
    request: &OutputRequest,
    timeout: Duration,
) -> Result<JobOutput> {
    let id = job_number_of(id, "a job id")?;
    let not_found = || {
        Error::new(
            ErrorKind::NotFound,
            format!(
                "job {id} has no output here: it was not submitted through this work directory"
            ),
        )
    };
    let task_number = request.task.unwrap_or(0);
    let task = task_number.to_string();
    let range = match request.range {
        OutputRange::Tail(n) => vec!["tail".to_owned(), n.min(MAX_OUTPUT_CHUNK).to_string()],
        OutputRange::Bytes { offset, len } => vec![
            "range".to_owned(),
            offset.to_string(),
            len.min(MAX_OUTPUT_CHUNK).to_string(),
        ],
    };
    let limit = usize::try_from(MAX_OUTPUT_CHUNK).unwrap_or(usize::MAX) + 64;
    let command = Command::sh(&FETCH_OUTPUT, [work, id, &task])
        .args(range)
        .output_limit(limit)
        .timeout(timeout);
    let output = shell.run(&command).await?;
    match output.exit_code {
        Some(NO_SUCH_JOB_EXIT_CODE) => return Err(not_found()),
        Some(NO_SUCH_TASK_EXIT_CODE) => {
            return Err(Error::invalid_input(format!(
                "job {id} has {} task(s); there is no task {task_number}",
                output.stdout_text().trim()
            )));
        }
        _ => {}
    }
    let output = output.check("reading job output")?;
    match (parse_window(&output.stdout), parse_window(&output.stderr)) {
        (Some(stdout), Some(stderr)) if !output.stdout_truncated && !output.stderr_truncated => {
            Ok(JobOutput { stdout, stderr })
        }
        _ => Err(Error::new(
            ErrorKind::UnexpectedOutput,
            format!("reading the output of job {id} gave no SIZE OFFSET header"),
        )),
    }
}

/// The [`JobStatus::native_state`] of a status that the job wrapper's `task-N.exit` file
/// decided, not the scheduler (which no longer knows the job).
///
/// ```
/// use batchbridge_core::remote::{NATIVE_STATE_EXIT_FILE, TaskEnd};
///
/// assert_eq!(TaskEnd::Exit(0).status(false).native_state, NATIVE_STATE_EXIT_FILE);
/// assert_eq!(NATIVE_STATE_EXIT_FILE, "exit-code file");
/// ```
pub const NATIVE_STATE_EXIT_FILE: &str = "exit-code file";

/// How a task ended, as the job wrapper recorded it in `task-N.exit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    /// The script exited with this code.
    Exit(i32),
    /// The wrapper was terminated by this signal (a cancel or a time limit).
    Signal(i32),
}

impl TaskEnd {
    /// A task's status from how it ended alone: exit 0 is Succeeded; any other exit is
    /// Failed with cause [`ExitCode`](FailureCause::ExitCode); a signal is Cancelled
    /// ([`CancelledBy::Request`]) when batchbridge asked for it (`cancel_requested`), else
    /// Failed with cause [`Signal`](FailureCause::Signal).
    ///
    /// ```
    /// use batchbridge_core::{CancelledBy, FailureCause, JobState};
    /// use batchbridge_core::remote::TaskEnd;
    ///
    /// let failed = TaskEnd::Exit(3).status(false);
    /// assert_eq!((failed.exit_code, failed.cause), (Some(3), Some(FailureCause::ExitCode(3))));
    /// let cancelled = TaskEnd::Signal(15).status(true);
    /// assert_eq!(cancelled.state, JobState::Cancelled);
    /// assert_eq!(cancelled.cause, Some(FailureCause::Cancelled(CancelledBy::Request)));
    /// assert_eq!(TaskEnd::Signal(9).status(false).cause, Some(FailureCause::Signal(9)));
    /// assert_eq!(TaskEnd::Exit(0).status(false).cause, None);
    /// ```
    pub fn status(self, cancel_requested: bool) -> JobStatus {
        match self {
            Self::Exit(0) => {
                JobStatus::new(JobState::Succeeded, NATIVE_STATE_EXIT_FILE).with_exit_code(0)
            }
            Self::Exit(code) => JobStatus::new(JobState::Failed, NATIVE_STATE_EXIT_FILE)
                .with_exit_code(code)
                .with_cause(FailureCause::ExitCode(code)),
            Self::Signal(signal) if cancel_requested => {
                JobStatus::new(JobState::Cancelled, NATIVE_STATE_EXIT_FILE)
                    .with_signal(signal)
                    .with_cause(FailureCause::Cancelled(CancelledBy::Request))
            }
            Self::Signal(signal) => JobStatus::new(JobState::Failed, NATIVE_STATE_EXIT_FILE)
                .with_signal(signal)
                .with_cause(FailureCause::Signal(signal)),
        }
    }
}

/// What the job directory of one job says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFiles {
    /// How many tasks the job was submitted with (its `tasks` file; 1 without one).
    pub tasks: u32,
    /// Whether batchbridge cancelled it (its `cancel-requested` file).
    pub cancel_requested: bool,
    /// The tasks that ended, by index.
    pub ended: BTreeMap<u32, TaskEnd>,
    /// Why a task's script never ran (its working directory could not be entered), by
    /// index: the first line of its `task-N.reason`.
    pub not_started: BTreeMap<u32, String>,
}

impl JobFiles {
    /// Task `index`'s status from these files alone, once its wrapper recorded an end:
    /// [`TaskEnd::status`], and for a task whose script never ran the reason from its
    /// `task-N.reason` and the cause [`NotStarted`](FailureCause::NotStarted).
    ///
    /// ```
    /// use batchbridge_core::FailureCause;
    /// use batchbridge_core::remote::parse_job_files;
    ///
    /// let jobs = parse_job_files("12 tasks 2 0\n12 task 0 exit 70\n12 why 0 no such dir\n");
    /// let never_ran = jobs["12"].task_status(0).unwrap();
    /// assert_eq!(never_ran.cause, Some(FailureCause::NotStarted));
    /// assert_eq!(never_ran.reason.as_deref(), Some("no such dir"));
    /// assert_eq!(jobs["12"].task_status(1), None, "task 1 recorded no end");
    /// ```
    pub fn task_status(&self, index: u32) -> Option<JobStatus> {
        let mut status = self.ended.get(&index)?.status(self.cancel_requested);
        if let Some(why) = self.not_started.get(&index) {
            status.reason = Some(why.clone());
            status.cause = Some(FailureCause::NotStarted);
        }
        Some(status)
    }
}

/// What the directories of jobs `ids` (each a [`job_number`]) under `WORK/ids/` say, in one
/// remote command; ids not submitted through this work directory are left out.
async fn job_files(
    shell: &dyn Shell,
    work: &str,
    ids: &[&str],
    timeout: Duration,
) -> Result<HashMap<String, JobFiles>> {
    let command =
        Command::sh(JOB_FILES, std::iter::once(work).chain(ids.iter().copied())).timeout(timeout);
    let output = shell
        .run(&command)
        .await?
        .check("reading job directories")?;
    Ok(parse_job_files(&output.stdout_text()))
}

/// Reads the job-files script's lines: `ID tasks N CANCELLED`, `ID task I exit|signal N` and
/// `ID why I TEXT`.
///
/// ```
/// use batchbridge_core::remote::{TaskEnd, parse_job_files};
///
/// let jobs = parse_job_files("12 tasks 1 1\n12 task 0 signal 15\n");
/// assert!(jobs["12"].cancel_requested);
/// assert_eq!(jobs["12"].ended[&0], TaskEnd::Signal(15));
/// ```
pub fn parse_job_files(text: &str) -> HashMap<String, JobFiles> {
    let mut jobs: HashMap<String, JobFiles> = HashMap::new();
    for line in text.lines() {
        if let [id, "why", index, why] = line.splitn(4, ' ').collect::<Vec<_>>().as_slice()
            && let Ok(index) = index.parse()
        {
            jobs.entry((*id).to_owned())
                .or_default()
                .not_started
                .insert(index, (*why).to_owned());
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [id, "tasks", count, cancelled] => {
                let files = jobs.entry((*id).to_owned()).or_default();
                files.tasks = count.parse().unwrap_or(1);
                files.cancel_requested = *cancelled == "1";
            }
            [id, "task", index, how, value] => {
                let (Ok(index), Ok(value)) = (index.parse(), value.parse()) else {
                    continue;
                };
                let end = match *how {
                    "exit" => TaskEnd::Exit(value),
                    "signal" => TaskEnd::Signal(value),
                    _ => continue,
                };
                jobs.entry((*id).to_owned())
                    .or_default()
                    .ended
                    .insert(index, end);
            }
            _ => tracing::warn!(line, "skipping a job-files line that does not parse"),
        }
    }
    jobs
}

/// [`BatchBackend::cleanup`] for a backend keeping its jobs in `work`: finds the key's job
/// (through `backend`, so a job only its scheduler remembers counts too), refuses it unless
/// its status shows it ended, then removes `WORK/jobs/KEY` and its `WORK/ids/ID` link in
/// one remote command. A key without a job, or whose directory is gone, is Ok.
async fn cleanup<B: BatchBackend + ?Sized>(
    backend: &B,
    shell: &dyn Shell,
    work: &str,
    key: &JobKey,
    timeout: Duration,
) -> Result<()> {
    if let Some(id) = backend.find(key).await? {
        refuse_active(key, &id, &backend.status_of(&id).await?)?;
    }
    let command = Command::sh(CLEANUP, [work, key.as_str()]).timeout(timeout);
    shell
        .run(&command)
        .await?
        .check("removing a job directory")?;
    Ok(())
}

/// Reads one stream of the fetch script: a `SIZE OFFSET` line, then the bytes.
fn parse_window(stream: &[u8]) -> Option<OutputChunk> {
    let newline = stream.iter().position(|b| *b == b'\n')?;
    let header = std::str::from_utf8(&stream[..newline]).ok()?;
    let (size, offset) = header.split_once(' ')?;
    Some(OutputChunk {
        data: stream[newline + 1..].to_vec(),
        offset: offset.parse().ok()?,
        total_size: size.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "name", "echo hi")
    }

    /// What bash makes of `variable` after reading `lines`.
    fn bash_value(lines: &str, variable: &str) -> String {
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("{lines}\nprintf '%s' \"${variable}\""))
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    #[test]
    fn environment_values_are_quoted_never_evaluated() {
        let mut spec = spec();
        spec.environment
            .insert("HOSTILE".into(), "$(touch /tmp/x) `id` ' \"\r\n;".into());
        spec.environment.insert("EMPTY".into(), String::new());
        let file = environment_file(&spec).unwrap();
        assert!(file.starts_with("# The environment of batchbridge job key-1.\n"));
        assert_eq!(bash_value(&file, "HOSTILE"), spec.environment["HOSTILE"]);
        assert_eq!(bash_value(&file, "EMPTY"), "");
    }

    #[test]
    fn an_environment_too_large_for_the_command_line_is_refused() {
        let mut spec = spec();
        spec.environment
            .insert("BIG".into(), "x".repeat(MAX_ENVIRONMENT_BYTES));
        let err = environment_file(&spec).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("environment"), "{err}");
        spec.environment.insert("BIG".into(), "x".repeat(60 * 1024));
        assert!(environment_file(&spec).is_ok());
    }

    #[tokio::test]
    async fn a_submit_command_too_long_for_a_remote_shell_is_refused_before_it_is_sent() {
        let mut shell = crate::shell::MockShell::new();
        shell.expect_run().never();
        // 80 000 bytes that quoting grows past the limit: what counts is the quoted line.
        let content = "'$".repeat(40_000);
        let err = submit(
            &shell,
            "/w",
            &spec(),
            &[("env.sh", content.as_str())],
            vec!["sbatch".to_owned()],
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(!err.is_temporary());
        for words in [
            "job spec key-1",
            "bytes once quoted",
            "environment, workingDir or passthrough",
        ] {
            assert!(err.message().contains(words), "{words:?} in {err}");
        }
    }

    /// Runs submit.sh locally in `work` with `stdin` as the script, announced as `size`
    /// bytes, and `command` as the scheduler's.
    async fn run_submit(
        work: &std::path::Path,
        size: usize,
        stdin: &[u8],
        command: &[&str],
    ) -> Output {
        let mut args = vec![
            work.to_str().unwrap().to_owned(),
            "key-1".to_owned(),
            size.to_string(),
            "0".to_owned(),
            "--".to_owned(),
        ];
        args.extend(command.iter().map(|word| (*word).to_owned()));
        crate::shell::LocalShell
            .run(&Command::sh(&SUBMIT, args).stdin(stdin))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_script_cut_short_on_its_way_is_never_submitted() {
        let work = tempfile::tempdir().unwrap();
        for dir in ["jobs", "ids"] {
            std::fs::create_dir(work.path().join(dir)).unwrap();
        }
        let scheduler_ran = work.path().join("scheduler-ran");
        let scheduler = ["touch", scheduler_ran.to_str().unwrap()];
        let script = b"sleep 1\nexit 8\n";

        let cut = run_submit(work.path(), script.len(), &script[..5], &scheduler).await;
        assert_eq!(cut.exit_code, Some(SUBMIT_NOT_SENT_EXIT_CODE), "{cut:?}");
        assert!(
            cut.stderr_text().contains(&format!(
                "the script arrived cut short: 5 of {} bytes",
                script.len()
            )),
            "{cut:?}"
        );
        assert!(!scheduler_ran.exists(), "the scheduler was never asked");
        assert!(
            !work.path().join("jobs/key-1").exists(),
            "the key is free again"
        );

        let whole = run_submit(work.path(), script.len(), script, &["echo", "42"]).await;
        assert_eq!(whole.stdout_text(), "submitted 42\n", "{whole:?}");
        assert_eq!(
            std::fs::read(work.path().join("jobs/key-1/script.sh")).unwrap(),
            script
        );
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

    #[test]
    fn a_refusal_quotes_a_bounded_excerpt_of_what_the_scheduler_said() {
        let echo = Output {
            exit_code: Some(1),
            stderr: format!(
                "sbatch: error: Invalid time specification (pos=0): {}",
                "x".repeat(1 << 20)
            )
            .into_bytes(),
            ..Output::default()
        };
        let err = rejected(&JobKey::new("key-1").unwrap(), "SLURM", "", &echo);
        assert_eq!(err.kind(), ErrorKind::Rejected);
        assert!(
            err.message()
                .starts_with("SLURM refused job key-1: sbatch: error: Invalid time")
        );
        assert!(
            err.message().len() < 2 * crate::error::MAX_QUOTED,
            "{}",
            err.message().len()
        );
        assert!(
            err.message().ends_with("more bytes)"),
            "{}",
            &err.message()[2000..]
        );
    }

    #[tokio::test]
    async fn a_huge_id_is_quoted_only_in_part() {
        let huge = JobId::from(format!("1;{}", "x".repeat(1 << 20)));
        let (_, unknown) = job_numbers(std::slice::from_ref(&huge), "a job id");
        let reason = unknown[&huge].reason.clone().unwrap();
        assert!(
            reason.len() < 2 * crate::error::MAX_QUOTED,
            "{} bytes",
            reason.len()
        );

        let mut shell = crate::shell::MockShell::new();
        shell.expect_run().never();
        let err = fetch_output(
            &shell,
            "/w",
            huge.as_str(),
            &OutputRequest::tail(1),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(
            err.message().len() < 2 * crate::error::MAX_QUOTED,
            "{} bytes",
            err.message().len()
        );
    }

    #[test]
    fn only_numbers_are_job_numbers() {
        for (id, ok) in [
            ("123", true),
            ("", false),
            ("123_1", false),
            ("12.0", false),
            ("../123", false),
            ("1;scancel -u me", false),
            ("123456789012345678901", false),
        ] {
            assert_eq!(job_number(id).is_some(), ok, "{id:?}");
        }
    }

    #[test]
    fn job_files_lines() {
        let out = "12 tasks 1 0\n12 task 0 exit 70\n12 why 0 cannot enter /a b: it is gone\n\
                   13 tasks 3 1\n13 task 0 exit 0\n13 task 2 signal 15\n\
                   14 tasks 1 0\nnonsense\n15 task x exit 1\n16 why x y\n";
        let jobs = parse_job_files(out);
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs["12"].ended[&0], TaskEnd::Exit(70));
        assert_eq!(jobs["12"].not_started[&0], "cannot enter /a b: it is gone");
        let array = &jobs["13"];
        assert_eq!((array.tasks, array.cancel_requested), (3, true));
        assert_eq!(
            array
                .ended
                .iter()
                .map(|(i, e)| (*i, *e))
                .collect::<Vec<_>>(),
            [(0, TaskEnd::Exit(0)), (2, TaskEnd::Signal(15))]
        );
        assert!(jobs["14"].ended.is_empty());
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

    /// A `@NAME@` left in a rendered script: a placeholder without a constant.
    fn leftover_placeholder(script: &str) -> Option<&str> {
        script.split('@').skip(1).step_by(2).find(|word| {
            !word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
    }

    #[test]
    fn every_placeholder_of_the_scripts_is_filled_in() {
        assert_eq!(
            leftover_placeholder("exit @NO_SUCH_CODE@"),
            Some("NO_SUCH_CODE")
        );
        for script in [SUBMIT.as_str(), FETCH_OUTPUT.as_str()] {
            assert_eq!(leftover_placeholder(script), None, "{script}");
        }
        // Each code appears in its script as a number of its own.
        let numbers = |script: &str| -> Vec<i32> {
            script
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|word| word.parse().ok())
                .collect()
        };
        let (submit, fetch) = (numbers(&SUBMIT), numbers(&FETCH_OUTPUT));
        for code in [
            SUBMIT_REFUSED_EXIT_CODE,
            SUBMIT_NO_ID_EXIT_CODE,
            SUBMIT_NOT_SENT_EXIT_CODE,
            SUBMIT_ID_TAKEN_EXIT_CODE,
        ] {
            assert!(submit.contains(&code), "{code}");
        }
        for code in [NO_SUCH_JOB_EXIT_CODE, NO_SUCH_TASK_EXIT_CODE] {
            assert!(fetch.contains(&code), "{code}");
        }
    }

    #[test]
    fn output_windows() {
        let chunk = parse_window(b"1048580 1048480\nxxEND\n").unwrap();
        assert_eq!(
            (chunk.total_size, chunk.offset, chunk.data.as_slice()),
            (1_048_580, 1_048_480, b"xxEND\n".as_slice())
        );
        let empty = parse_window(b"0 0\n").unwrap();
        assert!(empty.data.is_empty());
        let binary = parse_window(b"3 0\n\xff\n\0").unwrap();
        assert_eq!(binary.data, b"\xff\n\0");
        for bad in [&b""[..], b"12\nxx", b"a b\n", b"1 2"] {
            assert_eq!(parse_window(bad), None, "{bad:?}");
        }
    }
}
