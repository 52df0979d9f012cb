//! The BatchCluster reconciler: connects (or reconnects after a spec or Secret change),
//! probes the scheduler for its version, and writes Reachable, the version, the probe time
//! and the number of active jobs into status.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::runtime::controller::Action as Requeue;

use super::{Context, ReconcileError, apply_status, event_type, publish};
use crate::cluster::connection_problem;
use crate::crd::BatchCluster;
use crate::decision::ClusterProblem;
use crate::reason::{ConditionType, Reason};
use crate::status::{condition, holds, set_condition, time};
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
        Err(problem) => Err(problem),
    };
    let reachable = |status: &crate::crd::BatchClusterStatus| {
        condition(&status.conditions, ConditionType::Reachable)
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let before = reachable(&status);
    let requeue = match &probed {
        Ok(version) => {
            status.scheduler_version = Some(version.trim().to_owned());
            set_condition(
                &mut status.conditions,
                ConditionType::Reachable,
                true,
                Reason::Answered,
                &format!("{} answered", cluster.spec.scheduler),
                now,
            );
            PROBE_INTERVAL
        }
        Err(problem) => {
            set_condition(
                &mut status.conditions,
                ConditionType::Reachable,
                false,
                problem.reason,
                &problem.message,
                now,
            );
            UNREACHABLE_PROBE_INTERVAL
        }
    };
    status.last_probe_time = Some(time(now));
    status.observed_generation = cluster.metadata.generation;
    apply_status(&ctx, cluster.as_ref(), &status).await?;
    if before != reachable(&status)
        && let Some(reachable) = condition(&status.conditions, ConditionType::Reachable)
    {
        let holds = holds(&status.conditions, ConditionType::Reachable) == Some(true);
        publish(
            &ctx,
            cluster.as_ref(),
            event_type(holds),
            &reachable.reason,
            &reachable.message,
            "Probe",
        )
        .await;
    }
    Ok(Requeue::requeue(requeue))
}
