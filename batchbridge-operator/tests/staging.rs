//! A BatchJob's spec.inputs and spec.outputs end to end on the real API server, SLURM and
//! the test bed's SeaweedFS object store: inputs from a ConfigMap, a Secret and an S3
//! prefix reach the job's working directory; its output reaches S3 byte for byte; a job
//! that fails still sends its `when: Always` output (and not its OnSuccess one), its phase
//! staying Failed; a ConfigMap output beyond 512 KiB is refused, the job still Succeeded;
//! a job naming another namespace's ConfigMap, an unlabelled Secret or an object store the
//! operator's allowlist does not name is refused unsubmitted; a glob and a directory
//! output reach their prefixes byte for byte, their hostile names (a newline, a `..`, a
//! symbolic link) left behind. What is in the store is read with curl, not with the operator's code.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use batchbridge_operator::crd::Phase;
use batchbridge_operator::reason::{ConditionType, Reason};
use batchbridge_testbed::{SeaweedFsFacts, login, seaweedfs_facts};
use common::Cluster;
use common::operator::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::{Value, json};

/// curl signing with the test bed's key; the HTTP status and the body.
fn s3(store: &SeaweedFsFacts, args: &[&str], path: &str) -> (String, Vec<u8>) {
    let body = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("curl")
        .args(["-s", "-o"])
        .arg(body.path())
        .args(["-w", "%{http_code}", "--aws-sigv4"])
        .arg(format!("aws:amz:{}:s3", store.region))
        .arg("--user")
        .arg(format!("{}:{}", store.access_key, store.secret_key))
        .args(args)
        .arg(format!("{}/{path}", store.endpoint))
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {out:?}");
    (
        String::from_utf8(out.stdout).unwrap(),
        std::fs::read(body.path()).unwrap(),
    )
}

fn put_object(store: &SeaweedFsFacts, path: &str, bytes: &[u8]) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let (status, _) = s3(store, &["-T", file.path().to_str().unwrap()], path);
    assert_eq!(status, "200", "PUT {path}");
}

fn get_object(store: &SeaweedFsFacts, path: &str) -> Option<Vec<u8>> {
    match s3(store, &[], path) {
        (status, body) if status == "200" => Some(body),
        (status, _) if status == "404" => None,
        (status, body) => panic!("GET {path}: {status} {}", String::from_utf8_lossy(&body)),
    }
}

/// This test's place in the test bed's bucket: the bucket and a key prefix named after the
/// test namespace (unique per run).
fn place(store: &SeaweedFsFacts, bed: &Cluster) -> (String, String) {
    (store.bucket.clone(), format!("{}/", bed.namespace))
}

fn sha256(bytes: &[u8]) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let out = Command::new("sha256sum").arg(file.path()).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

async fn create_in<K>(bed: &Cluster, namespace: &str, object: &K)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(bed.client.clone(), namespace)
        .create(&PostParams::default(), object)
        .await
        .unwrap();
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// A Opaque Secret, labelled for BatchJobs' use if `for_jobs`.
fn secret(name: &str, data: [(&str, Vec<u8>); 2], for_jobs: bool) -> Secret {
    let mut secret = secret_of(name, "Opaque", data);
    if for_jobs {
        secret.metadata.labels = Some(BTreeMap::from([(
            "batchbridge.dev/job-input".to_owned(),
            "true".to_owned(),
        )]));
    }
    secret
}

/// The store's credentials Secret, `store` in the test namespace.
async fn store_secret(bed: &Cluster, store: &SeaweedFsFacts) {
    let credentials = secret(
        "store",
        [
            ("accessKeyId", store.access_key.clone().into_bytes()),
            ("secretAccessKey", store.secret_key.clone().into_bytes()),
        ],
        true,
    );
    put_secret(bed, &credentials).await;
}

fn location(store: &SeaweedFsFacts, bucket: &str, what: Value) -> Value {
    let mut location = json!({
        "endpoint": store.endpoint,
        "bucket": bucket,
        "credentialsSecret": {"name": "store"},
    });
    location
        .as_object_mut()
        .unwrap()
        .extend(what.as_object().unwrap().clone());
    location
}

/// A test namespace with a BatchCluster on SLURM and an operator that lets BatchJobs name
/// the test bed's object store only.
async fn set_up_with_store(test: &str, store: &SeaweedFsFacts) -> (Cluster, RunningOperator) {
    let bed = Cluster::new(test).await;
    let login = login("ssh");
    create_secret(&bed, "cluster-key", &login).await;
    create_cluster(&bed, "slurm", "slurm", &login, "cluster-key").await;
    let allowed = store.endpoint.parse().unwrap();
    let operator = RunningOperator::start_with(&bed, &bed.operator_client().await, |operator| {
        operator.object_stores(allowed)
    });
    (bed, operator)
}

/// Job `name` once its OutputsStaged condition is set, checked to have ended in `phase`,
/// and that condition's status, reason and message.
async fn wait_for_outputs_staged(
    bed: &Cluster,
    name: &str,
    phase: Phase,
) -> (
    batchbridge_operator::crd::BatchJob,
    (String, String, String),
) {
    let job = wait_for(bed, name, "outputs staged", |s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == ConditionType::OutputsStaged.as_str())
    })
    .await;
    assert_eq!(status(&job).phase, Some(phase), "{:#?}", job.status);
    let staged = status(&job)
        .conditions
        .iter()
        .find(|condition| condition.type_ == ConditionType::OutputsStaged.as_str())
        .map(|condition| {
            (
                condition.status.clone(),
                condition.reason.clone(),
                condition.message.clone(),
            )
        })
        .unwrap();
    (job, staged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_from_a_config_map_a_secret_and_a_prefix_and_an_output_to_s3() {
    let store = seaweedfs_facts();
    let (bed, operator) = set_up_with_store("staging-io", &store).await;
    let (bucket, run) = place(&store, &bed);
    // 300 KiB of bytes that are no text, and a small file in a sub-directory.
    let big: Vec<u8> = (0..300 * 1024_u32).map(|i| (i * 7 % 251) as u8).collect();
    put_object(&store, &format!("{bucket}/{run}in/big.bin"), &big);
    put_object(
        &store,
        &format!("{bucket}/{run}in/sub/small.csv"),
        b"a,b\n1,2\n",
    );
    create_in(
        &bed,
        &bed.namespace,
        &config_map("params", &[("params.txt", "alpha=1\n")]),
    )
    .await;
    let token = b"s3cr3t token with 'quotes' and $(touch /tmp/staging-canary)\n".to_vec();
    put_secret(
        &bed,
        &secret(
            "token",
            [("token", token.clone()), ("unused", Vec::new())],
            true,
        ),
    )
    .await;
    store_secret(&bed, &store).await;

    let script = "#!/bin/bash\nset -e\n\
        cat params.txt > report.txt\n\
        stat -c %a secret/token >> report.txt\n\
        sha256sum < secret/token | cut -d' ' -f1 >> report.txt\n\
        sha256sum < data/big.bin | cut -d' ' -f1 >> report.txt\n\
        cat data/sub/small.csv >> report.txt\n";
    create_job(
        &bed,
        "io",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": script,
            "inputs": [
                {"path": "params.txt", "configMap": {"name": "params", "key": "params.txt"}},
                {"path": "secret/token", "secret": {"name": "token", "key": "token"}},
                {"path": "data", "objectStore": location(&store, &bucket, json!({"prefix": format!("{run}in/")}))},
            ],
            "outputs": [
                {"path": "report.txt", "objectStore": location(&store, &bucket, json!({"key": format!("{run}out/report.txt")}))},
                {"path": "report.txt", "configMap": {"name": "io-results", "key": "report.txt"}},
            ],
        }),
    )
    .await;
    let (_, (holds, reason, message)) = wait_for_outputs_staged(&bed, "io", Phase::Succeeded).await;
    assert_eq!(
        (holds.as_str(), reason.as_str()),
        ("True", Reason::OutputsStaged.as_str()),
        "{message}"
    );
    let expected = format!(
        "alpha=1\n600\n{}\n{}\na,b\n1,2\n",
        sha256(&token),
        sha256(&big)
    );
    let report = get_object(&store, &format!("{bucket}/{run}out/report.txt")).unwrap();
    assert_eq!(String::from_utf8_lossy(&report), expected);
    let results = Api::<ConfigMap>::namespaced(bed.client.clone(), &bed.namespace)
        .get("io-results")
        .await
        .unwrap();
    assert_eq!(
        results.data.unwrap_or_default().get("report.txt"),
        Some(&expected),
        "the ConfigMap output"
    );
    assert_eq!(
        results.metadata.owner_references.unwrap_or_default()[0].name,
        "io",
        "the ConfigMap belongs to the job"
    );
    assert!(
        !std::path::Path::new("/tmp/staging-canary").exists(),
        "the Secret's text ran as code"
    );
    let events = events_with(&bed, "io", &["InputPrepared", "OutputsStaged"]).await;
    for note in [
        "params.txt from ConfigMap params, key params.txt",
        "secret/token from Secret token, key token",
        "data from every object under",
    ] {
        assert!(
            events
                .iter()
                .any(|(reason, text)| reason == "InputPrepared" && text.contains(note)),
            "{note}: {events:?}"
        );
    }
    assert!(
        events.iter().any(|(reason, note)| reason == "OutputsStaged"
            && note.contains("report.txt to batchbridge-tests/")
            && note.contains("report.txt to ConfigMap io-results, key report.txt")),
        "{events:?}"
    );
    // The store's credentials never reach the cluster: only signatures made with them.
    let job_files = slurm(&format!(
        "grep -rl -- {} ~/.batchbridge 2>/dev/null | wc -l",
        store.secret_key
    ))
    .await;
    assert_eq!(job_files.trim(), "0", "the secret key is in a job file");
    operator.stop().await;
    bed.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_still_sends_its_always_outputs_and_stays_failed() {
    let store = seaweedfs_facts();
    let (bed, operator) = set_up_with_store("staging-fail", &store).await;
    let (bucket, run) = place(&store, &bed);
    store_secret(&bed, &store).await;
    create_job(
        &bed,
        "fails",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": "echo 'half done' > partial.txt\necho done > final.txt\nexit 3\n",
            "outputs": [
                {"path": "partial.txt", "when": "Always",
                 "objectStore": location(&store, &bucket, json!({"key": format!("{run}partial.txt")}))},
                {"path": "final.txt",
                 "objectStore": location(&store, &bucket, json!({"key": format!("{run}final.txt")}))},
            ],
        }),
    )
    .await;
    let (job, (holds, _, message)) = wait_for_outputs_staged(&bed, "fails", Phase::Failed).await;
    let now = status(&job);
    assert_eq!(now.reason, Some(Reason::NonZeroExitCode));
    assert_eq!(now.exit_code, Some(3));
    assert_eq!(
        holds, "True",
        "{message}; the job's output: {:?}",
        now.output_tail
    );
    assert_eq!(
        get_object(&store, &format!("{bucket}/{run}partial.txt")).as_deref(),
        Some(&b"half done\n"[..])
    );
    assert_eq!(
        get_object(&store, &format!("{bucket}/{run}final.txt")),
        None,
        "an OnSuccess output of a failed job was sent"
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// The keys under `prefix` in the bucket, listed with curl.
fn keys_under(store: &SeaweedFsFacts, bucket: &str, prefix: &str) -> Vec<String> {
    let (status, body) = s3(
        store,
        &[],
        &format!("{bucket}?list-type=2&prefix={}", prefix.replace('/', "%2F")),
    );
    assert_eq!(status, "200", "{}", String::from_utf8_lossy(&body));
    let text = String::from_utf8(body).unwrap();
    let mut keys: Vec<String> = text
        .split("<Key>")
        .skip(1)
        .map(|rest| rest.split("</Key>").next().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

/// The API server's refusal (422) of `job`. The test bed's API server is shared with test
/// runs of other branches, whose CRDs may replace this tree's between its apply and the
/// create: a job the API server took is deleted and tried again with this tree's CRDs
/// applied anew, a few times.
async fn refused_by_current_crds(
    bed: &Cluster,
    job: &batchbridge_operator::crd::BatchJob,
) -> String {
    let name = job.metadata.name.clone().unwrap();
    for _ in 0..5 {
        common::apply_crds(&bed.client, &bed.facts).await;
        match bed.jobs().create(&PostParams::default(), job).await {
            Ok(_) => {
                bed.jobs().delete(&name, &Default::default()).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            refused => return common::api_error(refused, 422),
        }
    }
    panic!("{name} was taken by the API server 5 times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_glob_and_a_directory_reach_s3_under_their_prefixes_and_hostile_names_do_not() {
    let store = seaweedfs_facts();
    let (bed, operator) = set_up_with_store("staging-many", &store).await;
    let (bucket, run) = place(&store, &bed);
    store_secret(&bed, &store).await;
    // Bytes that are no text; names a line-by-line reader would split into "results/.."
    // and more; a link to a file the job's user may read but did not write.
    let script = "#!/bin/bash\nset -e\nmkdir -p results/sub\n\
        printf 'x,y\\n1,2\\n' > results/a.csv\n\
        seq 1 20000 > results/b.csv\n\
        printf 'c\\001\\377\\n' > results/sub/c.txt\n\
        echo evil > results/$'..\\nevil.csv'\n\
        echo evil > results/$'x\\n..\\ny.csv'\n\
        ln -s /etc/hostname results/link.csv\n";
    let many = |path: &str, prefix: String| json!({"path": path, "objectStore": location(&store, &bucket, json!({"prefix": prefix}))});
    create_job(
        &bed,
        "many",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": script,
            "outputs": [
                many("results/*.csv", format!("{run}glob/")),
                many("results/", format!("{run}dir/")),
            ],
        }),
    )
    .await;
    let (job, (holds, reason, message)) =
        wait_for_outputs_staged(&bed, "many", Phase::Succeeded).await;
    let tail = status(&job).output_tail.unwrap_or_default();
    assert_eq!(
        (holds.as_str(), reason.as_str()),
        ("True", Reason::OutputsStaged.as_str()),
        "{message}; the job's output: {tail}"
    );
    let a = b"x,y\n1,2\n".to_vec();
    let b: Vec<u8> = (1..=20000)
        .map(|n| format!("{n}\n"))
        .collect::<String>()
        .into_bytes();
    let c = b"c\x01\xff\n".to_vec();
    let expected = [
        (format!("{run}dir/a.csv"), &a),
        (format!("{run}dir/b.csv"), &b),
        (format!("{run}dir/sub/c.txt"), &c),
        (format!("{run}glob/a.csv"), &a),
        (format!("{run}glob/b.csv"), &b),
    ];
    // Exactly these, byte for byte: no hostile name, no link, nothing outside the prefixes.
    assert_eq!(
        keys_under(&store, &bucket, &run),
        expected
            .iter()
            .map(|(key, _)| key.clone())
            .collect::<Vec<_>>(),
        "the job's output: {tail}"
    );
    for (key, bytes) in &expected {
        assert_eq!(
            get_object(&store, &format!("{bucket}/{key}")).as_ref(),
            Some(*bytes),
            "{key}"
        );
    }
    let all_bytes = 2 * (a.len() + b.len()) + c.len();
    assert!(
        message.contains(&format!("5 objects, {all_bytes} bytes")),
        "{message}"
    );
    for skipped in [
        "results/..?evil.csv skipped: a control character in its name",
        "results/x?..?y.csv skipped: a control character in its name",
        "results/link.csv skipped: a symbolic link, not followed",
        "output results/*.csv sent: 2 files",
        "output results/ sent: 3 files",
    ] {
        assert!(
            tail.contains(skipped),
            "{skipped:?} not in the job's output: {tail}"
        );
    }
    let events = events_with(&bed, "many", &["OutputsStaged"]).await;
    assert!(
        events.iter().any(|(reason, note)| reason == "OutputsStaged"
            && note.contains(&format!(
                "results/*.csv to {bucket}/{run}glob/ at {} (2 objects, {} bytes written by this attempt)",
                store.endpoint,
                a.len() + b.len()
            ))
            && note.contains(&format!("results/ to {bucket}/{run}dir/ at"))),
        "{events:?}"
    );
    // A glob to one key, or a directory into a ConfigMap, never gets past the API server.
    for (name, output, says) in [
        (
            "glob-to-key",
            json!({"path": "r/*.csv", "objectStore": location(&store, &bucket, json!({"key": "k"}))}),
            "names a prefix for a glob or directory path",
        ),
        (
            "dir-to-map",
            json!({"path": "r/", "configMap": {"name": "m", "key": "k"}}),
            "a configMap output is one file",
        ),
        (
            "open-prefix",
            many("r/", "no-slash".into()),
            "prefix ends with /",
        ),
    ] {
        let job = batch_job(
            name,
            json!({"clusterRef": {"name": "slurm"}, "script": "true\n", "outputs": [output]}),
        );
        let message = refused_by_current_crds(&bed, &job).await;
        assert!(message.contains(says), "{name}: {message}");
    }
    operator.stop().await;
    bed.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_config_map_and_an_unlabelled_secret_are_refused() {
    let store = seaweedfs_facts();
    let (bed, operator) = set_up_with_store("staging-tenant", &store).await;
    // Another tenant's namespace, with a ConfigMap and a Secret of the same names the
    // hostile jobs ask for.
    let other = format!("{}-other", bed.namespace);
    Api::<Namespace>::all(bed.client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(other.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    create_in(&bed, &other, &config_map("theirs", &[("k", "their data")])).await;
    // There is no namespace field: one written anyway is dropped (by the typed client here,
    // pruned by the API server from kubectl), and the name is looked up in the job's own
    // namespace, where there is none.
    create_job(
        &bed,
        "cross",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": "cat k\n",
            "inputs": [{"path": "k", "configMap": {"name": "theirs", "key": "k", "namespace": other}}],
        }),
    )
    .await;
    // A Secret in the job's namespace whose owner did not label it for BatchJobs.
    put_secret(
        &bed,
        &secret(
            "db",
            [("password", b"hunter2".to_vec()), ("user", b"app".to_vec())],
            false,
        ),
    )
    .await;
    create_job(
        &bed,
        "unlabelled",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": "cat password\n",
            "inputs": [{"path": "password", "secret": {"name": "db", "key": "password"}}],
        }),
    )
    .await;
    // Object stores the administrator did not list: the cloud's metadata service, and the
    // allowed store under another name (names are not resolved, so not compared).
    store_secret(&bed, &store).await;
    for (name, endpoint) in [
        ("metadata", "http://169.254.169.254"),
        (
            "renamed",
            &*store.endpoint.replace("127.0.0.1", "localhost"),
        ),
    ] {
        create_job(
            &bed,
            name,
            json!({
                "clusterRef": {"name": "slurm"},
                "script": "cat x\n",
                "inputs": [{"path": "x", "objectStore": {
                    "endpoint": endpoint,
                    "bucket": store.bucket,
                    "key": "latest/meta-data/iam",
                    "credentialsSecret": {"name": "store"},
                }}],
            }),
        )
        .await;
    }
    for (name, says) in [
        (
            "metadata",
            "endpoint \"http://169.254.169.254\" is not allowed",
        ),
        (
            "renamed",
            "is not allowed: this operator may reach only http://127.0.0.1:",
        ),
        ("cross", "no ConfigMap \"theirs\" in the job's namespace"),
        (
            "unlabelled",
            "is not labelled batchbridge.dev/job-input=true",
        ),
    ] {
        let job = wait_for_phase(&bed, name, Phase::Failed).await;
        let now = status(&job);
        assert_eq!(
            now.reason,
            Some(Reason::InputRefused),
            "{name}: {:#?}",
            job.status
        );
        assert!(
            now.message.as_deref().unwrap_or_default().contains(says),
            "{name}: {:?}",
            now.message
        );
        assert_eq!(now.job_id, None, "{name} was submitted");
    }
    // A path climbing out of the working directory never gets past the API server.
    let refused = bed
        .jobs()
        .create(
            &PostParams::default(),
            &batch_job(
                "climb",
                json!({
                    "clusterRef": {"name": "slurm"},
                    "script": "true\n",
                    "inputs": [{"path": "../x", "configMap": {"name": "theirs", "key": "k"}}],
                }),
            ),
        )
        .await;
    let message = common::api_error(refused, 422);
    assert!(message.contains("path must be relative"), "{message}");
    operator.stop().await;
    bed.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_output_beyond_its_cap_is_refused_and_the_job_still_succeeded() {
    let (bed, operator) = set_up("staging-cap", "ssh", "slurm").await;
    create_job(
        &bed,
        "big",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": "head -c 600000 /dev/zero > big.bin\necho small > small.txt\n",
            "outputs": [
                {"path": "big.bin", "configMap": {"name": "big-results", "key": "big.bin"}},
            ],
        }),
    )
    .await;
    let (_, (holds, reason, message)) =
        wait_for_outputs_staged(&bed, "big", Phase::Succeeded).await;
    assert_eq!(
        (holds.as_str(), reason.as_str()),
        ("False", Reason::OutputsNotStaged.as_str()),
        "{message}"
    );
    assert!(message.contains("big.bin"), "{message}");
    assert!(
        message.contains("524288") || message.contains("512"),
        "{message}"
    );
    let map = Api::<ConfigMap>::namespaced(bed.client.clone(), &bed.namespace)
        .get_opt("big-results")
        .await
        .unwrap();
    assert!(map.is_none(), "a refused output was written: {map:?}");
    operator.stop().await;
    bed.clean_up().await;
}
