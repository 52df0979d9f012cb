//! A job's status in words: the state while it is waited for, how it ended, an array's
//! task counts, and its exit status.

use batchbridge_core::{JobStatus, TaskCounts};

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

/// How a job that did not succeed ended, for standard error.
pub(crate) fn end(status: &JobStatus) -> String {
    let mut text = format!("{:?}", status.state);
    if let Some(code) = status.exit_code {
        text.push_str(&format!(", exit code {code}"));
    }
    if let Some(signal) = status.signal {
        text.push_str(&format!(", signal {signal}"));
    }
    if let Some(reason) = &status.reason {
        text.push_str(&format!(": {reason}"));
    }
    text
}

/// The EXIT column: the exit code, else the signal.
pub(crate) fn exit_column(status: &JobStatus) -> String {
    match (status.exit_code, status.signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => String::new(),
    }
}
