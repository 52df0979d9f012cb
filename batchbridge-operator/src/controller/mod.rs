//! The two controllers and what they share: BatchClusters are connected and probed,
//! BatchJobs reconciled, and the clusters' pollers wake the jobs whose scheduler status
//! changed.

pub mod cluster;
pub mod job;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::api::{Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::{Action as Requeue, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::mpsc;

use crate::cluster::{BackendFactory, Clusters};
use crate::crd::{BatchCluster, BatchJob};
use crate::decision::ClusterProblem;

/// The field manager of everything the operator writes with server-side apply.
pub const FIELD_MANAGER: &str = "batchbridge-operator";

/// Why a reconcile failed; the controller tries again later.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    /// The backend failed in a way that may pass.
    #[error("{0}")]
    Backend(#[source] batchbridge_core::Error),
    /// The job's cluster cannot be used now.
    #[error("cluster {}: {}", .0.reason, .0.message)]
    Cluster(ClusterProblem),
    /// Adding or removing the finalizer failed, or the cleanup it guards did.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

/// What every reconcile shares.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The connections to the batch clusters.
    pub clusters: Clusters,
    /// Publishes Events.
    pub recorder: Recorder,
    /// The operator's own image, which log pods run.
    pub image: String,
}

/// The operator: both controllers, configured and ready to run.
///
/// ```no_run
/// # async fn run() -> Result<(), kube::Error> {
/// use batchbridge_operator::Operator;
///
/// let client = kube::Client::try_default().await?;
/// Operator::new(client)
///     .namespace("research")
///     .run(async { tokio::signal::ctrl_c().await.unwrap_or_default() })
///     .await;
/// # Ok(())
/// # }
/// ```
pub struct Operator {
    client: Client,
    namespace: Option<String>,
    custom: HashMap<String, BackendFactory>,
    local_root: PathBuf,
    image: String,
    instance: String,
}

impl Operator {
    /// An operator watching every namespace, with only the built-in backends.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            namespace: None,
            custom: HashMap::new(),
            local_root: std::env::temp_dir().join("batchbridge-operator"),
            image: format!("ghcr.io/batchbridge/operator:{}", env!("CARGO_PKG_VERSION")),
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| "batchbridge-operator".into()),
        }
    }

    /// Watches only `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Registers a custom backend: BatchClusters whose `scheduler` is `name` use the
    /// backend `factory` builds.
    pub fn backend(mut self, name: impl Into<String>, factory: BackendFactory) -> Self {
        self.custom.insert(name.into(), factory);
        self
    }

    /// Where `local` clusters keep their jobs.
    pub fn local_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.local_root = dir.into();
        self
    }

    /// The image log pods run (the operator's own).
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }

    /// Runs both controllers until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let shutdown = shutdown.boxed().shared();
        let (jobs, clusters) = match &self.namespace {
            Some(namespace) => (
                Api::<BatchJob>::namespaced(self.client.clone(), namespace),
                Api::<BatchCluster>::namespaced(self.client.clone(), namespace),
            ),
            None => (Api::all(self.client.clone()), Api::all(self.client.clone())),
        };
        let cluster_controller = Controller::new(clusters, watcher::Config::default())
            .graceful_shutdown_on(shutdown.clone());
        let store = cluster_controller.store();
        let (wake, woken) = mpsc::unbounded_channel();
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(self.instance),
        };
        let ctx = Arc::new(Context {
            clusters: Clusters::new(
                self.client.clone(),
                store.clone(),
                wake,
                self.custom,
                self.local_root,
            ),
            recorder: Recorder::new(self.client.clone(), reporter),
            client: self.client,
            image: self.image,
        });
        let woken = futures::stream::unfold(woken, |mut woken| async move {
            woken.recv().await.map(|job| (job, woken))
        });
        let clusters = cluster_controller
            .run(cluster::reconcile, requeue_cluster, Arc::clone(&ctx))
            .for_each(|result| async move {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "BatchCluster reconcile");
                }
            });
        let job_controller = Controller::new(jobs, watcher::Config::default())
            .with_config(ControllerConfig::default().concurrency(32))
            .reconcile_on(woken)
            .graceful_shutdown_on(shutdown);
        let jobs = async move {
            // Jobs need their clusters: start once the BatchClusters are listed.
            if store.wait_until_ready().await.is_err() {
                return;
            }
            job_controller
                .run(job::reconcile, requeue_job, ctx)
                .for_each(|result| async move {
                    if let Err(err) = result {
                        tracing::debug!(error = %err, "BatchJob reconcile");
                    }
                })
                .await;
        };
        tokio::join!(clusters, jobs);
    }
}

/// Writes `status` as `object`'s status with server-side apply, under [`FIELD_MANAGER`].
async fn apply_status<K>(
    ctx: &Context,
    object: &K,
    status: &impl Serialize,
) -> Result<(), ReconcileError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api = Api::<K>::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(ReconcileError::Kube)?;
    Ok(())
}

/// Publishes an Event about `object`; an Event the API server refuses is logged, never a
/// reason to fail the reconcile.
async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    note: &str,
    action: &str,
) {
    let event = Event {
        type_,
        reason: reason.chars().take(128).collect(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &object.object_ref(&())).await {
        tracing::warn!(object = %object.name_any(), error = %err, "cannot publish an Event");
    }
}

/// Normal for a condition that holds, Warning for one that does not.
fn event_type(holds: bool) -> EventType {
    if holds {
        EventType::Normal
    } else {
        EventType::Warning
    }
}

fn requeue_job(job: Arc<BatchJob>, error: &ReconcileError, _: Arc<Context>) -> Requeue {
    tracing::warn!(job = %kube::runtime::reflector::ObjectRef::from(job.as_ref()), %error, "reconcile failed");
    Requeue::requeue(job::retry_after(error))
}

fn requeue_cluster(cluster: Arc<BatchCluster>, error: &ReconcileError, _: Arc<Context>) -> Requeue {
    tracing::warn!(cluster = %kube::runtime::reflector::ObjectRef::from(cluster.as_ref()), %error, "reconcile failed");
    Requeue::requeue(Duration::from_secs(15))
}
