//! What tools that gate and watch workloads use of a BatchJob, on the test bed's real
//! kube-apiserver with the real SLURM over SSH: `spec.suspend`, which holds a job back
//! before its submit as Kueue holds a batch/v1 Job, and the kstatus `Ready` condition,
//! which `kubectl wait`, Argo CD and Flux read without a health check of their own
//! (issue 33, point 4).

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use batchbridge_operator::crd::Phase;
use batchbridge_operator::reason::{ConditionType, Reason};
use batchbridge_operator::status::condition;
use common::api_error;
use common::operator::*;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// A job created suspended is never submitted (its script, which leaves a marker, never
/// runs): Pending, reason Suspended, condition Suspended True. Cleared, it is submitted and
/// succeeds. Once submitted, setting suspend is refused by the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_job_is_submitted_only_when_resumed() {
    let (bed, operator) = set_up("gating-suspend", "ssh", "slurm").await;
    let marker = format!("$HOME/.suspend-marker-{}", bed.namespace);
    create_job(
        &bed,
        "gated",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": format!("touch \"{marker}\"; sleep 5\n"),
            "suspend": true,
        }),
    )
    .await;
    let held = status(
        &wait_for(&bed, "gated", "the hold", |s| {
            s.reason == Some(Reason::Suspended)
        })
        .await,
    );
    assert_eq!(
        (held.phase, held.attempts, held.job_id.as_deref()),
        (Some(Phase::Pending), 0, None)
    );
    let suspended = condition(&held.conditions, ConditionType::Suspended).unwrap();
    assert_eq!(suspended.status, "True");
    // The cluster is polled every second: a submit would have run the script by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = status(&bed.jobs().get("gated").await.unwrap());
    assert_eq!((still.phase, still.attempts), (Some(Phase::Pending), 0));
    let ran = slurm(&format!("test -e \"{marker}\" && echo ran || echo never")).await;
    assert_eq!(ran.trim(), "never", "a suspended job ran on the cluster");

    patch_spec(&bed, "gated", json!({"suspend": false})).await;
    let running = status(&wait_for_phase(&bed, "gated", Phase::Running).await);
    assert_eq!(running.attempts, 1);
    assert!(condition(&running.conditions, ConditionType::Suspended).is_none());
    let refused = bed
        .jobs()
        .patch(
            "gated",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await;
    let message = api_error(refused, 422);
    assert!(
        message.contains("spec.suspend can be set only before the job is submitted"),
        "{message}"
    );
    let done = status(&wait_for_phase(&bed, "gated", Phase::Succeeded).await);
    assert_eq!((done.attempts, done.retries), (1, 0));
    slurm(&format!("rm -f \"{marker}\"")).await;
    operator.stop().await;
    bed.clean_up().await;
}

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
