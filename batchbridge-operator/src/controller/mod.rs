//! The two controllers and what they share: BatchClusters are connected and probed,
//! BatchJobs reconciled, and the clusters' pollers wake the jobs whose scheduler status
//! changed.

pub mod actions;
pub mod cluster;
pub mod credential;
pub mod dependencies;
pub mod intake;
pub mod job;
pub mod recorder;
mod room;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::placement::Placer;
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use kube::api::{Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};

use self::recorder::Recorder;
use crate::cluster::targets::SshTargets;
use crate::cluster::{BackendFactory, Clusters};
use crate::crd::{BatchCluster, BatchJob};
use crate::endpoints::{Endpoints, Readiness};
use crate::leader::LeaderElection;
use crate::metrics::Metrics;
use crate::reason::ClusterProblem;
use crate::staging::AllowedStores;
use crate::{FIELD_MANAGER, output};
use actions::Actions;
use dependencies::Dependents;

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

impl ReconcileError {
    /// What failed, as the `reason` label of `batchbridge_reconcile_errors_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Kube(_) => "KubernetesApi",
            Self::Backend(_) => "Backend",
            Self::Cluster(_) => "Cluster",
            Self::Finalizer(_) => "Finalizer",
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The connections to the batch clusters.
    pub clusters: Clusters,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Writes the jobs' output objects.
    pub output: output::Writer,
    /// The operator's metrics.
    pub metrics: Arc<Metrics>,
    /// The BatchJobs' actions in progress on their clusters.
    pub actions: Actions,
    /// How long a deleted BatchJob's cancellation and file removal are tried.
    pub removal_deadline: Duration,
    /// How long before a BatchCluster's SSH certificate expires its CredentialValid
    /// condition turns False (CredentialExpiring).
    pub credential_expiry_warning: Duration,
    /// The object store endpoints BatchJobs' inputs and outputs may name.
    pub object_stores: AllowedStores,
    /// Places the jobs with spec.placement; one for the operator, so that placing many
    /// jobs of one shape asks each candidate once per interval.
    pub placer: Placer,
    /// One permit per placement in progress, [`PLACEMENTS_AT_ONCE`] in all.
    pub(crate) placing: Semaphore,
    /// One permit per status write (and its Events) of a submit or a placement in
    /// progress, [`ACTION_WRITES_AT_ONCE`] in all.
    pub(crate) submit_writes: Semaphore,
    /// One permit per status write (and its Events) of an output collection, which writes
    /// a job's end, in progress, [`ACTION_WRITES_AT_ONCE`] in all. A window of its own:
    /// permits are taken first come, first served, and in a burst of new jobs a job's end
    /// waited for its write behind every submit answer already waiting
    /// (docs/PERFORMANCE.md).
    pub(crate) end_writes: Semaphore,
    /// Every BatchJob, as the job controller's cache has it: where a job's spec.after
    /// dependencies are looked up and what room on a cluster is counted from.
    pub(crate) jobs: Store<BatchJob>,
    /// Wakes a BatchJob (the intake's woken lane).
    pub(crate) wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
}

/// How many placements run at once. A placement is mostly a status write and an Event
/// (the candidates' answers are cached per shape), so a burst of new placed jobs would
/// otherwise put a thousand writes in flight at once, ahead of the writes of jobs that
/// ended meanwhile, and hold a thousand placements' memory.
pub const PLACEMENTS_AT_ONCE: usize = 5;

/// How many actions of one kind write their status (and its Events) at once: submits and
/// placements, and apart from them output collections (jobs' ends). A batch of submits
/// answers up to `spec.submit.batchSize` jobs at the same moment, each a status write and
/// an Event: they go out together, but not hundreds at once, which would meet the API
/// server's own limit on requests in flight (`--max-mutating-requests-inflight`, 200 by
/// default; both kinds together stay under a third of it) and be refused with 429.
pub const ACTION_WRITES_AT_ONCE: usize = 32;

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
    local_root: Option<PathBuf>,
    targets: SshTargets,
    image: String,
    instance: String,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    endpoints: Option<TcpListener>,
    election: Option<LeaderElection>,
    removal_deadline: Duration,
    credential_expiry_warning: Duration,
    object_stores: AllowedStores,
}

/// A future every part of the operator can wait on.
type Stop = Shared<BoxFuture<'static, ()>>;

impl Operator {
    /// An operator watching every namespace, with only the built-in backends.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            namespace: None,
            custom: HashMap::new(),
            local_root: None,
            targets: SshTargets::any(),
            image: format!("ghcr.io/batchbridge/operator:{}", env!("CARGO_PKG_VERSION")),
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| "batchbridge-operator".into()),
            metrics: Arc::new(Metrics::new()),
            readiness: Arc::default(),
            endpoints: None,
            election: None,
            removal_deadline: crate::decision::REMOVAL_DEADLINE,
            credential_expiry_warning: credential::DEFAULT_EXPIRY_WARNING,
            object_stores: AllowedStores::default(),
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

    /// Enables the `local` scheduler, off by default, with its jobs kept under `dir`.
    ///
    /// A `local` job is a process of this operator: it runs with the operator's user, can
    /// read what the operator can read (its service account token and the SSH connections'
    /// files included) and reach what it can reach. Its environment is scrubbed
    /// ([`batchbridge_core::LocalBackend::clean_environment`]), which hides variables, not
    /// files. Enable it only on a development cluster or where everyone who may create a
    /// BatchCluster is trusted with the operator's rights (SECURITY.md). While it is off, a
    /// `local` BatchCluster is `Reachable=False` with reason `SchedulerDisabled` and its jobs
    /// wait, `ClusterReady=False`, without running.
    pub fn local_scheduler(mut self, dir: impl Into<PathBuf>) -> Self {
        self.local_root = Some(dir.into());
        self
    }

    /// Lets BatchClusters connect only to the login nodes `targets` allows; any, by
    /// default. A BatchCluster naming another is `Reachable=False` with reason
    /// `HostNotAllowed`, and no connection is tried (SECURITY.md).
    ///
    /// ```
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use batchbridge_operator::Operator;
    ///
    /// let client = kube::Client::try_default().await?;
    /// let operator = Operator::new(client)
    ///     .ssh_targets("*.hpc.example.org:22, 10.20.0.0/16:22".parse()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn ssh_targets(mut self, targets: SshTargets) -> Self {
        self.targets = targets;
        self
    }

    /// Lets BatchJobs' inputs and outputs name only the object store endpoints `stores`
    /// allows; none, by default. A BatchJob naming another fails unsubmitted with reason
    /// `InputRefused`, and the operator sends it no request (SECURITY.md).
    ///
    /// ```
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use batchbridge_operator::Operator;
    ///
    /// let client = kube::Client::try_default().await?;
    /// let operator = Operator::new(client)
    ///     .object_stores("https://s3.eu-west-1.amazonaws.com, http://10.0.0.5:9000".parse()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn object_stores(mut self, stores: AllowedStores) -> Self {
        self.object_stores = stores;
        self
    }

    /// The image log pods run (the operator's own).
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `listener` (see [`crate::endpoints`]).
    pub fn endpoints(mut self, listener: TcpListener) -> Self {
        self.endpoints = Some(listener);
        self
    }

    /// Runs the controllers only while this replica holds the leader Lease (see
    /// [`crate::leader`]); without it, they run at once.
    pub fn leader_election(mut self, election: LeaderElection) -> Self {
        self.election = Some(election);
        self
    }

    /// How long after a BatchJob's deletion the operator keeps trying to cancel its job and
    /// remove its files before it lets the resource go with a `RemovalAbandoned` Warning
    /// Event; [`REMOVAL_DEADLINE`](crate::decision::REMOVAL_DEADLINE) by default.
    pub fn removal_deadline(mut self, deadline: Duration) -> Self {
        self.removal_deadline = deadline;
        self
    }

    /// How long before a BatchCluster's SSH certificate (its Secret's `ssh-certificate`)
    /// expires its CredentialValid condition turns False with reason CredentialExpiring,
    /// with a Warning Event;
    /// [`DEFAULT_EXPIRY_WARNING`](credential::DEFAULT_EXPIRY_WARNING) by default.
    pub fn credential_expiry_warning(mut self, warning: Duration) -> Self {
        self.credential_expiry_warning = warning;
        self
    }

    /// The operator's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Runs both controllers until `shutdown` completes: at once, or with leader election
    /// whenever this replica leads.
    pub async fn run(mut self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let shutdown: Stop = shutdown.boxed().shared();
        if let Some(listener) = self.endpoints.take() {
            let endpoints = Endpoints {
                metrics: Arc::clone(&self.metrics),
                readiness: Arc::clone(&self.readiness),
            };
            tokio::spawn(endpoints.serve(listener, shutdown.clone()));
        }
        match self.election.take() {
            None => self.run_controllers(shutdown).await,
            Some(election) => self.lead(&election, shutdown).await,
        }
    }

    /// Waits for the Lease, runs the controllers while holding it, and waits again when it
    /// is lost, until `shutdown`; then releases the Lease.
    async fn lead(&self, election: &LeaderElection, shutdown: Stop) {
        self.readiness.not_ready("connecting to the leader Lease");
        let manager = loop {
            match election.manager(self.client.clone()).await {
                Ok(manager) => break manager,
                Err(err) => {
                    tracing::warn!(lease = %election.lease_name, error = %err, "cannot reach the leader Lease");
                    self.readiness
                        .not_ready(format!("cannot reach the leader Lease: {err}"));
                }
            }
            tokio::select! {
                () = shutdown.clone() => return,
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        };
        let (mut leading, lease_task) = manager.watch().await;
        loop {
            self.readiness.ready();
            tracing::info!(identity = %election.identity, lease = %election.lease_name, "standing by for the leader Lease");
            tokio::select! {
                () = shutdown.clone() => break,
                held = leading.wait_for(|leads| *leads) => if held.is_err() {
                    tracing::error!("the leader election stopped");
                    break;
                },
            }
            tracing::info!(identity = %election.identity, "leading: starting the controllers");
            self.metrics.set_leader(true);
            let mut watching = leading.clone();
            let lost = async move {
                // A closed channel means the election stopped: stop leading as well.
                let _ = watching.wait_for(|leads| !*leads).await;
            };
            let stop: Stop = futures::future::select(shutdown.clone(), lost.boxed())
                .map(drop)
                .boxed()
                .shared();
            self.run_controllers(stop).await;
            self.metrics.set_leader(false);
            if shutdown.peek().is_some() {
                break;
            }
            tracing::warn!(identity = %election.identity, "lost the leader Lease: controllers stopped");
        }
        // Closing the channel makes the election task release the Lease, so that it shows
        // no holder rather than a replica that is gone.
        drop(leading);
        match tokio::time::timeout(election.grace, lease_task).await {
            Ok(Ok(Ok(_))) => tracing::info!("leader Lease released"),
            Ok(Ok(Err(err))) => tracing::warn!(error = %err, "cannot release the leader Lease"),
            Ok(Err(_)) | Err(_) => tracing::warn!("the leader Lease was not released in time"),
        }
    }

    /// Runs both controllers until `stop` completes.
    async fn run_controllers(&self, stop: Stop) {
        self.readiness
            .not_ready("waiting for the BatchCluster and BatchJob caches");
        let (jobs, clusters) = match &self.namespace {
            Some(namespace) => (
                Api::<BatchJob>::namespaced(self.client.clone(), namespace),
                Api::<BatchCluster>::namespaced(self.client.clone(), namespace),
            ),
            None => (Api::all(self.client.clone()), Api::all(self.client.clone())),
        };
        // Pollers ask for a probe of their BatchCluster when its polls begin or stop
        // failing, so that Reachable follows an outage within a poll interval.
        let (probe, probed) = mpsc::unbounded_channel();
        let probed = futures::stream::unfold(probed, |mut probed| async move {
            probed.recv().await.map(|cluster| (cluster, probed))
        });
        // A probe writes the BatchCluster's status, and a status change would trigger the
        // next probe: with activeJobs changing, a probe every few seconds while jobs run
        // instead of every minute. Only a new generation (a spec change) or a first sight
        // triggers one; the cache still gets every change.
        let (cluster_reader, cluster_writer) = kube::runtime::reflector::store();
        // A deleted BatchCluster's connection goes at once, not when a job next looks the
        // cluster up: its SSH master would otherwise keep logging in, and a re-created
        // BatchCluster of the same name could be served by it.
        let (gone, gone_seen) = mpsc::unbounded_channel();
        let cluster_changes = watcher(clusters, watcher::Config::default())
            .default_backoff()
            .reflect(cluster_writer)
            .inspect(move |event| {
                let seen = match event {
                    Ok(watcher::Event::Delete(cluster)) => {
                        Some(Gone::Deleted(Box::new(cluster.clone())))
                    }
                    Ok(watcher::Event::InitDone) => Some(Gone::Relisted),
                    _ => None,
                };
                if let Some(seen) = seen {
                    // The receiver is gone only when the controllers stop.
                    let _ = gone.send(seen);
                }
            })
            .applied_objects()
            .predicate_filter(predicates::generation, PredicateConfig::default());
        let cluster_controller = Controller::for_stream(cluster_changes, cluster_reader)
            .reconcile_on(probed)
            .graceful_shutdown_on(stop.clone());
        let store = cluster_controller.store();
        let (wake, woken) = mpsc::unbounded_channel();
        let (act, acted) = mpsc::unbounded_channel();
        // The cache keeps every BatchJob, each as its lean copy (BatchJob::make_lean: no
        // managedFields, last-applied annotation or script, none read from the cache).
        let (job_reader, job_writer) = kube::runtime::reflector::store();
        let dependents = Dependents::default();
        let wake_dependents = wake.clone();
        let ctx = Arc::new(Context {
            actions: Actions::new(wake.clone(), act, Arc::clone(&self.metrics)),
            jobs: job_reader.clone(),
            wake: wake.clone(),
            clusters: Clusters::new(
                self.client.clone(),
                store.clone(),
                wake,
                probe,
                self.custom.clone(),
                self.local_root.clone(),
                self.targets.clone(),
                Arc::clone(&self.metrics),
            ),
            recorder: Recorder::new(self.client.clone(), FIELD_MANAGER, &self.instance),
            client: self.client.clone(),
            output: output::Writer {
                client: self.client.clone(),
                field_manager: FIELD_MANAGER.to_owned(),
                image: self.image.clone(),
            },
            metrics: Arc::clone(&self.metrics),
            removal_deadline: self.removal_deadline,
            credential_expiry_warning: self.credential_expiry_warning,
            object_stores: self.object_stores.clone(),
            placer: Placer::default(),
            placing: Semaphore::new(PLACEMENTS_AT_ONCE),
            submit_writes: Semaphore::new(ACTION_WRITES_AT_ONCE),
            end_writes: Semaphore::new(ACTION_WRITES_AT_ONCE),
        });
        let forgetting = forget_gone_clusters(gone_seen, Arc::clone(&ctx));
        let clusters = cluster_controller
            .run(cluster::reconcile, requeue_cluster, Arc::clone(&ctx))
            .for_each(|result| async move {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "BatchCluster reconcile");
                }
            });
        let watched = watcher(jobs, watcher::Config::default())
            .default_backoff()
            .modify(BatchJob::make_lean)
            .reflect(job_writer)
            // A job's change, in the cache now, wakes the jobs whose spec.after names it
            // (a dependency met, broken or created), ahead of the watched ones.
            .inspect(move |event| {
                if let Ok(event) = event {
                    for dependent in dependents.saw(event) {
                        // The receiver is gone only when the controllers stop.
                        let _ = wake_dependents.send(dependent);
                    }
                }
            })
            .applied_objects();
        // Reconcile requests come only through the intake, which orders them.
        let (reconciled, ended) = mpsc::unbounded_channel();
        let job_controller = Controller::for_stream(futures::stream::empty(), job_reader)
            .with_config(ControllerConfig::default().concurrency(intake::RECONCILES_AT_ONCE))
            .reconcile_on(intake::requests(
                watched,
                woken,
                acted,
                ended,
                Arc::clone(&self.metrics),
            ))
            .graceful_shutdown_on(stop);
        self.metrics.count_jobs_in(Some(job_controller.store()));
        let job_store = job_controller.store();
        let readiness = Arc::clone(&self.readiness);
        let stopping = Arc::clone(&ctx);
        let jobs = async move {
            // Jobs need their clusters: start once the BatchClusters are listed.
            if store.wait_until_ready().await.is_err() {
                return;
            }
            let running = job_controller
                .run(job::reconcile, requeue_job, ctx)
                .for_each(|result| {
                    if let Some(job) = intake::reconciled_job(&result) {
                        // The intake is gone only when the controller stops.
                        let _ = reconciled.send(job);
                    }
                    async move {
                        if let Err(err) = result {
                            tracing::debug!(error = %err, "BatchJob reconcile");
                        }
                    }
                });
            let ready = async move {
                if job_store.wait_until_ready().await.is_ok() {
                    readiness.ready();
                }
            };
            tokio::join!(running, ready);
        };
        tokio::join!(clusters, jobs, forgetting);
        stopping.actions.abort_all();
        self.metrics.count_jobs_in(None);
    }
}

/// What the BatchCluster watch saw go.
enum Gone {
    /// This BatchCluster was deleted.
    Deleted(Box<BatchCluster>),
    /// The watch listed every BatchCluster anew: those deleted while it was down are
    /// missing from the cache.
    Relisted,
}

/// Drops the connections of the BatchClusters `gone` reports, until the watch ends.
async fn forget_gone_clusters(mut gone: mpsc::UnboundedReceiver<Gone>, ctx: Arc<Context>) {
    while let Some(seen) = gone.recv().await {
        match seen {
            Gone::Deleted(cluster) => ctx.clusters.forget(&cluster).await,
            Gone::Relisted => ctx.clusters.forget_missing().await,
        }
    }
}

/// Writes `status` as `object`'s status with server-side apply, under [`FIELD_MANAGER`];
/// returns the object as the write left it.
async fn apply_status<K>(
    ctx: &Context,
    object: &K,
    status: &impl Serialize,
) -> Result<K, ReconcileError>
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
    let written = api
        .patch_status(
            &object.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(ReconcileError::Kube)?;
    Ok(written)
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
    let reason: String = reason.chars().take(128).collect();
    let note: String = note.chars().take(1000).collect();
    let regarding = object.object_ref(&());
    if let Err(err) = ctx
        .recorder
        .publish(&regarding, type_, &reason, action, &note)
        .await
    {
        tracing::warn!(object = %object.name_any(), error = %err, "cannot publish an Event");
    }
}

/// Normal for a condition that holds, Warning for one that does not.
fn requeue_job(job: Arc<BatchJob>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed("BatchJob", error.reason());
    tracing::warn!(job = %kube::runtime::reflector::ObjectRef::from(job.as_ref()), %error, "reconcile failed");
    Action::requeue(job::retry_after(error))
}

fn requeue_cluster(
    cluster: Arc<BatchCluster>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.reconcile_failed("BatchCluster", error.reason());
    tracing::warn!(cluster = %kube::runtime::reflector::ObjectRef::from(cluster.as_ref()), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(15))
}
