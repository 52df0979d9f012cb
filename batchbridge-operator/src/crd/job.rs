//! `BatchJob`: a batch job to run on a `BatchCluster`, and what became of it.

// `KubeSchema` copies each struct it derives for into a function body as a `pub` item, which
// the lint flags at the struct (kube-derive 5.0). Every type here is re-exported by `crd`.
#![allow(unreachable_pub)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DURATION_OF_AT_LEAST_1S;
use super::names::{
    DNS_SUBDOMAIN, LABEL_RULE, SUBDOMAIN_RULE, is_dns_label, is_dns_subdomain, refused,
};
use super::placement::{Move, Placement, PlacementStatus};
use super::staging::{JobInput, JobOutput};
// `Reason` alone is kube's CEL validation reason, which the derives bring into scope.
use crate::reason::Reason as StatusReason;

/// The desired state of a BatchJob: the script and what it needs. It cannot change while
/// the job is active (status.phase Submitted, Queued, Held, Running, Suspended or Unknown),
/// except suspend; editing the spec of a finished job, or of one waiting for its retry,
/// runs it again (setting or clearing suspend alone does not).
// The printer columns repeat `type_ = "string"`, which clippy takes for a repeated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "batchbridge.dev",
    version = "v1alpha1",
    kind = "BatchJob",
    namespaced,
    status = "BatchJobStatus",
    shortname = "bj",
    category = "batchbridge",
    doc = "A batch job (a bash script and the resources it needs) run on the batch system of a BatchCluster in the same namespace.",
    printcolumn(name = "Status", type_ = "string", json_path = ".status.phase", description = "Where the job is in its life"),
    printcolumn(name = "Job ID", type_ = "string", json_path = ".status.jobId", description = "The scheduler's id for the job"),
    printcolumn(name = "Partition", type_ = "string", json_path = ".status.queue", description = "The partition or queue the job was submitted to"),
    printcolumn(name = "User", type_ = "string", json_path = ".status.user", description = "The cluster user the job runs as"),
    printcolumn(name = "Started", type_ = "date", json_path = ".status.startTime", description = "Time since the job started running"),
    printcolumn(name = "Run Time", type_ = "string", json_path = ".status.runTime", description = "How long the finished job ran"),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".status.cluster", description = "The BatchCluster the job runs on"),
    printcolumn(name = "Exit Code", type_ = "integer", json_path = ".status.exitCode", description = "The script's exit code, once it exited"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(SPEC_FROZEN_WHILE_ACTIVE)
        .message(Message::Expression(SPEC_FROZEN_MESSAGE.into()))
        .field_path(".spec")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new("!has(self.spec.after) || self.spec.after.all(d, d.name != self.metadata.name)")
        .message("a BatchJob cannot run after itself: spec.after names its own name")
        .field_path(".spec.after")
        .reason(Reason::FieldValueInvalid),
)]
#[x_kube(
    validation = Rule::new("has(self.clusterRef) != has(self.placement)")
        .message("a BatchJob names exactly one of clusterRef (the one BatchCluster to run on) or placement (its candidate BatchClusters)")
        .reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.array) || !has(self.outputs) || size(self.outputs) == 0")
        .message("an array job cannot have outputs: every task would write the same objects")
        .reason(Reason::FieldValueForbidden),
)]
#[serde(rename_all = "camelCase")]
pub struct BatchJobSpec {
    /// The BatchCluster in this namespace to run on; exactly one of clusterRef and
    /// placement is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<ClusterReference>,
    /// The candidate BatchClusters of this namespace and how one is chosen (and whether the
    /// job moves when it waits too long); exactly one of clusterRef and placement is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// The job's script, run by bash on the cluster, verbatim. The scheduler directives in
    /// its header apply to the job as the cluster's scheduler would read them, the fields
    /// of this spec winning; one that would break how the job is followed fails the job
    /// unsubmitted, reason DirectiveRefused.
    #[x_kube(validation = Rule::new("self.trim().size() > 0").message("script must not be empty"))]
    #[schemars(length(min = 1, max = 1048576))]
    pub script: String,
    /// What the job needs from the cluster; the cluster's defaults for what is absent.
    #[serde(default)]
    pub resources: Resources,
    /// The partition (SLURM) or queue to submit to; the cluster's default partition when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    pub queue: Option<String>,
    /// Environment variables set for the script; each name is a letter or '_' followed by
    /// letters, digits and '_'.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.all(name, name.matches('^[A-Za-z_][A-Za-z0-9_]*$'))")
        .message("environment variable names must be a letter or '_' followed by letters, digits and '_'"))]
    #[schemars(extend("maxProperties" = 1024))]
    pub environment: BTreeMap<String, String>,
    /// The directory the script starts in, on the machine that runs it; the job's own
    /// directory on the cluster when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub working_dir: Option<String>,
    /// Run the script as an array of tasks, each with its index in $BATCHBRIDGE_TASK_INDEX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArraySpec>,
    /// Run the script inside a container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSpec>,
    /// Extra native submit options per scheduler name ("slurm": sbatch arguments such as
    /// "--qos=high"; "htcondor": submit description lines), passed as they are and never
    /// through a shell. Options for other schedulers than the cluster's are ignored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub passthrough: BTreeMap<String, Vec<String>>,
    /// Whether and when a failed job is submitted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    /// What the operator keeps of the job's output.
    #[serde(default)]
    pub output_policy: OutputPolicy,
    /// What happens to the job's files on the cluster (its script, output and exit codes in
    /// the BatchCluster's work directory, one directory per attempt) when the BatchJob is
    /// deleted: OnDelete (the default) removes them once the job has ended, Never keeps
    /// them. Like every spec field it is set at creation: changing it on a finished job
    /// runs the job again.
    #[serde(default)]
    pub cleanup: CleanupPolicy,
    /// Seconds after the job finished for good (no retry left, output collected) at which
    /// the operator deletes the BatchJob, like ttlSecondsAfterFinished of a batch/v1 Job;
    /// 0 deletes it as soon as it finished; absent never deletes it. Deleting it removes
    /// its files on the cluster unless cleanup is Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 2147483647))]
    pub ttl_seconds_after_finished: Option<u32>,
    /// While true, the job does not run, as a suspended batch/v1 Job has no pods: a job not
    /// submitted yet is not submitted, and a queued or running one is cancelled on its
    /// cluster (reason and condition Suspended False with reason Suspending until the
    /// scheduler confirms its end). It then waits Pending with reason Suspended and the
    /// condition Suspended True; the cancelled attempt is not counted as a failure (retries
    /// and retryPolicy are untouched). Clearing it (false or absent) submits the job again as
    /// its next attempt, never before the cancelled one ended. A job waiting for its retry
    /// keeps RetryPending and gets the condition Suspended True; a finished job is not
    /// affected. This is how a queueing controller such as Kueue gates a BatchJob: created
    /// suspended, released when admitted, suspended again when preempted. It is the one
    /// field that may change while the job is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Files put in the job's working directory before its script runs: keys of
    /// ConfigMaps and Secrets of this namespace, and objects of S3-compatible stores
    /// (fetched by the job itself). A Secret is used only if it carries the label
    /// batchbridge.dev/job-input=true. If one cannot be had the job fails unsubmitted,
    /// reason InputRefused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub inputs: Vec<JobInput>,
    /// Files of the job's working directory sent to S3-compatible stores when its script
    /// ends (by the job itself), each as its `when` says; the condition OutputsStaged says
    /// whether they arrived. Not for array jobs (every task would write the same objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub outputs: Vec<JobOutput>,
    /// Other BatchJobs of this namespace (never of another) this job runs after, each with
    /// the condition it waits for; the job stays Pending, reason WaitingForDependencies,
    /// until every one is met, whatever cluster each runs on. A name no BatchJob has yet is
    /// waited for: it may be created later. A dependency that can no longer be met (it
    /// ended the other way, was deleted before it ended, or never ran because of its own
    /// dependencies) fails this job unsubmitted, reason DependencyFailed; jobs that wait
    /// on each other in a circle fail unsubmitted, reason DependencyCycle. When this job's
    /// clusterRef has a scheduler that holds dependencies itself and every unmet one waits
    /// for Succeeded and is queued, held or running there with no retry left, the job is
    /// instead submitted at once, Queued, held by the scheduler, which ends it
    /// (DependencyFailed) if one fails. Failed and Ended are always waited for by the
    /// operator: a suspended or deleted dependency's job is cancelled, which a scheduler
    /// would count as its failure and end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub after: Vec<Dependency>,
}

/// Another BatchJob of the same namespace this job runs after, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// The BatchJob's name, in this namespace: a DNS subdomain (at most 253 lowercase
    /// letters, digits, '-' and '.').
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
    /// What the BatchJob must have done: Succeeded (the default), Failed (failed or was
    /// cancelled) or Ended (any of these).
    #[serde(default)]
    pub condition: AfterCondition,
}

/// The end of a BatchJob another one waits for (spec.after).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AfterCondition {
    /// It succeeded.
    #[default]
    Succeeded,
    /// It failed, with no retry left, or was cancelled.
    Failed,
    /// It ended, whichever way.
    Ended,
}

/// The CEL test that the spec's fields named (optional ones, each present in both or in
/// neither, and equal) are as they were, after the required script.
macro_rules! unchanged {
    ($($field:literal),+ $(,)?) => {
        concat!(
            "self.spec.script == oldSelf.spec.script",
            $(
                " && has(self.spec.", $field, ") == has(oldSelf.spec.", $field, ")",
                " && (!has(self.spec.", $field, ") || self.spec.", $field, " == oldSelf.spec.", $field, ")",
            )+
        )
    };
}

/// The root rule that freezes the spec of an active job, suspend excepted (setting it is
/// how an active job is suspended). It is a transition rule (it reads oldSelf), so the API
/// server checks it on updates only; status updates go through the status subresource,
/// which never changes the spec, so the operator is never refused. `Pending` (not yet
/// submitted), `RetryPending` (no attempt runs) and the terminal phases leave the spec
/// editable ([`Phase::spec_editable`]). CEL cannot compare an object less one field, so
/// the rule names every other field of the spec (a test keeps the list whole), with
/// `has()` rather than optionals (`.?`), whose cost the API server's estimate cannot bound.
const SPEC_FROZEN_WHILE_ACTIVE: &str = concat!(
    "!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase in ['Pending', 'RetryPending', 'Succeeded', 'Failed', 'Cancelled'] || (",
    unchanged!(
        "clusterRef",
        "placement",
        "resources",
        "queue",
        "environment",
        "workingDir",
        "array",
        "container",
        "passthrough",
        "retryPolicy",
        "outputPolicy",
        "cleanup",
        "ttlSecondsAfterFinished",
        "after",
        "inputs",
        "outputs",
    ),
    ")"
);

const SPEC_FROZEN_MESSAGE: &str = "'spec cannot change while the job is ' + oldSelf.status.phase + ': wait until it finishes, or delete it (which cancels it)'";

impl BatchJobSpec {
    /// What is wrong with the names this spec refers to, if anything (see
    /// [`BatchClusterSpec::check_names`](super::BatchClusterSpec::check_names)).
    pub fn check_names(&self) -> Result<(), String> {
        if let Some(name) = self.fixed_cluster()
            && !is_dns_subdomain(name)
        {
            return Err(refused("spec.clusterRef.name", name, SUBDOMAIN_RULE));
        }
        if let Some(placement) = &self.placement
            && let Some(name) = placement.clusters.iter().find(|name| !is_dns_label(name))
        {
            return Err(refused("spec.placement.clusters", name, LABEL_RULE));
        }
        if let Some(dependency) = self.after.iter().find(|d| !is_dns_subdomain(&d.name)) {
            return Err(refused("spec.after", &dependency.name, SUBDOMAIN_RULE));
        }
        Ok(())
    }

    /// A digest of the spec with suspend left out (64-bit FNV-1a of its JSON): two
    /// generations with the same digest differ only in suspend, which runs nothing again.
    /// FNV-1a because its value is written to the status, so it must not change with the
    /// Rust release as `std`'s hasher may; collisions need no defence here.
    ///
    /// ```
    /// use batchbridge_operator::crd::BatchJobSpec;
    ///
    /// let spec: BatchJobSpec = serde_json::from_str(r#"{"clusterRef": {"name": "hpc"}, "script": "true"}"#)?;
    /// let suspended = BatchJobSpec { suspend: Some(true), ..spec.clone() };
    /// let edited = BatchJobSpec { script: "false".into(), ..spec.clone() };
    /// assert_eq!(spec.digest(), suspended.digest());
    /// assert_ne!(spec.digest(), edited.digest());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn digest(&self) -> String {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let unsuspended = Self {
            suspend: None,
            ..self.clone()
        };
        // A spec is plain data: serialising it cannot fail.
        let json = serde_json::to_vec(&unsuspended).unwrap_or_default();
        let hash = json.iter().fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
        });
        format!("{hash:016x}")
    }

    /// The BatchCluster the job is bound to by spec.clusterRef, if it names one.
    pub fn fixed_cluster(&self) -> Option<&str> {
        self.cluster_ref
            .as_ref()
            .map(|reference| reference.name.as_str())
    }
}

/// A BatchCluster in the same namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterReference {
    /// The BatchCluster's name, in this namespace: a DNS subdomain (at most 253 lowercase
    /// letters, digits, '-' and '.').
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
}

/// What a job needs from the cluster, per task. Absent fields take the cluster's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// CPU cores per task, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpus: Option<u32>,
    /// Memory per task as a Kubernetes quantity, such as "4Gi" or "512Mi".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))")
        .message("memory must be a positive quantity such as 4Gi or 512Mi"))]
    #[schemars(length(max = 64))]
    pub memory: Option<String>,
    /// Local scratch disk per task as a Kubernetes quantity, such as "20Gi".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))")
        .message("disk must be a positive quantity such as 20Gi"))]
    #[schemars(length(max = 64))]
    pub disk: Option<String>,
    /// The wall-clock limit as a duration such as "30m" or "1h30m", at least 1s; the job is
    /// stopped when it runs longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(DURATION_OF_AT_LEAST_1S)
        .message("wallTime must be a duration of at least 1s, such as 30m or 1h30m"))]
    #[schemars(length(max = 64))]
    pub wall_time: Option<kube::core::Duration>,
    /// Nodes per task, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub nodes: Option<u32>,
    /// GPUs per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

/// Run the script once per task index 0..count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArraySpec {
    /// How many tasks, at least 1.
    #[schemars(range(min = 1))]
    pub count: u32,
    /// How many tasks may run at once, at least 1; unbounded when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallel: Option<u32>,
}

/// A container image to run the script in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// The image, such as "docker://python:3.12" or the path of a .sif file on the cluster.
    #[schemars(length(min = 1, max = 4096))]
    pub image: String,
    /// The container runtime on the cluster.
    #[serde(default)]
    pub runtime: ContainerRuntime,
}

/// A container runtime on the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContainerRuntime {
    /// Apptainer (formerly Singularity), the usual runtime on HPC clusters.
    #[default]
    Apptainer,
    /// SingularityCE.
    Singularity,
    /// Docker.
    Docker,
    /// Podman.
    Podman,
}

/// When a failed job is submitted again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// How many times a failed job is submitted again, with backoff; 0 never retries.
    #[serde(default)]
    #[schemars(range(max = 100))]
    pub max_retries: u32,
    /// Which failures are retried (NonZeroExitCode, NodeFailure, Timeout, Preempted,
    /// Unknown); every failure when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub retry_on: Vec<RetryReason>,
}

/// Why a job failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RetryReason {
    /// The script exited with a code other than 0.
    NonZeroExitCode,
    /// A node the job ran on failed.
    NodeFailure,
    /// The job ran out of its wall time.
    Timeout,
    /// The scheduler preempted the job for another.
    Preempted,
    /// Any other or unknown cause.
    Unknown,
}

impl From<StatusReason> for RetryReason {
    /// The entry of `retryOn` a failure with this status reason falls under.
    ///
    /// ```
    /// use batchbridge_operator::crd::RetryReason;
    /// use batchbridge_operator::reason::Reason;
    ///
    /// assert_eq!(RetryReason::from(Reason::Timeout), RetryReason::Timeout);
    /// assert_eq!(RetryReason::from(Reason::OutOfMemory), RetryReason::Unknown);
    /// ```
    fn from(reason: StatusReason) -> Self {
        match reason {
            StatusReason::NonZeroExitCode => Self::NonZeroExitCode,
            StatusReason::Timeout => Self::Timeout,
            StatusReason::NodeFailure => Self::NodeFailure,
            StatusReason::Preempted => Self::Preempted,
            _ => Self::Unknown,
        }
    }
}

/// What happens to a job's files on the cluster when its BatchJob is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CleanupPolicy {
    /// Remove them, once the job has ended (an active job is cancelled first).
    #[default]
    OnDelete,
    /// Keep them in the cluster's work directory.
    Never,
}

/// What the operator keeps of a finished job's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputPolicy {
    /// How many bytes of the end of the output go into status.outputTail (for an array job,
    /// shared by the tasks' tails in status.taskOutputs); 0 keeps none.
    #[serde(default = "default_tail_bytes")]
    #[schemars(range(max = 65536))]
    pub tail_bytes: u32,
    /// Whether to keep the whole output (capped at the size a ConfigMap can hold) in a
    /// ConfigMap named after the job (NAME-output) and owned by it, under the keys stdout
    /// and stderr. An array job's tasks are under task-N.stdout and task-N.stderr instead:
    /// the first 100 tasks, sharing the cap.
    #[serde(default)]
    pub config_map: bool,
    /// Whether to create a pod (NAME-log) that prints the output, so that "kubectl logs"
    /// shows it. It starts when the job starts running and prints the output as it grows
    /// (read about once a second), so "kubectl logs -f NAME-log" follows it live, then
    /// ends shortly after the job. For an array job it follows every task, 4 tasks a second
    /// in turn, printing each piece after a line "==> task N <==" whenever the task changes,
    /// as "tail -f" does with several files.
    #[serde(default)]
    pub log_pod: bool,
}

fn default_tail_bytes() -> u32 {
    4096
}

impl Default for OutputPolicy {
    fn default() -> Self {
        Self {
            tail_bytes: default_tail_bytes(),
            config_map: false,
            log_pod: false,
        }
    }
}

/// What the operator last saw of a BatchJob.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchJobStatus {
    /// Where the job is in its life (the phase's own description lists them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The scheduler's id for the job, written as soon as it was submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The partition or queue the job runs in: the one the scheduler reports, else the one
    /// it was submitted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The cluster user the job runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The BatchCluster the current attempt runs on: spec.clusterRef's, or the one
    /// placement chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// What the candidates answered when placement last asked them (spec.placement only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementStatus>,
    /// A move in progress: the waiting job is being cancelled on one cluster to be
    /// submitted to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving: Option<Move>,
    /// The moves that ended, oldest first: moved, or kept where the job started first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub moves: Vec<Move>,
    /// Every BatchCluster an attempt of this job was submitted to (retries, re-runs after a
    /// clusterRef change, moves), in name order: deleting the BatchJob removes the
    /// attempts' files from each of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub clusters_used: Vec<String>,
    /// The scheduler's own word for the job's state, as its tools print it; shown, never
    /// interpreted (phase and reason are what the operator understood).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_state: Option<String>,
    /// Why the job is in its phase, in one CamelCase word (the README's troubleshooting
    /// table lists them); for a failed job, the cause retryPolicy.retryOn names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<StatusReason>,
    /// A human-readable explanation of the phase (with the scheduler's own reason, when it
    /// gives one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The script's exit code, once it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the script, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// When the job was submitted to the scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_time: Option<Time>,
    /// When the job started running; absent until it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the scheduler expects the queued job to start (its backfill estimate), if it
    /// says; absent once the job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start_time: Option<Time>,
    /// When the job finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_time: Option<Time>,
    /// How long the finished job ran, from startTime to finishTime, such as "1m5s".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_time: Option<String>,
    /// How many times the job has been submitted (retries and re-runs after a spec edit
    /// count).
    #[serde(default)]
    pub attempts: u32,
    /// How many of those attempts were retries of the current spec after a failure (a spec
    /// edit starts again at 0); the retry policy's maxRetries bounds it.
    #[serde(default)]
    pub retries: u32,
    /// The metadata.generation of the spec the current attempt runs (a generation that only
    /// set or cleared suspend is observed as the same spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The digest of the spec the current attempt runs, suspend left out: a new generation
    /// with the same digest only set or cleared suspend, which is no edit that runs the job
    /// again or restarts its retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub spec_digest: Option<String>,
    /// How the tasks of an array job are spread over states.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskCounts>,
    /// The end of the job's output (stdout, then stderr), at most outputPolicy.tailBytes. An
    /// array job has none: the tails of its tasks are in taskOutputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// For an array job, the end of each task's output (stdout, then stderr), in task order
    /// from task 0, so that item N holds task N's. The tails share
    /// outputPolicy.tailBytes: at most 32 tasks are shown, each tail at least 64 bytes, so a
    /// large array or a small tailBytes shows fewer tasks (taskOutputsOmitted counts the
    /// others). The ConfigMap (outputPolicy.configMap) holds more tasks, and the log pod
    /// (outputPolicy.logPod) prints the whole output of every task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub task_outputs: Vec<TaskOutput>,
    /// How many tasks of an array job, the last ones, have no entry in taskOutputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_outputs_omitted: Option<u32>,
    /// The job's conditions in the standard Kubernetes form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Where the job is in its life: Pending (not submitted yet, or held back by spec.suspend
/// with nothing on the cluster), Submitted (being submitted),
/// then the scheduler's view: Queued, Held, Running, Suspended; RetryPending while a failed
/// attempt waits for its retry; and at the end, for good, Succeeded, Failed or Cancelled;
/// Unknown when no source can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Accepted by Kubernetes, not yet submitted (waiting for its cluster or Secret, say),
    /// or held back by spec.suspend (reason Suspended), its cancelled attempt over.
    Pending,
    /// Being submitted: the scheduler may already have the job, whose id is not known yet.
    Submitted,
    /// Waiting in the scheduler's queue.
    Queued,
    /// Kept from running until released.
    Held,
    /// Running.
    Running,
    /// Started, then paused by the scheduler or an administrator.
    Suspended,
    /// Finished with exit code 0 (every task, for an array).
    Succeeded,
    /// Finished unsuccessfully, with no retry left: a non-zero exit, a signal, a time or
    /// memory limit, a node failure.
    Failed,
    /// An attempt failed and the retry policy submits the job again after a backoff; the
    /// reason says why the attempt failed.
    RetryPending,
    /// Removed before finishing, by a user or an administrator.
    Cancelled,
    /// No source could tell what became of the job.
    Unknown,
}

/// How the tasks of an array job are spread over states.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskCounts {
    /// Tasks in the array.
    pub total: u32,
    /// Tasks waiting: queued, held or unknown.
    pub pending: u32,
    /// Tasks running or suspended.
    pub running: u32,
    /// Tasks that succeeded.
    pub succeeded: u32,
    /// Tasks that failed.
    pub failed: u32,
    /// Tasks that were cancelled.
    pub cancelled: u32,
}

/// The end of one array task's output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskOutput {
    /// The task's index, its $BATCHBRIDGE_TASK_INDEX.
    pub index: u32,
    /// The end of the task's stdout followed by its stderr.
    pub tail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule lists phases by name: exactly the editable ones.
    #[test]
    fn the_frozen_spec_rule_names_the_right_phases() {
        let all = [
            Phase::Pending,
            Phase::Submitted,
            Phase::Queued,
            Phase::Held,
            Phase::Running,
            Phase::Suspended,
            Phase::Succeeded,
            Phase::Failed,
            Phase::RetryPending,
            Phase::Cancelled,
            Phase::Unknown,
        ];
        for phase in all {
            let name = serde_json::to_value(phase).unwrap_or_default();
            let listed = SPEC_FROZEN_WHILE_ACTIVE
                .contains(&format!("'{}'", name.as_str().unwrap_or_default()));
            assert_eq!(listed, phase.spec_editable(), "{phase:?}");
        }
    }

    /// The rule compares every field of the spec but suspend: a field added to the spec
    /// and not to the rule would be editable while the job runs.
    #[test]
    fn the_frozen_spec_rule_names_every_field_but_suspend() {
        let crd =
            serde_json::to_value(<BatchJob as kube::CustomResourceExt>::crd()).unwrap_or_default();
        let fields = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"];
        let names: Vec<&String> = fields
            .as_object()
            .map(|f| f.keys().collect())
            .unwrap_or_default();
        assert!(names.len() > 10, "{names:?}");
        for name in names {
            let compared = SPEC_FROZEN_WHILE_ACTIVE
                .contains(&format!("self.spec.{name} == oldSelf.spec.{name}"));
            assert_eq!(compared, name != "suspend", "{name}");
        }
    }
}
