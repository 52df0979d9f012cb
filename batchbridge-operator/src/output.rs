//! A job's output: the tail kept in status, the whole (capped) in a ConfigMap the job owns,
//! and a log pod that prints it for `kubectl logs`, following it while the job runs.
//!
//! The log pod runs the operator's own image in its `fetch-output` mode
//! ([`fetch_output_to`]). It reaches the cluster itself, with the BatchCluster's Secret
//! (and each jump host's) mounted read-only and the rest passed as environment variables,
//! so it needs no access to the Kubernetes API at all.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use batchbridge_core::follow::{ArrayOutputFollower, OutputFollower, TaskHeadings};
use batchbridge_core::shell::{
    HostKeys, JumpHost, KerberosKeytab, Keytab, SshAuth, SshConfig, SshShell,
};
use batchbridge_core::{JobId, JobOutput, OutputRequest, Tracker};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, EmptyDirVolumeSource, EnvVar, Pod, PodSecurityContext,
    PodSpec, ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use std::sync::Arc;

use crate::cluster::Connection;
use crate::cluster::credentials::{
    BASIC_AUTH_TYPE, KEYTAB, KEYTAB_TYPE, PASSWORD, PRINCIPAL, SSH_PRIVATE_KEY,
};
use crate::cluster::output_reads::READS_PER_CALL;
use crate::cluster::registry::ssh_backend;
use crate::crd::names::{JOB_UID_LABEL, derived_name};
use crate::crd::{BatchClusterSpec, BatchJob, OutputPolicy, Scheduler, TaskOutput};

/// What a job's output objects are written with: the API client, the field manager of the
/// writes, and the image the log pods run.
#[derive(Clone)]
pub struct Writer {
    /// The Kubernetes client.
    pub client: Client,
    /// The field manager of the ConfigMap writes.
    pub field_manager: String,
    /// The image log pods run (the operator's own).
    pub image: String,
}

/// Why a log pod was not started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// The most output a ConfigMap keeps, per stream: two of these stay under the 1 MiB
/// object limit with room for the metadata. An array's tasks share it.
pub const CONFIG_MAP_CAP: u64 = 480 * 1024;
/// The most tasks of an array whose output the ConfigMap keeps (from task 0); their streams
/// share [`CONFIG_MAP_CAP`], so each keeps at least 4.8 KiB.
const CONFIG_MAP_TASKS: u32 = 100;
/// The most tasks of an array whose tails status shows (`status.taskOutputs`, from task 0).
const STATUS_TASKS: u32 = 32;
/// The least a task's tail in status may hold: when `tailBytes` shared by the tasks would
/// give each less, status shows fewer tasks.
const MIN_TASK_TAIL: u32 = 64;
/// The group of the operator image's user (uid and gid 65532, see the Dockerfile).
const IMAGE_GROUP: i64 = 65532;
/// The environment variable that hands a log pod the operator's Kerberos configuration
/// (the text of a krb5.conf), which its `kinit` reads for a keytab Secret.
pub const KRB5_CONF_VAR: &str = "BATCHBRIDGE_KRB5_CONF";

/// Where the log pod mounts the cluster's Secret.
const SECRET_MOUNT: &str = "/var/run/batchbridge/credentials";

/// Where the log pod finds the Secret of jump host `number` (from 1): beside the cluster's
/// own, `credentials`.
fn jump_host_mount(credentials: &std::path::Path, number: usize) -> std::path::PathBuf {
    credentials.with_file_name(format!("jump-host-{number}"))
}
/// What the log pod asks for and may use: one ssh client and a process that copies its
/// output, about 10 MiB and no CPU to speak of. A namespace with a ResourceQuota on CPU or
/// memory refuses pods that name none.
const LOG_POD_REQUESTS: [(&str, &str); 2] = [("cpu", "10m"), ("memory", "32Mi")];
const LOG_POD_LIMITS: [(&str, &str); 2] = [("cpu", "200m"), ("memory", "128Mi")];
/// How many times a write of the output ConfigMap or log pod is tried when the API server
/// fails in passing (5xx, 429, no answer), 1 s apart and doubling; then the output is
/// reported not written rather than fetched and written again.
const WRITE_TRIES: u32 = 3;

/// What was collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// The tail for status.outputTail, if the policy keeps one and the job is no array.
    pub tail: Option<String>,
    /// For an array, the tails for status.taskOutputs, if the policy keeps tails.
    pub task_outputs: Vec<TaskOutput>,
    /// For an array, how many tasks have no tail in `task_outputs` (status.taskOutputsOmitted);
    /// `None` when none are left out or the policy keeps no tails.
    pub task_outputs_omitted: Option<u32>,
    /// One line for the OutputCollected condition.
    pub summary: String,
    /// The objects the policy asked for that were not written because an object of that
    /// name exists and belongs to something else (`ConfigMap NAME`, `Pod NAME`): the
    /// operator never overwrites or deletes what its job does not own.
    pub refused: Vec<String>,
    /// The objects the policy asked for that the API server did not take, each with its
    /// answer's code (`ConfigMap NAME (422 Invalid)`); the details are in the operator's log.
    pub unwritten: Vec<String>,
}

/// How much of which tasks' output a collection keeps, from the output policy and the
/// array's size: a pure function of the two, so that the caps are tested without a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    /// The tasks in the array, `None` for a job that is no array.
    tasks: Option<u32>,
    /// How many tasks (from task 0) get a tail in status: 0 or 1 for a job that is no array.
    status_tasks: u32,
    /// The bytes of each of those tails.
    status_tail: u32,
    /// How many tasks (from task 0) the ConfigMap keeps: 0 or 1 for a job that is no array.
    map_tasks: u32,
    /// The bytes the ConfigMap keeps of each of their streams.
    map_stream: u64,
}

impl Plan {
    fn new(policy: &OutputPolicy, tasks: Option<u32>) -> Self {
        let count = tasks.unwrap_or(1);
        let status_tasks = if policy.tail_bytes == 0 {
            0
        } else {
            count
                .min(STATUS_TASKS)
                .min((policy.tail_bytes / MIN_TASK_TAIL).max(1))
        };
        let map_tasks = if policy.config_map {
            count.min(CONFIG_MAP_TASKS)
        } else {
            0
        };
        Self {
            tasks,
            status_tasks,
            status_tail: policy.tail_bytes / status_tasks.max(1),
            map_tasks,
            map_stream: CONFIG_MAP_CAP / u64::from(map_tasks.max(1)),
        }
    }

    /// How many tasks (from task 0) to fetch: those status or the ConfigMap keep, and at
    /// least the first, whose sizes the summary reports when nothing is kept.
    fn fetched(&self) -> u32 {
        self.status_tasks.max(self.map_tasks).max(1)
    }

    /// What to fetch of task `task`: the larger of what status and the ConfigMap keep.
    fn request(&self, task: u32) -> OutputRequest {
        let status = if task < self.status_tasks {
            u64::from(self.status_tail)
        } else {
            0
        };
        let map = if task < self.map_tasks {
            self.map_stream
        } else {
            0
        };
        let request = OutputRequest::tail(status.max(map));
        match self.tasks {
            Some(_) => request.for_task(task),
            None => request,
        }
    }
}

/// Fetches job `id`'s output (for an array, that of every task the policy keeps) and keeps
/// it as `job`'s output policy says, within the caps: [`CONFIG_MAP_CAP`] per stream in the
/// ConfigMap, shared by at most 100 tasks of an array; for an array, at most 32 tails in
/// status that share `tailBytes`, at least 64 bytes each.
///
/// Only fetching fails the collection: an object the API server does not take is reported
/// in [`Collected::unwritten`], so the job's end is written whatever becomes of its objects.
pub async fn collect(
    writer: &Writer,
    job: &BatchJob,
    connection: &Connection,
    id: &JobId,
) -> batchbridge_core::Result<Collected> {
    let policy = &job.spec.output_policy;
    let plan = Plan::new(policy, job.spec.array.map(|array| array.count));
    // In task order, asked for together: the connection's output reads put them in as
    // few calls as their sizes allow.
    let outputs: Vec<JobOutput> = stream::iter(0..plan.fetched())
        .map(|task| async move { connection.fetch_output(id, &plan.request(task)).await })
        .buffered(READS_PER_CALL)
        .try_collect()
        .await?;
    let namespace = job.namespace().unwrap_or_default();
    let (mut refused, mut unwritten) = (Vec::new(), Vec::new());
    let mut sort = |object: String, written: kube::Result<bool>| match written {
        Ok(true) => {}
        Ok(false) => refused.push(object),
        Err(err) => {
            tracing::warn!(job = %job.name_any(), %object, error = %err, "cannot write the output");
            unwritten.push(format!("{object} ({})", answer(&err)));
        }
    };
    if policy.config_map {
        let map = config_map(job, &plan, &outputs);
        let api = Api::<ConfigMap>::namespaced(writer.client.clone(), &namespace);
        let written = tried(|| write_config_map(&api, &writer.field_manager, job, &map)).await;
        sort(format!("ConfigMap {}", map.name_any()), written);
    }
    if policy.log_pod {
        let pod = operator_log_pod(writer, job, connection, id);
        let api = Api::<Pod>::namespaced(writer.client.clone(), &namespace);
        let written = tried(|| replace_pod(&api, job, &pod)).await;
        sort(format!("Pod {}", pod.name_any()), written);
    }
    let mut collected = kept(&plan, &outputs, refused);
    collected.unwritten = unwritten;
    Ok(collected)
}

/// `write` until it succeeds, fails for good, or has been tried [`WRITE_TRIES`] times.
async fn tried<F, Fut>(mut write: F) -> kube::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<bool>>,
{
    let mut pause = Duration::from_secs(1);
    let mut tries = 1;
    loop {
        match write().await {
            Err(err) if passing(&err) && tries < WRITE_TRIES => {
                tokio::time::sleep(pause).await;
                pause *= 2;
                tries += 1;
            }
            written => return written,
        }
    }
}

/// Whether the API server may take the same write a moment later.
fn passing(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

/// The API server's answer in a few words for a tenant's condition: its code and reason,
/// never its message, which may name the operator's service account.
fn answer(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => {
            format!("the API server answered {} {}", status.code, status.reason)
                .trim_end()
                .to_owned()
        }
        _ => "the API server could not be reached".to_owned(),
    }
}

/// Starts the log pod that prints job `id`'s output (following it while the job runs),
/// unless one already prints it. False, with nothing changed, when the pod's name belongs
/// to another pod.
pub async fn show(
    writer: &Writer,
    job: &BatchJob,
    connection: &Connection,
    id: &JobId,
) -> Result<bool, Error> {
    let pod = operator_log_pod(writer, job, connection, id);
    let api = Api::namespaced(writer.client.clone(), &job.namespace().unwrap_or_default());
    Ok(replace_pod(&api, job, &pod).await?)
}

/// [`log_pod`] with this operator's image and, when `KRB5_CONFIG` names its Kerberos
/// configuration, that configuration's text in [`KRB5_CONF_VAR`]: the log pod's `kinit`
/// needs the same realms and KDCs, and a pod cannot mount the operator's ConfigMap from
/// another namespace. Read at every pod, so a changed ConfigMap reaches the next one.
fn operator_log_pod(writer: &Writer, job: &BatchJob, connection: &Connection, id: &JobId) -> Pod {
    let mut pod = log_pod(job, &connection.spec, id, &writer.image);
    if let Some(text) = own_krb5_config()
        && let Some(container) = pod
            .spec
            .as_mut()
            .and_then(|spec| spec.containers.first_mut())
    {
        container
            .env
            .get_or_insert_with(Vec::new)
            .push(env_var(KRB5_CONF_VAR, &text));
    }
    pod
}

/// The text of the Kerberos configuration files this process's `KRB5_CONFIG` names; None
/// when it is unset or names nothing readable.
fn own_krb5_config() -> Option<String> {
    krb5_config_text(&std::env::var("KRB5_CONFIG").ok()?)
}

/// The text of the Kerberos configuration files in `list`, colon-separated as in
/// `KRB5_CONFIG`, which MIT Kerberos reads one after the other, skipping files that do not
/// exist; None when none can be read.
fn krb5_config_text(list: &str) -> Option<String> {
    let text: Vec<String> = list
        .split(':')
        .filter(|path| !path.is_empty())
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// What `collect` reports of `outputs` (task `i`'s at `i`, as `plan` fetched them).
fn kept(plan: &Plan, outputs: &[JobOutput], refused: Vec<String>) -> Collected {
    let mut tails = outputs
        .iter()
        .take(plan.status_tasks as usize)
        .map(|output| tail(output, plan.status_tail as usize));
    let (stdout, stderr) = outputs.iter().fold((0, 0), |(out, err), output| {
        (
            out + output.stdout.total_size,
            err + output.stderr.total_size,
        )
    });
    let sizes = format!("{stdout} bytes of stdout, {stderr} of stderr");
    let Some(count) = plan.tasks else {
        return Collected {
            tail: tails.next(),
            task_outputs: Vec::new(),
            task_outputs_omitted: None,
            summary: sizes,
            refused,
            unwritten: Vec::new(),
        };
    };
    let fetched = u32::try_from(outputs.len()).unwrap_or(u32::MAX);
    let mut summary = format!("{count} tasks");
    if fetched < count {
        summary.push_str(&format!(", tasks {} read", task_range(fetched)));
    }
    summary.push_str(&format!(": {sizes}"));
    for (what, tasks) in [
        ("status.taskOutputs shows", plan.status_tasks),
        ("the ConfigMap keeps", plan.map_tasks),
    ] {
        if tasks > 0 && tasks < count {
            summary.push_str(&format!("; {what} tasks {}", task_range(tasks)));
        }
    }
    Collected {
        tail: None,
        task_outputs: tails
            .zip(0..)
            .map(|(tail, index)| TaskOutput { index, tail })
            .collect(),
        task_outputs_omitted: (plan.status_tasks > 0 && plan.status_tasks < count)
            .then(|| count - plan.status_tasks),
        summary,
        refused,
        unwritten: Vec::new(),
    }
}

/// `0-N` for the first `tasks` tasks, `0` for one.
fn task_range(tasks: u32) -> String {
    match tasks {
        0 | 1 => "0".to_owned(),
        n => format!("0-{}", n - 1),
    }
}

/// Whether `object` is controlled by `job` (its controller owner reference names the job's
/// uid), so the operator may change or delete it for the job.
fn owned_by(object: &ObjectMeta, job: &BatchJob) -> bool {
    let uid = job.uid();
    object
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && Some(&owner.uid) == uid.as_ref())
}

/// Writes the output ConfigMap `map`: creates it, or updates the one `job` owns (an earlier
/// attempt's). False, with nothing written, when the name belongs to another object.
pub(crate) async fn write_config_map(
    api: &Api<ConfigMap>,
    field_manager: &str,
    job: &BatchJob,
    map: &ConfigMap,
) -> kube::Result<bool> {
    let name = map.name_any();
    let create = PostParams {
        field_manager: Some(field_manager.into()),
        ..PostParams::default()
    };
    match api.create(&create, map).await {
        Ok(_) => return Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(err),
    }
    let existing = api.get(&name).await?;
    if !owned_by(&existing.metadata, job) {
        return Ok(false);
    }
    api.patch(
        &name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(map),
    )
    .await?;
    Ok(true)
}

/// Creates `pod`, replacing one of the same name that `job` owns (made for an earlier
/// attempt: a pod's spec cannot change). False, with nothing changed, when the name belongs
/// to another pod.
async fn replace_pod(api: &Api<Pod>, job: &BatchJob, pod: &Pod) -> kube::Result<bool> {
    let name = pod.name_any();
    if let Some(existing) = api.get_opt(&name).await? {
        if !owned_by(&existing.metadata, job) {
            return Ok(false);
        }
        // The API server fills in defaults, so compare what matters: the job it prints.
        let job_id = |pod: &Pod| {
            let env = pod.spec.as_ref()?.containers.first()?.env.clone()?;
            env.into_iter()
                .find(|e| e.name == "BATCHBRIDGE_JOB_ID")?
                .value
        };
        if job_id(&existing) == job_id(pod) {
            return Ok(true);
        }
        api.delete(&name, &DeleteParams::background()).await?;
    }
    api.create(&PostParams::default(), pod).await?;
    Ok(true)
}

/// The last `max` bytes of stdout followed by stderr, cut on a character boundary.
pub fn tail(output: &JobOutput, max: usize) -> String {
    let mut text = output.stdout.text().into_owned();
    text.push_str(&output.stderr.text());
    last_bytes(text, max)
}

/// The last `max` bytes of `text`, cut forward to a character boundary.
fn last_bytes(mut text: String, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.split_off(start)
}

/// The name of the ConfigMap holding `job`'s output: `NAME-output`, shortened with a hash
/// when that would be longer than a name may be ([`derived_name`]).
pub fn config_map_name(job: &BatchJob) -> String {
    derived_name(&job.name_any(), "output")
}

/// The ConfigMap holding the output, owned by the job so it goes when the job goes: keys
/// `stdout` and `stderr` for a job that is no array, `task-N.stdout` and `task-N.stderr`
/// for the tasks of an array `plan` keeps, each stream's last `plan.map_stream` bytes.
fn config_map(job: &BatchJob, plan: &Plan, outputs: &[JobOutput]) -> ConfigMap {
    let cap = usize::try_from(plan.map_stream).unwrap_or(usize::MAX);
    let mut data = BTreeMap::new();
    for (task, output) in outputs.iter().take(plan.map_tasks as usize).enumerate() {
        let prefix = match plan.tasks {
            Some(_) => format!("task-{task}."),
            None => String::new(),
        };
        for (stream, chunk) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
            data.insert(
                format!("{prefix}{stream}"),
                last_bytes(chunk.text().into_owned(), cap),
            );
        }
    }
    ConfigMap {
        metadata: owned_meta(job, config_map_name(job)),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The name of the pod that prints `job`'s output: `NAME-log`, shortened with a hash when
/// that would be longer than a name may be ([`derived_name`]).
pub fn log_pod_name(job: &BatchJob) -> String {
    derived_name(&job.name_any(), "log")
}

/// A pod that runs `image` in fetch-output mode to print job `id`'s output, owned by the
/// job. Everything it needs is in its environment and the mounted Secrets.
pub fn log_pod(job: &BatchJob, cluster: &BatchClusterSpec, id: &JobId, image: &str) -> Pod {
    let mut env = vec![
        env_var("BATCHBRIDGE_SCHEDULER", cluster.scheduler.as_str()),
        env_var("BATCHBRIDGE_JOB_ID", id.as_str()),
    ];
    if let Some(array) = &job.spec.array {
        env.push(env_var("BATCHBRIDGE_TASKS", &array.count.to_string()));
    }
    let jump_hosts = cluster.ssh.iter().flat_map(|ssh| &ssh.jump_hosts);
    if let Some(ssh) = &cluster.ssh {
        env.push(env_var("BATCHBRIDGE_SSH_HOST", &ssh.host));
        env.push(env_var("BATCHBRIDGE_SSH_PORT", &ssh.port.to_string()));
        env.push(env_var("BATCHBRIDGE_SSH_USER", &ssh.user));
        if !ssh.jump_hosts.is_empty() {
            env.push(env_var(
                "BATCHBRIDGE_JUMP_HOSTS",
                &ssh.jump_hosts.len().to_string(),
            ));
        }
    }
    for (number, hop) in (1..).zip(jump_hosts.clone()) {
        let var = |field: &str| format!("BATCHBRIDGE_JUMP_HOST_{number}_{field}");
        env.push(env_var(&var("HOST"), &hop.host));
        env.push(env_var(&var("PORT"), &hop.port.to_string()));
        env.push(env_var(&var("USER"), &hop.user));
        env.push(env_var(&var("KNOWN_HOSTS"), &hop.known_hosts));
    }
    if let Some(hosts) = &cluster.known_hosts {
        env.push(env_var("BATCHBRIDGE_KNOWN_HOSTS", hosts));
    }
    if let Some(dir) = &cluster.work_dir {
        env.push(env_var("BATCHBRIDGE_WORK_DIR", dir));
    }
    // The SSH client keeps its control socket and known_hosts under /tmp, the one writable
    // place on the read-only root filesystem.
    let mut volumes = vec![Volume {
        name: "tmp".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "tmp".into(),
        mount_path: "/tmp".into(),
        ..VolumeMount::default()
    }];
    if let Some(secret) = &cluster.secret_ref {
        volumes.push(Volume {
            name: "credentials".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.name.clone()),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "credentials".into(),
            mount_path: SECRET_MOUNT.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    for (number, hop) in (1..).zip(jump_hosts) {
        let name = format!("jump-host-{number}");
        volumes.push(Volume {
            name: name.clone(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(hop.secret_ref.name.clone()),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name,
            mount_path: jump_host_mount(std::path::Path::new(SECRET_MOUNT), number)
                .display()
                .to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    Pod {
        metadata: owned_meta(job, log_pod_name(job)),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            // What the Pod Security Standards' "restricted" profile asks.
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                // The kubelet writes the Secret's key as root; this group (the image's user's)
                // lets the non-root user read it.
                fs_group: Some(IMAGE_GROUP),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                name: "output".into(),
                image: Some(image.to_owned()),
                args: Some(vec!["fetch-output".into()]),
                env: Some(env),
                volume_mounts: Some(mounts),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Capabilities::default()
                    }),
                    ..SecurityContext::default()
                }),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(&LOG_POD_REQUESTS)),
                    limits: Some(quantities(&LOG_POD_LIMITS)),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), Quantity((*value).to_owned())))
        .collect()
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

pub(crate) fn owned_meta(job: &BatchJob, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: job.namespace(),
        owner_references: job.controller_owner_ref(&()).map(|owner| vec![owner]),
        labels: job
            .uid()
            .map(|uid| BTreeMap::from([(JOB_UID_LABEL.to_owned(), uid)])),
        ..ObjectMeta::default()
    }
}

/// The credential of a Secret mounted at `dir`: its key file, else its keytab and
/// principal (whose `kinit` reads `krb5_config` when given), else its password.
fn mounted_auth(
    dir: &std::path::Path,
    krb5_config: Option<&std::path::Path>,
) -> batchbridge_core::Result<SshAuth> {
    let key_file = dir.join(SSH_PRIVATE_KEY);
    if key_file.is_file() {
        return Ok(SshAuth::KeyFile(key_file));
    }
    let keytab = dir.join(KEYTAB);
    if keytab.is_file() {
        let principal = std::fs::read_to_string(dir.join(PRINCIPAL)).map_err(|err| {
            batchbridge_core::Error::invalid_input(format!(
                "fetch-output: a {KEYTAB} without its {PRINCIPAL} ({KEYTAB_TYPE}) in {}: {err}",
                dir.display()
            ))
        })?;
        let keytab = KerberosKeytab::new(principal.trim(), Keytab::File(keytab));
        return Ok(SshAuth::Keytab(match krb5_config {
            Some(path) => keytab.krb5_config(path),
            None => keytab,
        }));
    }
    let password = std::fs::read_to_string(dir.join(PASSWORD)).map_err(|err| {
        batchbridge_core::Error::invalid_input(format!(
            "fetch-output: no {SSH_PRIVATE_KEY}, {KEYTAB} ({KEYTAB_TYPE}) or {PASSWORD} \
             ({BASIC_AUTH_TYPE}) in {}: {err}",
            dir.display()
        ))
    })?;
    Ok(SshAuth::Password(batchbridge_core::shell::Password::new(
        password,
    )))
}

/// Writes the Kerberos configuration a log pod was handed ([`KRB5_CONF_VAR`]) to a new file
/// in the temporary directory (the pod's one writable place), for `kinit` to read.
fn written_krb5_config(text: &str) -> batchbridge_core::Result<std::path::PathBuf> {
    let path = std::env::temp_dir().join(format!("batchbridge-krb5-{}.conf", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        file.write_all(text.as_bytes())
    };
    write().map_err(|err| {
        batchbridge_core::Error::invalid_input(format!(
            "fetch-output: cannot write {KRB5_CONF_VAR} to {}: {err}",
            path.display()
        ))
    })?;
    Ok(path)
}

/// How often a log pod asks the scheduler whether the job it follows ended; its output is
/// read every `LOG_POD_READ` meanwhile, from the job's files, without the scheduler.
const LOG_POD_POLL: Duration = Duration::from_secs(30);
/// How often a log pod reads the output a running job added.
const LOG_POD_READ: Duration = Duration::from_secs(1);

/// The fetch-output mode: reads the cluster and job from the environment (as [`log_pod`]
/// sets it) and the credential from the mounted Secret. For a job that is no array it
/// prints the output as it grows (stdout and stderr in the order they were read, about
/// once a second) until the job ends, then what is left, and returns; for one that ended
/// it prints the whole stdout, then stderr. For an array job (`BATCHBRIDGE_TASKS` set) it
/// follows every task the same way,
/// [`TASK_READS_PER_ROUND`](batchbridge_core::follow::TASK_READS_PER_ROUND) tasks a second in turn, and
/// prints each piece after a line `==> task N <==` whenever the task changes, as `tail -f`
/// does with several files; once the array ended, what is left of each task in task order.
pub async fn fetch_output_to(
    vars: &impl Fn(&str) -> Option<String>,
    credentials: &std::path::Path,
    out: &mut impl Write,
) -> batchbridge_core::Result<()> {
    let need = |name: &str| {
        vars(name).ok_or_else(|| {
            batchbridge_core::Error::invalid_input(format!("fetch-output: {name} is not set"))
        })
    };
    let id = JobId::from(need("BATCHBRIDGE_JOB_ID")?);
    let scheduler = Scheduler::from(need("BATCHBRIDGE_SCHEDULER")?);
    let krb5_config = vars(KRB5_CONF_VAR)
        .map(|text| written_krb5_config(&text))
        .transpose()?;
    let krb5_config = krb5_config.as_deref();
    let auth = mounted_auth(credentials, krb5_config)?;
    let port = need("BATCHBRIDGE_SSH_PORT")?.parse().map_err(|_| {
        batchbridge_core::Error::invalid_input("fetch-output: BATCHBRIDGE_SSH_PORT is not a port")
    })?;
    let mut config = SshConfig::new(
        need("BATCHBRIDGE_SSH_HOST")?,
        need("BATCHBRIDGE_SSH_USER")?,
        auth,
        HostKeys::Entries(need("BATCHBRIDGE_KNOWN_HOSTS")?),
    )
    .port(port);
    let hops: usize = vars("BATCHBRIDGE_JUMP_HOSTS")
        .map(|count| count.parse())
        .transpose()
        .map_err(|_| {
            batchbridge_core::Error::invalid_input(
                "fetch-output: BATCHBRIDGE_JUMP_HOSTS is not a count",
            )
        })?
        .unwrap_or(0);
    for number in 1..=hops {
        let var = |field: &str| need(&format!("BATCHBRIDGE_JUMP_HOST_{number}_{field}"));
        let port = var("PORT")?.parse().map_err(|_| {
            batchbridge_core::Error::invalid_input(format!(
                "fetch-output: BATCHBRIDGE_JUMP_HOST_{number}_PORT is not a port"
            ))
        })?;
        let auth = mounted_auth(&jump_host_mount(credentials, number), krb5_config)?;
        config = config.jump_host(
            JumpHost::new(
                var("HOST")?,
                var("USER")?,
                auth,
                HostKeys::Entries(var("KNOWN_HOSTS")?),
            )
            .port(port),
        );
    }
    let shell = Arc::new(SshShell::new(config)?);
    let work_dir = vars("BATCHBRIDGE_WORK_DIR");
    // Reading output submits nothing: no submit defaults.
    let backend = ssh_backend(&scheduler, shell, work_dir.as_deref(), None)?;
    let tasks = match vars("BATCHBRIDGE_TASKS") {
        Some(count) => Some(count.parse().map_err(|_| {
            batchbridge_core::Error::invalid_input(
                "fetch-output: BATCHBRIDGE_TASKS is not a task count",
            )
        })?),
        None => None,
    };
    let tracker = Tracker::new(Arc::clone(&backend), LOG_POD_POLL)?;
    match tasks {
        None => {
            OutputFollower::new(id)
                .follow(&tracker, LOG_POD_READ, |new| {
                    // A closed stdout (kubectl logs gone) is no reason to stop following.
                    let _ = out
                        .write_all(&new.stdout)
                        .and_then(|()| out.write_all(&new.stderr))
                        .and_then(|()| out.flush());
                })
                .await?;
        }
        Some(count) => {
            let mut headings = TaskHeadings::default();
            ArrayOutputFollower::new(id, count)
                .follow(&tracker, LOG_POD_READ, |task, new| {
                    let _ = headings.write_merged(out, task, &new);
                })
                .await?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use batchbridge_core::OutputChunk;

    use super::*;

    fn chunk(text: &str) -> OutputChunk {
        OutputChunk::new(text.as_bytes().to_vec(), 0, text.len() as u64)
    }

    #[test]
    fn the_krb5_config_text_joins_the_files_that_exist() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(path("site.conf"), "[libdefaults]\n").unwrap_or_else(|err| panic!("{err}"));
        std::fs::write(path("realms.conf"), "[realms]\n").unwrap_or_else(|err| panic!("{err}"));
        let list = [path("site.conf"), path("absent.conf"), path("realms.conf")].join(":");
        assert_eq!(
            krb5_config_text(&list).as_deref(),
            Some("[libdefaults]\n\n[realms]\n")
        );
        assert_eq!(krb5_config_text(&path("absent.conf")), None);
        assert_eq!(krb5_config_text(""), None);
    }

    #[test]
    fn a_mounted_keytab_secret_is_a_keytab_login() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let write = |name: &str, text: &[u8]| {
            std::fs::write(dir.path().join(name), text).unwrap_or_else(|err| panic!("{err}"));
        };
        write(KEYTAB, b"\x05\x02");
        let alone = mounted_auth(dir.path(), None).unwrap_err();
        assert!(alone.message().contains(PRINCIPAL), "{alone}");
        write(PRINCIPAL, b"alice@HPC.EXAMPLE\n");
        let auth = mounted_auth(dir.path(), None).unwrap_or_else(|err| panic!("{err}"));
        let keytab =
            KerberosKeytab::new("alice@HPC.EXAMPLE", Keytab::File(dir.path().join(KEYTAB)));
        assert_eq!(auth, SshAuth::Keytab(keytab.clone()));
        let config = dir.path().join("krb5.conf");
        let auth = mounted_auth(dir.path(), Some(&config)).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(auth, SshAuth::Keytab(keytab.krb5_config(config)));
    }

    #[test]
    fn the_tail_is_stdout_then_stderr_cut_on_a_character() {
        let output = JobOutput::new(chunk("hello\nwörld\n"), chunk("warning\n"));
        assert_eq!(tail(&output, 4096), "hello\nwörld\nwarning\n");
        assert_eq!(tail(&output, 8), "warning\n");
        assert_eq!(tail(&output, 14), "örld\nwarning\n");
        // 13 bytes back lands inside "ö" (2 bytes): the cut moves forward to a boundary.
        assert_eq!(tail(&output, 13), "rld\nwarning\n");
        assert_eq!(tail(&output, 0), "");
    }

    fn policy(tail_bytes: u32, config_map: bool) -> OutputPolicy {
        OutputPolicy {
            tail_bytes,
            config_map,
            log_pod: false,
        }
    }

    /// The caps: status shows at most STATUS_TASKS tails of at least MIN_TASK_TAIL bytes
    /// that share tailBytes; the ConfigMap keeps at most CONFIG_MAP_TASKS tasks whose
    /// streams share CONFIG_MAP_CAP; a job that is no array keeps what it always kept.
    #[test]
    fn the_plan_keeps_what_fits_the_caps() {
        // (tailBytes, configMap, array count) -> (status tasks, bytes each, ConfigMap
        // tasks, bytes per stream, tasks fetched, bytes fetched of task 0)
        let cases = [
            ((4096, false, None), (1, 4096, 0, CONFIG_MAP_CAP, 1, 4096)),
            (
                (4096, true, None),
                (1, 4096, 1, CONFIG_MAP_CAP, 1, CONFIG_MAP_CAP),
            ),
            ((0, false, None), (0, 0, 0, CONFIG_MAP_CAP, 1, 0)),
            (
                (4096, false, Some(1)),
                (1, 4096, 0, CONFIG_MAP_CAP, 1, 4096),
            ),
            (
                (4096, false, Some(3)),
                (3, 1365, 0, CONFIG_MAP_CAP, 3, 1365),
            ),
            (
                (4096, false, Some(32)),
                (32, 128, 0, CONFIG_MAP_CAP, 32, 128),
            ),
            (
                (4096, false, Some(1000)),
                (32, 128, 0, CONFIG_MAP_CAP, 32, 128),
            ),
            (
                (65536, false, Some(3)),
                (3, 21845, 0, CONFIG_MAP_CAP, 3, 21845),
            ),
            // A small tailBytes shows fewer tasks rather than tails of a few bytes.
            (
                (1024, false, Some(100)),
                (16, 64, 0, CONFIG_MAP_CAP, 16, 64),
            ),
            ((100, false, Some(3)), (1, 100, 0, CONFIG_MAP_CAP, 1, 100)),
            ((10, false, Some(3)), (1, 10, 0, CONFIG_MAP_CAP, 1, 10)),
            ((0, false, Some(3)), (0, 0, 0, CONFIG_MAP_CAP, 1, 0)),
            ((4096, true, Some(3)), (3, 1365, 3, 163_840, 3, 163_840)),
            ((4096, true, Some(1000)), (32, 128, 100, 4915, 100, 4915)),
            ((0, true, Some(10_000)), (0, 0, 100, 4915, 100, 4915)),
        ];
        for ((tail_bytes, map, tasks), expected) in cases {
            let plan = Plan::new(&policy(tail_bytes, map), tasks);
            let request = plan.request(0);
            let fetched_of_task_0 = match request.range {
                batchbridge_core::OutputRange::Tail(bytes) => bytes,
                other => panic!("{other:?}"),
            };
            assert_eq!(
                (
                    plan.status_tasks,
                    plan.status_tail,
                    plan.map_tasks,
                    plan.map_stream,
                    plan.fetched(),
                    fetched_of_task_0
                ),
                expected,
                "tailBytes {tail_bytes}, configMap {map}, array {tasks:?}"
            );
            assert!(plan.status_tasks * plan.status_tail <= tail_bytes);
            assert!(u64::from(plan.map_tasks) * plan.map_stream <= CONFIG_MAP_CAP);
            assert_eq!(
                request.task,
                tasks.map(|_| 0),
                "only an array names its task"
            );
        }
        // Past the tasks status shows, a task is fetched for the ConfigMap's share only.
        let plan = Plan::new(&policy(4096, true), Some(1000));
        let request = plan.request(40);
        assert_eq!(
            (request.range, request.task),
            (batchbridge_core::OutputRange::Tail(4915), Some(40))
        );
    }

    /// The API server refuses a status with more tails than the CRD's maxItems.
    #[test]
    fn the_crd_takes_as_many_tails_as_status_shows() {
        let crd = serde_json::to_value(crate::crd::crds().remove(1)).unwrap_or_default();
        let max_items = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]["taskOutputs"]["maxItems"];
        assert_eq!(max_items.as_u64(), Some(u64::from(STATUS_TASKS)));
    }

    fn sized(stdout: &str, stderr: &str) -> JobOutput {
        JobOutput::new(chunk(stdout), chunk(stderr))
    }

    /// The seed's example: `echo A` in an array of 3 shows its three lines, one per task.
    #[test]
    fn every_task_of_a_small_array_has_its_tail() {
        let plan = Plan::new(&policy(4096, false), Some(3));
        let outputs = vec![sized("A\n", ""), sized("A\n", "oops\n"), sized("A\n", "")];
        let collected = kept(&plan, &outputs, Vec::new());
        let tails: Vec<(u32, &str)> = collected
            .task_outputs
            .iter()
            .map(|t| (t.index, t.tail.as_str()))
            .collect();
        assert_eq!(tails, [(0, "A\n"), (1, "A\noops\n"), (2, "A\n")]);
        assert_eq!(
            (collected.tail, collected.task_outputs_omitted),
            (None, None)
        );
        assert_eq!(collected.summary, "3 tasks: 6 bytes of stdout, 5 of stderr");
    }

    /// A large array: 32 tails of 128 bytes (a 4 KiB tailBytes), the rest counted, and the
    /// summary says which tasks status and the ConfigMap hold.
    #[test]
    fn a_large_array_says_which_tasks_it_left_out() {
        let line = "x".repeat(199) + "\n";
        let plan = Plan::new(&policy(4096, true), Some(1000));
        let outputs = vec![sized(&line, ""); plan.fetched() as usize];
        let collected = kept(&plan, &outputs, Vec::new());
        assert_eq!(collected.task_outputs.len(), 32);
        assert_eq!(collected.task_outputs[31].index, 31);
        assert!(collected.task_outputs.iter().all(|t| t.tail.len() == 128));
        assert_eq!(collected.task_outputs_omitted, Some(968));
        assert_eq!(
            collected.summary,
            "1000 tasks, tasks 0-99 read: 20000 bytes of stdout, 0 of stderr; \
             status.taskOutputs shows tasks 0-31; the ConfigMap keeps tasks 0-99"
        );
        let status_only = Plan::new(&policy(4096, false), Some(40));
        let collected = kept(&status_only, &outputs[..32], Vec::new());
        assert_eq!(collected.task_outputs_omitted, Some(8));
        assert_eq!(
            collected.summary,
            "40 tasks, tasks 0-31 read: 6400 bytes of stdout, 0 of stderr; \
             status.taskOutputs shows tasks 0-31"
        );
    }

    #[test]
    fn a_job_that_is_no_array_keeps_one_tail() {
        let plan = Plan::new(&policy(8, false), None);
        let collected = kept(&plan, &[sized("hello\n", "warning\n")], Vec::new());
        assert_eq!(
            (
                collected.tail.as_deref(),
                collected.task_outputs.len(),
                collected.task_outputs_omitted,
                collected.summary.as_str()
            ),
            (Some("warning\n"), 0, None, "6 bytes of stdout, 8 of stderr")
        );
        let none = kept(
            &Plan::new(&policy(0, false), None),
            &[sized("hello\n", "")],
            Vec::new(),
        );
        assert_eq!(none.tail, None);
    }

    #[test]
    fn an_arrays_config_map_has_keys_per_task_within_the_cap() {
        let mut job = job();
        job.spec.array = Some(crate::crd::ArraySpec {
            count: 200,
            max_parallel: None,
        });
        let plan = Plan::new(&policy(0, true), Some(200));
        let big = "y".repeat(6000);
        let outputs = vec![sized(&big, "e\n"); plan.fetched() as usize];
        let data = config_map(&job, &plan, &outputs).data.unwrap_or_default();
        assert_eq!(data.len(), 200, "100 tasks, 2 streams each");
        assert_eq!(data.get("task-0.stderr").map(String::as_str), Some("e\n"));
        assert_eq!(data.get("task-99.stdout").map(String::len), Some(4915));
        assert!(!data.contains_key("task-100.stdout"));
        assert!(!data.contains_key("stdout"));
        let size: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(size <= 2 * CONFIG_MAP_CAP as usize, "{size} bytes");
    }

    fn job() -> BatchJob {
        let mut job: BatchJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "batchbridge.dev/v1alpha1",
            "kind": "BatchJob",
            "metadata": {"name": "hello", "namespace": "research", "uid": "3f2a9c1e"},
            "spec": {"clusterRef": {"name": "hpc"}, "script": "echo hi"},
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        job.metadata.uid = Some("3f2a9c1e".into());
        job
    }

    #[test]
    fn the_config_map_and_log_pod_belong_to_the_job() {
        let output = JobOutput::new(chunk("out\n"), chunk(""));
        let plan = Plan::new(&policy(4096, true), None);
        let map = config_map(&job(), &plan, &[output]);
        assert_eq!(map.metadata.name.as_deref(), Some("hello-output"));
        let owner = map.metadata.owner_references.unwrap_or_default();
        assert_eq!(
            (
                owner[0].kind.as_str(),
                owner[0].uid.as_str(),
                owner[0].controller
            ),
            ("BatchJob", "3f2a9c1e", Some(true))
        );
        assert_eq!(
            map.data
                .unwrap_or_default()
                .get("stdout")
                .map(String::as_str),
            Some("out\n")
        );

        let cluster: BatchClusterSpec = serde_json::from_value(serde_json::json!({
            "scheduler": "slurm",
            "ssh": {"host": "login", "port": 2222, "user": "alice"},
            "secretRef": {"name": "hpc-key"},
            "knownHosts": "[login]:2222 ssh-ed25519 AAAA",
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        let pod = log_pod(
            &job(),
            &cluster,
            &JobId::from("42"),
            "ghcr.io/batchbridge/operator:0.1.0",
        );
        assert_eq!(pod.metadata.name.as_deref(), Some("hello-log"));
        let mut array = job();
        array.spec.array = Some(crate::crd::ArraySpec {
            count: 3,
            max_parallel: None,
        });
        let tasks = |pod: &Pod| {
            pod.spec.as_ref()?.containers[0]
                .env
                .iter()
                .flatten()
                .find(|e| e.name == "BATCHBRIDGE_TASKS")?
                .value
                .clone()
        };
        assert_eq!(tasks(&pod), None);
        let array_pod = log_pod(&array, &cluster, &JobId::from("42"), "operator:test");
        assert_eq!(tasks(&array_pod).as_deref(), Some("3"));
        let spec = pod.spec.unwrap_or_default();
        assert_eq!(
            spec.automount_service_account_token,
            Some(false),
            "no API access"
        );
        let container = &spec.containers[0];
        assert_eq!(
            container.args.as_deref(),
            Some(&["fetch-output".to_owned()][..])
        );
        let env: BTreeMap<String, String> = container
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        assert_eq!(
            env.get("BATCHBRIDGE_JOB_ID").map(String::as_str),
            Some("42")
        );
        assert_eq!(
            env.get("BATCHBRIDGE_SSH_PORT").map(String::as_str),
            Some("2222")
        );
        assert!(
            env.values().all(|v| !v.contains("PRIVATE KEY")),
            "the key only as a mounted Secret"
        );
        let volume = &spec.volumes.unwrap_or_default()[1];
        assert_eq!(
            volume
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref()),
            Some("hpc-key")
        );
    }

    #[test]
    fn a_log_pod_goes_through_the_jump_hosts_with_each_hops_secret_mounted() {
        let cluster: BatchClusterSpec = serde_json::from_value(serde_json::json!({
            "scheduler": "slurm",
            "ssh": {"host": "login", "user": "alice", "jumpHosts": [
                {"host": "bastion", "user": "a", "secretRef": {"name": "bastion-key"},
                 "knownHosts": "bastion ssh-ed25519 AAAA"},
                {"host": "gateway", "port": 2201, "user": "b", "secretRef": {"name": "gw-key"},
                 "knownHosts": "[gateway]:2201 ssh-ed25519 AAAA"},
            ]},
            "secretRef": {"name": "hpc-key"},
            "knownHosts": "login ssh-ed25519 AAAA",
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        let pod = log_pod(&job(), &cluster, &JobId::from("42"), "operator:test");
        let spec = pod.spec.unwrap_or_default();
        let container = &spec.containers[0];
        let env: BTreeMap<String, String> = container
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        let hop_env: Vec<_> = env
            .iter()
            .filter(|(name, _)| name.starts_with("BATCHBRIDGE_JUMP_HOST"))
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        assert_eq!(
            hop_env,
            [
                "BATCHBRIDGE_JUMP_HOSTS=2",
                "BATCHBRIDGE_JUMP_HOST_1_HOST=bastion",
                "BATCHBRIDGE_JUMP_HOST_1_KNOWN_HOSTS=bastion ssh-ed25519 AAAA",
                "BATCHBRIDGE_JUMP_HOST_1_PORT=22",
                "BATCHBRIDGE_JUMP_HOST_1_USER=a",
                "BATCHBRIDGE_JUMP_HOST_2_HOST=gateway",
                "BATCHBRIDGE_JUMP_HOST_2_KNOWN_HOSTS=[gateway]:2201 ssh-ed25519 AAAA",
                "BATCHBRIDGE_JUMP_HOST_2_PORT=2201",
                "BATCHBRIDGE_JUMP_HOST_2_USER=b",
            ]
        );
        let mounted: Vec<_> = container
            .volume_mounts
            .iter()
            .flatten()
            .map(|mount| (mount.name.as_str(), mount.mount_path.as_str()))
            .collect();
        assert_eq!(
            mounted[1..],
            [
                ("credentials", "/var/run/batchbridge/credentials"),
                ("jump-host-1", "/var/run/batchbridge/jump-host-1"),
                ("jump-host-2", "/var/run/batchbridge/jump-host-2"),
            ]
        );
        let secrets: Vec<_> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|volume| volume.secret.as_ref()?.secret_name.as_deref())
            .collect();
        assert_eq!(secrets, ["hpc-key", "bastion-key", "gw-key"]);
    }
}
