//! The operator end to end: the test bed's real kube-apiserver, the real SLURM over SSH
//! (and the HTCondor pool for one test), the experiments of the original SLURM operator,
//! a restart between submit and the write of the job id, and the latency from a SLURM
//! state change to the BatchJob's status.
//!
//! Each test runs its own operator, watching a namespace of its own with a BatchCluster
//! polled every second. What the tests check on the cluster side they ask SLURM itself
//! (squeue, sacct, scancel over the test bed's SSH login).

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command as ShellCommand, Shell, SshShell};
use batchbridge_operator::crd::{BatchJob, Phase};
use batchbridge_operator::reason::{ConditionType, Reason};
use batchbridge_operator::status::condition;
use batchbridge_testbed::{Login, htcondor_shell, login, ssh_facts};
use common::Cluster;
use common::operator::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::RwLock;

/// The 22.05 cluster's one node. The one-node-partition test takes it whole for over a
/// minute (a job holding the node, one waiting behind it for SLURM's start estimate), so
/// it runs alone; a job of another test, queued ahead without a time limit, would both
/// wait behind it and take the waiting job's estimate away. The other SLURM tests share it.
static SLURM_NODE: RwLock<()> = RwLock::const_new(());

/// Experiments 1 and 2: a job runs and its output can be read (status tail and the
/// ConfigMap); a failing job shows Failed with its exit code; experiment 3: fixing its
/// script runs it again to success; experiment 4: editing a succeeded job runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_failure_fix_and_rerun() {
    let _node = SLURM_NODE.read().await;
    let (bed, operator) = set_up("e2e-runs", "ssh", "slurm").await;
    // The log pod must pass the Pod Security Standards' strictest profile.
    Api::<Namespace>::all(bed.client.clone())
        .patch(
            &bed.namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})),
        )
        .await
        .unwrap();
    create_job(
        &bed,
        "hello",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": "echo \"hello from $SLURM_JOB_PARTITION\"\necho to-stderr >&2\n",
            "outputPolicy": {"configMap": true, "logPod": true},
        }),
    )
    .await;
    create_job(
        &bed,
        "fails",
        json!({"clusterRef": {"name": "slurm"}, "script": "echo about to fail\nexit 3\n"}),
    )
    .await;

    let hello = status(&wait_for_phase(&bed, "hello", Phase::Succeeded).await);
    assert_eq!(hello.exit_code, Some(0));
    assert_eq!(
        (
            hello.attempts,
            hello.queue.as_deref(),
            hello.user.as_deref()
        ),
        (1, Some("debug"), Some("batch"))
    );
    let hello = status(&wait_for(&bed, "hello", "the output", |s| s.output_tail.is_some()).await);
    assert_eq!(
        hello.output_tail.as_deref(),
        Some("hello from debug\nto-stderr\n")
    );
    let id = hello.job_id.clone().unwrap();
    assert_eq!(slurm_state(&id).await, "COMPLETED");
    let output = Api::<ConfigMap>::namespaced(bed.client.clone(), &bed.namespace)
        .get("hello-output")
        .await
        .unwrap();
    let data = output.data.unwrap_or_default();
    assert_eq!(
        data.get("stdout").map(String::as_str),
        Some("hello from debug\n")
    );
    assert_eq!(data.get("stderr").map(String::as_str), Some("to-stderr\n"));

    // The log pod: owned by the job, running the operator image in fetch-output mode.
    let pod = Api::<Pod>::namespaced(bed.client.clone(), &bed.namespace)
        .get("hello-log")
        .await
        .unwrap();
    assert_eq!(pod.owner_references()[0].name, "hello");
    let container = &pod.spec.unwrap().containers[0];
    assert_eq!(
        container.args.as_deref(),
        Some(&["fetch-output".to_owned()][..])
    );
    assert_eq!(
        log_pod_output(&bed, "hello-log", "ssh").await,
        "hello from debug\nto-stderr\n"
    );

    // The BatchCluster's status: reachable, the scheduler's version.
    let cluster = bed
        .clusters()
        .get("slurm")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    let reachable = cluster
        .conditions
        .iter()
        .find(|c| c.type_ == "Reachable")
        .unwrap();
    assert_eq!(reachable.status, "True", "{reachable:?}");
    let ready = cluster
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True", "{ready:?}");
    assert!(
        cluster
            .scheduler_version
            .unwrap_or_default()
            .contains("22.05"),
        "the test bed runs SLURM 22.05"
    );
    assert!(cluster.last_probe_time.is_some());

    let fails = status(&wait_for_phase(&bed, "fails", Phase::Failed).await);
    assert_eq!(
        (fails.exit_code, fails.reason),
        (Some(3), Some(Reason::NonZeroExitCode))
    );
    // Final (no retry policy): what a user or a workflow engine waits for.
    let waited = std::process::Command::new(&bed.facts.kubectl)
        .arg("--kubeconfig")
        .arg(&bed.facts.kubeconfig)
        .args(["wait", "--for=condition=Failed", "--timeout=30s"])
        .args(["-n", &bed.namespace, "batchjob/fails"])
        .output()
        .unwrap();
    assert!(
        waited.status.success(),
        "kubectl wait --for=condition=Failed: {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    assert_eq!(
        slurm_state(fails.job_id.as_deref().unwrap()).await,
        "FAILED"
    );

    // Experiment 3: fix the script; the job runs again, as attempt 2 under a new id.
    patch_spec(&bed, "fails", json!({"script": "echo fixed\n"})).await;
    let fixed = status(
        &wait_for(&bed, "fails", "attempt 2 to succeed", |s| {
            s.attempts == 2 && s.phase == Some(Phase::Succeeded)
        })
        .await,
    );
    assert_ne!(fixed.job_id, fails.job_id);
    assert_eq!(fixed.exit_code, Some(0));

    // Experiment 4: edit the succeeded job; it runs again.
    patch_spec(&bed, "hello", json!({"script": "echo edited\n"})).await;
    let edited = status(
        &wait_for(&bed, "hello", "attempt 2 to succeed with its output", |s| {
            s.attempts == 2 && s.phase == Some(Phase::Succeeded) && s.output_tail.is_some()
        })
        .await,
    );
    assert_eq!(edited.output_tail.as_deref(), Some("edited\n"));
    assert_ne!(edited.job_id.as_deref(), Some(id.as_str()));

    let reasons: Vec<String> = events_with(&bed, "fails", &["Submitted", "Failed", "Succeeded"])
        .await
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    for expected in ["Submitted", "Failed", "Succeeded"] {
        assert!(
            reasons.iter().any(|r| r == expected),
            "no {expected} Event among {reasons:?}"
        );
    }
    operator.stop().await;
    bed.clean_up().await;
}

/// Experiments 5 and 6 on the partition `single`, where a job gets the whole node: two
/// jobs, one Running while the other waits, then both finish; then a job cancelled on the
/// cluster side shows Cancelled and the waiting one starts. Also measures the time from
/// SLURM's change (scancel) to the BatchJob's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_partition_and_cluster_side_cancel() {
    let _node = SLURM_NODE.write().await;
    let (bed, operator) = set_up("e2e-single", "ssh", "slurm").await;
    // A wall time on every job: SLURM estimates a start only for jobs with a time limit.
    let sleeper = |seconds: u32| {
        json!({
            "clusterRef": {"name": "slurm"},
            "script": format!("sleep {seconds}\n"),
            "queue": "single",
            "resources": {"wallTime": format!("{}s", seconds + 60)},
        })
    };
    create_job(&bed, "first", sleeper(6)).await;
    create_job(&bed, "second", sleeper(6)).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let phases = (
            status(&bed.jobs().get("first").await.unwrap()).phase,
            status(&bed.jobs().get("second").await.unwrap()).phase,
        );
        if matches!(
            phases,
            (Some(Phase::Running), Some(Phase::Queued))
                | (Some(Phase::Queued), Some(Phase::Running))
        ) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never one Running and one Queued: {phases:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for name in ["first", "second"] {
        let done = status(&wait_for_phase(&bed, name, Phase::Succeeded).await);
        assert_eq!(done.queue.as_deref(), Some("single"));
        // The run time of a finished job is fixed: start to finish, not start to now.
        let run_time = done.run_time.clone().unwrap();
        let seconds: u64 = run_time.trim_end_matches('s').parse().unwrap_or(0);
        assert!((6..=9).contains(&seconds), "a 6 s job ran {run_time}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let later = status(&bed.jobs().get(name).await.unwrap());
        assert_eq!(later.run_time, Some(run_time), "the run time stays put");
    }

    create_job(&bed, "long", sleeper(300)).await;
    let long = status(&wait_for_phase(&bed, "long", Phase::Running).await);
    create_job(&bed, "waiting", sleeper(1)).await;
    let waiting = status(&wait_for_phase(&bed, "waiting", Phase::Queued).await);
    assert!(
        waiting.reason == Some(Reason::Queued) && waiting.message.is_some(),
        "a queued job says why: {waiting:?}"
    );
    assert_eq!(
        waiting.start_time, None,
        "a queued job has not started (the scheduler's estimate is no start time)"
    );
    // SLURM's estimate has a field of its own: about when the running job's wall time ends.
    let estimated = status(
        &wait_for(&bed, "waiting", "SLURM's start estimate", |s| {
            s.expected_start_time.is_some()
        })
        .await,
    );
    assert_eq!(estimated.phase, Some(Phase::Queued));
    assert_eq!(estimated.start_time, None);
    let expected = estimated.expected_start_time.unwrap().0;
    let started = long.start_time.clone().unwrap().0;
    let ahead = expected.as_second() - started.as_second();
    assert!(
        (1..=400).contains(&ahead),
        "expected start {expected} is not within the running job's 360 s wall time (started {started})"
    );
    let id = long.job_id.unwrap();
    slurm(&format!("scancel {id}")).await;
    let cancelled_at = Instant::now();
    let cancelled = status(&wait_for_phase(&bed, "long", Phase::Cancelled).await);
    let latency = cancelled_at.elapsed();
    eprintln!(
        "latency from scancel to status Cancelled: {} ms (poll interval 1 s)",
        latency.as_millis()
    );
    assert!(cancelled.finish_time.is_some());
    wait_for_phase(&bed, "waiting", Phase::Succeeded).await;
    operator.stop().await;
    bed.clean_up().await;
}

/// Experiment 7: deleting a running BatchJob cancels its SLURM job before the resource
/// goes away. Its log pod was there while it ran, for `kubectl logs -f`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_job_cancels_it() {
    let _node = SLURM_NODE.read().await;
    let (bed, operator) = set_up("e2e-delete", "ssh", "slurm").await;
    create_job(
        &bed,
        "doomed",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": "sleep 300\n",
            "outputPolicy": {"logPod": true},
        }),
    )
    .await;
    let id = status(&wait_for_phase(&bed, "doomed", Phase::Running).await)
        .job_id
        .unwrap();
    let pods = Api::<Pod>::namespaced(bed.client.clone(), &bed.namespace);
    let deadline = Instant::now() + PATIENCE;
    while pods.get_opt("doomed-log").await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "no log pod while the job runs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status(&bed.jobs().get("doomed").await.unwrap()).phase,
        Some(Phase::Running)
    );
    bed.jobs()
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while bed.jobs().get_opt("doomed").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the BatchJob was never released");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let state = slurm_state(&id).await;
    assert!(
        state.starts_with("CANCELLED") || state == "COMPLETING",
        "SLURM job {id} is {state}"
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// Experiment 9: a BatchJob whose cluster's Secret is missing reports it (condition and
/// Event) while a job on a good cluster in the same namespace runs; once the Secret exists,
/// the waiting job runs too. Likewise a host key mismatch and an unreachable host, on the
/// job and on its BatchCluster; such a job stays Pending, editable (its clusterRef fixed, it
/// runs) and deletable at once, as nothing reached a cluster (issue 21, case 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_secret_is_reported() {
    let _node = SLURM_NODE.read().await;
    let (bed, operator) = set_up("e2e-secret", "ssh", "slurm").await;
    let login = login("ssh");
    create_cluster(&bed, "keyless", "slurm", &login, "not-yet").await;
    create_job(
        &bed,
        "stuck",
        json!({"clusterRef": {"name": "keyless"}, "script": "echo finally\n"}),
    )
    .await;
    create_job(
        &bed,
        "fine",
        json!({"clusterRef": {"name": "slurm"}, "script": "echo fine\n"}),
    )
    .await;

    let stuck = status(
        &wait_for(&bed, "stuck", "a ClusterReady condition", |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "ClusterReady" && c.status == "False")
        })
        .await,
    );
    let ready = stuck
        .conditions
        .iter()
        .find(|c| c.type_ == "ClusterReady")
        .unwrap();
    assert_eq!(ready.reason, "SecretNotFound");
    assert!(ready.message.contains("\"not-yet\""), "{}", ready.message);
    assert_eq!(stuck.phase, Some(Phase::Pending));
    assert_eq!(stuck.job_id, None);
    wait_for_phase(&bed, "fine", Phase::Succeeded).await;
    let events = events_with(&bed, "stuck", &["SecretNotFound"]).await;
    assert!(
        events.iter().any(|(reason, _)| reason == "SecretNotFound"),
        "{events:?}"
    );

    create_secret(&bed, "not-yet", &login).await;
    let ran = status(&wait_for_phase(&bed, "stuck", Phase::Succeeded).await);
    assert_eq!(ran.attempts, 1);

    // A host whose key is not the one in knownHosts: reported, nothing submitted.
    let impostor = Login {
        known_hosts: batchbridge_testbed::ssh_facts().wrong_known_hosts,
        ..login.clone()
    };
    create_cluster(&bed, "impostor", "slurm", &impostor, "cluster-key").await;
    create_job(
        &bed,
        "careful",
        json!({"clusterRef": {"name": "impostor"}, "script": "echo never\n"}),
    )
    .await;
    let careful = status(
        &wait_for(&bed, "careful", "a HostKeyMismatch condition", |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "ClusterReady" && c.reason == "HostKeyMismatch")
        })
        .await,
    );
    assert_eq!(
        (careful.phase, careful.job_id.as_deref(), careful.attempts),
        (Some(Phase::Pending), None, 0)
    );
    let reachable = wait_for_unreachable(&bed, "impostor").await;
    assert_eq!(reachable.reason, "HostKeyMismatch", "{reachable:?}");
    // Ready, the summary condition kstatus, Argo CD and Flux read, says the same.
    let impostor = bed
        .clusters()
        .get("impostor")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    let ready = impostor
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "HostKeyMismatch"),
        "{ready:?}"
    );
    // Nothing reached the cluster: the job stays editable, and goes at once when deleted.
    patch_spec(&bed, "careful", json!({"script": "echo edited\n"})).await;
    gone_at_once(&bed, "careful").await;

    // A host nobody listens on: reported as Unreachable, on the job and on the cluster.
    let nowhere = Login {
        port: 1,
        ..login.clone()
    };
    create_cluster(&bed, "nowhere", "slurm", &nowhere, "cluster-key").await;
    create_job(
        &bed,
        "lost",
        json!({"clusterRef": {"name": "nowhere"}, "script": "echo never\n"}),
    )
    .await;
    let lost = status(
        &wait_for(&bed, "lost", "an Unreachable condition", |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "ClusterReady" && c.reason == "Unreachable")
        })
        .await,
    );
    assert_eq!(
        (lost.phase, lost.job_id, lost.attempts),
        (Some(Phase::Pending), None, 0),
        "nothing reached the cluster: pending, as before any submit"
    );
    let reachable = wait_for_unreachable(&bed, "nowhere").await;
    assert_eq!(reachable.reason, "Unreachable", "{reachable:?}");
    let events = events_with(&bed, "lost", &["Unreachable"]).await;
    assert!(
        events.iter().any(|(reason, _)| reason == "Unreachable"),
        "{events:?}"
    );
    patch_spec(&bed, "lost", json!({"clusterRef": {"name": "slurm"}})).await;
    wait_for_phase(&bed, "lost", Phase::Succeeded).await;
    operator.stop().await;
    bed.clean_up().await;
}

/// Deletes BatchJob `name` and checks that it is gone within a few seconds: its finalizer
/// has nothing to wait for.
async fn gone_at_once(bed: &Cluster, name: &str) {
    bed.jobs()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while bed.jobs().get_opt(name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "{name} is still there 10 s after its deletion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The operator killed between the submit and the write of the job id, then restarted,
/// leaves exactly one SLURM job. The kill is made exact by putting the status back to what
/// such a kill leaves (Submitted, attempt 1, no job id) while the operator is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_submit_and_status_write_submits_once() {
    let _node = SLURM_NODE.read().await;
    let (bed, operator) = set_up("e2e-restart", "ssh", "slurm").await;
    let job = create_job(
        &bed,
        "once",
        json!({"clusterRef": {"name": "slurm"}, "script": "sleep 60\n"}),
    )
    .await;
    let uid = job.metadata.uid.unwrap();
    let id = status(&wait_for(&bed, "once", "a job id", |s| s.job_id.is_some()).await)
        .job_id
        .unwrap();
    let client = operator.client.clone();
    operator.kill().await;

    bed.jobs()
        .patch_status(
            "once",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Submitted", "attempts": 1, "jobId": null}})),
        )
        .await
        .unwrap();
    let operator = RunningOperator::start(&bed, &client);
    let adopted = status(&wait_for(&bed, "once", "the job id again", |s| s.job_id.is_some()).await);
    assert_eq!(
        adopted.job_id.as_deref(),
        Some(id.as_str()),
        "adopted, not submitted again"
    );
    assert_eq!(adopted.attempts, 1);
    let keyed = slurm(&format!(
        "squeue -h --me -o '%i %k' | awk '$2 == \"{uid}\"'"
    ))
    .await;
    assert_eq!(
        keyed.lines().count(),
        1,
        "SLURM jobs with the key: {keyed:?}"
    );
    bed.jobs()
        .delete("once", &DeleteParams::default())
        .await
        .unwrap();
    operator.stop().await;
    bed.clean_up().await;
}

/// A BatchJob on the HTCondor pool: an array of 2 with one failing task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_htcondor_job_runs() {
    let (bed, operator) = set_up("e2e-htcondor", "htcondor", "htcondor").await;
    create_job(&bed, "pair", json!({
        "clusterRef": {"name": "htcondor"},
        "script": "echo \"task $BATCHBRIDGE_TASK_INDEX\"\n[ \"$BATCHBRIDGE_TASK_INDEX\" = 0 ]\n",
        "array": {"count": 2},
    }))
    .await;
    let done = status(&wait_for_phase(&bed, "pair", Phase::Failed).await);
    let tasks = done.tasks.unwrap();
    assert_eq!((tasks.total, tasks.succeeded, tasks.failed), (2, 1, 1));
    let done = status(&wait_for(&bed, "pair", "the output", |s| !s.task_outputs.is_empty()).await);
    let tails: Vec<&str> = done.task_outputs.iter().map(|t| t.tail.as_str()).collect();
    assert_eq!(tails, ["task 0\n", "task 1\n"]);
    operator.stop().await;
    bed.clean_up().await;
}

/// A failed job is retried per its retry policy, after the backoff (10 s for the first
/// retry): the script fails the first time and succeeds the second. While the retry waits
/// the job is RetryPending, not Failed, and not Finished; `kubectl wait
/// --for=condition=Complete` returns once the retry succeeded; every condition carries the
/// generation it was decided for; each attempt has its own Submitted Event naming its own
/// job id (issue 21, cases 2 and 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_is_retried() {
    let _node = SLURM_NODE.read().await;
    let (bed, operator) = set_up("e2e-retry", "ssh", "slurm").await;
    let created = create_job(&bed, "flaky", json!({
        "clusterRef": {"name": "slurm"},
        "script": "m=\"$HOME/.retry-marker-$MARKER\"\nif [ -e \"$m\" ]; then echo second try; else touch \"$m\"; exit 5; fi\n",
        "environment": {"MARKER": bed.namespace},
        "retryPolicy": {"maxRetries": 2, "retryOn": ["NonZeroExitCode"]},
    }))
    .await;
    // Waits, as a user or a workflow engine would, for the job to complete.
    let mut waiting = std::process::Command::new(&bed.facts.kubectl)
        .arg("--kubeconfig")
        .arg(&bed.facts.kubeconfig)
        .args([
            "wait",
            "--for=condition=Complete",
            "--timeout=90s",
            "-n",
            &bed.namespace,
        ])
        .args(["batchjob/flaky"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first = status(&wait_for_phase(&bed, "flaky", Phase::RetryPending).await);
    assert_eq!(
        (first.exit_code, first.attempts, first.retries, first.reason),
        (Some(5), 1, 0, Some(Reason::NonZeroExitCode))
    );
    let finished = condition(&first.conditions, ConditionType::Finished).unwrap();
    assert_eq!(
        (finished.status.as_str(), finished.reason.as_str()),
        ("False", "RetryPending"),
        "a failure with a retry left is not final"
    );
    assert!(condition(&first.conditions, ConditionType::Failed).is_none());
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "kubectl wait still waits"
    );
    let failed_at = Instant::now();
    let second = status(
        &wait_for(&bed, "flaky", "the retry to succeed", |s| {
            s.phase == Some(Phase::Succeeded)
        })
        .await,
    );
    assert_eq!((second.attempts, second.retries), (2, 1));
    assert_ne!(second.job_id, first.job_id);
    assert!(
        failed_at.elapsed() >= Duration::from_secs(8),
        "retried after {:?}, before the backoff",
        failed_at.elapsed()
    );
    let complete = condition(&second.conditions, ConditionType::Complete).unwrap();
    assert_eq!(complete.status, "True");
    assert!(
        second
            .conditions
            .iter()
            .all(|c| c.observed_generation == created.metadata.generation),
        "{:#?}",
        second.conditions
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let waited = loop {
        if let Some(exit) = waiting.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "kubectl wait did not return");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        waited.success(),
        "kubectl wait --for=condition=Complete: {waited}"
    );

    let events = events_with(&bed, "flaky", &["Submitted"]).await;
    let mut submitted: Vec<&str> = events
        .iter()
        .filter(|(reason, _)| reason == "Submitted")
        .map(|(_, note)| note.as_str())
        .collect();
    submitted.sort_unstable();
    let ids = (first.job_id.unwrap(), second.job_id.unwrap());
    assert_eq!(
        submitted,
        [
            format!("attempt 1 is job {}", ids.0),
            format!("attempt 2 is job {}", ids.1)
        ],
        "{events:?}"
    );
    assert!(
        !events.iter().any(|(reason, _)| reason == "Failed"),
        "no Failed Event for a failure that was retried: {events:?}"
    );
    slurm(&format!("rm -f \"$HOME/.retry-marker-{}\"", bed.namespace)).await;
    operator.stop().await;
    bed.clean_up().await;
}

/// The operator's role is least privilege: what the operator never does is forbidden to it
/// (listing Secrets, changing or deleting a BatchCluster, creating BatchJobs, touching
/// another namespace), while what it does is allowed. (It deletes BatchJobs: those whose
/// ttlSecondsAfterFinished passed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_role_forbids_what_the_operator_never_does() {
    let bed = Cluster::new("e2e-rbac").await;
    let operator = bed.operator_client().await;
    let forbidden = |result: Result<(), kube::Error>, what: &str| match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    let secrets = Api::<Secret>::namespaced(operator.clone(), &bed.namespace);
    forbidden(
        secrets.list(&ListParams::default()).await.map(drop),
        "list secrets",
    );
    let clusters = Api::<batchbridge_operator::crd::BatchCluster>::namespaced(
        operator.clone(),
        &bed.namespace,
    );
    forbidden(
        clusters
            .patch(
                "any",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"pollInterval": "1h"}})),
            )
            .await
            .map(drop),
        "patch a BatchCluster's spec",
    );
    forbidden(
        clusters
            .delete("any", &DeleteParams::default())
            .await
            .map(drop),
        "delete a BatchCluster",
    );
    let jobs = Api::<BatchJob>::namespaced(operator.clone(), &bed.namespace);
    forbidden(
        jobs.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "batchbridge.dev/v1alpha1",
                "kind": "BatchJob",
                "metadata": {"name": "forged"},
                "spec": {"clusterRef": {"name": "any"}, "script": "true"},
            }))
            .unwrap(),
        )
        .await
        .map(drop),
        "create a BatchJob",
    );
    forbidden(
        Api::<BatchJob>::namespaced(operator.clone(), "default")
            .list(&ListParams::default())
            .await
            .map(drop),
        "list BatchJobs in another namespace",
    );
    jobs.list(&ListParams::default()).await.unwrap();
    clusters.list(&ListParams::default()).await.unwrap();
    bed.clean_up().await;
}

/// With pushed events a job's start and end reach its BatchJob although its cluster is
/// polled once an hour. The job waits for a file this test creates only once the BatchJob
/// shows Running; the first poll (at once, for a new job) came before that, so only an event
/// can tell the BatchJob that the job ended.
async fn pushed_events_with_hourly_polls(test: &str, scheduler: &str, shell: SshShell) {
    let (bed, login) = (Cluster::new(test).await, login(component_of(scheduler)));
    create_secret(&bed, "cluster-key", &login).await;
    create_cluster(&bed, scheduler, scheduler, &login, "cluster-key").await;
    bed.clusters()
        .patch(
            scheduler,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pollInterval": "1h", "pushEvents": true}})),
        )
        .await
        .unwrap();
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    // In the home directory: HTCondor gives each job a /tmp of its own.
    let home = shell
        .run(&ShellCommand::new("printenv").arg("HOME"))
        .await
        .unwrap()
        .stdout_text();
    let gate = format!("{}/batchbridge-{}-gate", home.trim(), bed.namespace);
    create_job(
        &bed,
        "pushed",
        json!({
            "clusterRef": {"name": scheduler},
            // At most 2 minutes, so that a failed run leaves no job holding a slot.
            "script": format!(
                "i=0\nwhile [ ! -e {gate} ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done\necho pushed\n"
            ),
        }),
    )
    .await;
    wait_for_phase(&bed, "pushed", Phase::Running).await;
    shell
        .run(&ShellCommand::new("touch").arg(&gate))
        .await
        .unwrap();
    let done = status(&wait_for_phase(&bed, "pushed", Phase::Succeeded).await);
    assert_eq!(done.exit_code, Some(0));
    let _ = shell
        .run(&ShellCommand::new("rm").args(["-f", &gate]))
        .await;
    operator.stop().await;
    bed.clean_up().await;
}

fn component_of(scheduler: &str) -> &str {
    match scheduler {
        "slurm" => "ssh",
        other => other,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_events_reach_the_batchjob_between_hourly_polls() {
    let _node = SLURM_NODE.read().await;
    pushed_events_with_hourly_polls("e2e-pushed-slurm", "slurm", ssh_facts().key_shell()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn htcondor_events_reach_the_batchjob_between_hourly_polls() {
    pushed_events_with_hourly_polls("e2e-pushed-condor", "htcondor", htcondor_shell()).await;
}

/// A BatchJob's script keeps its scheduler directives: one that would move the output
/// fails the job before anything reaches the cluster, with reason DirectiveRefused and the
/// line in Submitted's message; a time limit is taken and SLURM holds the job to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_directives_are_taken_or_refused_naming_the_line() {
    let _node = SLURM_NODE.read().await;
    let (bed, operator) = set_up("e2e-directives", "ssh", "slurm").await;
    let job = |script: &str| json!({"clusterRef": {"name": "slurm"}, "script": script});
    create_job(
        &bed,
        "refused",
        job("#!/bin/bash\n#SBATCH --output=/tmp/x\necho hi\n"),
    )
    .await;
    create_job(
        &bed,
        "taken",
        job("#!/bin/bash\n#SBATCH --time=5\necho hi\n"),
    )
    .await;

    let refused = status(&wait_for_phase(&bed, "refused", Phase::Failed).await);
    assert_eq!(
        refused.reason,
        Some(Reason::DirectiveRefused),
        "{refused:?}"
    );
    assert_eq!(refused.job_id, None, "nothing was submitted: {refused:?}");
    let submitted = condition(&refused.conditions, ConditionType::Submitted).unwrap();
    assert_eq!(
        (submitted.status.as_str(), submitted.reason.as_str()),
        ("False", "DirectiveRefused")
    );
    assert!(
        submitted
            .message
            .starts_with("line 2: #SBATCH --output=/tmp/x: "),
        "{}",
        submitted.message
    );
    assert_eq!(refused.retries, 0);

    let taken = status(&wait_for_phase(&bed, "taken", Phase::Succeeded).await);
    let id = taken.job_id.unwrap();
    // scontrol still knows a job that just ended (MinJobAge); sacct may not have it yet.
    let record = slurm(&format!("scontrol show job -o {id}")).await;
    assert!(
        record.split_whitespace().any(|f| f == "TimeLimit=00:05:00"),
        "{record}"
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// Issue 30, point 4: `scontrol requeue` of a running job. The BatchJob goes Running →
/// Queued (reason `Requeued`) → Running → Succeeded under one job id and one attempt, never
/// Failed. The script ends after 5 s on its second run (it marks its job directory on the
/// first), long enough for the 1 s polls to see it run again, so the Succeeded is that
/// second run's. SLURM holds a requeued job back for two
/// minutes (its BeginTime), hence the longer wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_job_goes_back_to_queued_and_runs_again() {
    let _node = SLURM_NODE.read().await;
    let (bed, operator) = set_up("e2e-requeue", "ssh", "slurm").await;
    create_job(
        &bed,
        "requeued",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": "if [ -e requeue-mark ]; then sleep 5; echo second run; exit 0; fi\n\
                       : >requeue-mark\necho first run\nsleep 300\n",
        }),
    )
    .await;
    let running = status(&wait_for_phase(&bed, "requeued", Phase::Running).await);
    let id = running.job_id.clone().unwrap();
    // The script marks its directory in its first line; the operator saw Running after
    // SLURM started it, but leave it a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    slurm(&format!("scontrol requeue {id}")).await;

    let mut seen: Vec<(Phase, Option<Reason>)> = vec![(Phase::Running, running.reason)];
    let mut requeued_message = None;
    let deadline = Instant::now() + Duration::from_secs(400);
    let done = loop {
        let now = status(&bed.jobs().get("requeued").await.unwrap());
        let phase = now.phase.unwrap();
        if seen.last() != Some(&(phase, now.reason)) {
            seen.push((phase, now.reason));
            if now.reason == Some(Reason::Requeued) {
                requeued_message.clone_from(&now.message);
            }
        }
        assert_eq!(now.job_id.as_deref(), Some(id.as_str()), "{seen:?}");
        assert_eq!(now.attempts, 1, "a requeue is no new attempt: {seen:?}");
        assert_ne!(phase, Phase::Failed, "a requeued job never fails: {now:#?}");
        if phase.is_terminal() {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "not final within 400 s: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("phases of the requeued BatchJob: {seen:?}; while requeued: {requeued_message:?}");
    let phases: Vec<Phase> = seen.iter().map(|(phase, _)| *phase).collect();
    let mut order = phases.clone();
    order.dedup();
    assert_eq!(
        order,
        [
            Phase::Running,
            Phase::Queued,
            Phase::Running,
            Phase::Succeeded
        ],
        "{seen:?}"
    );
    assert!(
        seen.contains(&(Phase::Queued, Some(Reason::Requeued))),
        "Queued again with reason Requeued: {seen:?}"
    );
    assert!(
        requeued_message
            .as_deref()
            .is_some_and(|m| m.starts_with("back in the queue after it had started")),
        "{requeued_message:?}"
    );
    assert_eq!(done.phase, Some(Phase::Succeeded), "{done:#?}");
    assert_eq!(done.exit_code, Some(0), "{done:#?}");
    operator.stop().await;
    bed.clean_up().await;
}
