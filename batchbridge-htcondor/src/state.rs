//! Pure mapping from HTCondor job ads onto [`JobStatus`]: one proc by its `JobStatus`
//! (1–7) with `ExitCode`, `ExitBySignal`, `HoldReason` and `RemoveReason`, and a cluster
//! of procs as an array.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use batchbridge_core::{JobState, JobStatus};

use crate::parse::ProcAd;

/// One proc's status.
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
        3 if removed_by_policy(ad) => (JobState::Failed, "Removed"),
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
    status.submitted_at = epoch(ad.q_date);
    status.started_at = epoch(ad.job_start_date);
    status.ended_at = match ad.job_status {
        4 => epoch(ad.completion_date),
        3 => epoch(ad.entered_current_status),
        _ => None,
    };
    status
}

/// A removal by a `periodic_remove` expression (batchbridge's wall-time limit, or the
/// pool's policy) is a failure of the job, not a user's cancel.
fn removed_by_policy(ad: &ProcAd) -> bool {
    ad.remove_reason
        .as_deref()
        .is_some_and(|reason| reason.contains("PeriodicRemove"))
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
