//! One job's status from everything a status cycle learned about it: squeue's rows, sacct's
//! rows and the job directory. A pure function, so every combination is a table test.

use std::collections::BTreeMap;

use batchbridge_core::remote::{JobFiles, NOT_STARTED_EXIT_CODE, TaskEnd};
use batchbridge_core::{JobState, JobStatus};

use crate::parse::{Row, Tasks};
use crate::state::failure_cause;

/// What one status cycle saw of one job.
#[derive(Debug, Default)]
pub(crate) struct Sightings<'a> {
    /// squeue's rows: authoritative while SLURM remembers the job.
    pub(crate) squeue: Vec<&'a Row>,
    /// sacct's rows: the record once squeue has forgotten the job.
    pub(crate) sacct: Vec<&'a Row>,
    /// The job directory, when it was read.
    pub(crate) files: Option<&'a JobFiles>,
}

impl Sightings<'_> {
    /// Whether the job is an array, by what SLURM printed or by its task count.
    pub(crate) fn is_array(&self) -> bool {
        self.squeue
            .iter()
            .chain(&self.sacct)
            .any(|row| matches!(row.tasks, Tasks::Indices(_)))
            || self.files.is_some_and(|f| f.tasks > 1)
    }

    /// Whether the scheduler's rows settle this job without the job directory. Arrays never
    /// do: only the directory knows how many tasks there are, and tasks SLURM has purged.
    pub(crate) fn settled_by_scheduler(&self) -> bool {
        if self.is_array() {
            return false;
        }
        // A task whose script never ran exits NOT_STARTED_EXIT_CODE; only its directory
        // says why. Only the directory tells a cancel batchbridge asked for from another.
        self.whole_row().is_some_and(|s| {
            !s.state.is_terminal()
                || s.state != JobState::Cancelled
                    && (s
                        .exit_code
                        .is_some_and(|code| code != NOT_STARTED_EXIT_CODE)
                        || s.signal.is_some())
        })
    }

    /// The non-array job's row, squeue's before sacct's.
    fn whole_row(&self) -> Option<&JobStatus> {
        self.squeue
            .iter()
            .chain(&self.sacct)
            .find(|row| row.tasks == Tasks::Whole)
            .map(|row| &row.status)
    }
}

/// The status of job `id` from what was seen of it.
pub(crate) fn resolve(id: &str, seen: &Sightings<'_>) -> JobStatus {
    if seen.is_array() {
        return resolve_array(id, seen);
    }
    if let Some(status) = seen.whole_row() {
        return with_files(status.clone(), seen.files, 0);
    }
    match seen.files {
        Some(files) => from_files(files, 0).unwrap_or_else(|| {
            JobStatus::unknown(format!(
                "SLURM no longer knows job {id} (not in squeue; sacct has no record or is \
                 unavailable) and its batch script recorded no end"
            ))
        }),
        None => JobStatus::unknown(format!(
            "SLURM knows no job {id}, and it was not submitted through this work directory"
        )),
    }
}

/// Task `index`'s status from SLURM, completed by its job directory when read: squeue
/// prints no exit code, so a finished task takes the one its batch script recorded (and
/// the cause follows it); then [`JobFiles::overrule`]: a task whose script never ran says
/// why, a cancel batchbridge asked for is by request rather than by the account SLURM
/// names.
fn with_files(mut status: JobStatus, files: Option<&JobFiles>, index: u32) -> JobStatus {
    let Some(files) = files else {
        return status;
    };
    if status.state.is_terminal() && status.exit_code.is_none() && status.signal.is_none() {
        // Only an end the files add changes the cause: one SLURM's own words decided (a
        // dependency that can never be met) stays.
        let ended = files.ended.get(&index);
        match ended {
            Some(TaskEnd::Exit(code)) => status.exit_code = Some(*code),
            Some(TaskEnd::Signal(signal)) => status.signal = Some(*signal),
            None => {}
        }
        if ended.is_some() {
            status.cause = failure_cause(&status.native_state, status.exit_code, status.signal);
        }
    }
    files.overrule(status, index)
}

/// Task `index`'s status from its job directory alone, once SLURM has forgotten it.
fn from_files(files: &JobFiles, index: u32) -> Option<JobStatus> {
    let mut status = files.task_status(index)?;
    if status.reason.is_none() {
        status.reason = Some("from the exit-code file: SLURM no longer knows the job".to_owned());
    }
    Some(status)
}

fn resolve_array(id: &str, seen: &Sightings<'_>) -> JobStatus {
    // Later inserts win: sacct first, squeue over it.
    let mut tasks: BTreeMap<u32, &JobStatus> = BTreeMap::new();
    for row in seen.sacct.iter().chain(&seen.squeue) {
        if let Tasks::Indices(indices) = &row.tasks {
            tasks.extend(indices.iter().map(|i| (*i, &row.status)));
        }
    }
    let total = seen
        .files
        .map(|f| f.tasks)
        .or_else(|| tasks.keys().next_back().map(|last| last + 1))
        .unwrap_or(0);
    let statuses: Vec<Option<JobStatus>> = (0..total)
        .map(|i| match tasks.get(&i) {
            Some(status) => Some(with_files((*status).clone(), seen.files, i)),
            None => seen.files.and_then(|f| from_files(f, i)),
        })
        .collect();
    let statuses: Vec<Option<&JobStatus>> = statuses.iter().map(Option::as_ref).collect();
    JobStatus::of_array(id, "SLURM", &statuses)
}

#[cfg(test)]
mod tests {
    use batchbridge_core::JobState::{self, *};
    use batchbridge_core::remote::{NATIVE_STATE_EXIT_FILE, parse_job_files};
    use batchbridge_core::{CancelledBy, FailureCause};

    use super::*;
    use crate::parse::{parse_sacct, parse_squeue};

    struct Case {
        what: &'static str,
        squeue: &'static str,
        sacct: &'static str,
        files: &'static str,
        expected: (JobState, Option<i32>, Option<i32>),
        tasks: Option<(u32, u32, u32, u32)>,
    }

    /// Job 7's status from what squeue, sacct and the job-files script printed.
    fn run(squeue: &str, sacct: &str, files: &str) -> JobStatus {
        let squeue = parse_squeue(squeue);
        let sacct = parse_sacct(sacct);
        let files = parse_job_files(files);
        let seen = Sightings {
            squeue: squeue.iter().filter(|r| r.job == "7").collect(),
            sacct: sacct.iter().filter(|r| r.job == "7").collect(),
            files: files.get("7"),
        };
        resolve("7", &seen)
    }

    /// A job `scontrol requeue`d while it ran (22.05 on the test bed): squeue has it
    /// PENDING with a restart count, while its first run's wrapper recorded the SIGTERM
    /// that stopped it. The record of that run must not end the job: it waits to run again.
    #[test]
    fn a_requeued_job_waits_whatever_its_first_run_recorded() {
        let status = run(
            "7|PENDING|BeginTime|1795689249|1795689370|NONE|debug|1|(null)|",
            "",
            "7 tasks 1 0\n7 task 0 signal 15",
        );
        assert_eq!(status.state, Queued, "{status:?}");
        assert!(status.requeued(), "{status:?}");
        assert_eq!(
            (status.exit_code, status.signal, status.cause),
            (None, None, None)
        );
        let again = run(
            "7|RUNNING|None|1795689249|1795689370|NONE|debug|1|(null)|",
            "",
            "",
        );
        assert_eq!((again.state, again.requeues), (Running, 1));
    }

    #[test]
    fn every_source_and_their_combinations() {
        let cases = [
            Case {
                what: "running in squeue",
                squeue: "7|RUNNING|None|1|2|NONE|debug|0|(null)|",
                sacct: "",
                files: "",
                expected: (Running, None, None),
                tasks: None,
            },
            Case {
                what: "finished in squeue: the exit-code file adds the code",
                squeue: "7|FAILED|NonZeroExitCode|1|2|3|debug|0|(null)|",
                sacct: "",
                files: "7 tasks 1 0\n7 task 0 exit 3",
                expected: (Failed, Some(3), None),
                tasks: None,
            },
            Case {
                what: "squeue wins over a lagging sacct",
                squeue: "7|COMPLETED|None|1|2|3|debug|0|(null)|",
                sacct: "7|RUNNING|None|0:0|1|2|Unknown|debug",
                files: "7 tasks 1 0\n7 task 0 exit 0",
                expected: (Succeeded, Some(0), None),
                tasks: None,
            },
            Case {
                what: "neither knows it: the exit-code file says it succeeded",
                squeue: "",
                sacct: "",
                files: "7 tasks 1 0\n7 task 0 exit 0",
                expected: (Succeeded, Some(0), None),
                tasks: None,
            },
            Case {
                what: "purged from squeue: sacct",
                squeue: "",
                sacct: "7|TIMEOUT|None|0:15|1|2|3|debug",
                files: "",
                expected: (Failed, Some(0), Some(15)),
                tasks: None,
            },
            Case {
                what: "neither knows it: the exit-code file decides",
                squeue: "",
                sacct: "",
                files: "7 tasks 1 0\n7 task 0 exit 5",
                expected: (Failed, Some(5), None),
                tasks: None,
            },
            Case {
                what: "the working directory could not be entered: sacct has the code, the \
                       files say why",
                squeue: "",
                sacct: "7|FAILED|NonZeroExitCode|70:0|1|2|3|debug",
                files: "7 tasks 1 0\n7 task 0 exit 70\n7 why 0 the script never ran: x",
                expected: (Failed, Some(70), None),
                tasks: None,
            },
            Case {
                what: "the working directory could not be entered, known from the files alone",
                squeue: "",
                sacct: "",
                files: "7 tasks 1 0\n7 task 0 exit 70\n7 why 0 the script never ran: x",
                expected: (Failed, Some(70), None),
                tasks: None,
            },
            Case {
                what: "neither knows it, killed after a cancel",
                squeue: "",
                sacct: "",
                files: "7 tasks 1 1\n7 task 0 signal 15",
                expected: (Cancelled, None, Some(15)),
                tasks: None,
            },
            Case {
                what: "neither knows it, killed without a cancel (a time limit)",
                squeue: "",
                sacct: "",
                files: "7 tasks 1 0\n7 task 0 signal 15",
                expected: (Failed, None, Some(15)),
                tasks: None,
            },
            Case {
                what: "neither knows it and it recorded no end",
                squeue: "",
                sacct: "",
                files: "7 tasks 1 0",
                expected: (Unknown, None, None),
                tasks: None,
            },
            Case {
                what: "not ours and unknown",
                squeue: "",
                sacct: "",
                files: "",
                expected: (Unknown, None, None),
                tasks: None,
            },
            Case {
                what: "array: pending tasks expanded by squeue -r",
                squeue: "7_0|RUNNING|None|1|2|NONE|debug|0|(null)|\n7_1|PENDING|JobArrayTaskLimit|1|N/A|N/A|debug|0|(null)|\n7_2|PENDING|JobArrayTaskLimit|1|N/A|N/A|debug|0|(null)|",
                sacct: "",
                files: "7 tasks 3 0",
                expected: (Running, None, None),
                tasks: Some((3, 1, 0, 0)),
            },
            Case {
                what: "array: task 0 purged from squeue, sacct remembers it",
                squeue: "7_1|FAILED|NonZeroExitCode|1|2|3|debug|0|(null)|\n7_2|RUNNING|None|1|2|NONE|debug|0|(null)|",
                sacct: "7_0|COMPLETED|None|0:0|1|2|3|debug\n7_1|RUNNING|None|0:0|1|2|Unknown|debug\n7_[2]|PENDING|None|0:0|1|N/A|N/A|debug",
                files: "7 tasks 3 0",
                expected: (Running, None, None),
                tasks: Some((3, 1, 1, 1)),
            },
            Case {
                what: "array: all done, one failed, some known only from files",
                squeue: "7_2|COMPLETED|None|1|2|3|debug|0|(null)|",
                sacct: "",
                files: "7 tasks 3 0\n7 task 0 exit 0\n7 task 1 exit 4\n7 task 2 exit 0",
                expected: (Failed, Some(4), None),
                tasks: Some((3, 0, 2, 1)),
            },
            Case {
                what: "array: a task nobody knows any more",
                squeue: "",
                sacct: "",
                files: "7 tasks 3 0\n7 task 0 exit 0\n7 task 2 exit 0",
                expected: (Unknown, None, None),
                tasks: Some((3, 0, 2, 0)),
            },
            Case {
                what: "array of one task",
                squeue: "7_0|COMPLETED|None|1|2|3|debug|0|(null)|",
                sacct: "",
                files: "7 tasks 1 0\n7 task 0 exit 0",
                expected: (Succeeded, None, None),
                tasks: Some((1, 0, 1, 0)),
            },
        ];
        for case in &cases {
            let status = run(case.squeue, case.sacct, case.files);
            let from_files_alone = case.squeue.is_empty()
                && case.sacct.is_empty()
                && case.tasks.is_none()
                && status.state != Unknown;
            if from_files_alone {
                assert_eq!(status.native_state, NATIVE_STATE_EXIT_FILE, "{}", case.what);
            }
            assert!(
                !status.native_state.is_empty() || status.state == Unknown,
                "{}: a known status names its source: {status:?}",
                case.what
            );
            assert_eq!(
                (status.state, status.exit_code, status.signal),
                case.expected,
                "{}: {status:?}",
                case.what
            );
            if case.files.contains(" why 0 ") {
                assert_eq!(
                    status.reason.as_deref(),
                    Some("the script never ran: x"),
                    "{}",
                    case.what
                );
            }
            let counts = status
                .tasks
                .map(|t| (t.total, t.running, t.succeeded, t.failed));
            assert_eq!(counts, case.tasks, "{}: {status:?}", case.what);
        }
    }

    /// The cause of each ending, from squeue and sacct rows captured on the test bed (an
    /// array whose task 1 exits 4, a script exiting 3, a `scancel` of a running job by uid
    /// 1001, a job over its one-minute limit) and the job directory batchbridge's batch
    /// script leaves.
    #[test]
    fn causes_from_every_source() {
        use CancelledBy::{Account, Request};
        use FailureCause as C;
        let cases: [(&str, &str, &str, &str, Option<FailureCause>); 12] = [
            (
                "array, task 1 failed: squeue has no exit code, the files have it (issue 21 \
                 case 1)",
                "7_0|COMPLETED|None|1795445430|1795445430|1795445430|debug|0|(null)|\n\
                 7_1|FAILED|NonZeroExitCode|1795445430|1795445430|1795445430|debug|0|(null)|\n\
                 7_2|COMPLETED|None|1795445430|1795445430|1795445430|debug|0|(null)|",
                "",
                "7 tasks 3 0\n7 task 0 exit 0\n7 task 1 exit 4\n7 task 2 exit 0",
                Some(C::ExitCode(4)),
            ),
            (
                "array, task 1 failed, from sacct alone",
                "",
                "7_0|COMPLETED|None|0:0|1795445430|1795445430|1795445430|debug\n\
                 7_1|FAILED|None|4:0|1795445430|1795445430|1795445430|debug\n\
                 7_2|COMPLETED|None|0:0|1795445430|1795445430|1795445430|debug",
                "7 tasks 3 0",
                Some(C::ExitCode(4)),
            ),
            (
                "array, task 1 failed, from the files alone",
                "",
                "",
                "7 tasks 3 0\n7 task 0 exit 0\n7 task 1 exit 4\n7 task 2 exit 0",
                Some(C::ExitCode(4)),
            ),
            (
                "exit 3 in squeue, code from the files",
                "7|FAILED|NonZeroExitCode|1795445430|1795445430|1795445430|debug|0|(null)|",
                "",
                "7 tasks 1 0\n7 task 0 exit 3",
                Some(C::ExitCode(3)),
            ),
            (
                "exit 3 in sacct",
                "",
                "7|FAILED|None|3:0|1795445430|1795445430|1795445430|debug",
                "",
                Some(C::ExitCode(3)),
            ),
            (
                "scancel by hand, sacct names the uid",
                "",
                "7|CANCELLED by 1001|None|0:0|1795445430|1795445430|1795445442|debug",
                "7 tasks 1 0\n7 task 0 signal 15",
                Some(C::Cancelled(Account("1001".into()))),
            ),
            (
                "batchbridge's cancel, sacct names the same uid",
                "",
                "7|CANCELLED by 1001|None|0:0|1795445430|1795445430|1795445442|debug",
                "7 tasks 1 1\n7 task 0 signal 15",
                Some(C::Cancelled(Request)),
            ),
            (
                "batchbridge's cancel, in squeue",
                "7|CANCELLED|None|1795445430|1795445430|1795445442|debug|0|(null)|",
                "",
                "7 tasks 1 1\n7 task 0 signal 15",
                Some(C::Cancelled(Request)),
            ),
            (
                "over its time limit, in sacct",
                "",
                "7|TIMEOUT|None|0:0|1795445430|1795445430|1795445491|debug",
                "7 tasks 1 0\n7 task 0 signal 15",
                Some(C::WallTimeExceeded),
            ),
            (
                "over its time limit, in squeue: the signal from the files keeps the cause",
                "7|TIMEOUT|TimeLimit|1795445430|1795445430|1795445491|debug|0|(null)|",
                "",
                "7 tasks 1 0\n7 task 0 signal 15",
                Some(C::WallTimeExceeded),
            ),
            (
                "working directory missing",
                "",
                "7|FAILED|None|70:0|1795445430|1795445430|1795445430|debug",
                "7 tasks 1 0\n7 task 0 exit 70\n7 why 0 the script never ran: x",
                Some(C::NotStarted),
            ),
            (
                "succeeded",
                "7|COMPLETED|None|1795445430|1795445430|1795445436|debug|0|(null)|",
                "",
                "7 tasks 1 0\n7 task 0 exit 0",
                None,
            ),
        ];
        for (what, squeue, sacct, files, cause) in cases {
            let status = run(squeue, sacct, files);
            assert_eq!(status.cause, cause, "{what}: {status:?}");
            assert_eq!(
                status.queue.as_deref(),
                Some("debug").filter(|_| !(squeue.is_empty() && sacct.is_empty())),
                "{what}"
            );
        }
    }

    #[test]
    fn arrays_summarise_native_states_reasons_and_times() {
        let squeue = parse_squeue(
            "7_0|RUNNING|None|10|20|NONE|debug|0|(null)|\n7_1|PENDING|JobArrayTaskLimit|11|N/A|N/A|debug|0|(null)|\n",
        );
        let seen = Sightings {
            squeue: squeue.iter().collect(),
            ..Sightings::default()
        };
        let status = resolve("7", &seen);
        assert_eq!(status.native_state, "PENDING,RUNNING");
        assert_eq!(status.reason, None, "the running task has no reason");
        assert_eq!(
            status.submitted_at,
            Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(10))
        );
        assert_eq!(status.ended_at, None);
    }

    #[test]
    fn what_needs_the_job_directory() {
        let squeue = parse_squeue(
            "1|RUNNING|None|1|2|NONE|debug|0|(null)|\n2|COMPLETED|None|1|2|3|debug|0|(null)|\n3_0|RUNNING|None|1|2|NONE|debug|0|(null)|\n",
        );
        let sacct = parse_sacct(
            "5|COMPLETED|None|0:0|1|2|3|debug\n6|FAILED|NonZeroExitCode|70:0|1|2|3|debug\n",
        );
        let by_job = |job: &str| Sightings {
            squeue: squeue.iter().filter(|r| r.job == job).collect(),
            ..Sightings::default()
        };
        assert!(by_job("1").settled_by_scheduler(), "running");
        assert!(
            !by_job("2").settled_by_scheduler(),
            "finished, no exit code yet"
        );
        let from_sacct = Sightings {
            sacct: sacct.iter().filter(|r| r.job == "5").collect(),
            ..Sightings::default()
        };
        assert!(
            from_sacct.settled_by_scheduler(),
            "sacct gives the exit code"
        );
        let never_ran = Sightings {
            sacct: sacct.iter().filter(|r| r.job == "6").collect(),
            ..Sightings::default()
        };
        assert!(
            !never_ran.settled_by_scheduler(),
            "exit code 70: the directory says why the script never ran"
        );
        assert!(
            !by_job("3").settled_by_scheduler(),
            "arrays need the task count"
        );
        assert!(!by_job("4").settled_by_scheduler(), "never seen");
    }
}
