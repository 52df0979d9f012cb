//! The BatchCluster reconciler: connects (or reconnects after a spec or Secret change),
//! probes the scheduler for its version, and writes Reachable, the version, the probe time
//! and the number of active jobs into status.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, FIELD_MANAGER, ReconcileError};
use crate::cluster::connection_problem;
use crate::cluster::poller::Health;
use crate::crd::{BatchCluster, BatchClusterStatus};
use crate::decision::ClusterProblem;
use crate::status::{condition, set_condition, time};

/// Condition type: whether the last probe logged in and got an answer from the scheduler.
pub const REACHABLE: &str = "Reachable";
/// How often a reachable cluster is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(60);
/// How often an unreachable one is.
pub const UNREACHABLE_PROBE_INTERVAL: Duration = Duration::from_secs(15);

/// Reconciles one BatchCluster.
pub async fn reconcile(
    cluster: Arc<BatchCluster>,
    ctx: Arc<Context>,
) -> Result<Requeue, ReconcileError> {
    let now = SystemTime::now();
    let mut status = cluster.status.clone().unwrap_or_default();
    let probed = match ctx.clusters.refresh(&cluster).await {
        Ok(connection) => {
            let version = connection.backend.version().await;
            status.active_jobs =
                Some(u32::try_from(connection.poller.followed()).unwrap_or(u32::MAX));
            match version {
                Ok(version) => {
                    connection.poller.set_health(Health::Answered(now));
                    Ok(version)
                }
                Err(err) => {
                    let problem = connection_problem(&err).unwrap_or_else(|| ClusterProblem {
                        reason: "SchedulerNotAnswering".into(),
                        message: err.to_string(),
                    });
                    connection.poller.set_health(Health::Failed(Arc::new(err)));
                    Err(problem)
                }
            }
        }
        Err(problem) => Err(problem),
    };
    let before =
        condition(&status.conditions, REACHABLE).map(|c| (c.status.clone(), c.reason.clone()));
    let requeue = match &probed {
        Ok(version) => {
            status.scheduler_version = Some(version.trim().to_owned());
            set_condition(
                &mut status.conditions,
                REACHABLE,
                true,
                "Answered",
                &format!("{} answered", cluster.spec.scheduler),
                now,
            );
            PROBE_INTERVAL
        }
        Err(problem) => {
            set_condition(
                &mut status.conditions,
                REACHABLE,
                false,
                &problem.reason,
                &problem.message,
                now,
            );
            UNREACHABLE_PROBE_INTERVAL
        }
    };
    status.last_probe_time = Some(time(now));
    status.observed_generation = cluster.metadata.generation;
    write_status(&ctx, &cluster, &status).await?;
    let after =
        condition(&status.conditions, REACHABLE).map(|c| (c.status.clone(), c.reason.clone()));
    if before != after
        && let Some(reachable) = condition(&status.conditions, REACHABLE)
    {
        let type_ = if reachable.status == "True" {
            EventType::Normal
        } else {
            EventType::Warning
        };
        let event = Event {
            type_,
            reason: reachable.reason.clone(),
            note: Some(reachable.message.chars().take(1000).collect()),
            action: "Probe".into(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
            tracing::warn!(cluster = %cluster.name_any(), error = %err, "cannot publish an Event");
        }
    }
    Ok(Requeue::requeue(requeue))
}

async fn write_status(
    ctx: &Context,
    cluster: &BatchCluster,
    status: &BatchClusterStatus,
) -> Result<(), ReconcileError> {
    let api = Api::<BatchCluster>::namespaced(
        ctx.client.clone(),
        &cluster.namespace().unwrap_or_default(),
    );
    let patch = json!({
        "apiVersion": BatchCluster::api_version(&()),
        "kind": BatchCluster::kind(&()),
        "status": status,
    });
    api.patch_status(
        &cluster.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(ReconcileError::Kube)?;
    Ok(())
}
