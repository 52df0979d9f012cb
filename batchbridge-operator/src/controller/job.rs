//! The BatchJob reconciler: glue that turns what happened into a [`Finding`], asks
//! [`decision::step`] what it means, and performs the [`Effect`]s (the status written
//! through server-side apply first; a submit, an output collection or a placement handed
//! to [`Actions`](super::actions::Actions), whose result is stepped by [`step_done`] or
//! [`step_placed`]; the cancel of a job suspended by spec.suspend; the deletion of a job
//! whose ttlSecondsAfterFinished passed), inside a finalizer that cancels an active job and
//! removes the job's files from the cluster before its resource goes away. It decides
//! nothing itself.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use batchbridge_core::placement::{Answer, Candidate, Seen, Skipped};
use batchbridge_core::staging::StageOut;
use batchbridge_core::{Dependency, ErrorKind, JobId, JobKey, JobSpec, JobStatus, Withdrawal};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::ObjectRef;

use super::actions::ActionKind;
use super::dependencies::Dependencies;
use super::room::cluster_of;
use super::{Context, ReconcileError, apply_status, publish, room};
use crate::cluster::{Connection, connection_problem};
use crate::crd::{BatchJob, BatchJobStatus, attempt_key};
use crate::decision::{
    self, ACTION_RETRY, ActionEffect, CLUSTER_RECHECK, Cancel, Capacity, CollectOutcome, Done,
    Effect, Failure, Finding, Placed, Purpose, Removal, Rules, Step, SubmitOutcome, Target,
    removal, step_done, step_placed, takes_room, transitions,
};
use crate::output;
use crate::reason::{ClusterProblem, Reason};
use crate::staging;

/// The finalizer that makes deletion wait for the job's cancellation and the removal of its
/// files (bounded by [`REMOVAL_DEADLINE`](crate::decision::REMOVAL_DEADLINE)). Its name
/// predates the file removal; renaming it would strand the finalizer on every existing
/// BatchJob.
pub const FINALIZER: &str = "batchbridge.dev/cancel-on-delete";

/// Reconciles one BatchJob.
pub async fn reconcile(job: Arc<BatchJob>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let namespace = job.namespace().unwrap_or_default();
    let api = Api::<BatchJob>::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, job, |event| async {
        match event {
            Event::Apply(job) => apply(job, &ctx).await,
            Event::Cleanup(job) => remove(&job, &ctx).await,
        }
    })
    .await
    .map_err(|err| ReconcileError::Finalizer(Box::new(err)))
}

/// What of `job` the lifecycle depends on, its dependencies left out: only a reconcile,
/// which may start an attempt, looks them up ([`Dependencies::of`]).
fn rules_of(job: &BatchJob) -> Rules<'_> {
    let output = &job.spec.output_policy;
    Rules {
        generation: job.metadata.generation.unwrap_or_default(),
        spec_digest: job.spec_digest(),
        suspended: job.spec.suspend == Some(true),
        retry_policy: job.spec.retry_policy.as_ref(),
        keeps_output: output.tail_bytes > 0 || output.config_map || output.log_pod,
        log_pod: output.log_pod,
        ttl_after_finished: job
            .spec
            .ttl_seconds_after_finished
            .map(|seconds| Duration::from_secs(seconds.into())),
        cleanup: job.spec.cleanup,
        target: match (&job.spec.placement, job.spec.fixed_cluster()) {
            (Some(placement), _) => Target::Placed {
                policy: placement.policy.into(),
                move_after: placement.move_after.map(Duration::from),
                max_moves: placement.max_moves,
            },
            (None, cluster) => Target::Fixed(cluster.unwrap_or_default()),
        },
        after: &[],
        native_dependencies: false,
        cycle: None,
        capacity: Capacity::Free,
    }
}

async fn apply(job: Arc<BatchJob>, ctx: &Arc<Context>) -> Result<Action, ReconcileError> {
    if ctx.actions.is_running(&job) {
        // The action writes what came of it and wakes the job when it is over.
        return Ok(Action::await_change());
    }
    // An action wrote the status, and the watch may not have brought that write yet (the
    // action's wake-up, or another request for this job, came first). Stepping from the
    // cache would act again on a status already overtaken: submit the same key a second
    // time, fetch an output once more. The job as the write left it is kept for this.
    let job = ctx.actions.newer_than_cache(&job).unwrap_or(job);
    let namespace = job.namespace().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    // A name the CRD now refuses, in a job stored before it did, is never looked up.
    let invalid = job.spec.check_names().err().map(|message| ClusterProblem {
        reason: Reason::SpecInvalid,
        message,
    });
    let connection = match (&invalid, cluster_of(&job, &status)) {
        (None, Some(cluster)) => Some(ctx.clusters.get(&namespace, cluster).await),
        _ => None,
    };
    // A cluster whose polls or probes fail is not ready, for the jobs it runs as for new
    // ones; the poller wakes its jobs when that begins and ends.
    let problem = invalid.or_else(|| match &connection {
        Some(Ok(connection)) => connection
            .poller
            .failure()
            .and_then(|err| connection_problem(&err)),
        Some(Err(problem)) => Some(problem.clone()),
        None => None,
    });
    // A placed job waiting for placement has no cluster; nothing it is asked to do on one
    // comes before it is placed.
    let connection = match connection {
        Some(Ok(connection)) => Ok(connection),
        _ => Err(ClusterProblem {
            reason: Reason::NoClusterAvailable,
            message: "the job is not placed on a cluster yet".to_owned(),
        }),
    };
    let observation = match (&connection, &status.job_id) {
        (Ok(connection), Some(id)) => connection.poller.observation(&JobId::from(id.as_str())),
        _ => None,
    };
    let event = match &problem {
        Some(problem) => Finding::ClusterProblem(problem),
        None => Finding::Observed(observation.as_ref()),
    };
    let capacity = match (&connection, &problem) {
        (Ok(connection), None) => room::capacity(ctx, &job, connection, &status).await,
        _ => Capacity::Free,
    };
    let dependencies = Dependencies::of(&job, &ctx.jobs);
    let after = dependencies.after(&job);
    let rules = Rules {
        after: &after,
        native_dependencies: connection
            .as_ref()
            .is_ok_and(|connection| connection.backend.capabilities().dependencies),
        cycle: dependencies.cycle(),
        capacity,
        ..rules_of(&job)
    };
    let step = decision::step(&rules, &status, &event, SystemTime::now());
    let requeue = perform(ctx, &job, &connection, &status, step).await?;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Writes the status `step` decided and performs its effects; returns when to look at the
/// job again, if `step` says. A submit or collection is handed to
/// [`Actions`](super::actions::Actions), which wakes the job when it is over. An effect
/// whose cluster cannot be used is not performed: that cluster's problem is stepped and
/// performed instead, as the next reconcile would find it.
async fn perform(
    ctx: &Arc<Context>,
    job: &Arc<BatchJob>,
    connection: &Result<Arc<Connection>, ClusterProblem>,
    current: &BatchJobStatus,
    mut step: Step,
) -> Result<Option<Duration>, ReconcileError> {
    let mut current = Cow::Borrowed(current);
    // The job as the API server last answered a status write: whole, script included,
    // where the cache's copy is lean; a submit or placement reads it instead of the cache.
    let mut whole = None;
    loop {
        let left = cluster_of(job, &current).map(str::to_owned);
        let written = match step.status {
            Some(next) => {
                whole = Some(Arc::new(write_status(ctx, job, &current, &next).await?));
                next
            }
            None => current.into_owned(),
        };
        // A step that moved the job submits to the cluster it moved to, not the one it left.
        let submit_to = match cluster_of(job, &written) {
            Some(cluster) if Some(cluster) != left.as_deref() => {
                let namespace = job.namespace().unwrap_or_default();
                ctx.clusters.get(&namespace, cluster).await
            }
            _ => connection.clone(),
        };
        let mut unusable = None;
        for effect in step.effects {
            match effect {
                Effect::Expire => expire(ctx, job).await?,
                Effect::Place(purpose) => {
                    let acting = (Arc::clone(ctx), Arc::clone(job), written.clone());
                    let whole = whole.clone();
                    ctx.actions
                        .start(job, ActionKind::Place, None, move || async move {
                            let (ctx, job, current) = acting;
                            let Some(job) = whole_job(&ctx, &job, whole).await else {
                                return Some(ACTION_RETRY);
                            };
                            place(&ctx, &job, purpose, current).await
                        });
                }
                Effect::Cancel(id) => {
                    if let Some(connection) = usable(connection, &mut unusable) {
                        suspend(ctx, job, connection, &id).await;
                    }
                }
                Effect::Withdraw(id) => {
                    if let Some(connection) = usable(connection, &mut unusable) {
                        withdraw(ctx, job, connection, &id).await;
                    }
                }
                Effect::Follow(id) => {
                    if let Some(connection) = usable(connection, &mut unusable) {
                        connection.poller.follow(id, ObjectRef::from(&**job));
                    }
                }
                Effect::Forget(id) => {
                    if let Some(connection) = usable(connection, &mut unusable) {
                        connection.poller.forget(&id);
                    }
                }
                Effect::ShowOutput(id) => {
                    if let Some(connection) = usable(connection, &mut unusable) {
                        // The collection starts the pod anyway: a failure here costs only
                        // the live part of the output.
                        if let Err(err) = output::show(&ctx.output, job, connection, &id).await {
                            tracing::warn!(job = %job.name_any(), error = %err, "cannot start the log pod");
                        }
                    }
                }
                Effect::Submit { attempt, after } => {
                    if let Some(connection) = usable(&submit_to, &mut unusable) {
                        let acting = (Arc::clone(ctx), Arc::clone(job), Arc::clone(connection));
                        // Boxed: a job waiting at the gate holds this, not a whole status.
                        let current = Box::new(written.clone());
                        let whole = whole.clone();
                        let gate = Some(connection.submit_gate());
                        ctx.actions
                            .start(job, ActionKind::Submit, gate, move || async move {
                                let (ctx, job, connection) = acting;
                                let Some(job) = whole_job(&ctx, &job, whole).await else {
                                    return Some(ACTION_RETRY);
                                };
                                submit(&ctx, &job, &connection, (attempt, after), *current).await
                            });
                    }
                }
                Effect::Collect { id } => {
                    if let Some(connection) = usable(connection, &mut unusable) {
                        let acting = (Arc::clone(ctx), Arc::clone(job), Arc::clone(connection));
                        let current = Box::new(written.clone());
                        let gate = Some(connection.collect_gate());
                        ctx.actions.start(
                            job,
                            ActionKind::CollectOutput,
                            gate,
                            move || async move {
                                let (ctx, job, connection) = acting;
                                collect(&ctx, &job, &connection, &id, *current).await
                            },
                        );
                    }
                }
            }
        }
        let Some(problem) = unusable else {
            return Ok(step.requeue);
        };
        step = decision::step(
            &rules_of(job),
            &written,
            &Finding::ClusterProblem(&problem),
            SystemTime::now(),
        );
        current = Cow::Owned(written);
    }
}

/// `job` whole, for an action that reads its script: as the step's status write returned
/// it (`written`), as it is if it is whole already, or else read from the API server. None
/// if the read failed (the action is tried again after [`ACTION_RETRY`]) or found another
/// job of the same name.
async fn whole_job(
    ctx: &Context,
    job: &Arc<BatchJob>,
    written: Option<Arc<BatchJob>>,
) -> Option<Arc<BatchJob>> {
    if let Some(written) = written {
        return Some(written);
    }
    if !job.is_lean() {
        return Some(Arc::clone(job));
    }
    let api = Api::<BatchJob>::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    match api.get(&job.name_any()).await {
        // A job re-created under the same name is another job: its own reconcile acts.
        Ok(read) => (read.uid() == job.uid()).then(|| Arc::new(read)),
        Err(err) => {
            ctx.metrics.reconcile_failed("BatchJob", "KubernetesApi");
            tracing::warn!(job = %ObjectRef::from(&**job), error = %err, "cannot read the job's script");
            None
        }
    }
}

/// The connection `on`, if its cluster can be used; else its problem is kept in `unusable`
/// (the first one met), to be stepped once the other effects are performed.
fn usable<'c>(
    on: &'c Result<Arc<Connection>, ClusterProblem>,
    unusable: &mut Option<ClusterProblem>,
) -> Option<&'c Arc<Connection>> {
    match on {
        Ok(connection) => Some(connection),
        Err(problem) => {
            unusable.get_or_insert_with(|| problem.clone());
            None
        }
    }
}

/// What an action's step decided, performed by `perform_effect`; the action's answer to
/// [`Actions::start`](super::actions::Actions::start): how long to wait before the job is
/// looked at again, if it should wait.
async fn finish_action<E>(
    ctx: &Arc<Context>,
    job: &Arc<BatchJob>,
    current: &BatchJobStatus,
    step: Step<E>,
    kind: ActionKind,
    perform_effect: impl FnMut(E),
) -> Option<Duration> {
    let written = match &step.status {
        Some(next) => {
            let writes = match kind {
                ActionKind::Submit | ActionKind::Place => &ctx.submit_writes,
                ActionKind::CollectOutput => &ctx.end_writes,
            };
            // The semaphore is never closed, so a permit always comes.
            let _writing = writes.acquire().await.ok();
            write_status(ctx, job, current, next).await.map(Some)
        }
        None => Ok(None),
    };
    match written {
        Ok(written) => {
            if written.is_some() {
                // The job's next reconcile must not step from a cache older than this write.
                ctx.actions.wrote(job, written);
            }
            step.effects.into_iter().for_each(perform_effect);
            step.requeue
        }
        Err(error) => {
            ctx.metrics.reconcile_failed("BatchJob", error.reason());
            tracing::warn!(job = %ObjectRef::from(&**job), action = kind.label(), %error, "action failed");
            Some(retry_after(&error))
        }
    }
}

/// Steps what came of an action on `connection`'s cluster and performs it.
async fn finish_on_cluster(
    ctx: &Arc<Context>,
    job: &Arc<BatchJob>,
    connection: &Connection,
    current: &BatchJobStatus,
    done: &Done<'_>,
    kind: ActionKind,
) -> Option<Duration> {
    // A dependency's job id the scheduler names as never met is the BatchJob's.
    let dependencies = Dependencies::of(job, &ctx.jobs);
    let after = dependencies.after(job);
    let rules = Rules {
        after: &after,
        ..rules_of(job)
    };
    let step = step_done(&rules, current, done, SystemTime::now());
    finish_action(ctx, job, current, step, kind, |effect| match effect {
        ActionEffect::Follow(id) => connection.poller.follow(id, ObjectRef::from(&**job)),
        ActionEffect::Forget(id) => connection.poller.forget(&id),
    })
    .await
}

/// Submits `attempt` of `job`, its scheduler holding it for the dependencies `after`.
async fn submit(
    ctx: &Arc<Context>,
    job: &Arc<BatchJob>,
    connection: &Arc<Connection>,
    (attempt, after): (u32, Vec<Dependency>),
    current: BatchJobStatus,
) -> Option<Duration> {
    // The script's directives apply before every attempt's submit, the BatchJob's own fields
    // winning over them; a refused one stops the job before anything reaches the cluster.
    let directed = job
        .job_spec(attempt)
        .map(|mut spec| {
            spec.after = after;
            spec
        })
        .and_then(|spec| connection.backend.apply_directives(spec));
    let submitted = match directed {
        Ok((mut spec, report)) => match report.check() {
            Ok(()) => {
                if let Err(refused) = stage(ctx, job, &mut spec).await {
                    let done = Done::Submit {
                        attempt,
                        outcome: SubmitOutcome::InputRefused(refused),
                    };
                    return finish_on_cluster(
                        ctx,
                        job,
                        connection,
                        &current,
                        &done,
                        ActionKind::Submit,
                    )
                    .await;
                }
                match connection.submit(spec, job.uid().unwrap_or_default()).await {
                    Ok(submitted) => {
                        ctx.metrics.submitted(&connection.labels, submitted.is_ok());
                        submitted
                    }
                    // Not sent: held as the scheduler's refusal would have held it.
                    Err(message) => {
                        let done = Done::Submit {
                            attempt,
                            outcome: SubmitOutcome::Failed(Failure::Deferred {
                                reason: Reason::SubmitLimit,
                                message,
                            }),
                        };
                        return finish_on_cluster(
                            ctx,
                            job,
                            connection,
                            &current,
                            &done,
                            ActionKind::Submit,
                        )
                        .await;
                    }
                }
            }
            Err(refused) => {
                let done = Done::Submit {
                    attempt,
                    outcome: SubmitOutcome::DirectiveRefused(refused.message().to_owned()),
                };
                return finish_on_cluster(
                    ctx,
                    job,
                    connection,
                    &current,
                    &done,
                    ActionKind::Submit,
                )
                .await;
            }
        },
        Err(err) => Err(err),
    };
    let outcome = match submitted {
        Ok(id) => SubmitOutcome::Accepted {
            id,
            queue: job
                .spec
                .queue
                .clone()
                .or_else(|| connection.default_queue().map(str::to_owned)),
            user: connection.user().map(str::to_owned),
        },
        Err(err) => {
            let failure = Failure::of(&err);
            if matches!(failure, Failure::NotReached(_)) {
                // Every job of the cluster waits for it now, not only this one.
                connection.poller.record(Err(err));
            }
            SubmitOutcome::Failed(failure)
        }
    };
    let limit = match &outcome {
        SubmitOutcome::Failed(Failure::Deferred {
            reason: Reason::SubmitLimit,
            message,
        }) => Some(message.as_str()),
        _ => None,
    };
    let taken = matches!(outcome, SubmitOutcome::Accepted { .. });
    room::record_submit(ctx, job, connection, taken, limit);
    let done = Done::Submit { attempt, outcome };
    let requeue =
        finish_on_cluster(ctx, job, connection, &current, &done, ActionKind::Submit).await;
    if let Some(cluster) = job.spec.fixed_cluster() {
        // Taken, the next job may probe the scheduler's limit; refused, its place in line is
        // kept by the first waiting job.
        let namespace = job.namespace().unwrap_or_default();
        room::wake_waiting(ctx, connection, namespace, cluster.to_owned());
    }
    requeue
}

/// Wraps `script` with the job's spec.inputs and spec.outputs (read and signed now, so
/// every attempt gets fresh URLs), or says which entry cannot be had.
///
/// The ConfigMap outputs go into the spec's stage-out list too: the backend then records the
/// job's working directory, where the operator fetches them from once the job ended.
async fn stage(ctx: &Context, job: &BatchJob, spec: &mut JobSpec) -> Result<(), String> {
    if job.spec.inputs.is_empty() && job.spec.outputs.is_empty() {
        return Ok(());
    }
    let staging = staging::prepare(&ctx.client, &ctx.object_stores, job)
        .await
        .map_err(|refused| refused.0)?;
    spec.script = staging::wrap_script(&spec.script, &staging.inputs, &staging.outputs)
        .map_err(|err| err.message().to_owned())?;
    for output in job
        .spec
        .outputs
        .iter()
        .filter(|output| output.config_map.is_some())
    {
        spec.stage_out
            .push(StageOut::new(output.path.clone(), "config-map"));
    }
    // One Event names every input: the recorder folds Events of one reason into a
    // series that keeps the first note, so an Event per input would show only the first.
    if !job.spec.inputs.is_empty() {
        let inputs: Vec<String> = job
            .spec
            .inputs
            .iter()
            .map(|input| format!("{} from {}", input.path, staging::origin(input)))
            .collect();
        let note = format!(
            "{}, fetched by the job before its script: {}",
            staging.inputs_summary(),
            inputs.join("; ")
        );
        publish(
            ctx,
            job,
            EventType::Normal,
            Reason::InputPrepared.as_str(),
            &note,
            "StageIn",
        )
        .await;
    }
    Ok(())
}

/// Whether the ended job's outputs arrived in their stores (None without spec.outputs),
/// with an Event naming each: the script's exit code says which outputs its `when` applies to, and an
/// object counts only if it was written after this attempt was submitted (a minute's
/// leeway for the store's clock).
async fn check_outputs(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    id: &JobId,
    observation: Option<&JobStatus>,
    current: &BatchJobStatus,
) -> Option<Result<String, String>> {
    if job.spec.outputs.is_empty() {
        return None;
    }
    let exit_code = observation.map_or(current.exit_code, |seen| seen.exit_code);
    let since = current
        .submit_time
        .as_ref()
        .map_or(SystemTime::UNIX_EPOCH, |at| SystemTime::from(at.0))
        .checked_sub(Duration::from_secs(60))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let succeeded = exit_code == Some(0);
    let mut checked =
        staging::check_outputs(&ctx.client, &ctx.object_stores, job, succeeded, since).await;
    checked.extend(
        staging::to_config_maps(&ctx.output, job, &*connection.backend, id, succeeded)
            .await
            .into_iter()
            .map(|(output, result)| (output, result.map(|()| staging::Arrived::default()))),
    );
    // One Event per outcome naming each output, for the same reason as the inputs'.
    let mut sent = Vec::new();
    let mut missing = Vec::new();
    let mut under_prefixes = staging::Arrived::default();
    for (output, result) in &checked {
        let target = staging::destination(output);
        match result {
            Ok(arrived) if arrived.objects > 0 => {
                under_prefixes.objects += arrived.objects;
                under_prefixes.bytes += arrived.bytes;
                sent.push(format!(
                    "{} to {target} ({} objects, {} bytes written by this attempt)",
                    output.path, arrived.objects, arrived.bytes
                ));
            }
            Ok(_) => sent.push(format!("{} to {target}", output.path)),
            Err(problem) => missing.push(format!("{} to {target}: {problem}", output.path)),
        }
    }
    for (outputs, type_, reason, said) in [
        (&sent, EventType::Normal, Reason::OutputsStaged, "sent"),
        (
            &missing,
            EventType::Warning,
            Reason::OutputsNotStaged,
            "not sent",
        ),
    ] {
        if !outputs.is_empty() {
            let note = format!("{said}: {}", outputs.join("; "));
            publish(ctx, job, type_, reason.as_str(), &note, "StageOut").await;
        }
    }
    Some(if missing.is_empty() {
        let objects = if under_prefixes.objects > 0 {
            format!(
                "; {} objects, {} bytes, under the prefixes of glob and directory outputs",
                under_prefixes.objects, under_prefixes.bytes
            )
        } else {
            String::new()
        };
        Ok(format!(
            "{} of {} outputs sent (the others' when did not apply){objects}",
            checked.len(),
            job.spec.outputs.len()
        ))
    } else {
        Err(missing.join("; "))
    })
}

async fn collect(
    ctx: &Arc<Context>,
    job: &Arc<BatchJob>,
    connection: &Arc<Connection>,
    id: &JobId,
    current: BatchJobStatus,
) -> Option<Duration> {
    // The poller still follows the job: its report of the end is written with the output.
    let observation = connection.poller.observation(id);
    let outcome = match output::collect(&ctx.output, job, connection, id).await {
        Ok(collected) => CollectOutcome::Collected {
            staged: check_outputs(ctx, job, connection, id, observation.as_ref(), &current).await,
            tail: collected.tail,
            task_outputs: collected.task_outputs,
            task_outputs_omitted: collected.task_outputs_omitted,
            summary: collected.summary,
            refused: collected.refused,
            unwritten: collected.unwritten,
        },
        Err(err) => CollectOutcome::Failed(Failure::of(&err)),
    };
    let done = Done::Collect {
        outcome,
        observation: observation.as_ref(),
    };
    finish_on_cluster(
        ctx,
        job,
        connection,
        &current,
        &done,
        ActionKind::CollectOutput,
    )
    .await
}

/// Asks the job's candidates (spec.placement) through the operator's [`Placer`] and feeds
/// what they answered back to [`step_placed`]. A candidate whose BatchCluster or Secret
/// cannot be used, or whose polls fail, is skipped as unreachable without being asked.
///
/// [`Placer`]: batchbridge_core::placement::Placer
async fn place(
    ctx: &Arc<Context>,
    job: &Arc<BatchJob>,
    purpose: Purpose,
    current: BatchJobStatus,
) -> Option<Duration> {
    let Some(rules) = &job.spec.placement else {
        return None;
    };
    // The semaphore is never closed, so a permit always comes.
    let _slot = ctx.placing.acquire().await.ok();
    let namespace = job.namespace().unwrap_or_default();
    let names = ctx.clusters.candidates(&namespace, rules);
    let mut reachable = Vec::new();
    let mut unusable = Vec::new();
    for name in &names {
        match ctx.clusters.get(&namespace, name).await {
            Ok(connection) => {
                reachable.push(Candidate::new(name, Arc::clone(&connection.backend)));
            }
            Err(problem) => unusable.push(Seen::new(
                name,
                Answer::Skipped(Skipped::Unreachable(format!(
                    "{}: {}",
                    problem.reason, problem.message
                ))),
            )),
        }
    }
    let attempt = match purpose {
        Purpose::Attempt { attempt, .. } => attempt,
        Purpose::Move => current.attempts + 1,
    };
    let spec = match job.job_spec(attempt) {
        Ok(spec) => spec,
        Err(err) => {
            tracing::warn!(job = %ObjectRef::from(&**job), %err, "cannot place: the spec makes no job");
            return Some(CLUSTER_RECHECK);
        }
    };
    let placement = ctx
        .placer
        .place(rules.policy.into(), &reachable, &spec)
        .await;
    // Every candidate in its own place in the list, asked or not.
    let seen: Vec<Seen> = names
        .iter()
        .filter_map(|name| {
            placement
                .seen
                .iter()
                .chain(&unusable)
                .find(|seen| &seen.candidate == name)
                .cloned()
        })
        .collect();
    let placed = Placed {
        purpose,
        chosen: placement.chosen.as_deref(),
        seen: &seen,
        at: placement.at,
    };
    let step = step_placed(&rules_of(job), &current, &placed, SystemTime::now());
    // A placement's answer has no effect to perform: the reconcile its end wakes submits.
    finish_action(
        ctx,
        job,
        &current,
        step,
        ActionKind::Place,
        |never| match never {},
    )
    .await
}

/// Withdraws job `id`, waiting in its queue, for the move status.moving records: the
/// backend cancels it only if it has not started ([`withdraw`](batchbridge_core::BatchBackend::withdraw)), and the polls
/// then say whether it ended without starting. A backend that cannot withdraw is cancelled
/// instead, which can kill a job that starts in the moment before (it then ends Cancelled,
/// the move recorded StartedFirst). A failure is logged: the next reconcile withdraws again
/// while the move is under way.
async fn withdraw(ctx: &Context, job: &BatchJob, connection: &Connection, id: &JobId) {
    let backend = &connection.backend;
    let withdrawn = match backend.withdraw(id).await {
        Err(err) if err.kind() == ErrorKind::Unsupported => {
            tracing::warn!(job = %ObjectRef::from(job), %id, %err, "cancelling to move instead");
            backend.cancel(id).await.map(|()| Withdrawal::Withdrawn)
        }
        withdrawal => withdrawal,
    };
    let done = match withdrawn {
        Ok(withdrawal) => {
            tracing::info!(job = %ObjectRef::from(job), %id, ?withdrawal, "withdrawn to move");
            true
        }
        Err(err) if err.kind() == ErrorKind::NotFound => true,
        Err(err) => {
            tracing::warn!(job = %ObjectRef::from(job), %id, %err, "cannot withdraw to move");
            false
        }
    };
    ctx.metrics.cancelled(&connection.labels, done);
}

/// Cancels job `id` because its BatchJob's spec.suspend is true, started or not; the polls
/// then say when it ended. A failure is logged: the next reconcile cancels again while the
/// job is suspending.
async fn suspend(ctx: &Context, job: &BatchJob, connection: &Connection, id: &JobId) {
    match cancel_on_cluster(ctx, connection, id).await {
        Ok(()) => {
            tracing::info!(job = %ObjectRef::from(job), %id, "cancelled: spec.suspend is true")
        }
        Err(err) => {
            tracing::warn!(job = %ObjectRef::from(job), %id, %err, "cannot cancel the suspended job")
        }
    }
}

/// Cancels job `id` on `connection`'s cluster (Ok if it ended already) and counts the try.
async fn cancel_on_cluster(
    ctx: &Context,
    connection: &Connection,
    id: &JobId,
) -> Result<(), batchbridge_core::Error> {
    let cancelled = match connection.backend.cancel(id).await {
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
        cancelled => cancelled,
    };
    ctx.metrics.cancelled(&connection.labels, cancelled.is_ok());
    cancelled
}

/// Deletes a BatchJob whose ttlSecondsAfterFinished has passed; its finalizer then removes
/// its files. The UID precondition keeps a job created since under the same name safe.
async fn expire(ctx: &Context, job: &BatchJob) -> Result<(), ReconcileError> {
    let api = Api::<BatchJob>::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: job.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&job.name_any(), &params).await {
        Ok(_) => {}
        // Gone already, or replaced by a new job of the same name: nothing to expire.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return Ok(()),
        Err(err) => return Err(ReconcileError::Kube(err)),
    }
    let ttl = job.spec.ttl_seconds_after_finished.unwrap_or_default();
    tracing::info!(job = %ObjectRef::from(job), ttl, "deleted after its ttl");
    publish(
        ctx,
        job,
        EventType::Normal,
        "Expired",
        &format!("deleted {ttl} s after it finished (ttlSecondsAfterFinished)"),
        "Delete",
    )
    .await;
    Ok(())
}

async fn remove(job: &BatchJob, ctx: &Context) -> Result<Action, ReconcileError> {
    if ctx.actions.is_running(job) {
        // Cancelling now could miss a job its submit is about to create, and removing the
        // files could pull them from under an output collection; the action wakes the job
        // when it is over.
        return Ok(Action::await_change());
    }
    // What the last action wrote no longer matters: the job is going away.
    ctx.actions.wrote(job, None);
    let status = job.status.clone().unwrap_or_default();
    let removal = removal(Some(&status), job.spec.cleanup);
    if removal.is_nothing() {
        return Ok(Action::await_change());
    }
    let Err(error) = remove_from_cluster(job, ctx, &removal).await else {
        return Ok(Action::await_change());
    };
    let deleted_at = job
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or_else(SystemTime::now, |at| SystemTime::from(at.0));
    let uid = job.uid().unwrap_or_default();
    let Some(note) = removal.given_up(
        &uid,
        deleted_at,
        SystemTime::now(),
        ctx.removal_deadline,
        &error.to_string(),
    ) else {
        // Tried again after retry_after(error), until the deadline.
        return Err(error);
    };
    publish(
        ctx,
        job,
        EventType::Warning,
        "RemovalAbandoned",
        &note,
        "Reconcile",
    )
    .await;
    Ok(Action::await_change())
}

/// Cancels what may run, then removes every attempt's files from every cluster an attempt
/// used: each step is idempotent, so a pass that failed half-way is simply repeated.
async fn remove_from_cluster(
    job: &BatchJob,
    ctx: &Context,
    removal: &Removal,
) -> Result<(), ReconcileError> {
    let namespace = job.namespace().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let key = |attempt| JobKey::new(attempt_key(&uid, attempt)).map_err(ReconcileError::Backend);
    // A placed job not yet placed runs nowhere.
    if let Some(cluster) = cluster_of(job, &status)
        && removal.cancel != Cancel::Nothing
    {
        match ctx.clusters.get(&namespace, cluster).await {
            Ok(connection) => {
                let id = match &removal.cancel {
                    Cancel::Job(id) => Some(id.clone()),
                    Cancel::ByKey { attempt } => connection
                        .backend
                        .find(&key(*attempt)?)
                        .await
                        .map_err(ReconcileError::Backend)?,
                    Cancel::Nothing => None,
                };
                if let Some(id) = id {
                    cancel(ctx, job, &connection, &id).await?;
                }
            }
            Err(problem) if problem.reason == Reason::BatchClusterNotFound => {
                // With its cluster gone there is nothing to cancel through; holding the
                // resource back would only keep it forever.
                publish(
                    ctx,
                    job,
                    EventType::Warning,
                    "CancelSkipped",
                    &format!("{}; nothing was cancelled there", problem.message),
                    "Reconcile",
                )
                .await;
            }
            Err(problem) => return Err(ReconcileError::Cluster(problem)),
        }
    }
    let attempts = removal.remove_files;
    if attempts == 0 {
        return Ok(());
    }
    // Every cluster an attempt used: retries and re-runs after a clusterRef change, the
    // clusters a move left (statuses written before clustersUsed name those in moves),
    // and the current one. A cluster since deleted has nothing to remove them through.
    let used: BTreeSet<&str> = status
        .clusters_used
        .iter()
        .map(String::as_str)
        .chain(status.moves.iter().map(|m| m.from.as_str()))
        .chain(cluster_of(job, &status))
        .collect();
    let mut clusters = 0_u32;
    for cluster in used {
        match ctx.clusters.get(&namespace, cluster).await {
            Ok(connection) => {
                clusters += u32::from(remove_files(job, &connection, attempts, &key).await?);
            }
            Err(problem) if problem.reason == Reason::BatchClusterNotFound => {}
            Err(problem) => return Err(ReconcileError::Cluster(problem)),
        }
    }
    if clusters > 0 {
        tracing::info!(job = %ObjectRef::from(job), attempts, clusters, "job files removed on deletion");
        publish(
            ctx,
            job,
            EventType::Normal,
            "FilesRemoved",
            &format!(
                "the files of {attempts} attempt(s) were removed from {clusters} cluster(s) \
                 because the BatchJob was deleted"
            ),
            "Reconcile",
        )
        .await;
    }
    Ok(())
}

/// Removes the files of attempts 1 to `attempts` (their keys by `key`) from the cluster of
/// `connection`; false when the backend keeps job files (it cannot clean up).
async fn remove_files(
    job: &BatchJob,
    connection: &Connection,
    attempts: u32,
    key: &impl Fn(u32) -> Result<JobKey, ReconcileError>,
) -> Result<bool, ReconcileError> {
    for attempt in 1..=attempts {
        match connection.backend.cleanup(&key(attempt)?).await {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::Unsupported => {
                tracing::debug!(job = %ObjectRef::from(job), %err, "job files kept");
                return Ok(false);
            }
            // JobActive: a job cancelled a moment ago has not ended yet; tried again.
            Err(err) => return Err(ReconcileError::Backend(err)),
        }
    }
    Ok(true)
}

/// Cancels job `id` of a BatchJob being deleted (Ok if it ended already) and says so.
async fn cancel(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    id: &JobId,
) -> Result<(), ReconcileError> {
    cancel_on_cluster(ctx, connection, id)
        .await
        .map_err(ReconcileError::Backend)?;
    connection.poller.forget(id);
    tracing::info!(job = %ObjectRef::from(job), %id, "cancelled on deletion");
    // A pass repeated while the cancelled job ends says it again; Events count repeats.
    publish(
        ctx,
        job,
        EventType::Normal,
        "Cancelled",
        &format!("job {id} cancelled because the BatchJob was deleted"),
        "Reconcile",
    )
    .await;
    Ok(())
}

/// Writes `next` with server-side apply, and an Event for each change a user cares about;
/// returns the job as the write left it.
async fn write_status(
    ctx: &Context,
    job: &BatchJob,
    current: &BatchJobStatus,
    next: &BatchJobStatus,
) -> Result<BatchJob, ReconcileError> {
    let written = apply_status(ctx, job, next).await?;
    ctx.metrics.observe_attempt_end(job, current, next);
    if takes_room(current)
        && !takes_room(next)
        && let Some(cluster) = cluster_of(job, current)
    {
        let namespace = job.namespace().unwrap_or_default();
        if let Ok(connection) = ctx.clusters.get(&namespace, cluster).await {
            room::wake_waiting(ctx, &connection, namespace, cluster.to_owned());
        }
    }
    for event in transitions(current, next) {
        publish(
            ctx,
            job,
            event.type_,
            &event.reason,
            &event.note,
            &event.action,
        )
        .await;
    }
    Ok(written)
}

/// How long to wait before a failed reconcile is tried again.
pub fn retry_after(error: &ReconcileError) -> Duration {
    match error {
        ReconcileError::Cluster(_) => CLUSTER_RECHECK,
        _ => ACTION_RETRY,
    }
}
