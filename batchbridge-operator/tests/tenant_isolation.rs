//! Tenant isolation (SECURITY.md): what a tenant of one namespace can make the operator do.
//!
//! The operator runs as deployed: the `batchbridge-operator` binary with the environment of
//! the Deployment that the default Helm chart renders (the test bed's helm), authenticating
//! with a ServiceAccount token bound to exactly the shipped ClusterRole. The tenant is a
//! ServiceAccount of namespace A bound to `batchbridge-edit` there and to nothing else; a
//! second tenant, in namespace B, has its own operator process, cluster and password on the
//! same machine. Every attempt must be refused by the API server, or show the tenant a
//! condition, or be harmless; each prints what the tenant saw (for the issue's note).

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use batchbridge_operator::crd::{BatchCluster, BatchJob, BatchJobStatus, Phase};
use batchbridge_testbed::{bastion_hops, helm_facts, kube_facts, login, ssh_facts};
use common::operator::{create_cluster, create_secret, status, wait_for, wait_for_phase};
use common::process::{OperatorProcess, write_operator_kubeconfig};
use common::{Cluster, api_error, client_of, eventually};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

/// The plain environment values of the operator's container as the chart renders it with
/// `sets` (`--set` arguments).
fn chart_env(sets: &[&str]) -> Vec<(String, String)> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/batchbridge-operator");
    let mut command = std::process::Command::new(helm_facts().helm);
    let home = tempfile::tempdir().unwrap();
    command
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .args(["template", "batchbridge-operator"])
        .arg(&chart)
        .args(["--namespace", "batchbridge-system"])
        // The chart has no default image (no registry publishes one).
        .args(["--set", "image.repository=batchbridge-operator"]);
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(output.stdout).unwrap()).unwrap();
    let deployment = docs.iter().find(|doc| doc["kind"] == "Deployment").unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|var| {
            Some((
                var["name"].as_str()?.to_owned(),
                var["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// A directory only root (the operator's user here) may enter, as a pod's files are the
/// operator's own: the SLURM jobs of the test run on this machine as the user `batch`.
fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// Starts an operator process for `bed` with the chart's environment `env`; waits until it
/// answers.
async fn operator(
    name: &'static str,
    bed: &Cluster,
    dir: &Path,
    env: &[(String, String)],
) -> OperatorProcess {
    let process = OperatorProcess::start_with(name, bed, dir, None, env);
    process
        .wait_until("it is ready", Duration::from_secs(30), async |p| {
            common::operator::http_get(p.address, "/readyz")
                .await
                .is_some_and(|(code, _)| code == 200)
        })
        .await;
    process
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Waits until BatchCluster `name`, as `api` (the tenant's) sees it, has Reachable=False
/// with `reason`; returns its message.
async fn unreachable_because(api: &Api<BatchCluster>, name: &str, reason: &str) -> String {
    let reachable = || async {
        let conditions = api
            .get(name)
            .await
            .unwrap()
            .status
            .map(|s| s.conditions)
            .unwrap_or_default();
        condition(&conditions, "Reachable").cloned()
    };
    eventually(&format!("{name}: Reachable=False, {reason}"), || async {
        reachable()
            .await
            .is_some_and(|c| c.status == "False" && c.reason == reason)
    })
    .await;
    reachable().await.unwrap().message
}

/// Waits until BatchJob `name` has ClusterReady=False with `reason`; returns its status.
async fn not_cluster_ready(bed: &Cluster, name: &str, reason: &str) -> BatchJobStatus {
    let job = wait_for(bed, name, &format!("ClusterReady=False, {reason}"), |s| {
        condition(&s.conditions, "ClusterReady")
            .is_some_and(|c| c.status == "False" && c.reason == reason)
    })
    .await;
    status(&job)
}

/// A BatchJob or BatchCluster `name` with `spec`, as the JSON a user sends: the fields the
/// schema does not have are kept, for the API server to refuse or drop.
fn object<K: kube::Resource<DynamicType = ()>>(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// The untyped API of `K` in `namespace` for `client`.
fn untyped<K: kube::Resource<DynamicType = ()>>(
    client: &kube::Client,
    namespace: &str,
) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<K>(&()))
}

/// Sends `object` twice as the user of `kubeconfig`: `kubectl create`, whose strict field
/// validation must refuse it, then `api` without that validation, which drops the fields
/// the schema does not have and must accept it. Returns the strict refusal.
async fn refused_strict_then_created(
    bed: &Cluster,
    kubeconfig: &Path,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
) -> String {
    let refusal = kubectl_create_refusal(bed, kubeconfig, object);
    api.create(&PostParams::default(), object).await.unwrap();
    refusal
}

/// `kubectl create` of `object` as the user of `kubeconfig`, with kubectl's default strict
/// field validation: what the API server answered, when it refused.
fn kubectl_create_refusal(
    bed: &Cluster,
    kubeconfig: &Path,
    object: &impl serde::Serialize,
) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(&bed.facts.kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", &bed.namespace, "create", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(object).unwrap().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        !output.status.success(),
        "kubectl create succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr).unwrap().trim().to_owned()
}

/// What a hostile script looks for on the machine it runs on: the environment, the
/// Kubernetes service account token, the operator's files (`$OPERATOR_DIR`: its
/// kubeconfig, the SSH connections' private directories), the usual temporary places, and
/// every process's environment and command line.
const CREDENTIAL_HUNT: &str = r#"
echo "== env"; env
echo "== service account"; cat /var/run/secrets/kubernetes.io/serviceaccount/token 2>&1
echo "== operator files"; ls -la "$OPERATOR_DIR" 2>&1
for f in "$OPERATOR_DIR"/* "$OPERATOR_DIR"/*/* "$OPERATOR_DIR"/*/*/*; do cat "$f" 2>&1; done
echo "== temporary places"
for f in /tmp/batchbridge-ssh-*/* /run/batchbridge/*/* "${XDG_RUNTIME_DIR:-/nonexistent}"/*/*; do
    cat "$f" 2>&1
done
echo "== processes"
for p in /proc/[0-9]*; do
    tr '\0' '\n' <"$p/environ" 2>/dev/null
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null; echo
done
echo "== done"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_reaches_nothing_beyond_its_namespace_and_the_operator_lends_it_no_rights() {
    let a = Cluster::new("tenant-a").await;
    let b = Cluster::new("tenant-b").await;
    let dir = private_dir();
    let env = chart_env(&[]);
    assert!(
        env.contains(&("ENABLE_LOCAL_SCHEDULER".into(), "false".into())),
        "the default chart turns the local scheduler off: {env:?}"
    );
    let image = env
        .iter()
        .find(|(k, _)| k == "OPERATOR_IMAGE")
        .unwrap()
        .1
        .clone();

    // Tenant B: a SLURM cluster reached with a password, a job running, its own operator.
    let password = ssh_facts().password;
    let slurm = login("ssh");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "b-login"},
        "type": "kubernetes.io/basic-auth",
        "stringData": {"password": password},
    }))
    .unwrap();
    Api::<Secret>::namespaced(b.client.clone(), &b.namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    create_cluster(&b, "b-cluster", "slurm", &slurm, "b-login").await;
    untyped::<BatchJob>(&b.client, &b.namespace)
        .create(
            &PostParams::default(),
            &object::<BatchJob>(
                "b-job",
                json!({"clusterRef": {"name": "b-cluster"}, "script": "sleep 120\n"}),
            ),
        )
        .await
        .unwrap();
    let b_dir = dir.path().join("b");
    std::fs::create_dir(&b_dir).unwrap();
    write_operator_kubeconfig(&b, &b_dir).await;
    let b_operator = operator("operator-b", &b, &b_dir, &env).await;
    wait_for_phase(&b, "b-job", Phase::Running).await;
    let b_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "b-job-output"}, "data": {"stdout": "tenant B's results"},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(b.client.clone(), &b.namespace)
        .create(&PostParams::default(), &b_map)
        .await
        .unwrap();

    // Tenant A: a SLURM cluster with a key, set up by its namespace admin; the tenant's
    // client; the operator.
    create_secret(&a, "a-login", &slurm).await;
    create_cluster(&a, "slurm", "slurm", &slurm, "a-login").await;
    let opaque: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-token"},
        "type": "Opaque",
        "stringData": {"token": "app-token-value-4242"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(a.client.clone(), &a.namespace)
        .create(&PostParams::default(), &opaque)
        .await
        .unwrap();
    let tenant_kubeconfig = dir.path().join("tenant-kubeconfig");
    let kubeconfig = a.tenant_kubeconfig().await;
    std::fs::write(
        &tenant_kubeconfig,
        serde_saphyr::to_string(&kubeconfig).unwrap(),
    )
    .unwrap();
    let tenant = client_of(kubeconfig).await;
    let jobs: Api<BatchJob> = Api::namespaced(tenant.clone(), &a.namespace);
    let tenant_jobs = untyped::<BatchJob>(&tenant, &a.namespace);
    let tenant_clusters = untyped::<BatchCluster>(&tenant, &a.namespace);
    let clusters: Api<BatchCluster> = Api::namespaced(tenant.clone(), &a.namespace);
    let a_dir = dir.path().join("a");
    std::fs::create_dir(&a_dir).unwrap();
    write_operator_kubeconfig(&a, &a_dir).await;
    let operator_token = {
        let kubeconfig: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(a_dir.join("kubeconfig")).unwrap())
                .unwrap();
        kubeconfig["users"][0]["user"]["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(operator_token.len() > 100, "{operator_token}");
    let a_operator = operator("operator-a", &a, &a_dir, &env).await;
    let mut seen = Vec::new();

    // 1. `scheduler: local` with the default install: the cluster is not Reachable, the
    //    job waits, nothing runs on the operator's machine.
    let marker = dir.path().join("local-job-ran");
    tenant_clusters
        .create(
            &PostParams::default(),
            &object::<BatchCluster>("local", json!({"scheduler": "local"})),
        )
        .await
        .unwrap();
    let script = format!("touch {}\n", marker.display());
    tenant_jobs
        .create(
            &PostParams::default(),
            &object::<BatchJob>(
                "local-job",
                json!({"clusterRef": {"name": "local"}, "script": script}),
            ),
        )
        .await
        .unwrap();
    let message = unreachable_because(&clusters, "local", "SchedulerDisabled").await;
    let job = not_cluster_ready(&a, "local-job", "SchedulerDisabled").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let job_now = status(&jobs.get("local-job").await.unwrap());
    assert!(
        job.job_id.is_none() && job_now.job_id.is_none(),
        "{job_now:?}"
    );
    assert!(
        !matches!(
            job_now.phase,
            Some(Phase::Running | Phase::Succeeded | Phase::Failed)
        ),
        "{job_now:?}"
    );
    assert!(!marker.exists(), "the local job ran");
    seen.push(format!(
        "scheduler: local -> Reachable=False SchedulerDisabled: {message}"
    ));

    // 2. A Secret of another namespace: the reference has no namespace field. Strict
    //    validation refuses it; otherwise the field is dropped and the name is looked up in
    //    the tenant's own namespace.
    let other_secret = json!({
        "scheduler": "slurm",
        "ssh": {"host": slurm.host, "port": slurm.port, "user": slurm.user},
        "secretRef": {"name": "b-login", "namespace": b.namespace},
        "knownHosts": std::fs::read_to_string(&slurm.known_hosts).unwrap(),
    });
    let refusal = refused_strict_then_created(
        &a,
        &tenant_kubeconfig,
        &tenant_clusters,
        &object::<BatchCluster>("steal-secret", other_secret.clone()),
    )
    .await;
    assert!(
        refusal.contains("unknown field \"spec.secretRef.namespace\""),
        "{refusal}"
    );
    seen.push(format!(
        "secretRef to namespace B, strict (kubectl create) -> {refusal}"
    ));
    let message = unreachable_because(&clusters, "steal-secret", "SecretNotFound").await;
    assert!(message.contains(&a.namespace), "{message}");
    seen.push(format!(
        "secretRef to namespace B -> Reachable=False SecretNotFound: {message}"
    ));

    // 3. A Secret of the wrong type in the tenant's namespace (which batchbridge-edit cannot
    //    read): refused by type, its value never shown.
    let mut wrong_type = other_secret.clone();
    wrong_type["secretRef"] = json!({"name": "app-token"});
    tenant_clusters
        .create(
            &PostParams::default(),
            &object::<BatchCluster>("wrong-type", wrong_type),
        )
        .await
        .unwrap();
    let message = unreachable_because(&clusters, "wrong-type", "SecretMalformed").await;
    assert!(!message.contains("app-token-value"), "{message}");
    seen.push(format!(
        "secretRef to an Opaque Secret -> Reachable=False SecretMalformed: {message}"
    ));

    // 4. A BatchCluster of another namespace.
    let other_cluster = json!({
        "clusterRef": {"name": "b-cluster", "namespace": b.namespace},
        "script": "echo borrowed\n",
    });
    let refusal = refused_strict_then_created(
        &a,
        &tenant_kubeconfig,
        &tenant_jobs,
        &object::<BatchJob>("borrow", other_cluster),
    )
    .await;
    assert!(
        refusal.contains("unknown field \"spec.clusterRef.namespace\""),
        "{refusal}"
    );
    seen.push(format!(
        "clusterRef to namespace B, strict (kubectl create) -> {refusal}"
    ));
    let job = not_cluster_ready(&a, "borrow", "BatchClusterNotFound").await;
    assert!(job.job_id.is_none(), "{job:?}");
    let message = condition(&job.conditions, "ClusterReady")
        .unwrap()
        .message
        .clone();
    seen.push(format!(
        "clusterRef to namespace B -> ClusterReady=False BatchClusterNotFound: {message}"
    ));

    // 5. A job hunting for credentials on the machine it runs on, with fields meant to
    //    change the log pod (service account, image, command, volumes, namespace) that the
    //    schema does not have. Strict validation names them; otherwise they are dropped.
    let hunt = json!({
        "clusterRef": {"name": "slurm"},
        "script": CREDENTIAL_HUNT,
        "environment": {"OPERATOR_DIR": dir.path()},
        "outputPolicy": {
            "configMap": true, "logPod": true, "tailBytes": 4096,
            "serviceAccountName": "batchbridge-operator", "image": "evil/image",
            "command": ["sh", "-c", "cat /var/run/secrets/*"], "namespace": b.namespace,
            "volumes": [{"name": "x", "secret": {"secretName": "app-token"}}],
        },
    });
    let refusal = refused_strict_then_created(
        &a,
        &tenant_kubeconfig,
        &tenant_jobs,
        &object::<BatchJob>("hunt", hunt),
    )
    .await;
    for field in [
        "serviceAccountName",
        "image",
        "command",
        "namespace",
        "volumes",
    ] {
        assert!(
            refusal.contains(&format!("spec.outputPolicy.{field}")),
            "{refusal}"
        );
    }
    seen.push(format!(
        "log pod fields, strict (kubectl create) -> {refusal}"
    ));
    let done = wait_for(&a, "hunt", "output collected", |s| {
        condition(&s.conditions, "OutputCollected").is_some()
    })
    .await;
    assert_eq!(
        status(&done).phase,
        Some(Phase::Succeeded),
        "{:?}",
        done.status
    );
    let output = Api::<ConfigMap>::namespaced(a.client.clone(), &a.namespace)
        .get("hunt-output")
        .await
        .unwrap()
        .data
        .unwrap();
    let stdout = &output["stdout"];
    assert!(
        stdout.contains("== done"),
        "the hunt ran to its end: {stdout}"
    );
    assert!(stdout.contains("Permission denied"), "{stdout}");
    let key = std::fs::read_to_string(&slurm.private_key).unwrap();
    let secrets = [
        ("the operator's token", operator_token.as_str()),
        ("tenant A's key", key.lines().nth(1).unwrap()),
        ("tenant B's password", password.as_str()),
        ("the Opaque Secret", "app-token-value-4242"),
    ];
    for (what, secret) in secrets {
        assert!(
            !stdout.contains(secret) && !output["stderr"].contains(secret),
            "{what} is in the job's output"
        );
    }
    seen.push(format!(
        "a job printing its environment, every process's environment and command line and the \
         operator's files ({} bytes of output) -> none of: {}",
        stdout.len(),
        secrets.map(|(what, _)| what).join(", ")
    ));

    // ...and the log pod is the operator's: its image and command, no service account token,
    // in the job's namespace, with only the tenant's own cluster Secret mounted.
    let pod = Api::<Pod>::namespaced(a.client.clone(), &a.namespace)
        .get("hunt-log")
        .await
        .unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(
        pod.metadata.namespace.as_deref(),
        Some(a.namespace.as_str())
    );
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(
        spec.service_account_name.as_deref().unwrap_or("default"),
        "default"
    );
    assert_eq!(spec.containers.len(), 1);
    let container = &spec.containers[0];
    assert_eq!(container.image.as_deref(), Some(image.as_str()));
    assert_eq!(container.command, None);
    assert_eq!(container.args, Some(vec!["fetch-output".to_owned()]));
    let secrets: Vec<_> = spec
        .volumes
        .unwrap()
        .into_iter()
        .filter_map(|v| v.secret.and_then(|s| s.secret_name))
        .collect();
    assert_eq!(secrets, ["a-login"]);
    seen.push("log pod -> the operator's image and command, no token, only Secret a-login".into());

    // 6. Output objects named like ones the job does not own: left alone, and said so.
    let admin_maps = Api::<ConfigMap>::namespaced(a.client.clone(), &a.namespace);
    let admin_pods = Api::<Pod>::namespaced(a.client.clone(), &a.namespace);
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "squat-output"}, "data": {"app.conf": "keep me"},
    }))
    .unwrap();
    let theirs = admin_maps
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let their_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "squat-log"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))
    .unwrap();
    let their_pod = admin_pods
        .create(&PostParams::default(), &their_pod)
        .await
        .unwrap();
    tenant_jobs
        .create(
            &PostParams::default(),
            &object::<BatchJob>(
                "squat",
                json!({
                    "clusterRef": {"name": "slurm"}, "script": "echo squatting\n",
                    "outputPolicy": {"configMap": true, "logPod": true},
                }),
            ),
        )
        .await
        .unwrap();
    let done = wait_for(&a, "squat", "output collected", |s| {
        condition(&s.conditions, "OutputCollected").is_some()
    })
    .await;
    let collected = condition(&status(&done).conditions, "OutputCollected")
        .unwrap()
        .clone();
    assert_eq!(
        (collected.status.as_str(), collected.reason.as_str()),
        ("False", "OutputNameTaken")
    );
    assert!(
        collected.message.contains("ConfigMap squat-output"),
        "{collected:?}"
    );
    assert!(collected.message.contains("Pod squat-log"), "{collected:?}");
    let map_now = admin_maps.get("squat-output").await.unwrap();
    assert_eq!(map_now.data, theirs.data);
    assert_eq!(map_now.metadata.owner_references, None);
    let pod_now = admin_pods.get("squat-log").await.unwrap();
    assert_eq!(
        pod_now.metadata.uid, their_pod.metadata.uid,
        "the pod was replaced"
    );
    assert_eq!(status(&done).output_tail.as_deref(), Some("squatting\n"));
    seen.push(format!(
        "output names taken by others -> OutputCollected=False OutputNameTaken: {}",
        collected.message
    ));

    // 7. What the tenant may read and write directly.
    let b_jobs: Api<BatchJob> = Api::namespaced(tenant.clone(), &b.namespace);
    let b_maps: Api<ConfigMap> = Api::namespaced(tenant.clone(), &b.namespace);
    let b_pods: Api<Pod> = Api::namespaced(tenant.clone(), &b.namespace);
    let a_secrets: Api<Secret> = Api::namespaced(tenant.clone(), &a.namespace);
    let status_write = kube::api::Patch::Merge(json!({"status": {"phase": "Succeeded"}}));
    let attempts = [
        (
            "list BatchJobs of B",
            api_error(b_jobs.list(&ListParams::default()).await, 403),
        ),
        (
            "get BatchJob b-job of B",
            api_error(b_jobs.get("b-job").await, 403),
        ),
        (
            "get ConfigMap b-job-output of B",
            api_error(b_maps.get("b-job-output").await, 403),
        ),
        (
            "list pods of B",
            api_error(b_pods.list(&ListParams::default()).await, 403),
        ),
        (
            "get Secret app-token of A",
            api_error(a_secrets.get("app-token").await, 403),
        ),
        (
            "write the status of its own BatchJob",
            api_error(
                jobs.patch_status("hunt", &Default::default(), &status_write)
                    .await,
                403,
            ),
        ),
    ];
    for (what, message) in attempts {
        seen.push(format!("tenant: {what} -> 403: {message}"));
    }

    eprintln!("what the tenant saw:\n- {}", seen.join("\n- "));
    // B's job is cancelled by B's operator, which must still run to remove its finalizer.
    b.jobs().delete("b-job", &Default::default()).await.unwrap();
    eventually("b-job to be gone", || async {
        b.jobs().get_opt("b-job").await.unwrap().is_none()
    })
    .await;
    drop((a_operator, b_operator));
    a.clean_up().await;
    b.clean_up().await;
}

/// With the local scheduler turned on by the installer (the chart's
/// `localScheduler.enabled`), a local job runs with none of the operator's environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_job_gets_none_of_the_operators_environment() {
    let bed = Cluster::new("tenant-local").await;
    let dir = private_dir();
    let mut env = chart_env(&["localScheduler.enabled=true"]);
    assert!(env.contains(&("ENABLE_LOCAL_SCHEDULER".into(), "true".into())));
    // What a pod's environment would hold beside the chart's.
    env.extend([
        ("KUBERNETES_SERVICE_HOST".to_owned(), "10.96.0.1".to_owned()),
        ("KUBERNETES_SERVICE_PORT".to_owned(), "443".to_owned()),
    ]);
    write_operator_kubeconfig(&bed, dir.path()).await;
    let _operator = operator("operator-local", &bed, dir.path(), &env).await;
    let tenant = bed.tenant_client().await;
    untyped::<BatchCluster>(&tenant, &bed.namespace)
        .create(
            &PostParams::default(),
            &object::<BatchCluster>("local", json!({"scheduler": "local"})),
        )
        .await
        .unwrap();
    untyped::<BatchJob>(&tenant, &bed.namespace)
        .create(
            &PostParams::default(),
            &object::<BatchJob>(
                "env",
                json!({
                    "clusterRef": {"name": "local"},
                    "script": "env | sort\n",
                    "outputPolicy": {"tailBytes": 4096},
                }),
            ),
        )
        .await
        .unwrap();
    let done = wait_for(&bed, "env", "output collected", |s| {
        condition(&s.conditions, "OutputCollected").is_some()
    })
    .await;
    let status = status(&done);
    assert_eq!(status.phase, Some(Phase::Succeeded), "{status:?}");
    let vars: BTreeMap<&str, &str> = status
        .output_tail
        .as_deref()
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    for leaked in [
        "KUBECONFIG",
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
        "WATCH_NAMESPACE",
        "OPERATOR_IMAGE",
        "METRICS_ADDR",
        "XDG_RUNTIME_DIR",
        "TMPDIR",
        "RUST_LOG",
    ] {
        assert!(
            !vars.contains_key(leaked),
            "{leaked} reached the job: {vars:?}"
        );
    }
    assert_eq!(vars.get("PATH"), Some(&"/usr/local/bin:/usr/bin:/bin"));
    let home = vars["HOME"];
    assert!(
        home.starts_with(dir.path().join("operator-local").to_str().unwrap()),
        "HOME is the job's directory: {home}"
    );
    eprintln!("a local job's environment: {vars:?}");
    bed.clean_up().await;
}

/// With the installer's allowlist (Helm value allowedSshTargets), a tenant's BatchCluster
/// can make the operator connect only to the login nodes it names: one naming the API
/// server, a closed port, or another spelling of an allowed host is refused before any
/// connection, all with the same message, so the condition scans nothing; the allowed login
/// node still runs jobs.
#[tokio::test]
async fn the_operator_connects_only_to_the_allowed_login_nodes() {
    let bed = Cluster::new("tenant-allow").await;
    let dir = private_dir();
    let ssh = login("ssh");
    let allowed = format!("{}:{}", ssh.host, ssh.port);
    let env = chart_env(&[&format!(
        "allowedSshTargets={{{allowed},login.hpc.example.org:22}}"
    )]);
    assert!(env.contains(&(
        "ALLOWED_SSH_TARGETS".into(),
        format!("{allowed},login.hpc.example.org:22")
    )));
    write_operator_kubeconfig(&bed, dir.path()).await;
    let _operator = operator("operator-allow", &bed, dir.path(), &env).await;
    create_secret(&bed, "cluster-key", &ssh).await;
    create_cluster(&bed, "allowed", "slurm", &ssh, "cluster-key").await;
    let tenant = bed.tenant_client().await;
    let clusters = Api::<BatchCluster>::namespaced(tenant.clone(), &bed.namespace);
    let api_server = kube_facts()
        .server
        .trim_start_matches("https://")
        .to_owned();
    let (api_host, api_port) = api_server.rsplit_once(':').unwrap();
    let mut messages = BTreeSet::new();
    for (name, host, port) in [
        ("api-server", api_host, api_port.parse::<u16>().unwrap()),
        ("closed-port", "127.0.0.1", 1),
        ("other-port", ssh.host.as_str(), 22),
        ("other-spelling", "127.1", ssh.port),
        ("metadata", "169.254.169.254", 80),
    ] {
        untyped::<BatchCluster>(&tenant, &bed.namespace)
            .create(
                &PostParams::default(),
                &object::<BatchCluster>(
                    name,
                    json!({
                        "scheduler": "slurm",
                        "ssh": {"host": host, "port": port, "user": "batch"},
                        "secretRef": {"name": "cluster-key"},
                        "knownHosts": std::fs::read_to_string(&ssh.known_hosts).unwrap(),
                    }),
                ),
            )
            .await
            .unwrap();
        messages.insert(unreachable_because(&clusters, name, "HostNotAllowed").await);
    }
    assert_eq!(
        messages.len(),
        1,
        "one message for every refused target: {messages:#?}"
    );
    let message = messages.pop_first().unwrap();
    assert!(message.contains("allowedSshTargets"), "{message}");

    untyped::<BatchJob>(&tenant, &bed.namespace)
        .create(
            &PostParams::default(),
            &object::<BatchJob>(
                "on-allowed",
                json!({"clusterRef": {"name": "allowed"}, "script": "echo allowed\n"}),
            ),
        )
        .await
        .unwrap();
    wait_for_phase(&bed, "on-allowed", Phase::Succeeded).await;
    bed.clean_up().await;
}

/// A jump host (`ssh.jumpHosts`) is held to the login node's rules: its Secret is named,
/// never namespaced, so it is only ever read from the tenant's own namespace; its host has
/// ssh.host's pattern; the installer's allowlist applies to every hop, refused before any
/// connection like ssh.host; and a chain is at most 4 hops long.
#[tokio::test]
async fn a_jump_host_obeys_the_rules_of_the_login_node() {
    let a = Cluster::new("tenant-jump-a").await;
    let b = Cluster::new("tenant-jump-b").await;
    let dir = private_dir();
    let ssh = login("ssh");
    let hops = bastion_hops();
    // The login node and hop 1 are allowed, hop 2 is not.
    let allowed = format!(
        "{}:{},{}:{}",
        ssh.host, ssh.port, hops[0].host, hops[0].port
    );
    let env = chart_env(&[&format!("allowedSshTargets={{{allowed}}}")]);
    write_operator_kubeconfig(&a, dir.path()).await;
    let _operator = operator("operator-jump", &a, dir.path(), &env).await;
    // Namespace B holds a good key for hop 1; A holds the login's key only.
    let hop_key = |hop: &batchbridge_testbed::BastionHop| batchbridge_testbed::Login {
        private_key: hop.key.clone(),
        ..ssh.clone()
    };
    create_secret(&b, "b-hop-key", &hop_key(&hops[0])).await;
    create_secret(&a, "cluster-key", &ssh).await;
    create_secret(&a, "hop-1-key", &hop_key(&hops[0])).await;
    create_secret(&a, "hop-2-key", &hop_key(&hops[1])).await;

    let tenant_kubeconfig = dir.path().join("tenant-kubeconfig");
    let kubeconfig = a.tenant_kubeconfig().await;
    std::fs::write(
        &tenant_kubeconfig,
        serde_saphyr::to_string(&kubeconfig).unwrap(),
    )
    .unwrap();
    let tenant = client_of(kubeconfig).await;
    let tenant_clusters = untyped::<BatchCluster>(&tenant, &a.namespace);
    let clusters: Api<BatchCluster> = Api::namespaced(tenant.clone(), &a.namespace);
    let hop = |index: usize, secret: Value| {
        json!({
            "host": hops[index].host, "port": hops[index].port, "user": hops[index].user,
            "secretRef": secret,
            "knownHosts": std::fs::read_to_string(&hops[index].known_hosts).unwrap(),
        })
    };
    let through = |jump_hosts: Vec<Value>| {
        json!({
            "scheduler": "slurm",
            "ssh": {"host": ssh.host, "port": ssh.port, "user": ssh.user, "jumpHosts": jump_hosts},
            "secretRef": {"name": "cluster-key"},
            "knownHosts": std::fs::read_to_string(&ssh.known_hosts).unwrap(),
        })
    };
    let mut seen = Vec::new();

    // 1. A hop's Secret in namespace B: the reference has no namespace field. Strict
    //    validation refuses it; otherwise the field is dropped and the name is looked up in
    //    the tenant's own namespace, where it does not exist.
    let steal = through(vec![hop(
        0,
        json!({"name": "b-hop-key", "namespace": b.namespace}),
    )]);
    let refusal = refused_strict_then_created(
        &a,
        &tenant_kubeconfig,
        &tenant_clusters,
        &object::<BatchCluster>("steal-hop-key", steal),
    )
    .await;
    assert!(
        refusal.contains("unknown field \"spec.ssh.jumpHosts[0].secretRef.namespace\""),
        "{refusal}"
    );
    seen.push(format!(
        "a hop's secretRef to namespace B, strict -> {refusal}"
    ));
    let message = unreachable_because(&clusters, "steal-hop-key", "SecretNotFound").await;
    assert!(
        message.contains("spec.ssh.jumpHosts[0]") && message.contains(&a.namespace),
        "{message}"
    );
    seen.push(format!(
        "a hop's secretRef to namespace B -> SecretNotFound: {message}"
    ));

    // 2. Hop hosts ssh could misread, and a fifth hop: refused by the API server, as for
    //    ssh.host.
    for (name, jump_hosts, says) in [
        (
            "option-host",
            vec![
                json!({"host": "-oProxyCommand=touch /tmp/owned", "user": "batch",
                        "secretRef": {"name": "hop-1-key"}, "knownHosts": "x"}),
            ],
            "spec.ssh.jumpHosts[0].host",
        ),
        (
            "space-host",
            vec![
                hop(0, json!({"name": "hop-1-key"})),
                json!({"host": "a b", "user": "batch",
                 "secretRef": {"name": "hop-1-key"}, "knownHosts": "x"}),
            ],
            "spec.ssh.jumpHosts[1].host",
        ),
        (
            "no-known-hosts",
            vec![json!({"host": "bastion", "user": "batch", "secretRef": {"name": "hop-1-key"}})],
            "spec.ssh.jumpHosts[0].knownHosts",
        ),
        (
            "five-hops",
            (0..5)
                .map(|_| hop(0, json!({"name": "hop-1-key"})))
                .collect(),
            "spec.ssh.jumpHosts",
        ),
    ] {
        let refused = tenant_clusters
            .create(
                &PostParams::default(),
                &object::<BatchCluster>(name, through(jump_hosts)),
            )
            .await;
        let refusal = api_error(refused, 422);
        assert!(refusal.contains(says), "{name}: {refusal}");
        seen.push(format!("{name} -> {refusal}"));
    }

    // 3. A hop the allowlist does not name: refused before any connection.
    tenant_clusters
        .create(
            &PostParams::default(),
            &object::<BatchCluster>(
                "hop-not-allowed",
                through(vec![
                    hop(0, json!({"name": "hop-1-key"})),
                    hop(1, json!({"name": "hop-2-key"})),
                ]),
            ),
        )
        .await
        .unwrap();
    let message = unreachable_because(&clusters, "hop-not-allowed", "HostNotAllowed").await;
    assert!(
        message.contains("ssh.jumpHosts[1]") && message.contains("allowedSshTargets"),
        "{message}"
    );
    seen.push(format!(
        "hop 2 not on the allowlist -> HostNotAllowed: {message}"
    ));

    // The allowed hop still takes jobs through it.
    tenant_clusters
        .create(
            &PostParams::default(),
            &object::<BatchCluster>(
                "through-hop-1",
                through(vec![hop(0, json!({"name": "hop-1-key"}))]),
            ),
        )
        .await
        .unwrap();
    untyped::<BatchJob>(&tenant, &a.namespace)
        .create(
            &PostParams::default(),
            &object::<BatchJob>(
                "via-hop-1",
                json!({"clusterRef": {"name": "through-hop-1"}, "script": "echo via\n"}),
            ),
        )
        .await
        .unwrap();
    wait_for_phase(&a, "via-hop-1", Phase::Succeeded).await;
    for line in seen {
        eprintln!("{line}");
    }
    a.clean_up().await;
    b.clean_up().await;
}

/// The roles a namespace admin already hands out include BatchJobs once the tenants' roles
/// are installed: kube-controller-manager's clusterrole-aggregation controller (which the test
/// bed runs) fills `batchbridge-edit` into `edit` and `admin`, `batchbridge-view` into
/// `view`. Whoever holds `edit` or `admin` may create BatchJobs and BatchClusters; `view` may
/// read them and create nothing.
#[tokio::test]
async fn the_built_in_namespace_roles_hand_out_batchjobs() {
    let bed = Cluster::new("tenant-builtin").await;
    let job = || {
        object::<BatchJob>(
            "hello",
            json!({"clusterRef": {"name": "hpc"}, "script": "echo hello\n"}),
        )
    };
    let cluster = || object::<BatchCluster>("hpc", json!({"scheduler": "local"}));
    let mut seen = Vec::new();
    for (role, may_write) in [("edit", true), ("admin", true), ("view", false)] {
        let client = client_of(bed.kubeconfig_bound_to(role, role).await).await;
        let jobs = untyped::<BatchJob>(&client, &bed.namespace);
        let clusters = untyped::<BatchCluster>(&client, &bed.namespace);
        // The aggregation controller works asynchronously: give it time to add the rules.
        eventually(&format!("{role} to list BatchJobs"), || async {
            jobs.list(&ListParams::default()).await.is_ok()
        })
        .await;
        clusters.list(&ListParams::default()).await.unwrap();
        if may_write {
            jobs.create(&PostParams::default(), &job()).await.unwrap();
            clusters
                .create(&PostParams::default(), &cluster())
                .await
                .unwrap();
            jobs.delete("hello", &Default::default()).await.unwrap();
            clusters.delete("hpc", &Default::default()).await.unwrap();
            seen.push(format!(
                "{role}: lists, creates and deletes BatchJobs and BatchClusters"
            ));
        } else {
            let refusal = api_error(jobs.create(&PostParams::default(), &job()).await, 403);
            api_error(
                clusters.create(&PostParams::default(), &cluster()).await,
                403,
            );
            seen.push(format!("{role}: lists; create -> 403: {refusal}"));
        }
    }
    eprintln!("the built-in roles:\n- {}", seen.join("\n- "));
    bed.clean_up().await;
}
