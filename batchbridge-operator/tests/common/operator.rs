//! Running the operator in a test: an operator in this process for a test namespace with a
//! BatchCluster on the test bed, and helpers to create jobs and wait for their status.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell, SshShell};
use batchbridge_operator::Operator;
use batchbridge_operator::crd::{BatchJob, BatchJobStatus, Phase};
use batchbridge_testbed::{Login, login};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Cluster;

/// How long any one wait may take before the test fails.
pub(crate) const PATIENCE: Duration = Duration::from_secs(90);

/// An operator running in this process for one namespace.
pub(crate) struct RunningOperator {
    pub(crate) client: kube::Client,
    pub(crate) stop: oneshot::Sender<()>,
    pub(crate) task: JoinHandle<()>,
}

impl RunningOperator {
    /// Starts an operator that authenticates with `client`: the one from
    /// [`Cluster::operator_client`], bound to exactly the role in `deploy/rbac/`.
    pub(crate) fn start(bed: &Cluster, client: &kube::Client) -> Self {
        Self::start_with(bed, client, |operator| operator)
    }

    /// [`Self::start`], with settings `configure` adds.
    pub(crate) fn start_with(
        bed: &Cluster,
        client: &kube::Client,
        configure: impl FnOnce(Operator) -> Operator,
    ) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let operator = configure(
            Operator::new(client.clone())
                .namespace(bed.namespace.clone())
                .image("batchbridge-operator:test"),
        );
        let task = tokio::spawn(operator.run(async move {
            let _ = stopped.await;
        }));
        Self {
            client: client.clone(),
            stop,
            task,
        }
    }

    /// Stops it the way a crash would: no graceful shutdown, whatever was in flight is lost.
    pub(crate) async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(30), self.task).await;
    }
}

/// A test namespace with a Secret and a BatchCluster for `component` (`ssh` for SLURM,
/// `htcondor` for the pool), and an operator running with the operator's role, not admin.
pub(crate) async fn set_up(
    test: &str,
    component: &str,
    scheduler: &str,
) -> (Cluster, RunningOperator) {
    let bed = Cluster::new(test).await;
    let login = login(component);
    create_secret(&bed, "cluster-key", &login).await;
    create_cluster(&bed, scheduler, scheduler, &login, "cluster-key").await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    (bed, operator)
}

pub(crate) async fn create_secret(bed: &Cluster, name: &str, login: &Login) {
    let key = std::fs::read(&login.private_key).unwrap();
    let secret = secret_of(name, "kubernetes.io/ssh-auth", [("ssh-privatekey", key)]);
    put_secret(bed, &secret).await;
}

/// Secret `name` of type `type_` holding `data`.
pub(crate) fn secret_of<const N: usize>(
    name: &str,
    type_: &str,
    data: [(&str, Vec<u8>); N],
) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: Some(
            data.into_iter()
                .map(|(key, value)| (key.to_owned(), ByteString(value)))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// Creates `secret` in the test namespace.
pub(crate) async fn put_secret(bed: &Cluster, secret: &Secret) {
    Api::<Secret>::namespaced(bed.client.clone(), &bed.namespace)
        .create(&PostParams::default(), secret)
        .await
        .unwrap();
}

pub(crate) async fn create_cluster(
    bed: &Cluster,
    name: &str,
    scheduler: &str,
    login: &Login,
    secret: &str,
) {
    let spec = cluster_spec(scheduler, &SshLogin::from(login), secret);
    create_cluster_with(bed, name, spec).await;
}

/// Where a BatchCluster logs in: host, port, user and the file of its host keys.
pub(crate) struct SshLogin<'a> {
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) user: &'a str,
    pub(crate) known_hosts: &'a Path,
}

impl<'a> From<&'a Login> for SshLogin<'a> {
    fn from(login: &'a Login) -> Self {
        Self {
            host: &login.host,
            port: login.port,
            user: &login.user,
            known_hosts: &login.known_hosts,
        }
    }
}

/// The spec of a BatchCluster for `scheduler` logging in at `ssh` with Secret `secret`,
/// polling every second; SLURM's submits to the test bed's `debug` partition.
pub(crate) fn cluster_spec(scheduler: &str, ssh: &SshLogin<'_>, secret: &str) -> Value {
    let mut spec = json!({
        "scheduler": scheduler,
        "ssh": {"host": ssh.host, "port": ssh.port, "user": ssh.user},
        "secretRef": {"name": secret},
        "knownHosts": std::fs::read_to_string(ssh.known_hosts).unwrap(),
        "pollInterval": "1s",
    });
    if scheduler == "slurm" {
        spec["defaults"] = json!({"partition": "debug"});
    }
    spec
}

/// Creates BatchCluster `name` with `spec` in the test namespace.
pub(crate) async fn create_cluster_with(bed: &Cluster, name: &str, spec: Value) {
    let cluster = serde_json::from_value(json!({
        "apiVersion": "batchbridge.dev/v1alpha1",
        "kind": "BatchCluster",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    bed.clusters()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
}

/// A BatchJob named `name` with `spec`, to create.
pub(crate) fn batch_job(name: &str, spec: Value) -> BatchJob {
    serde_json::from_value(json!({
        "apiVersion": "batchbridge.dev/v1alpha1",
        "kind": "BatchJob",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

pub(crate) async fn create_job(bed: &Cluster, name: &str, spec: Value) -> BatchJob {
    bed.jobs()
        .create(&PostParams::default(), &batch_job(name, spec))
        .await
        .unwrap()
}

/// What the log pod `name` prints. The test bed has no kubelet, so the pod's fetch-output
/// mode runs here, with the environment and the mounted Secret (the client key of test bed
/// component `component`) the pod would have.
pub(crate) async fn log_pod_output(bed: &Cluster, name: &str, component: &str) -> String {
    let env = log_pod_env(bed, name).await;
    let credentials = tempfile::tempdir().unwrap();
    std::fs::copy(
        login(component).private_key,
        credentials.path().join("ssh-privatekey"),
    )
    .unwrap();
    fetch_output(&env, credentials.path()).await
}

/// The environment of the container of log pod `name`.
pub(crate) async fn log_pod_env(bed: &Cluster, name: &str) -> BTreeMap<String, String> {
    let pod = Api::<Pod>::namespaced(bed.client.clone(), &bed.namespace)
        .get(name)
        .await
        .unwrap();
    pod.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

/// What the log pod's fetch-output mode prints with environment `env` and the cluster's
/// Secret mounted at `credentials`.
pub(crate) async fn fetch_output(env: &BTreeMap<String, String>, credentials: &Path) -> String {
    let mut printed = Vec::new();
    batchbridge_operator::output::fetch_output_to(
        &|name: &str| env.get(name).cloned(),
        credentials,
        &mut printed,
    )
    .await
    .unwrap();
    String::from_utf8(printed).unwrap()
}

pub(crate) fn status(job: &BatchJob) -> BatchJobStatus {
    job.status.clone().unwrap_or_default()
}

/// Polls job `name` every 50 ms until `check` holds; returns the job then.
pub(crate) async fn wait_for(
    bed: &Cluster,
    name: &str,
    what: &str,
    check: impl Fn(&BatchJobStatus) -> bool,
) -> BatchJob {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let job = bed.jobs().get(name).await.unwrap();
        if check(&status(&job)) {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: timed out waiting for {what}; status: {:#?}",
            job.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls BatchCluster `name` until its Reachable condition is False; returns that condition.
pub(crate) async fn wait_for_unreachable(bed: &Cluster, name: &str) -> Condition {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let cluster = bed.clusters().get(name).await.unwrap();
        let status = cluster.status.unwrap_or_default();
        if let Some(c) = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Reachable" && c.status == "False")
        {
            return c.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{name}: timed out waiting for Reachable False: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn wait_for_phase(bed: &Cluster, name: &str, phase: Phase) -> BatchJob {
    wait_for(bed, name, &format!("phase {phase:?}"), |s| {
        s.phase == Some(phase)
    })
    .await
}

/// Runs `command` on the SLURM test bed's login node and returns its stdout.
pub(crate) async fn slurm(command: &str) -> String {
    run_sh(&batchbridge_testbed::ssh_facts().key_shell(), command).await
}

/// Runs the shell line `command` through `shell` and returns its stdout; panics unless it
/// succeeded.
pub(crate) async fn run_sh(shell: &SshShell, command: &str) -> String {
    let output = shell
        .run(&Command::sh(command, Vec::<String>::new()))
        .await
        .unwrap();
    assert!(output.success(), "{command}: {}", output.stderr_text());
    output.stdout_text()
}

/// SLURM's state word for job `id`, from squeue while it knows the job, else sacct.
pub(crate) async fn slurm_state(id: &str) -> String {
    slurm(&format!(
        "s=$(squeue -h -j {id} -o %T 2>/dev/null); [ -n \"$s\" ] && echo \"$s\" || sacct -X -n -P -j {id} -o State"
    ))
    .await
    .trim()
    .to_owned()
}

pub(crate) async fn patch_spec(bed: &Cluster, name: &str, spec: Value) {
    bed.jobs()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap();
}

/// The Events (reason, note) about `name` once every reason in `reasons` is among them.
/// The operator publishes an Event after the status write that caused it, so a test that
/// has just seen the status would list too early. After 30 s it returns what there is, for
/// the caller's assertion to show.
pub(crate) async fn events_with(
    bed: &Cluster,
    name: &str,
    reasons: &[&str],
) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = events_of(bed, name).await;
        let all_there = reasons
            .iter()
            .all(|wanted| events.iter().any(|(reason, _)| reason == wanted));
        if all_there || Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The Events (reason, note) about `name` there are now.
pub(crate) async fn events_of(bed: &Cluster, name: &str) -> Vec<(String, String)> {
    let events = Api::<Event>::namespaced(bed.client.clone(), &bed.namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// `GET path` from an operator's endpoints: the status code and body, or `None` when
/// nothing answers.
pub(crate) async fn http_get(address: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: operator\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    Some((status, response.split_once("\r\n\r\n")?.1.to_owned()))
}

/// The value of the series `series` (name and labels, as Prometheus prints them) in the
/// metrics `text`.
pub(crate) fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split(' ').next()?.parse().ok())
}
