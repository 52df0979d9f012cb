//! The checked-in CRDs (`deploy/crds/`) against the test bed's real kube-apiserver
//! (`tests/testbed/kube.sh`): they are accepted and established, `kubectl explain` shows the
//! fields' descriptions, and the API server itself refuses what the schema forbids: missing
//! required fields (experiment 8 of the operator issue), values outside enums and bounds,
//! and what the CEL rules forbid, including a spec change while the job is active.
//!
//! Each test works in a namespace of its own, so runs never collide. The API server has no
//! namespace controller, so those namespaces stay behind as Terminating; `kube.sh down`
//! clears them. A test bed that is not up fails these tests; they never skip.

// Helpers panic on purpose: a refused CRD or an unreachable API server is a failed test.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use batchbridge_operator::crd::{BatchCluster, BatchJob, BatchJobSpec, Phase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;

use common::{Cluster, api_error, eventually};

fn job_spec(extra: Value) -> BatchJobSpec {
    let mut spec = json!({"clusterRef": {"name": "hpc"}, "script": "echo hello"});
    for (field, value) in extra.as_object().unwrap() {
        spec[field] = value.clone();
    }
    serde_json::from_value(spec).unwrap()
}

#[tokio::test]
async fn kubectl_explain_shows_the_descriptions() {
    let cluster = Cluster::new("explain").await;
    // kubectl explain reads the OpenAPI document, which the API server republishes shortly
    // after a CRD changes. It wraps descriptions at 80 columns, so whitespace is compared
    // collapsed.
    let collapse = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let explain = |field: &str| {
        let output = Command::new(&cluster.facts.kubectl)
            .arg("--kubeconfig")
            .arg(&cluster.facts.kubeconfig)
            .args(["explain", field])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let expectations: [(&str, &[&str]); 5] = [
        (
            "batchjob.spec.placement.moveAfter",
            &[
                "FIELD: moveAfter <string>",
                "How long the job may wait in a queue, never having started, before it is moved",
            ],
        ),
        (
            "batchjob.spec.script",
            &[
                "FIELD: script <string>",
                "The job's script, run by bash on the cluster",
            ],
        ),
        (
            "batchcluster.spec.ssh",
            &[
                "FIELD: ssh <Object>",
                "Where to log in: the cluster's login node",
                "host <string> -required-",
                "The SSH server's TCP port, 1 to 65535.",
            ],
        ),
        (
            "batchjob.status.phase",
            &[
                "Where the job is in its life: Pending (not submitted yet, or held back by spec.suspend",
                "Submitted (being submitted), then",
                "ENUM:",
                "Cancelled Unknown DESCRIPTION:",
            ],
        ),
        (
            "batchjob.spec.retryPolicy.retryOn",
            &[
                "Which failures are retried (NonZeroExitCode, NodeFailure, Timeout, Preempted, Unknown)",
            ],
        ),
    ];
    for (field, needles) in expectations {
        let mut last = String::new();
        eventually(&format!("kubectl explain {field}"), || {
            last = explain(field);
            let ok = needles
                .iter()
                .all(|needle| collapse(&last).contains(&collapse(needle)));
            async move { ok }
        })
        .await;
        println!("kubectl explain {field}:\n{last}");
    }
    cluster.clean_up().await;
}

/// Experiment 8 of the operator issue: a BatchJob without its required fields never gets in.
#[tokio::test]
async fn required_fields_are_enforced_by_the_api_server() {
    let cluster = Cluster::new("required").await;

    let message = cluster
        .refusal::<BatchJob>("no-script", json!({"clusterRef": {"name": "hpc"}}))
        .await;
    println!("without script: {message}");
    assert!(message.contains("spec.script: Required value"), "{message}");

    let message = cluster
        .refusal::<BatchJob>("no-cluster", json!({"script": "echo hi"}))
        .await;
    println!("without clusterRef: {message}");
    assert!(
        message.contains("a BatchJob names exactly one of clusterRef"),
        "{message}"
    );

    let message = cluster
        .refusal::<BatchJob>(
            "empty-script",
            json!({"clusterRef": {"name": "hpc"}, "script": " \n"}),
        )
        .await;
    println!("blank script: {message}");
    assert!(message.contains("spec.script") && message.contains("script must not be empty"));

    let message = cluster
        .refusal::<BatchCluster>("no-scheduler", json!({"workDir": "/w"}))
        .await;
    assert!(
        message.contains("spec.scheduler: Required value"),
        "{message}"
    );

    cluster.clean_up().await;
}

#[tokio::test]
async fn enums_and_bounds_are_enforced_by_the_api_server() {
    let cluster = Cluster::new("enums").await;
    let cases: &[(&str, Value, &[&str])] = &[
        (
            "runtime",
            json!({"container": {"image": "x.sif", "runtime": "lxc"}}),
            &[
                r#"spec.container.runtime: Unsupported value: "lxc": supported values: "apptainer", "singularity", "docker", "podman""#,
            ],
        ),
        (
            "retry-on",
            json!({"retryPolicy": {"retryOn": ["Timeout", "CosmicRay"]}}),
            &[r#"spec.retryPolicy.retryOn[1]: Unsupported value: "CosmicRay""#],
        ),
        (
            "array",
            json!({"array": {"count": 0}}),
            &[
                "spec.array.count: Invalid value: 0: spec.array.count in body should be greater than or equal to 1",
            ],
        ),
        (
            "bounds",
            json!({"resources": {"cpus": 0, "nodes": 0}, "outputPolicy": {"tailBytes": 1_000_000}}),
            &[
                "spec.resources.cpus",
                "spec.resources.nodes",
                "spec.outputPolicy.tailBytes",
            ],
        ),
        (
            "queue",
            json!({"queue": "debug; rm -rf ~"}),
            &["spec.queue in body should match"],
        ),
        (
            "units",
            json!({"resources": {"memory": "4GB", "disk": "-1Gi", "wallTime": "ninety minutes"}}),
            &[
                "spec.resources.memory: Invalid value: \"string\": memory must be a positive quantity such as 4Gi or 512Mi",
                "spec.resources.disk: Invalid value: \"string\": disk must be a positive quantity such as 20Gi",
                "spec.resources.wallTime: Invalid value: \"string\": wallTime must be a duration of at least 1s, such as 30m or 1h30m",
            ],
        ),
        (
            "short-wall-time",
            json!({"resources": {"wallTime": "500ms"}}),
            &["wallTime must be a duration of at least 1s"],
        ),
        (
            "environment",
            json!({"environment": {"GOOD": "1", "NOT-A-NAME": "2"}}),
            &[
                "spec.environment: Invalid value: \"object\": environment variable names must be a letter or '_' followed by letters, digits and '_'",
            ],
        ),
    ];
    for (name, extra, needles) in cases {
        let mut spec = json!({"clusterRef": {"name": "hpc"}, "script": "echo hi"});
        for (field, value) in extra.as_object().unwrap() {
            spec[field] = value.clone();
        }
        let message = cluster.refusal::<BatchJob>(name, spec).await;
        println!("{name}: {message}");
        for needle in *needles {
            assert!(message.contains(needle), "{name}: {message}");
        }
    }

    // The status schema holds too, for the operator's own writes.
    let jobs = cluster.jobs();
    jobs.create(
        &PostParams::default(),
        &BatchJob::new("status", job_spec(json!({}))),
    )
    .await
    .unwrap();
    let result = jobs
        .patch_status(
            "status",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Exploded"}})),
        )
        .await;
    let message = api_error(result, 422);
    println!("bad phase: {message}");
    assert!(
        message.contains(r#"status.phase: Unsupported value: "Exploded""#),
        "{message}"
    );

    cluster.clean_up().await;
}

#[tokio::test]
async fn batch_cluster_rules_are_enforced_by_the_api_server() {
    let cluster = Cluster::new("cluster").await;
    let ssh = json!({"host": "login.example.org", "user": "alice"});
    let cases: &[(&str, Value, &[&str])] = &[
        (
            "slurm-without-ssh",
            json!({"scheduler": "slurm"}),
            &[
                "spec.ssh: Required value: spec.ssh is required: slurm, htcondor and pbs clusters are reached over SSH",
            ],
        ),
        (
            "pbs-without-ssh",
            json!({"scheduler": "pbs"}),
            &[
                "spec.ssh: Required value: spec.ssh is required: slurm, htcondor and pbs clusters are reached over SSH",
            ],
        ),
        (
            "ssh-without-host-keys",
            json!({"scheduler": "htcondor", "ssh": ssh, "secretRef": {"name": "key"}}),
            &[
                "spec.knownHosts: Required value: spec.knownHosts is required with spec.ssh: host keys are always verified",
            ],
        ),
        (
            "ssh-without-secret",
            json!({"scheduler": "slurm", "ssh": ssh, "knownHosts": "h ssh-ed25519 AAAA"}),
            &["spec.secretRef: Required value"],
        ),
        (
            "bad-port",
            json!({"scheduler": "local", "ssh": {"host": "h", "user": "u", "port": 65536},
                   "secretRef": {"name": "key"}, "knownHosts": "h ssh-ed25519 AAAA"}),
            &[
                "spec.ssh.port: Invalid value: 65536: spec.ssh.port in body should be less than or equal to 65535",
            ],
        ),
        (
            "zero-port",
            json!({"scheduler": "local", "ssh": {"host": "h", "user": "u", "port": 0},
                   "secretRef": {"name": "key"}, "knownHosts": "h ssh-ed25519 AAAA"}),
            &[
                "spec.ssh.port: Invalid value: 0: spec.ssh.port in body should be greater than or equal to 1",
            ],
        ),
        (
            "bad-scheduler",
            json!({"scheduler": "PBS Pro"}),
            &[r#"spec.scheduler: Invalid value: "PBS Pro": spec.scheduler in body should match"#],
        ),
        (
            "bad-poll-interval",
            json!({"scheduler": "local", "pollInterval": "100ms"}),
            &["pollInterval must be a duration of at least 1s, such as 10s or 1m"],
        ),
        (
            "huge-batch",
            json!({"scheduler": "local", "submit": {"batchSize": 1_000_000_000_u32}}),
            &[
                "spec.submit.batchSize: Invalid value: 1000000000: spec.submit.batchSize in body should be less than or equal to 1000",
            ],
        ),
        (
            "too-many-batches",
            json!({"scheduler": "local", "submit": {"concurrency": 6}}),
            &[
                "spec.submit.concurrency: Invalid value: 6: spec.submit.concurrency in body should be less than or equal to 5",
            ],
        ),
        (
            "long-batch-delay",
            json!({"scheduler": "local", "submit": {"batchDelay": "5s"}}),
            &["submit.batchDelay must be a duration from 0s to 1s, such as 100ms"],
        ),
    ];
    for (name, spec, needles) in cases {
        let message = cluster.refusal::<BatchCluster>(name, spec.clone()).await;
        println!("{name}: {message}");
        for needle in *needles {
            assert!(message.contains(needle), "{name}: {message}");
        }
    }

    // A good one gets the schema's defaults and reads back into the Rust types.
    let spec = json!({"scheduler": "slurm", "ssh": ssh, "secretRef": {"name": "key"},
                      "knownHosts": "login.example.org ssh-ed25519 AAAA",
                      "defaults": {"partition": "debug"}});
    let created = cluster
        .dynamic::<BatchCluster>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "batchbridge.dev/v1alpha1", "kind": "BatchCluster",
                "metadata": {"name": "hpc"}, "spec": spec,
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["ssh"]["port"], 22);
    assert_eq!(created.data["spec"]["pollInterval"], "10s");
    let typed = cluster.clusters().get("hpc").await.unwrap();
    assert_eq!(typed.spec.ssh.unwrap().port, 22);
    assert_eq!(
        Duration::from(typed.spec.poll_interval),
        Duration::from_secs(10)
    );

    // A custom backend needs no SSH.
    cluster
        .dynamic::<BatchCluster>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "batchbridge.dev/v1alpha1", "kind": "BatchCluster",
                "metadata": {"name": "rest"}, "spec": {"scheduler": "flux-rest"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    cluster.clean_up().await;
}

/// The CEL rule at the root of BatchJob: the spec is frozen while the job is active and
/// editable before submission and after the end; metadata and status stay writable.
#[tokio::test]
async fn spec_is_frozen_while_the_job_is_active() {
    let cluster = Cluster::new("frozen").await;
    let jobs = cluster.jobs();
    let job = BatchJob::new("frozen", job_spec(json!({"queue": "debug"})));
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    // Read back with the schema's defaults applied.
    assert_eq!(created.spec.output_policy.tail_bytes, 4096);
    assert_eq!(created.spec.resources, Default::default());

    let edit_script = |script: &'static str| {
        let jobs = jobs.clone();
        async move {
            jobs.patch(
                "frozen",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"script": script}})),
            )
            .await
        }
    };
    let set_phase = |phase: Phase| {
        let jobs = jobs.clone();
        async move {
            jobs.patch_status(
                "frozen",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": phase, "jobId": "4242", "user": "batch", "queue": "debug", "cluster": "hpc"}})),
            )
            .await
            .unwrap()
        }
    };

    edit_script("echo before any status").await.unwrap();
    set_phase(Phase::Pending).await;
    edit_script("echo while pending").await.unwrap();

    for phase in [
        Phase::Submitted,
        Phase::Queued,
        Phase::Held,
        Phase::Running,
        Phase::Suspended,
        Phase::Unknown,
    ] {
        let status = set_phase(phase).await;
        assert_eq!(status.status.unwrap().phase, Some(phase));
        let message = api_error(edit_script("echo changed while active").await, 422);
        println!("{phase:?}: {message}");
        assert!(
            message.contains(&format!(
                "spec: Forbidden: spec cannot change while the job is {phase:?}: wait until it finishes, or delete it (which cancels it)"
            )),
            "{message}"
        );
        // Re-applying the same spec is no change, and metadata stays writable (the
        // operator's finalizer, users' labels).
        edit_script("echo while pending").await.unwrap();
        jobs.patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"phase": format!("{phase:?}").to_lowercase()}}}),
            ),
        )
        .await
        .unwrap();
    }

    // The printer columns while it runs.
    set_phase(Phase::Running).await;
    jobs.patch_status(
        "frozen",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"startTime": Time(Timestamp::now())}})),
    )
    .await
    .unwrap();
    let table = cluster.kubectl(&["get", "batchjobs", "-n", &cluster.namespace]);
    println!("{table}");
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "STATUS",
            "JOB ID",
            "PARTITION",
            "USER",
            "STARTED",
            "RUN TIME",
            "CLUSTER",
            "EXIT CODE",
            "AGE"
        ]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..5], ["frozen", "Running", "4242", "debug", "batch"]);
    assert_eq!(row[6], "hpc");

    // A finished job shows how long it ran, which does not grow after its end.
    set_phase(Phase::Succeeded).await;
    jobs.patch_status(
        "frozen",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"runTime": "1m5s"}})),
    )
    .await
    .unwrap();
    let table = cluster.kubectl(&["get", "batchjobs", "-n", &cluster.namespace]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[1], row[6], row[7]),
        ("Succeeded", "1m5s", "hpc"),
        "{table}"
    );

    for phase in [
        Phase::Succeeded,
        Phase::Failed,
        Phase::Cancelled,
        Phase::RetryPending,
    ] {
        set_phase(phase).await;
        let script = match phase {
            Phase::Succeeded => "echo after success",
            Phase::Failed => "echo after failure",
            Phase::Cancelled => "echo after cancel",
            _ => "echo while a retry waits",
        };
        let edited = edit_script(script).await.unwrap();
        assert_eq!(edited.spec.script, script, "{phase:?}");
    }

    cluster.clean_up().await;
}

/// spec.placement: exactly one of clusterRef and placement, and hostile candidate lists and
/// selectors refused by the API server with messages that say what is wrong.
#[tokio::test]
async fn placement_is_checked_at_admission() {
    let cluster = Cluster::new("placement").await;
    let job = |spec: Value| {
        let mut full = json!({"script": "echo hello"});
        for (field, value) in spec.as_object().unwrap() {
            full[field] = value.clone();
        }
        full
    };
    let long = "a".repeat(64);
    let names: Vec<String> = (0..17).map(|i| format!("c{i}")).collect();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "both",
            job(json!({"clusterRef": {"name": "hpc"}, "placement": {"clusters": ["hpc"]}})),
            "a BatchJob names exactly one of clusterRef (the one BatchCluster to run on) or placement",
        ),
        (
            "neither-list-nor-selector",
            job(json!({"placement": {"policy": "Ordered"}})),
            "placement names its candidates in exactly one of clusters",
        ),
        (
            "list-and-selector",
            job(
                json!({"placement": {"clusters": ["a"], "selector": {"matchLabels": {"site": "x"}}}}),
            ),
            "placement names its candidates in exactly one of clusters",
        ),
        (
            "empty-list",
            job(json!({"placement": {"clusters": []}})),
            "spec.placement.clusters: Invalid value",
        ),
        (
            "too-many",
            job(json!({"placement": {"clusters": names}})),
            "spec.placement.clusters: Too many: 17: must have at most 16 items",
        ),
        (
            "twice",
            job(json!({"placement": {"clusters": ["a", "a"]}})),
            "spec.placement.clusters[1]: Duplicate value",
        ),
        (
            "not-a-dns-label",
            job(json!({"placement": {"clusters": ["ok", "../other-namespace/hpc"]}})),
            "spec.placement.clusters[1]: Invalid value: \"../other-namespace/hpc\": spec.placement.clusters[1] in body should match",
        ),
        (
            "too-long",
            job(json!({"placement": {"clusters": [long]}})),
            "spec.placement.clusters[0]: Too long: may not be more than 63 bytes",
        ),
        (
            "empty-selector",
            job(json!({"placement": {"selector": {}}})),
            "an empty selector would take every BatchCluster of the namespace",
        ),
        (
            "bad-label-key",
            job(json!({"placement": {"selector": {"matchLabels": {"": "x"}}}})),
            "matchLabels keys must be label keys",
        ),
        (
            "bad-label-value",
            job(json!({"placement": {"selector": {"matchLabels": {"site": "a b"}}}})),
            "spec.placement.selector.matchLabels.site: Invalid value: \"a b\"",
        ),
        (
            "in-without-values",
            job(
                json!({"placement": {"selector": {"matchExpressions": [{"key": "site", "operator": "In"}]}}}),
            ),
            "In and NotIn need values; Exists and DoesNotExist take none",
        ),
        (
            "exists-with-values",
            job(
                json!({"placement": {"selector": {"matchExpressions": [{"key": "site", "operator": "Exists", "values": ["x"]}]}}}),
            ),
            "In and NotIn need values; Exists and DoesNotExist take none",
        ),
        (
            "unknown-operator",
            job(
                json!({"placement": {"selector": {"matchExpressions": [{"key": "site", "operator": "Gt", "values": ["1"]}]}}}),
            ),
            "Unsupported value: \"Gt\"",
        ),
        (
            "bad-expression-key",
            job(
                json!({"placement": {"selector": {"matchExpressions": [{"key": "-site", "operator": "Exists"}]}}}),
            ),
            "spec.placement.selector.matchExpressions[0].key: Invalid value: \"-site\"",
        ),
        (
            "unknown-policy",
            job(json!({"placement": {"clusters": ["a"], "policy": "Cheapest"}})),
            "Unsupported value: \"Cheapest\"",
        ),
        (
            "bad-move-after",
            job(json!({"placement": {"clusters": ["a"], "moveAfter": "soon"}})),
            "moveAfter must be a duration of at least 1s",
        ),
        (
            "too-many-moves",
            job(json!({"placement": {"clusters": ["a"], "maxMoves": 4}})),
            "spec.placement.maxMoves: Invalid value: 4: spec.placement.maxMoves in body should be less than or equal to 3",
        ),
    ];
    for (name, spec, expected) in cases {
        let message = cluster.refusal::<BatchJob>(name, spec).await;
        println!("{name}: {message}");
        assert!(message.contains(expected), "{name}: {message}");
    }
    let accepted: BatchJobSpec = serde_json::from_value(job(json!({"placement": {
        "selector": {
            "matchLabels": {"batchbridge.dev/site": "campus"},
            "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}],
        },
        "policy": "Ordered",
        "moveAfter": "30m",
    }})))
    .unwrap();
    let created = cluster
        .jobs()
        .create(
            &PostParams::default(),
            &BatchJob::new("by-selector", accepted),
        )
        .await
        .unwrap();
    let placement = created.spec.placement.unwrap();
    assert_eq!(placement.max_moves, 1, "defaulted");
    assert_eq!(
        placement.move_after.map(Duration::from),
        Some(Duration::from_secs(1800))
    );
    cluster.clean_up().await;
}
