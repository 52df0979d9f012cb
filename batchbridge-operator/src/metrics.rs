//! The operator's Prometheus metrics, served at `/metrics` (see [`crate::endpoints`]).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `batchbridge_jobs` | gauge | `batchjob_namespace`, `batchcluster`, `phase` |
//! | `batchbridge_submits_total`, `batchbridge_submit_failures_total` | counter | `batchjob_namespace`, `batchcluster` |
//! | `batchbridge_actions_in_progress` | gauge | `action` |
//! | `batchbridge_reconciles_waiting` | gauge | `lane` |
//! | `batchbridge_cancels_total`, `batchbridge_cancel_failures_total` | counter | `batchjob_namespace`, `batchcluster` |
//! | `batchbridge_poll_duration_seconds` | histogram | `batchjob_namespace`, `batchcluster` |
//! | `batchbridge_scheduler_commands_total` | counter | `batchjob_namespace`, `batchcluster`, `command` |
//! | `batchbridge_ssh_connections_opened_total`, `batchbridge_ssh_reconnects_total` | counter | `batchjob_namespace`, `batchcluster` |
//! | `batchbridge_reconcile_errors_total` | counter | `controller`, `reason` |
//! | `batchbridge_leader` | gauge | |
//! | `batchbridge_build_info` | gauge | `version` |
//! | `batchbridge_cluster_reachable` | gauge | `batchjob_namespace`, `batchcluster` |
//! | `batchbridge_credential_expiry_timestamp_seconds` | gauge | `batchjob_namespace`, `batchcluster` |
//! | `batchbridge_job_queue_wait_seconds`, `batchbridge_job_run_time_seconds` | histogram | `batchjob_namespace`, `batchcluster`, `outcome` |
//!
//! The per-cluster labels are `batchjob_namespace` and `batchcluster`, not `namespace` and
//! `cluster`: a ServiceMonitor's scrape sets `namespace` to the operator's own (renaming ours
//! to `exported_namespace`), and multi-cluster Prometheus setups add `cluster` themselves.
//!
//! `batchbridge_jobs` is counted from the BatchJob cache at each scrape, so it is exact and
//! a deleted job leaves no stale series; a replica that is not the leader has no cache and
//! reports no jobs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use batchbridge_core::Result;
use batchbridge_core::shell::{
    Command, LineStream, Output, PipeInput, PipeOutput, Shell, SshShell,
};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{BatchJob, BatchJobStatus, Phase};

/// Which BatchCluster a series is about.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// The BatchCluster's namespace (that of the BatchJobs it runs).
    pub batchjob_namespace: String,
    /// The BatchCluster's name.
    pub batchcluster: String,
}

/// A command run on a cluster's login node, by tool (`squeue`, `condor_q`…; `sh` for the
/// backends' small scripts, such as a submit that claims the job's key, then calls `sbatch`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabels {
    batchjob_namespace: String,
    batchcluster: String,
    command: String,
}

/// An action on a cluster, by what it does (`submit`, `collect_output`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: &'static str,
}

/// The BatchJobs waiting to be reconciled, by why (`woken`, `watched`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    lane: &'static str,
}

/// A failed reconcile, by controller (`BatchJob`, `BatchCluster`) and what failed.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    reason: String,
}

/// The operator's build, for `batchbridge_build_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// An attempt that ended, by the BatchCluster it ran on and how it ended (its phase; a
/// failure with a retry left is `Failed`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    batchjob_namespace: String,
    batchcluster: String,
    outcome: String,
}

type HistogramFamily<Labels = ClusterLabels> = Family<Labels, Histogram, fn() -> Histogram>;

/// 1 s to 3 days (4 s, 16 s, 64 s, ~4 min, ~17 min, ~68 min, ~4.5 h, ~18 h, 3 days): batch
/// jobs wait and run from seconds to days.
fn job_duration_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 4.0, 10))
}

/// Every metric of one operator.
///
/// ```
/// use batchbridge_operator::metrics::{ClusterLabels, Metrics};
///
/// let metrics = Metrics::new();
/// let hpc = ClusterLabels { batchjob_namespace: "research".into(), batchcluster: "hpc".into() };
/// metrics.submitted(&hpc, true);
/// assert!(metrics.encode().contains(r#"batchbridge_submits_total{batchjob_namespace="research",batchcluster="hpc"} 1"#));
/// ```
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    submits: Family<ClusterLabels, Counter>,
    submit_failures: Family<ClusterLabels, Counter>,
    cancels: Family<ClusterLabels, Counter>,
    cancel_failures: Family<ClusterLabels, Counter>,
    poll_duration: HistogramFamily,
    scheduler_commands: Family<CommandLabels, Counter>,
    ssh_connections: Family<ClusterLabels, Counter>,
    ssh_reconnects: Family<ClusterLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    actions_in_progress: Family<ActionLabels, Gauge>,
    reconciles_waiting: Family<LaneLabels, Gauge>,
    leader: Gauge,
    cluster_reachable: Family<ClusterLabels, Gauge>,
    credential_expiry: Family<ClusterLabels, Gauge>,
    queue_wait: HistogramFamily<OutcomeLabels>,
    run_time: HistogramFamily<OutcomeLabels>,
    jobs: Arc<JobCounts>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All metrics at zero, registered under the prefix `batchbridge`.
    pub fn new() -> Self {
        let metrics = Self {
            registry: Registry::with_prefix("batchbridge"),
            submits: Family::default(),
            submit_failures: Family::default(),
            cancels: Family::default(),
            cancel_failures: Family::default(),
            // 10 ms to about 80 s: a status call is one or two commands over SSH.
            poll_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 2.0, 14))
            }),
            scheduler_commands: Family::default(),
            ssh_connections: Family::default(),
            ssh_reconnects: Family::default(),
            reconcile_errors: Family::default(),
            actions_in_progress: Family::default(),
            reconciles_waiting: Family::default(),
            leader: Gauge::default(),
            cluster_reachable: Family::default(),
            credential_expiry: Family::default(),
            queue_wait: Family::new_with_constructor(job_duration_buckets),
            run_time: Family::new_with_constructor(job_duration_buckets),
            jobs: Arc::default(),
        };
        let mut registry = metrics.registry;
        let per_cluster = [
            (
                "submits",
                "Jobs submitted to a scheduler (every attempt)",
                &metrics.submits,
            ),
            (
                "submit_failures",
                "Submits the scheduler or the connection refused",
                &metrics.submit_failures,
            ),
            (
                "cancels",
                "Jobs cancelled on a scheduler because their BatchJob was deleted",
                &metrics.cancels,
            ),
            (
                "cancel_failures",
                "Cancels that failed (retried until they succeed)",
                &metrics.cancel_failures,
            ),
            (
                "ssh_connections_opened",
                "SSH master connections opened to a cluster (the first and every reconnect)",
                &metrics.ssh_connections,
            ),
            (
                "ssh_reconnects",
                "SSH master connections re-opened after one was lost",
                &metrics.ssh_reconnects,
            ),
        ];
        for (name, help, family) in per_cluster {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "poll_duration_seconds",
            "How long one status poll of a cluster's followed jobs took",
            metrics.poll_duration.clone(),
        );
        registry.register(
            "scheduler_commands",
            "Commands run on a cluster's login node, by tool",
            metrics.scheduler_commands.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed and were requeued, by controller and cause",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "actions_in_progress",
            "BatchJobs whose submit or output collection is running or waiting for a free slot on its cluster",
            metrics.actions_in_progress.clone(),
        );
        registry.register(
            "reconciles_waiting",
            "BatchJobs waiting to be reconciled, by lane: woken (their scheduler state changed or their output was collected), acted (their submit or placement ended) or watched (new, or changed in Kubernetes)",
            metrics.reconciles_waiting.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease and runs the controllers",
            metrics.leader.clone(),
        );
        registry.register(
            "cluster_reachable",
            "1 while the BatchCluster's scheduler answers (its Reachable condition), 0 while it does not",
            metrics.cluster_reachable.clone(),
        );
        registry.register(
            "credential_expiry_timestamp_seconds",
            "When the SSH certificate the BatchCluster logs in with expires, in seconds since the Unix epoch; no series for a credential that does not expire",
            metrics.credential_expiry.clone(),
        );
        registry.register(
            "job_queue_wait_seconds",
            "How long an attempt waited in the scheduler's queue, from submit to start, by how it ended",
            metrics.queue_wait.clone(),
        );
        registry.register(
            "job_run_time_seconds",
            "How long an attempt ran, from start to finish, by how it ended",
            metrics.run_time.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1; the labels name the running operator's version",
            build_info,
        );
        registry.register_collector(Box::new(Arc::clone(&metrics.jobs)));
        Self {
            registry,
            ..metrics
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail, and the label sets are plain strings.
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(error = %err, "cannot encode the metrics");
        }
        text
    }

    /// Counts one submit to `cluster`; `ok` when the scheduler took it.
    pub fn submitted(&self, cluster: &ClusterLabels, ok: bool) {
        self.submits.get_or_create(cluster).inc();
        if !ok {
            self.submit_failures.get_or_create(cluster).inc();
        }
    }

    /// Counts one cancel on `cluster`; `ok` when it succeeded.
    pub fn cancelled(&self, cluster: &ClusterLabels, ok: bool) {
        self.cancels.get_or_create(cluster).inc();
        if !ok {
            self.cancel_failures.get_or_create(cluster).inc();
        }
    }

    /// The poll-duration histogram of `cluster`, for its poller.
    pub fn poll_duration(&self, cluster: &ClusterLabels) -> Histogram {
        self.poll_duration.get_or_create(cluster).clone()
    }

    /// Counts a failed reconcile of `controller` (its kind) caused by `reason`.
    pub fn reconcile_failed(&self, controller: &str, reason: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: controller.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Counts an `action` (`submit`, `collect_output`) that started.
    pub fn action_started(&self, action: &'static str) {
        self.actions_in_progress
            .get_or_create(&ActionLabels { action })
            .inc();
    }

    /// Counts an `action` that ended.
    pub fn action_ended(&self, action: &'static str) {
        self.actions_in_progress
            .get_or_create(&ActionLabels { action })
            .dec();
    }

    /// Records that `count` BatchJobs wait in `lane` (`woken`, `watched`) to be reconciled.
    pub fn reconciles_waiting(&self, lane: &'static str, count: usize) {
        self.reconciles_waiting
            .get_or_create(&LaneLabels { lane })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Records whether this replica leads. A replica that stops leading drops its clusters'
    /// reachability: only the leader probes them, so its values would go stale (and keep an
    /// unreachable alert firing, or hide one) while another replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if !leading {
            self.cluster_reachable.clear();
            self.credential_expiry.clear();
        }
    }

    /// Records whether `cluster`'s scheduler answered the operator's last probe or poll.
    pub fn set_cluster_reachable(&self, cluster: &ClusterLabels, reachable: bool) {
        self.cluster_reachable
            .get_or_create(cluster)
            .set(i64::from(reachable));
    }

    /// Records when the SSH certificate `cluster` logs in with expires; `None` drops the
    /// series (no certificate, or one valid for ever).
    pub fn set_credential_expiry(&self, cluster: &ClusterLabels, expires: Option<SystemTime>) {
        match expires {
            Some(at) => {
                let seconds = at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_secs());
                self.credential_expiry
                    .get_or_create(cluster)
                    .set(i64::try_from(seconds).unwrap_or(i64::MAX));
            }
            None => {
                self.credential_expiry.remove(cluster);
            }
        }
    }

    /// Drops `cluster`'s reachability and credential expiry, the BatchCluster being gone.
    pub fn forget_cluster(&self, cluster: &ClusterLabels) {
        self.cluster_reachable.remove(cluster);
        self.credential_expiry.remove(cluster);
    }

    /// Observes the queue wait and run time of `job`'s attempt when the status write from
    /// `before` to `after` is the one that records its end (once per attempt: a new
    /// attempt starts without a finish time).
    pub fn observe_attempt_end(
        &self,
        job: &BatchJob,
        before: &BatchJobStatus,
        after: &BatchJobStatus,
    ) {
        let (None, Some(finish)) = (&before.finish_time, &after.finish_time) else {
            return;
        };
        let Some(start) = &after.start_time else {
            // Ended before it started (cancelled while queued): neither wait nor run ended.
            return;
        };
        let outcome = match after.phase.unwrap_or(Phase::Unknown) {
            Phase::RetryPending => Phase::Failed,
            phase => phase,
        };
        let labels = OutcomeLabels {
            batchjob_namespace: job.namespace().unwrap_or_default(),
            batchcluster: after.cluster.clone().unwrap_or_default(),
            outcome: format!("{outcome:?}"),
        };
        let seconds = |from: &Time, to: &Time| from.0.duration_until(to.0).as_secs_f64().max(0.0);
        if let Some(submit) = &after.submit_time {
            self.queue_wait
                .get_or_create(&labels)
                .observe(seconds(submit, start));
        }
        self.run_time
            .get_or_create(&labels)
            .observe(seconds(start, finish));
    }

    /// Counts `batchbridge_jobs` from `store` (the job controller's cache) from now on;
    /// `None` while this replica runs no controller.
    pub fn count_jobs_in(&self, store: Option<Store<BatchJob>>) {
        *self
            .jobs
            .store
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = store;
    }

    /// `shell` with every command and SSH connection it makes counted for `cluster`.
    pub fn metered(&self, shell: Arc<SshShell>, cluster: ClusterLabels) -> MeteredShell {
        MeteredShell {
            inner: shell,
            commands: self.scheduler_commands.clone(),
            connections: self.ssh_connections.get_or_create(&cluster).clone(),
            reconnects: self.ssh_reconnects.get_or_create(&cluster).clone(),
            counted_connections: AtomicU64::new(0),
            cluster,
        }
    }
}

/// The BatchJobs in the cache, by namespace, cluster and phase, counted at each scrape.
#[derive(Debug, Default)]
struct JobCounts {
    store: Mutex<Option<Store<BatchJob>>>,
}

impl Collector for JobCounts {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let store = self
            .store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(store) = store else {
            return Ok(());
        };
        let counts = count_by_phase(store.state().iter().map(AsRef::as_ref));
        let mut family = encoder.encode_descriptor(
            "jobs",
            "BatchJobs by namespace, cluster and phase.",
            None,
            ConstGauge::new(0i64).metric_type(),
        )?;
        for (labels, count) in &counts {
            ConstGauge::new(*count).encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PhaseLabels {
    batchjob_namespace: String,
    batchcluster: String,
    phase: String,
}

/// How many of `jobs` are in each phase, per namespace and cluster; a job not yet
/// reconciled counts as Pending.
fn count_by_phase<'a>(jobs: impl Iterator<Item = &'a BatchJob>) -> BTreeMap<PhaseLabels, i64> {
    let mut counts = BTreeMap::new();
    for job in jobs {
        let phase = job
            .status
            .as_ref()
            .and_then(|status| status.phase)
            .unwrap_or(Phase::Pending);
        let labels = PhaseLabels {
            batchjob_namespace: job.namespace().unwrap_or_default(),
            batchcluster: job
                .status
                .as_ref()
                .and_then(|status| status.cluster.as_deref())
                .or(job.spec.fixed_cluster())
                .unwrap_or_default()
                .to_owned(),
            phase: format!("{phase:?}"),
        };
        *counts.entry(labels).or_insert(0) += 1;
    }
    counts
}

/// An SSH shell whose commands and connections are counted.
#[derive(Debug)]
pub struct MeteredShell {
    inner: Arc<SshShell>,
    cluster: ClusterLabels,
    commands: Family<CommandLabels, Counter>,
    connections: Counter,
    reconnects: Counter,
    /// The shell's connection count as last added to the counters.
    counted_connections: AtomicU64,
}

impl MeteredShell {
    /// Adds the connections opened since the last look; all but a shell's first are
    /// reconnects.
    /// Counts `command`, and any connection opened for it.
    fn count(&self, command: &Command) {
        self.commands
            .get_or_create(&CommandLabels {
                batchjob_namespace: self.cluster.batchjob_namespace.clone(),
                batchcluster: self.cluster.batchcluster.clone(),
                command: command.tool().to_owned(),
            })
            .inc();
        self.count_connections();
    }

    fn count_connections(&self) {
        let opened = self.inner.connections_opened();
        let before = self.counted_connections.swap(opened, Ordering::Relaxed);
        if opened > before {
            self.connections.inc_by(opened - before);
            self.reconnects.inc_by(opened - before.max(1));
        }
    }
}

#[async_trait]
impl Shell for MeteredShell {
    fn host(&self) -> &str {
        self.inner.host()
    }

    async fn run(&self, command: &Command) -> Result<Output> {
        let output = self.inner.run(command).await;
        self.count(command);
        output
    }

    /// The long-lived command of the cluster's event source, counted like any command
    /// (once per start) under its program's name.
    async fn stream(&self, command: &Command) -> Result<LineStream> {
        let lines = self.inner.stream(command).await;
        self.count(command);
        lines
    }

    /// A staging transfer, counted like any command.
    async fn pipe(
        &self,
        command: &Command,
        input: Option<PipeInput>,
        output: Option<PipeOutput>,
    ) -> Result<Output> {
        let piped = self.inner.pipe(command, input, output).await;
        self.count(command);
        piped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::BatchJobSpec;
    use crate::status::time;

    fn job(namespace: &str, cluster: &str, phase: Option<Phase>) -> BatchJob {
        let spec: BatchJobSpec = serde_json::from_value(
            serde_json::json!({"clusterRef": {"name": cluster}, "script": "true"}),
        )
        .expect("a valid spec");
        let mut job = BatchJob::new("j", spec);
        job.metadata.namespace = Some(namespace.into());
        job.status = phase.map(|phase| BatchJobStatus {
            phase: Some(phase),
            ..BatchJobStatus::default()
        });
        job
    }

    #[test]
    fn jobs_are_counted_by_namespace_cluster_and_phase() {
        let jobs = [
            job("a", "hpc", Some(Phase::Running)),
            job("a", "hpc", Some(Phase::Running)),
            job("a", "hpc", None),
            job("a", "hpc", Some(Phase::Pending)),
            job("a", "condor", Some(Phase::Succeeded)),
            job("b", "hpc", Some(Phase::Failed)),
        ];
        let counts: Vec<(String, String, String, i64)> = count_by_phase(jobs.iter())
            .into_iter()
            .map(|(l, n)| (l.batchjob_namespace, l.batchcluster, l.phase, n))
            .collect();
        let expected = [
            ("a", "condor", "Succeeded", 1),
            ("a", "hpc", "Pending", 2),
            ("a", "hpc", "Running", 2),
            ("b", "hpc", "Failed", 1),
        ]
        .map(|(ns, c, p, n)| (ns.to_owned(), c.to_owned(), p.to_owned(), n));
        assert_eq!(counts, expected);
    }

    #[test]
    fn an_attempt_is_timed_once_when_its_end_is_written() {
        let metrics = Metrics::new();
        let job = job("ns", "hpc", None);
        let at = |secs: u64| {
            Some(time(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
            ))
        };
        let running = BatchJobStatus {
            phase: Some(Phase::Running),
            cluster: Some("hpc".into()),
            submit_time: at(1000),
            start_time: at(1030),
            ..BatchJobStatus::default()
        };
        let failed = BatchJobStatus {
            phase: Some(Phase::RetryPending),
            finish_time: at(1630),
            ..running.clone()
        };
        metrics.observe_attempt_end(&job, &BatchJobStatus::default(), &running);
        metrics.observe_attempt_end(&job, &running, &failed);
        // A later write of the same ended attempt is not a second end.
        metrics.observe_attempt_end(&job, &failed, &failed);
        let text = metrics.encode();
        for line in [
            "# TYPE batchbridge_job_queue_wait_seconds histogram",
            r#"batchbridge_job_queue_wait_seconds_sum{batchjob_namespace="ns",batchcluster="hpc",outcome="Failed"} 30.0"#,
            r#"batchbridge_job_queue_wait_seconds_count{batchjob_namespace="ns",batchcluster="hpc",outcome="Failed"} 1"#,
            r#"batchbridge_job_queue_wait_seconds_bucket{le="64.0",batchjob_namespace="ns",batchcluster="hpc",outcome="Failed"} 1"#,
            "# TYPE batchbridge_job_run_time_seconds histogram",
            r#"batchbridge_job_run_time_seconds_sum{batchjob_namespace="ns",batchcluster="hpc",outcome="Failed"} 600.0"#,
            r#"batchbridge_job_run_time_seconds_count{batchjob_namespace="ns",batchcluster="hpc",outcome="Failed"} 1"#,
            r#"batchbridge_job_run_time_seconds_bucket{le="256.0",batchjob_namespace="ns",batchcluster="hpc",outcome="Failed"} 0"#,
            r#"batchbridge_job_run_time_seconds_bucket{le="1024.0",batchjob_namespace="ns",batchcluster="hpc",outcome="Failed"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }

    #[test]
    fn cluster_reachability_is_one_series_per_batchcluster_until_forgotten_or_no_longer_led() {
        let metrics = Metrics::new();
        let cluster = |name: &str| ClusterLabels {
            batchjob_namespace: "ns".into(),
            batchcluster: name.into(),
        };
        metrics.set_cluster_reachable(&cluster("hpc"), true);
        metrics.set_cluster_reachable(&cluster("condor"), true);
        metrics.set_cluster_reachable(&cluster("condor"), false);
        let text = metrics.encode();
        for line in [
            "# TYPE batchbridge_cluster_reachable gauge",
            r#"batchbridge_cluster_reachable{batchjob_namespace="ns",batchcluster="hpc"} 1"#,
            r#"batchbridge_cluster_reachable{batchjob_namespace="ns",batchcluster="condor"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        metrics.forget_cluster(&cluster("condor"));
        let text = metrics.encode();
        assert!(!text.contains(r#"batchcluster="condor""#), "{text}");
        assert!(text.contains(
            r#"batchbridge_cluster_reachable{batchjob_namespace="ns",batchcluster="hpc"} 1"#
        ));
        metrics.set_leader(false);
        assert!(!metrics.encode().contains("batchbridge_cluster_reachable{"));
    }

    #[test]
    fn credential_expiry_is_a_timestamp_per_batchcluster_while_it_has_one() {
        let metrics = Metrics::new();
        let hpc = ClusterLabels {
            batchjob_namespace: "ns".into(),
            batchcluster: "hpc".into(),
        };
        let at = UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        metrics.set_credential_expiry(&hpc, Some(at));
        let line = r#"batchbridge_credential_expiry_timestamp_seconds{batchjob_namespace="ns",batchcluster="hpc"} 1800000000"#;
        assert!(
            metrics.encode().lines().any(|l| l == line),
            "{}",
            metrics.encode()
        );
        metrics.set_credential_expiry(&hpc, None);
        assert!(
            !metrics
                .encode()
                .contains("credential_expiry_timestamp_seconds{")
        );
        metrics.set_credential_expiry(&hpc, Some(at));
        metrics.forget_cluster(&hpc);
        assert!(
            !metrics
                .encode()
                .contains("credential_expiry_timestamp_seconds{")
        );
    }

    #[test]
    fn the_text_format_names_every_metric_with_help_and_type() {
        let metrics = Metrics::new();
        let hpc = ClusterLabels {
            batchjob_namespace: "ns".into(),
            batchcluster: "hpc".into(),
        };
        metrics.submitted(&hpc, true);
        metrics.submitted(&hpc, false);
        metrics.cancelled(&hpc, true);
        metrics.poll_duration(&hpc).observe(0.3);
        metrics.reconcile_failed("BatchJob", "Kube");
        metrics.set_leader(true);
        metrics.action_started("submit");
        metrics.action_started("submit");
        metrics.action_ended("submit");
        let store = kube::runtime::reflector::store::Writer::<BatchJob>::default();
        metrics.count_jobs_in(Some(store.as_reader()));
        let text = metrics.encode();
        for line in [
            "# TYPE batchbridge_submits counter",
            r#"batchbridge_submits_total{batchjob_namespace="ns",batchcluster="hpc"} 2"#,
            r#"batchbridge_submit_failures_total{batchjob_namespace="ns",batchcluster="hpc"} 1"#,
            r#"batchbridge_cancels_total{batchjob_namespace="ns",batchcluster="hpc"} 1"#,
            "# TYPE batchbridge_poll_duration_seconds histogram",
            r#"batchbridge_poll_duration_seconds_count{batchjob_namespace="ns",batchcluster="hpc"} 1"#,
            r#"batchbridge_reconcile_errors_total{controller="BatchJob",reason="Kube"} 1"#,
            "batchbridge_leader 1",
            "# TYPE batchbridge_build_info gauge",
            concat!(
                r#"batchbridge_build_info{version=""#,
                env!("CARGO_PKG_VERSION"),
                r#""} 1"#
            ),
            "# TYPE batchbridge_actions_in_progress gauge",
            r#"batchbridge_actions_in_progress{action="submit"} 1"#,
            "# TYPE batchbridge_jobs gauge",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }
}
