//! What tools that gate and watch workloads read of a BatchJob, on the test bed's real
//! kube-apiserver with the real SLURM over SSH: the kstatus `Ready` condition, which
//! `kubectl wait`, Argo CD and Flux use without a health check of their own (issue 33,
//! point 4).

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_operator::crd::Phase;
use batchbridge_operator::reason::ConditionType;
use batchbridge_operator::status::condition;
use common::operator::*;
use serde_json::json;

/// Ready is False while the job runs, True once it succeeded, and `kubectl wait
/// --for=condition=Ready` returns on it; status.observedGeneration and every condition's
/// carry the spec's generation, so kstatus computes the job's health as Current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_job_is_ready() {
    let (bed, operator) = set_up("gating-ready", "ssh", "slurm").await;
    let created = create_job(
        &bed,
        "short",
        json!({"clusterRef": {"name": "slurm"}, "script": "sleep 5; echo done\n"}),
    )
    .await;
    let running = status(&wait_for_phase(&bed, "short", Phase::Running).await);
    let ready = condition(&running.conditions, ConditionType::Ready).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Running")
    );
    // kubectl blocks: the operator's tasks move to the other worker meanwhile.
    let waited = tokio::task::block_in_place(|| {
        bed.kubectl(&[
            "wait",
            "--for=condition=Ready",
            "--timeout=90s",
            "-n",
            &bed.namespace,
            "batchjob/short",
        ])
    });
    assert!(waited.contains("condition met"), "{waited}");
    let done = status(&bed.jobs().get("short").await.unwrap());
    assert_eq!(done.phase, Some(Phase::Succeeded));
    let ready = condition(&done.conditions, ConditionType::Ready).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Succeeded")
    );
    let generation = created.metadata.generation;
    assert_eq!(done.observed_generation, generation);
    assert!(
        done.conditions
            .iter()
            .all(|c| c.observed_generation == generation),
        "{:#?}",
        done.conditions
    );
    operator.stop().await;
    bed.clean_up().await;
}
