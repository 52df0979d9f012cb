//! The BatchJob reconciler: thin glue that reads the facts, asks [`decide`], and applies
//! the decision (status through server-side apply, then submit or output collection, or
//! the deletion of a job whose ttlSecondsAfterFinished passed), inside a finalizer that
//! cancels an active job and removes the job's files from the cluster before its resource
//! goes away.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use batchbridge_core::{ErrorKind, JobId, JobKey};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;

use super::actions::ActionKind;
use super::{Context, ReconcileError, apply_status, event_type, publish};
use crate::cluster::{Connection, connection_problem};
use crate::crd::{BatchJob, BatchJobStatus, Phase};
use crate::decision::{
    Action, Cancel, ClusterProblem, Facts, Removal, Watch, attempt_key, decide, removal,
    removal_abandoned,
};
use crate::output;
use crate::reason::{ConditionType, Reason};
use crate::status::{condition, holds, set_condition, time};

/// The finalizer that makes deletion wait for the job's cancellation and the removal of its
/// files (bounded by [`REMOVAL_DEADLINE`](crate::decision::REMOVAL_DEADLINE)). Its name predates the file removal; renaming it
/// would strand the finalizer on every existing BatchJob.
pub const FINALIZER: &str = "batchbridge.dev/cancel-on-delete";

/// Reconciles one BatchJob.
pub async fn reconcile(job: Arc<BatchJob>, ctx: Arc<Context>) -> Result<Requeue, ReconcileError> {
    let namespace = job.namespace().unwrap_or_default();
    let api = Api::<BatchJob>::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, job, |event| async {
        match event {
            Finalizer::Apply(job) => apply(job, &ctx).await,
            Finalizer::Cleanup(job) => remove(&job, &ctx).await,
        }
    })
    .await
    .map_err(|err| ReconcileError::Finalizer(Box::new(err)))
}

async fn apply(job: Arc<BatchJob>, ctx: &Arc<Context>) -> Result<Requeue, ReconcileError> {
    if ctx.actions.is_running(&job) {
        // The action writes what came of it and wakes the job when it is over.
        return Ok(Requeue::await_change());
    }
    let namespace = job.namespace().unwrap_or_default();
    let mut status = job.status.clone().unwrap_or_default();
    if ctx.actions.cache_lags(&job) {
        // An action wrote the status, and the watch has not brought that write yet (the
        // action's wake-up, or another request for this job, came first). Deciding from
        // the cache would act again on a status already overtaken: submit the same key a
        // second time, fetch an output once more. Read the job itself.
        let api = Api::<BatchJob>::namespaced(ctx.client.clone(), &namespace);
        if let Some(fresh) = api
            .get_opt(&job.name_any())
            .await
            .map_err(ReconcileError::Kube)?
        {
            status = fresh.status.unwrap_or_default();
        }
    }
    let connection = ctx
        .clusters
        .get(&namespace, &job.spec.cluster_ref.name)
        .await;
    let policy = &job.spec.output_policy;
    // A job seen finishing is decided again at once with the status just written (to
    // forget it and collect its output); deciding from the cache instead would read it
    // from before that write, and write the phase and its Event again.
    let mut passes = 0;
    loop {
        passes += 1;
        let observation = match (&connection, &status.job_id) {
            (Ok(connection), Some(id)) => connection.poller.observation(&JobId::from(id.as_str())),
            _ => None,
        };
        let decision = decide(&Facts {
            generation: job.metadata.generation.unwrap_or_default(),
            status: &status,
            retry_policy: job.spec.retry_policy.as_ref(),
            keeps_output: policy.tail_bytes > 0 || policy.config_map || policy.log_pod,
            ttl_after_finished: job
                .spec
                .ttl_seconds_after_finished
                .map(|seconds| Duration::from_secs(seconds.into())),
            cluster: connection.as_ref().map(|_| ()),
            observation: observation.as_ref(),
            now: SystemTime::now(),
        });
        if let Ok(connection) = &connection {
            match &decision.watch {
                Watch::Follow(id) => connection.poller.follow(id.clone(), ObjectRef::from(&*job)),
                Watch::Forget(id) => connection.poller.forget(id),
                Watch::Nothing => {}
            }
        }
        if let Some(next) = decision.status {
            write_status(ctx, &job, &status, &next).await?;
            status = next;
        }
        if decision.delete {
            expire(ctx, &job).await?;
            return Ok(Requeue::await_change());
        }
        if let (Some(action), Ok(connection)) = (decision.action, &connection) {
            start(ctx, job, Arc::clone(connection), action, status);
            return Ok(Requeue::await_change());
        }
        match decision.requeue_after {
            Some(Duration::ZERO) if passes < 2 => {}
            Some(after) => return Ok(Requeue::requeue(after)),
            None => return Ok(Requeue::await_change()),
        }
    }
}

/// Hands `action` over to [`Actions`](super::actions::Actions), to run beside the
/// reconciles; `current` is the status written before it.
fn start(
    ctx: &Arc<Context>,
    job: Arc<BatchJob>,
    connection: Arc<Connection>,
    action: Action,
    current: BatchJobStatus,
) {
    let kind = match action {
        Action::Submit { .. } => ActionKind::Submit,
        Action::CollectOutput { .. } => ActionKind::CollectOutput,
    };
    let acting = Arc::clone(ctx);
    let subject = Arc::clone(&job);
    ctx.actions.start(&job, kind, async move {
        let ctx = acting;
        let done = match action {
            Action::Submit { attempt } => {
                submit(&ctx, &subject, &connection, attempt, current).await
            }
            Action::CollectOutput { id } => {
                collect(&ctx, &subject, &connection, &id, current).await
            }
        };
        let error = done.err()?;
        ctx.metrics.reconcile_failed("BatchJob", error.reason());
        tracing::warn!(job = %ObjectRef::from(&*subject), action = kind.label(), %error, "action failed");
        Some(retry_after(&error))
    });
}

async fn submit(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    attempt: u32,
    current: BatchJobStatus,
) -> Result<(), ReconcileError> {
    let submitted = match job.job_spec(attempt) {
        Ok(spec) => {
            let submitted = connection.submit(&spec).await;
            ctx.metrics.submitted(&connection.labels, submitted.is_ok());
            submitted
        }
        Err(err) => Err(err),
    };
    let now = SystemTime::now();
    let mut next = current.clone();
    match submitted {
        Ok(id) => {
            next.job_id = Some(id.to_string());
            next.queue = job
                .spec
                .queue
                .clone()
                .or_else(|| connection.default_queue().map(str::to_owned));
            next.user = connection.user().map(str::to_owned);
            next.submit_time = Some(time(now));
            next.reason = Some(Reason::Submitted);
            next.message = Some(format!("attempt {attempt} submitted as job {id}"));
            set_condition(
                &mut next.conditions,
                ConditionType::Submitted,
                true,
                Reason::Submitted,
                &format!("job {id}"),
                now,
            );
            write_action_status(ctx, job, &current, &next).await?;
            connection.poller.follow(id, ObjectRef::from(job));
            Ok(())
        }
        Err(err) if err.is_temporary() || connection_problem(&err).is_some() => {
            if let Some(problem) = connection_problem(&err) {
                set_condition(
                    &mut next.conditions,
                    ConditionType::ClusterReady,
                    false,
                    problem.reason,
                    &problem.message,
                    now,
                );
                write_action_status(ctx, job, &current, &next).await?;
            }
            // The status still says Submitted without an id: the next pass submits the same
            // key again, and the backend returns the job if this attempt reached it.
            Err(ReconcileError::Backend(err))
        }
        Err(err) => {
            next.phase = Some(Phase::Failed);
            next.reason = Some(Reason::SubmitRejected);
            next.message = Some(err.to_string());
            next.finish_time = Some(time(now));
            set_condition(
                &mut next.conditions,
                ConditionType::Submitted,
                false,
                Reason::SubmitRejected,
                &err.to_string(),
                now,
            );
            set_condition(
                &mut next.conditions,
                ConditionType::Finished,
                true,
                Reason::SubmitRejected,
                &err.to_string(),
                now,
            );
            write_action_status(ctx, job, &current, &next).await
        }
    }
}

async fn collect(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    id: &JobId,
    current: BatchJobStatus,
) -> Result<(), ReconcileError> {
    let collected = output::collect(ctx, job, connection, id).await;
    let mut next = current.clone();
    let now = SystemTime::now();
    match collected {
        Ok(collected) => {
            next.output_tail = collected.tail;
            let (holds, reason, message) = if collected.refused.is_empty() {
                (true, Reason::Collected, collected.summary)
            } else {
                let message = format!(
                    "{}; not written, as the name belongs to another object: {} (rename the \
                     BatchJob or that object)",
                    collected.summary,
                    collected.refused.join(", ")
                );
                (false, Reason::OutputNameTaken, message)
            };
            set_condition(
                &mut next.conditions,
                ConditionType::OutputCollected,
                holds,
                reason,
                &message,
                now,
            );
        }
        Err(ReconcileError::Backend(err))
            if !err.is_temporary() && connection_problem(&err).is_none() =>
        {
            set_condition(
                &mut next.conditions,
                ConditionType::OutputCollected,
                false,
                Reason::OutputUnavailable,
                &err.to_string(),
                now,
            );
        }
        Err(err) => return Err(err),
    }
    write_action_status(ctx, job, &current, &next).await
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

async fn remove(job: &BatchJob, ctx: &Context) -> Result<Requeue, ReconcileError> {
    if ctx.actions.is_running(job) {
        // Cancelling now could miss a job its submit is about to create, and removing the
        // files could pull them from under an output collection; the action wakes the job
        // when it is over.
        return Ok(Requeue::await_change());
    }
    // What the last action wrote no longer matters: the job is going away.
    ctx.actions.wrote(job, None);
    let removal = removal(job.status.as_ref(), job.spec.cleanup);
    if removal.is_nothing() {
        return Ok(Requeue::await_change());
    }
    let Err(error) = remove_from_cluster(job, ctx, &removal).await else {
        return Ok(Requeue::await_change());
    };
    let deleted_at = job
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or_else(SystemTime::now, |at| SystemTime::from(at.0));
    if !removal_abandoned(deleted_at, SystemTime::now(), ctx.removal_deadline) {
        // Tried again after retry_after(error), until the deadline.
        return Err(error);
    }
    // Holding the resource back longer would only make `kubectl delete` hang on a cluster
    // that may never answer again.
    let left = match (
        &removal.cancel,
        job.status.as_ref().and_then(|s| s.job_id.as_ref()),
    ) {
        (Cancel::Nothing, _) => String::new(),
        (_, Some(id)) => format!("job {id} may still run; "),
        (_, None) => "a job may have been submitted and may still run; ".to_owned(),
    };
    publish(
        ctx,
        job,
        EventType::Warning,
        "RemovalAbandoned",
        &format!(
            "gave up {} s after the deletion: {left}its files may remain in the cluster's work \
             directory (jobs/{}*); last error: {error}",
            ctx.removal_deadline.as_secs(),
            job.uid().unwrap_or_default()
        ),
        "Reconcile",
    )
    .await;
    Ok(Requeue::await_change())
}

/// Cancels what may run, then removes every attempt's files: each step is idempotent, so a
/// pass that failed half-way is simply repeated.
async fn remove_from_cluster(
    job: &BatchJob,
    ctx: &Context,
    removal: &Removal,
) -> Result<(), ReconcileError> {
    let namespace = job.namespace().unwrap_or_default();
    let connection = match ctx
        .clusters
        .get(&namespace, &job.spec.cluster_ref.name)
        .await
    {
        Ok(connection) => connection,
        Err(problem) if problem.reason == Reason::BatchClusterNotFound => {
            // With its cluster gone there is nothing to cancel or clean up through;
            // holding the resource back would only keep it forever.
            publish(
                ctx,
                job,
                EventType::Warning,
                "CancelSkipped",
                &format!("{}; nothing was cancelled or removed", problem.message),
                "Reconcile",
            )
            .await;
            return Ok(());
        }
        Err(problem) => return Err(ReconcileError::Cluster(problem)),
    };
    let uid = job.uid().unwrap_or_default();
    let key = |attempt| JobKey::new(attempt_key(&uid, attempt)).map_err(ReconcileError::Backend);
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
    let mut removed = 0;
    for attempt in 1..=removal.remove_files {
        match connection.backend.cleanup(&key(attempt)?).await {
            Ok(()) => removed += 1,
            Err(err) if err.kind() == ErrorKind::Unsupported => {
                tracing::debug!(job = %ObjectRef::from(job), %err, "job files kept");
                break;
            }
            // JobActive: a job cancelled a moment ago has not ended yet; tried again.
            Err(err) => return Err(ReconcileError::Backend(err)),
        }
    }
    if removed > 0 {
        tracing::info!(job = %ObjectRef::from(job), attempts = removed, "job files removed on deletion");
        publish(
            ctx,
            job,
            EventType::Normal,
            "FilesRemoved",
            &format!(
                "the files of {removed} attempt(s) were removed from the cluster because the \
                 BatchJob was deleted"
            ),
            "Reconcile",
        )
        .await;
    }
    Ok(())
}

/// Cancels job `id` of a BatchJob being deleted (Ok if it ended already) and says so.
async fn cancel(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    id: &JobId,
) -> Result<(), ReconcileError> {
    let cancelled = connection.backend.cancel(id).await;
    ctx.metrics.cancelled(
        &connection.labels,
        cancelled.is_ok() || matches!(&cancelled, Err(err) if err.kind() == ErrorKind::NotFound),
    );
    match cancelled {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::NotFound => {}
        Err(err) => return Err(ReconcileError::Backend(err)),
    }
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
/// returns the job's resourceVersion after the write.
async fn write_status(
    ctx: &Context,
    job: &BatchJob,
    current: &BatchJobStatus,
    next: &BatchJobStatus,
) -> Result<Option<String>, ReconcileError> {
    let version = apply_status(ctx, job, next).await?;
    for (type_, reason, note) in transitions(current, next) {
        publish(ctx, job, type_, &reason, &note, "Reconcile").await;
    }
    Ok(version)
}

/// [`write_status`] for an action: the version written is remembered, so that the job's
/// next reconcile does not decide from a cache older than it.
async fn write_action_status(
    ctx: &Context,
    job: &BatchJob,
    current: &BatchJobStatus,
    next: &BatchJobStatus,
) -> Result<(), ReconcileError> {
    let version = write_status(ctx, job, current, next).await?;
    ctx.actions.wrote(job, version);
    Ok(())
}

/// The Events a status change is worth: a new phase, a new job id, a cluster problem or its
/// end. Not news, since every new job would get one: a cluster found ready the first time,
/// and a submitted job found queued (its `Submitted` Event says so already).
fn transitions(
    current: &BatchJobStatus,
    next: &BatchJobStatus,
) -> Vec<(EventType, String, String)> {
    let mut events = Vec::new();
    let ready = |s: &BatchJobStatus| {
        condition(&s.conditions, ConditionType::ClusterReady)
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let (was, is) = (ready(current), ready(next));
    if was != is
        && let Some(c) = condition(&next.conditions, ConditionType::ClusterReady)
        && let Some(holds) = holds(&next.conditions, ConditionType::ClusterReady)
        && (was.is_some() || !holds)
    {
        events.push((event_type(holds), c.reason.clone(), c.message.clone()));
    }
    if current.job_id != next.job_id
        && let Some(id) = &next.job_id
    {
        events.push((
            EventType::Normal,
            "Submitted".into(),
            format!("attempt {} is job {id}", next.attempts),
        ));
    }
    if current.phase != next.phase
        && let Some(phase) = next.phase
        && phase != Phase::Submitted
        && (phase, current.phase) != (Phase::Queued, Some(Phase::Submitted))
    {
        let type_ = if matches!(phase, Phase::Failed | Phase::Unknown) {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = next
            .message
            .clone()
            .or_else(|| next.reason.map(|reason| reason.to_string()))
            .unwrap_or_else(|| format!("{phase:?}"));
        events.push((type_, format!("{phase:?}"), note));
    }
    events
}

/// How long to wait before a failed reconcile is tried again.
pub fn retry_after(error: &ReconcileError) -> Duration {
    match error {
        ReconcileError::Cluster(ClusterProblem { .. }) => crate::decision::CLUSTER_RECHECK,
        _ => Duration::from_secs(5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_follow_what_changed() {
        let now = SystemTime::UNIX_EPOCH;
        let submitted = BatchJobStatus {
            phase: Some(Phase::Submitted),
            attempts: 1,
            ..BatchJobStatus::default()
        };
        let with_id = BatchJobStatus {
            job_id: Some("7".into()),
            ..submitted.clone()
        };
        let queued = BatchJobStatus {
            phase: Some(Phase::Queued),
            ..with_id.clone()
        };
        let running = BatchJobStatus {
            phase: Some(Phase::Running),
            ..with_id.clone()
        };
        let failed = BatchJobStatus {
            phase: Some(Phase::Failed),
            message: Some("exited with code 3".into()),
            ..running.clone()
        };
        let mut unreachable = running.clone();
        set_condition(
            &mut unreachable.conditions,
            ConditionType::ClusterReady,
            false,
            Reason::Unreachable,
            "connection refused",
            now,
        );
        let reasons = |a: &BatchJobStatus, b: &BatchJobStatus| -> Vec<(String, String)> {
            transitions(a, b)
                .into_iter()
                .map(|(_, reason, note)| (reason, note))
                .collect()
        };
        assert_eq!(reasons(&BatchJobStatus::default(), &submitted), []);
        assert_eq!(
            reasons(&submitted, &with_id),
            [("Submitted".into(), "attempt 1 is job 7".into())]
        );
        assert_eq!(reasons(&with_id, &queued), []);
        assert_eq!(
            reasons(&queued, &running),
            [("Running".into(), "Running".into())]
        );
        assert_eq!(
            reasons(&running, &queued),
            [("Queued".into(), "Queued".into())]
        );
        assert_eq!(
            reasons(&running, &failed),
            [("Failed".into(), "exited with code 3".into())]
        );
        assert_eq!(
            reasons(&running, &unreachable),
            [("Unreachable".into(), "connection refused".into())]
        );
        let mut ready = running.clone();
        set_condition(
            &mut ready.conditions,
            ConditionType::ClusterReady,
            true,
            Reason::Ready,
            "the cluster answered",
            now,
        );
        assert_eq!(
            reasons(&unreachable, &ready),
            [("Ready".into(), "the cluster answered".into())]
        );
        let mut first_ready = submitted.clone();
        first_ready.conditions = ready.conditions.clone();
        assert_eq!(reasons(&BatchJobStatus::default(), &first_ready), []);
        let first_unreachable = BatchJobStatus {
            conditions: unreachable.conditions.clone(),
            ..BatchJobStatus::default()
        };
        assert_eq!(
            reasons(&BatchJobStatus::default(), &first_unreachable),
            [("Unreachable".into(), "connection refused".into())]
        );
        assert_eq!(reasons(&running, &running), []);
    }
}
