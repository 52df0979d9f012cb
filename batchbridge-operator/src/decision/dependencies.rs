//! spec.after: whether a job not yet submitted may be, from what its dependencies (other
//! BatchJobs of its namespace) are doing ([`gate`]), whether its scheduler can hold it for
//! them instead ([`handover`]), and whether it waits on itself through them
//! ([`cycle_through`]). The kube glue reads each dependency from the operator's cache;
//! what that means is decided here.

use std::collections::HashSet;
use std::time::SystemTime;

use batchbridge_core::{FailureCause, JobStatus};

use crate::crd::{AfterCondition, BatchJobStatus, Phase};
use crate::reason::Reason;
use crate::status::time;

use super::attempt::{pend, set_finished};
use super::{Effect, Plan, RECHECK, Rules, Target};

/// One entry of spec.after and what the cache shows of the BatchJob it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency<'a> {
    /// The BatchJob's name, in the job's namespace.
    pub name: &'a str,
    /// What it must have done.
    pub condition: AfterCondition,
    /// What it is doing.
    pub seen: Seen,
    /// Its current attempt on a cluster, if it has one with a job id.
    pub attempt: Option<Attempt<'a>>,
}

/// A dependency's current attempt, as its status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt<'a> {
    /// The cluster it runs on (status.cluster).
    pub cluster: &'a str,
    /// Its job id there (status.jobId).
    pub job_id: &'a str,
    /// Whether it is the dependency's last: its spec fixes its cluster (clusterRef, so it
    /// never moves) and no retry follows its failure (no retry policy, or every retry
    /// spent). Only a last attempt's id stands for the BatchJob: a retry runs under another.
    pub last: bool,
}

/// What the cache shows of a dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// No BatchJob has the name (yet): it may be created later, so it is waited for.
    Missing,
    /// The BatchJob, in `phase` (Pending when it has no status yet) with `reason`;
    /// `deleting` once its deletion began.
    Present {
        /// Its phase.
        phase: Phase,
        /// Its status's reason.
        reason: Option<Reason>,
        /// Whether it is being deleted.
        deleting: bool,
    },
}

/// Whether a job may be submitted, as its dependencies say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Every dependency's condition is met (or there are none).
    Open,
    /// Some are not met yet; the message names them.
    Wait(String),
    /// One can no longer be met; the message names it and says why.
    Broken(String),
}

/// What `after` allows: the first dependency that can no longer be met breaks the gate;
/// otherwise it waits while any is unmet. A dependency that never ran because of its own
/// dependencies (DependencyFailed, DependencyCycle) breaks every condition, Failed and
/// Ended too: the chain fails as a whole rather than run its tail after a head that never
/// ran.
///
/// ```
/// use batchbridge_operator::crd::{AfterCondition, Phase};
/// use batchbridge_operator::decision::dependencies::{Dependency, Gate, Seen, gate};
///
/// let running = Seen::Present { phase: Phase::Running, reason: None, deleting: false };
/// let after = [Dependency {
///     name: "prepare",
///     condition: AfterCondition::Succeeded,
///     seen: running,
///     attempt: None,
/// }];
/// assert_eq!(gate(&after), Gate::Wait("waiting for prepare to succeed".into()));
/// ```
pub fn gate(after: &[Dependency<'_>]) -> Gate {
    let mut waiting = Vec::new();
    let mut missing = Vec::new();
    for dependency in after {
        match verdict(dependency) {
            Verdict::Met => {}
            Verdict::Unmet => waiting.push(dependency),
            Verdict::NotCreated => {
                waiting.push(dependency);
                missing.push(dependency.name);
            }
            Verdict::Never(why) => {
                return Gate::Broken(format!(
                    "BatchJob {} {why}, so its condition {} can no longer be met; this job \
                     never ran",
                    dependency.name,
                    condition_name(dependency.condition)
                ));
            }
        }
    }
    if waiting.is_empty() {
        return Gate::Open;
    }
    let list = waiting
        .iter()
        .map(|d| format!("{} to {}", d.name, verb(d.condition)))
        .collect::<Vec<_>>()
        .join(", ");
    let mut message = format!("waiting for {list}");
    if !missing.is_empty() {
        message.push_str(&format!(
            " ({} not created yet: no BatchJob of that name in this namespace)",
            missing.join(", ")
        ));
    }
    Gate::Wait(message)
}

/// What one dependency says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Met,
    Unmet,
    NotCreated,
    /// It can no longer be met, because of what the text says.
    Never(String),
}

fn verdict(dependency: &Dependency<'_>) -> Verdict {
    let Seen::Present {
        phase,
        reason,
        deleting,
    } = dependency.seen
    else {
        return Verdict::NotCreated;
    };
    if let Some(reason @ (Reason::DependencyFailed | Reason::DependencyCycle)) = reason
        && phase.is_terminal()
    {
        return Verdict::Never(format!("never ran ({reason})"));
    }
    let met = match dependency.condition {
        AfterCondition::Succeeded => phase == Phase::Succeeded,
        AfterCondition::Failed => matches!(phase, Phase::Failed | Phase::Cancelled),
        AfterCondition::Ended => phase.is_terminal(),
    };
    match (met, phase.is_terminal(), deleting) {
        (true, _, _) => Verdict::Met,
        (false, true, _) => Verdict::Never(format!("ended {phase:?}")),
        (false, false, true) => Verdict::Never("was deleted before it ended".to_owned()),
        (false, false, false) => Verdict::Unmet,
    }
}

fn condition_name(condition: AfterCondition) -> &'static str {
    match condition {
        AfterCondition::Succeeded => "Succeeded",
        AfterCondition::Failed => "Failed",
        AfterCondition::Ended => "Ended",
    }
}

fn verb(condition: AfterCondition) -> &'static str {
    match condition {
        AfterCondition::Succeeded => "succeed",
        AfterCondition::Failed => "fail",
        AfterCondition::Ended => "end",
    }
}

/// The dependencies a job's scheduler can hold it for, so that it is submitted now rather
/// than when they are met (the native path): `Some` when `holds` (the backend of `cluster`,
/// the job's fixed cluster, has native dependencies) and every dependency not met yet waits
/// for Succeeded and runs its last [`Attempt`] on `cluster`, in its queue, held or running
/// (named by its job id, as the scheduler's "after a success"); those met already are left
/// out. `None` keeps the portable path: the operator waits and submits the job when the
/// [`gate`] opens. A dependency not created yet, pending itself, on another cluster,
/// placed, or with a retry left is never handed over: its job id is not yet, or not
/// surely, the one whose end decides. Nor is a Failed or Ended one: suspending or deleting
/// a dependency cancels its job, which a scheduler counts as a failure and an end, so it
/// would release and run the dependent that the operator would keep waiting (suspended)
/// or fail (deleted); a cancelled job never succeeds, so Succeeded is safe.
///
/// ```
/// use batchbridge_core::dependency::Condition;
/// use batchbridge_operator::crd::{AfterCondition, Phase};
/// use batchbridge_operator::decision::dependencies::{Attempt, Dependency, Seen, handover};
///
/// let queued = Seen::Present { phase: Phase::Queued, reason: None, deleting: false };
/// let attempt = Attempt { cluster: "hpc", job_id: "4242", last: true };
/// let after = [Dependency {
///     name: "prepare",
///     condition: AfterCondition::Succeeded,
///     seen: queued,
///     attempt: Some(attempt),
/// }];
/// let handed = handover("hpc", true, &after).unwrap_or_default();
/// assert_eq!(handed[0].job.as_str(), "4242");
/// assert_eq!(handed[0].condition, Condition::AfterOk);
/// assert_eq!(handover("elsewhere", true, &after), None);
/// assert_eq!(handover("hpc", false, &after), None);
/// let ended = [Dependency { condition: AfterCondition::Ended, ..after[0].clone() }];
/// assert_eq!(handover("hpc", true, &ended), None);
/// ```
pub fn handover(
    cluster: &str,
    holds: bool,
    after: &[Dependency<'_>],
) -> Option<Vec<batchbridge_core::Dependency>> {
    let mut handed = Vec::new();
    for dependency in after {
        if verdict(dependency) == Verdict::Met {
            continue;
        }
        let attempt = dependency.attempt?;
        let running = matches!(
            dependency.seen,
            Seen::Present {
                phase: Phase::Queued | Phase::Held | Phase::Running | Phase::Suspended,
                deleting: false,
                ..
            }
        );
        let succeeded = dependency.condition == AfterCondition::Succeeded;
        if !holds || !running || !attempt.last || !succeeded || attempt.cluster != cluster {
            return None;
        }
        handed.push(batchbridge_core::Dependency::after_ok(attempt.job_id));
    }
    Some(handed)
}

/// The dependencies a job submitted again under its attempt's key (the operator stopped
/// before it wrote the job id) names: those [`handover`] named at the first submit, as far
/// as they are not met yet: every such Succeeded dependency with an attempt on `cluster`,
/// one that can no longer be met included (its scheduler then ends the job, if the first
/// submit did not reach it). Empty when `holds` is false or for a job submitted on the
/// portable path, whose dependencies were all met.
///
/// ```
/// use batchbridge_operator::crd::{AfterCondition, Phase};
/// use batchbridge_operator::decision::dependencies::{Attempt, Dependency, Seen, handed_over};
///
/// let failed = Seen::Present { phase: Phase::Failed, reason: None, deleting: false };
/// let attempt = Attempt { cluster: "hpc", job_id: "4242", last: true };
/// let after = [Dependency {
///     name: "prepare",
///     condition: AfterCondition::Succeeded,
///     seen: failed,
///     attempt: Some(attempt),
/// }];
/// assert_eq!(handed_over("hpc", true, &after)[0].job.as_str(), "4242");
/// ```
pub fn handed_over(
    cluster: &str,
    holds: bool,
    after: &[Dependency<'_>],
) -> Vec<batchbridge_core::Dependency> {
    after
        .iter()
        .filter(|_| holds)
        .filter(|dependency| dependency.condition == AfterCondition::Succeeded)
        .filter(|dependency| verdict(dependency) != Verdict::Met)
        .filter_map(|dependency| {
            let attempt = dependency.attempt.filter(|a| a.cluster == cluster)?;
            Some(batchbridge_core::Dependency::after_ok(attempt.job_id))
        })
        .collect()
}

/// The message of a job its scheduler ended because the dependencies with job ids `ids`
/// (one, or several joined by ", ", as the backend reports them) can no longer be met,
/// naming their BatchJobs; `None` when no id is one of `after`'s (then the scheduler's
/// own words stay).
///
/// ```
/// use batchbridge_operator::crd::{AfterCondition, Phase};
/// use batchbridge_operator::decision::dependencies::{Attempt, Dependency, Seen, never_met};
///
/// let failed = Seen::Present { phase: Phase::Failed, reason: None, deleting: false };
/// let after = [Dependency {
///     name: "prepare",
///     condition: AfterCondition::Succeeded,
///     seen: failed,
///     attempt: Some(Attempt { cluster: "hpc", job_id: "4242", last: true }),
/// }];
/// assert_eq!(
///     never_met(&after, "4242").as_deref(),
///     Some("BatchJob prepare (job 4242) can no longer meet its condition Succeeded; the \
///            scheduler ended this job before it ran"),
/// );
/// assert_eq!(never_met(&after, "99"), None);
/// ```
pub fn never_met(after: &[Dependency<'_>], ids: &str) -> Option<String> {
    let named: Vec<String> = ids
        .split(',')
        .map(str::trim)
        .filter_map(|id| {
            let dependency = after
                .iter()
                .find(|d| d.attempt.is_some_and(|a| a.job_id == id))?;
            Some(format!(
                "BatchJob {} (job {id}) can no longer meet its condition {}",
                dependency.name,
                condition_name(dependency.condition)
            ))
        })
        .collect();
    (!named.is_empty()).then(|| {
        format!(
            "{}; the scheduler ended this job before it ran",
            named.join(", ")
        )
    })
}

/// Whether a job, as its dependencies' status shows, is one that waits: not submitted yet
/// (Pending), or failed unsubmitted for a cycle, which the other jobs of its cycle still
/// find (so each of them says DependencyCycle, whichever failed first).
///
/// ```
/// use batchbridge_operator::crd::Phase;
/// use batchbridge_operator::decision::dependencies::{Seen, waits};
///
/// assert!(waits(Seen::Present { phase: Phase::Pending, reason: None, deleting: false }));
/// assert!(!waits(Seen::Present { phase: Phase::Running, reason: None, deleting: false }));
/// ```
pub fn waits(seen: Seen) -> bool {
    match seen {
        Seen::Missing => false,
        Seen::Present { phase, reason, .. } => {
            phase == Phase::Pending
                || (phase == Phase::Failed && reason == Some(Reason::DependencyCycle))
        }
    }
}

/// The circle of jobs through which `start` waits on itself, if there is one: `start`, the
/// jobs it waits on in turn, and `start` again. `after(name)` gives the names a job's
/// spec.after lists, for a job that [`waits`] (none for one that does not: a job already
/// submitted or ended breaks no circle). Each job is walked once, so the cost is that of
/// the jobs `start` leads to.
///
/// ```
/// use batchbridge_operator::decision::dependencies::cycle_through;
///
/// let after = |name: &str| match name {
///     "a" => vec!["b".to_owned()],
///     "b" => vec!["a".to_owned()],
///     _ => vec![],
/// };
/// assert_eq!(cycle_through("a", after), Some(vec!["a".into(), "b".into(), "a".into()]));
/// ```
pub fn cycle_through(start: &str, after: impl Fn(&str) -> Vec<String>) -> Option<Vec<String>> {
    let mut visited = HashSet::new();
    // Depth first, with the path from `start` kept: each frame is a job and the
    // dependencies of it left to walk.
    let mut path = vec![start.to_owned()];
    let mut frames = vec![after(start).into_iter()];
    visited.insert(start.to_owned());
    while let Some(frame) = frames.last_mut() {
        let Some(next) = frame.next() else {
            frames.pop();
            path.pop();
            continue;
        };
        if next == start {
            path.push(next);
            return Some(path);
        }
        if visited.insert(next.clone()) {
            frames.push(after(&next).into_iter());
            path.push(next);
        }
    }
    None
}

/// Whether the job, about to start an attempt, must not yet: it waits in a circle or for a
/// dependency that can no longer be met (then it fails for good, unsubmitted, with its
/// spec observed so that an edit runs it again), or for one not met yet that its scheduler
/// cannot hold it for ([`handover`]; then it is Pending, reason WaitingForDependencies; a
/// dependency's change wakes it, and it is looked at again after [`RECHECK`] regardless).
pub(super) fn waits_for_dependencies(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) -> bool {
    let (reason, message) = match (rules.cycle, gate(rules.after)) {
        (Some(cycle), _) => (Reason::DependencyCycle, cycle_message(cycle)),
        (None, Gate::Broken(message)) => (Reason::DependencyFailed, message),
        (None, Gate::Wait(_)) if handed_to_scheduler(rules).is_some() => return false,
        (None, Gate::Wait(message)) => {
            if next.reason != Some(Reason::WaitingForDependencies)
                || next.message.as_deref() != Some(message.as_str())
            {
                pend(next, Reason::WaitingForDependencies, &message);
                set_finished(next, now);
            }
            plan.requeue(RECHECK);
            return true;
        }
        (None, Gate::Open) => return false,
    };
    pend(next, reason, &message);
    next.phase = Some(Phase::Failed);
    next.observed_generation = Some(rules.generation);
    next.spec_digest = Some(rules.spec_digest.clone());
    next.finish_time = Some(time(now));
    set_finished(next, now);
    true
}

/// What [`handover`] says for the job: `None` for a placed one, which may run anywhere.
pub(super) fn handed_to_scheduler(rules: &Rules<'_>) -> Option<Vec<batchbridge_core::Dependency>> {
    match rules.target {
        Target::Fixed(cluster) => handover(cluster, rules.native_dependencies, rules.after),
        Target::Placed { .. } => None,
    }
}

/// The message of an attempt that `job` reports its scheduler ended for a dependency that
/// can no longer be met, naming the BatchJob ([`never_met`]); `None` for any other end.
pub(super) fn dependency_failed(rules: &Rules<'_>, job: &JobStatus) -> Option<String> {
    match &job.cause {
        Some(FailureCause::DependencyFailed(ids)) => never_met(rules.after, ids),
        _ => None,
    }
}

/// The message of a job that waits on itself through `cycle`.
fn cycle_message(cycle: &[String]) -> String {
    format!(
        "spec.after waits in a circle: {}; none of these jobs would ever run. Edit spec.after \
         to break it",
        cycle.join(" -> ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(phase: Phase) -> Seen {
        Seen::Present {
            phase,
            reason: None,
            deleting: false,
        }
    }

    /// Each row: one dependency, its condition, what is seen of it, and the gate.
    #[test]
    fn one_dependency_gates_as_its_condition_says() {
        use AfterCondition::{Ended, Failed, Succeeded};
        enum Expect {
            Open,
            Wait,
            Broken(&'static str),
        }
        let never_ran = |reason| Seen::Present {
            phase: Phase::Failed,
            reason: Some(reason),
            deleting: false,
        };
        let deleting = |phase| Seen::Present {
            phase,
            reason: None,
            deleting: true,
        };
        let rows = [
            (Succeeded, present(Phase::Succeeded), Expect::Open),
            (Succeeded, present(Phase::Pending), Expect::Wait),
            (Succeeded, present(Phase::Running), Expect::Wait),
            (Succeeded, present(Phase::RetryPending), Expect::Wait),
            (
                Succeeded,
                present(Phase::Failed),
                Expect::Broken("ended Failed"),
            ),
            (
                Succeeded,
                present(Phase::Cancelled),
                Expect::Broken("ended Cancelled"),
            ),
            (Succeeded, Seen::Missing, Expect::Wait),
            (Failed, present(Phase::Failed), Expect::Open),
            (Failed, present(Phase::Cancelled), Expect::Open),
            (
                Failed,
                present(Phase::Succeeded),
                Expect::Broken("ended Succeeded"),
            ),
            (Failed, present(Phase::Queued), Expect::Wait),
            (Ended, present(Phase::Succeeded), Expect::Open),
            (Ended, present(Phase::Failed), Expect::Open),
            (Ended, present(Phase::Cancelled), Expect::Open),
            (Ended, present(Phase::Running), Expect::Wait),
            // Deleted after its end: what it did still counts.
            (Succeeded, deleting(Phase::Succeeded), Expect::Open),
            (
                Succeeded,
                deleting(Phase::Running),
                Expect::Broken("was deleted before it ended"),
            ),
            (
                Ended,
                deleting(Phase::Pending),
                Expect::Broken("was deleted before it ended"),
            ),
            // A dependency that never ran breaks every condition: the chain propagates.
            (
                Succeeded,
                never_ran(Reason::DependencyFailed),
                Expect::Broken("never ran (DependencyFailed)"),
            ),
            (
                Failed,
                never_ran(Reason::DependencyFailed),
                Expect::Broken("never ran (DependencyFailed)"),
            ),
            (
                Ended,
                never_ran(Reason::DependencyCycle),
                Expect::Broken("never ran (DependencyCycle)"),
            ),
        ];
        for (condition, seen, expect) in rows {
            let after = [Dependency {
                name: "prep",
                condition,
                seen,
                attempt: None,
            }];
            let gate = gate(&after);
            match expect {
                Expect::Open => assert_eq!(gate, Gate::Open, "{condition:?} {seen:?}"),
                Expect::Wait => {
                    assert!(
                        matches!(gate, Gate::Wait(_)),
                        "{condition:?} {seen:?}: {gate:?}"
                    );
                }
                Expect::Broken(why) => match gate {
                    Gate::Broken(message) => {
                        assert!(
                            message.starts_with(&format!("BatchJob prep {why}")),
                            "{message}"
                        );
                    }
                    gate => panic!("{condition:?} {seen:?}: {gate:?}"),
                },
            }
        }
    }

    #[test]
    fn the_wait_message_names_every_unmet_dependency_and_those_not_created() {
        let after = [
            Dependency {
                name: "a",
                condition: AfterCondition::Succeeded,
                seen: present(Phase::Succeeded),
                attempt: None,
            },
            Dependency {
                name: "b",
                condition: AfterCondition::Ended,
                seen: present(Phase::Running),
                attempt: None,
            },
            Dependency {
                name: "c",
                condition: AfterCondition::Failed,
                seen: Seen::Missing,
                attempt: None,
            },
        ];
        assert_eq!(
            gate(&after),
            Gate::Wait(
                "waiting for b to end, c to fail (c not created yet: no BatchJob of that name \
                 in this namespace)"
                    .into()
            )
        );
        assert_eq!(gate(&[]), Gate::Open);
    }

    #[test]
    fn a_broken_dependency_wins_over_waiting_ones() {
        let after = [
            Dependency {
                name: "a",
                condition: AfterCondition::Succeeded,
                seen: Seen::Missing,
                attempt: None,
            },
            Dependency {
                name: "b",
                condition: AfterCondition::Succeeded,
                seen: present(Phase::Failed),
                attempt: None,
            },
        ];
        assert!(
            matches!(gate(&after), Gate::Broken(m) if m.starts_with("BatchJob b ended Failed"))
        );
    }

    /// Each row: the dependency's condition, what is seen of it (its phase, its attempt's
    /// cluster and whether that attempt is its last), whether the job's backend holds
    /// dependencies, and what the job, fixed on cluster "hpc", is submitted with: `Some(ids)`
    /// now with those ids in `after` (each "after a success"), `None` later by the operator
    /// (the portable path).
    #[test]
    fn only_succeeded_dependencies_running_their_last_attempt_on_the_jobs_cluster_are_handed_over()
    {
        use AfterCondition::{Ended, Failed, Succeeded};
        let on = |cluster, last| {
            Some(Attempt {
                cluster,
                job_id: "41",
                last,
            })
        };
        /// The case, the condition, what is seen, the attempt, whether the backend holds
        /// dependencies, and the job ids handed over.
        type Row<'a> = (
            &'a str,
            AfterCondition,
            Seen,
            Option<Attempt<'a>>,
            bool,
            Option<&'a [&'a str]>,
        );
        let rows: [Row<'_>; 17] = [
            (
                "queued, last, same cluster",
                Succeeded,
                present(Phase::Queued),
                on("hpc", true),
                true,
                Some(&["41"]),
            ),
            (
                "running",
                Succeeded,
                present(Phase::Running),
                on("hpc", true),
                true,
                Some(&["41"]),
            ),
            // A suspended or deleted dependency's job is cancelled, which a scheduler counts
            // as a failure and an end: it would run the dependent the operator keeps waiting
            // or fails. A cancelled job never succeeds, so only Succeeded is handed over.
            (
                "Failed: the operator's path",
                Failed,
                present(Phase::Running),
                on("hpc", true),
                true,
                None,
            ),
            (
                "Ended: the operator's path",
                Ended,
                present(Phase::Queued),
                on("hpc", true),
                true,
                None,
            ),
            (
                "Failed, met already: left out",
                Failed,
                present(Phase::Failed),
                on("hpc", true),
                true,
                Some(&[]),
            ),
            (
                "met already: left out",
                Succeeded,
                present(Phase::Succeeded),
                on("hpc", true),
                true,
                Some(&[]),
            ),
            (
                "met, backend without dependencies",
                Succeeded,
                present(Phase::Succeeded),
                on("hpc", true),
                false,
                Some(&[]),
            ),
            (
                "backend without dependencies",
                Succeeded,
                present(Phase::Queued),
                on("hpc", true),
                false,
                None,
            ),
            (
                "another cluster",
                Succeeded,
                present(Phase::Queued),
                on("other", true),
                true,
                None,
            ),
            (
                "a retry left (or placed)",
                Succeeded,
                present(Phase::Running),
                on("hpc", false),
                true,
                None,
            ),
            (
                "held by its scheduler (for its own dependency, say)",
                Succeeded,
                present(Phase::Held),
                on("hpc", true),
                true,
                Some(&["41"]),
            ),
            (
                "suspended in its scheduler",
                Succeeded,
                present(Phase::Suspended),
                on("hpc", true),
                true,
                Some(&["41"]),
            ),
            (
                "not submitted yet",
                Succeeded,
                present(Phase::Pending),
                None,
                true,
                None,
            ),
            (
                "submitting, no id yet",
                Succeeded,
                present(Phase::Submitted),
                None,
                true,
                None,
            ),
            (
                "waiting for its retry",
                Succeeded,
                present(Phase::RetryPending),
                on("hpc", true),
                true,
                None,
            ),
            ("not created", Succeeded, Seen::Missing, None, true, None),
            (
                "ended the wrong way: the gate breaks instead",
                Succeeded,
                present(Phase::Failed),
                on("hpc", true),
                true,
                None,
            ),
        ];
        for (case, condition, seen, attempt, holds, expected) in rows {
            let after = [Dependency {
                name: "prep",
                condition,
                seen,
                attempt,
            }];
            let expected = expected.map(|ids| {
                ids.iter()
                    .map(|id| batchbridge_core::Dependency::after_ok(*id))
                    .collect::<Vec<_>>()
            });
            assert_eq!(handover("hpc", holds, &after), expected, "{case}");
        }
    }

    /// A job with a Failed or Ended dependency not met yet stays on the portable path
    /// whole, whatever its Succeeded ones could be handed over.
    #[test]
    fn one_failed_or_ended_dependency_keeps_the_job_on_the_portable_path() {
        let queued = |name, job_id, condition| Dependency {
            name,
            condition,
            seen: present(Phase::Queued),
            attempt: Some(Attempt {
                cluster: "hpc",
                job_id,
                last: true,
            }),
        };
        let ok = queued("a", "41", AfterCondition::Succeeded);
        for condition in [AfterCondition::Failed, AfterCondition::Ended] {
            let after = [ok.clone(), queued("b", "42", condition)];
            assert_eq!(handover("hpc", true, &after), None, "{condition:?}");
        }
    }

    /// One dependency that cannot be handed over keeps the whole job on the portable path:
    /// the scheduler would otherwise start it before the operator's dependency is met.
    #[test]
    fn every_unmet_dependency_must_be_handed_over() {
        let last = Attempt {
            cluster: "hpc",
            job_id: "41",
            last: true,
        };
        let queued = Dependency {
            name: "a",
            condition: AfterCondition::Succeeded,
            seen: present(Phase::Queued),
            attempt: Some(last),
        };
        let pending = Dependency {
            name: "b",
            condition: AfterCondition::Succeeded,
            seen: present(Phase::Pending),
            attempt: None,
        };
        assert_eq!(handover("hpc", true, &[queued.clone(), pending]), None);
        let running = Dependency {
            name: "b",
            seen: present(Phase::Running),
            attempt: Some(Attempt {
                job_id: "42",
                ..last
            }),
            ..queued.clone()
        };
        let both = handover("hpc", true, &[queued, running]).unwrap_or_default();
        let ids: Vec<&str> = both.iter().map(|d| d.job.as_str()).collect();
        assert_eq!(ids, ["41", "42"]);
    }

    /// Each row: the dependency's condition and phase, and the ids a submit again under the
    /// attempt's key names. Met ones are left out, as the first submit would now; one that
    /// can no longer be met is named, so that the scheduler ends the job if the first submit
    /// never reached it; a Failed or Ended one never is, as the first submit named none.
    #[test]
    fn a_submit_again_names_the_unmet_dependencies_with_an_attempt_on_the_cluster() {
        use AfterCondition::{Ended, Failed, Succeeded};
        let rows: [(AfterCondition, Phase, &str, bool, &[&str]); 8] = [
            (Succeeded, Phase::Running, "hpc", true, &["41"]),
            (Succeeded, Phase::Succeeded, "hpc", true, &[]),
            (Succeeded, Phase::Failed, "hpc", true, &["41"]),
            (Succeeded, Phase::Running, "other", true, &[]),
            (Succeeded, Phase::Running, "hpc", false, &[]),
            (Succeeded, Phase::Queued, "hpc", true, &["41"]),
            (Failed, Phase::Running, "hpc", true, &[]),
            (Ended, Phase::Queued, "hpc", true, &[]),
        ];
        for (condition, phase, cluster, holds, expected) in rows {
            let after = [Dependency {
                name: "prep",
                condition,
                seen: present(phase),
                attempt: Some(Attempt {
                    cluster,
                    job_id: "41",
                    last: true,
                }),
            }];
            let named = handed_over("hpc", holds, &after);
            let ids: Vec<&str> = named.iter().map(|d| d.job.as_str()).collect();
            assert_eq!(
                ids, expected,
                "{condition:?}, {phase:?} on {cluster}, holds {holds}"
            );
        }
    }

    /// Each row: the ids the backend reports as never met, and the message naming their
    /// BatchJobs (`None`: an id of no dependency, the scheduler's words stay).
    #[test]
    fn the_scheduler_s_ids_of_dependencies_never_met_name_their_batch_jobs() {
        let on = |job_id| {
            Some(Attempt {
                cluster: "hpc",
                job_id,
                last: true,
            })
        };
        let after = [
            Dependency {
                name: "prepare",
                condition: AfterCondition::Succeeded,
                seen: present(Phase::Failed),
                attempt: on("41"),
            },
            Dependency {
                name: "cleanup",
                condition: AfterCondition::Succeeded,
                seen: present(Phase::Cancelled),
                attempt: on("42"),
            },
            Dependency {
                name: "later",
                condition: AfterCondition::Ended,
                seen: Seen::Missing,
                attempt: None,
            },
        ];
        let rows: [(&str, Option<&str>); 4] = [
            (
                "41",
                Some(
                    "BatchJob prepare (job 41) can no longer meet its condition Succeeded; the \
                     scheduler ended this job before it ran",
                ),
            ),
            (
                "41, 42",
                Some(
                    "BatchJob prepare (job 41) can no longer meet its condition Succeeded, \
                     BatchJob cleanup (job 42) can no longer meet its condition Succeeded; the \
                     scheduler ended this job before it ran",
                ),
            ),
            (
                "99, 42",
                Some(
                    "BatchJob cleanup (job 42) can no longer meet its condition Succeeded; the \
                     scheduler ended this job before it ran",
                ),
            ),
            ("99", None),
        ];
        for (ids, expected) in rows {
            assert_eq!(never_met(&after, ids).as_deref(), expected, "{ids}");
        }
    }

    /// Each row: the graph (job, the jobs it waits on), the start, the cycle found.
    #[test]
    fn cycles_are_found_through_the_start_only() {
        /// Each job with the jobs it waits on.
        type Graph = &'static [(&'static str, &'static [&'static str])];
        let rows: [(Graph, &str, Option<&[&str]>); 6] = [
            (&[("a", &["b"]), ("b", &["c"]), ("c", &[])], "a", None),
            (&[("a", &["a"])], "a", Some(&["a", "a"])),
            (
                &[("a", &["b"]), ("b", &["c"]), ("c", &["a"])],
                "b",
                Some(&["b", "c", "a", "b"]),
            ),
            // A diamond is no cycle.
            (
                &[("d", &["b", "c"]), ("b", &["a"]), ("c", &["a"]), ("a", &[])],
                "d",
                None,
            ),
            // A cycle beyond the start, which the start only waits on: not the start's.
            (&[("x", &["a"]), ("a", &["b"]), ("b", &["a"])], "x", None),
            // The second branch closes it.
            (
                &[("a", &["z", "b"]), ("z", &[]), ("b", &["a"])],
                "a",
                Some(&["a", "b", "a"]),
            ),
        ];
        for (graph, start, expected) in rows {
            let after = |name: &str| {
                graph
                    .iter()
                    .find(|(job, _)| *job == name)
                    .map(|(_, deps)| deps.iter().map(|d| (*d).to_owned()).collect())
                    .unwrap_or_default()
            };
            let found = cycle_through(start, after);
            let expected = expected.map(|path| path.iter().map(|n| (*n).to_owned()).collect());
            assert_eq!(found, expected, "{graph:?} from {start}");
        }
    }
}
