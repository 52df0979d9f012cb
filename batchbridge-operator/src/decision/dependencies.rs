//! spec.after: whether a job not yet submitted may be, from what its dependencies (other
//! BatchJobs of its namespace) are doing ([`gate`]), and whether it waits on itself through
//! them ([`cycle_through`]). The kube glue reads each dependency from the operator's cache;
//! what that means is decided here.

use std::collections::HashSet;
use std::time::SystemTime;

use crate::crd::{AfterCondition, BatchJobStatus, Phase};
use crate::reason::Reason;
use crate::status::time;

use super::attempt::{pend, set_finished};
use super::{Effect, Plan, RECHECK, Rules};

/// One entry of spec.after and what the cache shows of the BatchJob it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency<'a> {
    /// The BatchJob's name, in the job's namespace.
    pub name: &'a str,
    /// What it must have done.
    pub condition: AfterCondition,
    /// What it is doing.
    pub seen: Seen,
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
/// let after = [Dependency { name: "prepare", condition: AfterCondition::Succeeded, seen: running }];
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
/// spec observed so that an edit runs it again), or for one not met yet (then it is
/// Pending, reason WaitingForDependencies; a dependency's change wakes it, and it is
/// looked at again after [`RECHECK`] regardless).
pub(super) fn waits_for_dependencies(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) -> bool {
    let (reason, message) = match (rules.cycle, gate(rules.after)) {
        (Some(cycle), _) => (Reason::DependencyCycle, cycle_message(cycle)),
        (None, Gate::Broken(message)) => (Reason::DependencyFailed, message),
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
            },
            Dependency {
                name: "b",
                condition: AfterCondition::Ended,
                seen: present(Phase::Running),
            },
            Dependency {
                name: "c",
                condition: AfterCondition::Failed,
                seen: Seen::Missing,
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
            },
            Dependency {
                name: "b",
                condition: AfterCondition::Succeeded,
                seen: present(Phase::Failed),
            },
        ];
        assert!(
            matches!(gate(&after), Gate::Broken(m) if m.starts_with("BatchJob b ended Failed"))
        );
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
