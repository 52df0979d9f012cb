//! What tools that gate and watch workloads use of a BatchJob, on the test bed's real
//! kube-apiserver with the real SLURM over SSH: `spec.suspend`, which holds a job back
//! before its submit and cancels a queued or running one, as Kueue admits and preempts a
//! batch/v1 Job, and the kstatus `Ready` condition, which `kubectl wait`, Argo CD and Flux
//! read without a health check of their own (issue 33, point 4).

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
/// succeeds.
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
    let done = status(&wait_for_phase(&bed, "gated", Phase::Succeeded).await);
    assert_eq!((done.attempts, done.retries), (1, 0));
    slurm(&format!("rm -f \"{marker}\"")).await;
    operator.stop().await;
    bed.clean_up().await;
}

/// A running job suspended, as Kueue's preemption does: its SLURM job is cancelled (SLURM
/// says so), `kubectl wait --for=condition=Suspended` returns once it ended, and the job
/// waits Pending with reason Suspended, the attempt not counted as a failure. Resumed, it
/// runs again as attempt 2, only after SLURM ended attempt 1, and succeeds: the script,
/// which appends a line to a marker file at each start, ran twice, never at once. The
/// spec's other fields stay frozen while it runs, and suspending the finished job changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_suspended_is_cancelled_and_runs_again_when_resumed() {
    let (bed, operator) = set_up("gating-preempt", "ssh", "slurm").await;
    let marker = format!("$HOME/.suspend-runs-{}", bed.namespace);
    let script = format!(
        "m=\"{marker}\"\necho \"start $(date +%s)\" >> \"$m\"\nsleep 15\necho \"end $(date +%s)\" >> \"$m\"\n"
    );
    create_job(
        &bed,
        "preempted",
        json!({
            "clusterRef": {"name": "slurm"},
            "script": script,
            "retryPolicy": {"maxRetries": 1},
        }),
    )
    .await;
    let running = status(&wait_for_phase(&bed, "preempted", Phase::Running).await);
    let first = running.job_id.clone().unwrap();
    assert_eq!(slurm_state(&first).await, "RUNNING");

    // Its spec is frozen while it runs, suspend excepted.
    let refused = bed
        .jobs()
        .patch(
            "preempted",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"script": "echo other\n", "suspend": true}})),
        )
        .await;
    let message = api_error(refused, 422);
    assert!(
        message.contains("spec cannot change while the job is Running"),
        "{message}"
    );
    patch_spec(&bed, "preempted", json!({"suspend": true})).await;
    // kubectl blocks: the operator's tasks move to the other worker meanwhile.
    let waited = tokio::task::block_in_place(|| {
        bed.kubectl(&[
            "wait",
            "--for=condition=Suspended",
            "--timeout=60s",
            "-n",
            &bed.namespace,
            "batchjob/preempted",
        ])
    });
    assert!(waited.contains("condition met"), "{waited}");
    let state = slurm_state(&first).await;
    assert!(
        state.starts_with("CANCELLED"),
        "SLURM job {first} is {state}"
    );
    let held = status(&bed.jobs().get("preempted").await.unwrap());
    assert_eq!(
        (held.phase, held.reason, held.job_id.as_deref()),
        (Some(Phase::Pending), Some(Reason::Suspended), None)
    );
    assert_eq!((held.attempts, held.retries), (1, 0), "no failure counted");
    assert!(condition(&held.conditions, ConditionType::Failed).is_none());
    let ready = condition(&held.conditions, ConditionType::Ready).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Suspended")
    );
    // Nothing of it is in SLURM's queue while it is suspended.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let queued = slurm("squeue -h --me -o '%i %k'").await;
    let uid = bed
        .jobs()
        .get("preempted")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    assert!(!queued.contains(&uid), "{queued}");
    assert_eq!(
        status(&bed.jobs().get("preempted").await.unwrap()).attempts,
        1
    );

    patch_spec(&bed, "preempted", json!({"suspend": false})).await;
    let again = status(
        &wait_for(&bed, "preempted", "attempt 2 to run", |s| {
            s.attempts == 2 && s.phase == Some(Phase::Running)
        })
        .await,
    );
    assert!(condition(&again.conditions, ConditionType::Suspended).is_none());
    let second = again.job_id.clone().unwrap();
    assert_ne!(second, first);
    let done = status(&wait_for_phase(&bed, "preempted", Phase::Succeeded).await);
    assert_eq!((done.attempts, done.retries), (2, 0));
    let ready = condition(&done.conditions, ConditionType::Ready).unwrap();
    assert_eq!(ready.status, "True");

    // Two starts, the second after SLURM ended the first: never two at once.
    let runs = slurm(&format!("cat \"{marker}\"")).await;
    let lines: Vec<(&str, i64)> = runs
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(what, at)| (what, at.parse().unwrap()))
        .collect();
    let what: Vec<&str> = lines.iter().map(|(what, _)| *what).collect();
    assert_eq!(what, ["start", "start", "end"], "{runs}");
    let first_ended: i64 = slurm(&format!(
        "date -d \"$(sacct -X -n -P -j {first} -o End)\" +%s"
    ))
    .await
    .trim()
    .parse()
    .unwrap();
    assert!(
        first_ended <= lines[1].1,
        "attempt 2 started at {} before SLURM ended attempt 1 at {first_ended}",
        lines[1].1
    );
    let reasons: Vec<String> = events_with(&bed, "preempted", &["Suspending", "Suspended"])
        .await
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    for expected in ["Suspending", "Suspended"] {
        assert!(
            reasons.iter().any(|r| r == expected),
            "no {expected} Event among {reasons:?}"
        );
    }

    // A finished job's suspend changes nothing, and its generation is observed.
    let suspended = bed
        .jobs()
        .patch(
            "preempted",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    let observed = status(
        &wait_for(&bed, "preempted", "the new generation observed", |s| {
            s.observed_generation == suspended.metadata.generation
        })
        .await,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = status(&bed.jobs().get("preempted").await.unwrap());
    assert_eq!(
        (still.phase, still.attempts, still.job_id.as_deref()),
        (Some(Phase::Succeeded), 2, Some(second.as_str()))
    );
    assert!(condition(&observed.conditions, ConditionType::Suspended).is_none());
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
