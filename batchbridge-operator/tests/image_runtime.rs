//! The operator image's runtime contract, checked without docker: the binary cargo built
//! runs in the Dockerfile's runtime stage (Debian slim with only the packages the Dockerfile
//! installs, built by `tests/testbed/image.sh` from the Dockerfile's own instructions), as
//! the numeric non-root user of its USER line, on a read-only root filesystem with only
//! `/tmp` writable, as the Helm chart's and kustomize's Deployment and the log pods run it.
//!
//! Each run gets a private mount namespace (`unshare --mount`): an overlay of the image's
//! root filesystem (so nothing touches the test bed's copy), the binary bind-mounted read-only
//! where the Dockerfile's COPY puts it, a container's /proc and /dev, the pod's volumes (a
//! fresh tmpfs for an emptyDir, a read-only bind mount of a Secret's files), then the root
//! remounted read-only and `chroot --userspec` to the image's user with the image's
//! environment. Everything is unmounted when the run ends. The tests need root, as CI runs
//! them; a test bed that is not up fails them, they never skip.
//!
//! The log pod is checked end to end: a job runs on the SLURM test bed, then fetch-output
//! runs in the image with the environment, arguments and volumes of the pod
//! `output::log_pod` builds, reaching the cluster with the image's OpenSSH client as the
//! image's user, with no home directory. The same run without a writable /tmp must fail,
//! so the tests really run on a read-only root. A log pod whose Secret is a Kerberos keytab
//! logs in the same way with the image's `kinit`, through the test bed's GSSAPI-only sshd.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;

use batchbridge_core::conformance::{self, unique_key};
use batchbridge_core::{BatchBackend, JobSpec, JobState};
use batchbridge_operator::crd::{BatchClusterSpec, BatchJob};
use batchbridge_operator::output;
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::{kdc_facts, login, ssh_facts, testbed_dir, testbed_script};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde_json::{Value, json};

/// The user the image must run as (README, Dockerfile, and the manifests' runAsUser).
const UID: u32 = 65532;
/// The longest one run in the image may take.
const RUN_TIMEOUT_SECS: &str = "120";

/// What `tests/testbed/image.sh` recorded in `image/facts.json`.
#[derive(Debug)]
struct ImageFacts {
    rootfs: PathBuf,
    uid: u32,
    gid: u32,
    user_name: String,
    home: String,
    binary: String,
    env: BTreeMap<String, String>,
    entrypoint: Vec<String>,
}

/// Reads `image/facts.json`, after `image.sh status` has confirmed that the root filesystem
/// was built from the Dockerfile as it is now.
fn image_facts() -> ImageFacts {
    testbed_script("image.sh", &["status"]);
    let path = testbed_dir().join("image/facts.json");
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!("{}: {err}; run tests/testbed/image.sh up", path.display())
        }))
        .unwrap();
    let text = |name: &str| {
        facts[name]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no {name}", path.display()))
            .to_owned()
    };
    let id = |name: &str| {
        let id = facts[name].as_u64().unwrap_or_else(|| {
            panic!(
                "{}: no numeric {name}: the Dockerfile must set USER",
                path.display()
            )
        });
        u32::try_from(id).unwrap()
    };
    ImageFacts {
        rootfs: text("rootfs").into(),
        uid: id("uid"),
        gid: id("gid"),
        user_name: text("user_name"),
        home: text("home"),
        binary: text("binary"),
        env: serde_json::from_value(facts["env"].clone()).unwrap(),
        entrypoint: serde_json::from_value(facts["entrypoint"].clone()).unwrap(),
    }
}

/// Makes the container in a private mount namespace and runs the command in it. Arguments:
/// ROOTFS WORK BINARY DEST USER MOUNT... -- ENV... -- COMMAND...; a MOUNT is `tmpfs:PATH` or
/// `ro:SOURCE:PATH`. Paths inside the root are resolved in it (/var/run is a symlink to /run).
const CONTAINER: &str = r#"
set -euo pipefail
rootfs=$1 work=$2 binary=$3 dest=$4 user=$5
shift 5
mounts=()
while [[ $1 != -- ]]; do mounts+=("$1"); shift; done
shift
envs=()
while [[ $1 != -- ]]; do envs+=("$1"); shift; done
shift
chroot_bin=$(command -v chroot)
mount -t tmpfs -o mode=0700 image-runtime "$work"
mkdir "$work/upper" "$work/work" "$work/root"
root=$work/root
mount -t overlay -o "lowerdir=$rootfs,upperdir=$work/upper,workdir=$work/work" image-runtime "$root"
inside() { printf '%s%s' "$root" "$("$chroot_bin" "$root" realpath -m -- "$1")"; }
# COPY --from=build: the binary, read-only, root-owned.
"$chroot_bin" "$root" mkdir -p -- "$(dirname "$dest")"
: >"$(inside "$dest")"
mount --bind -o ro "$binary" "$(inside "$dest")"
# What a container runtime provides.
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755,nosuid image-runtime "$root/dev"
for node in null zero full random urandom tty; do
    : >"$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
done
ln -s /proc/self/fd "$root/dev/fd"
# The kubelet gives every pod an /etc/hosts naming localhost (the image has none).
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# The pod's volumes.
for spec in "${mounts[@]}"; do
    case $spec in
    tmpfs:*) mount -t tmpfs -o mode=0777,nosuid,nodev image-runtime "$(inside "${spec#tmpfs:}")" ;;
    ro:*)
        spec=${spec#ro:}
        "$chroot_bin" "$root" mkdir -p -- "${spec#*:}"
        mount --bind -o ro "${spec%%:*}" "$(inside "${spec#*:}")"
        ;;
    *) echo "unknown mount $spec" >&2; exit 100 ;;
    esac
done
# readOnlyRootFilesystem: the root read-only, the mounts on it as they are.
mount -o remount,bind,ro "$root"
exec env -i "${envs[@]}" "$chroot_bin" --userspec="$user" "$root" "$@"
"#;

/// A volume of the container: what the pod mounts where.
enum Volume {
    /// An emptyDir: a fresh, empty, writable file system.
    EmptyDir(String),
    /// A Secret, read-only: the directory holding its files, and where it goes.
    Secret(PathBuf, String),
}

/// Runs `args` (the image's ENTRYPOINT first, unless `command` replaces it) in the image as
/// its user, with the image's environment plus `env`, on a read-only root with `volumes`.
fn run_in_image(
    facts: &ImageFacts,
    volumes: &[Volume],
    env: &[(String, String)],
    command: Option<&[&str]>,
    args: &[&str],
) -> Output {
    let work = tempfile::tempdir().unwrap();
    let output = in_image(facts, work.path(), volumes, env, command, args)
        .output()
        .unwrap();
    assert_ne!(
        output.status.code(),
        Some(124),
        "timed out after {RUN_TIMEOUT_SECS}s: {}",
        text(&output.stderr)
    );
    output
}

/// The command [`run_in_image`] runs, with `work` as its scratch directory.
fn in_image(
    facts: &ImageFacts,
    work: &std::path::Path,
    volumes: &[Volume],
    env: &[(String, String)],
    command: Option<&[&str]>,
    args: &[&str],
) -> std::process::Command {
    assert!(
        is_root(),
        "these tests make mount namespaces and chroot: run them as root (as CI does)"
    );
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_batchbridge-operator"));
    let mut cmd = std::process::Command::new("flock");
    // image.sh replaces the root filesystem only under the lock's exclusive side.
    cmd.arg("--shared")
        .arg(testbed_dir().join("image/.lock"))
        .args(["timeout", "--kill-after=5", RUN_TIMEOUT_SECS])
        .args(["unshare", "--mount", "--propagation", "private"])
        .args(["bash", "-c", CONTAINER, "image-runtime"])
        .arg(&facts.rootfs)
        .arg(work)
        .arg(&binary)
        .arg(&facts.binary)
        .arg(format!("{}:{}", facts.uid, facts.gid));
    for volume in volumes {
        match volume {
            Volume::EmptyDir(path) => cmd.arg(format!("tmpfs:{path}")),
            Volume::Secret(source, path) => cmd.arg(format!("ro:{}:{path}", source.display())),
        };
    }
    cmd.arg("--");
    // A container's environment: the image's, HOME from the user's passwd entry (as docker
    // and the kubelet's runtimes set it), then the pod's.
    let home = if facts.home.is_empty() {
        "/"
    } else {
        &facts.home
    };
    cmd.arg(format!("HOME={home}"));
    for (name, value) in facts.env.iter().chain(env.iter().map(|(n, v)| (n, v))) {
        cmd.arg(format!("{name}={value}"));
    }
    cmd.arg("--");
    match command {
        Some(command) => cmd.args(command),
        None => cmd.args(&facts.entrypoint),
    };
    cmd.args(args);
    cmd
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A /tmp emptyDir, as the Deployment and the log pods mount one.
fn writable_tmp() -> Volume {
    Volume::EmptyDir("/tmp".into())
}

/// The image is what the manifests assume: the numeric user 65532 with a passwd entry and
/// no home directory, and an ENTRYPOINT that is the binary the Dockerfile copies in. In it,
/// the binary starts (its dynamic libraries are all there) and refuses an unknown command
/// with exit code 2 and clap's message naming it and pointing to `--help`, which lists the
/// commands.
#[test]
fn the_binary_starts_in_the_image_as_its_non_root_user() {
    let facts = image_facts();
    assert_eq!((facts.uid, facts.gid), (UID, UID), "{facts:?}");
    assert!(
        !facts.user_name.is_empty(),
        "uid {UID} needs a passwd entry: ssh refuses to run without one"
    );
    assert_eq!(facts.entrypoint, std::slice::from_ref(&facts.binary));
    assert_eq!(facts.env.get("TMPDIR").map(String::as_str), Some("/tmp"));

    // The harness itself: the user, and a root that cannot be written outside /tmp.
    let probe = run_in_image(
        &facts,
        &[writable_tmp()],
        &[],
        Some(&["/bin/sh", "-c"][..]),
        &[
            "id; test ! -e \"$HOME\" && echo no home; touch /probe || true; touch /tmp/probe && echo tmp writable",
        ],
    );
    let name = &facts.user_name;
    assert_eq!(
        text(&probe.stdout),
        format!(
            "uid={UID}({name}) gid={UID}({name}) groups={UID}({name})\nno home\ntmp writable\n"
        ),
        "{}",
        text(&probe.stderr)
    );
    assert!(
        text(&probe.stderr).contains("Read-only file system"),
        "{}",
        text(&probe.stderr)
    );

    let output = run_in_image(&facts, &[writable_tmp()], &[], None, &["unknown-cmd"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unrecognized subcommand 'unknown-cmd'") && stderr.contains("--help"),
        "{stderr}"
    );
}

/// The controllers' mode starts in the image and, with no Kubernetes API to reach (no
/// in-cluster service account, no kubeconfig under the nonexistent home), exits 1 saying so
/// rather than panicking or hanging.
#[test]
fn run_without_a_kubernetes_api_fails_readably() {
    let facts = image_facts();
    let output = run_in_image(&facts, &[writable_tmp()], &[], None, &["run"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the Kubernetes API"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The log pod for a job of the SLURM test bed, as the operator would create it.
fn log_pod(job_id: &batchbridge_core::JobId) -> Pod {
    log_pod_of(
        job_id,
        json!({"clusterRef": {"name": "slurm"}, "script": "true"}),
    )
}

/// The log pod for a job of the SLURM test bed with BatchJob spec `spec`.
fn log_pod_of(job_id: &batchbridge_core::JobId, spec: serde_json::Value) -> Pod {
    let ssh = login("ssh");
    log_pod_through(
        &ssh.host,
        ssh.port,
        &ssh.user,
        &ssh.known_hosts,
        "slurm-login",
        job_id,
        spec,
    )
}

/// The log pod for a job of the SLURM test bed with BatchJob spec `spec`, whose BatchCluster
/// logs in to `host`:`port` as `user` with Secret `secret` and the host keys in
/// `known_hosts`.
fn log_pod_through(
    host: &str,
    port: u16,
    user: &str,
    known_hosts: &std::path::Path,
    secret: &str,
    job_id: &batchbridge_core::JobId,
    spec: serde_json::Value,
) -> Pod {
    let cluster: BatchClusterSpec = serde_json::from_value(json!({
        "scheduler": "slurm",
        "ssh": {"host": host, "port": port, "user": user},
        "secretRef": {"name": secret},
        "knownHosts": std::fs::read_to_string(known_hosts).unwrap(),
    }))
    .unwrap();
    let job: BatchJob = serde_json::from_value(json!({
        "apiVersion": "batchbridge.dev/v1alpha1",
        "kind": "BatchJob",
        "metadata": {"name": "image-runtime", "namespace": "research", "uid": "image-runtime-uid"},
        "spec": spec,
    }))
    .unwrap();
    output::log_pod(&job, &cluster, job_id, "ghcr.io/batchbridge/operator:test")
}

/// The Secret volume the kubelet would make of a Secret holding `files` (name and
/// contents): its atomic-writer layout (`NAME` -> `..data/NAME`, `..data` -> a timestamped
/// directory) and each file owned by root with the volume's defaultMode, plus group read for
/// the pod's fsGroup, whose group it gets. Without an fsGroup the kubelet leaves a file
/// root:root 0400, which the image's user cannot read; the log pod sets the image's 65532.
/// Returns the directory and the temporary directory holding it.
fn secret_volume(
    spec: &PodSpec,
    default_mode: u32,
    files: &[(&str, Vec<u8>)],
) -> (tempfile::TempDir, PathBuf) {
    let holder = tempfile::tempdir().unwrap();
    let dir = holder.path().join("credentials");
    let data = dir.join("..2026_01_01_00_00_00.000000000");
    std::fs::create_dir_all(&data).unwrap();
    // What the kubelet does: with an fsGroup a file is root:FSGROUP and group-readable,
    // without one it is root:root with the Secret's mode.
    let (group, mode) = match spec.security_context.as_ref().and_then(|c| c.fs_group) {
        Some(group) => (u32::try_from(group).unwrap(), default_mode | 0o440),
        None => (0, default_mode),
    };
    for (name, contents) in files {
        let file = data.join(name);
        std::fs::write(&file, contents).unwrap();
        std::os::unix::fs::chown(&file, Some(0), Some(group)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
    }
    for dir in [&dir, &data] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::os::unix::fs::symlink(data.file_name().unwrap(), dir.join("..data")).unwrap();
    (holder, dir)
}

/// The files of the `kubernetes.io/ssh-auth` Secret holding the SLURM test bed's key.
fn key_secret() -> Vec<(&'static str, Vec<u8>)> {
    vec![(
        "ssh-privatekey",
        std::fs::read(login("ssh").private_key).unwrap(),
    )]
}

/// The log pod's container: its one container, which must keep the root read-only.
fn container(pod: &Pod) -> &Container {
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    container
}

/// What running a log pod's container takes: its arguments, environment and volumes, with
/// the temporary directories holding its Secrets' files.
struct PodRun {
    args: Vec<String>,
    env: Vec<(String, String)>,
    volumes: Vec<Volume>,
    secrets: Vec<tempfile::TempDir>,
}

/// The log pod's container as the kubelet would run it, its Secret holding the test bed's
/// key (see [`secret_volume`]).
fn pod_run(pod: &Pod) -> PodRun {
    pod_run_with(pod, &key_secret())
}

/// The log pod's container as the kubelet would run it, its Secrets holding `files`.
fn pod_run_with(pod: &Pod, files: &[(&str, Vec<u8>)]) -> PodRun {
    let pod_spec = pod.spec.as_ref().unwrap();
    let container = container(pod);
    assert!(
        container.command.is_none(),
        "the log pod runs the image's ENTRYPOINT"
    );
    let env = container
        .env
        .iter()
        .flatten()
        .map(|var| (var.name.clone(), var.value.clone().unwrap_or_default()))
        .collect();
    let mut secrets = Vec::new();
    let mut volumes = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let volume = pod_spec
            .volumes
            .iter()
            .flatten()
            .find(|volume| volume.name == mount.name)
            .unwrap();
        if volume.empty_dir.is_some() {
            volumes.push(Volume::EmptyDir(mount.mount_path.clone()));
        } else if let Some(secret) = &volume.secret {
            assert_eq!(mount.read_only, Some(true));
            let mode = u32::try_from(secret.default_mode.unwrap_or(0o644)).unwrap();
            let (holder, dir) = secret_volume(pod_spec, mode, files);
            secrets.push(holder);
            volumes.push(Volume::Secret(dir, mount.mount_path.clone()));
        } else {
            panic!("the test does not model volume {volume:?}");
        }
    }
    assert!(
        volumes
            .iter()
            .any(|v| matches!(v, Volume::EmptyDir(path) if path == "/tmp")),
        "the log pod must mount an emptyDir on /tmp"
    );
    PodRun {
        args: container.args.clone().unwrap_or_default(),
        env,
        volumes,
        secrets,
    }
}

/// fetch-output, run in the image exactly as the log pod says (arguments, environment,
/// volumes), prints a SLURM job's stdout and stderr: the image's OpenSSH client reaches the
/// cluster as uid 65532 with no home and only /tmp writable. Without the writable /tmp the
/// same run fails, naming the read-only file system.
#[tokio::test]
async fn fetch_output_in_the_image_prints_a_slurm_jobs_output() {
    let facts = image_facts();
    let (id, expected) = finished_slurm_job().await;

    let pod = log_pod(&id);
    let PodRun {
        args,
        env,
        mut volumes,
        secrets: _secrets,
    } = pod_run(&pod);
    assert_eq!(args, ["fetch-output"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let output = run_in_image(&facts, &volumes, &env, None, &args);
    assert!(
        output.status.success(),
        "fetch-output failed in the image ({}): {}",
        output.status,
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), expected, "{}", text(&output.stderr));

    // The same run without the writable /tmp: the SSH client has nowhere for its control
    // socket and known_hosts.
    volumes.retain(|v| !matches!(v, Volume::EmptyDir(path) if path == "/tmp"));
    let output = run_in_image(&facts, &volumes, &env, None, &args);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(text(&output.stdout).is_empty(), "{}", text(&output.stdout));
    assert!(stderr.contains("fetch-output failed"), "{stderr}");
    assert!(
        stderr.contains("Read-only file system") && stderr.contains("/tmp/batchbridge-ssh-"),
        "{stderr}"
    );
}

/// A SLURM job of the test bed that succeeded, run with the test bed's key, and the output
/// fetch-output prints for it.
async fn finished_slurm_job() -> (batchbridge_core::JobId, String) {
    let backend =
        SlurmBackend::new(Arc::new(ssh_facts().key_shell()), SlurmConfig::default()).unwrap();
    let spec = JobSpec::new(
        unique_key("image-runtime"),
        "image-runtime",
        "printf 'hello from job %s\\n' \"$SLURM_JOB_ID\"\necho to-stderr >&2\n",
    );
    let id = backend.submit(&spec).await.unwrap();
    let status = conformance::wait_terminal(&backend, &id, &conformance::Config::default())
        .await
        .unwrap();
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let expected = format!("hello from job {id}\nto-stderr\n");
    (id, expected)
}

/// The image has MIT Kerberos's `kinit`, and with it a log pod whose BatchCluster logs in
/// with a keytab Secret (`keytab` and `principal`) prints a SLURM job's output through the
/// test bed's GSSAPI-only sshd (`kdc.sh`): fetch-output runs in the image with the pod's
/// environment plus the Kerberos configuration the operator hands its log pods
/// ([`output::KRB5_CONF_VAR`], here the test realm's krb5.conf; the image has none).
#[tokio::test]
async fn fetch_output_in_the_image_logs_in_with_a_keytab() {
    let facts = image_facts();
    let probe = run_in_image(
        &facts,
        &[writable_tmp()],
        &[],
        Some(&["/bin/sh", "-c"][..]),
        &["command -v kinit"],
    );
    assert_eq!(
        text(&probe.stdout),
        "/usr/bin/kinit\n",
        "{}",
        text(&probe.stderr)
    );

    let (id, expected) = finished_slurm_job().await;
    let kdc = kdc_facts();
    let pod = log_pod_through(
        &kdc.host,
        kdc.port,
        &kdc.user,
        &kdc.known_hosts,
        "kerberos-login",
        &id,
        json!({"clusterRef": {"name": "kerberos"}, "script": "true"}),
    );
    let keytab_secret = [
        ("keytab", std::fs::read(&kdc.user_keytab).unwrap()),
        ("principal", kdc.user_principal.clone().into_bytes()),
    ];
    let PodRun {
        args,
        mut env,
        volumes,
        secrets: _secrets,
    } = pod_run_with(&pod, &keytab_secret);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    env.push((
        output::KRB5_CONF_VAR.to_owned(),
        std::fs::read_to_string(&kdc.krb5_conf).unwrap(),
    ));
    let output = run_in_image(&facts, &volumes, &env, None, &args);
    assert!(
        output.status.success(),
        "fetch-output with a keytab failed in the image ({}): {}",
        output.status,
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), expected, "{}", text(&output.stderr));
}

/// A file the test creates to let a job go on: the job's script waits for it, so output the
/// test reads before creating it was printed while the job ran.
struct Gate {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl Gate {
    /// A gate in a directory the test bed's `batch` user can read.
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("batchbridge-follow-gate-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.path().join("open");
        Self { _dir: dir, file }
    }

    /// The script line that waits for the gate.
    fn wait(&self) -> String {
        format!("while [ ! -e {} ]; do sleep 0.2; done", self.file.display())
    }
}

/// Runs `pod` in the image's root file system, reads `before` lines of what it prints,
/// opens `gate`, then reads the rest; returns both and the pod's stderr once it succeeded
/// by itself (a pod that printed only at the end would hang until its time limit).
async fn follow_through_the_gate(
    pod: &Pod,
    before: usize,
    gate: &Gate,
) -> (Vec<String>, Vec<String>, String) {
    let facts = image_facts();
    let PodRun {
        args,
        env,
        volumes,
        secrets: _secrets,
    } = pod_run(pod);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let work = tempfile::tempdir().unwrap();
    let mut pod = in_image(&facts, work.path(), &volumes, &env, None, &args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = pod.stdout.take().unwrap();
    let gate_file = gate.file.clone();
    let (first, rest) = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let first: Vec<String> = lines.by_ref().take(before).map(Result::unwrap).collect();
        std::fs::write(&gate_file, "").unwrap();
        let rest: Vec<String> = lines.map(Result::unwrap).collect();
        (first, rest)
    })
    .await
    .unwrap();
    let status = pod.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(pod.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_ne!(status.code(), Some(124), "timed out: {stderr}");
    assert!(status.success(), "fetch-output failed ({status}): {stderr}");
    (first, rest, stderr)
}

/// The log pod started while its job runs prints the output live: the job prints a line,
/// then waits for a gate this test opens only once the pod printed that line, then prints
/// another and ends. The pod returns by itself after the job ended, with everything.
#[tokio::test]
async fn fetch_output_in_the_image_follows_a_running_job() {
    let backend =
        SlurmBackend::new(Arc::new(ssh_facts().key_shell()), SlurmConfig::default()).unwrap();
    let gate = Gate::new();
    let script = format!(
        "echo before the gate\n{}\necho after the gate >&2\n",
        gate.wait()
    );
    let spec = JobSpec::new(unique_key("image-follow"), "image-follow", script);
    let id = backend.submit(&spec).await.unwrap();

    let (before, after, stderr) = follow_through_the_gate(&log_pod(&id), 1, &gate).await;
    assert_eq!(
        (before, after),
        (
            vec!["before the gate".to_owned()],
            vec!["after the gate".to_owned()]
        ),
        "{stderr}"
    );
    let ended = backend.status_of(&id).await.unwrap();
    assert_eq!(ended.state, JobState::Succeeded, "{ended:?}");
}

/// The log pod of an array follows every task live: both tasks print a line, then wait for
/// a gate this test opens only once the pod printed both lines, each after its task's
/// header; then each prints another and ends. Were tasks printed only once the array ended,
/// or one task only after the other ended, the run would hang until its time limit.
#[tokio::test]
async fn fetch_output_in_the_image_follows_every_task_of_a_running_array() {
    let backend =
        SlurmBackend::new(Arc::new(ssh_facts().key_shell()), SlurmConfig::default()).unwrap();
    let gate = Gate::new();
    let script = format!(
        "echo \"task $BATCHBRIDGE_TASK_INDEX before the gate\"\n{}\necho \"task $BATCHBRIDGE_TASK_INDEX after the gate\" >&2\n",
        gate.wait()
    );
    let mut spec = JobSpec::new(
        unique_key("image-follow-array"),
        "image-follow-array",
        script,
    );
    spec.array = Some(batchbridge_core::ArraySpec::new(2));
    let id = backend.submit(&spec).await.unwrap();

    let pod = log_pod_of(
        &id,
        json!({"clusterRef": {"name": "slurm"}, "script": "true", "array": {"count": 2}}),
    );
    let (mut before, after, stderr) = follow_through_the_gate(&pod, 4, &gate).await;
    // The tasks start in either order; each line follows its own task's header.
    let task_first = |lines: &[String], task: u32| {
        lines.windows(2).any(|pair| {
            pair[0] == format!("==> task {task} <==")
                && pair[1] == format!("task {task} before the gate")
        })
    };
    assert!(
        task_first(&before, 0) && task_first(&before, 1),
        "both tasks' first lines, live, after their headers: {before:?} {stderr}"
    );
    before.extend(after.iter().cloned());
    for task in [0, 1] {
        let after_gate = format!("task {task} after the gate");
        let at = before.iter().position(|line| *line == after_gate);
        assert!(
            at.is_some_and(|at| before[..at]
                .iter()
                .rev()
                .find(|line| line.starts_with("==> task "))
                == Some(&format!("==> task {task} <=="))),
            "task {task}'s last line after its own header: {before:?}"
        );
    }
    let ended = backend.status_of(&id).await.unwrap();
    assert_eq!(ended.state, JobState::Succeeded, "{ended:?}");
}
