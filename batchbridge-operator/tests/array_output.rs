//! Array jobs as a user sees them, on the test bed's real SLURM and HTCondor through the
//! real kube-apiserver (issue 21):
//!
//! - case 8: every task's output reaches the user: the tails in `status.taskOutputs`
//!   (bounded, the left-out tasks counted), the ConfigMap's per-task keys and the log pod's
//!   output, read the ways the README shows (kubectl jsonpath included);
//! - case 1: a task exiting non-zero fails the array with reason `NonZeroExitCode`, so
//!   `retryOn: [NonZeroExitCode]` runs it again.
//!
//! Each test runs its own operator for a namespace of its own, with a BatchCluster polled
//! every second.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use batchbridge_operator::crd::{BatchJobStatus, Phase, TaskOutput};
use batchbridge_operator::reason::{ConditionType, Reason};
use batchbridge_operator::status::condition;
use common::Cluster;
use common::operator::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_of_a_slurm_array_shows_its_output() {
    every_task_shows_its_output("array-out-slurm", "ssh", "slurm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_of_an_htcondor_array_shows_its_output() {
    every_task_shows_its_output("array-out-htcondor", "htcondor", "htcondor").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_task_retries_a_slurm_array_as_a_non_zero_exit() {
    a_failing_task_is_a_non_zero_exit("array-exit-slurm", "ssh", "slurm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_task_retries_an_htcondor_array_as_a_non_zero_exit() {
    a_failing_task_is_a_non_zero_exit("array-exit-htcondor", "htcondor", "htcondor").await;
}

/// An array of 2 whose task 1 exits 1, with one retry on NonZeroExitCode: the first attempt
/// fails with that reason (not `Unknown`), so the retry fires; the second fails the same way
/// and is final, with the task counts of the attempt.
async fn a_failing_task_is_a_non_zero_exit(test: &str, component: &str, scheduler: &str) {
    let (bed, operator) = set_up(test, component, scheduler).await;
    create_job(
        &bed,
        "half",
        json!({
            "clusterRef": {"name": scheduler},
            "script": "[ \"$BATCHBRIDGE_TASK_INDEX\" != 1 ] || exit 1\n",
            "array": {"count": 2},
            "retryPolicy": {"maxRetries": 1, "retryOn": ["NonZeroExitCode"]},
        }),
    )
    .await;
    let last = status(&wait_for_phase(&bed, "half", Phase::Failed).await);
    assert_eq!(
        (last.reason, last.attempts, last.retries),
        (Some(Reason::NonZeroExitCode), 2, 1),
        "{last:#?}"
    );
    let tasks = last.tasks.unwrap();
    assert_eq!((tasks.total, tasks.succeeded, tasks.failed), (2, 1, 1));
    operator.stop().await;
    bed.clean_up().await;
}

/// Two arrays on the cluster of `scheduler` (test bed component `component`):
///
/// - "seed", the seed's example (`echo A`, 3 tasks), with a line of its own on stderr per
///   task, a ConfigMap and a log pod: every task's output is in status, in the ConfigMap
///   under its own keys, and in the log pod's output after its header;
/// - "many", 5 tasks printing 108 bytes each with `tailBytes: 128`: status shows the tails
///   of tasks 0 and 1 (64 bytes each, the least a task's tail holds) and counts the other 3,
///   while the ConfigMap keeps all five.
async fn every_task_shows_its_output(test: &str, component: &str, scheduler: &str) {
    let (bed, operator) = set_up(test, component, scheduler).await;
    create_job(
        &bed,
        "seed",
        json!({
            "clusterRef": {"name": scheduler},
            "script": "echo \"A\"\necho \"task $BATCHBRIDGE_TASK_INDEX\" >&2\n",
            "array": {"count": 3},
            "outputPolicy": {"configMap": true, "logPod": true},
        }),
    )
    .await;
    create_job(
        &bed,
        "many",
        json!({
            "clusterRef": {"name": scheduler},
            "script": "printf '%0100d task %s\\n' 0 \"$BATCHBRIDGE_TASK_INDEX\"\n",
            "array": {"count": 5},
            "outputPolicy": {"tailBytes": 128, "configMap": true},
        }),
    )
    .await;

    let seed = collected(&bed, "seed").await;
    assert_eq!(
        tails(&seed),
        [
            (0, "A\ntask 0\n".to_owned()),
            (1, "A\ntask 1\n".to_owned()),
            (2, "A\ntask 2\n".to_owned())
        ]
    );
    assert_eq!(
        (seed.output_tail.as_deref(), seed.task_outputs_omitted),
        (None, None),
        "an array's output is per task, and none is left out"
    );
    let message = &condition(&seed.conditions, ConditionType::OutputCollected)
        .unwrap()
        .message;
    assert_eq!(message, "3 tasks: 6 bytes of stdout, 21 of stderr");
    // What the README tells a user to type.
    assert_eq!(
        bed.kubectl(&[
            "-n",
            &bed.namespace,
            "get",
            "batchjob",
            "seed",
            "-o",
            "jsonpath={.status.taskOutputs[2].tail}",
        ]),
        "A\ntask 2\n"
    );
    assert_eq!(
        bed.kubectl(&[
            "-n",
            &bed.namespace,
            "get",
            "configmap",
            "seed-output",
            "-o",
            "jsonpath={.data.task-2\\.stdout}",
        ]),
        "A\n"
    );
    let data = config_map(&bed, "seed-output").await;
    let expected: BTreeMap<String, String> = (0..3)
        .flat_map(|task| {
            [
                (format!("task-{task}.stdout"), "A\n".to_owned()),
                (format!("task-{task}.stderr"), format!("task {task}\n")),
            ]
        })
        .collect();
    assert_eq!(data, expected);

    assert_eq!(
        log_pod_output(&bed, "seed-log", component).await,
        "==> task 0 <==\nA\ntask 0\n==> task 1 <==\nA\ntask 1\n==> task 2 <==\nA\ntask 2\n"
    );

    let many = collected(&bed, "many").await;
    let line_end = |task: u32| format!("{} task {task}\n", "0".repeat(56));
    assert_eq!(tails(&many), [(0, line_end(0)), (1, line_end(1))]);
    assert_eq!(many.task_outputs_omitted, Some(3));
    let message = &condition(&many.conditions, ConditionType::OutputCollected)
        .unwrap()
        .message;
    assert_eq!(
        message,
        "5 tasks: 540 bytes of stdout, 0 of stderr; status.taskOutputs shows tasks 0-1"
    );
    let data = config_map(&bed, "many-output").await;
    let stdout: Vec<(&str, usize)> = data
        .iter()
        .filter(|(key, _)| key.ends_with(".stdout"))
        .map(|(key, value)| (key.as_str(), value.len()))
        .collect();
    assert_eq!(
        stdout,
        [
            ("task-0.stdout", 108),
            ("task-1.stdout", 108),
            ("task-2.stdout", 108),
            ("task-3.stdout", 108),
            ("task-4.stdout", 108)
        ]
    );
    assert_eq!(
        data.get("task-4.stdout").map(String::as_str),
        Some(format!("{} task 4\n", "0".repeat(100)).as_str())
    );

    operator.stop().await;
    bed.clean_up().await;
}

/// The status of job `name` once its output was collected (OutputCollected True).
async fn collected(bed: &Cluster, name: &str) -> BatchJobStatus {
    status(
        &wait_for(bed, name, "its output collected", |s| {
            condition(&s.conditions, ConditionType::OutputCollected)
                .is_some_and(|c| c.status == "True")
        })
        .await,
    )
}

fn tails(status: &BatchJobStatus) -> Vec<(u32, String)> {
    status
        .task_outputs
        .iter()
        .map(|TaskOutput { index, tail }| (*index, tail.clone()))
        .collect()
}

async fn config_map(bed: &Cluster, name: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(bed.client.clone(), &bed.namespace)
        .get(name)
        .await
        .unwrap()
        .data
        .unwrap_or_default()
}
