//! The BatchCluster reconciler: connects (or reconnects after a spec or Secret change),
//! probes the scheduler for its version, and writes Reachable (and Ready, the same), the
//! version, the probe time and the number of active jobs into status.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::runtime::controller::Action;

use batchbridge_core::shell::Certificate;

use super::{Context, ReconcileError, apply_status, credential, publish};
use crate::cluster::{Connection, connection_problem};
use crate::crd::BatchCluster;
use crate::decision::event_type;
use crate::reason::{ClusterProblem, ConditionType, Reason};
use crate::status::{condition, set_condition, time};
/// How often a reachable cluster is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(60);
/// How often an unreachable one is.
pub const UNREACHABLE_PROBE_INTERVAL: Duration = Duration::from_secs(15);
/// How recent a poll's failure to reach the cluster must be to stand for a probe: the
/// poll that wakes this reconciler has just made the connect attempts (with their backoff)
/// that a probe would make again.
pub const POLLED_FAILURE_AGE: Duration = Duration::from_secs(2);

/// Reconciles one BatchCluster.
pub async fn reconcile(
    cluster: Arc<BatchCluster>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let now = SystemTime::now();
    let mut status = cluster.status.clone().unwrap_or_default();
    let refreshed = ctx.clusters.refresh(&cluster).await;
    let certificate = refreshed
        .as_ref()
        .ok()
        .and_then(|connection| connection.certificate.clone());
    let probed = match refreshed {
        Ok(connection) => {
            status.active_jobs =
                Some(u32::try_from(connection.poller.followed()).unwrap_or(u32::MAX));
            let polled = connection
                .poller
                .failure_within(POLLED_FAILURE_AGE)
                .and_then(|err| connection_problem(&err));
            match polled {
                Some(problem) => Err(problem),
                None => probe(&connection).await,
            }
        }
        Err(problem) => Err(problem),
    };
    let reachable = |status: &crate::crd::BatchClusterStatus| {
        condition(&status.conditions, ConditionType::Reachable)
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let before = reachable(&status);
    let (holds, reason, message, requeue) = match &probed {
        Ok(version) => {
            status.scheduler_version = Some(version.trim().to_owned());
            let message = format!("{} answered", cluster.spec.scheduler);
            (true, Reason::Answered, message, PROBE_INTERVAL)
        }
        Err(problem) => (
            false,
            problem.reason,
            problem.message.clone(),
            UNREACHABLE_PROBE_INTERVAL,
        ),
    };
    ctx.clusters.record_reachable(&cluster, holds);
    // Ready is the summary condition generic tools read (kstatus, Argo CD, Flux): a
    // cluster is ready for jobs exactly when it is reachable.
    for type_ in [ConditionType::Reachable, ConditionType::Ready] {
        set_condition(&mut status.conditions, type_, holds, reason, &message, now);
    }
    let credential_before = credential_valid(&status);
    let recheck = credential::record(
        &mut status,
        certificate.as_ref(),
        ctx.credential_expiry_warning,
        now,
    );
    ctx.clusters.record_credential_expiry(
        &cluster,
        certificate.as_ref().and_then(Certificate::valid_before),
    );
    for c in &mut status.conditions {
        c.observed_generation = cluster.metadata.generation;
    }
    status.last_probe_time = Some(time(now));
    status.observed_generation = cluster.metadata.generation;
    apply_status(&ctx, cluster.as_ref(), &status).await?;
    if before != reachable(&status) {
        publish(
            &ctx,
            cluster.as_ref(),
            event_type(holds),
            reason.as_str(),
            &message,
            "Probe",
        )
        .await;
    }
    if let Some(after) = credential_valid(&status)
        && credential_before.as_ref() != Some(&after)
    {
        let (holds, reason, message) = after;
        publish(
            &ctx,
            cluster.as_ref(),
            event_type(holds),
            &reason,
            &message,
            "CheckCredential",
        )
        .await;
    }
    // A second past the moment the credential's condition changes by itself, so that it
    // has changed when the reconciler looks.
    let requeue = recheck.map_or(requeue, |left| requeue.min(left + Duration::from_secs(1)));
    Ok(Action::requeue(requeue))
}

/// The CredentialValid condition as an Event tells it: whether it holds, its reason and
/// message; the message alone changing (a renewed certificate) is an Event too.
fn credential_valid(status: &crate::crd::BatchClusterStatus) -> Option<(bool, String, String)> {
    condition(&status.conditions, ConditionType::CredentialValid)
        .map(|c| (c.status == "True", c.reason.clone(), c.message.clone()))
}

/// Asks the scheduler for its version, and records the answer as the jobs' view of the
/// cluster.
async fn probe(connection: &Connection) -> Result<String, ClusterProblem> {
    match connection.backend.version().await {
        Ok(version) => {
            connection.poller.record(Ok(()));
            Ok(version)
        }
        Err(err) => {
            let problem = connection_problem(&err).unwrap_or_else(|| ClusterProblem {
                reason: Reason::SchedulerNotAnswering,
                message: err.to_string(),
            });
            connection.poller.record(Err(err));
            Err(problem)
        }
    }
}
