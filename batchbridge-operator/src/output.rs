//! A finished job's output: the tail kept in status, the whole (capped) in a ConfigMap the
//! job owns, and a log pod that prints it for `kubectl logs`.
//!
//! The log pod runs the operator's own image in its `fetch-output` mode
//! ([`fetch_output_to`]). It reaches the cluster itself, with the BatchCluster's Secret
//! mounted read-only and the rest passed as environment variables, so it needs no access
//! to the Kubernetes API at all.

use std::collections::BTreeMap;
use std::io::Write;

use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
use batchbridge_core::{BatchBackend, JobId, JobOutput, OutputRequest};
use batchbridge_slurm::SubmitDefaults;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, EmptyDirVolumeSource, EnvVar, Pod, PodSecurityContext,
    PodSpec, SeccompProfile, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use std::sync::Arc;

use crate::cluster::credentials::{BASIC_AUTH_TYPE, PASSWORD, SSH_PRIVATE_KEY};
use crate::cluster::{Connection, ssh_backend};
use crate::controller::{Context, FIELD_MANAGER, ReconcileError};
use crate::crd::{BatchClusterSpec, BatchJob, Scheduler};

/// The most output a ConfigMap keeps, per stream: two of these stay under the 1 MiB
/// object limit with room for the metadata.
pub const CONFIG_MAP_CAP: u64 = 480 * 1024;
/// The group of the operator image's user (uid and gid 65532, see the Dockerfile).
const IMAGE_GROUP: i64 = 65532;

/// Where the log pod mounts the cluster's Secret.
const SECRET_MOUNT: &str = "/var/run/batchbridge/credentials";

/// What was collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// The tail for status.outputTail, if the policy keeps one.
    pub tail: Option<String>,
    /// One line for the OutputCollected condition.
    pub summary: String,
    /// The objects the policy asked for that were not written because an object of that
    /// name exists and belongs to something else (`ConfigMap NAME`, `Pod NAME`): the
    /// operator never overwrites or deletes what its job does not own.
    pub refused: Vec<String>,
}

/// Fetches job `id`'s output and keeps it as `job`'s output policy says.
pub async fn collect(
    ctx: &Context,
    job: &BatchJob,
    connection: &Connection,
    id: &JobId,
) -> Result<Collected, ReconcileError> {
    let policy = &job.spec.output_policy;
    let bytes = if policy.config_map {
        CONFIG_MAP_CAP
    } else {
        u64::from(policy.tail_bytes)
    };
    let output = connection
        .fetch_output(id, &OutputRequest::tail(bytes))
        .await
        .map_err(ReconcileError::Backend)?;
    let namespace = job.namespace().unwrap_or_default();
    let mut refused = Vec::new();
    if policy.config_map {
        let map = config_map(job, &output);
        let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace);
        if !write_config_map(&api, job, &map).await? {
            refused.push(format!("ConfigMap {}", map.name_any()));
        }
    }
    if policy.log_pod {
        let pod = log_pod(job, &connection.spec, id, &ctx.image);
        if !replace_pod(&Api::namespaced(ctx.client.clone(), &namespace), job, &pod).await? {
            refused.push(format!("Pod {}", pod.name_any()));
        }
    }
    let tail = (policy.tail_bytes > 0).then(|| tail(&output, policy.tail_bytes as usize));
    Ok(Collected {
        tail,
        summary: format!(
            "{} bytes of stdout, {} of stderr",
            output.stdout.total_size, output.stderr.total_size
        ),
        refused,
    })
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
async fn write_config_map(
    api: &Api<ConfigMap>,
    job: &BatchJob,
    map: &ConfigMap,
) -> Result<bool, ReconcileError> {
    let name = map.name_any();
    let create = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&create, map).await {
        Ok(_) => return Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(ReconcileError::Kube(err)),
    }
    let existing = api.get(&name).await.map_err(ReconcileError::Kube)?;
    if !owned_by(&existing.metadata, job) {
        return Ok(false);
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(map),
    )
    .await
    .map_err(ReconcileError::Kube)?;
    Ok(true)
}

/// Creates `pod`, replacing one of the same name that `job` owns (made for an earlier
/// attempt: a pod's spec cannot change). False, with nothing changed, when the name belongs
/// to another pod.
async fn replace_pod(api: &Api<Pod>, job: &BatchJob, pod: &Pod) -> Result<bool, ReconcileError> {
    let name = pod.name_any();
    if let Some(existing) = api.get_opt(&name).await.map_err(ReconcileError::Kube)? {
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
        api.delete(&name, &DeleteParams::background())
            .await
            .map_err(ReconcileError::Kube)?;
    }
    api.create(&PostParams::default(), pod)
        .await
        .map_err(ReconcileError::Kube)?;
    Ok(true)
}

/// The last `max` bytes of stdout followed by stderr, cut on a character boundary.
pub fn tail(output: &JobOutput, max: usize) -> String {
    let mut text = output.stdout.text().into_owned();
    text.push_str(&output.stderr.text());
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.split_off(start)
}

/// The name of the ConfigMap holding `job`'s output.
pub fn config_map_name(job: &BatchJob) -> String {
    format!("{}-output", job.name_any())
}

/// The ConfigMap holding the output (each stream's last [`CONFIG_MAP_CAP`] bytes), owned
/// by the job so it goes when the job goes.
pub fn config_map(job: &BatchJob, output: &JobOutput) -> ConfigMap {
    let mut data = BTreeMap::new();
    data.insert("stdout".to_owned(), output.stdout.text().into_owned());
    data.insert("stderr".to_owned(), output.stderr.text().into_owned());
    ConfigMap {
        metadata: owned_meta(job, config_map_name(job)),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The name of the pod that prints `job`'s output.
pub fn log_pod_name(job: &BatchJob) -> String {
    format!("{}-log", job.name_any())
}

/// A pod that runs `image` in fetch-output mode to print job `id`'s output, owned by the
/// job. Everything it needs is in its environment and the mounted Secret.
pub fn log_pod(job: &BatchJob, cluster: &BatchClusterSpec, id: &JobId, image: &str) -> Pod {
    let mut env = vec![
        env_var("BATCHBRIDGE_SCHEDULER", cluster.scheduler.as_str()),
        env_var("BATCHBRIDGE_JOB_ID", id.as_str()),
    ];
    if let Some(ssh) = &cluster.ssh {
        env.push(env_var("BATCHBRIDGE_SSH_HOST", &ssh.host));
        env.push(env_var("BATCHBRIDGE_SSH_PORT", &ssh.port.to_string()));
        env.push(env_var("BATCHBRIDGE_SSH_USER", &ssh.user));
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
                ..Container::default()
            }],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

fn owned_meta(job: &BatchJob, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: job.namespace(),
        owner_references: job.controller_owner_ref(&()).map(|owner| vec![owner]),
        labels: Some(BTreeMap::from([(
            "batchbridge.dev/job".to_owned(),
            job.name_any(),
        )])),
        ..ObjectMeta::default()
    }
}

/// The fetch-output mode: reads the cluster and job from the environment (as [`log_pod`]
/// sets it) and the credential from the mounted Secret, and streams the job's whole
/// stdout, then stderr, to `out` in bounded chunks.
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
    let key_file = credentials.join(SSH_PRIVATE_KEY);
    let auth = if key_file.is_file() {
        SshAuth::KeyFile(key_file)
    } else {
        let password = std::fs::read_to_string(credentials.join(PASSWORD)).map_err(|err| {
            batchbridge_core::Error::invalid_input(format!(
                "fetch-output: no {SSH_PRIVATE_KEY} or {PASSWORD} ({BASIC_AUTH_TYPE}) in {}: {err}",
                credentials.display()
            ))
        })?;
        SshAuth::Password(batchbridge_core::shell::Password::new(password))
    };
    let port = need("BATCHBRIDGE_SSH_PORT")?.parse().map_err(|_| {
        batchbridge_core::Error::invalid_input("fetch-output: BATCHBRIDGE_SSH_PORT is not a port")
    })?;
    let config = SshConfig::new(
        need("BATCHBRIDGE_SSH_HOST")?,
        need("BATCHBRIDGE_SSH_USER")?,
        auth,
        HostKeys::Entries(need("BATCHBRIDGE_KNOWN_HOSTS")?),
    )
    .port(port);
    let shell = Arc::new(SshShell::new(config)?);
    let work_dir = vars("BATCHBRIDGE_WORK_DIR");
    let backend = ssh_backend(
        &scheduler,
        shell,
        work_dir.as_deref(),
        SubmitDefaults::default(),
    )?;
    stream(backend.as_ref(), &id, out).await
}

/// Copies the job's stdout and then its stderr to `out`, 1 MiB at a time.
async fn stream(
    backend: &dyn BatchBackend,
    id: &JobId,
    out: &mut impl Write,
) -> batchbridge_core::Result<()> {
    const CHUNK: u64 = 1024 * 1024;
    for stderr in [false, true] {
        let mut offset = 0;
        loop {
            let output = backend
                .fetch_output(id, &OutputRequest::bytes(offset, CHUNK))
                .await?;
            let chunk = if stderr { output.stderr } else { output.stdout };
            out.write_all(&chunk.data)?;
            offset += chunk.data.len() as u64;
            if chunk.data.is_empty() || offset >= chunk.total_size {
                break;
            }
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
    fn the_tail_is_stdout_then_stderr_cut_on_a_character() {
        let output = JobOutput::new(chunk("hello\nwörld\n"), chunk("warning\n"));
        assert_eq!(tail(&output, 4096), "hello\nwörld\nwarning\n");
        assert_eq!(tail(&output, 8), "warning\n");
        assert_eq!(tail(&output, 14), "örld\nwarning\n");
        // 13 bytes back lands inside "ö" (2 bytes): the cut moves forward to a boundary.
        assert_eq!(tail(&output, 13), "rld\nwarning\n");
        assert_eq!(tail(&output, 0), "");
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
        let map = config_map(&job(), &output);
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
}
