//! [`TaskEnd`] and [`JobFiles`]: how tasks ended, as their wrappers recorded it.

use std::collections::{BTreeMap, HashMap};

use crate::cause::{CancelledBy, FailureCause};
use crate::state::{JobState, JobStatus};

/// The [`JobStatus::native_state`] of a status that the job wrapper's `task-N.exit` file
/// decided, not the scheduler (which no longer knows the job).
///
/// ```
/// use batchbridge_core::wrapper::{NATIVE_STATE_EXIT_FILE, TaskEnd};
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
    /// use batchbridge_core::wrapper::TaskEnd;
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
    /// use batchbridge_core::wrapper::parse_job_files;
    ///
    /// let jobs = parse_job_files("12 tasks 2 0\n12 task 0 exit 70\n12 why 0 no such dir\n");
    /// let never_ran = jobs["12"].task_status(0).unwrap();
    /// assert_eq!(never_ran.cause, Some(FailureCause::NotStarted));
    /// assert_eq!(never_ran.reason.as_deref(), Some("no such dir"));
    /// assert_eq!(jobs["12"].task_status(1), None, "task 1 recorded no end");
    /// ```
    pub fn task_status(&self, index: u32) -> Option<JobStatus> {
        let status = self.ended.get(&index)?.status(self.cancel_requested);
        Some(self.overrule(status, index))
    }

    /// `status`, what a scheduler says of task `index`, with what only this job directory
    /// knows put over it: a Failed task whose script never ran takes the reason from its
    /// `task-N.reason` and the cause [`NotStarted`](FailureCause::NotStarted) (the scheduler
    /// saw an exit code of 70 at most); a Cancelled job batchbridge cancelled is
    /// [`CancelledBy::Request`] (the scheduler names an account, or no one). Anything
    /// else stays as the scheduler said. Every backend whose wrapper keeps these files
    /// applies this one rule.
    ///
    /// ```
    /// use batchbridge_core::{CancelledBy, FailureCause, JobState, JobStatus};
    /// use batchbridge_core::wrapper::parse_job_files;
    ///
    /// let jobs = parse_job_files("12 tasks 1 1\n12 why 0 no such dir\n");
    /// let deleted = JobStatus::new(JobState::Cancelled, "F")
    ///     .with_cause(FailureCause::Cancelled(CancelledBy::Account("alice".into())));
    /// let deleted = jobs["12"].overrule(deleted, 0);
    /// assert_eq!(deleted.cause, Some(FailureCause::Cancelled(CancelledBy::Request)));
    /// let failed = JobStatus::new(JobState::Failed, "F").with_exit_code(70);
    /// let failed = jobs["12"].overrule(failed, 0);
    /// assert_eq!(failed.cause, Some(FailureCause::NotStarted));
    /// assert_eq!(failed.reason.as_deref(), Some("no such dir"));
    /// let running = jobs["12"].overrule(JobStatus::new(JobState::Running, "R"), 0);
    /// assert_eq!((running.cause, running.reason), (None, None));
    /// ```
    pub fn overrule(&self, mut status: JobStatus, index: u32) -> JobStatus {
        match status.state {
            JobState::Failed => {
                if let Some(why) = self.not_started.get(&index) {
                    status.reason = Some(why.clone());
                    status.cause = Some(FailureCause::NotStarted);
                }
            }
            JobState::Cancelled if self.cancel_requested => {
                status.cause = Some(FailureCause::Cancelled(CancelledBy::Request));
            }
            _ => {}
        }
        status
    }
}

/// Reads the job-files script's lines: `ID tasks N CANCELLED`, `ID task I exit|signal N` and
/// `ID why I TEXT`.
///
/// ```
/// use batchbridge_core::wrapper::{TaskEnd, parse_job_files};
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
