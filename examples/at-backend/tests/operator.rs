//! The operator binary with the at backend registered (`batchbridge-operator-with-at`), as
//! a process of its own, against the test bed's real kube-apiserver and its atd through the
//! sshd: a BatchCluster with `scheduler: at`, and BatchJobs that end the way a user reads
//! them in their status.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use batchbridge_operator::crd::{BatchCluster, BatchJob, BatchJobStatus, Phase, crds};
use batchbridge_testbed::{at_facts, kube_facts, ssh_facts};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

/// The field manager the operator's own tests apply the CRDs with: the same content under
/// the same manager, so concurrent tests do not conflict.
const CRDS_MANAGER: &str = "batchbridge-crds-test";

/// Polls `check` every 200 ms until it holds, panicking with `what` after 90 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(90);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An admin client of the test bed's API server, with the CRDs applied and established.
async fn admin() -> Client {
    let facts = kube_facts();
    let kubeconfig = Kubeconfig::read_from(&facts.kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap();
        api.patch(
            &name,
            &PatchParams::apply(CRDS_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap();
        eventually(&format!("{name} to be established"), || async {
            let crd = api.get(&name).await.unwrap();
            crd.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
        .await;
    }
    client
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap();
}

async fn job_status(jobs: &Api<BatchJob>, name: &str) -> BatchJobStatus {
    jobs.get(name).await.unwrap().status.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_jobs_on_an_at_cluster_end_with_their_output_and_exit_code() {
    let client = admin().await;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let namespace = format!("at-operator-{}-{nanos}", std::process::id());
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": namespace}}),
    )
    .await;
    let ssh = ssh_facts();
    let key = std::fs::read(&ssh.private_key).unwrap();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("at-key".into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/ssh-auth".into()),
        data: Some([("ssh-privatekey".to_owned(), ByteString(key))].into()),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let clusters = Api::<BatchCluster>::namespaced(client.clone(), &namespace);
    create(
        &clusters,
        json!({
            "metadata": {"name": "box"},
            "spec": {
                "scheduler": "at",
                "ssh": {"host": ssh.host, "port": ssh.port, "user": ssh.user},
                "secretRef": {"name": "at-key"},
                "knownHosts": std::fs::read_to_string(&ssh.known_hosts).unwrap(),
                "pollInterval": "1s",
            },
        }),
    )
    .await;

    let log = std::env::temp_dir().join(format!("{namespace}.log"));
    let operator = start_operator(&namespace, &log);
    let jobs = Api::<BatchJob>::namespaced(client.clone(), &namespace);
    let script = "echo \"hello from at job $BATCHBRIDGE_JOB_ID\"\necho to-stderr >&2\n";
    create(
        &jobs,
        json!({"metadata": {"name": "hello"}, "spec": {"clusterRef": {"name": "box"}, "script": script}}),
    )
    .await;
    create(
        &jobs,
        json!({"metadata": {"name": "fails"}, "spec": {"clusterRef": {"name": "box"}, "script": "exit 3\n"}}),
    )
    .await;

    let shown = log.display();
    eventually(
        &format!("hello to succeed with its output (log: {shown})"),
        || async {
            let status = job_status(&jobs, "hello").await;
            status.phase == Some(Phase::Succeeded) && status.output_tail.is_some()
        },
    )
    .await;
    let hello = job_status(&jobs, "hello").await;
    let id = hello.job_id.clone().unwrap();
    assert_eq!(
        hello.output_tail.as_deref(),
        Some(format!("hello from at job {id}\nto-stderr\n").as_str())
    );
    assert_eq!(
        (hello.exit_code, hello.user.as_deref()),
        (Some(0), Some("batch"))
    );
    eventually(&format!("fails to fail (log: {shown})"), || async {
        job_status(&jobs, "fails").await.phase == Some(Phase::Failed)
    })
    .await;
    assert_eq!(job_status(&jobs, "fails").await.exit_code, Some(3));
    let cluster = clusters
        .get("box")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    assert_eq!(
        cluster.scheduler_version,
        Some(format!("at {}", at_facts().version))
    );

    // The operator removes its finalizers from deleted jobs; then the namespace can go.
    jobs.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    eventually("the BatchJobs to be deleted", || async {
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    drop(operator);
    Api::<Namespace>::all(client)
        .delete(&namespace, &DeleteParams::default())
        .await
        .unwrap();
    let _ = std::fs::remove_file(&log);
}

/// `batchbridge-operator-with-at` for `namespace`, as the admin of the test bed's API
/// server, its log in `log`; killed when dropped.
fn start_operator(namespace: &str, log: &PathBuf) -> tokio::process::Child {
    let log = std::fs::File::create(log).unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_batchbridge-operator-with-at"))
        .env("KUBECONFIG", kube_facts().kubeconfig)
        .env("WATCH_NAMESPACE", namespace)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}
