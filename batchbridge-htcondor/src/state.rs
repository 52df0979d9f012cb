//! Pure mapping from HTCondor job ads onto [`JobStatus`]: one proc by its `JobStatus`
//! (1–7) with `ExitCode`, `ExitBySignal`, `HoldReason` and `RemoveReason`, and a cluster
//! of procs as an array.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use batchbridge_core::{CancelledBy, FailureCause, JobState, JobStatus};

use crate::parse::ProcAd;

/// The reason batchbridge's cancel gives `condor_rm -reason` (`sh/cancel.sh`, which gets it
/// as a parameter). HTCondor
/// records it as the proc's `RemoveReason` with ` (by user NAME)` appended, which tells a
/// cancel through batchbridge from a `condor_rm` by hand under the same account.
pub const CANCEL_REASON: &str = "cancelled through batchbridge";

/// One proc's status, with the cause of a Failed or Cancelled proc:
///
/// | HTCondor | cause |
/// |---|---|
/// | Completed, `ExitBySignal` | [`Signal`](FailureCause::Signal)`(ExitSignal)` |
/// | Completed, `ExitCode` ≠ 0 | [`ExitCode`](FailureCause::ExitCode), or [`NotStarted`](FailureCause::NotStarted) when its job directory says why the script never ran |
/// | Removed by batchbridge's wall-time `periodic_remove` | [`WallTimeExceeded`](FailureCause::WallTimeExceeded) |
/// | Removed by another `periodic_remove` or `SYSTEM_PERIODIC_REMOVE` | [`Other`](FailureCause::Other) |
/// | Removed by batchbridge's cancel ([`CANCEL_REASON`]) | [`Cancelled`](FailureCause::Cancelled)`(Request)` |
/// | Removed `via condor_rm (by user NAME)` | [`Cancelled`](FailureCause::Cancelled)`(Account(NAME))` |
/// | Removed, any other reason | [`Cancelled`](FailureCause::Cancelled)`(Unknown)` |
///
/// A Held proc is not over: its `HoldReason` stays the status's reason, with no cause.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_htcondor::parse::ProcAd;
/// use batchbridge_htcondor::state::proc_status;
///
/// let held = ProcAd { job_status: 5, hold_reason: Some("disk quota".into()), ..ProcAd::default() };
/// let status = proc_status(&held);
/// assert_eq!((status.state, status.native_state.as_str()), (JobState::Held, "Held"));
/// assert_eq!(status.reason.as_deref(), Some("disk quota"));
/// ```
pub fn proc_status(ad: &ProcAd) -> JobStatus {
    let (state, native) = match ad.job_status {
        1 => (JobState::Queued, "Idle"),
        2 => (JobState::Running, "Running"),
        3 if removal(ad).is_failure() => (JobState::Failed, "Removed"),
        3 => (JobState::Cancelled, "Removed"),
        4 if ad.exit_by_signal == Some(true) || ad.exit_code.is_some_and(|c| c != 0) => {
            (JobState::Failed, "Completed")
        }
        4 => (JobState::Succeeded, "Completed"),
        5 => (JobState::Held, "Held"),
        6 => (JobState::Running, "TransferringOutput"),
        7 => (JobState::Suspended, "Suspended"),
        other => {
            let mut status = JobStatus::unknown(format!(
                "HTCondor JobStatus {other} is not one batchbridge knows"
            ));
            status.native_state = other.to_string();
            return status;
        }
    };
    let mut status = JobStatus::new(state, native);
    status.reason = match ad.job_status {
        1 => Some(
            ad.last_rej_match_reason
                .as_deref()
                .map_or("not matched to a slot yet", str::trim)
                .to_owned(),
        ),
        3 => ad.remove_reason.clone(),
        4 => ad.not_started.clone(),
        5 => ad.hold_reason.clone(),
        _ => None,
    };
    if ad.job_status == 4 {
        if ad.exit_by_signal == Some(true) {
            status.signal = ad.exit_signal;
        } else {
            status.exit_code = ad.exit_code;
        }
    }
    status.cause = match (state, ad.job_status) {
        (JobState::Failed | JobState::Cancelled, 3) => Some(removal(ad).cause()),
        (JobState::Failed, _) if ad.not_started.is_some() => Some(FailureCause::NotStarted),
        (JobState::Failed, _) => Some(match (status.signal, status.exit_code) {
            (Some(signal), _) => FailureCause::Signal(signal),
            (None, Some(code)) => FailureCause::ExitCode(code),
            (None, None) => FailureCause::Other,
        }),
        _ => None,
    };
    status.submitted_at = epoch(ad.q_date);
    status.started_at = epoch(ad.job_start_date);
    status.ended_at = match ad.job_status {
        4 => epoch(ad.completion_date),
        3 => epoch(ad.entered_current_status),
        _ => None,
    };
    // Evicted, vacated or preempted, HTCondor puts a job back to Idle under the same id.
    status.with_starts(ad.num_job_starts.unwrap_or(0))
}

/// The expression of batchbridge's wall-time `periodic_remove`, up to its number of seconds
/// (see [`submit_description`](crate::description::submit_description)).
const WALL_TIME_EXPRESSION: &str = "JobStatus == 2 && time() - JobCurrentStartDate > ";

/// Who or what removed a proc, read from its `RemoveReason`.
#[derive(Debug, PartialEq, Eq)]
enum Removal {
    /// batchbridge's wall-time `periodic_remove`.
    WallTime,
    /// Another `periodic_remove` of the job, or the pool's `SYSTEM_PERIODIC_REMOVE`.
    Policy,
    /// A cancel, by whom.
    Cancel(CancelledBy),
}

impl Removal {
    /// A removal by a policy is a failure of the job, not a cancel.
    fn is_failure(&self) -> bool {
        !matches!(self, Self::Cancel(_))
    }

    fn cause(self) -> FailureCause {
        match self {
            Self::WallTime => FailureCause::WallTimeExceeded,
            Self::Policy => FailureCause::Other,
            Self::Cancel(by) => FailureCause::Cancelled(by),
        }
    }
}

/// Reads a `RemoveReason` as the schedd writes it: `The job attribute PeriodicRemove
/// expression 'EXPR' evaluated to TRUE`, `The system macro SYSTEM_PERIODIC_REMOVE expression
/// 'EXPR' evaluated to TRUE`, or condor_rm's reason (`via condor_rm` unless `-reason` gave
/// one) followed by ` (by user NAME)`.
fn removal(ad: &ProcAd) -> Removal {
    let reason = ad.remove_reason.as_deref().unwrap_or("").trim();
    if let Some(expression) = reason
        .strip_prefix("The job attribute PeriodicRemove expression '")
        .and_then(|rest| rest.strip_suffix("' evaluated to TRUE"))
    {
        let wall_time = expression
            .strip_prefix(WALL_TIME_EXPRESSION)
            .is_some_and(|seconds| {
                !seconds.is_empty() && seconds.bytes().all(|b| b.is_ascii_digit())
            });
        return if wall_time {
            Removal::WallTime
        } else {
            Removal::Policy
        };
    }
    if reason.starts_with("The system macro SYSTEM_PERIODIC_REMOVE expression ") {
        return Removal::Policy;
    }
    let account = reason
        .strip_suffix(')')
        .and_then(|rest| rest.rsplit_once(" (by user "));
    match account {
        Some((CANCEL_REASON, _)) => Removal::Cancel(CancelledBy::Request),
        Some((_, user)) if !user.is_empty() && !user.contains(char::is_whitespace) => {
            Removal::Cancel(CancelledBy::Account(user.to_owned()))
        }
        _ => Removal::Cancel(CancelledBy::Unknown),
    }
}

/// HTCondor's dates are epoch seconds; 0 means "not yet".
fn epoch(seconds: Option<i64>) -> Option<SystemTime> {
    let seconds = u64::try_from(seconds?).ok().filter(|s| *s > 0)?;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Cluster `id`'s status from the ads of its procs still in the queue and of those in the
/// history (history wins: a proc there has left the queue for good). A cluster of more
/// than one proc is an array with per-task counts. Procs not in either while others are
/// still queued have not materialized yet (`max_materialize`) and wait.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_htcondor::parse::ProcAd;
/// use batchbridge_htcondor::state::cluster_status;
///
/// let done = |proc_id, exit_code| ProcAd {
///     cluster_id: 7, proc_id, job_status: 4, exit_code: Some(exit_code),
///     batch_bridge_tasks: Some(3), ..ProcAd::default()
/// };
/// let history = [done(0, 0), done(1, 4), done(2, 0)];
/// let status = cluster_status("7", &[], &history.iter().collect::<Vec<_>>());
/// let tasks = status.tasks.unwrap();
/// assert_eq!((status.state, tasks.succeeded, tasks.failed), (JobState::Failed, 2, 1));
/// ```
pub fn cluster_status(id: &str, queue: &[&ProcAd], history: &[&ProcAd]) -> JobStatus {
    let mut procs: BTreeMap<u32, &ProcAd> = BTreeMap::new();
    for ad in queue.iter().chain(history) {
        procs.insert(ad.proc_id, ad);
    }
    let Some(last) = procs.keys().next_back() else {
        return JobStatus::unknown(format!(
            "HTCondor knows no cluster {id}: it is in neither condor_q nor condor_history"
        ));
    };
    let total = procs
        .values()
        .find_map(|ad| ad.batch_bridge_tasks)
        .unwrap_or(last + 1)
        .max(last + 1);
    if let (1, Some(ad)) = (total, procs.get(&0)) {
        return proc_status(ad);
    }
    let waiting = JobStatus::new(JobState::Queued, "Idle")
        .with_reason("waiting to materialize (max_materialize)");
    let statuses: Vec<Option<JobStatus>> = (0..total)
        .map(|proc_id| match procs.get(&proc_id) {
            Some(ad) => Some(proc_status(ad)),
            None if !queue.is_empty() => Some(waiting.clone()),
            None => None,
        })
        .collect();
    let statuses: Vec<Option<&JobStatus>> = statuses.iter().map(Option::as_ref).collect();
    JobStatus::of_array(id, "HTCondor", &statuses)
}

#[cfg(test)]
mod tests {
    use batchbridge_core::JobState::*;

    use super::*;
    use crate::parse::parse_ads;

    /// `condor_history -json -attributes ATTRIBUTES` on the test bed: a success, exit 3,
    /// a condor_rm of a running job, a wall-time removal.
    const HISTORY: &str = r#"[
{
  "BatchBridgeTasks": 1, "ClusterId": 20, "CompletionDate": 1795250393, "EnteredCurrentStatus": 1795250393,
  "ExitBySignal": false, "ExitCode": 0, "JobStartDate": 1795250391, "JobStatus": 4, "ProcId": 0, "QDate": 1795250389
}
,
{
  "BatchBridgeTasks": 1, "ClusterId": 21, "CompletionDate": 1795250400, "EnteredCurrentStatus": 1795250400,
  "ExitBySignal": false, "ExitCode": 3, "JobStartDate": 1795250399, "JobStatus": 4, "ProcId": 0, "QDate": 1795250398
}
,
{
  "BatchBridgeTasks": 1, "ClusterId": 22, "CompletionDate": 0, "EnteredCurrentStatus": 1795250410,
  "ExitBySignal": true, "ExitSignal": 15, "JobStartDate": 1795250405, "JobStatus": 3, "ProcId": 0,
  "QDate": 1795250404, "RemoveReason": "via condor_rm (by user batch)"
}
,
{
  "BatchBridgeTasks": 1, "ClusterId": 23, "CompletionDate": 0, "EnteredCurrentStatus": 1795250480,
  "ExitBySignal": true, "ExitSignal": 15, "JobStartDate": 1795250470, "JobStatus": 3, "ProcId": 0,
  "QDate": 1795250469,
  "RemoveReason": "The job attribute PeriodicRemove expression 'JobStatus == 2 && time() - JobCurrentStartDate > 5' evaluated to TRUE"
}
]"#;

    #[test]
    fn every_job_status_maps_with_its_reason_and_exit() {
        let history = parse_ads(HISTORY).unwrap();
        let ad = |job_status: u8| ProcAd {
            job_status,
            ..ProcAd::default()
        };
        /// The ad, then the state, native word, reason, exit code and signal it maps to.
        type Case<'a> = (
            ProcAd,
            JobState,
            &'a str,
            Option<&'a str>,
            Option<i32>,
            Option<i32>,
        );
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            (ad(1), Queued, "Idle", Some("not matched to a slot yet"), None, None),
            (ProcAd { last_rej_match_reason: Some("no match found ".into()), ..ad(1) },
                Queued, "Idle", Some("no match found"), None, None),
            (ad(2), Running, "Running", None, None, None),
            (history[2].clone(), Cancelled, "Removed", Some("via condor_rm (by user batch)"), None, None),
            (history[3].clone(), Failed, "Removed", Some("The job attribute PeriodicRemove expression 'JobStatus == 2 && time() - JobCurrentStartDate > 5' evaluated to TRUE"), None, None),
            (history[0].clone(), Succeeded, "Completed", None, Some(0), None),
            (history[1].clone(), Failed, "Completed", None, Some(3), None),
            (ProcAd { exit_code: Some(70), not_started: Some("the script never ran: gone".into()), ..ad(4) },
                Failed, "Completed", Some("the script never ran: gone"), Some(70), None),
            (ProcAd { exit_by_signal: Some(true), exit_signal: Some(9), ..ad(4) },
                Failed, "Completed", None, None, Some(9)),
            (ProcAd { hold_reason: Some("Failed to execute".into()), ..ad(5) },
                Held, "Held", Some("Failed to execute"), None, None),
            (ad(6), Running, "TransferringOutput", None, None, None),
            (ad(7), Suspended, "Suspended", None, None, None),
            (ad(9), Unknown, "9", Some("HTCondor JobStatus 9 is not one batchbridge knows"), None, None),
        ];
        for (ad, state, native, reason, exit_code, signal) in cases {
            let status = proc_status(&ad);
            assert_eq!(
                (
                    status.state,
                    status.native_state.as_str(),
                    status.reason.as_deref()
                ),
                (state, native, reason),
                "{ad:?}"
            );
            assert_eq!(
                (status.exit_code, status.signal),
                (exit_code, signal),
                "{ad:?}"
            );
        }
    }

    /// `condor_history -json` on the test bed for a script exiting 3, one killed by SIGKILL,
    /// `condor_rm` of a running and of an idle job, batchbridge's cancel, a wall-time
    /// removal, and an array whose proc 1 exits 4.
    const ENDINGS: &str = r#"[
{ "ClusterId": 1307, "CompletionDate": 1795445542, "EnteredCurrentStatus": 1795445542, "ExitBySignal": false,
  "ExitCode": 3, "JobStartDate": 1795445542, "JobStatus": 4, "ProcId": 0, "QDate": 1795445542 },
{ "ClusterId": 1308, "CompletionDate": 1795445542, "EnteredCurrentStatus": 1795445542, "ExitBySignal": true,
  "ExitSignal": 9, "JobStartDate": 1795445542, "JobStatus": 4, "ProcId": 0, "QDate": 1795445542 },
{ "ClusterId": 1309, "EnteredCurrentStatus": 1795445559, "ExitBySignal": true, "ExitSignal": 15,
  "JobStartDate": 1795445542, "JobStatus": 3, "ProcId": 0, "QDate": 1795445542,
  "RemoveReason": "via condor_rm (by user batch)" },
{ "ClusterId": 1312, "EnteredCurrentStatus": 1795445559, "ExitBySignal": false, "JobStatus": 3,
  "LastRejMatchReason": "no match found ", "ProcId": 0, "QDate": 1795445542,
  "RemoveReason": "via condor_rm (by user batch)" },
{ "ClusterId": 1313, "EnteredCurrentStatus": 1795445559, "ExitBySignal": false, "JobStatus": 3, "ProcId": 0,
  "QDate": 1795445542, "RemoveReason": "cancelled through batchbridge (by user batch)" },
{ "ClusterId": 1311, "EnteredCurrentStatus": 1795445552, "ExitBySignal": true, "ExitSignal": 15,
  "JobStartDate": 1795445544, "JobStatus": 3, "ProcId": 0, "QDate": 1795445542,
  "RemoveReason": "The job attribute PeriodicRemove expression 'JobStatus == 2 && time() - JobCurrentStartDate > 5' evaluated to TRUE" },
{ "ClusterId": 1310, "CompletionDate": 1795445544, "EnteredCurrentStatus": 1795445544, "ExitBySignal": false,
  "ExitCode": 0, "JobStartDate": 1795445543, "JobStatus": 4, "ProcId": 2, "QDate": 1795445542 },
{ "ClusterId": 1310, "CompletionDate": 1795445543, "EnteredCurrentStatus": 1795445543, "ExitBySignal": false,
  "ExitCode": 4, "JobStartDate": 1795445542, "JobStatus": 4, "ProcId": 1, "QDate": 1795445542 },
{ "ClusterId": 1310, "CompletionDate": 1795445542, "EnteredCurrentStatus": 1795445542, "ExitBySignal": false,
  "ExitCode": 0, "JobStartDate": 1795445542, "JobStatus": 4, "ProcId": 0, "QDate": 1795445542 }
]"#;

    #[test]
    fn every_ending_has_its_cause() {
        use CancelledBy::{Account, Request, Unknown as Nobody};
        use FailureCause as C;
        let ads = parse_ads(ENDINGS).unwrap();
        let cluster =
            |id: u64| -> Vec<&ProcAd> { ads.iter().filter(|a| a.cluster_id == id).collect() };
        let removed = |reason: &str| ProcAd {
            job_status: 3,
            remove_reason: Some(reason.to_owned()),
            ..ProcAd::default()
        };
        let never_ran = ProcAd {
            job_status: 4,
            exit_code: Some(70),
            not_started: Some("the script never ran: gone".into()),
            ..ProcAd::default()
        };
        let own_70 = ProcAd {
            job_status: 4,
            exit_code: Some(70),
            ..ProcAd::default()
        };
        let statuses = [
            ("exit 3", cluster_status("1307", &[], &cluster(1307))),
            ("SIGKILL", cluster_status("1308", &[], &cluster(1308))),
            (
                "condor_rm running",
                cluster_status("1309", &[], &cluster(1309)),
            ),
            (
                "condor_rm idle",
                cluster_status("1312", &[], &cluster(1312)),
            ),
            (
                "batchbridge's cancel",
                cluster_status("1313", &[], &cluster(1313)),
            ),
            ("wall time", cluster_status("1311", &[], &cluster(1311))),
            ("array, proc 1 exits 4", {
                let mut procs = cluster(1310);
                let tasks = ProcAd {
                    batch_bridge_tasks: Some(3),
                    ..procs[0].clone()
                };
                procs[0] = &tasks;
                cluster_status("1310", &[], &procs)
            }),
            (
                "the job's own periodic_remove",
                proc_status(&removed(
                    "The job attribute PeriodicRemove expression 'NumJobStarts > 3' evaluated to TRUE",
                )),
            ),
            (
                "the pool's policy",
                proc_status(&removed(
                    "The system macro SYSTEM_PERIODIC_REMOVE expression 'ResidentSetSize > 100' evaluated to TRUE",
                )),
            ),
            ("removed, nobody named", proc_status(&removed("removed"))),
            ("never ran", proc_status(&never_ran)),
            ("a script of its own exiting 70", proc_status(&own_70)),
            (
                "done",
                proc_status(&ProcAd {
                    job_status: 4,
                    exit_code: Some(0),
                    ..ProcAd::default()
                }),
            ),
            (
                "held",
                proc_status(&ProcAd {
                    job_status: 5,
                    hold_reason: Some("x".into()),
                    ..ProcAd::default()
                }),
            ),
        ];
        #[rustfmt::skip]
        let expected = [
            (Failed, Some(C::ExitCode(3))),
            (Failed, Some(C::Signal(9))),
            (Cancelled, Some(C::Cancelled(Account("batch".into())))),
            (Cancelled, Some(C::Cancelled(Account("batch".into())))),
            (Cancelled, Some(C::Cancelled(Request))),
            (Failed, Some(C::WallTimeExceeded)),
            (Failed, Some(C::ExitCode(4))),
            (Failed, Some(C::Other)),
            (Failed, Some(C::Other)),
            (Cancelled, Some(C::Cancelled(Nobody))),
            (Failed, Some(C::NotStarted)),
            (Failed, Some(C::ExitCode(70))),
            (Succeeded, None),
            (Held, None),
        ];
        for ((what, status), (state, cause)) in statuses.into_iter().zip(expected) {
            assert_eq!(
                (status.state, status.cause.clone()),
                (state, cause),
                "{what}: {status:?}"
            );
        }
    }

    /// The wall-time removal is recognised by the very expression the submit description
    /// sets, and batchbridge's cancel by the reason its cancel script gives.
    #[test]
    fn the_description_and_the_cancel_script_say_what_is_recognised() {
        let mut spec = batchbridge_core::JobSpec::new(
            batchbridge_core::JobKey::new("k").unwrap(),
            "n",
            "true",
        );
        spec.resources.wall_time = Some(Duration::from_millis(90_500));
        let description =
            crate::description::submit_description(&spec, "/w/jobs/k", "/w/job-events.log")
                .unwrap();
        let expression = description
            .lines()
            .find_map(|line| line.strip_prefix("periodic_remove = "))
            .expect("a wall time sets periodic_remove");
        let reason =
            format!("The job attribute PeriodicRemove expression '{expression}' evaluated to TRUE");
        let removed = ProcAd {
            job_status: 3,
            remove_reason: Some(reason),
            ..ProcAd::default()
        };
        assert_eq!(
            proc_status(&removed).cause,
            Some(FailureCause::WallTimeExceeded)
        );
    }

    #[test]
    fn dates_come_from_the_ad_and_zero_means_not_yet() {
        let history = parse_ads(HISTORY).unwrap();
        let done = proc_status(&history[0]);
        let at = |s| Some(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(done.submitted_at, at(1_795_250_389));
        assert_eq!(done.started_at, at(1_795_250_391));
        assert_eq!(done.ended_at, at(1_795_250_393));
        let removed = proc_status(&history[2]);
        assert_eq!(removed.ended_at, at(1_795_250_410), "removal time");
        let idle = proc_status(&ProcAd {
            job_status: 1,
            job_start_date: Some(0),
            ..ProcAd::default()
        });
        assert_eq!(idle.started_at, None);
    }

    fn proc(proc_id: u32, job_status: u8, exit_code: Option<i32>) -> ProcAd {
        ProcAd {
            cluster_id: 30,
            proc_id,
            job_status,
            exit_code,
            batch_bridge_tasks: Some(3),
            ..ProcAd::default()
        }
    }

    #[test]
    fn clusters_of_procs_are_arrays() {
        struct Case {
            what: &'static str,
            queue: Vec<ProcAd>,
            history: Vec<ProcAd>,
            state: JobState,
            counts: Option<(u32, u32, u32, u32)>, // pending, running, succeeded, failed
        }
        let cases = [
            Case {
                what: "nothing known",
                queue: vec![],
                history: vec![],
                state: Unknown,
                counts: None,
            },
            Case {
                what: "two running, one not materialized yet",
                queue: vec![proc(0, 2, None), proc(1, 2, None)],
                history: vec![],
                state: Running,
                counts: Some((1, 2, 0, 0)),
            },
            Case {
                what: "one done, one failed, one running",
                queue: vec![proc(2, 2, None)],
                history: vec![proc(0, 4, Some(0)), proc(1, 4, Some(4))],
                state: Running,
                counts: Some((0, 1, 1, 1)),
            },
            Case {
                what: "all done, one failed",
                queue: vec![],
                history: vec![
                    proc(0, 4, Some(0)),
                    proc(1, 4, Some(4)),
                    proc(2, 4, Some(0)),
                ],
                state: Failed,
                counts: Some((0, 0, 2, 1)),
            },
            Case {
                what: "a proc both in the queue and in history: history wins",
                queue: vec![proc(0, 2, None)],
                history: vec![
                    proc(0, 4, Some(0)),
                    proc(1, 4, Some(0)),
                    proc(2, 4, Some(0)),
                ],
                state: Succeeded,
                counts: Some((0, 0, 3, 0)),
            },
            Case {
                what: "history rotated away a proc of a finished cluster",
                queue: vec![],
                history: vec![proc(0, 4, Some(0)), proc(2, 4, Some(0))],
                state: Unknown,
                counts: Some((1, 0, 2, 0)),
            },
            Case {
                what: "waiting procs all held",
                queue: vec![proc(0, 5, None), proc(1, 5, None)],
                history: vec![proc(2, 4, Some(0))],
                state: Held,
                counts: Some((2, 0, 1, 0)),
            },
        ];
        for case in cases {
            let queue: Vec<&ProcAd> = case.queue.iter().collect();
            let history: Vec<&ProcAd> = case.history.iter().collect();
            let status = cluster_status("30", &queue, &history);
            assert_eq!(status.state, case.state, "{}: {status:?}", case.what);
            let counts = status
                .tasks
                .map(|t| (t.pending, t.running, t.succeeded, t.failed));
            assert_eq!(counts, case.counts, "{}: {status:?}", case.what);
        }
    }

    #[test]
    fn a_single_proc_is_not_an_array() {
        let mut done = proc(0, 4, Some(3));
        done.batch_bridge_tasks = Some(1);
        let status = cluster_status("30", &[], &[&done]);
        assert_eq!(
            (status.state, status.exit_code, status.tasks),
            (Failed, Some(3), None)
        );
    }
}
