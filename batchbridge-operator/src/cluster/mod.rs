//! The operator's connections to its batch clusters: one backend, one SSH connection and
//! one poller per BatchCluster, built from the BatchCluster and its Secret and rebuilt when
//! either changes.

pub mod budget;
pub mod credentials;
pub mod output_reads;
pub mod poller;
pub mod registry;
pub mod submit_pipeline;
pub mod targets;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use batchbridge_core::shell::{Certificate, Shell, SshConfig, SshShell};
use batchbridge_core::{
    BatchBackend, Error, JobId, JobOutput, JobSpec, LocalBackend, OutputRequest,
};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Mutex, Semaphore, mpsc};
use tokio::time::Instant;

use crate::crd::{BatchCluster, BatchClusterSpec, BatchJob, Placement, Scheduler};
use crate::decision::{CLUSTER_RECHECK, SubmitGate};
use crate::metrics::{ClusterLabels, Metrics};
use crate::reason::{ClusterProblem, Reason};
use budget::{BudgetedShell, ConnectBudget};
use output_reads::OutputReads;
use poller::{HealthReport, Poller};
use submit_pipeline::{Batching, SubmitPipeline, Submitted};
use targets::SshTargets;

/// Builds the backend of a custom scheduler from its BatchCluster's spec and, when the
/// spec has `ssh`, the SSH configuration made from its Secret.
pub type BackendFactory = Arc<
    dyn Fn(&BatchClusterSpec, Option<SshConfig>) -> batchbridge_core::Result<Arc<dyn BatchBackend>>
        + Send
        + Sync,
>;

/// A live connection to one BatchCluster.
pub struct Connection {
    /// The backend that drives the cluster's scheduler.
    pub backend: Arc<dyn BatchBackend>,
    /// The poller following the cluster's active jobs.
    pub poller: Poller,
    /// The spec the connection was built from.
    pub spec: BatchClusterSpec,
    /// The cluster's labels in the metrics.
    pub labels: ClusterLabels,
    /// The SSH certificate of the Secret the connection logs in with, when it has one.
    pub certificate: Option<Certificate>,
    /// What the scheduler said about its submit limit ([`SubmitGate`]).
    gate: Arc<std::sync::Mutex<SubmitGate>>,
    submits: SubmitPipeline,
    outputs: OutputReads,
    /// Submit actions that may run at once (see [`Connection::submit_gate`]).
    submit_gate: Arc<Semaphore>,
    /// Output collections that may run at once ([`COLLECTIONS_AT_ONCE`]).
    collect_gate: Arc<Semaphore>,
    fingerprint: Fingerprint,
}

/// The most submits (batches of jobs, [`submit_pipeline`]) that run at once on one
/// connection, whatever `spec.submit.concurrency` says. An SSH connection runs 8 commands
/// at once (`SshConfig::max_sessions`), first come, first served. A submit of many jobs
/// spreads them over up to 8 remote commands of its own
/// (`batchbridge_core::remote::BATCHES_IN_FLIGHT`), bulk commands (`Command::bulk`), which
/// take at most 6 of the sessions: during a burst of new jobs the poller's and the output
/// reads' commands wait behind at most 6 batches, not all of those queued.
pub const SUBMITS_AT_ONCE: usize = 5;
/// How many output reads run at once on one connection, each reading up to 100 jobs'
/// windows in one command ([`output_reads`]); see [`SUBMITS_AT_ONCE`].
pub const OUTPUT_READS_AT_ONCE: usize = 2;
/// How many output collections (a fetch, the outputs' check and the status write) run at
/// once on one connection: more than the status writes of jobs' ends the operator sends
/// at once ([`ACTION_WRITES_AT_ONCE`](crate::controller::ACTION_WRITES_AT_ONCE)) and the
/// reads together, so that neither waits for the other. Measured in a 10,000-job burst
/// (docs/PERFORMANCE.md): with 16, a job's end was seen 24 s after it at the median, with
/// 64 3.6 s; since the ends' writes and reads no longer wait behind the submits', the p99
/// is 5.4 s. The others wait at [`Connection::collect_gate`] before their action is
/// built, about 4 KB saved each.
pub const COLLECTIONS_AT_ONCE: usize = 64;

/// What a connection was built from: when any part changes, it is rebuilt.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    /// Tells a re-created BatchCluster of the same name from the deleted one: its
    /// generation starts at 1 again.
    uid: Option<String>,
    generation: Option<i64>,
    secret_version: Option<String>,
    /// The versions of the jump hosts' Secrets, in `spec.ssh.jumpHosts` order.
    hop_secret_versions: Vec<Option<String>>,
}

/// The Secrets a connection logs in with, read from the BatchCluster's namespace.
struct Secrets<'a> {
    /// `spec.secretRef`'s.
    login: Option<&'a Secret>,
    /// Each of `spec.ssh.jumpHosts`' own.
    hops: &'a [Option<Secret>],
}

impl Fingerprint {
    /// Whether a connection built from this fingerprint still stands for `cluster` as the
    /// cache shows it now: the same object with the same spec (the API server raises the
    /// generation with every spec change; the Secret is looked at only on a refresh).
    fn stands_for(&self, cluster: &BatchCluster) -> bool {
        self.uid == cluster.metadata.uid && self.generation == cluster.metadata.generation
    }
}

impl Connection {
    /// Why jobs cannot use the cluster now, as far as the last poll or probe found.
    pub fn problem(&self) -> Option<ClusterProblem> {
        self.poller
            .failure()
            .and_then(|err| connection_problem(&err))
    }

    /// The cluster user jobs run as.
    pub fn user(&self) -> Option<&str> {
        self.spec.ssh.as_ref().map(|ssh| ssh.user.as_str())
    }

    /// Submits `spec`, of the BatchJob whose uid is `uid`, in the cluster's next batch
    /// ([`SubmitPipeline::submit`]); `Err(message)`, the scheduler not asked, when its
    /// submit limit became known meanwhile and this job's submit is not the probe of it
    /// ([`SubmitGate::holds`]).
    pub async fn submit(&self, spec: JobSpec, uid: String) -> Submitted {
        self.submits.submit(spec, uid).await
    }

    /// The cluster's [`SubmitGate`], locked.
    pub fn gate(&self) -> std::sync::MutexGuard<'_, SubmitGate> {
        self.gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The permits a submit action takes before it is built: enough to fill every batch
    /// the submit pipeline has in flight and to gather the next one, so that the gate
    /// never slows the submits. A job waiting here holds a few hundred bytes; a submit
    /// action in progress, its SSH command and its status write, about 4 KB.
    pub fn submit_gate(&self) -> Arc<Semaphore> {
        Arc::clone(&self.submit_gate)
    }

    /// The permits an output collection takes before it is built ([`COLLECTIONS_AT_ONCE`]).
    pub fn collect_gate(&self) -> Arc<Semaphore> {
        Arc::clone(&self.collect_gate)
    }

    /// Fetches job `id`'s output in the next of the connection's output reads, with the
    /// other jobs' that wait for one ([`output_reads`]).
    pub async fn fetch_output(
        &self,
        id: &JobId,
        request: &OutputRequest,
    ) -> batchbridge_core::Result<JobOutput> {
        self.outputs.fetch(id, request).await
    }

    /// The partition or queue for jobs that do not choose one.
    pub fn default_queue(&self) -> Option<&str> {
        self.spec.defaults.as_ref()?.partition.as_deref()
    }
}

/// The metrics' labels of BatchCluster `key`.
fn labels_of(key: &ObjectRef<BatchCluster>) -> ClusterLabels {
    ClusterLabels {
        batchjob_namespace: key.namespace.clone().unwrap_or_default(),
        batchcluster: key.name.clone(),
    }
}

/// The problem a failed command shows when it means the cluster cannot be used at all
/// (not reached, host key or credentials refused), rather than something about one job.
pub fn connection_problem(err: &Error) -> Option<ClusterProblem> {
    Reason::of_connection(err.kind()).map(|reason| ClusterProblem {
        reason,
        message: err.to_string(),
    })
}

enum Entry {
    Connected(Arc<Connection>),
    /// A problem found at `at` with the cluster as `fingerprint` describes it; looked at
    /// again after [`CLUSTER_RECHECK`], or at once when the cluster changed.
    Failed {
        problem: ClusterProblem,
        at: Instant,
        fingerprint: Fingerprint,
    },
}

impl Entry {
    fn fingerprint(&self) -> &Fingerprint {
        match self {
            Self::Connected(connection) => &connection.fingerprint,
            Self::Failed { fingerprint, .. } => fingerprint,
        }
    }
}

/// The connections of one operator, keyed by BatchCluster.
pub struct Clusters {
    client: Client,
    store: Store<BatchCluster>,
    wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
    probe: mpsc::UnboundedSender<ObjectRef<BatchCluster>>,
    custom: HashMap<String, BackendFactory>,
    local_root: Option<PathBuf>,
    targets: SshTargets,
    metrics: Arc<Metrics>,
    entries: Mutex<HashMap<ObjectRef<BatchCluster>, Entry>>,
    /// The SSH connections each namespace's BatchClusters may still open.
    budgets: std::sync::Mutex<HashMap<String, Arc<ConnectBudget>>>,
}

impl std::fmt::Debug for Clusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clusters")
            .field("custom", &self.custom.keys().collect::<Vec<_>>())
            .field("local_root", &self.local_root)
            .finish_non_exhaustive()
    }
}

impl Clusters {
    /// Connections for the BatchClusters in `store`; pollers wake BatchJobs through `wake`,
    /// and their BatchCluster through `probe` when polls begin or stop failing; `local`
    /// clusters keep their jobs under `local_root`, and are refused when it is `None`; SSH
    /// connections go only to `targets`; polls, commands and SSH connections are counted in
    /// `metrics`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        store: Store<BatchCluster>,
        wake: mpsc::UnboundedSender<ObjectRef<BatchJob>>,
        probe: mpsc::UnboundedSender<ObjectRef<BatchCluster>>,
        custom: HashMap<String, BackendFactory>,
        local_root: Option<PathBuf>,
        targets: SshTargets,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            client,
            store,
            wake,
            probe,
            custom,
            local_root,
            targets,
            metrics,
            entries: Mutex::new(HashMap::new()),
            budgets: std::sync::Mutex::default(),
        }
    }

    /// The connection to BatchCluster `name` of `namespace`, built on first use and
    /// rebuilt when the cluster's spec changed.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Connection>, ClusterProblem> {
        let key = ObjectRef::<BatchCluster>::new(name).within(namespace);
        let Some(cluster) = self.store.get(&key) else {
            self.entries.lock().await.remove(&key);
            return Err(ClusterProblem {
                reason: Reason::BatchClusterNotFound,
                message: format!("BatchCluster {name:?} not found in namespace {namespace:?}"),
            });
        };
        {
            let entries = self.entries.lock().await;
            match entries.get(&key) {
                Some(Entry::Connected(connection))
                    if connection.fingerprint.stands_for(&cluster) =>
                {
                    return match connection.problem() {
                        Some(problem) => Err(problem),
                        None => Ok(Arc::clone(connection)),
                    };
                }
                Some(Entry::Failed {
                    problem,
                    at,
                    fingerprint,
                }) if at.elapsed() < CLUSTER_RECHECK && fingerprint.stands_for(&cluster) => {
                    return Err(problem.clone());
                }
                _ => {}
            }
        }
        self.refresh(&cluster).await
    }

    /// Records whether `cluster`'s scheduler answered, as its Reachable condition says, in
    /// `batchbridge_cluster_reachable` (until the BatchCluster is forgotten).
    pub fn record_reachable(&self, cluster: &BatchCluster, reachable: bool) {
        self.metrics
            .set_cluster_reachable(&labels_of(&ObjectRef::from(cluster)), reachable);
    }

    /// Records when `cluster`'s SSH certificate expires, as its status shows it, in
    /// `batchbridge_credential_expiry_timestamp_seconds` (until the BatchCluster is
    /// forgotten; no series without a certificate).
    pub fn record_credential_expiry(&self, cluster: &BatchCluster, expires: Option<SystemTime>) {
        self.metrics
            .set_credential_expiry(&labels_of(&ObjectRef::from(cluster)), expires);
    }

    /// Drops the connection to `cluster`, deleted: its SSH master, poller and events
    /// follower stop at once (jobs in the middle of a command on it finish that command).
    pub async fn forget(&self, cluster: &BatchCluster) {
        let key = ObjectRef::from(cluster);
        let mut entries = self.entries.lock().await;
        // A BatchCluster re-created under the same name since keeps its new connection.
        if entries
            .get(&key)
            .is_some_and(|entry| entry.fingerprint().uid == cluster.metadata.uid)
        {
            entries.remove(&key);
            self.metrics.forget_cluster(&labels_of(&key));
            tracing::info!(cluster = %key, "BatchCluster deleted: disconnected");
        }
    }

    /// Drops the connections of the BatchClusters the cache no longer has, or has as
    /// another object of the same name: those deleted while the watch was down.
    pub async fn forget_missing(&self) {
        self.entries.lock().await.retain(|key, entry| {
            let kept = self
                .store
                .get(key)
                .is_some_and(|cluster| entry.fingerprint().uid == cluster.metadata.uid);
            if !kept {
                self.metrics.forget_cluster(&labels_of(key));
                tracing::info!(cluster = %key, "BatchCluster gone: disconnected");
            }
            kept
        });
    }

    /// The names of a placed job's candidates in `namespace`: spec.placement.clusters as
    /// listed, or the BatchClusters whose labels match its selector, in name order; at most
    /// [`MAX_CANDIDATES`](crate::crd::MAX_CANDIDATES). Only BatchClusters of the job's own
    /// namespace can match: a selector never reaches another tenant's clusters.
    pub fn candidates(&self, namespace: &str, placement: &Placement) -> Vec<String> {
        let mut names = match &placement.selector {
            Some(selector) => {
                let mut names: Vec<String> = self
                    .store
                    .state()
                    .iter()
                    .filter(|cluster| cluster.namespace().as_deref() == Some(namespace))
                    .filter(|cluster| selector.matches(cluster.labels()))
                    .map(|cluster| cluster.name_any())
                    .collect();
                names.sort();
                names
            }
            None => placement.clusters.clone(),
        };
        names.truncate(crate::crd::MAX_CANDIDATES);
        names
    }

    /// Reads the cluster's Secret and rebuilds the connection if the cluster or the Secret
    /// changed since it was built.
    pub async fn refresh(&self, cluster: &BatchCluster) -> Result<Arc<Connection>, ClusterProblem> {
        let namespace = cluster.namespace().unwrap_or_default();
        let key = ObjectRef::from(cluster);
        // Before any request: a name the CRD now refuses may be a path or a query.
        cluster
            .spec
            .check_names()
            .map_err(|message| ClusterProblem {
                reason: Reason::SpecInvalid,
                message,
            })?;
        let secret = match &cluster.spec.secret_ref {
            Some(reference) => self.read_secret(&key, &namespace, &reference.name).await?,
            None => None,
        };
        // Every hop's Secret, like the login's, only ever from the cluster's own namespace.
        let mut hop_secrets = Vec::new();
        for hop in cluster.spec.ssh.iter().flat_map(|ssh| &ssh.jump_hosts) {
            hop_secrets.push(
                self.read_secret(&key, &namespace, &hop.secret_ref.name)
                    .await?,
            );
        }
        let version = |secret: &Option<Secret>| {
            secret
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone())
        };
        let fingerprint = Fingerprint {
            uid: cluster.metadata.uid.clone(),
            generation: cluster.metadata.generation,
            secret_version: version(&secret),
            hop_secret_versions: hop_secrets.iter().map(version).collect(),
        };
        let mut entries = self.entries.lock().await;
        if let Some(Entry::Connected(connection)) = entries.get(&key)
            && connection.fingerprint == fingerprint
        {
            return Ok(Arc::clone(connection));
        }
        // The old connection (its SSH master, poller and events follower) goes before the
        // new one is built, not when the last job holding it lets go. Its jobs are followed
        // by the new one at once: a rotated Secret must not leave them unwatched until each
        // BatchJob's next recheck (minutes).
        let followed = match entries.remove(&key) {
            Some(Entry::Connected(old)) => old.poller.followed_jobs(),
            _ => Vec::new(),
        };
        let secrets = Secrets {
            login: secret.as_ref(),
            hops: &hop_secrets,
        };
        match self.connect(&namespace, cluster, &secrets, fingerprint.clone()) {
            Ok(connection) => {
                let connection = Arc::new(connection);
                for (id, job) in followed {
                    connection.poller.follow(id, job);
                }
                tracing::info!(cluster = %key, scheduler = %cluster.spec.scheduler, "connected");
                entries.insert(key, Entry::Connected(Arc::clone(&connection)));
                Ok(connection)
            }
            Err(problem) => {
                tracing::warn!(cluster = %key, reason = %problem.reason, message = %problem.message, "cannot connect");
                entries.insert(
                    key,
                    Entry::Failed {
                        problem: problem.clone(),
                        at: Instant::now(),
                        fingerprint,
                    },
                );
                Err(problem)
            }
        }
    }

    /// Secret `name` of `namespace` for BatchCluster `key`; `None` when it does not exist.
    async fn read_secret(
        &self,
        key: &ObjectRef<BatchCluster>,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Secret>, ClusterProblem> {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|err| {
                // The answer may name the operator's service account: the log's, not the
                // tenant's.
                tracing::warn!(cluster = %key, secret = %name, error = %err, "cannot read the Secret");
                ClusterProblem {
                    reason: Reason::SecretUnreadable,
                    message: format!(
                        "the operator could not read Secret {name:?} of this namespace (it is \
                         tried again; if this persists, ask the cluster's administrator, who \
                         can see why in the operator's log)"
                    ),
                }
            })
    }

    /// The connection budget `namespace`'s BatchClusters share.
    fn connect_budget(&self, namespace: &str) -> Arc<ConnectBudget> {
        let mut budgets = self
            .budgets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(budgets.entry(namespace.to_owned()).or_default())
    }

    fn connect(
        &self,
        namespace: &str,
        cluster: &BatchCluster,
        secrets: &Secrets<'_>,
        fingerprint: Fingerprint,
    ) -> Result<Connection, ClusterProblem> {
        let spec = &cluster.spec;
        if let Some(ssh) = &spec.ssh {
            // Decided before any connection: the message must say nothing about the
            // target that a connection attempt would have found. A hop is held to the
            // list like the login node: the operator connects to the first, and through
            // it to the others.
            let not_allowed = |what: String| ClusterProblem {
                reason: Reason::HostNotAllowed,
                message: format!(
                    "{what} are not among the login nodes this operator may connect to: its \
                     administrator's list (Helm value allowedSshTargets) must name them"
                ),
            };
            if !self.targets.allows(&ssh.host, ssh.port) {
                return Err(not_allowed("ssh.host and ssh.port".into()));
            }
            if let Some(index) = ssh
                .jump_hosts
                .iter()
                .position(|hop| !self.targets.allows(&hop.host, hop.port))
            {
                return Err(not_allowed(format!(
                    "ssh.jumpHosts[{index}].host and its port"
                )));
            }
        }
        let labels = labels_of(&ObjectRef::from(cluster));
        let invalid = |err: Error| ClusterProblem {
            reason: Reason::SpecInvalid,
            message: err.to_string(),
        };
        let ssh = || -> Result<Arc<dyn Shell>, ClusterProblem> {
            let config = credentials::ssh_config(namespace, spec, secrets.login, secrets.hops)?;
            let shell = SshShell::new(config).map(Arc::new).map_err(invalid)?;
            let metered = Arc::new(self.metrics.metered(Arc::clone(&shell), labels.clone()));
            Ok(Arc::new(BudgetedShell::new(
                metered,
                shell,
                self.connect_budget(namespace),
            )))
        };
        let backend: Arc<dyn BatchBackend> = match &spec.scheduler {
            Scheduler::Local => {
                let root = self.local_root.as_ref().ok_or_else(|| ClusterProblem {
                    reason: Reason::SchedulerDisabled,
                    message: "the local scheduler is disabled by the operator's configuration: \
                              it runs jobs as processes of the operator, with its rights \
                              (installer's setting ENABLE_LOCAL_SCHEDULER, Helm value \
                              localScheduler.enabled)"
                        .into(),
                })?;
                Arc::new(
                    LocalBackend::new(root.join(namespace).join(cluster.name_any()))
                        .map_err(invalid)?
                        .clean_environment(),
                )
            }
            Scheduler::Slurm | Scheduler::Htcondor | Scheduler::Pbs => registry::ssh_backend(
                &spec.scheduler,
                ssh()?,
                spec.work_dir.as_deref(),
                spec.defaults.as_ref(),
            )
            .map_err(invalid)?,
            Scheduler::Custom(name) => {
                let factory = self.custom.get(name).ok_or_else(|| ClusterProblem {
                    reason: Reason::UnknownScheduler,
                    message: format!(
                        "no backend named {name:?} is registered in this operator (built in: slurm, htcondor, pbs, local)"
                    ),
                })?;
                let config = match spec.ssh {
                    Some(_) => Some(credentials::ssh_config(
                        namespace,
                        spec,
                        secrets.login,
                        secrets.hops,
                    )?),
                    None => None,
                };
                factory(spec, config).map_err(invalid)?
            }
        };
        let interval = Duration::from(spec.poll_interval).max(Duration::from_secs(1));
        let poller = Poller::start(
            Arc::clone(&backend),
            interval,
            spec.push_events,
            self.wake.clone(),
            Some(HealthReport {
                cluster: ObjectRef::from(cluster),
                wake: self.probe.clone(),
            }),
            self.metrics.poll_duration(&labels),
        )
        .map_err(invalid)?;
        let gate = Arc::default();
        let batching = Batching::of(spec.submit.as_ref());
        let submit_gate = Arc::new(Semaphore::new(batching.size * (batching.in_flight + 1)));
        let submits = SubmitPipeline::start(Arc::clone(&backend), Arc::clone(&gate), batching);
        let outputs = OutputReads::start(Arc::clone(&backend));
        Ok(Connection {
            poller,
            backend,
            spec: spec.clone(),
            labels,
            certificate: secrets.login.and_then(credentials::certificate),
            submits,
            gate,
            outputs,
            submit_gate,
            collect_gate: Arc::new(Semaphore::new(COLLECTIONS_AT_ONCE)),
            fingerprint,
        })
    }
}
