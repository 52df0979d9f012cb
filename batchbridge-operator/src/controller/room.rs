//! Room on a job's cluster: counted from the BatchJobs in the cache (the operator's own
//! record, the same after a restart), decided by [`SubmitGate::admit`], and the waiting
//! jobs woken, in creation order, when room may have freed.

use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::Context;
use crate::cluster::Connection;
use crate::crd::{BatchJob, BatchJobStatus, Phase};
use crate::decision::{Capacity, Load, takes_room, waits_for_room};

/// How long after room may have freed the waiting jobs are woken: time for the watch to
/// bring the write that freed it, so that they count from a cache that shows it.
const SETTLE: Duration = Duration::from_secs(1);

/// Whether `job` (its status `status`) may begin an attempt on `connection`'s cluster now.
/// Only a job with a fixed cluster that is about to begin one is counted; any other is
/// [`Capacity::Free`] (nothing of it asks for room).
pub(super) async fn capacity(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    status: &BatchJobStatus,
) -> Capacity {
    let Some(cluster) = job.spec.fixed_cluster() else {
        return Capacity::Free;
    };
    if !limited(connection) {
        // Nothing to count: a cluster without a limit costs its jobs no scan of the cache.
        return Capacity::Free;
    }
    let now = SystemTime::now();
    let edited = status.observed_generation.is_some()
        && status.observed_generation != job.metadata.generation;
    if !(waits_for_room(status, job.spec.suspend == Some(true), now) || edited) {
        return Capacity::Free;
    }
    // Counted from a partial cache after a restart, the jobs already active would not be.
    if ctx.jobs.wait_until_ready().await.is_err() {
        return Capacity::Free;
    }
    let namespace = job.namespace().unwrap_or_default();
    let (active, ahead, behind) = count(&ctx.jobs, &namespace, cluster, Some(job), now);
    let load = Load {
        cluster,
        max_queued: connection.spec.max_queued,
        active,
        ahead,
        behind,
    };
    let uid = job.uid().unwrap_or_default();
    connection.gate().admit(&uid, &load, now)
}

/// Whether room on `connection`'s cluster is limited: by spec.maxQueued, or by the
/// scheduler's limit as far as it is known.
pub(super) fn limited(connection: &Connection) -> bool {
    connection.spec.max_queued.is_some() || connection.gate().knows_limit()
}

/// How many jobs of BatchCluster `cluster` in `namespace` take room, and how many wait to
/// begin an attempt created before `job` and after it (all of them ahead without `job`).
fn count(
    jobs: &Store<BatchJob>,
    namespace: &str,
    cluster: &str,
    job: Option<&BatchJob>,
    now: SystemTime,
) -> (u32, u32, u32) {
    let order = job.map(order_of);
    let (mut active, mut ahead, mut behind) = (0, 0, 0);
    for other in jobs.state() {
        if other.namespace().as_deref() != Some(namespace)
            || job.is_some_and(|job| job.uid() == other.uid())
        {
            continue;
        }
        let status = other.status.clone().unwrap_or_default();
        if cluster_of(&other, &status) != Some(cluster) {
            continue;
        }
        if takes_room(&status) {
            active += 1;
        } else if waits_for_room(&status, other.spec.suspend == Some(true), now) {
            match &order {
                Some(order) if order_of(&other) > *order => behind += 1,
                _ => ahead += 1,
            }
        }
    }
    (active, ahead, behind)
}

/// Where a job stands in its cluster's line: by creation, then name.
fn order_of(job: &BatchJob) -> (Option<Time>, String) {
    (job.metadata.creation_timestamp.clone(), job.name_any())
}

/// What came of job `uid`'s submit, told to the cluster's gate: `limit` is the scheduler's
/// message when it refused for its submit limit.
pub(super) fn record_submit(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    taken: bool,
    limit: Option<&str>,
) {
    let uid = job.uid().unwrap_or_default();
    match (taken, limit) {
        (true, _) => connection.gate().taken(&uid),
        (false, Some(message)) => {
            let namespace = job.namespace().unwrap_or_default();
            let cluster = job.spec.fixed_cluster().unwrap_or_default();
            let now = SystemTime::now();
            let (active, _, _) = count(&ctx.jobs, &namespace, cluster, Some(job), now);
            connection.gate().refused(&uid, message, active, now);
        }
        (false, None) => connection.gate().ended(&uid),
    }
}

/// Wakes, after [`SETTLE`], the jobs waiting for room on `connection`'s cluster, BatchCluster
/// `cluster` of `namespace`, that may fit now, if its room is [`limited`]: as many as spec.maxQueued leaves room for, at least the
/// first one (the scheduler's limit lets one probe at a time), in creation order.
pub(super) fn wake_waiting(
    ctx: &Context,
    connection: &Connection,
    namespace: String,
    cluster: String,
) {
    if !limited(connection) {
        return;
    }
    let max_queued = connection.spec.max_queued;
    let (jobs, wake) = (ctx.jobs.clone(), ctx.wake.clone());
    tokio::spawn(async move {
        tokio::time::sleep(SETTLE).await;
        let now = SystemTime::now();
        let (active, _, _) = count(&jobs, &namespace, &cluster, None, now);
        let room = max_queued.map_or(1, |max| max.saturating_sub(active).max(1));
        let mut waiting: Vec<_> = jobs
            .state()
            .into_iter()
            .filter(|job| {
                let status = job.status.clone().unwrap_or_default();
                job.namespace().as_deref() == Some(namespace.as_str())
                    && job.spec.fixed_cluster() == Some(cluster.as_str())
                    && waits_for_room(&status, job.spec.suspend == Some(true), now)
            })
            .collect();
        waiting.sort_by_cached_key(|job| order_of(job));
        for job in waiting.iter().take(room as usize) {
            // A closed channel means the controllers have stopped: nobody to wake.
            let _ = wake.send(ObjectRef::from(&**job));
        }
    });
}

/// The BatchCluster the job's current attempt uses: its clusterRef, or the one placement
/// chose for it; `None` for a placed job waiting to be placed.
pub(super) fn cluster_of<'a>(job: &'a BatchJob, status: &'a BatchJobStatus) -> Option<&'a str> {
    match job.spec.fixed_cluster() {
        Some(cluster) => Some(cluster),
        None if status.phase.unwrap_or(Phase::Pending) == Phase::Pending => None,
        None => status.cluster.as_deref(),
    }
}
