//! The lifecycle's rules as tables, and one whole life.

use batchbridge_core::{FailureCause, JobState, Refusal};

use super::attempt::{set_finished, set_ready};
use super::dependencies::{Dependency, Seen};
use super::*;
use crate::crd::{
    AfterCondition, Estimate, Move, MoveOutcome, Phase, PlacementStatus, RetryReason,
};
use crate::reason::ConditionType;
use crate::status::{condition, holds, set_condition, time};

const GENERATION: i64 = 4;

/// The digest of the spec every case's status runs, unless it says otherwise.
const DIGEST: &str = "0123456789abcdef";

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn spec() -> Rules<'static> {
    Rules {
        generation: GENERATION,
        spec_digest: DIGEST.to_owned(),
        suspended: false,
        retry_policy: None,
        keeps_output: true,
        log_pod: false,
        ttl_after_finished: None,
        cleanup: CleanupPolicy::OnDelete,
        target: Target::Fixed("hpc"),
        after: &[],
        native_dependencies: false,
        cycle: None,
        capacity: Capacity::Free,
    }
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
    if phase.is_terminal() || phase == Phase::RetryPending {
        status.finish_time = Some(time(now() - Duration::from_secs(60)));
        status.reason = Some(match phase {
            Phase::Succeeded => Reason::Succeeded,
            Phase::Cancelled => Reason::Cancelled,
            _ => Reason::NonZeroExitCode,
        });
    }
    set_ready(&mut status, now());
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

/// A collected attempt that failed for `reason` `finished_ago` seconds ago, in `phase`
/// (Failed, or RetryPending), after `retries` retries.
fn failed(phase: Phase, reason: Reason, retries: u32, finished_ago: u64) -> BatchJobStatus {
    collected(with(at(phase), |s| {
        s.reason = Some(reason);
        s.retries = retries;
        s.attempts = retries + 1;
        s.finish_time = Some(time(now() - Duration::from_secs(finished_ago)));
    }))
}

fn policy(max_retries: u32, retry_on: &[RetryReason]) -> Option<RetryPolicy> {
    Some(RetryPolicy {
        max_retries,
        retry_on: retry_on.to_vec(),
    })
}

fn problem(reason: Reason) -> ClusterProblem {
    ClusterProblem {
        reason,
        message: format!("{reason} on the test cluster"),
    }
}

fn job(state: JobState) -> JobStatus {
    JobStatus::new(state, "native")
}

fn exited(code: i32) -> JobStatus {
    let mut job = job(JobState::Failed).with_exit_code(code);
    job.cause = Some(FailureCause::ExitCode(code));
    job
}

fn id() -> JobId {
    JobId::from("42")
}

/// Job 42 as its submit and acceptance wrote it, `ago` seconds ago.
fn accepted(ago: u64) -> BatchJobStatus {
    let at = now() - Duration::from_secs(ago);
    let submitted = step(
        &spec(),
        &BatchJobStatus::default(),
        &Finding::Observed(None),
        at,
    )
    .status
    .expect("the submit is written first");
    let event = Done::Submit {
        attempt: 1,
        outcome: SubmitOutcome::Accepted {
            id: id(),
            queue: None,
            user: None,
        },
    };
    let accepted = step_done(&spec(), &submitted, &event, at).status;
    accepted.expect("the acceptance is written")
}

/// A new job waiting for `dependency` to succeed, as its first reconcile wrote it.
fn waiting_for(dependency: &'static str) -> BatchJobStatus {
    let after = [Dependency {
        name: dependency,
        condition: AfterCondition::Succeeded,
        seen: Seen::Missing,
        attempt: None,
    }];
    let rules = Rules {
        after: &after,
        ..spec()
    };
    let waiting = step(
        &rules,
        &BatchJobStatus::default(),
        &Finding::Observed(None),
        now(),
    )
    .status
    .expect("the wait is written");
    // What it waits for is seen by now, the status as it was written.
    let seen = Rules {
        after: &[Dependency {
            name: dependency,
            condition: AfterCondition::Succeeded,
            seen: Seen::Present {
                phase: Phase::Running,
                reason: None,
                deleting: false,
            },
            attempt: None,
        }],
        ..spec()
    };
    step(&seen, &waiting, &Finding::Observed(None), now())
        .status
        .unwrap_or(waiting)
}

/// A new job held back by spec.suspend, as its first reconcile wrote it.
fn held() -> BatchJobStatus {
    let suspended = Rules {
        suspended: true,
        ..spec()
    };
    let step = step(
        &suspended,
        &BatchJobStatus::default(),
        &Finding::Observed(None),
        now(),
    );
    step.status.expect("the hold is written")
}

/// `status` as the spec of [`DIGEST`] runs it: a new generation changed only suspend.
fn runs_digest(status: BatchJobStatus) -> BatchJobStatus {
    with(status, |s| s.spec_digest = Some(DIGEST.to_owned()))
}

/// A running job whose spec.suspend was just set, as its first step since wrote it: the
/// cancel sent, Suspending until the end is seen.
fn suspending() -> BatchJobStatus {
    let suspended = Rules {
        suspended: true,
        ..spec()
    };
    let step = step(
        &suspended,
        &seen_running(),
        &observed(job(JobState::Running)),
        now(),
    );
    step.status.expect("the suspension is written")
}

/// A job whose attempt `attempts` was cancelled for spec.suspend after `retries` retries,
/// as its step wrote it; its spec has not changed since.
fn suspended_after(attempts: u32, retries: u32) -> BatchJobStatus {
    let suspended = Rules {
        suspended: true,
        ..spec()
    };
    let running = with(suspending(), |s| {
        s.attempts = attempts;
        s.retries = retries;
    });
    let step = step(
        &suspended,
        &running,
        &observed(job(JobState::Cancelled)),
        now(),
    );
    step.status.expect("the hold is written")
}

/// A running job's status as its last observation wrote it.
fn seen_running() -> BatchJobStatus {
    with(
        crate::status::observed(&at(Phase::Running), &job(JobState::Running)),
        |s| set_finished(s, now()),
    )
}

/// A job waiting in `state` for the scheduler's `reason`, with an estimate of its start.
fn waiting(state: JobState, reason: &str) -> JobStatus {
    let mut job = job(state);
    job.reason = Some(reason.to_owned());
    job.queue = Some("debug".to_owned());
    job.expected_start_at = Some(now() + Duration::from_secs(600));
    job
}

/// What a case steps: a reconcile's event, or what came of an action.
enum On<'a> {
    Reconcile(Finding<'a>),
    Action(Done<'a>),
}

impl<'a> From<Finding<'a>> for On<'a> {
    fn from(event: Finding<'a>) -> Self {
        Self::Reconcile(event)
    }
}

impl<'a> From<Done<'a>> for On<'a> {
    fn from(done: Done<'a>) -> Self {
        Self::Action(done)
    }
}

/// The step `on` asks for, its action's effects as the effects they are.
fn step_on(spec: &Rules<'_>, status: &BatchJobStatus, on: &On<'_>, now: SystemTime) -> Step {
    match on {
        On::Reconcile(event) => step(spec, status, event, now),
        On::Action(done) => {
            let step = step_done(spec, status, done, now);
            Step {
                status: step.status,
                effects: step.effects.into_iter().map(Effect::from).collect(),
                requeue: step.requeue,
            }
        }
    }
}

struct Case {
    name: &'static str,
    status: BatchJobStatus,
    event: On<'static>,
    generation: i64,
    suspended: bool,
    policy: Option<RetryPolicy>,
    keeps_output: bool,
    log_pod: bool,
    ttl: Option<Duration>,
    /// spec.after and what is seen of each dependency.
    after: Vec<Dependency<'static>>,
    /// The circle the job waits in through spec.after.
    cycle: Option<Vec<String>>,
    /// Whether the job's backend holds jobs for their dependencies itself.
    native: bool,
    /// Whether the job's cluster has room.
    capacity: Capacity,
    /// The expected phase, attempts and retries of the written status (None: no write).
    writes: Option<(Phase, u32, u32)>,
    effects: Vec<Effect>,
    requeue: Option<Duration>,
}

fn case(name: &'static str, status: BatchJobStatus, event: impl Into<On<'static>>) -> Case {
    Case {
        name,
        status,
        event: event.into(),
        generation: GENERATION,
        suspended: false,
        policy: None,
        keeps_output: true,
        log_pod: false,
        ttl: None,
        after: Vec::new(),
        cycle: None,
        native: false,
        capacity: Capacity::Free,
        writes: None,
        effects: Vec::new(),
        requeue: None,
    }
}

fn observed(job: JobStatus) -> Finding<'static> {
    Finding::Observed(Some(Box::leak(Box::new(job))))
}

fn cluster(reason: Reason) -> Finding<'static> {
    Finding::ClusterProblem(Box::leak(Box::new(problem(reason))))
}

/// The output collection of an attempt whose end the poller reported as `job`.
fn ended(job: JobStatus) -> Done<'static> {
    Done::Collect {
        outcome: CollectOutcome::Collected {
            tail: None,
            task_outputs: Vec::new(),
            task_outputs_omitted: None,
            staged: None,
            summary: "0 bytes".into(),
            refused: Vec::new(),
            unwritten: Vec::new(),
        },
        observation: Some(Box::leak(Box::new(job))),
    }
}

fn collect_done(outcome: CollectOutcome) -> Done<'static> {
    Done::Collect {
        outcome,
        observation: None,
    }
}

/// No room on the job's cluster.
fn full() -> Capacity {
    Capacity::Full("BatchCluster hpc has spec.maxQueued 10".into())
}

/// A new job held for room on its cluster, as the step wrote it.
fn waiting_for_room() -> BatchJobStatus {
    let rules = Rules {
        capacity: full(),
        ..spec()
    };
    let step = step(
        &rules,
        &BatchJobStatus::default(),
        &Finding::Observed(None),
        now(),
    );
    step.status.expect("the wait is written")
}

/// Attempt 2's submit, refused for a submit limit, as the step wrote it.
fn refused_for_the_limit() -> BatchJobStatus {
    let submitting = with(at(Phase::Submitted), |s| {
        s.job_id = None;
        s.attempts = 2;
    });
    let done = Done::Submit {
        attempt: 2,
        outcome: SubmitOutcome::Failed(Failure::Deferred {
            reason: Reason::SubmitLimit,
            message: "QOSMaxSubmitJobPerUserLimit".into(),
        }),
    };
    let step = step_done(&spec(), &submitting, &done, now());
    let refused = step.status.expect("the refusal is written");
    assert_eq!(refused.reason, Some(Reason::SubmitLimit));
    assert_eq!(
        refused.message.as_deref(),
        Some("QOSMaxSubmitJobPerUserLimit")
    );
    refused
}

fn submit_failed(failure: Failure) -> Done<'static> {
    Done::Submit {
        attempt: 1,
        outcome: SubmitOutcome::Failed(failure),
    }
}

fn run(case: &Case) -> Step {
    let policy = case.policy.clone().map(|p| &*Box::leak(Box::new(p)));
    let spec = Rules {
        generation: case.generation,
        spec_digest: DIGEST.to_owned(),
        suspended: case.suspended,
        retry_policy: policy,
        keeps_output: case.keeps_output,
        log_pod: case.log_pod,
        ttl_after_finished: case.ttl,
        cleanup: CleanupPolicy::OnDelete,
        target: Target::Fixed("hpc"),
        after: &case.after,
        native_dependencies: case.native,
        cycle: case.cycle.as_deref(),
        capacity: case.capacity.clone(),
    };
    // The conditions as an earlier step wrote them, for the status's generation.
    let mut status = case.status.clone();
    set_ready(&mut status, now());
    for c in &mut status.conditions {
        c.observed_generation = Some(GENERATION);
    }
    step_on(&spec, &status, &case.event, now())
}

/// An output the API server would not take ends the collection like any other: the
/// job's end is written with the reason, and the next reconcile collects nothing again.
#[test]
fn an_unwritten_output_is_reported_once_and_never_fetched_again() {
    let spec = spec();
    let event = Done::Collect {
        outcome: CollectOutcome::Collected {
            tail: Some("hello\n".into()),
            task_outputs: Vec::new(),
            task_outputs_omitted: None,
            staged: None,
            summary: "6 bytes of stdout, 0 of stderr".into(),
            refused: Vec::new(),
            unwritten: vec!["Pod x-log (the API server answered 403 Forbidden)".into()],
        },
        observation: Some(Box::leak(Box::new(job(JobState::Succeeded)))),
    };
    let written = step_done(&spec, &at(Phase::Running), &event, now())
        .status
        .expect("the end is written");
    let output = condition(&written.conditions, ConditionType::OutputCollected)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()));
    assert_eq!(
        output,
        Some((
            "False",
            "OutputNotWritten",
            "6 bytes of stdout, 0 of stderr; not written, as the API server did not take it: \
             Pod x-log (the API server answered 403 Forbidden) (a quota or policy of the \
             namespace may refuse it; edit the job to run it again)"
        ))
    );
    assert_eq!(
        (written.phase, written.output_tail.as_deref()),
        (Some(Phase::Succeeded), Some("hello\n"))
    );
    let again = step(&spec, &written, &observed(job(JobState::Succeeded)), now());
    assert_eq!(again.effects, [Effect::Forget(id())], "no collection again");
}

/// A suspended job says why it waits as a suspended batch/v1 Job does (condition
/// Suspended, and Ready False for it); its submit drops the condition.
#[test]
fn a_suspended_job_says_so_until_it_is_submitted() {
    let status = held();
    let said = |status: &BatchJobStatus, type_| {
        condition(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
    };
    let suspended = Some(("True".to_owned(), "Suspended".to_owned()));
    assert_eq!(said(&status, ConditionType::Suspended), suspended);
    assert_eq!(
        said(&status, ConditionType::Ready),
        Some(("False".to_owned(), "Suspended".to_owned()))
    );
    assert_eq!(status.reason, Some(Reason::Suspended));
    let resumed = step(&spec(), &status, &Finding::Observed(None), now())
        .status
        .expect("the submit is written");
    assert_eq!(said(&resumed, ConditionType::Suspended), None);
}

/// A running job suspended and resumed, as Kueue's preemption and readmission do: the
/// attempt is cancelled (Suspending), then, its end seen, the job waits Pending with
/// Suspended True and nothing on the cluster; resumed, the next attempt runs and succeeds.
/// The cancelled attempt counts as an attempt, never as a failure. Every status is
/// checked as `kubectl wait` and a user read it (reason, conditions, Events).
#[test]
fn a_job_suspended_while_it_runs_and_resumed() {
    let policy = RetryPolicy {
        max_retries: 1,
        retry_on: Vec::new(),
    };
    let mut rules = Rules {
        retry_policy: Some(&policy),
        ..spec()
    };
    let mut status = BatchJobStatus::default();
    let mut events = Vec::new();
    let mut walk = |rules: &Rules<'_>, status: &mut BatchJobStatus, on: On<'_>| {
        let step = step_on(rules, status, &on, now());
        if let Some(next) = step.status {
            events.extend(transitions(status, &next).into_iter().map(|e| e.reason));
            *status = next;
        }
        step.effects
    };
    let said = |status: &BatchJobStatus, type_| {
        condition(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
    };
    let pair = |holds: &str, reason: &str| Some((holds.to_owned(), reason.to_owned()));
    let accepted = |attempt: u32, id: &str| Done::Submit {
        attempt,
        outcome: SubmitOutcome::Accepted {
            id: JobId::from(id),
            queue: None,
            user: None,
        },
    };
    use Effect::{Collect, Follow, Forget, Submit};
    walk(&rules, &mut status, Finding::Observed(None).into());
    walk(&rules, &mut status, accepted(1, "7").into());
    walk(&rules, &mut status, observed(job(JobState::Running)).into());
    assert_eq!(status.phase, Some(Phase::Running));

    // Suspended (a new generation, the same digest): cancelled, Suspending.
    rules.generation += 1;
    rules.suspended = true;
    let effects = walk(&rules, &mut status, observed(job(JobState::Running)).into());
    let seven = JobId::from("7");
    assert_eq!(
        effects,
        [Follow(seven.clone()), Effect::Cancel(seven.clone())]
    );
    assert_eq!(
        (status.phase, status.reason),
        (Some(Phase::Running), Some(Reason::Suspending))
    );
    assert_eq!(
        said(&status, ConditionType::Suspended),
        pair("False", "Suspending")
    );
    assert_eq!(
        said(&status, ConditionType::Ready),
        pair("False", "Suspending")
    );
    assert_eq!(status.observed_generation, Some(rules.generation));
    assert_eq!(
        removal(Some(&status), CleanupPolicy::OnDelete).cancel,
        Cancel::Job(seven.clone()),
        "deleted while suspending: the job is cancelled as any running one"
    );

    // The cancel took: suspended, nothing on the cluster, no failure counted.
    let effects = walk(
        &rules,
        &mut status,
        observed(job(JobState::Cancelled)).into(),
    );
    assert_eq!(effects, [Forget(seven)]);
    assert_eq!(
        (status.phase, status.reason, status.job_id.as_deref()),
        (Some(Phase::Pending), Some(Reason::Suspended), None)
    );
    assert_eq!((status.attempts, status.retries), (1, 0));
    assert_eq!(
        said(&status, ConditionType::Suspended),
        pair("True", "Suspended")
    );
    assert_eq!(
        said(&status, ConditionType::Ready),
        pair("False", "Suspended")
    );
    assert_eq!(said(&status, ConditionType::Failed), None);
    assert_eq!(said(&status, ConditionType::Finished), None);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "spec.suspend is true: attempt 1 (job 7) was cancelled, not counted as a failure; \
             attempt 2 is submitted once suspend is cleared"
        )
    );
    assert_eq!(
        removal(Some(&status), CleanupPolicy::OnDelete),
        Removal {
            cancel: Cancel::Nothing,
            remove_files: 1
        },
        "deleted while suspended: nothing to cancel, the attempt's files removed"
    );
    assert_eq!(
        walk(&rules, &mut status, Finding::Observed(None).into()),
        []
    );

    // Resumed: attempt 2 under its own key, retries untouched; it succeeds.
    rules.generation += 1;
    rules.suspended = false;
    let effects = walk(&rules, &mut status, Finding::Observed(None).into());
    assert_eq!(
        effects,
        [Submit {
            attempt: 2,
            after: vec![]
        }]
    );
    assert_eq!(said(&status, ConditionType::Suspended), None);
    walk(&rules, &mut status, accepted(2, "8").into());
    let eight = JobId::from("8");
    walk(&rules, &mut status, observed(job(JobState::Running)).into());
    let effects = walk(
        &rules,
        &mut status,
        observed(job(JobState::Succeeded)).into(),
    );
    assert_eq!(effects, [Collect { id: eight }]);
    walk(&rules, &mut status, ended(job(JobState::Succeeded)).into());
    assert_eq!(
        (status.phase, status.attempts, status.retries),
        (Some(Phase::Succeeded), 2, 0)
    );
    assert_eq!(
        said(&status, ConditionType::Ready),
        pair("True", "Succeeded")
    );
    assert_eq!(status.observed_generation, Some(rules.generation));
    // A start out of the queue gets no Event of its own (decision::events).
    assert_eq!(
        events,
        [
            "Submitted",
            "Suspending",
            "Suspended",
            "Submitted",
            "Succeeded"
        ]
    );
}

/// Suspended True goes as soon as suspend is cleared, even when the step cannot start the
/// next attempt yet (the cluster unusable, a retry's backoff not over): a queueing
/// controller that cleared it must not read the job as held.
#[test]
fn a_hold_ends_when_suspend_is_cleared_whatever_else_the_step_finds() {
    let resumed = Rules {
        generation: GENERATION + 1,
        ..spec()
    };
    let policy = RetryPolicy {
        max_retries: 2,
        retry_on: Vec::new(),
    };
    let in_backoff = Rules {
        retry_policy: Some(&policy),
        ..resumed.clone()
    };
    let waiting_retry = step(
        &Rules {
            suspended: true,
            ..in_backoff.clone()
        },
        &runs_digest(failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 3)),
        &Finding::Observed(None),
        now(),
    )
    .status
    .expect("the hold is written");
    let unreachable = problem(Reason::Unreachable);
    let cases = [
        (
            "cluster unusable",
            step(
                &resumed,
                &suspended_after(1, 0),
                &Finding::ClusterProblem(&unreachable),
                now(),
            ),
        ),
        (
            "backoff not over",
            step(&in_backoff, &waiting_retry, &Finding::Observed(None), now()),
        ),
    ];
    for (name, step) in cases {
        let status = step.status.expect(name);
        assert_eq!(
            condition(&status.conditions, ConditionType::Suspended),
            None,
            "{name}"
        );
        assert_eq!(status.observed_generation, Some(GENERATION + 1), "{name}");
    }
}

/// A job suspended while its move's withdraw is under way is not submitted to the move's
/// target once withdrawn; an answer of the candidates that comes after the suspension
/// starts nothing either.
#[test]
fn a_job_suspended_during_a_move_waits_instead_of_moving() {
    let rules = Rules {
        suspended: true,
        target: Target::Placed {
            policy: batchbridge_core::placement::Policy::EarliestStart,
            move_after: Some(Duration::from_secs(600)),
            max_moves: 1,
        },
        ..spec()
    };
    let moving = with(at(Phase::Queued), |s| {
        s.cluster = Some("a".into());
        s.moving = Some(Move {
            from: "a".into(),
            to: "b".into(),
            job_id: "42".into(),
            time: time(now()),
            outcome: MoveOutcome::Cancelling,
        });
    });
    let mut withdrawn = job(JobState::Cancelled);
    withdrawn.started_at = None;
    let step = step(&rules, &moving, &observed(withdrawn), now());
    assert_eq!(step.effects, [Effect::Forget(id())], "nothing submitted");
    let held = step.status.expect("the hold is written");
    assert_eq!(
        (held.phase, held.reason, held.attempts),
        (Some(Phase::Pending), Some(Reason::Suspended), 1)
    );
    assert_eq!(
        held.moves.iter().map(|m| m.outcome).collect::<Vec<_>>(),
        [MoveOutcome::Moved]
    );
    let seen: &'static [batchbridge_core::placement::Seen] = Box::leak(Box::new([]));
    let late = step_placed(
        &rules,
        &BatchJobStatus::default(),
        &Placed {
            purpose: Purpose::Attempt {
                attempt: 1,
                retries: 0,
            },
            chosen: Some("b"),
            seen,
            at: now(),
        },
        now(),
    );
    assert_eq!(
        late,
        Step::default(),
        "the reconcile it wakes holds the job"
    );
}

/// Ready as kstatus (and Argo CD and Flux) read it: True only once the job succeeded, False
/// with the status's reason on the way there and after any other end; written with the
/// step's own change, never alone.
#[test]
fn ready_says_whether_the_job_reached_its_end() {
    let cases = [
        (
            "a new job is being submitted",
            case("", BatchJobStatus::default(), Finding::Observed(None)),
            Some(("False", "Submitting")),
        ),
        (
            "a new job waits for its cluster",
            case(
                "",
                BatchJobStatus::default(),
                cluster(Reason::SecretNotFound),
            ),
            Some(("False", "SecretNotFound")),
        ),
        (
            "the job waits in the queue",
            case("", at(Phase::Submitted), observed(job(JobState::Queued))),
            Some(("False", "Queued")),
        ),
        (
            "the job runs",
            case("", at(Phase::Queued), observed(job(JobState::Running))),
            Some(("False", "Running")),
        ),
        (
            "the job succeeded",
            case("", at(Phase::Running), ended(job(JobState::Succeeded))),
            Some(("True", "Succeeded")),
        ),
        (
            "the job failed for good",
            case("", at(Phase::Running), ended(exited(3))),
            Some(("False", "NonZeroExitCode")),
        ),
        (
            "the job was cancelled",
            case("", at(Phase::Running), ended(job(JobState::Cancelled))),
            Some(("False", "Cancelled")),
        ),
        (
            "a failed attempt waits for its retry",
            Case {
                policy: policy(1, &[RetryReason::NonZeroExitCode]),
                ..case("", at(Phase::Running), ended(exited(3)))
            },
            Some(("False", "NonZeroExitCode")),
        ),
        (
            "a finished job seen again writes nothing",
            case("", collected(at(Phase::Succeeded)), Finding::Observed(None)),
            None,
        ),
    ];
    for (name, case, expected) in cases {
        let ready = run(&case).status.map(|status| {
            let ready = condition(&status.conditions, ConditionType::Ready)
                .expect("every write carries Ready");
            assert_eq!(ready.observed_generation, Some(GENERATION), "{name}");
            (ready.status.clone(), ready.reason.clone())
        });
        let expected = expected.map(|(holds, reason)| (holds.to_owned(), reason.to_owned()));
        assert_eq!(ready, expected, "{name}");
    }
}

#[test]
fn steps() {
    use Effect::{Cancel, Collect, Expire, Follow, Forget, ShowOutput, Submit};
    let interrupted = |problem: Option<ClusterProblem>| Failure::Interrupted {
        message: "broken pipe".into(),
        problem,
    };
    let after = |phase: Phase, reason: Option<Reason>| {
        vec![Dependency {
            name: "prep",
            condition: AfterCondition::Succeeded,
            seen: Seen::Present {
                phase,
                reason,
                deleting: false,
            },
            attempt: None,
        }]
    };
    // The dependency's attempt: job 41 on the job's cluster, its last unless `last` is false.
    let running_41 = |last: bool| {
        vec![Dependency {
            name: "prep",
            condition: AfterCondition::Succeeded,
            seen: Seen::Present {
                phase: Phase::Running,
                reason: None,
                deleting: false,
            },
            attempt: Some(super::dependencies::Attempt {
                cluster: "hpc",
                job_id: "41",
                last,
            }),
        }]
    };
    let after_41 = || vec![batchbridge_core::Dependency::after_ok("41")];
    let cases = vec![
        Case {
            writes: Some((Phase::Submitted, 1, 0)),
            effects: vec![Submit {
                attempt: 1,
                after: after_41(),
            }],
            after: running_41(true),
            native: true,
            ..case(
                "a new job whose dependency runs its last attempt on its cluster is submitted \
                 at once, its scheduler holding it",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 1, 0)),
            effects: vec![Submit {
                attempt: 1,
                after: after_41(),
            }],
            after: running_41(true),
            native: true,
            ..case(
                "a waiting job is handed to its scheduler once its dependency runs",
                waiting_for("prep"),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            after: running_41(false),
            native: true,
            requeue: Some(RECHECK),
            ..case(
                "a dependency with a retry left keeps the job waiting in the operator",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            after: running_41(true),
            requeue: Some(RECHECK),
            ..case(
                "a backend without native dependencies keeps the job waiting in the operator",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            effects: vec![Submit {
                attempt: 1,
                after: after_41(),
            }],
            after: running_41(true),
            native: true,
            ..case(
                "a submit cut short is made again under its key with the same dependency ids",
                with(at(Phase::Submitted), |s| s.job_id = None),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 1, 0)),
            effects: vec![Submit {
                attempt: 1,
                after: vec![],
            }],
            ..case(
                "a new job is submitted as attempt 1",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            after: after(Phase::Running, None),
            requeue: Some(RECHECK),
            ..case(
                "a new job waits for its dependency, woken by its change",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            after: after(Phase::Running, None),
            requeue: Some(RECHECK),
            ..case(
                "a waiting job seen again writes nothing",
                waiting_for("prep"),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 1, 0)),
            effects: vec![Submit {
                attempt: 1,
                after: vec![],
            }],
            after: after(Phase::Succeeded, Some(Reason::Succeeded)),
            ..case(
                "a waiting job is submitted once its dependency succeeded",
                waiting_for("prep"),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Failed, 0, 0)),
            after: after(Phase::Failed, Some(Reason::NonZeroExitCode)),
            ..case(
                "a waiting job fails unsubmitted once its dependency failed",
                waiting_for("prep"),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Failed, 0, 0)),
            after: after(Phase::Failed, Some(Reason::DependencyFailed)),
            ..case(
                "the failure propagates down a chain",
                waiting_for("prep"),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Failed, 0, 0)),
            after: after(Phase::Pending, None),
            cycle: Some(vec!["job".into(), "prep".into(), "job".into()]),
            ..case(
                "a job in a cycle fails unsubmitted",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            suspended: true,
            after: after(Phase::Succeeded, Some(Reason::Succeeded)),
            ..case(
                "suspend holds a job whose dependencies are met",
                waiting_for("prep"),
                Finding::Observed(None),
            )
        },
        Case {
            generation: GENERATION + 1,
            writes: Some((Phase::Pending, 1, 0)),
            effects: vec![Forget(id())],
            after: after(Phase::Running, None),
            requeue: Some(RECHECK),
            ..case(
                "an edited finished job runs again after its dependencies",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            effects: vec![Forget(id())],
            after: after(Phase::Failed, Some(Reason::NonZeroExitCode)),
            ..case(
                "a dependency failing after the job ran changes nothing",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            suspended: true,
            ..case(
                "a suspended new job is not submitted",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            suspended: true,
            ..case(
                "a suspended job seen again writes nothing",
                held(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 1, 0)),
            effects: vec![Submit {
                attempt: 1,
                after: vec![],
            }],
            generation: GENERATION + 1,
            ..case(
                "a suspended job is submitted once suspend is cleared",
                held(),
                Finding::Observed(None),
            )
        },
        Case {
            effects: vec![Forget(id())],
            suspended: true,
            ..case(
                "a finished job ignores suspend",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Running, 1, 0)),
            effects: vec![Follow(id()), Cancel(id())],
            requeue: Some(ACTION_RETRY),
            suspended: true,
            generation: GENERATION + 1,
            ..case(
                "a running job suspended is cancelled, Suspending until its end is seen",
                runs_digest(seen_running()),
                observed(job(JobState::Running)),
            )
        },
        Case {
            writes: Some((Phase::Queued, 1, 0)),
            effects: vec![Follow(id()), Cancel(id())],
            requeue: Some(ACTION_RETRY),
            suspended: true,
            ..case(
                "so is a queued one",
                accepted(5),
                observed(waiting(JobState::Queued, "Priority")),
            )
        },
        Case {
            effects: vec![Follow(id()), Cancel(id())],
            requeue: Some(ACTION_RETRY),
            suspended: true,
            ..case(
                "suspend during its cancel: cancelled again until the end is seen, nothing new written",
                suspending(),
                observed(job(JobState::Running)),
            )
        },
        Case {
            effects: vec![Follow(id()), Cancel(id())],
            requeue: Some(ACTION_RETRY),
            suspended: true,
            ..case(
                "and with no report yet",
                suspending(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 1, 0)),
            effects: vec![Forget(id())],
            suspended: true,
            ..case(
                "its cancel seen: suspended, the attempt no failure, nothing to do",
                suspending(),
                observed(job(JobState::Cancelled)),
            )
        },
        Case {
            writes: Some((Phase::Pending, 2, 1)),
            effects: vec![Forget(id())],
            suspended: true,
            policy: policy(1, &[]),
            ..case(
                "retries untouched: the policy's budget is not spent on a suspension",
                with(suspending(), |s| {
                    s.attempts = 2;
                    s.retries = 1;
                }),
                observed(job(JobState::Cancelled)),
            )
        },
        Case {
            suspended: true,
            ..case(
                "a suspended job seen again writes nothing",
                suspended_after(1, 0),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 2, 0)),
            effects: vec![Submit {
                attempt: 2,
                after: vec![],
            }],
            generation: GENERATION + 1,
            ..case(
                "resumed: submitted again as the next attempt",
                suspended_after(1, 0),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 3, 1)),
            effects: vec![Submit {
                attempt: 3,
                after: vec![],
            }],
            generation: GENERATION + 1,
            policy: policy(1, &[]),
            ..case(
                "with its retries as they were: a suspend and resume is no edit",
                suspended_after(2, 1),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 3, 0)),
            effects: vec![Submit {
                attempt: 3,
                after: vec![],
            }],
            generation: GENERATION + 1,
            policy: policy(1, &[]),
            ..case(
                "but an edit made while it was suspended starts the retries afresh",
                with(suspended_after(2, 1), |s| {
                    s.spec_digest = Some("edited".into())
                }),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Running, 1, 0)),
            effects: vec![Follow(id()), Cancel(id())],
            requeue: Some(ACTION_RETRY),
            generation: GENERATION + 1,
            ..case(
                "resumed before the cancel took: still cancelled, the next attempt waits for its end",
                suspending(),
                observed(job(JobState::Running)),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 2, 0)),
            effects: vec![
                Forget(id()),
                Submit {
                    attempt: 2,
                    after: vec![],
                },
            ],
            generation: GENERATION + 1,
            ..case(
                "then, its end seen, the next attempt is submitted",
                suspending(),
                observed(job(JobState::Cancelled)),
            )
        },
        Case {
            effects: vec![Collect { id: id() }],
            suspended: true,
            ..case(
                "a job that succeeded before the cancel took has its output collected",
                suspending(),
                observed(job(JobState::Succeeded)),
            )
        },
        Case {
            writes: Some((Phase::Succeeded, 1, 0)),
            effects: vec![Forget(id())],
            suspended: true,
            ..case(
                "and has succeeded",
                suspending(),
                ended(job(JobState::Succeeded)),
            )
        },
        Case {
            writes: Some((Phase::Succeeded, 1, 0)),
            effects: vec![Forget(id())],
            suspended: true,
            generation: GENERATION + 1,
            ..case(
                "a finished job suspended is not run again; only the generation is observed",
                runs_digest(collected(at(Phase::Succeeded))),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Failed, 1, 0)),
            effects: vec![Forget(id())],
            generation: GENERATION + 1,
            ..case(
                "nor when suspend is cleared",
                runs_digest(failed(Phase::Failed, Reason::NonZeroExitCode, 0, 60)),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 1, 0)),
            effects: vec![Forget(id())],
            suspended: true,
            generation: GENERATION + 1,
            ..case(
                "a finished job edited while suspended waits to run again",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::RetryPending, 1, 0)),
            suspended: true,
            policy: policy(2, &[]),
            ..case(
                "a job waiting for its retry keeps RetryPending, suspended",
                failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 60),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 2, 1)),
            effects: vec![Submit {
                attempt: 2,
                after: vec![],
            }],
            policy: policy(2, &[]),
            generation: GENERATION + 1,
            ..case(
                "resumed, its retry is the policy's",
                runs_digest(with(
                    failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 60),
                    |s| {
                        set_condition(
                            &mut s.conditions,
                            ConditionType::Suspended,
                            true,
                            Reason::Suspended,
                            "",
                            now(),
                        )
                    },
                )),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 1, 0)),
            suspended: true,
            ..case(
                "an attempt the scheduler refused for now is undone when suspended, not submitted again",
                with(at(Phase::Submitted), |s| {
                    s.job_id = None;
                    s.attempts = 2;
                    s.reason = Some(Reason::SubmitLimit);
                }),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 1, 0)),
            requeue: Some(CLUSTER_RECHECK),
            generation: GENERATION + 1,
            ..case(
                "resumed while its cluster is unusable: no longer Suspended, waits for the cluster",
                suspended_after(1, 0),
                cluster(Reason::Unreachable),
            )
        },
        Case {
            writes: Some((Phase::RetryPending, 1, 0)),
            requeue: Some(Duration::from_secs(7)),
            policy: policy(2, &[]),
            generation: GENERATION + 1,
            ..case(
                "resumed during a retry's backoff: no longer Suspended, the backoff goes on",
                runs_digest(with(
                    failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 3),
                    |s| {
                        set_condition(
                            &mut s.conditions,
                            ConditionType::Suspended,
                            true,
                            Reason::Suspended,
                            "",
                            now(),
                        )
                    },
                )),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            requeue: Some(CLUSTER_RECHECK),
            ..case(
                "a new job waits for its cluster",
                BatchJobStatus::default(),
                cluster(Reason::SecretNotFound),
            )
        },
        Case {
            writes: Some((Phase::Running, 1, 0)),
            requeue: Some(CLUSTER_RECHECK),
            ..case(
                "a running job keeps its phase when the cluster fails",
                at(Phase::Running),
                cluster(Reason::Unreachable),
            )
        },
        Case {
            requeue: Some(CLUSTER_RECHECK),
            ..case(
                "a reported problem is not written twice",
                with(at(Phase::Running), |s| {
                    cluster_problem(s, &problem(Reason::Unreachable), now())
                }),
                cluster(Reason::Unreachable),
            )
        },
        Case {
            effects: vec![Submit {
                attempt: 1,
                after: vec![],
            }],
            ..case(
                "stopped between submit and the id's write: the same key again",
                with(at(Phase::Submitted), |s| s.job_id = None),
                Finding::Observed(None),
            )
        },
        Case {
            effects: vec![Submit {
                attempt: 3,
                after: vec![],
            }],
            ..case(
                "the same for a later attempt",
                with(at(Phase::Submitted), |s| {
                    s.job_id = None;
                    s.attempts = 3;
                }),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Queued, 1, 0)),
            effects: vec![Follow(id())],
            ..case(
                "an accepted submit writes the id, as queued, and follows it",
                with(at(Phase::Submitted), |s| s.job_id = None),
                Done::Submit {
                    attempt: 1,
                    outcome: SubmitOutcome::Accepted {
                        id: id(),
                        queue: None,
                        user: Some("alice".into()),
                    },
                },
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            requeue: Some(CLUSTER_RECHECK),
            ..case(
                "a submit that never reached the cluster undoes its attempt",
                with(at(Phase::Submitted), |s| s.job_id = None),
                submit_failed(Failure::NotReached(problem(Reason::AuthenticationFailed))),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 1, 0)),
            requeue: Some(CLUSTER_RECHECK),
            ..case(
                "a submit cut short keeps its key and says the cluster is not ready",
                with(at(Phase::Submitted), |s| s.job_id = None),
                submit_failed(interrupted(Some(problem(Reason::ConnectionLost)))),
            )
        },
        Case {
            requeue: Some(ACTION_RETRY),
            ..case(
                "a passing failure is tried again soon",
                with(at(Phase::Submitted), |s| s.job_id = None),
                submit_failed(interrupted(None)),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            requeue: Some(SUBMIT_AGAIN),
            ..case(
                "a submit refused for a submit limit undoes its attempt: Pending, never Failed",
                with(at(Phase::Submitted), |s| s.job_id = None),
                submit_failed(Failure::Deferred {
                    reason: Reason::SubmitLimit,
                    message: "QOSMaxSubmitJobPerUserLimit".into(),
                }),
            )
        },
        Case {
            writes: Some((Phase::Pending, 0, 0)),
            requeue: Some(SUBMIT_AGAIN),
            capacity: full(),
            ..case(
                "no room on its cluster: a new job waits Pending, SubmitLimit, nothing submitted",
                BatchJobStatus::default(),
                Finding::Observed(None),
            )
        },
        Case {
            requeue: Some(SUBMIT_AGAIN),
            capacity: full(),
            ..case(
                "still no room: nothing written again",
                waiting_for_room(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 1, 0)),
            effects: vec![Submit {
                attempt: 1,
                after: vec![],
            }],
            ..case(
                "room again: the waiting job's attempt begins",
                waiting_for_room(),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Submitted, 2, 0)),
            effects: vec![Submit {
                attempt: 2,
                after: vec![],
            }],
            ..case(
                "a job whose submit the limit refused submits the same attempt's key again",
                refused_for_the_limit(),
                Finding::Observed(None),
            )
        },
        Case {
            requeue: Some(SUBMIT_AGAIN),
            policy: policy(2, &[]),
            capacity: full(),
            ..case(
                "a retry due with no room keeps RetryPending and its reason",
                failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 600),
                Finding::Observed(None),
            )
        },
        Case {
            effects: vec![Submit {
                attempt: 1,
                after: vec![],
            }],
            capacity: full(),
            ..case(
                "a submit cut short by a restart is sent again whatever the room: it counts already",
                with(at(Phase::Submitted), |s| s.job_id = None),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Failed, 1, 0)),
            ..case(
                "a refused submit fails for good",
                with(at(Phase::Submitted), |s| s.job_id = None),
                submit_failed(Failure::Refused("invalid partition".into())),
            )
        },
        Case {
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "a submitted job is followed",
                with(at(Phase::Submitted), |s| set_finished(s, now())),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Running, 1, 0)),
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "a change the poller saw is written",
                at(Phase::Queued),
                observed(job(JobState::Running)),
            )
        },
        Case {
            effects: vec![Follow(id())],
            requeue: Some(QUEUE_REPORT_HOLD - Duration::from_secs(5)),
            ..case(
                "the first polls of a job accepted as queued write nothing; the scheduler's words wait for the hold's end",
                accepted(5),
                observed(waiting(JobState::Queued, "Priority")),
            )
        },
        Case {
            effects: vec![Follow(id())],
            requeue: Some(QUEUE_REPORT_HOLD - Duration::from_secs(5)),
            ..case(
                "a waiting job without an estimate is written when the hold ends too",
                accepted(5),
                observed({
                    let mut job = waiting(JobState::Queued, "Priority");
                    job.expected_start_at = None;
                    job
                }),
            )
        },
        Case {
            writes: Some((Phase::Queued, 1, 0)),
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "a waiting job's report is written after its first minute in the queue",
                accepted(61),
                observed(waiting(JobState::Queued, "Resources")),
            )
        },
        Case {
            writes: Some((Phase::Held, 1, 0)),
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "a new phase is written at once",
                accepted(5),
                observed(waiting(JobState::Held, "JobHeldUser")),
            )
        },
        Case {
            writes: Some((Phase::Running, 1, 0)),
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "so is the start",
                accepted(5),
                observed(job(JobState::Running)),
            )
        },
        Case {
            log_pod: true,
            writes: Some((Phase::Running, 1, 0)),
            effects: vec![ShowOutput(id()), Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "a job with a log pod starts it when it starts running",
                accepted(5),
                observed(job(JobState::Running)),
            )
        },
        Case {
            log_pod: true,
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "and not again while it runs",
                seen_running(),
                observed(job(JobState::Running)),
            )
        },
        Case {
            log_pod: true,
            writes: Some((Phase::Queued, 1, 0)),
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "nor while it waits",
                accepted(61),
                observed(waiting(JobState::Queued, "Resources")),
            )
        },
        Case {
            writes: Some((Phase::Queued, 1, 0)),
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "a job submitted by an operator that wrote the acceptance as Submitted",
                with(accepted(5), |s| s.phase = Some(Phase::Submitted)),
                observed(waiting(JobState::Queued, "Priority")),
            )
        },
        Case {
            effects: vec![Collect { id: id() }],
            ..case(
                "a job seen ending has its output collected first, to write both at once",
                at(Phase::Running),
                observed(job(JobState::Succeeded)),
            )
        },
        Case {
            writes: Some((Phase::Succeeded, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "then its end and its output are written, and it is forgotten",
                at(Phase::Running),
                ended(job(JobState::Succeeded)),
            )
        },
        Case {
            keeps_output: false,
            writes: Some((Phase::Succeeded, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "unless the output policy keeps nothing",
                at(Phase::Running),
                observed(job(JobState::Succeeded)),
            )
        },
        Case {
            effects: vec![Follow(id())],
            requeue: Some(RECHECK),
            ..case(
                "an unchanged observation writes nothing",
                seen_running(),
                observed(job(JobState::Running)),
            )
        },
        Case {
            writes: Some((Phase::Succeeded, 1, 0)),
            ..case(
                "a collected output is written",
                at(Phase::Succeeded),
                Done::Collect {
                    outcome: CollectOutcome::Collected {
                        tail: Some("hello\n".into()),
                        task_outputs: Vec::new(),
                        task_outputs_omitted: None,
                        staged: None,
                        summary: "6 bytes".into(),
                        refused: Vec::new(),
                        unwritten: Vec::new(),
                    },
                    observation: None,
                },
            )
        },
        Case {
            writes: Some((Phase::Succeeded, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "an output whose ConfigMap the API server refused still ends the job, for good",
                at(Phase::Running),
                Done::Collect {
                    outcome: CollectOutcome::Collected {
                        tail: Some("hello\n".into()),
                        task_outputs: Vec::new(),
                        task_outputs_omitted: None,
                        staged: None,
                        summary: "6 bytes".into(),
                        refused: Vec::new(),
                        unwritten: vec![
                            "ConfigMap x-output (the API server answered 422 Invalid)".into(),
                        ],
                    },
                    observation: Some(Box::leak(Box::new(job(JobState::Succeeded)))),
                },
            )
        },
        Case {
            writes: Some((Phase::Succeeded, 1, 0)),
            ..case(
                "an output that cannot be read is said so, for good",
                at(Phase::Succeeded),
                collect_done(CollectOutcome::Failed(Failure::Refused(
                    "no such file".into(),
                ))),
            )
        },
        Case {
            requeue: Some(ACTION_RETRY),
            ..case(
                "a collection cut short is tried again",
                at(Phase::Succeeded),
                collect_done(CollectOutcome::Failed(interrupted(None))),
            )
        },
        Case {
            writes: Some((Phase::Succeeded, 1, 0)),
            effects: vec![Forget(id())],
            requeue: Some(ACTION_RETRY),
            ..case(
                "but the end it was collected for is written at once",
                at(Phase::Running),
                Done::Collect {
                    outcome: CollectOutcome::Failed(interrupted(None)),
                    observation: Some(Box::leak(Box::new(job(JobState::Succeeded)))),
                },
            )
        },
        Case {
            effects: vec![Forget(id()), Collect { id: id() }],
            ..case(
                "a finished job's uncollected output is collected",
                at(Phase::Succeeded),
                Finding::Observed(None),
            )
        },
        Case {
            effects: vec![Forget(id())],
            ..case(
                "a collected, succeeded job rests",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            generation: GENERATION + 1,
            writes: Some((Phase::Submitted, 2, 0)),
            effects: vec![
                Forget(id()),
                Submit {
                    attempt: 2,
                    after: vec![],
                },
            ],
            ..case(
                "editing a succeeded job runs it again",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            generation: GENERATION + 1,
            writes: Some((Phase::Submitted, 4, 0)),
            effects: vec![
                Forget(id()),
                Submit {
                    attempt: 4,
                    after: vec![],
                },
            ],
            ..case(
                "editing a failed job starts its retries afresh",
                failed(Phase::Failed, Reason::NonZeroExitCode, 2, 60),
                Finding::Observed(None),
            )
        },
        Case {
            generation: GENERATION + 1,
            writes: Some((Phase::Submitted, 2, 0)),
            effects: vec![
                Forget(id()),
                Submit {
                    attempt: 2,
                    after: vec![],
                },
            ],
            ..case(
                "editing a job waiting for its retry runs the new spec at once",
                failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 3),
                Finding::Observed(None),
            )
        },
        Case {
            generation: GENERATION + 1,
            writes: Some((Phase::Submitted, 1, 0)),
            effects: vec![Submit {
                attempt: 1,
                after: vec![],
            }],
            ..case(
                "a pending job runs the spec as it is now",
                with(at(Phase::Pending), |s| {
                    s.observed_generation = Some(GENERATION)
                }),
                Finding::Observed(None),
            )
        },
        Case {
            writes: Some((Phase::Failed, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "a failure without a policy is final",
                at(Phase::Running),
                ended(exited(1)),
            )
        },
        Case {
            policy: policy(2, &[]),
            writes: Some((Phase::RetryPending, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "a failure with retries left waits for its retry",
                at(Phase::Running),
                ended(exited(1)),
            )
        },
        Case {
            policy: policy(2, &[]),
            keeps_output: false,
            writes: Some((Phase::RetryPending, 1, 0)),
            effects: vec![Forget(id())],
            requeue: Some(Duration::from_secs(10)),
            ..case(
                "without an output to keep, the wait starts at once",
                at(Phase::Running),
                observed(with_end(exited(1), now())),
            )
        },
        Case {
            policy: policy(2, &[]),
            keeps_output: false,
            writes: Some((Phase::Submitted, 2, 1)),
            effects: vec![
                Forget(id()),
                Submit {
                    attempt: 2,
                    after: vec![],
                },
            ],
            ..case(
                "a failure seen after its backoff passed is retried at once",
                at(Phase::Running),
                observed(with_end(exited(1), now() - Duration::from_secs(60))),
            )
        },
        Case {
            policy: policy(2, &[]),
            writes: Some((Phase::Submitted, 2, 1)),
            effects: vec![Submit {
                attempt: 2,
                after: vec![],
            }],
            ..case(
                "a retry is submitted after the backoff",
                failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 60),
                Finding::Observed(None),
            )
        },
        Case {
            policy: policy(2, &[]),
            requeue: Some(Duration::from_secs(7)),
            ..case(
                "but not before",
                failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 3),
                Finding::Observed(None),
            )
        },
        Case {
            policy: policy(2, &[]),
            requeue: Some(Duration::from_secs(20 - 3)),
            ..case(
                "the second retry waits twice as long",
                failed(Phase::RetryPending, Reason::NonZeroExitCode, 1, 3),
                Finding::Observed(None),
            )
        },
        Case {
            policy: policy(2, &[]),
            effects: vec![Collect { id: id() }],
            ..case(
                "a failed attempt's output is collected before its retry",
                with(at(Phase::RetryPending), |s| {
                    s.finish_time = Some(time(now() - Duration::from_secs(600)))
                }),
                Finding::Observed(None),
            )
        },
        Case {
            policy: policy(2, &[]),
            writes: Some((Phase::Failed, 3, 2)),
            effects: vec![Forget(id())],
            ..case(
                "retries stop at maxRetries",
                with(at(Phase::Running), |s| {
                    s.attempts = 3;
                    s.retries = 2;
                }),
                ended(exited(1)),
            )
        },
        Case {
            policy: policy(3, &[RetryReason::NodeFailure, RetryReason::Preempted]),
            writes: Some((Phase::Failed, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "only the listed reasons are retried",
                at(Phase::Running),
                ended(exited(1)),
            )
        },
        Case {
            policy: policy(3, &[RetryReason::NodeFailure, RetryReason::Preempted]),
            writes: Some((Phase::RetryPending, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "a listed reason is",
                at(Phase::Running),
                ended(with_cause(job(JobState::Failed), FailureCause::Preempted)),
            )
        },
        Case {
            policy: policy(3, &[RetryReason::Unknown]),
            writes: Some((Phase::RetryPending, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "other causes count as Unknown",
                at(Phase::Running),
                ended(with_cause(
                    job(JobState::Failed),
                    FailureCause::MemoryExceeded,
                )),
            )
        },
        Case {
            policy: policy(3, &[]),
            writes: Some((Phase::Cancelled, 1, 0)),
            effects: vec![Forget(id())],
            ..case(
                "a cancelled job is not retried",
                at(Phase::Running),
                ended(job(JobState::Cancelled)),
            )
        },
        Case {
            ttl: Some(Duration::from_secs(300)),
            effects: vec![Forget(id())],
            requeue: Some(Duration::from_secs(300 - 60)),
            ..case(
                "a finished job is looked at again when its ttl expires",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            ttl: Some(Duration::from_secs(60)),
            effects: vec![Forget(id()), Expire],
            ..case(
                "and deleted once it has",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
        Case {
            ttl: Some(Duration::ZERO),
            effects: vec![Forget(id()), Collect { id: id() }],
            ..case(
                "but never before its output was collected",
                at(Phase::Succeeded),
                Finding::Observed(None),
            )
        },
        Case {
            ttl: Some(Duration::ZERO),
            policy: policy(2, &[]),
            requeue: Some(Duration::from_secs(7)),
            ..case(
                "nor while a retry is due",
                failed(Phase::RetryPending, Reason::NonZeroExitCode, 0, 3),
                Finding::Observed(None),
            )
        },
        Case {
            ttl: Some(Duration::ZERO),
            generation: GENERATION + 1,
            writes: Some((Phase::Submitted, 2, 0)),
            effects: vec![
                Forget(id()),
                Submit {
                    attempt: 2,
                    after: vec![],
                },
            ],
            ..case(
                "an edited spec runs it again instead",
                collected(at(Phase::Succeeded)),
                Finding::Observed(None),
            )
        },
    ];
    let count = cases.len();
    for case in &cases {
        let step = run(case);
        let writes = step
            .status
            .as_ref()
            .map(|s| (s.phase.unwrap_or(Phase::Pending), s.attempts, s.retries));
        assert_eq!(writes, case.writes, "{}: status written", case.name);
        assert_eq!(step.effects, case.effects, "{}: effects", case.name);
        assert_eq!(step.requeue, case.requeue, "{}: requeue", case.name);
    }
    assert!(count >= 40);
}

fn with_end(mut job: JobStatus, at: SystemTime) -> JobStatus {
    job.ended_at = Some(at);
    job
}

fn with_cause(mut job: JobStatus, cause: FailureCause) -> JobStatus {
    job.cause = Some(cause);
    job
}

/// The conditions as `kubectl describe` lists them: type, status, reason.
fn conditions(status: &BatchJobStatus) -> Vec<(String, String, String)> {
    status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn triples(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    list.iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect()
}

/// One job's whole life: submitted, queued, running, failed and retried after the
/// backoff, edited while it waits, succeeded, collected, kept until its ttl, deleted.
/// Every status written is checked as a user reads it (phase, reason, conditions).
#[test]
fn a_whole_life() {
    let policy = RetryPolicy {
        max_retries: 1,
        retry_on: vec![RetryReason::NonZeroExitCode],
    };
    let mut spec = Rules {
        retry_policy: Some(&policy),
        ttl_after_finished: Some(Duration::from_secs(600)),
        ..spec()
    };
    let mut status = BatchJobStatus::default();
    let clock = std::cell::Cell::new(now());
    // The effects and the requeue of each step.
    let walk = |spec: &Rules<'_>, status: &mut BatchJobStatus, on: On<'_>, after: u64| {
        clock.set(clock.get() + Duration::from_secs(after));
        let step = step_on(spec, status, &on, clock.get());
        if let Some(next) = step.status {
            *status = next;
        }
        (step.effects, step.requeue)
    };
    use Effect::{Collect, Expire, Follow, Forget, Submit};

    // Created, with its cluster's Secret missing: Pending, ClusterReady False.
    let missing = problem(Reason::SecretNotFound);
    assert_eq!(
        walk(
            &spec,
            &mut status,
            Finding::ClusterProblem(&missing).into(),
            0
        ),
        (vec![], Some(CLUSTER_RECHECK))
    );
    assert_eq!(
        (status.phase, status.reason),
        (Some(Phase::Pending), Some(Reason::SecretNotFound))
    );
    // The Secret is there: attempt 1 is submitted; the login is refused.
    assert_eq!(
        walk(&spec, &mut status, Finding::Observed(None).into(), 15),
        (
            vec![Submit {
                attempt: 1,
                after: vec![]
            }],
            None
        )
    );
    assert_eq!(status.phase, Some(Phase::Submitted));
    let refused = problem(Reason::AuthenticationFailed);
    let effects = walk(
        &spec,
        &mut status,
        Done::Submit {
            attempt: 1,
            outcome: SubmitOutcome::Failed(Failure::NotReached(refused)),
        }
        .into(),
        1,
    );
    assert_eq!(effects, (vec![], Some(CLUSTER_RECHECK)));
    assert_eq!(
        (status.phase, status.attempts),
        (Some(Phase::Pending), 0),
        "editable again"
    );
    assert_eq!(
        removal(Some(&status), spec.cleanup),
        Removal {
            cancel: Cancel::Nothing,
            remove_files: 0
        },
        "deletable at once"
    );
    // Fixed: submitted again as attempt 1, accepted as job 7.
    assert_eq!(
        walk(&spec, &mut status, Finding::Observed(None).into(), 15),
        (
            vec![Submit {
                attempt: 1,
                after: vec![]
            }],
            None
        )
    );
    let accepted = |attempt: u32, id: &str| Done::Submit {
        attempt,
        outcome: SubmitOutcome::Accepted {
            id: JobId::from(id),
            queue: None,
            user: Some("alice".into()),
        },
    };
    assert_eq!(
        walk(&spec, &mut status, accepted(1, "7").into(), 1),
        (vec![Follow(JobId::from("7"))], None)
    );
    assert_eq!(
        (status.phase, status.job_id.as_deref(), status.reason),
        (Some(Phase::Queued), Some("7"), Some(Reason::Queued))
    );
    assert_eq!(
        walk(&spec, &mut status, Finding::Observed(None).into(), 1),
        (vec![Follow(JobId::from("7"))], Some(RECHECK))
    );
    // Queued with a backfill estimate: the first poll says what the acceptance wrote
    // and writes nothing; after a minute in the queue, the scheduler's words for the
    // wait are written: no start time, an expected one.
    let mut queued = job(JobState::Queued);
    queued.expected_start_at = Some(clock.get() + Duration::from_secs(3600));
    queued.queue = Some("debug".into());
    let unchanged = status.clone();
    assert_eq!(
        walk(
            &spec,
            &mut status,
            Finding::Observed(Some(&queued)).into(),
            5
        ),
        (
            vec![Follow(JobId::from("7"))],
            Some(QUEUE_REPORT_HOLD - Duration::from_secs(6))
        ),
        "the estimate is written when the first minute ends"
    );
    assert_eq!(status, unchanged, "nothing written in the first minute");
    queued.reason = Some("Resources".into());
    walk(
        &spec,
        &mut status,
        Finding::Observed(Some(&queued)).into(),
        54,
    );
    assert_eq!(status.message.as_deref(), Some("Resources"));
    assert_eq!(
        (status.phase, status.start_time.as_ref()),
        (Some(Phase::Queued), None)
    );
    assert!(status.expected_start_time.is_some());
    assert_eq!(
        status.queue.as_deref(),
        Some("debug"),
        "the partition the scheduler used"
    );
    // Runs, then fails: a retry is pending, not final.
    let mut running = job(JobState::Running);
    running.started_at = Some(clock.get() + Duration::from_secs(5));
    walk(
        &spec,
        &mut status,
        Finding::Observed(Some(&running)).into(),
        5,
    );
    assert_eq!(
        (status.phase, status.expected_start_time.as_ref()),
        (Some(Phase::Running), None)
    );
    let mut failed = exited(1);
    failed.started_at = running.started_at;
    failed.ended_at = Some(clock.get() + Duration::from_secs(20));
    // Its end is written with its output, in one write.
    let effects = walk(
        &spec,
        &mut status,
        Finding::Observed(Some(&failed)).into(),
        20,
    );
    assert_eq!(
        effects,
        (
            vec![Collect {
                id: JobId::from("7")
            }],
            None
        )
    );
    assert_eq!(status.phase, Some(Phase::Running), "nothing written yet");
    let output = CollectOutcome::Collected {
        tail: Some("boom\n".into()),
        task_outputs: Vec::new(),
        task_outputs_omitted: None,
        staged: None,
        summary: "5 bytes".into(),
        refused: vec![],
        unwritten: vec![],
    };
    let collected = |output: &CollectOutcome, ended: &'static JobStatus| Done::Collect {
        outcome: output.clone(),
        observation: Some(ended),
    };
    let failed: &'static JobStatus = Box::leak(Box::new(failed));
    assert_eq!(
        walk(&spec, &mut status, collected(&output, failed).into(), 1),
        (vec![Forget(JobId::from("7"))], None)
    );
    assert_eq!(
        (status.phase, status.reason),
        (Some(Phase::RetryPending), Some(Reason::NonZeroExitCode))
    );
    assert_eq!(status.run_time.as_deref(), Some("20s"));
    assert_eq!(
        conditions(&status),
        triples(&[
            ("ClusterReady", "True", "Ready"),
            ("Finished", "False", "RetryPending"),
            ("OutputCollected", "True", "Collected"),
            ("Ready", "False", "NonZeroExitCode"),
            ("Submitted", "True", "Submitted")
        ])
    );
    assert_eq!(status.output_tail.as_deref(), Some("boom\n"));
    assert_eq!(
        walk(&spec, &mut status, Finding::Observed(None).into(), 1),
        (vec![], Some(Duration::from_secs(8)))
    );
    // The backoff passes: attempt 2, retry 1, from a clean status.
    assert_eq!(
        walk(&spec, &mut status, Finding::Observed(None).into(), 8),
        (
            vec![Submit {
                attempt: 2,
                after: vec![]
            }],
            None
        )
    );
    assert_eq!(
        (status.phase, status.attempts, status.retries),
        (Some(Phase::Submitted), 2, 1)
    );
    assert_eq!(
        (
            status.output_tail.as_ref(),
            status.run_time.as_ref(),
            status.job_id.as_ref()
        ),
        (None, None, None)
    );
    walk(&spec, &mut status, accepted(2, "8").into(), 1);
    assert_eq!(
        status.message.as_deref(),
        Some("attempt 2 submitted as job 8")
    );
    // Fails again: no retry left, Failed for good.
    let effects = walk(
        &spec,
        &mut status,
        Finding::Observed(Some(failed)).into(),
        30,
    );
    assert_eq!(
        effects,
        (
            vec![Collect {
                id: JobId::from("8")
            }],
            None
        )
    );
    let effects = walk(&spec, &mut status, collected(&output, failed).into(), 1);
    assert_eq!(effects, (vec![Forget(JobId::from("8"))], None));
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(
        conditions(&status),
        triples(&[
            ("ClusterReady", "True", "Ready"),
            ("Complete", "False", "NonZeroExitCode"),
            ("Failed", "True", "NonZeroExitCode"),
            ("Finished", "True", "NonZeroExitCode"),
            ("OutputCollected", "True", "Collected"),
            ("Ready", "False", "NonZeroExitCode"),
            ("Submitted", "True", "Submitted"),
        ])
    );
    // Edited: the new spec runs as attempt 3, its retries afresh, and succeeds.
    spec.generation += 1;
    spec.spec_digest = "edited".into();
    let effects = walk(&spec, &mut status, Finding::Observed(None).into(), 60);
    assert_eq!(
        effects,
        (
            vec![
                Forget(JobId::from("8")),
                Submit {
                    attempt: 3,
                    after: vec![]
                }
            ],
            None
        )
    );
    assert_eq!((status.attempts, status.retries), (3, 0));
    walk(&spec, &mut status, accepted(3, "9").into(), 1);
    let mut done = job(JobState::Succeeded).with_exit_code(0);
    done.ended_at = Some(clock.get() + Duration::from_secs(10));
    let done: &'static JobStatus = Box::leak(Box::new(done));
    walk(&spec, &mut status, Finding::Observed(Some(done)).into(), 10);
    let quiet = CollectOutcome::Collected {
        tail: None,
        task_outputs: Vec::new(),
        task_outputs_omitted: None,
        staged: None,
        summary: "0 bytes".into(),
        refused: vec![],
        unwritten: vec![],
    };
    let effects = walk(&spec, &mut status, collected(&quiet, done).into(), 1);
    assert_eq!(effects, (vec![Forget(JobId::from("9"))], None));
    assert_eq!(status.phase, Some(Phase::Succeeded));
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(GENERATION + 1))
    );
    for type_ in [ConditionType::Complete, ConditionType::Ready] {
        assert_eq!(holds(&status.conditions, type_), Some(true), "{type_}");
    }
    // Kept for its ttl, then deleted; deletion removes the files of all three attempts.
    assert_eq!(
        walk(&spec, &mut status, Finding::Observed(None).into(), 1),
        (
            vec![Forget(JobId::from("9"))],
            Some(Duration::from_secs(598))
        )
    );
    assert_eq!(
        walk(&spec, &mut status, Finding::Observed(None).into(), 598),
        (vec![Forget(JobId::from("9")), Expire], None)
    );
    assert_eq!(
        removal(Some(&status), spec.cleanup),
        Removal {
            cancel: Cancel::Nothing,
            remove_files: 3
        }
    );
}

mod placement {
    use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
    use batchbridge_core::placement::{Answer, Policy, Seen, Skipped};

    use super::*;

    const MOVE_AFTER: Duration = Duration::from_secs(600);

    fn placed_spec(max_moves: u32) -> Rules<'static> {
        Rules {
            target: Target::Placed {
                policy: Policy::EarliestStart,
                move_after: Some(MOVE_AFTER),
                max_moves,
            },
            ..spec()
        }
    }

    fn starts(at: EstimatedStart) -> Answer {
        Answer::Estimate(StartEstimate::new(at))
    }

    fn in_secs(secs: u64) -> EstimatedStart {
        EstimatedStart::At(now() + Duration::from_secs(secs))
    }

    fn down() -> Answer {
        Answer::Skipped(Skipped::Unreachable("connection refused".into()))
    }

    fn answers(a: Answer, b: Answer) -> &'static [Seen] {
        Box::leak(Box::new([Seen::new("a", a), Seen::new("b", b)]))
    }

    fn placed(
        purpose: Purpose,
        chosen: Option<&'static str>,
        seen: &'static [Seen],
    ) -> Placed<'static> {
        Placed {
            purpose,
            chosen,
            seen,
            at: now(),
        }
    }

    const FIRST: Purpose = Purpose::Attempt {
        attempt: 1,
        retries: 0,
    };

    /// Job 42 waiting on cluster `a` since `ago` seconds, its scheduler expecting it to
    /// start in an hour, placement last asked at its submit.
    fn queued_on_a(ago: u64) -> BatchJobStatus {
        let submitted = now() - Duration::from_secs(ago);
        with(at(Phase::Queued), |s| {
            s.cluster = Some("a".into());
            s.submit_time = Some(time(submitted));
            s.expected_start_time = Some(time(now() + Duration::from_secs(3600)));
            s.placement = Some(PlacementStatus {
                time: time(submitted),
                candidates: Vec::new(),
            });
        })
    }

    fn moving_to_b(ago: u64) -> BatchJobStatus {
        with(queued_on_a(ago), |s| {
            s.moving = Some(Move {
                from: "a".into(),
                to: "b".into(),
                job_id: "42".into(),
                time: time(now()),
                outcome: MoveOutcome::Cancelling,
            });
        })
    }

    fn waiting_job() -> JobStatus {
        let mut job = job(JobState::Queued);
        job.expected_start_at = Some(now() + Duration::from_secs(3600));
        job
    }

    fn cancelled(started: bool) -> JobStatus {
        let mut job = job(JobState::Cancelled);
        job.started_at = started.then(|| now() - Duration::from_secs(5));
        job
    }

    fn outcomes(status: &BatchJobStatus) -> Vec<MoveOutcome> {
        status.moves.iter().map(|m| m.outcome).collect()
    }

    #[test]
    fn a_placed_job_is_placed_before_each_attempt() {
        let spec = placed_spec(1);
        let fresh = BatchJobStatus::default();
        let step1 = step(&spec, &fresh, &Finding::Observed(None), now());
        assert_eq!(
            step1.status, None,
            "nothing is written before placement answers"
        );
        assert_eq!(step1.effects, [Effect::Place(FIRST)]);

        let seen = answers(down(), Answer::NoEstimate);
        let step2 = step_placed(&spec, &fresh, &placed(FIRST, Some("b"), seen), now());
        let written = step2
            .status
            .expect("the placement is written with the submit");
        assert_eq!(written.phase, Some(Phase::Submitted));
        assert_eq!(written.cluster.as_deref(), Some("b"));
        let candidates = &written.placement.as_ref().expect("placement").candidates;
        let seen: Vec<_> = candidates
            .iter()
            .map(|c| (c.cluster.as_str(), c.answer))
            .collect();
        assert_eq!(
            seen,
            [("a", Estimate::Unreachable), ("b", Estimate::NoEstimate)]
        );
        assert_eq!(candidates[0].message.as_deref(), Some("connection refused"));
        assert_eq!(
            step(&spec, &written, &Finding::Observed(None), now()).effects,
            [Effect::Submit {
                attempt: 1,
                after: vec![]
            }],
            "the reconcile the placement's end wakes submits"
        );

        // An answer that comes after the attempt started is old news.
        let late = step_placed(
            &spec,
            &written,
            &placed(
                FIRST,
                Some("a"),
                answers(Answer::NoEstimate, Answer::NoEstimate),
            ),
            now(),
        );
        assert_eq!(late, Step::default());

        // The submit never reached b: placed again, b no longer the job's cluster.
        let refused = Done::Submit {
            attempt: 1,
            outcome: SubmitOutcome::Failed(Failure::NotReached(problem(Reason::Unreachable))),
        };
        let undone = step_done(&spec, &written, &refused, now())
            .status
            .expect("undone");
        assert_eq!(
            (undone.phase, undone.cluster.as_deref(), undone.attempts),
            (Some(Phase::Pending), None, 0)
        );
        assert_eq!(
            step(&spec, &undone, &Finding::Observed(None), now()).effects,
            [Effect::Place(FIRST)]
        );
    }

    #[test]
    fn a_job_no_candidate_can_take_waits() {
        let spec = placed_spec(1);
        let seen = answers(
            down(),
            Answer::Skipped(Skipped::NoAnswer("sbatch: error".into())),
        );
        let step1 = step_placed(
            &spec,
            &BatchJobStatus::default(),
            &placed(FIRST, None, seen),
            now(),
        );
        let waiting = step1.status.expect("the wait is written");
        assert_eq!(waiting.phase, Some(Phase::Pending), "never Failed");
        assert_eq!(waiting.reason, Some(Reason::NoClusterAvailable));
        assert_eq!(
            holds(&waiting.conditions, ConditionType::ClusterReady),
            Some(false)
        );
        assert!(
            waiting.message.as_deref().is_some_and(
                |m| m.contains("a: connection refused") && m.contains("b: sbatch: error")
            )
        );
        assert_eq!(step1.requeue, Some(CLUSTER_RECHECK));
        // Asked again, the same answers: nothing written; the reconcile's readiness
        // check does not flip ClusterReady back either.
        let later = now() + Duration::from_secs(15);
        let again = Placed {
            purpose: FIRST,
            chosen: None,
            seen,
            at: later,
        };
        assert_eq!(step_placed(&spec, &waiting, &again, later).status, None);
        assert_eq!(
            step(&spec, &waiting, &Finding::Observed(None), later).status,
            None
        );
    }

    #[test]
    fn a_waiting_job_is_checked_for_a_move_after_move_after() {
        let spec = placed_spec(1);
        let early = step(&spec, &queued_on_a(400), &observed(waiting_job()), now());
        assert_eq!(early.effects, [Effect::Follow(id())]);
        assert_eq!(
            early.requeue,
            Some(MOVE_AFTER - Duration::from_secs(400)),
            "woken when moveAfter has passed"
        );
        let earlier = step(&spec, &queued_on_a(60), &observed(waiting_job()), now());
        assert_eq!(
            (earlier.effects, earlier.requeue),
            (vec![Effect::Follow(id())], Some(RECHECK))
        );
        let due = step(&spec, &queued_on_a(700), &observed(waiting_job()), now());
        assert_eq!(
            (due.effects, due.requeue),
            (
                vec![Effect::Follow(id()), Effect::Place(Purpose::Move)],
                Some(RECHECK)
            )
        );
        let fixed = step(
            &super::spec(),
            &queued_on_a(700),
            &observed(waiting_job()),
            now(),
        );
        assert_eq!(
            (fixed.effects, fixed.requeue),
            (vec![Effect::Follow(id())], Some(RECHECK)),
            "clusterRef never moves"
        );
        let asked = with(queued_on_a(700), |s| {
            s.placement = Some(PlacementStatus {
                time: time(now() - Duration::from_secs(20)),
                candidates: Vec::new(),
            });
        });
        let soon = step(&spec, &asked, &observed(waiting_job()), now());
        assert_eq!(
            (soon.effects, soon.requeue),
            (
                vec![Effect::Follow(id())],
                Some(MOVE_RECHECK - Duration::from_secs(20))
            ),
            "asked at most once a minute"
        );
    }

    #[test]
    fn a_move_needs_a_clearly_earlier_start() {
        let spec = placed_spec(1);
        #[rustfmt::skip]
        let cases: Vec<(&str, BatchJobStatus, Answer, bool)> = vec![
            ("b starts now, a in an hour", queued_on_a(700), starts(EstimatedStart::Now), true),
            ("b in 50 minutes, a in an hour", queued_on_a(700), starts(in_secs(3000)), true),
            ("b under the margin earlier", queued_on_a(700), starts(in_secs(3600 - 200)), false),
            ("b later", queued_on_a(700), starts(EstimatedStart::Later), false),
            ("b cannot estimate", queued_on_a(700), Answer::NoEstimate, false),
            ("b unreachable", queued_on_a(700), down(), false),
            ("a gives no time, b starts now", with(queued_on_a(700), |s| s.expected_start_time = None), starts(EstimatedStart::Now), true),
            ("a gives no time, b in an hour", with(queued_on_a(700), |s| s.expected_start_time = None), starts(in_secs(3600)), false),
            ("too early to move", queued_on_a(60), starts(EstimatedStart::Now), false),
            ("started meanwhile", with(queued_on_a(700), |s| s.phase = Some(Phase::Running)), starts(EstimatedStart::Now), false),
        ];
        for (name, status, b, moves) in cases {
            let seen = answers(starts(in_secs(3600)), b);
            let step = step_placed(
                &spec,
                &status,
                &placed(Purpose::Move, Some("a"), seen),
                now(),
            );
            let moving = step.status.as_ref().and_then(|s| s.moving.clone());
            assert_eq!(moving.is_some(), moves, "{name}");
            if let Some(moving) = moving {
                assert_eq!(
                    (
                        moving.from.as_str(),
                        moving.to.as_str(),
                        moving.job_id.as_str()
                    ),
                    ("a", "b", "42"),
                    "{name}"
                );
                // The reconcile the placement's end wakes withdraws the job.
                assert_eq!(step.requeue, Some(ACTION_RETRY), "{name}");
            }
        }
    }

    /// The phase, cluster, attempts, whether a move is under way, and the ended moves'
    /// outcomes of a written status.
    type Moved = (Option<Phase>, Option<String>, u32, bool, Vec<MoveOutcome>);

    /// A name, the status, the event, what is written, the effects and the requeue.
    type MoveCase = (
        &'static str,
        BatchJobStatus,
        Finding<'static>,
        Option<Moved>,
        Vec<Effect>,
        Option<Duration>,
    );

    /// Every step of a move, and a restart at each point (the status is all an
    /// operator that starts again has).
    #[test]
    fn steps_of_a_move() {
        use Effect::{Collect, Follow, Forget, Submit, Withdraw};
        let spec = placed_spec(1);
        let moved = |s: &BatchJobStatus| {
            (
                s.phase,
                s.cluster.clone(),
                s.attempts,
                s.moving.is_some(),
                outcomes(s),
            )
        };
        #[rustfmt::skip]
        let cases: Vec<MoveCase> = vec![
            ("restart before the cancel: cancelled again", moving_to_b(700), observed(waiting_job()), None, vec![Follow(id()), Withdraw(id())], Some(ACTION_RETRY)),
            ("no report yet: nothing done", moving_to_b(700), Finding::Observed(None), None, vec![Follow(id())], Some(ACTION_RETRY)),
            ("confirmed cancelled, never started: submitted to b as attempt 2", moving_to_b(700), observed(cancelled(false)),
                Some((Some(Phase::Submitted), Some("b".into()), 2, false, vec![MoveOutcome::Moved])), vec![Forget(id()), Submit { attempt: 2, after: vec![] }], None),
            ("started before the cancel took: kept, never moves again", moving_to_b(700), observed(job(JobState::Running)),
                Some((Some(Phase::Running), Some("a".into()), 1, false, vec![MoveOutcome::StartedFirst])), vec![Follow(id())], Some(RECHECK)),
            ("cancelled after it started: it ran, so it is not submitted again (its end is written with its output)", moving_to_b(700), observed(cancelled(true)),
                Some((Some(Phase::Queued), Some("a".into()), 1, false, vec![MoveOutcome::StartedFirst])), vec![Collect { id: id() }], None),
            ("ended before the cancel took: kept", moving_to_b(700), observed(job(JobState::Succeeded)),
                Some((Some(Phase::Queued), Some("a".into()), 1, false, vec![MoveOutcome::StartedFirst])), vec![Collect { id: id() }], None),
            ("restart after the move was written: the same key submitted to b", with(at(Phase::Submitted), |s| {
                    s.job_id = None; s.attempts = 2; s.cluster = Some("b".into());
                    s.moves = vec![Move { from: "a".into(), to: "b".into(), job_id: "42".into(), time: time(now()), outcome: MoveOutcome::Moved }];
                }), Finding::Observed(None), None, vec![Submit { attempt: 2, after: vec![] }], None),
            ("moves used up: waits where it is", with(queued_on_a(7000), |s| {
                    s.moves = vec![Move { from: "b".into(), to: "a".into(), job_id: "7".into(), time: time(now()), outcome: MoveOutcome::Moved }];
                }), observed(waiting_job()), Some((Some(Phase::Queued), Some("a".into()), 1, false, vec![MoveOutcome::Moved])), vec![Follow(id())], Some(RECHECK)),
            ("a move given up: never again", with(queued_on_a(7000), |s| {
                    s.moves = vec![Move { from: "a".into(), to: "b".into(), job_id: "42".into(), time: time(now()), outcome: MoveOutcome::StartedFirst }];
                }), observed(waiting_job()), Some((Some(Phase::Queued), Some("a".into()), 1, false, vec![MoveOutcome::StartedFirst])), vec![Follow(id())], Some(RECHECK)),
        ];
        for (name, mut status, event, writes, effects, requeue) in cases {
            // The conditions as an earlier step wrote them.
            for c in &mut status.conditions {
                c.observed_generation = Some(GENERATION);
            }
            let step = step(&spec, &status, &event, now());
            assert_eq!(step.status.as_ref().map(moved), writes, "{name}");
            assert_eq!(step.effects, effects, "{name}");
            assert_eq!(step.requeue, requeue, "{name}");
        }
        assert_eq!(
            removal(Some(&moving_to_b(700)), CleanupPolicy::OnDelete),
            Removal {
                cancel: Cancel::Job(id()),
                remove_files: 1
            },
            "deleted while moving: the job on a is cancelled"
        );
    }

    /// With two moves allowed, a job moves a -> b, then b -> a, then stays.
    #[test]
    fn moves_are_bounded() {
        let spec = placed_spec(2);
        let mut status = queued_on_a(700);
        let mut clock = now();
        for (from, to) in [("a", "b"), ("b", "a")] {
            let seen: &'static [Seen] = Box::leak(Box::new([
                Seen::new(from, starts(EstimatedStart::Later)),
                Seen::new(to, starts(EstimatedStart::Now)),
            ]));
            let check = step_placed(
                &spec,
                &status,
                &Placed {
                    purpose: Purpose::Move,
                    chosen: Some(to),
                    seen,
                    at: clock,
                },
                clock,
            );
            status = check.status.expect("the move begins");
            assert_eq!(
                status
                    .moving
                    .as_ref()
                    .map(|m| (m.from.as_str(), m.to.as_str())),
                Some((from, to))
            );
            status = step(&spec, &status, &observed(cancelled(false)), clock)
                .status
                .expect("moved");
            assert_eq!(status.cluster.as_deref(), Some(to));
            let accepted = Done::Submit {
                attempt: status.attempts,
                outcome: SubmitOutcome::Accepted {
                    id: id(),
                    queue: None,
                    user: None,
                },
            };
            status = step_done(&spec, &status, &accepted, clock)
                .status
                .expect("accepted");
            status.expected_start_time = None;
            clock += MOVE_AFTER + MOVE_RECHECK;
        }
        assert_eq!(status.attempts, 3);
        assert_eq!(outcomes(&status), [MoveOutcome::Moved, MoveOutcome::Moved]);
        let after = step(&spec, &status, &observed(waiting_job()), clock);
        assert!(
            !after.effects.contains(&Effect::Place(Purpose::Move)),
            "no third move"
        );
    }
}

/// A submit limit or a closed queue shows as the status's reason and the Submitted
/// condition's, with the scheduler's words; the job neither fails nor counts an attempt:
/// it is Pending again (it was Submitted, its key resent every 30 s, before issue 30).
#[test]
fn a_submit_refused_for_now_says_why() {
    let refused = case(
        "refused for now",
        with(at(Phase::Submitted), |s| s.job_id = None),
        submit_failed(Failure::Deferred {
            reason: Reason::QueueClosed,
            message: "Required partition not available (inactive or drain)".into(),
        }),
    );
    let status = run(&refused).status.unwrap();
    assert_eq!(status.phase, Some(Phase::Pending));
    assert_eq!(status.attempts, 0);
    assert_eq!(status.reason, Some(Reason::QueueClosed));
    assert_eq!(
        status.message.as_deref(),
        Some("Required partition not available (inactive or drain)")
    );
    let submitted = condition(&status.conditions, ConditionType::Submitted).unwrap();
    assert_eq!(submitted.reason, Reason::QueueClosed.as_str());
    assert_eq!(
        holds(&status.conditions, ConditionType::Submitted),
        Some(false)
    );
}

/// A script whose directive the backend refuses: nothing reaches the cluster, the job
/// fails for good with the refused line in its message and its Submitted condition, and a
/// retry policy does not retry it (the same script is refused again).
#[test]
fn a_refused_directive_fails_the_job_without_a_retry() {
    let message = "line 2: #X -o /tmp/x: it moves the job's output file";
    let refused = Case {
        policy: policy(3, &[]),
        ..case(
            "a refused directive",
            with(at(Phase::Submitted), |s| s.job_id = None),
            Done::Submit {
                attempt: 1,
                outcome: SubmitOutcome::DirectiveRefused(message.into()),
            },
        )
    };
    let step = run(&refused);
    assert!(step.effects.is_empty(), "{:?}", step.effects);
    let status = step.status.unwrap();
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(status.reason, Some(Reason::DirectiveRefused));
    assert_eq!(status.message.as_deref(), Some(message));
    assert_eq!(status.job_id, None);
    let submitted = condition(&status.conditions, ConditionType::Submitted).unwrap();
    assert_eq!(
        (
            submitted.status.as_str(),
            submitted.reason.as_str(),
            submitted.message.as_str()
        ),
        ("False", "DirectiveRefused", message)
    );
    assert_eq!(holds(&status.conditions, ConditionType::Failed), Some(true));
    // Looked at again later, it stays Failed: no retry is due.
    let later = run(&Case {
        policy: policy(3, &[]),
        ..case("later", status.clone(), Finding::Observed(None))
    });
    assert!(
        later
            .status
            .as_ref()
            .is_none_or(|s| s.phase == Some(Phase::Failed)),
        "{later:?}"
    );
    assert!(later.effects.is_empty(), "{:?}", later.effects);
}

#[test]
fn failures_are_sorted_by_what_they_mean_for_the_job() {
    use ErrorKind::*;
    let cases = [
        (Unreachable, "NotReached"),
        (HostKeyMismatch, "NotReached"),
        (AuthenticationFailed, "NotReached"),
        (ConnectionLost, "Interrupted, cluster"),
        (Timeout, "Interrupted, cluster"),
        (SubmitOutcomeUnknown, "Interrupted"),
        (Io, "Interrupted"),
        (Rejected, "Refused"),
        (InvalidInput, "Refused"),
        (CommandFailed, "Refused"),
    ];
    let sort = |err: &Error| match Failure::of(err) {
        Failure::NotReached(_) => "NotReached",
        Failure::Interrupted {
            problem: Some(_), ..
        } => "Interrupted, cluster",
        Failure::Interrupted { problem: None, .. } => "Interrupted",
        Failure::Refused(_) => "Refused",
        Failure::Deferred { .. } => "Deferred",
    };
    let refused = |refusal| Error::new(Rejected, "what happened").with_refusal(refusal);
    assert_eq!(sort(&refused(Refusal::SubmitLimit)), "Deferred");
    assert_eq!(sort(&refused(Refusal::QueueClosed)), "Deferred");
    assert_eq!(sort(&refused(Refusal::InvalidRequest)), "Refused");
    // A caller that overrode the flag has the last word.
    assert_eq!(sort(&refused(Refusal::SubmitLimit).permanent()), "Refused");
    for (kind, expected) in cases {
        let sorted = match Failure::of(&Error::new(kind, "what happened")) {
            Failure::NotReached(_) => "NotReached",
            Failure::Interrupted {
                problem: Some(_), ..
            } => "Interrupted, cluster",
            Failure::Interrupted { problem: None, .. } => "Interrupted",
            Failure::Refused(_) => "Refused",
            Failure::Deferred { .. } => "Deferred",
        };
        assert_eq!(sorted, expected, "{kind:?}");
    }
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
            Some(failed(Phase::Failed, Reason::NonZeroExitCode, 2, 60)),
            OnDelete,
            Cancel::Nothing,
            3,
        ),
        (Some(at(Phase::Cancelled)), OnDelete, Cancel::Nothing, 1),
        (Some(at(Phase::RetryPending)), OnDelete, Cancel::Nothing, 1),
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

/// A job its scheduler held for a dependency and ended when that dependency failed names
/// the BatchJob, not only the scheduler's id of its job.
#[test]
fn a_dependency_the_scheduler_reports_never_met_is_named_by_its_batch_job() {
    let after = [Dependency {
        name: "prep",
        condition: AfterCondition::Succeeded,
        seen: Seen::Present {
            phase: Phase::Failed,
            reason: Some(Reason::NonZeroExitCode),
            deleting: false,
        },
        attempt: Some(super::dependencies::Attempt {
            cluster: "hpc",
            job_id: "41",
            last: true,
        }),
    }];
    let rules = Rules {
        after: &after,
        native_dependencies: true,
        keeps_output: false,
        ..spec()
    };
    let mut ended = job(JobState::Failed);
    ended.cause = Some(FailureCause::DependencyFailed("41".into()));
    let written = step(&rules, &at(Phase::Queued), &observed(ended), now())
        .status
        .expect("the end is written");
    assert_eq!(written.phase, Some(Phase::Failed));
    assert_eq!(written.reason, Some(Reason::DependencyFailed));
    assert_eq!(
        written.message.as_deref(),
        Some(
            "BatchJob prep (job 41) can no longer meet its condition Succeeded; the scheduler \
             ended this job before it ran"
        )
    );
    let failed = condition(&written.conditions, ConditionType::Failed).map(|c| c.message.as_str());
    assert_eq!(
        failed,
        written.message.as_deref(),
        "the condition says it too"
    );
}
