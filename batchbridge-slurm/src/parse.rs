//! Parsers for what SLURM's tools print. Pure functions, tested with output captured from
//! the test bed's real cluster.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use batchbridge_core::{Error, ErrorKind, JobState, JobStatus, Refusal, Result};

use crate::state::{never_satisfied, status_from};

/// The `squeue -O` fields [`parse_squeue`] reads, each followed by `|`: id, state, reason,
/// submit, start (for a pending job the scheduler's estimate), end, partition, how many
/// times SLURM put the job back in its queue after it had started (`scontrol requeue`,
/// preemption with requeue, a node failure with requeue), and dependencies
/// (`afterok:41(failed)`: what names the dependency of a job SLURM ended because it can
/// never be met; `(null)` for none). `-O`, not `-o`: `-o` has no letter for the restart
/// count; `JobArrayID` prints what `-o %i` does (`107_2`), and a field without a width is
/// printed whole.
pub const SQUEUE_FIELDS: &str = "JobArrayID:|,State:|,Reason:|,SubmitTime:|,StartTime:|,\
                                 EndTime:|,Partition:|,RestartCnt:|,Dependency:|";
/// The `sacct -o` fields [`parse_sacct`] reads.
pub const SACCT_FIELDS: &str = "JobID,State,Reason,ExitCode,Submit,Start,End,Partition";
/// How far ahead a start is no estimate. SLURM plans a running job without a time limit to
/// end a year after it started, so a job waiting behind one "starts" up to a year ahead
/// (that job's start + 365 days: a fresh one puts it at about the waiting job's submit + 1
/// year). No site's queue waits half a year, so a start further ahead than this is that
/// placeholder, never an estimate.
pub(crate) const NO_ESTIMATE_HORIZON: Duration = Duration::from_secs(180 * 24 * 3600);
/// Array expansions larger than this are cut: no real array is this big, and hostile output
/// must not make us allocate without bound.
const MAX_TASKS_PER_ROW: usize = 1_000_000;

/// Which part of a job a row describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tasks {
    /// A job that is not an array.
    Whole,
    /// These tasks of an array job.
    Indices(Vec<u32>),
}

/// One row of `squeue` or `sacct`: a job, or some tasks of an array, in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The job id `sbatch` printed (an array's master id).
    pub job: String,
    /// The tasks the row covers.
    pub tasks: Tasks,
    /// The mapped status of each of them.
    pub status: JobStatus,
}

/// Splits SLURM's `%i` / `JobID` into the job and its tasks: `108`, `107_2`, `107_[0-3%1]`,
/// `107_[1,4-5]`. A heterogeneous component (`108+1`) counts as its job.
pub fn parse_job_id(field: &str) -> Option<(String, Tasks)> {
    let field = field.trim();
    let (job, tasks) = match field.split_once('_') {
        None => (field.split('+').next()?, Tasks::Whole),
        Some((job, tasks)) => (job, Tasks::Indices(parse_task_list(tasks)?)),
    };
    if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((job.to_owned(), tasks))
}

/// `2`, `[0-3%1]`, `[1,4-5]` → the task indices.
fn parse_task_list(text: &str) -> Option<Vec<u32>> {
    let inner = text.strip_prefix('[').and_then(|t| t.strip_suffix(']'));
    let list = inner.unwrap_or(text);
    let list = list.split_once('%').map_or(list, |(list, _throttle)| list);
    let mut tasks = Vec::new();
    for part in list.split(',') {
        let (first, last): (u32, u32) = match part.split_once('-') {
            Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
            None => {
                let index = part.parse().ok()?;
                (index, index)
            }
        };
        if first > last {
            return None;
        }
        let room = MAX_TASKS_PER_ROW.saturating_sub(tasks.len());
        tasks.extend((first..=last).take(room));
    }
    Some(tasks)
}

/// A time printed under `SLURM_TIME_FORMAT=%s`: seconds since the epoch, or a word (`N/A`,
/// `Unknown`, `NONE`, `None`) when there is none.
pub(crate) fn parse_time(field: &str) -> Option<SystemTime> {
    let seconds: u64 = field.trim().parse().ok().filter(|s| *s > 0)?;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

/// A row from its id, mapped status, `[submit, start, end]` times and partition.
///
/// SLURM's start of a job that has not started is its estimate (backfill may put it a year
/// ahead): for a Queued or Held job it is [`JobStatus::expected_start_at`], never
/// `started_at`. squeue also gives a job cancelled while it waited a start, the time of the
/// cancel; such a row keeps the pending reason (a job cancelled while running has `None`),
/// and its start is dropped.
fn row(job_id: &str, mut status: JobStatus, times: [&str; 3], partition: &str) -> Option<Row> {
    let (job, tasks) = parse_job_id(job_id)?;
    let [submitted, start, ended] = times.map(parse_time);
    status.submitted_at = submitted;
    match status.state {
        JobState::Queued | JobState::Held => {
            status.expected_start_at = start.filter(|start| !is_no_estimate(*start, submitted));
        }
        JobState::Cancelled if status.reason.is_some() => {}
        _ => status.started_at = start,
    }
    status.ended_at = ended.filter(|_| status.state.is_terminal());
    let partition = partition.trim();
    if !partition.is_empty() {
        status.queue = Some(partition.to_owned());
    }
    Some(Row { job, tasks, status })
}

/// Whether `start`, a start SLURM expects, is its placeholder for "behind a job without a
/// time limit" rather than an estimate: at least [`NO_ESTIMATE_HORIZON`] after `reference`
/// (the job's submit; the clock for `sbatch --test-only`).
pub(crate) fn is_no_estimate(start: SystemTime, reference: Option<SystemTime>) -> bool {
    reference.is_some_and(|reference| start >= reference + NO_ESTIMATE_HORIZON)
}

/// Reads `squeue -h -r -t all -O` [`SQUEUE_FIELDS`] output. Lines that do not parse are
/// skipped with a warning: one odd line must not hide every other job.
///
/// A job SLURM requeued waits PENDING (reason `BeginTime` for its first two minutes, as
/// SLURM delays a requeued job's start) with its restart count above 0: Queued, and
/// [`requeued`](JobStatus::requeued). A job SLURM ended because a dependency can never be
/// met becomes Failed with
/// [`FailureCause::DependencyFailed`](batchbridge_core::FailureCause::DependencyFailed)
/// ([`never_satisfied`]).
///
/// ```
/// use batchbridge_slurm::parse::parse_squeue;
///
/// // 22.05 on the test bed, a job `scontrol requeue`d while it ran.
/// let rows = parse_squeue("8495|PENDING|BeginTime|1795689249|1795689370|NONE|debug|1|(null)|\n");
/// assert!(rows[0].status.requeued());
/// ```
pub fn parse_squeue(text: &str) -> Vec<Row> {
    parse_lines(text, "squeue", |fields| match fields {
        [
            id,
            state,
            reason,
            submitted,
            started,
            ended,
            partition,
            restarts,
            dependency,
            "",
        ] => {
            let status = status_from(state, reason, None).with_requeues(restarts.parse().ok()?);
            let mut row = row(id, status, [submitted, started, ended], partition)?;
            row.status = never_satisfied(row.status, dependency);
            Some(row)
        }
        _ => None,
    })
}

/// Reads `sacct -X -n -P -o` [`SACCT_FIELDS`] output. sacct keeps the last pending reason on
/// finished jobs (`FAILED` with `JobArrayTaskLimit`), so a finished job's reason is dropped.
pub fn parse_sacct(text: &str) -> Vec<Row> {
    parse_lines(text, "sacct", |fields| match fields {
        [
            id,
            state,
            reason,
            exit_code,
            submitted,
            started,
            ended,
            partition,
        ] => {
            let finished = status_from(state, "None", None).state.is_terminal();
            let reason = if finished { "None" } else { reason };
            row(
                id,
                status_from(state, reason, Some(exit_code)),
                [submitted, started, ended],
                partition,
            )
        }
        _ => None,
    })
}

fn parse_lines(text: &str, tool: &str, parse: impl Fn(&[&str]) -> Option<Row>) -> Vec<Row> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('|').collect();
            let parsed = parse(&fields);
            if parsed.is_none() {
                tracing::warn!(tool, line, "skipping a line that does not parse");
            }
            parsed
        })
        .collect()
}

/// What `find` asks squeue for (`-o`): job id, state, nodes, comment, as
/// [`find_commented`] reads them.
pub const SQUEUE_FIND_FORMAT: &str = "%i|%T|%N|%k";

/// What `find` asks sacct for (`-o`): the same four fields as [`SQUEUE_FIND_FORMAT`].
pub const SACCT_FIND_FIELDS: &str = "JobID,State,NodeList,Comment";

/// Reads `ID|STATE|NODES|COMMENT` lines ([`SQUEUE_FIND_FORMAT`], [`SACCT_FIND_FIELDS`];
/// the comment last, as it may hold `|`): the job whose comment is `key`.
///
/// A FAILED job that never had a node (squeue's `%N` empty, sacct's `None assigned`) is
/// left out: SLURM 24.11 keeps a submission slurmctld refused (`Requested node
/// configuration is not available`, while sbatch reports the refusal) as a FAILED job with
/// the reason `BadConstraints`, comment and all, in squeue until `MinJobAge` and in sacct
/// for good; 22.05 kept nothing. No such job ran, and the key is free.
///
/// ```
/// use batchbridge_slurm::parse::find_commented;
///
/// let sacct = "27|FAILED|None assigned|key-1\n29|FAILED|node1|key-2\n";
/// assert_eq!(find_commented(sacct, "key-1"), None);
/// assert_eq!(find_commented(sacct, "key-2").as_deref(), Some("29"));
/// ```
pub fn find_commented(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(4, '|');
        let (id, state, nodes, comment) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let refused = state == "FAILED" && matches!(nodes, "" | "None assigned");
        if refused || comment.trim() != key {
            return None;
        }
        parse_job_id(id).map(|(job, _tasks)| job)
    })
}

/// Reads what `sinfo --version` prints: one line such as `slurm 22.05.8` (Debian's build
/// says `slurm-wlm 22.05.8`), trimmed. Nothing, or more than one line, is
/// [`ErrorKind::UnexpectedOutput`].
///
/// ```
/// use batchbridge_slurm::parse::sinfo_version;
///
/// assert_eq!(sinfo_version("slurm 22.05.8\n")?, "slurm 22.05.8");
/// assert!(sinfo_version("  \n").is_err());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn sinfo_version(text: &str) -> Result<String> {
    let version = text.trim();
    if version.is_empty() || version.chars().any(char::is_control) {
        let shown: String = text.chars().take(200).collect();
        return Err(Error::new(
            ErrorKind::UnexpectedOutput,
            format!("sinfo --version printed {shown:?}, which is not one line naming a version"),
        ));
    }
    Ok(version.to_owned())
}

/// What kind of refusal sbatch's message is, in SLURM's words (its stderr): a submit limit
/// of a QOS or an association (the reason word sbatch prints before the generic
/// "Job violates accounting/QOS policy", which size and time limits share), a partition
/// that is drained or inactive, or a request naming what the cluster does not have.
/// `None` for any other message.
///
/// ```
/// use batchbridge_core::Refusal;
/// use batchbridge_slurm::parse::sbatch_refusal;
///
/// let said = "sbatch: error: Batch job submission failed: Required partition not available (inactive or drain)\n";
/// assert_eq!(sbatch_refusal(said), Some(Refusal::QueueClosed));
/// ```
pub fn sbatch_refusal(stderr: &str) -> Option<Refusal> {
    const WORDS: &[(&str, Refusal)] = &[
        ("QOSMaxSubmitJobPerUserLimit", Refusal::SubmitLimit),
        ("QOSMaxSubmitJobPerAccountLimit", Refusal::SubmitLimit),
        ("QOSGrpSubmitJobsLimit", Refusal::SubmitLimit),
        ("AssocMaxSubmitJobLimit", Refusal::SubmitLimit),
        ("AssocGrpSubmitJobsLimit", Refusal::SubmitLimit),
        ("Required partition not available", Refusal::QueueClosed),
        ("Invalid partition name specified", Refusal::InvalidRequest),
        (
            "Invalid account or account/partition combination",
            Refusal::InvalidRequest,
        ),
        ("Invalid qos specification", Refusal::InvalidRequest),
        (
            "Requested node configuration is not available",
            Refusal::InvalidRequest,
        ),
    ];
    Refusal::named_in(stderr, WORDS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbridge_core::JobState::*;

    /// sbatch's refusals as the test bed's clusters printed them (22.05 and 24.11), each
    /// provoked for real: a QOS with MaxSubmitJobsPerUser=1 and an association with
    /// MaxSubmitJobs=1 holding one job, a drained and an inactive partition, an unknown
    /// account and partition.
    /// Captured from the test bed with `--kill-on-invalid-dep=yes`: SLURM 22.05 (start
    /// `N/A`) and 24.11 (start at the cancel) end a job whose afterok dependency failed;
    /// a dependent still waiting, and one a person cancelled while it waited, stay what
    /// they are.
    #[test]
    fn a_job_slurm_ended_for_its_dependency_failed_naming_it() {
        use batchbridge_core::FailureCause::{Cancelled as ByCancel, DependencyFailed};
        let out = "8538|CANCELLED|DependencyNeverSatisfied|1795689931|N/A|1795689931|debug|0|afterok:8537(failed)|\n\
                   2865|CANCELLED|DependencyNeverSatisfied|1795689946|1795689946|1795689946|debug|0|afterok:2864(failed)|\n\
                   2866|CANCELLED|DependencyNeverSatisfied|1795689946|1795689946|1795689946|debug|0|afterany:2860(unfulfilled),afterok:2864(failed)|\n\
                   8540|PENDING|Dependency|1795689931|N/A|N/A|debug|0|afterok:8539(unfulfilled)|\n\
                   8541|CANCELLED|Dependency|1795689931|1795689990|1795689990|debug|0|afterok:8539(unfulfilled)|\n\
                   8537|FAILED|NonZeroExitCode|1795689931|1795689931|1795689931|debug|0|(null)|\n";
        let at = |s| Some(UNIX_EPOCH + Duration::from_secs(s));
        let rows = parse_squeue(out);
        let seen: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.job.as_str(),
                    r.status.state,
                    r.status.cause.clone(),
                    r.status.started_at,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("8538", Failed, Some(DependencyFailed("8537".into())), None),
                ("2865", Failed, Some(DependencyFailed("2864".into())), None),
                ("2866", Failed, Some(DependencyFailed("2864".into())), None),
                ("8540", Queued, None, None),
                (
                    "8541",
                    Cancelled,
                    Some(ByCancel(batchbridge_core::CancelledBy::Unknown)),
                    None
                ),
                (
                    "8537",
                    Failed,
                    Some(batchbridge_core::FailureCause::Other),
                    at(1_795_689_931)
                ),
            ]
        );
        assert!(
            rows[0]
                .status
                .reason
                .as_deref()
                .unwrap()
                .contains("job 8537"),
            "{:?}",
            rows[0].status.reason
        );
    }

    #[test]
    fn sbatch_refusals_by_kind() {
        use Refusal::*;
        let cases = [
            (
                include_str!("testdata/sbatch-22.05-qos-max-submit-per-user.txt"),
                Some(SubmitLimit),
            ),
            (
                include_str!("testdata/sbatch-24.11-qos-max-submit-per-user.txt"),
                Some(SubmitLimit),
            ),
            (
                include_str!("testdata/sbatch-22.05-assoc-max-submit.txt"),
                Some(SubmitLimit),
            ),
            (
                include_str!("testdata/sbatch-24.11-assoc-max-submit.txt"),
                Some(SubmitLimit),
            ),
            (
                include_str!("testdata/sbatch-22.05-partition-drained.txt"),
                Some(QueueClosed),
            ),
            (
                include_str!("testdata/sbatch-24.11-partition-drained.txt"),
                Some(QueueClosed),
            ),
            (
                include_str!("testdata/sbatch-22.05-partition-inactive.txt"),
                Some(QueueClosed),
            ),
            (
                include_str!("testdata/sbatch-24.11-partition-inactive.txt"),
                Some(QueueClosed),
            ),
            (
                include_str!("testdata/sbatch-22.05-invalid-account.txt"),
                Some(InvalidRequest),
            ),
            (
                include_str!("testdata/sbatch-24.11-invalid-account.txt"),
                Some(InvalidRequest),
            ),
            (
                include_str!("testdata/sbatch-22.05-invalid-partition.txt"),
                Some(InvalidRequest),
            ),
            (
                include_str!("testdata/sbatch-24.11-invalid-partition.txt"),
                Some(InvalidRequest),
            ),
            // A size or time limit of a QOS: the generic line alone says nothing of when.
            (
                "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)\n",
                None,
            ),
            (
                "sbatch: error: Batch job submission failed: Invalid job array specification\n",
                None,
            ),
            ("", None),
        ];
        for (said, refusal) in cases {
            assert_eq!(sbatch_refusal(said), refusal, "{said}");
        }
    }

    #[test]
    fn job_ids() {
        let cases = [
            ("108", Some(("108", Tasks::Whole))),
            ("107_2", Some(("107", Tasks::Indices(vec![2])))),
            (
                "107_[0-3%1]",
                Some(("107", Tasks::Indices(vec![0, 1, 2, 3]))),
            ),
            ("107_[2-3]", Some(("107", Tasks::Indices(vec![2, 3])))),
            ("107_[1,4-5]", Some(("107", Tasks::Indices(vec![1, 4, 5])))),
            ("108+1", Some(("108", Tasks::Whole))),
            ("", None),
            ("abc", None),
            ("107_[3-1]", None),
            ("107_x", None),
            ("../108", None),
        ];
        for (field, expected) in cases {
            let expected = expected.map(|(job, tasks)| (job.to_owned(), tasks));
            assert_eq!(parse_job_id(field), expected, "{field:?}");
        }
    }

    #[test]
    fn huge_ranges_are_cut() {
        let (_, tasks) = parse_job_id("1_[0-4294967294]").unwrap();
        assert_eq!(tasks, Tasks::Indices((0..1_000_000).collect()));
    }

    /// Captured from the test bed: an array of 4 (`%1`) and a plain job, just submitted.
    #[test]
    fn squeue_of_a_pending_array_and_a_job() {
        let out = "107_0|PENDING|None|1795248211|N/A|N/A|debug|0|(null)|\n\
                   107_1|PENDING|None|1795248211|N/A|N/A|debug|0|(null)|\n\
                   108|PENDING|Priority|1795248211|N/A|N/A|debug|0|(null)|\n";
        let rows = parse_squeue(out);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].job.as_str(), &rows[0].tasks),
            ("107", &Tasks::Indices(vec![0]))
        );
        let job = &rows[2];
        assert_eq!(
            (job.status.state, job.status.reason.as_deref()),
            (Queued, Some("Priority"))
        );
        assert_eq!(
            job.status.submitted_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_795_248_211))
        );
        assert_eq!((job.status.started_at, job.status.ended_at), (None, None));
    }

    /// Captured from the test bed: the same array later, one task running, in both tools.
    #[test]
    fn squeue_and_sacct_of_a_finishing_array() {
        let squeue = "107_0|COMPLETED|None|1795248211|1795248211|1795248212|debug|0|(null)|\n\
                      107_2|FAILED|NonZeroExitCode|1795248211|1795248215|1795248216|debug|0|(null)|\n\
                      107_3|RUNNING|None|1795248211|1795248217|NONE|debug|0|(null)|\n";
        let sacct = "107_0|COMPLETED|None|0:0|1795248211|1795248211|1795248212|debug\n\
                     107_1|FAILED|JobArrayTaskLimit|1:0|1795248211|1795248213|1795248214|debug\n\
                     107_3|RUNNING|JobArrayTaskLimit|0:0|1795248211|1795248217|Unknown|debug\n";
        let from_squeue = parse_squeue(squeue);
        assert_eq!(
            from_squeue
                .iter()
                .map(|r| (r.status.state, r.status.exit_code))
                .collect::<Vec<_>>(),
            [(Succeeded, None), (Failed, None), (Running, None)],
            "squeue has no exit codes"
        );
        assert_eq!(from_squeue[2].status.ended_at, None, "NONE is no time");
        let from_sacct = parse_sacct(sacct);
        let failed = &from_sacct[1].status;
        assert_eq!((failed.state, failed.exit_code), (Failed, Some(1)));
        assert_eq!(
            failed.reason.as_deref(),
            Some("FAILED"),
            "a stale pending reason is not why it failed"
        );
        let running = &from_sacct[2].status;
        assert_eq!(
            (running.state, running.reason.as_deref()),
            (Running, Some("JobArrayTaskLimit"))
        );
    }

    #[test]
    fn sacct_cancellations_and_timeouts() {
        let out = "110|CANCELLED by 1001|None|0:0|1795248211|None|1795248230|debug\n\
                   111|CANCELLED|None|0:15|1795248211|1795248212|1795248230|debug\n\
                   112|TIMEOUT|None|0:15|1795248211|1795248212|1795248290|debug\n\
                   113|PENDING|Resources|0:0|1795248211|Unknown|Unknown|debug\n";
        let rows = parse_sacct(out);
        let seen: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.status.state,
                    r.status.signal,
                    r.status.started_at.is_some(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (Cancelled, None, false),
                (Cancelled, Some(15), true),
                (Failed, Some(15), true),
                (Queued, None, false),
            ]
        );
        assert_eq!(rows[2].status.reason.as_deref(), Some("TIMEOUT"));
        assert_eq!(rows[3].status.exit_code, None);
    }

    /// Captured from the test bed at 1795445490: job 4661 running with a one-minute limit,
    /// 4667 (16 CPUs) and 4668 waiting behind it with backfill's estimates; then, 42 s
    /// later, 4668 cancelled while it waited. A start SLURM only expects is never a start
    /// (issue 21 case 3).
    #[test]
    fn expected_starts_are_not_starts() {
        let at = |s| Some(UNIX_EPOCH + Duration::from_secs(s));
        let waiting = parse_squeue(
            "4667|PENDING|Resources|1795445438|1795445490|1795446090|debug|0|(null)|\n\
             4668|PENDING|Priority|1795445439|1795446060|1795446360|debug|0|(null)|\n\
             4661|RUNNING|None|1795445430|1795445430|1795445490|debug|0|(null)|\n",
        );
        let seen: Vec<_> = waiting
            .iter()
            .map(|r| {
                (
                    r.status.state,
                    r.status.started_at,
                    r.status.expected_start_at,
                    r.status.ended_at,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (Queued, None, at(1_795_445_490), None),
                (Queued, None, at(1_795_446_060), None),
                (Running, at(1_795_445_430), None, None),
            ]
        );
        let cancelled_waiting = &parse_squeue(
            "4668|CANCELLED|Resources|1795445439|1795445532|1795445532|debug|0|(null)|\n",
        )[0];
        assert_eq!(cancelled_waiting.status.state, Cancelled);
        assert_eq!(
            (
                cancelled_waiting.status.started_at,
                cancelled_waiting.status.expected_start_at
            ),
            (None, None),
            "cancelled before it ever started"
        );
        let cancelled_running =
            &parse_squeue("4663|CANCELLED|None|1795445430|1795445430|1795445442|debug|0|(null)|\n")
                [0];
        assert_eq!(cancelled_running.status.started_at, at(1_795_445_430));
        let in_sacct = parse_sacct(
            "4668|CANCELLED by 1001|None|0:0|1795445439|None|1795445532|debug\n\
             4667|PENDING|None|0:0|1795445438|Unknown|Unknown|debug\n",
        );
        assert!(
            in_sacct
                .iter()
                .all(|r| r.status.started_at.is_none() && r.status.expected_start_at.is_none())
        );
    }

    /// SLURM's placeholder start of a job waiting behind one without a time limit (that
    /// job's start + 365 days) is no estimate; a start within half a year of the submit is.
    /// The first row is squeue on the test bed's 24.11 cluster, 48 s after a 16-CPU job
    /// without a time limit filled the node and a 1-minute job queued behind it.
    #[test]
    fn a_start_a_year_ahead_is_no_estimate() {
        let at = |s| Some(UNIX_EPOCH + Duration::from_secs(s));
        let cases = [
            (
                "6|PENDING|Resources|1795654457|1827190455|1827190515|debug|0|(null)|",
                None,
            ),
            // Behind a job without a limit that had run for 100 days: 265 days ahead.
            (
                "7|PENDING|Resources|1795654457|1818550455|1818550515|debug|0|(null)|",
                None,
            ),
            // One that had run for 200 days: 165 days ahead is taken for an estimate.
            (
                "7|PENDING|Resources|1795654457|1809910457|1809910517|debug|0|(null)|",
                at(1_809_910_457),
            ),
            // Waiting behind a month-long job: a real estimate.
            (
                "8|PENDING|Priority|1795654457|1798246457|1798246517|debug|0|(null)|",
                at(1_798_246_457),
            ),
            // A start with no submit to measure it from is kept.
            (
                "9|PENDING|Priority|N/A|1827190455|1827190515|debug|0|(null)|",
                at(1_827_190_455),
            ),
        ];
        for (line, expected) in cases {
            let row = &parse_squeue(&format!("{line}\n"))[0];
            assert_eq!(row.status.expected_start_at, expected, "{line}");
            assert_eq!(row.status.started_at, None, "{line}");
        }
    }

    /// The partition the scheduler used, from squeue's `%P` and sacct's `Partition`; a
    /// field left empty names none.
    #[test]
    fn partitions_are_the_queue() {
        let squeue = parse_squeue(
            "4667|PENDING|Resources|1|2|3|single|0|(null)|\n4668|PENDING|Priority|1|2|3||0|(null)|\n",
        );
        assert_eq!(squeue[0].status.queue.as_deref(), Some("single"));
        assert_eq!(squeue[1].status.queue, None);
        let sacct = parse_sacct("4659|FAILED|None|3:0|1|2|3|debug\n");
        assert_eq!(sacct[0].status.queue.as_deref(), Some("debug"));
    }

    #[test]
    fn odd_lines_are_skipped_not_fatal() {
        let out = "garbage\n\n108|RUNNING|None|1|2|NONE|debug|0|(null)|\n109|RUNNING\n";
        let rows = parse_squeue(out);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].job, "108");
    }

    /// `find`'s lines from the test bed. squeue (`%i|%T|%N|%k`, 24.11) prints `(null)` for
    /// an empty comment; 42 is a submission sbatch reported refused (`--cpus-per-task=65`),
    /// kept FAILED for MinJobAge. sacct (`JobID,State,NodeList,Comment`, 24.11): 27 the
    /// same refusal, 38 a job cancelled while it waited, which did exist; 22.05's array.
    #[test]
    fn find_by_comment() {
        let squeue = "107_0|RUNNING|slurm2node|(null)\n\
                      107_[2-3%1]|PENDING||cf-find-1\n\
                      42|FAILED||cf-nonode-2\n\
                      43|FAILED|slurm2node|key-9\n";
        let sacct = "26|CANCELLED by 1000|slurm2node|cf-externalcancel-1\n\
                     27|FAILED|None assigned|cf-nonode-1\n\
                     29|FAILED|slurm2node|cf-purged-1\n\
                     38|CANCELLED by 1000|None assigned|cf-waiting-1\n\
                     13909_0|COMPLETED|vm|cf-array-1\n\
                     13909_1|FAILED|vm|cf-array-1\n\
                     40|COMPLETED|vm|odd|comment\n";
        let cases = [
            (squeue, "cf-find-1", Some("107")),
            (squeue, "key-9", Some("43")),
            (squeue, "cf-nonode-2", None),
            (squeue, "key", None),
            (sacct, "cf-externalcancel-1", Some("26")),
            (sacct, "cf-nonode-1", None),
            (sacct, "cf-purged-1", Some("29")),
            (sacct, "cf-waiting-1", Some("38")),
            (sacct, "cf-array-1", Some("13909")),
            (sacct, "odd|comment", Some("40")),
        ];
        for (text, key, expected) in cases {
            assert_eq!(find_commented(text, key).as_deref(), expected, "{key:?}");
        }
    }

    #[test]
    fn sinfo_versions() {
        let cases = [
            // The test bed's Debian build.
            ("slurm-wlm 22.05.8\n", Some("slurm-wlm 22.05.8")),
            ("slurm 23.11.4\n", Some("slurm 23.11.4")),
            ("  slurm 24.05.1\r\n", Some("slurm 24.05.1")),
            ("", None),
            ("\n", None),
            ("slurm 22.05.8\nslurm 23.02.1\n", None),
            ("slurm\t22.05.8\n", None),
            ("slurm \u{1b}[31m22.05.8\n", None),
        ];
        for (text, expected) in cases {
            let parsed = sinfo_version(text);
            match expected {
                Some(version) => assert_eq!(parsed.unwrap(), version, "{text:?}"),
                None => {
                    let err = parsed.unwrap_err();
                    assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{text:?}");
                }
            }
        }
    }
}
