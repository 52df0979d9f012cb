//! A BatchJob's lifecycle as one pure step: [`step`] takes the status as written, one
//! [`Finding`] (a reconcile's observation, or a cluster problem) and the time, and returns
//! the status to write (at most one write per decided change), the [`Effect`]s to perform
//! and when to look at the job again. What an action brought back (the end of a submit or
//! of an output collection, [`Done`]; the candidates' answers, [`Placed`]) is stepped by
//! [`step_done`] and [`step_placed`], whose effects ([`ActionEffect`]; none for a
//! placement) are only those an action may perform: the reconcile its end wakes decides
//! the rest. The kube glue (`controller::job`) performs the effects and feeds their
//! results back; it decides nothing itself. The rules live in `observe` (a reconcile),
//! `outcome` (an action's end), `placement`, `attempt` (what starting, ending and retrying
//! an attempt write), `removal` (the deletion) and `events` (the Events a status change is
//! worth). Every rule is tested in tables, beside it or in `tests.rs`,
//! where one test walks a whole life. ARCHITECTURE.md draws the event and effect tables.
//!
//! A job moves through attempts. Each attempt is submitted under its own idempotency key
//! (the resource's UID, then `UID.N` for attempt N > 1), and the status says `Submitted`
//! with the attempt number *before* the backend is asked; so an operator that stops
//! between the submit and the write of the job id submits the same key again, which the
//! backend answers with the job it already has. A submit that provably never reached the
//! cluster (the login refused, the host key wrong, the host not answering) undoes its
//! attempt: the job is Pending again, editable and deletable at once.

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBuilder};
use batchbridge_core::placement::{Policy, Seen};
use batchbridge_core::{Error, ErrorKind, JobId, JobStatus};

use crate::crd::{BatchJobStatus, CleanupPolicy, RetryPolicy, TaskOutput};
use crate::reason::{ClusterProblem, ConditionType, Reason};
use crate::status::holds;

mod attempt;
mod capacity;
pub mod dependencies;
mod events;
mod observe;
mod outcome;
mod placement;
mod removal;
#[cfg(test)]
mod tests;

pub use attempt::MAX_CLUSTERS_USED;
use attempt::{cluster_problem, end_attempt, mark_cluster_ready, set_ready};
pub use capacity::{Capacity, Load, SubmitGate, takes_room, waits_for_room};
pub use events::{Notice, event_type, transitions};
use observe::observe;
use outcome::{collected, submitted};
use placement::{awaits_placement, consider_move, place_attempt};
pub use removal::{Cancel, Removal, removal, removal_abandoned};

/// How often an active job is looked at even when its poller reports nothing.
pub const RECHECK: Duration = Duration::from_secs(300);

/// How long a job waits before its cluster is tried again after a problem.
pub const CLUSTER_RECHECK: Duration = Duration::from_secs(15);

/// How long an action that was cut short (a connection broke, a command hung) waits before
/// it is tried again.
pub const ACTION_RETRY: Duration = Duration::from_secs(5);

/// How long after its acceptance a job waiting in the queue keeps the status its acceptance
/// wrote, unless its phase changes ([`step`] holds the scheduler's words for the wait back).
pub const QUEUE_REPORT_HOLD: Duration = Duration::from_secs(60);

/// How long a job the scheduler refused for now (a submit limit, a closed queue), or one
/// waiting for room on its cluster, waits before it is looked at again when nothing wakes
/// it: a limit frees as jobs end (which wakes the waiting jobs) and a drain ends at an
/// administrator's hand, neither within seconds.
pub const SUBMIT_AGAIN: Duration = Duration::from_secs(30);

/// How long, by default, after a BatchJob's deletion the operator keeps trying to cancel its
/// job and remove its files (a cluster unreachable, a job still ending) before it lets the
/// resource go with a Warning Event: `kubectl delete` never hangs on a broken cluster.
pub const REMOVAL_DEADLINE: Duration = Duration::from_secs(120);

/// How much earlier another candidate must promise a waiting job's start for the job to move
/// there: its start at least this long before the start the job's scheduler expects, or,
/// when that scheduler gives no time, within this long from now. Estimates are rough (a
/// backfill plan changes with every job that ends early); a move costs a cancel and a new
/// submit, so a few minutes' gain is not worth it.
pub const MOVE_MARGIN: Duration = Duration::from_secs(300);

/// How often, at most, the candidates are asked whether a waiting job should move.
pub const MOVE_RECHECK: Duration = Duration::from_secs(60);

/// What of the BatchJob's spec and metadata the lifecycle depends on.
#[derive(Debug, Clone)]
pub struct Rules<'a> {
    /// The resource's `metadata.generation`: which spec is current.
    pub generation: i64,
    /// The spec's digest, suspend left out ([`BatchJobSpec::digest`](crate::crd::BatchJobSpec::digest)):
    /// a generation that changed only suspend is no edit.
    pub spec_digest: String,
    /// spec.suspend: nothing of the job runs while it holds (not submitted, or cancelled).
    pub suspended: bool,
    /// The spec's retry policy.
    pub retry_policy: Option<&'a RetryPolicy>,
    /// Whether the output policy keeps anything (a tail, a ConfigMap or a log pod).
    pub keeps_output: bool,
    /// Whether the output policy asks for a log pod, which starts with the job and follows
    /// its output while it runs.
    pub log_pod: bool,
    /// The spec's ttlSecondsAfterFinished: how long a finished job is kept.
    pub ttl_after_finished: Option<Duration>,
    /// What becomes of the job's files on deletion.
    pub cleanup: CleanupPolicy,
    /// How the job's cluster is found.
    pub target: Target<'a>,
    /// spec.after, each entry with what the operator's cache shows of the BatchJob it
    /// names: a job not submitted yet waits for them ([`dependencies::gate`]).
    pub after: &'a [dependencies::Dependency<'a>],
    /// Whether the backend of the job's cluster holds a job for its dependencies itself
    /// (`Capabilities::dependencies`): then a job whose dependencies run on that cluster is
    /// submitted at once, naming them ([`dependencies::handover`]).
    pub native_dependencies: bool,
    /// The circle of jobs, this one first and last, that wait on each other through
    /// spec.after ([`dependencies::cycle_through`]), if the job is in one.
    pub cycle: Option<&'a [String]>,
    /// Whether its cluster has room for another attempt now (for a job with a fixed
    /// cluster; [`SubmitGate::admit`]).
    pub capacity: Capacity,
}

/// How a job's cluster is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// spec.clusterRef: always this cluster, no estimates asked.
    Fixed(&'a str),
    /// spec.placement: each attempt is placed among the candidates first.
    Placed {
        /// How the cluster is chosen.
        policy: Policy,
        /// How long a job waits in a queue, never started, before it may move.
        move_after: Option<Duration>,
        /// How many moves (ended ones, moved or given up) the job may make.
        max_moves: u32,
    },
}

/// What a placement was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Where to submit attempt `attempt`, the `retries`-th retry of the spec.
    Attempt {
        /// The attempt to submit.
        attempt: u32,
        /// How many retries it makes.
        retries: u32,
    },
    /// Whether the waiting job should move to another candidate.
    Move,
}

/// What a reconcile found.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding<'a> {
    /// The job's cluster is usable; the poller's latest report on `status.jobId`, if it has
    /// one. A spec changed since the last attempt shows here, as a generation the status
    /// has not observed.
    Observed(Option<&'a JobStatus>),
    /// The job's cluster is unusable (or the cluster an effect needed turned out to be).
    ClusterProblem(&'a ClusterProblem),
}

/// What came of an action on the job's cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Done<'a> {
    /// The submit of `attempt` ended.
    Submit {
        /// The attempt submitted.
        attempt: u32,
        /// What came of it.
        outcome: SubmitOutcome,
    },
    /// The collection of the ended attempt's output ended; `observation` is the poller's
    /// report of the attempt's end, written with the output in one write.
    Collect {
        /// What came of the collection.
        outcome: CollectOutcome,
        /// The report that the attempt ended, when the status does not say so yet.
        observation: Option<&'a JobStatus>,
    },
}

/// The candidates' answers to a placement asked for `purpose`.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed<'a> {
    /// What the placement was for.
    pub purpose: Purpose,
    /// The candidate the policy chose among all of them; `None` when every one was skipped.
    pub chosen: Option<&'a str>,
    /// Every candidate's answer, in candidate order.
    pub seen: &'a [Seen],
    /// When they answered (the time their `Now` means).
    pub at: SystemTime,
}

/// What came of a submit.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitOutcome {
    /// The scheduler has the job.
    Accepted {
        /// Its id.
        id: JobId,
        /// The partition or queue it was submitted to, if one was named.
        queue: Option<String>,
        /// The cluster user it runs as.
        user: Option<String>,
    },
    /// The submit failed; [`Failure`] says whether it reached the cluster.
    Failed(Failure),
    /// Nothing was submitted: the backend refused scheduler directives in the header of
    /// the job's script (the message names each line). The same script is refused again,
    /// so the job fails for good.
    DirectiveRefused(String),
    /// Nothing was submitted: an entry of spec.inputs or spec.outputs cannot be had (the
    /// message names it). The job fails for good, as the same spec would fail again.
    InputRefused(String),
}

/// What came of an output collection.
#[derive(Debug, Clone, PartialEq)]
pub enum CollectOutcome {
    /// The output was fetched and kept as the policy says.
    Collected {
        /// The tail for status.outputTail, if the policy keeps one and the job is no array.
        tail: Option<String>,
        /// For an array, the tails for status.taskOutputs.
        task_outputs: Vec<TaskOutput>,
        /// For an array, how many tasks have no tail in `task_outputs`.
        task_outputs_omitted: Option<u32>,
        /// One line for the OutputCollected condition.
        summary: String,
        /// The objects not written because their name belongs to another object.
        refused: Vec<String>,
        /// The objects the API server did not take (with its answer's code): reported, never
        /// retried by fetching the output again, so the job's end is written regardless.
        unwritten: Vec<String>,
        /// For a job with spec.outputs: whether the outputs its `when` applies to arrived
        /// in their stores (the message for OutputsStaged True), or which did not (for
        /// OutputsStaged False). None for a job without outputs.
        staged: Option<Result<String, String>>,
    },
    /// Fetching it failed; [`Failure`] says whether to try again.
    Failed(Failure),
}

/// A failed command on the cluster, sorted by what it means for the job: the one error
/// classification of the operator ([`Failure::of`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The command provably never ran: the cluster was not reached, or the login refused.
    NotReached(ClusterProblem),
    /// The command may or may not have run (the connection broke, a command hung, another
    /// passing failure); `problem` when the cluster itself is the trouble.
    Interrupted {
        /// What went wrong.
        message: String,
        /// The cluster's problem, when it is one.
        problem: Option<ClusterProblem>,
    },
    /// Refused for good: the same request would fail again.
    Refused(String),
    /// Refused for now (a submit limit reached, a queue closed): the same request passes
    /// later. `reason` says which.
    Deferred {
        /// The kind of refusal, as a reason.
        reason: Reason,
        /// What the scheduler said.
        message: String,
    },
}

impl Failure {
    /// Sorts `err`.
    ///
    /// ```
    /// use batchbridge_core::{Error, ErrorKind};
    /// use batchbridge_operator::decision::Failure;
    ///
    /// let refused = Error::new(ErrorKind::AuthenticationFailed, "password refused");
    /// assert!(matches!(Failure::of(&refused), Failure::NotReached(_)));
    /// let lost = Error::new(ErrorKind::ConnectionLost, "broken pipe");
    /// assert!(matches!(Failure::of(&lost), Failure::Interrupted { problem: Some(_), .. }));
    /// let rejected = Error::new(ErrorKind::Rejected, "invalid partition");
    /// assert!(matches!(Failure::of(&rejected), Failure::Refused(_)));
    /// ```
    pub fn of(err: &Error) -> Self {
        if err.is_temporary()
            && let Some(reason) = err.refusal().and_then(Reason::of_refusal)
        {
            return Self::Deferred {
                reason,
                message: err.to_string(),
            };
        }
        let problem = Reason::of_connection(err.kind()).map(|reason| ClusterProblem {
            reason,
            message: err.to_string(),
        });
        match (err.kind(), problem) {
            (
                ErrorKind::Unreachable
                | ErrorKind::HostKeyMismatch
                | ErrorKind::AuthenticationFailed,
                Some(problem),
            ) => Self::NotReached(problem),
            (_, problem) if problem.is_some() || err.is_temporary() => Self::Interrupted {
                message: err.to_string(),
                problem,
            },
            _ => Self::Refused(err.to_string()),
        }
    }
}

/// A side effect a reconcile performs, in the order given, after writing the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Submit attempt `attempt` under its key; the backend returns the existing job when it
    /// already has one with that key. The status already says Submitted.
    Submit {
        /// The attempt number, from 1.
        attempt: u32,
        /// The dependencies the scheduler is to hold the job for (the spec's `after`);
        /// empty on the portable path.
        after: Vec<batchbridge_core::Dependency>,
    },
    /// Fetch the finished attempt's output (bounded) and keep it as the policy says.
    Collect {
        /// The scheduler's id of the finished attempt.
        id: JobId,
    },
    /// Ask the candidates when the job would start and choose one (spec.placement); the
    /// answer comes back as [`Placed`].
    Place(Purpose),
    /// Cancel this job on its cluster, started or not, because spec.suspend is true (the
    /// next polls confirm that it ended; the status says Suspending until then).
    Cancel(JobId),
    /// Withdraw this waiting job from its cluster (cancel it only if it has not started),
    /// for the move in status.moving (the next polls confirm whether it ended without
    /// starting).
    Withdraw(JobId),
    /// Start the log pod that follows this job's output while it runs (the collection
    /// starts it for a job never seen running, and keeps one already printing this job).
    ShowOutput(JobId),
    /// Have the cluster's poller follow this job.
    Follow(JobId),
    /// Have the cluster's poller stop following this job.
    Forget(JobId),
    /// Delete the BatchJob: it finished for good ttlSecondsAfterFinished ago.
    Expire,
}

/// A side effect an action performs when it is over, after writing the status: what came
/// of an action never asks for another action or an expiry at once; the reconcile the
/// action's end wakes decides those (a placement's submit or cancel too, from the status
/// written before them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionEffect {
    /// Have the cluster's poller follow this job.
    Follow(JobId),
    /// Have the cluster's poller stop following this job.
    Forget(JobId),
}

impl From<ActionEffect> for Effect {
    fn from(effect: ActionEffect) -> Self {
        match effect {
            ActionEffect::Follow(id) => Self::Follow(id),
            ActionEffect::Forget(id) => Self::Forget(id),
        }
    }
}

/// What a step decided: the status to write (`None`: unchanged), the effects (of type `E`:
/// [`Effect`] for a reconcile, [`ActionEffect`] for an action's end, none for a
/// placement's answer) and when to look at the job again.
#[derive(Debug, Clone, PartialEq)]
pub struct Step<E = Effect> {
    /// The status to write before the effects; `None` leaves it as it is.
    pub status: Option<BatchJobStatus>,
    /// What to do, in order.
    pub effects: Vec<E>,
    /// Look at the job again after this long, if nothing wakes it before; `None`: only
    /// when something does.
    pub requeue: Option<Duration>,
}

impl<E> Default for Step<E> {
    fn default() -> Self {
        Self {
            status: None,
            effects: Vec::new(),
            requeue: None,
        }
    }
}

/// The effects and the requeue a step collects as it goes.
struct Plan<E> {
    effects: Vec<E>,
    requeue: Option<Duration>,
}

impl<E> Plan<E> {
    fn new() -> Self {
        Self {
            effects: Vec::new(),
            requeue: None,
        }
    }

    fn push(&mut self, effect: E) {
        self.effects.push(effect);
    }

    fn extend(&mut self, effects: impl IntoIterator<Item = E>) {
        self.effects.extend(effects);
    }

    /// Looks at the job again after `after`: each step decides this once.
    fn requeue(&mut self, after: Duration) {
        debug_assert!(self.requeue.is_none(), "a step requeues once");
        self.requeue = Some(after);
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

/// One step of a job's life: what a reconcile's `event` makes of `status` at `now`.
pub fn step(
    rules: &Rules<'_>,
    status: &BatchJobStatus,
    event: &Finding<'_>,
    now: SystemTime,
) -> Step {
    let mut next = status.clone();
    let mut plan = Plan::new();
    observe_suspend_change(rules, &mut next);
    match event {
        Finding::Observed(observation) => {
            if !awaits_placement(rules, &next) {
                mark_cluster_ready(&mut next, now);
            }
            observe(rules, &mut next, *observation, now, &mut plan);
        }
        Finding::ClusterProblem(problem) => {
            cluster_problem(&mut next, problem, now);
            plan.requeue(CLUSTER_RECHECK);
        }
    }
    finish(rules, status, next, plan, now)
}

/// A generation the status has not observed that changed only spec.suspend (its digest is
/// the one the status's attempt runs) is observed at once: setting or clearing suspend is
/// no edit, which would run the job again with its retries afresh. A hold (the condition
/// Suspended True) ends as soon as suspend is cleared, whatever else the step finds (its
/// cluster unusable, a retry's backoff): a queueing controller reads the condition. What
/// suspend itself does is `observe`'s.
fn observe_suspend_change(rules: &Rules<'_>, next: &mut BatchJobStatus) {
    if next
        .observed_generation
        .is_some_and(|seen| seen != rules.generation)
        && next.spec_digest.as_deref() == Some(rules.spec_digest.as_str())
    {
        next.observed_generation = Some(rules.generation);
    }
    if !rules.suspended && holds(&next.conditions, ConditionType::Suspended) == Some(true) {
        next.conditions
            .retain(|c| c.type_ != ConditionType::Suspended.as_str());
    }
}

/// What the end of an action on the job's cluster, `done`, makes of `status` at `now`.
pub fn step_done(
    rules: &Rules<'_>,
    status: &BatchJobStatus,
    done: &Done<'_>,
    now: SystemTime,
) -> Step<ActionEffect> {
    let mut next = status.clone();
    let mut plan = Plan::new();
    match done {
        Done::Submit { attempt, outcome } => {
            submitted(rules, &mut next, *attempt, outcome, now, &mut plan);
        }
        Done::Collect {
            outcome,
            observation,
        } => {
            if let Some(job) = observation
                && next.phase.is_some_and(|phase| !phase.spec_editable())
                && let Some(id) = next.job_id.as_deref().map(JobId::from)
            {
                let message = dependencies::dependency_failed(rules, job);
                end_attempt(rules, &mut next, job, message, now);
                plan.push(ActionEffect::Forget(id));
            }
            collected(&mut next, outcome, now, &mut plan);
        }
    }
    finish(rules, status, next, plan, now)
}

/// What the candidates' answers, `placed`, make of `status` at `now`: a status and a
/// requeue, no effect (the reconcile the placement's end wakes submits or cancels).
pub fn step_placed(
    rules: &Rules<'_>,
    status: &BatchJobStatus,
    placed: &Placed<'_>,
    now: SystemTime,
) -> Step<Infallible> {
    let mut next = status.clone();
    let mut plan = Plan::new();
    match placed.purpose {
        Purpose::Attempt { attempt, retries } => {
            place_attempt(rules, &mut next, (attempt, retries), placed, now, &mut plan);
        }
        Purpose::Move => consider_move(rules, &mut next, placed.seen, placed.at, now, &mut plan),
    }
    finish(rules, status, next, plan, now)
}

/// The step's status, written only when it changed: then Ready follows its phase (in that
/// write, never one of its own) and its conditions are stamped with the spec's generation.
fn finish<E>(
    rules: &Rules<'_>,
    status: &BatchJobStatus,
    mut next: BatchJobStatus,
    plan: Plan<E>,
    now: SystemTime,
) -> Step<E> {
    if next != *status {
        set_ready(&mut next, now);
    }
    for c in &mut next.conditions {
        c.observed_generation = Some(rules.generation);
    }
    // Written by an operator before the digest: the attempt runs the spec of the
    // generation observed, so the current one's digest is its own (added to a write that
    // happens anyway, never in one of its own).
    if next != *status
        && next.spec_digest.is_none()
        && next.attempts > 0
        && next.observed_generation == Some(rules.generation)
    {
        next.spec_digest = Some(rules.spec_digest.clone());
    }
    Step {
        status: (next != *status).then_some(next),
        effects: plan.effects,
        requeue: plan.requeue,
    }
}
