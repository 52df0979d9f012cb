//! The reconcile decision: a pure function of a BatchJob's spec, its status and the last
//! observation of its scheduler job, returning the status to write and at most one action.
//! The kube glue (`controller::job`) applies it; every rule is tested here, in tables.
//!
//! A job moves through attempts. Each attempt is submitted under its own idempotency key
//! (the resource's UID, then `UID.N` for attempt N > 1), and the status says
//! `Submitted` with the attempt number *before* the backend is asked; so an operator that
//! stops between the submit and the write of the job id submits the same key again, which
//! the backend answers with the job it already has.

use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBuilder};
use batchbridge_core::{JobId, JobStatus};

use crate::crd::{BatchJobStatus, CleanupPolicy, Phase, RetryPolicy, RetryReason};
use crate::reason::{ConditionType, Reason};
use crate::status::{condition, holds, observed, set_condition};

/// How often an active job is looked at even when its poller reports nothing, and a job
/// waiting for its cluster is tried again.
pub const RECHECK: Duration = Duration::from_secs(300);
/// How long a job waits before its cluster is tried again after a problem.
pub const CLUSTER_RECHECK: Duration = Duration::from_secs(15);
/// How long, by default, after a BatchJob's deletion the operator keeps trying to cancel its
/// job and remove its files (a cluster unreachable, a job still ending) before it lets the
/// resource go with a Warning Event: `kubectl delete` never hangs on a broken cluster.
pub const REMOVAL_DEADLINE: Duration = Duration::from_secs(120);

/// Why a job's cluster cannot be used right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterProblem {
    /// Which problem: BatchClusterNotFound, SecretNotFound, SecretMalformed, Unreachable,
    /// HostKeyMismatch, AuthenticationFailed, UnknownScheduler...
    pub reason: Reason,
    /// What is wrong and what to do about it.
    pub message: String,
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The resource's `metadata.generation`: which spec is current.
    pub generation: i64,
    /// The status as last written.
    pub status: &'a BatchJobStatus,
    /// The spec's retry policy.
    pub retry_policy: Option<&'a RetryPolicy>,
    /// Whether the output policy keeps anything (a tail, a ConfigMap or a log pod).
    pub keeps_output: bool,
    /// The spec's ttlSecondsAfterFinished: how long a finished job is kept.
    pub ttl_after_finished: Option<Duration>,
    /// Whether the job's cluster can be used.
    pub cluster: Result<(), &'a ClusterProblem>,
    /// The poller's latest report on `status.jobId`, if it has one.
    pub observation: Option<&'a JobStatus>,
    /// The time now.
    pub now: SystemTime,
}

/// What to do for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The status to write before the action; `None` leaves it as it is.
    pub status: Option<BatchJobStatus>,
    /// The one side effect to perform, after the status is written.
    pub action: Option<Action>,
    /// What the cluster's poller should do about the job.
    pub watch: Watch,
    /// When to look at the job again if nothing else wakes it.
    pub requeue_after: Option<Duration>,
    /// Whether to delete the BatchJob: it finished for good ttlSecondsAfterFinished ago.
    pub delete: bool,
}

/// A side effect on the batch system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Submit attempt `attempt` under its key; the backend returns the existing job when it
    /// already has one with that key. The status already says Submitted.
    Submit {
        /// The attempt number, from 1.
        attempt: u32,
    },
    /// Fetch the finished job's output (bounded) and keep it as the output policy says.
    CollectOutput {
        /// The scheduler's id of the finished attempt.
        id: JobId,
    },
}

/// Whether the cluster's poller should follow a scheduler job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    /// Follow this job.
    Follow(JobId),
    /// Stop following this job.
    Forget(JobId),
    /// Nothing to follow.
    Nothing,
}

/// What to cancel on deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// The job with this id.
    Job(JobId),
    /// An attempt was being submitted: the job with this attempt's key, if the scheduler
    /// has one.
    ByKey {
        /// The attempt being submitted.
        attempt: u32,
    },
    /// Nothing runs.
    Nothing,
}

/// What to do on deletion, before the finalizer is removed: cancel what may run, then
/// remove the files of attempts 1 to `remove_files` (each under its [`attempt_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// What to cancel first.
    pub cancel: Cancel,
    /// How many attempts' files to remove; 0 when none were submitted or the cleanup
    /// policy keeps them.
    pub remove_files: u32,
}

impl Removal {
    /// Whether there is nothing to do on the cluster.
    pub fn is_nothing(&self) -> bool {
        self.cancel == Cancel::Nothing && self.remove_files == 0
    }
}

/// The idempotency key of `attempt` of the resource with UID `uid`.
///
/// ```
/// use batchbridge_operator::decision::attempt_key;
///
/// assert_eq!(attempt_key("3f2a9c1e-7b4d", 1), "3f2a9c1e-7b4d");
/// assert_eq!(attempt_key("3f2a9c1e-7b4d", 3), "3f2a9c1e-7b4d.3");
/// ```
pub fn attempt_key(uid: &str, attempt: u32) -> String {
    if attempt <= 1 {
        uid.to_owned()
    } else {
        format!("{uid}.{attempt}")
    }
}

/// How long after a failure retry number `retry` (from 0) is submitted: 10 s, doubling, at
/// most 5 minutes.
pub fn retry_backoff(retry: u32) -> Duration {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(10))
        .with_max_delay(Duration::from_secs(300))
        .with_factor(2.0)
        .without_max_times()
        .build()
        // The cap is reached by the sixth retry; walking the iterator further is wasted.
        .nth(retry.min(8) as usize)
        .unwrap_or(Duration::from_secs(300))
}

/// Decides what to do for a job.
pub fn decide(facts: &Facts<'_>) -> Decision {
    let status = facts.status;
    let phase = status.phase.unwrap_or(Phase::Pending);
    if let Err(problem) = facts.cluster {
        return cluster_problem(facts, phase, problem);
    }
    match (phase, &status.job_id) {
        (Phase::Pending, _) => submit(facts, status.attempts + 1, 0),
        // Stopped between asking the backend and writing its answer: ask again, same key.
        (Phase::Submitted, None) => Decision {
            status: cluster_ready(facts),
            action: Some(Action::Submit {
                attempt: status.attempts.max(1),
            }),
            watch: Watch::Nothing,
            requeue_after: None,
            delete: false,
        },
        (phase, id) if phase.is_terminal() => finished(facts, phase, id.as_deref()),
        (_, Some(id)) => active(facts, JobId::from(id.as_str())),
        // An active phase without an id is only ever written as Submitted, handled above.
        (_, None) => submit(facts, status.attempts + 1, 0),
    }
}

/// What to do on deletion: cancel an active job; remove every attempt's files unless the
/// cleanup policy keeps them (earlier attempts, retries and re-runs, have files too).
pub fn removal(status: Option<&BatchJobStatus>, policy: CleanupPolicy) -> Removal {
    let Some(status) = status else {
        return Removal {
            cancel: Cancel::Nothing,
            remove_files: 0,
        };
    };
    let cancel = match (status.phase.unwrap_or(Phase::Pending), &status.job_id) {
        (phase, _) if phase == Phase::Pending || phase.is_terminal() => Cancel::Nothing,
        (_, Some(id)) => Cancel::Job(JobId::from(id.as_str())),
        (_, None) => Cancel::ByKey {
            attempt: status.attempts.max(1),
        },
    };
    let remove_files = match policy {
        CleanupPolicy::OnDelete => status.attempts,
        CleanupPolicy::Never => 0,
    };
    Removal {
        cancel,
        remove_files,
    }
}

/// Whether the operator stops trying to cancel and remove the files of a BatchJob deleted
/// at `deleted_at`: `deadline` (by default [`REMOVAL_DEADLINE`]) has passed.
pub fn removal_abandoned(deleted_at: SystemTime, now: SystemTime, deadline: Duration) -> bool {
    now.duration_since(deleted_at)
        .is_ok_and(|since| since >= deadline)
}

fn cluster_problem(facts: &Facts<'_>, phase: Phase, problem: &ClusterProblem) -> Decision {
    let mut next = facts.status.clone();
    set_condition(
        &mut next.conditions,
        ConditionType::ClusterReady,
        false,
        problem.reason,
        &problem.message,
        facts.now,
    );
    if phase == Phase::Pending {
        next.phase = Some(Phase::Pending);
        next.reason = Some(problem.reason);
        next.message = Some(problem.message.clone());
    }
    Decision {
        status: (next != *facts.status).then_some(next),
        action: None,
        watch: Watch::Nothing,
        requeue_after: Some(CLUSTER_RECHECK),
        delete: false,
    }
}

/// The status with ClusterReady true, if it was not already.
fn cluster_ready(facts: &Facts<'_>) -> Option<BatchJobStatus> {
    let ready = holds(&facts.status.conditions, ConditionType::ClusterReady) == Some(true);
    (!ready).then(|| {
        let mut next = facts.status.clone();
        mark_cluster_ready(&mut next, facts.now);
        next
    })
}

fn mark_cluster_ready(status: &mut BatchJobStatus, now: SystemTime) {
    set_condition(
        &mut status.conditions,
        ConditionType::ClusterReady,
        true,
        Reason::Ready,
        "the cluster answered and its credentials are in place",
        now,
    );
}

/// Starts attempt `attempt` of the current spec: a clean status that says Submitted.
fn submit(facts: &Facts<'_>, attempt: u32, retries: u32) -> Decision {
    let mut conditions = facts.status.conditions.clone();
    conditions.retain(|c| {
        c.type_ != ConditionType::Finished.as_str()
            && c.type_ != ConditionType::OutputCollected.as_str()
    });
    let mut next = BatchJobStatus {
        phase: Some(Phase::Submitted),
        reason: Some(Reason::Submitting),
        message: Some(format!("submitting attempt {attempt}")),
        attempts: attempt,
        retries,
        observed_generation: Some(facts.generation),
        conditions,
        ..BatchJobStatus::default()
    };
    mark_cluster_ready(&mut next, facts.now);
    set_condition(
        &mut next.conditions,
        ConditionType::Submitted,
        false,
        Reason::Submitting,
        &format!("submitting attempt {attempt}"),
        facts.now,
    );
    let previous = facts.status.job_id.as_deref().map(JobId::from);
    Decision {
        status: Some(next),
        action: Some(Action::Submit { attempt }),
        watch: previous.map_or(Watch::Nothing, Watch::Forget),
        requeue_after: None,
        delete: false,
    }
}

fn active(facts: &Facts<'_>, id: JobId) -> Decision {
    let mut next = match facts.observation {
        Some(job) => observed(facts.status, job, facts.now),
        None => facts.status.clone(),
    };
    mark_cluster_ready(&mut next, facts.now);
    let finished = next.phase.is_some_and(Phase::is_terminal);
    Decision {
        status: (next != *facts.status).then_some(next),
        action: None,
        // A job seen finishing is forgotten on the next pass, after the write.
        watch: Watch::Follow(id),
        requeue_after: Some(if finished { Duration::ZERO } else { RECHECK }),
        delete: false,
    }
}

fn finished(facts: &Facts<'_>, phase: Phase, id: Option<&str>) -> Decision {
    let status = facts.status;
    let forget = id.map_or(Watch::Nothing, |id| Watch::Forget(JobId::from(id)));
    if status
        .observed_generation
        .is_some_and(|generation| generation != facts.generation)
    {
        return submit(facts, status.attempts + 1, 0);
    }
    if let Some(id) = id
        && facts.keeps_output
        && condition(&status.conditions, ConditionType::OutputCollected).is_none()
    {
        return Decision {
            status: None,
            action: Some(Action::CollectOutput {
                id: JobId::from(id),
            }),
            watch: forget,
            requeue_after: None,
            delete: false,
        };
    }
    if phase == Phase::Failed
        && let Some(policy) = facts.retry_policy
        && retryable(status, policy)
    {
        let due = status.finish_time.as_ref().map_or(facts.now, |finished| {
            SystemTime::from(finished.0) + retry_backoff(status.retries)
        });
        return match due.duration_since(facts.now) {
            Ok(wait) if !wait.is_zero() => Decision {
                status: None,
                action: None,
                watch: forget,
                requeue_after: Some(wait),
                delete: false,
            },
            _ => submit(facts, status.attempts + 1, status.retries + 1),
        };
    }
    // The job rests: for good, unless its spec is edited.
    let expires = facts.ttl_after_finished.map(|ttl| {
        let finished = status
            .finish_time
            .as_ref()
            .map_or(facts.now, |finished| SystemTime::from(finished.0));
        (finished + ttl)
            .duration_since(facts.now)
            .unwrap_or(Duration::ZERO)
    });
    Decision {
        status: None,
        action: None,
        watch: forget,
        requeue_after: expires.filter(|wait| !wait.is_zero()),
        delete: expires.is_some_and(|wait| wait.is_zero()),
    }
}

fn retryable(status: &BatchJobStatus, policy: &RetryPolicy) -> bool {
    let reason = status.reason.unwrap_or(Reason::Unknown);
    status.retries < policy.max_retries
        && reason != Reason::SubmitRejected
        && (policy.retry_on.is_empty() || policy.retry_on.contains(&RetryReason::from(reason)))
}

#[cfg(test)]
mod tests {
    use batchbridge_core::JobState;

    use super::*;
    use crate::status::time;

    const GENERATION: i64 = 4;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    /// A status at `phase`, attempt 1 of the current generation, with job id 42 unless the
    /// phase is Pending, and ClusterReady true.
    fn at(phase: Phase) -> BatchJobStatus {
        let mut status = BatchJobStatus {
            phase: Some(phase),
            job_id: (phase != Phase::Pending).then(|| "42".to_owned()),
            attempts: u32::from(phase != Phase::Pending),
            observed_generation: (phase != Phase::Pending).then_some(GENERATION),
            ..BatchJobStatus::default()
        };
        mark_cluster_ready(&mut status, now());
        if phase.is_terminal() {
            status.finish_time = Some(time(now() - Duration::from_secs(60)));
            status.reason = Some(match phase {
                Phase::Succeeded => Reason::Succeeded,
                Phase::Cancelled => Reason::Cancelled,
                _ => Reason::Unknown,
            });
        }
        status
    }

    fn with(mut status: BatchJobStatus, edit: impl FnOnce(&mut BatchJobStatus)) -> BatchJobStatus {
        edit(&mut status);
        status
    }

    fn collected(status: BatchJobStatus) -> BatchJobStatus {
        with(status, |s| {
            set_condition(
                &mut s.conditions,
                ConditionType::OutputCollected,
                true,
                Reason::Collected,
                "",
                now(),
            );
        })
    }

    fn failed(reason: Reason, retries: u32, finished_ago: u64) -> BatchJobStatus {
        collected(with(at(Phase::Failed), |s| {
            s.reason = Some(reason);
            s.retries = retries;
            s.attempts = retries + 1;
            s.finish_time = Some(time(now() - Duration::from_secs(finished_ago)));
        }))
    }

    struct Case {
        name: &'static str,
        status: BatchJobStatus,
        generation: i64,
        policy: Option<RetryPolicy>,
        keeps_output: bool,
        ttl: Option<Duration>,
        cluster: Option<ClusterProblem>,
        observation: Option<JobStatus>,
        /// The expected phase, attempts and retries of the written status (None: no write).
        writes: Option<(Phase, u32, u32)>,
        action: Option<Action>,
        watch: Watch,
        requeue_after: Option<Duration>,
        delete: bool,
    }

    fn case(name: &'static str, status: BatchJobStatus) -> Case {
        Case {
            name,
            status,
            generation: GENERATION,
            policy: None,
            keeps_output: true,
            ttl: None,
            cluster: None,
            observation: None,
            writes: None,
            action: None,
            watch: Watch::Nothing,
            requeue_after: None,
            delete: false,
        }
    }

    fn policy(max_retries: u32, retry_on: &[RetryReason]) -> Option<RetryPolicy> {
        Some(RetryPolicy {
            max_retries,
            retry_on: retry_on.to_vec(),
        })
    }

    fn problem() -> ClusterProblem {
        ClusterProblem {
            reason: Reason::SecretNotFound,
            message: "Secret hpc-key not found in namespace research".into(),
        }
    }

    fn job(state: JobState) -> JobStatus {
        JobStatus::new(state, "native")
    }

    fn id() -> JobId {
        JobId::from("42")
    }

    fn submit(attempt: u32) -> Option<Action> {
        Some(Action::Submit { attempt })
    }

    #[test]
    fn decisions() {
        let cases = vec![
            Case {
                writes: Some((Phase::Submitted, 1, 0)),
                action: submit(1),
                ..case(
                    "a new job is submitted as attempt 1",
                    BatchJobStatus::default(),
                )
            },
            Case {
                cluster: Some(problem()),
                writes: Some((Phase::Pending, 0, 0)),
                requeue_after: Some(CLUSTER_RECHECK),
                ..case("a new job waits for its cluster", BatchJobStatus::default())
            },
            Case {
                cluster: Some(problem()),
                writes: Some((Phase::Running, 1, 0)),
                requeue_after: Some(CLUSTER_RECHECK),
                ..case(
                    "a running job keeps its phase when the cluster fails",
                    at(Phase::Running),
                )
            },
            Case {
                cluster: Some(problem()),
                requeue_after: Some(CLUSTER_RECHECK),
                ..case(
                    "a reported problem is not written twice",
                    with(at(Phase::Running), |s| {
                        let p = problem();
                        set_condition(
                            &mut s.conditions,
                            ConditionType::ClusterReady,
                            false,
                            p.reason,
                            &p.message,
                            now(),
                        );
                    }),
                )
            },
            Case {
                action: submit(1),
                ..case(
                    "stopped between submit and the id's write: the same key again",
                    with(at(Phase::Submitted), |s| s.job_id = None),
                )
            },
            Case {
                action: submit(3),
                ..case(
                    "the same for a later attempt",
                    with(at(Phase::Submitted), |s| {
                        s.job_id = None;
                        s.attempts = 3;
                    }),
                )
            },
            Case {
                watch: Watch::Follow(id()),
                requeue_after: Some(RECHECK),
                ..case("a submitted job is followed", at(Phase::Submitted))
            },
            Case {
                observation: Some(job(JobState::Running)),
                writes: Some((Phase::Running, 1, 0)),
                watch: Watch::Follow(id()),
                requeue_after: Some(RECHECK),
                ..case("a change the poller saw is written", at(Phase::Queued))
            },
            Case {
                observation: Some(job(JobState::Succeeded)),
                writes: Some((Phase::Succeeded, 1, 0)),
                watch: Watch::Follow(id()),
                requeue_after: Some(Duration::ZERO),
                ..case(
                    "a job seen finishing is written, then looked at again",
                    at(Phase::Running),
                )
            },
            Case {
                observation: Some(job(JobState::Running)),
                watch: Watch::Follow(id()),
                requeue_after: Some(RECHECK),
                ..case(
                    "an unchanged observation writes nothing",
                    observed(&at(Phase::Running), &job(JobState::Running), now()),
                )
            },
            Case {
                action: Some(Action::CollectOutput { id: id() }),
                watch: Watch::Forget(id()),
                ..case(
                    "a finished job's output is collected once",
                    at(Phase::Succeeded),
                )
            },
            Case {
                keeps_output: false,
                watch: Watch::Forget(id()),
                ..case(
                    "unless the output policy keeps nothing",
                    at(Phase::Succeeded),
                )
            },
            Case {
                watch: Watch::Forget(id()),
                ..case(
                    "a collected, succeeded job rests",
                    collected(at(Phase::Succeeded)),
                )
            },
            Case {
                generation: GENERATION + 1,
                writes: Some((Phase::Submitted, 2, 0)),
                action: submit(2),
                watch: Watch::Forget(id()),
                ..case(
                    "editing a succeeded job runs it again",
                    collected(at(Phase::Succeeded)),
                )
            },
            Case {
                generation: GENERATION + 1,
                writes: Some((Phase::Submitted, 4, 0)),
                action: submit(4),
                watch: Watch::Forget(id()),
                ..case(
                    "editing a failed job starts its retries afresh",
                    failed(Reason::NonZeroExitCode, 2, 60),
                )
            },
            Case {
                generation: GENERATION + 1,
                writes: Some((Phase::Submitted, 2, 0)),
                action: submit(2),
                watch: Watch::Forget(id()),
                ..case(
                    "editing a job before its output was collected runs it again at once",
                    at(Phase::Cancelled),
                )
            },
            Case {
                watch: Watch::Forget(id()),
                ..case(
                    "a failed job without a policy rests",
                    failed(Reason::NonZeroExitCode, 0, 60),
                )
            },
            Case {
                policy: policy(2, &[]),
                writes: Some((Phase::Submitted, 2, 1)),
                action: submit(2),
                watch: Watch::Forget(id()),
                ..case(
                    "a failure is retried after the backoff",
                    failed(Reason::NonZeroExitCode, 0, 60),
                )
            },
            Case {
                policy: policy(2, &[]),
                watch: Watch::Forget(id()),
                requeue_after: Some(Duration::from_secs(7)),
                ..case("but not before", failed(Reason::NonZeroExitCode, 0, 3))
            },
            Case {
                policy: policy(2, &[]),
                watch: Watch::Forget(id()),
                requeue_after: Some(Duration::from_secs(20 - 3)),
                ..case(
                    "the second retry waits twice as long",
                    failed(Reason::NonZeroExitCode, 1, 3),
                )
            },
            Case {
                policy: policy(2, &[]),
                watch: Watch::Forget(id()),
                ..case(
                    "retries stop at maxRetries",
                    failed(Reason::NonZeroExitCode, 2, 600),
                )
            },
            Case {
                policy: policy(3, &[RetryReason::NodeFailure, RetryReason::Preempted]),
                watch: Watch::Forget(id()),
                ..case(
                    "only the listed reasons are retried",
                    failed(Reason::NonZeroExitCode, 0, 600),
                )
            },
            Case {
                policy: policy(3, &[RetryReason::NodeFailure, RetryReason::Preempted]),
                writes: Some((Phase::Submitted, 2, 1)),
                action: submit(2),
                watch: Watch::Forget(id()),
                ..case("a listed reason is", failed(Reason::Preempted, 0, 600))
            },
            Case {
                policy: policy(3, &[RetryReason::Unknown]),
                writes: Some((Phase::Submitted, 2, 1)),
                action: submit(2),
                watch: Watch::Forget(id()),
                ..case(
                    "other causes count as Unknown",
                    failed(Reason::OutOfMemory, 0, 600),
                )
            },
            Case {
                policy: policy(3, &[]),
                ..case(
                    "a refused submit is never retried",
                    with(failed(Reason::SubmitRejected, 0, 600), |s| s.job_id = None),
                )
            },
            Case {
                policy: policy(3, &[]),
                watch: Watch::Forget(id()),
                ..case(
                    "a cancelled job is not retried",
                    collected(with(at(Phase::Cancelled), |s| {
                        s.reason = Some(Reason::NonZeroExitCode)
                    })),
                )
            },
            Case {
                ttl: Some(Duration::from_secs(300)),
                watch: Watch::Forget(id()),
                requeue_after: Some(Duration::from_secs(300 - 60)),
                ..case(
                    "a finished job is looked at again when its ttl expires",
                    collected(at(Phase::Succeeded)),
                )
            },
            Case {
                ttl: Some(Duration::from_secs(60)),
                watch: Watch::Forget(id()),
                delete: true,
                ..case("and deleted once it has", collected(at(Phase::Succeeded)))
            },
            Case {
                ttl: Some(Duration::ZERO),
                watch: Watch::Forget(id()),
                delete: true,
                ..case(
                    "a ttl of 0 deletes a failed job at once",
                    failed(Reason::NonZeroExitCode, 0, 0),
                )
            },
            Case {
                ttl: Some(Duration::ZERO),
                action: Some(Action::CollectOutput { id: id() }),
                watch: Watch::Forget(id()),
                ..case(
                    "but never before its output was collected",
                    at(Phase::Succeeded),
                )
            },
            Case {
                ttl: Some(Duration::ZERO),
                policy: policy(2, &[]),
                watch: Watch::Forget(id()),
                requeue_after: Some(Duration::from_secs(7)),
                ..case(
                    "nor while a retry is due",
                    failed(Reason::NonZeroExitCode, 0, 3),
                )
            },
            Case {
                ttl: Some(Duration::ZERO),
                observation: Some(job(JobState::Succeeded)),
                writes: Some((Phase::Succeeded, 1, 0)),
                watch: Watch::Follow(id()),
                requeue_after: Some(Duration::ZERO),
                ..case("nor while it is active", at(Phase::Running))
            },
            Case {
                ttl: Some(Duration::ZERO),
                generation: GENERATION + 1,
                writes: Some((Phase::Submitted, 2, 0)),
                action: submit(2),
                watch: Watch::Forget(id()),
                ..case(
                    "an edited spec runs it again instead",
                    collected(at(Phase::Succeeded)),
                )
            },
        ];
        let count = cases.len();
        for case in cases {
            let decision = decide(&Facts {
                generation: case.generation,
                status: &case.status,
                retry_policy: case.policy.as_ref(),
                keeps_output: case.keeps_output,
                ttl_after_finished: case.ttl,
                cluster: case.cluster.as_ref().map_or(Ok(()), Err),
                observation: case.observation.as_ref(),
                now: now(),
            });
            let writes = decision
                .status
                .as_ref()
                .map(|s| (s.phase.unwrap_or(Phase::Pending), s.attempts, s.retries));
            assert_eq!(writes, case.writes, "{}: status written", case.name);
            assert_eq!(decision.action, case.action, "{}: action", case.name);
            assert_eq!(decision.watch, case.watch, "{}: watch", case.name);
            assert_eq!(
                decision.requeue_after, case.requeue_after,
                "{}: requeue",
                case.name
            );
            assert_eq!(decision.delete, case.delete, "{}: delete", case.name);
        }
        assert!(count >= 32);
    }

    #[test]
    fn a_new_attempt_starts_from_a_clean_status() {
        let before = with(collected(at(Phase::Failed)), |s| {
            s.exit_code = Some(3);
            s.output_tail = Some("boom\n".into());
            s.tasks = Some(crate::crd::TaskCounts::default());
            set_condition(
                &mut s.conditions,
                ConditionType::Finished,
                true,
                Reason::NonZeroExitCode,
                "",
                now(),
            );
        });
        let decision = decide(&Facts {
            generation: GENERATION + 1,
            status: &before,
            retry_policy: None,
            keeps_output: true,
            ttl_after_finished: None,
            cluster: Ok(()),
            observation: None,
            now: now(),
        });
        let status = decision.status.unwrap_or_default();
        assert_eq!(status.observed_generation, Some(GENERATION + 1));
        assert_eq!(
            (
                status.job_id,
                status.exit_code,
                status.output_tail,
                status.tasks
            ),
            (None, None, None, None)
        );
        let types: Vec<(&str, &str)> = status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(types, [("ClusterReady", "True"), ("Submitted", "False")]);
    }

    #[test]
    fn removal_cancels_what_may_run_and_removes_every_attempts_files() {
        use CleanupPolicy::{Never, OnDelete};
        let job = |id: &str| Cancel::Job(JobId::from(id));
        let cases = [
            (None, OnDelete, Cancel::Nothing, 0),
            (
                Some(BatchJobStatus::default()),
                OnDelete,
                Cancel::Nothing,
                0,
            ),
            (Some(at(Phase::Pending)), OnDelete, Cancel::Nothing, 0),
            (
                Some(with(at(Phase::Submitted), |s| s.job_id = None)),
                OnDelete,
                Cancel::ByKey { attempt: 1 },
                1,
            ),
            (Some(at(Phase::Submitted)), OnDelete, job("42"), 1),
            (Some(at(Phase::Queued)), OnDelete, job("42"), 1),
            (Some(at(Phase::Held)), OnDelete, job("42"), 1),
            (Some(at(Phase::Running)), OnDelete, job("42"), 1),
            (Some(at(Phase::Running)), Never, job("42"), 0),
            (Some(at(Phase::Suspended)), OnDelete, job("42"), 1),
            (Some(at(Phase::Unknown)), OnDelete, job("42"), 1),
            (Some(at(Phase::Succeeded)), OnDelete, Cancel::Nothing, 1),
            (Some(at(Phase::Succeeded)), Never, Cancel::Nothing, 0),
            (
                Some(failed(Reason::NonZeroExitCode, 2, 60)),
                OnDelete,
                Cancel::Nothing,
                3,
            ),
            (Some(at(Phase::Cancelled)), OnDelete, Cancel::Nothing, 1),
        ];
        for (status, policy, cancel, remove_files) in cases {
            let removal = removal(status.as_ref(), policy);
            assert_eq!(
                removal,
                Removal {
                    cancel,
                    remove_files
                },
                "{status:?} {policy:?}"
            );
            assert_eq!(
                removal.is_nothing(),
                removal.cancel == Cancel::Nothing && remove_files == 0
            );
        }
    }

    #[test]
    fn removal_is_abandoned_after_its_deadline() {
        let deleted = now();
        for (after, abandoned) in [
            (Duration::ZERO, false),
            (REMOVAL_DEADLINE - Duration::from_secs(1), false),
            (REMOVAL_DEADLINE, true),
            (REMOVAL_DEADLINE * 10, true),
        ] {
            assert_eq!(
                removal_abandoned(deleted, deleted + after, REMOVAL_DEADLINE),
                abandoned,
                "{after:?}"
            );
        }
        // A clock behind the deletion time does not abandon anything.
        assert!(!removal_abandoned(
            deleted,
            deleted - Duration::from_secs(5),
            REMOVAL_DEADLINE
        ));
    }

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let delays: Vec<u64> = (0..7).map(|n| retry_backoff(n).as_secs()).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(retry_backoff(u32::MAX), Duration::from_secs(300));
    }
}
