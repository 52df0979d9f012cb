//! `BatchCluster`: a batch system the operator reaches, and how.

// `KubeSchema` copies each struct it derives for into a function body as a `pub` item, which
// the lint flags at the struct (kube-derive 5.0). Every type here is re-exported by `crd`.
#![allow(unreachable_pub)]

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::names::{
    DNS_SUBDOMAIN, HOST, HOST_RULE, SUBDOMAIN_RULE, USER, USER_RULE, is_dns_subdomain, is_host,
    is_user, refused,
};
use super::{DURATION_OF_AT_LEAST_1S, DURATION_OF_AT_MOST_1S};

/// The desired state of a BatchCluster: which scheduler, where it is, and the credentials
/// and defaults to use with it.
// The printer columns repeat `type_ = "string"`, which clippy takes for a repeated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "batchbridge.dev",
    version = "v1alpha1",
    kind = "BatchCluster",
    namespaced,
    status = "BatchClusterStatus",
    shortname = "bcl",
    category = "batchbridge",
    doc = "A batch system (SLURM, HTCondor, PBS, the operator's local backend or a custom one) that BatchJobs in this namespace run on, reached over SSH as a regular user.",
    printcolumn(
        name = "Scheduler",
        type_ = "string",
        json_path = ".spec.scheduler",
        description = "The batch system"
    ),
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".spec.ssh.host",
        description = "The SSH host the operator logs in to"
    ),
    printcolumn(
        name = "Reachable",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Reachable\")].status",
        description = "Whether the last probe reached the scheduler"
    ),
    printcolumn(
        name = "Active Jobs",
        type_ = "integer",
        json_path = ".status.activeJobs",
        description = "BatchJobs on this cluster that have not finished"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("!(self.scheduler in ['slurm', 'htcondor', 'pbs']) || has(self.ssh)")
        .message("spec.ssh is required: slurm, htcondor and pbs clusters are reached over SSH")
        .field_path(".ssh")
        .reason(Reason::FieldValueRequired),
    validation = Rule::new("!has(self.ssh) || has(self.knownHosts)")
        .message("spec.knownHosts is required with spec.ssh: host keys are always verified")
        .field_path(".knownHosts")
        .reason(Reason::FieldValueRequired),
    validation = Rule::new("!has(self.ssh) || has(self.secretRef)")
        .message("spec.secretRef is required with spec.ssh: it holds the SSH key or password")
        .field_path(".secretRef")
        .reason(Reason::FieldValueRequired),
)]
#[serde(rename_all = "camelCase")]
pub struct BatchClusterSpec {
    /// The batch system: slurm, htcondor, pbs, local (jobs run as processes beside the operator
    /// itself, for trying things out), or the name of a custom backend registered in the
    /// operator (lowercase letters, digits and '-').
    pub scheduler: Scheduler,
    /// Where to log in: the cluster's login node. Required for slurm, htcondor and pbs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshEndpoint>,
    /// The Secret in this namespace holding the SSH credential: of type
    /// kubernetes.io/ssh-auth (a private key under the key ssh-privatekey) or
    /// kubernetes.io/basic-auth (a password under the key password; the login is ssh.user),
    /// or batchbridge.dev/kerberos-keytab (a Kerberos keytab under the key keytab and its
    /// principal under the key principal: each login gets a ticket from it into a private
    /// credential cache and logs in with GSSAPI; the operator's Kerberos configuration is
    /// its KRB5_CONFIG, else /etc/krb5.conf). Required with ssh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// The login node's host keys in OpenSSH known_hosts format (what "ssh-keyscan -p PORT
    /// HOST" prints, checked out of band). Host keys are always verified, so this is
    /// required with ssh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub known_hosts: Option<String>,
    /// The directory on the cluster that holds the job directories: absolute, or relative to
    /// the login directory, on a file system the compute nodes share. The backend's default
    /// (under ~/.batchbridge) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub work_dir: Option<String>,
    /// How often the operator asks the scheduler about the active jobs of this cluster (one
    /// batched query for all of them), as a duration such as "10s" or "1m"; at least 1s.
    #[serde(default = "default_poll_interval")]
    #[x_kube(validation = Rule::new(DURATION_OF_AT_LEAST_1S)
        .message("pollInterval must be a duration of at least 1s, such as 10s or 1m"))]
    #[schemars(length(max = 64))]
    pub poll_interval: kube::core::Duration,
    /// Whether the cluster pushes job events to the operator (true, the default): one
    /// long-lived command on the cluster, over the operator's SSH connection, reads what
    /// the job wrappers record when a task starts and ends (for HTCondor, its user job
    /// event log) and passes it on, so job changes show within about a second and
    /// pollInterval can be long (say 1m): polls then only catch what events cannot tell (a
    /// job cancelled before it started, a node failure, a purge). The command runs no
    /// scheduler query; it lists one directory twice a second (HTCondor: tails one file).
    /// false: polls only.
    #[serde(default = "push_events_by_default")]
    pub push_events: bool,
    /// What jobs get when they do not choose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<ClusterDefaults>,
    /// The most BatchJobs of this cluster the operator keeps active on it at once (submitted,
    /// queued, held or running): the rest wait Pending with reason SubmitLimit and are
    /// submitted in creation order as those end. For staying under a limit the site sets on
    /// queued jobs but does not enforce, or below one it does. A submit limit the scheduler
    /// enforces holds jobs the same way without it (reason SubmitLimit, the scheduler's
    /// message). Absent: no limit of the operator's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queued: Option<u32>,
    /// How the operator hands this cluster's new jobs to its scheduler: BatchJobs waiting to
    /// be submitted are gathered into batches, each sent as one submit of several jobs.
    /// Absent: the defaults of each field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit: Option<SubmitSettings>,
}

/// How a cluster's new jobs are gathered into batches and sent to its scheduler.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubmitSettings {
    /// The most jobs one batch submits, from 1 to 1000; 200 when absent. 1 submits every
    /// job on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub batch_size: Option<u32>,
    /// How long the first job waiting to be submitted waits for others to join its batch,
    /// as a duration such as "100ms", from 0s to 1s; 100ms when absent. A batch goes as
    /// soon as it is full, or at once when the delay is 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(DURATION_OF_AT_MOST_1S)
        .message("submit.batchDelay must be a duration from 0s to 1s, such as 100ms"))]
    #[schemars(length(max = 64))]
    pub batch_delay: Option<kube::core::Duration>,
    /// How many batches are submitted at once, from 1 to 5; 4 when absent. Each takes
    /// one of the commands the operator's SSH connection to the cluster runs at once, some
    /// of which stay free for polls and output fetches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 5))]
    pub concurrency: Option<u32>,
}

fn push_events_by_default() -> bool {
    true
}

fn default_poll_interval() -> kube::core::Duration {
    std::time::Duration::from_secs(10).into()
}

/// A batch system. In YAML it is one word: `slurm`, `htcondor`, `pbs`, `local`, or the name of a
/// custom backend registered in the operator.
///
/// ```
/// use batchbridge_operator::crd::Scheduler;
///
/// assert_eq!(Scheduler::from("htcondor".to_owned()), Scheduler::Htcondor);
/// assert_eq!(Scheduler::from("pbs".to_owned()), Scheduler::Pbs);
/// assert_eq!(Scheduler::from("lsf".to_owned()), Scheduler::Custom("lsf".into()));
/// assert_eq!(Scheduler::Slurm.as_str(), "slurm");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Scheduler {
    /// SLURM, driven with sbatch, squeue, sacct and scancel over SSH.
    Slurm,
    /// HTCondor, driven with condor_submit, condor_q, condor_history and condor_rm over SSH.
    Htcondor,
    /// PBS (OpenPBS, PBS Professional), driven with qsub, qstat and qdel over SSH.
    Pbs,
    /// The operator's own local backend: jobs run as processes beside the operator.
    Local,
    /// A backend registered in the operator under this name.
    Custom(String),
}

impl Scheduler {
    /// The scheduler's name as written in YAML.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Slurm => "slurm",
            Self::Htcondor => "htcondor",
            Self::Pbs => "pbs",
            Self::Local => "local",
            Self::Custom(name) => name,
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for Scheduler {
    fn from(name: String) -> Self {
        match name.as_str() {
            "slurm" => Self::Slurm,
            "htcondor" => Self::Htcondor,
            "pbs" => Self::Pbs,
            "local" => Self::Local,
            _ => Self::Custom(name),
        }
    }
}

impl From<Scheduler> for String {
    fn from(scheduler: Scheduler) -> Self {
        match scheduler {
            Scheduler::Custom(name) => name,
            builtin => builtin.as_str().to_owned(),
        }
    }
}

impl JsonSchema for Scheduler {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Scheduler".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // A DNS label: the built-in names and any custom backend's name fit it.
        json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        })
    }
}

/// An SSH server to log in to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshEndpoint {
    /// The host name or address of the login node: a DNS name (letters, digits and '-' in
    /// dot-separated parts, each starting and ending with a letter or digit), an IPv4
    /// address, or an IPv6 address without brackets; never starting with '-'.
    #[schemars(length(min = 1, max = 253), regex(pattern = HOST))]
    pub host: String,
    /// The SSH server's TCP port, 1 to 65535.
    #[serde(default = "default_ssh_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// The (regular, unprivileged) user to log in as; jobs run as this user. At most 64
    /// letters, digits, '.', '_' and '-', not starting with '-'.
    #[schemars(length(min = 1, max = 64), regex(pattern = USER))]
    pub user: String,
    /// The SSH servers (bastions, gateways) the connection passes through on its way to
    /// host, nearest first: the operator connects to the first, which forwards to the
    /// next, and the last to host. Each has its own credential and known hosts, its host
    /// key is always verified, and nothing (agent, ports) is forwarded to it. At most 4.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub jump_hosts: Vec<SshJumpHost>,
}

/// One SSH server on the way to the login node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshJumpHost {
    /// The host name or address of this hop, as the previous hop (or the operator, for the
    /// first) reaches it; the same rules as ssh.host, and the operator's allowed SSH
    /// targets apply to it as to ssh.host.
    #[schemars(length(min = 1, max = 253), regex(pattern = HOST))]
    pub host: String,
    /// This hop's SSH port, 1 to 65535.
    #[serde(default = "default_ssh_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// The user to log in to this hop as (the same rules as ssh.user).
    #[schemars(length(min = 1, max = 64), regex(pattern = USER))]
    pub user: String,
    /// The Secret in this namespace holding this hop's own SSH credential, as spec.secretRef
    /// does the login node's: of type kubernetes.io/ssh-auth (a private key under the key
    /// ssh-privatekey) or kubernetes.io/basic-auth (a password under the key password; the
    /// login is this hop's user).
    pub secret_ref: SecretReference,
    /// This hop's host keys in OpenSSH known_hosts format (what "ssh-keyscan -p PORT HOST"
    /// prints for it, checked out of band): a hop whose key is not among them is refused,
    /// and the BatchCluster's Reachable condition names it.
    #[schemars(length(min = 1))]
    pub known_hosts: String,
}

fn default_ssh_port() -> u16 {
    22
}

/// A Secret in the same namespace as the resource that refers to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretReference {
    /// The Secret's name, in this namespace: a DNS subdomain (at most 253 lowercase
    /// letters, digits, '-' and '.').
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
}

impl BatchClusterSpec {
    /// What is wrong with the names and addresses of this spec, if anything: one line a
    /// tenant can act on, naming the field and the rule (never the operator's identity).
    pub fn check_names(&self) -> Result<(), String> {
        if let Some(secret) = &self.secret_ref
            && !is_dns_subdomain(&secret.name)
        {
            return Err(refused("spec.secretRef.name", &secret.name, SUBDOMAIN_RULE));
        }
        if let Some(ssh) = &self.ssh {
            if !is_host(&ssh.host) {
                return Err(refused("spec.ssh.host", &ssh.host, HOST_RULE));
            }
            if !is_user(&ssh.user) {
                return Err(refused("spec.ssh.user", &ssh.user, USER_RULE));
            }
            for (index, hop) in ssh.jump_hosts.iter().enumerate() {
                let field = |name: &str| format!("spec.ssh.jumpHosts[{index}].{name}");
                if !is_host(&hop.host) {
                    return Err(refused(&field("host"), &hop.host, HOST_RULE));
                }
                if !is_user(&hop.user) {
                    return Err(refused(&field("user"), &hop.user, USER_RULE));
                }
                if !is_dns_subdomain(&hop.secret_ref.name) {
                    return Err(refused(
                        &field("secretRef.name"),
                        &hop.secret_ref.name,
                        SUBDOMAIN_RULE,
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Defaults the cluster applies to jobs that do not choose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDefaults {
    /// The partition (SLURM) or queue for jobs without spec.queue; the scheduler's own
    /// default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub partition: Option<String>,
    /// The account jobs are charged to (SLURM --account); the user's default account when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub account: Option<String>,
}

/// What the operator last saw of a BatchCluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchClusterStatus {
    /// The cluster's conditions; Reachable says whether the last probe logged in and got
    /// an answer from the scheduler, and why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The scheduler's version, as the last successful probe reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_version: Option<String>,
    /// When the operator last probed the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    /// How many BatchJobs on this cluster had not finished at the last probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_jobs: Option<u32>,
    /// The metadata.generation of the spec this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The validity of the Secret's SSH certificate, when it holds one (`ssh-certificate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<CredentialStatus>,
}

/// What the operator read of the SSH certificate a BatchCluster logs in with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialStatus {
    /// The key id its issuer gave it (`ssh-keygen -I`), which the login node logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// When it became valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_after: Option<Time>,
    /// When it expires; absent for a certificate valid for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
}
