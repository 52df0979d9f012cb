//! What the tool exits with, and the errors that lead there.

use std::fmt;
use std::process::ExitCode;

use batchbridge_core::{Error, ErrorKind, JobState, JobStatus};

use crate::describe::{self, ExitStatus};

/// The exit codes the tool documents (`batchbridge --help` lists them): apart from `run`
/// and `wait` passing on a job's own code, each names one kind of trouble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Everything asked for was done.
    Success = 0,
    /// A job failed or was cancelled (without an exit code of its own to pass on).
    JobFailed = 1,
    /// A command line or a value on it was refused; nothing was sent anywhere.
    Usage = 2,
    /// A job named is unknown to its scheduler and has no job directory: a wrong id, or a
    /// job whose files were removed after the scheduler forgot it.
    UnknownJob = 66,
    /// A cluster could not be reached or did not answer in time.
    Unreachable = 69,
    /// Something else went wrong: the scheduler refused, an I/O error.
    Failure = 70,
    /// A wait reached its `--timeout`; the job goes on.
    TimedOut = 75,
    /// SSH refused the login: unknown or changed host key, or the key was not accepted.
    Refused = 77,
    /// The config file cannot be read or is wrong.
    Config = 78,
    /// Interrupted (Ctrl-C) while following a job.
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// What `run` and `wait` exit with for a job that ended: its own exit code, 128 + the
/// signal that killed it (as a shell reports it), as [`describe::exit_status`] shows them,
/// or [`Exit::JobFailed`], which is also what a cancelled job gets, whatever signal the
/// cancel sent.
pub(crate) fn job_exit_code(status: &JobStatus) -> u8 {
    match (status.state, describe::exit_status(status)) {
        (JobState::Succeeded, _) => 0,
        (JobState::Cancelled, _) => Exit::JobFailed as u8,
        (_, Some(ExitStatus::Code(code))) => u8::try_from(code & 0xff).unwrap_or(1).max(1),
        (_, Some(ExitStatus::Signal(signal))) => {
            u8::try_from(128 + signal.clamp(1, 127)).unwrap_or(1)
        }
        (_, None) => Exit::JobFailed as u8,
    }
}

/// An error to print: what went wrong, what to do about it, and the exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) exit: Exit,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

impl CliError {
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::new(Exit::Config, message)
    }

    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exit code for a library error of `kind`.
pub(crate) fn exit_for(kind: ErrorKind) -> Exit {
    match kind {
        ErrorKind::InvalidInput | ErrorKind::Unsupported => Exit::Usage,
        ErrorKind::Unreachable | ErrorKind::ConnectionLost | ErrorKind::Timeout => {
            Exit::Unreachable
        }
        ErrorKind::HostKeyMismatch | ErrorKind::AuthenticationFailed | ErrorKind::LoginRequired => {
            Exit::Refused
        }
        ErrorKind::WaitTimedOut => Exit::TimedOut,
        _ => Exit::Failure,
    }
}

impl From<Error> for CliError {
    fn from(err: Error) -> Self {
        Self::new(exit_for(err.kind()), err.to_string())
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        Self::new(Exit::Failure, err.to_string())
    }
}

impl From<serde_json::Error> for CliError {
    fn from(err: serde_json::Error) -> Self {
        Self::new(Exit::Failure, format!("cannot write JSON: {err}"))
    }
}

/// This module's results.
pub(crate) type CliResult<T> = std::result::Result<T, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_passes_on_its_own_code_or_its_signal() {
        let ended = |state, code: Option<i32>, signal: Option<i32>| {
            let mut status = JobStatus::new(state, "X");
            status.exit_code = code;
            status.signal = signal;
            job_exit_code(&status)
        };
        assert_eq!(ended(JobState::Succeeded, Some(0), None), 0);
        assert_eq!(ended(JobState::Failed, Some(3), None), 3);
        assert_eq!(
            ended(JobState::Failed, Some(256), None),
            1,
            "a code a shell cannot see"
        );
        assert_eq!(ended(JobState::Failed, None, Some(9)), 137);
        assert_eq!(ended(JobState::Cancelled, None, None), 1);
        assert_eq!(
            ended(JobState::Cancelled, None, Some(15)),
            1,
            "the cancel's signal"
        );
    }
}
