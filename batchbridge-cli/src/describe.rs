//! A job's status in words: the state while it is waited for, how it ended, an array's
//! task counts, and its exit status.
//!
//! The exit status follows one rule for every backend ([`exit_status`]), whose answer the
//! table's EXIT column, `-o json`, the messages and `run`'s and `wait`'s own exit codes all
//! take.

use batchbridge_core::{JobState, JobStatus, TaskCounts};

/// `3 tasks: 2 succeeded, 1 running`, leaving out what none are.
pub(crate) fn tasks(tasks: &TaskCounts) -> String {
    let parts = [
        (tasks.succeeded, "succeeded"),
        (tasks.running, "running"),
        (tasks.pending, "pending"),
        (tasks.failed, "failed"),
        (tasks.cancelled, "cancelled"),
    ];
    let counts: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    format!("{} tasks: {}", tasks.total, counts.join(", "))
}

/// A job's state while it is waited for, with the scheduler's reason when it has one
/// (`Queued: Resources`): why a job has not started is what the person watching wants.
pub(crate) fn waiting(status: &JobStatus) -> String {
    match &status.reason {
        Some(reason) if !status.state.is_terminal() => format!("{:?}: {reason}", status.state),
        _ => format!("{:?}", status.state),
    }
}

/// How a job ended, for standard error: `Cancelled, signal 15`, `Failed, exit code 3: …`.
pub(crate) fn end(status: &JobStatus) -> String {
    let mut text = format!("{:?}", status.state);
    match exit_status(status) {
        Some(ExitStatus::Code(code)) => text.push_str(&format!(", exit code {code}")),
        Some(ExitStatus::Signal(signal)) => text.push_str(&format!(", signal {signal}")),
        None => {}
    }
    if let Some(reason) = &status.reason {
        text.push_str(&format!(": {reason}"));
    }
    text
}

/// How a job ended, as far as its own record tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    /// Its script exited with this code.
    Code(i32),
    /// This signal ended it.
    Signal(i32),
}

/// The one rule for every backend: a job shows an exit status only once it has ended
/// (Succeeded, Failed or Cancelled), and then how it ended, the signal that ended it before
/// an exit code; a code of 0 only for a job that succeeded. A running or queued job, an
/// array whose tasks still run among them, shows none; a cancelled job shows the signal
/// its wrapper recorded (`task-N.exit`: `signal 15`) when its backend read that record,
/// else nothing, never the 0 a scheduler's accounting writes for a job it killed (SLURM's
/// `0:0`) or that an array's succeeded tasks leave.
pub(crate) fn exit_status(status: &JobStatus) -> Option<ExitStatus> {
    if !status.state.is_terminal() {
        return None;
    }
    if let Some(signal) = status.signal {
        return Some(ExitStatus::Signal(signal));
    }
    match status.exit_code {
        Some(0) if status.state != JobState::Succeeded => None,
        code => code.map(ExitStatus::Code),
    }
}

/// `status` with the exit code and signal [`exit_status`] shows, and no other: what
/// `-o json` prints, so that scripts read what the table shows.
pub(crate) fn as_shown(mut status: JobStatus) -> JobStatus {
    let shown = exit_status(&status);
    status.exit_code = match shown {
        Some(ExitStatus::Code(code)) => Some(code),
        _ => None,
    };
    status.signal = match shown {
        Some(ExitStatus::Signal(signal)) => Some(signal),
        _ => None,
    };
    status
}

/// The EXIT column: `3`, `signal 15`, or empty.
pub(crate) fn exit_column(status: &JobStatus) -> String {
    match exit_status(status) {
        Some(ExitStatus::Code(code)) => code.to_string(),
        Some(ExitStatus::Signal(signal)) => format!("signal {signal}"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use batchbridge_core::JobState::*;

    use super::*;

    /// A case: what it is, the state, exit code and signal a backend reported, and the EXIT
    /// column shown.
    type Case = (
        &'static str,
        JobState,
        Option<i32>,
        Option<i32>,
        &'static str,
    );

    /// Each backend's report of a job, as it came before this rule, and what is shown: the
    /// column, and the JSON's exit code and signal (the same by construction, checked).
    #[test]
    fn one_exit_status_rule_for_every_backend() {
        #[rustfmt::skip]
        let cases: &[Case] = &[
            // what, state, exit code, signal reported => EXIT column
            ("a job that exited 0", Succeeded, Some(0), None, "0"),
            ("a job that exited 3", Failed, Some(3), None, "3"),
            ("killed by SIGKILL", Failed, None, Some(9), "signal 9"),
            ("SLURM's TIMEOUT, 0:15", Failed, Some(0), Some(15), "signal 15"),
            ("a failed job with no code known", Failed, None, None, ""),
            ("local and PBS, cancelled: its wrapper's record", Cancelled, None, Some(15), "signal 15"),
            ("SLURM, cancelled, before accounting: its job directory", Cancelled, None, Some(15), "signal 15"),
            ("SLURM, cancelled, once sacct answers 0:0", Cancelled, Some(0), None, ""),
            ("SLURM, cancelled, sacct 0:15", Cancelled, Some(0), Some(15), "signal 15"),
            ("HTCondor, cancelled: nothing known", Cancelled, None, None, ""),
            ("a cancelled array whose first tasks succeeded", Cancelled, Some(0), None, ""),
            ("a cancelled job that exited 2 on its own", Cancelled, Some(2), None, "2"),
            ("a running local array, its first tasks done", Running, Some(0), None, ""),
            ("a running job", Running, None, None, ""),
            ("a queued job", Queued, None, None, ""),
            ("a suspended job, stopped by a signal", Suspended, None, Some(19), ""),
            ("a job no source knows", Unknown, Some(0), None, ""),
        ];
        for (what, state, code, signal, column) in cases {
            let mut status = JobStatus::new(*state, "X");
            status.exit_code = *code;
            status.signal = *signal;
            assert_eq!(exit_column(&status), *column, "{what}");
            let shown = as_shown(status.clone());
            let in_json = match (shown.exit_code, shown.signal) {
                (Some(code), None) => code.to_string(),
                (None, Some(signal)) => format!("signal {signal}"),
                (None, None) => String::new(),
                both => panic!("{what}: both in JSON: {both:?}"),
            };
            assert_eq!(in_json, *column, "{what}: JSON and table differ");
            let said = match exit_status(&status) {
                Some(ExitStatus::Code(code)) => format!("{state:?}, exit code {code}"),
                Some(ExitStatus::Signal(signal)) => format!("{state:?}, signal {signal}"),
                None => format!("{state:?}"),
            };
            assert_eq!(end(&status), said, "{what}: the message");
        }
    }
}
