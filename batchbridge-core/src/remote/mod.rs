//! Backends that drive a scheduler's command-line tools over a
//! [`Shell`](crate::shell::Shell): the shared skeleton, the job directories they keep on
//! the cluster, and the remote commands that create and read them. SLURM, HTCondor, PBS
//! and the at example are built on it.
//!
//! # Writing a command-line backend
//!
//! A backend for a scheduler driven by its command-line tools is render + parse + a small
//! impl: implement [`CliScheduler`] (render the submit, find a key's job in the
//! scheduler's own records, ask about many jobs at once and parse the answer, the cancel
//! and version commands, the words that make a failure temporary), and
//! [`RemoteBackend<YourScheduler>`](RemoteBackend) is the
//! [`BatchBackend`](crate::BatchBackend). It brings the rest, the same for every
//! scheduler:
//!
//! - validation ([`JobSpec::validate`](crate::JobSpec::validate),
//!   [`Capabilities::check`](crate::Capabilities::check), then [`CliScheduler::check`])
//!   before anything is sent;
//! - the idempotent submit: one remote command that claims `WORK/jobs/KEY` with an atomic
//!   rename, writes the script, `env.sh`, `tasks` and the scheduler's files, runs its
//!   command and records the id it prints, so a key never makes two jobs; a second submit
//!   of a key in flight in this process waits for the first ([`SubmitLocks`]); a key claimed
//!   by a submit cut off mid-way is looked up with [`CliScheduler::find`];
//! - `find` by the recorded id, `status` by job number (any other id is Unknown), `cancel`,
//!   `version`, bounded `fetch_output`, and `cleanup` of an ended job's directory;
//! - the exit-code files a job wrapper writes, read for many jobs in one command
//!   ([`JobDirs::job_files`]), and the wrapper's shared parts ([`render_script`], and
//!   [`job_wrapper`] for a wrapper that a batch scheduler runs).
//!
//! [`CliScheduler`] has a whole backend as its example. What a wrapper keeps in its job
//! directory, its placeholders and the exit codes the scripts and Rust share
//! (`*_EXIT_CODE`) are the wrapper protocol, in [`crate::wrapper`] (re-exported here), which
//! the local backend keeps too.
//!
//! # Job directories
//!
//! Under a work directory `WORK` (resolved to an absolute path once, so that a path reads
//! the same on the login node and inside a job):
//!
//! ```text
//! WORK/jobs/KEY/        one per job, claimed by an atomic rename of its staged directory
//!                       (a rename onto a directory that is not empty fails): script.sh
//!                       (the user's script), env.sh, the backend's own files, claim (who
//!                       claimed it: machine boot, pid namespace, shell, nonce),
//!                       submit.stderr (once the scheduler is asked), job_id, and per task
//!                       task-N.stdout and task-N.stderr
//! WORK/claiming/NONCE/  a submit batch's staged job directories, until it claims them,
//!                       and +owner (its shell, as in claim); a later batch removes the
//!                       directory of a shell that is gone
//! WORK/ids/ID           a symlink to ../jobs/KEY, so a job is found by its id
//! WORK/events/ID.TASK.started, ID.TASK.exit.N, ID.TASK.signal.N
//!                       empty files, one per task start and end, that a wrapper calling
//!                       job_event writes and one follower per work directory reads
//!                       (WrapperEvents)
//! ```
//!
//! A backend whose job wrapper records how each task ended, `exit N` or `signal N` in
//! `task-N.exit` (written to a temporary name and renamed), and whose cancel leaves a
//! `cancel-requested` file, reads both for any number of jobs with one
//! [`JobDirs::job_files`]: the end of a job its scheduler has forgotten.
//!
//! They, and the job's event files, stay until [`JobDirs::cleanup`] removes them, once the
//! job has ended.
//!
//! Every remote command is a constant script whose values arrive as positional parameters
//! ([`Command::sh`](crate::shell::Command::sh)); nothing a user wrote is ever parsed as
//! shell code.
//!
//! # Where each part is
//!
//! - `backend.rs`: [`CliScheduler`] and [`RemoteBackend`];
//! - `settings.rs`: what every backend's configuration holds, [`WorkSettings`] and
//!   [`SubmitDefaults`];
//! - `job_dirs.rs`: [`JobDirs`], the job directories, their files and their cleanup;
//! - `work_dir.rs`: [`WorkDir`] and [`environment_file`];
//! - `submit.rs` and `submit.sh`: [`JobDirs::submit_many`] (and [`JobDirs::submit`], a batch
//!   of one), [`SubmitLocks`], [`Submitted`], [`rejected`];
//! - `output.rs`: [`JobDirs::fetch_output`];
//! - `staging.rs` and `staging.sh`: [`StagingDir`], the files a job stages in and out
//!   ([`crate::staging`]), streamed through the same shell.

mod answers;
mod backend;
mod job_dirs;
mod output;
mod settings;
mod staging;
mod submit;
mod tar_stream;
mod work_dir;

pub use backend::{
    CliScheduler, ENDED, MAX_IDS_ON_COMMAND_LINE, RemoteBackend, STARTED, SubmitCommand, WITHDRAWN,
};
pub use job_dirs::JobDirs;
pub use settings::{SubmitDefaults, WorkSettings};
pub use staging::{StagedInputs, StagingDir};
pub use submit::{
    BATCHES_IN_FLIGHT, MAX_JOBS_PER_BATCH, SubmitJob, SubmitLocks, Submitted, rejected,
};
pub use work_dir::{MAX_ENVIRONMENT_BYTES, WorkDir, environment_file};
// The wrapper protocol, where backends have always found it.
pub use crate::wrapper::{
    ENTER_WORKING_DIR, EVENT_MAX_AGE_DAYS, EVENT_TICK, JOB_EVENT, JobFiles, MAX_EVENT_NAME,
    NATIVE_STATE_EXIT_FILE, NO_SUCH_JOB_EXIT_CODE, NO_SUCH_TASK_EXIT_CODE, NOT_STARTED_EXIT_CODE,
    SUBMIT_ID_TAKEN_EXIT_CODE, SUBMIT_NO_ID_EXIT_CODE, SUBMIT_NOT_SENT_EXIT_CODE,
    SUBMIT_REFUSED_EXIT_CODE, TaskEnd, WrapperEvents, job_number, job_number_of, job_numbers,
    job_wrapper, parse_event, parse_job_files, render_script,
};
