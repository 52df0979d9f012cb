//! The job wrapper protocol: what the script a scheduler runs for each task (the wrapper)
//! leaves in its job directory, and what reads it back. The local backend's wrapper and
//! every command-line backend's ([`crate::remote`]) keep it, so this module depends on
//! neither: [`render_script`] fills in the shell functions and exit codes every wrapper
//! shares, [`job_wrapper`] a template's per-job values, [`BatchJobWrapper`] is the one
//! wrapper batch schedulers (SLURM, PBS) run, [`TaskEnd`] and [`JobFiles`] read how tasks
//! ended (and [`JobFiles::overrule`] puts that over a scheduler's answer),
//! [`WrapperEvents`] follows the events wrappers record, and [`job_number`] is what a job
//! id must look like to reach a path or a command line.
//!
//! The job wrapper is the script the scheduler runs for each task (`job.sh` among
//! [`SubmitCommand::files`](crate::remote::SubmitCommand::files), or SLURM's batch
//! script); it is the backend's, and [`RemoteBackend`](crate::remote::RemoteBackend) reads
//! what it leaves. In the job directory `WORK/jobs/KEY` (`DIR`):
//!
//! | file | written by | what it holds, and who reads it |
//! | --- | --- | --- |
//! | `script.sh`, `env.sh`, `tasks` | the submit, before the scheduler is asked | the user's script; the environment (`export` lines the wrapper sources in the shell that runs the script, after it found `bash`: the job's `PATH` need not hold it); the task count, which `fetch_output` checks a task against |
//! | `job_id` | the submit, once the scheduler printed the id | the id; a wrapper that needs it (for `BATCHBRIDGE_JOB_ID` or its events) waits for it, as a scheduler may start the job first |
//! | `task-N.stdout`, `task-N.stderr` | the wrapper, for task N (0 without an array) | the script's output, which `fetch_output` reads in bounded windows |
//! | `task-N.exit` | the wrapper, when task N ended, to a temporary name then renamed | one line, `exit CODE` or `signal NUMBER`: the end [`JobDirs::job_files`](crate::remote::JobDirs::job_files) reads once the scheduler has forgotten the job; a script that never ran is `exit 70` ([`NOT_STARTED_EXIT_CODE`]) |
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
//! `@RUNNER_ARGS@` (the container runtime).
//! [`CliScheduler`](crate::remote::CliScheduler)'s example is a whole wrapper of ten lines
//! that keeps this protocol.

mod events;
mod job_number;
mod task_end;
mod template;

pub(crate) use events::ResolvedDir;
pub use events::{
    EVENT_MAX_AGE_DAYS, EVENT_TICK, JOB_EVENT, MAX_EVENT_NAME, WrapperEvents, parse_event,
};
pub use job_number::{job_number, job_number_of, job_numbers};
pub use task_end::{JobFiles, NATIVE_STATE_EXIT_FILE, TaskEnd, parse_job_files};
pub use template::{BatchJobWrapper, job_wrapper};

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
/// use batchbridge_core::wrapper::ENTER_WORKING_DIR;
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
/// stderr): [`Submitted::Refused`](crate::remote::Submitted::Refused). `@SUBMIT_REFUSED@` in a script.
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
/// use batchbridge_core::wrapper::{NOT_STARTED_EXIT_CODE, render_script};
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
