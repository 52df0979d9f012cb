//! spec.after end to end (issue 30, point 3): the test bed's real kube-apiserver, the real
//! SLURM and HTCondor over SSH, an operator per test watching a namespace of its own. Each
//! job prints the time it started and ended (`date +%s.%N`, the hosts of the test bed share
//! one clock), so the order in which jobs ran is read from their output, as a user would.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_operator::crd::{BatchJobStatus, Phase};
use batchbridge_operator::reason::Reason;
use batchbridge_testbed::{SlurmCluster, login};
use common::operator::*;
use kube::api::DeleteParams;
use serde_json::{Value, json};

/// A job on `cluster` that prints when it starts, sleeps `seconds`, prints when it ends and
/// exits with `code`; it runs after `after` (spec.after entries).
fn timed(cluster: &str, seconds: u32, code: i32, after: Value) -> Value {
    json!({
        "clusterRef": {"name": cluster},
        "script": format!(
            "echo start $(date +%s.%N)\nsleep {seconds}\necho end $(date +%s.%N)\nexit {code}\n"
        ),
        "after": after,
    })
}

/// The time the job's output says it printed `what` (`start` or `end`).
fn printed(status: &BatchJobStatus, what: &str) -> f64 {
    let tail = status.output_tail.as_deref().unwrap_or_default();
    tail.lines()
        .find_map(|line| line.strip_prefix(what)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} time in the output {tail:?}"))
}

/// Waits for job `name` to end in `phase` with its output collected; returns its status.
async fn ended(bed: &common::Cluster, name: &str, phase: Phase) -> BatchJobStatus {
    status(
        &wait_for(bed, name, &format!("{phase:?} with its output"), |s| {
            s.phase == Some(phase) && s.output_tail.is_some()
        })
        .await,
    )
}

/// Waits for job `name` to fail unsubmitted with `reason`; returns its message.
async fn refused(bed: &common::Cluster, name: &str, reason: Reason) -> String {
    let job = wait_for(bed, name, &format!("Failed, {reason}"), |s| {
        s.phase == Some(Phase::Failed)
    })
    .await;
    let status = status(&job);
    assert_eq!(status.reason, Some(reason), "{name}: {status:#?}");
    assert_eq!(
        (status.job_id, status.attempts),
        (None, 0),
        "{name} was never submitted"
    );
    status.message.unwrap_or_default()
}

/// The Dependency field `scontrol show job` prints for SLURM job `id` (22.05, the cluster
/// the test's BatchCluster logs in to).
fn slurm_dependency(id: &str) -> String {
    let shown = SlurmCluster::Slurm2205
        .as_root("scontrol")
        .args(["show", "job", id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    text.split_whitespace()
        .find_map(|field| field.strip_prefix("Dependency="))
        .unwrap_or_else(|| panic!("no Dependency field for job {id}: {text}"))
        .to_owned()
}

/// Waits for job `name` to wait in the scheduler, queued or held (PBS holds a job for its
/// dependencies); returns its job id.
async fn queued(bed: &common::Cluster, name: &str) -> String {
    let job = wait_for(bed, name, "Queued or Held with a job id", |s| {
        matches!(s.phase, Some(Phase::Queued | Phase::Held)) && s.job_id.is_some()
    })
    .await;
    status(&job).job_id.unwrap()
}

/// A chain of three on one SLURM cluster, the last created first: it waits in the operator
/// for a job that does not exist yet; once each job's dependency is in SLURM's queue, the
/// job is handed to SLURM at once, its Dependency field naming the job before it, and
/// SLURM runs them in order. An operator killed while they wait and started again submits
/// nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_on_one_slurm_cluster_is_held_by_slurm() {
    let (bed, operator) = set_up("deps-chain", "ssh", "slurm").await;
    create_job(
        &bed,
        "analyse",
        timed("slurm", 0, 0, json!([{"name": "simulate"}])),
    )
    .await;
    let waiting = status(
        &wait_for(&bed, "analyse", "WaitingForDependencies", |s| {
            s.reason == Some(Reason::WaitingForDependencies)
        })
        .await,
    );
    assert_eq!(waiting.phase, Some(Phase::Pending));
    assert_eq!(
        waiting.message.as_deref(),
        Some(
            "waiting for simulate to succeed (simulate not created yet: no BatchJob of that \
             name in this namespace)"
        )
    );
    create_job(
        &bed,
        "simulate",
        timed(
            "slurm",
            0,
            0,
            json!([{"name": "prepare", "condition": "Succeeded"}]),
        ),
    )
    .await;
    create_job(&bed, "prepare", timed("slurm", 15, 0, json!([]))).await;
    let prepare_id = status(&wait_for_phase(&bed, "prepare", Phase::Running).await)
        .job_id
        .unwrap();
    let simulate_id = queued(&bed, "simulate").await;
    let analyse_id = queued(&bed, "analyse").await;
    assert_eq!(
        slurm_dependency(&simulate_id),
        format!("afterok:{prepare_id}(unfulfilled)")
    );
    assert_eq!(
        slurm_dependency(&analyse_id),
        format!("afterok:{simulate_id}(unfulfilled)")
    );

    operator.kill().await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    let prepare = ended(&bed, "prepare", Phase::Succeeded).await;
    let simulate = ended(&bed, "simulate", Phase::Succeeded).await;
    let analyse = ended(&bed, "analyse", Phase::Succeeded).await;
    assert!(printed(&simulate, "start") > printed(&prepare, "end"));
    assert!(printed(&analyse, "start") > printed(&simulate, "end"));
    assert_eq!(
        [&prepare, &simulate, &analyse].map(|s| (s.job_id.clone().unwrap(), s.attempts)),
        [(prepare_id, 1), (simulate_id, 1), (analyse_id, 1)],
        "each ran once, as first submitted"
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// A failing job ends the jobs SLURM holds for it, reason DependencyFailed, each message
/// naming its own dependency's BatchJob and job id, down the chain: SLURM ended them, they
/// never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dependency_ends_the_jobs_slurm_holds_for_it() {
    let (bed, operator) = set_up("deps-native-failed", "ssh", "slurm").await;
    create_job(&bed, "broken", timed("slurm", 8, 3, json!([]))).await;
    create_job(
        &bed,
        "next",
        timed("slurm", 0, 0, json!([{"name": "broken"}])),
    )
    .await;
    create_job(
        &bed,
        "last",
        timed("slurm", 0, 0, json!([{"name": "next"}])),
    )
    .await;
    let broken_id = status(&wait_for_phase(&bed, "broken", Phase::Running).await)
        .job_id
        .unwrap();
    let next_id = queued(&bed, "next").await;
    queued(&bed, "last").await;
    // SLURM holds `next` for `broken` itself; once `broken` has failed (8 s in, sooner than
    // a loaded machine may get here) SLURM shows the dependency as failed instead.
    let dependency = slurm_dependency(&next_id);
    assert!(
        [
            format!("afterok:{broken_id}(unfulfilled)"),
            format!("afterok:{broken_id}(failed)")
        ]
        .contains(&dependency),
        "{dependency}"
    );

    ended(&bed, "broken", Phase::Failed).await;
    for (name, dependency, id) in [("next", "broken", &broken_id), ("last", "next", &next_id)] {
        let job = wait_for(&bed, name, "Failed", |s| s.phase == Some(Phase::Failed)).await;
        let status = status(&job);
        assert_eq!(
            status.reason,
            Some(Reason::DependencyFailed),
            "{name}: {status:#?}"
        );
        assert_eq!(
            status.message.as_deref(),
            Some(
                format!(
                    "BatchJob {dependency} (job {id}) can no longer meet its condition \
                     Succeeded; the scheduler ended this job before it ran"
                )
                .as_str()
            ),
            "{name}"
        );
        assert_eq!(status.attempts, 1, "{name} was handed to SLURM once");
    }
    operator.stop().await;
    bed.clean_up().await;
}

/// The same on PBS: a job is handed to PBS (Held, with its job id) while its dependency
/// still runs, and runs after it succeeded; one held for a failing job is deleted by PBS
/// and fails DependencyFailed naming the BatchJob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_on_pbs_are_held_by_pbs() {
    let (bed, operator) = set_up("deps-pbs", "pbs", "pbs").await;
    create_job(&bed, "first", timed("pbs", 8, 0, json!([]))).await;
    create_job(
        &bed,
        "second",
        timed("pbs", 0, 0, json!([{"name": "first"}])),
    )
    .await;
    create_job(&bed, "bad", timed("pbs", 8, 3, json!([]))).await;
    create_job(&bed, "spared", timed("pbs", 0, 0, json!([{"name": "bad"}]))).await;
    wait_for_phase(&bed, "first", Phase::Running).await;
    queued(&bed, "second").await;
    let bad_id = status(&wait_for_phase(&bed, "bad", Phase::Running).await)
        .job_id
        .unwrap();
    queued(&bed, "spared").await;

    let first = ended(&bed, "first", Phase::Succeeded).await;
    let second = ended(&bed, "second", Phase::Succeeded).await;
    assert!(printed(&second, "start") > printed(&first, "end"));
    let spared = wait_for(&bed, "spared", "Failed", |s| s.phase == Some(Phase::Failed)).await;
    let spared = status(&spared);
    assert_eq!(spared.reason, Some(Reason::DependencyFailed), "{spared:#?}");
    assert_eq!(
        spared.message.as_deref(),
        Some(
            format!(
                "BatchJob bad (job {bad_id}) can no longer meet its condition Succeeded; the \
                 scheduler ended this job before it ran"
            )
            .as_str()
        )
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// A diamond across SLURM and HTCondor: `top` on SLURM, `left` on HTCondor and `right` on
/// SLURM after it, `bottom` on HTCondor after both; each starts after what it waits for
/// ended, `bottom` after the later of its two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_across_slurm_and_htcondor() {
    let (bed, operator) = set_up("deps-diamond", "ssh", "slurm").await;
    let condor = login("htcondor");
    create_secret(&bed, "condor-key", &condor).await;
    create_cluster(&bed, "htcondor", "htcondor", &condor, "condor-key").await;
    let after_top = json!([{"name": "top"}]);
    create_job(
        &bed,
        "bottom",
        timed(
            "htcondor",
            0,
            0,
            json!([{"name": "left"}, {"name": "right", "condition": "Ended"}]),
        ),
    )
    .await;
    create_job(&bed, "left", timed("htcondor", 1, 0, after_top.clone())).await;
    create_job(&bed, "right", timed("slurm", 4, 0, after_top)).await;
    create_job(&bed, "top", timed("slurm", 2, 0, json!([]))).await;
    let top = ended(&bed, "top", Phase::Succeeded).await;
    let left = ended(&bed, "left", Phase::Succeeded).await;
    let right = ended(&bed, "right", Phase::Succeeded).await;
    let bottom = ended(&bed, "bottom", Phase::Succeeded).await;
    assert_eq!(
        [&top, &left, &right, &bottom].map(|s| s.cluster.clone().unwrap_or_default()),
        ["slurm", "htcondor", "slurm", "htcondor"]
    );
    assert!(printed(&left, "start") > printed(&top, "end"));
    assert!(printed(&right, "start") > printed(&top, "end"));
    assert!(printed(&bottom, "start") > printed(&left, "end"));
    assert!(printed(&bottom, "start") > printed(&right, "end"));
    operator.stop().await;
    bed.clean_up().await;
}

/// On the operator's path, a dependency that can no longer be met ends its dependents
/// unsubmitted, reason DependencyFailed, each message naming its own dependency, down the
/// chain; a job that waits for the failure runs; a dependency deleted before it ended fails
/// its dependent. The dependencies have a retry left (for a timeout, which never comes), so
/// their job id may still change and SLURM is not handed the dependents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dependency_ends_its_dependents() {
    let (bed, operator) = set_up("deps-failed", "ssh", "slurm").await;
    let retry_left = |mut job: Value| {
        job["retryPolicy"] = json!({"maxRetries": 1, "retryOn": ["Timeout"]});
        job
    };
    create_job(&bed, "broken", retry_left(timed("slurm", 1, 3, json!([])))).await;
    create_job(
        &bed,
        "next",
        timed("slurm", 0, 0, json!([{"name": "broken"}])),
    )
    .await;
    // Ended: whichever way `next` ends, except that it never ran.
    create_job(
        &bed,
        "last",
        timed(
            "slurm",
            0,
            0,
            json!([{"name": "next", "condition": "Ended"}]),
        ),
    )
    .await;
    create_job(
        &bed,
        "cleanup",
        timed(
            "slurm",
            0,
            0,
            json!([{"name": "broken", "condition": "Failed"}]),
        ),
    )
    .await;
    create_job(&bed, "long", retry_left(timed("slurm", 120, 0, json!([])))).await;
    create_job(
        &bed,
        "orphan",
        timed("slurm", 0, 0, json!([{"name": "long"}])),
    )
    .await;

    ended(&bed, "broken", Phase::Failed).await;
    assert_eq!(
        refused(&bed, "next", Reason::DependencyFailed).await,
        "BatchJob broken ended Failed, so its condition Succeeded can no longer be met; this \
         job never ran"
    );
    assert_eq!(
        refused(&bed, "last", Reason::DependencyFailed).await,
        "BatchJob next never ran (DependencyFailed), so its condition Ended can no longer be \
         met; this job never ran"
    );
    ended(&bed, "cleanup", Phase::Succeeded).await;

    wait_for_phase(&bed, "long", Phase::Running).await;
    bed.jobs()
        .delete("long", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        refused(&bed, "orphan", Reason::DependencyFailed).await,
        "BatchJob long was deleted before it ended, so its condition Succeeded can no longer \
         be met; this job never ran"
    );
    let events = events_with(&bed, "next", &["WaitingForDependencies"]).await;
    assert!(
        events
            .iter()
            .any(|(reason, note)| reason == "WaitingForDependencies"
                && note == "waiting for broken to succeed"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(reason, note)| reason == "Failed" && note.starts_with("BatchJob broken ended")),
        "{events:?}"
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// A job naming itself is refused by the API server; jobs waiting on each other in a circle
/// fail unsubmitted, reason DependencyCycle, naming the circle, and a job waiting on the
/// circle fails DependencyFailed; editing spec.after to break it runs the edited job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_is_refused() {
    let (bed, operator) = set_up("deps-cycle", "ssh", "slurm").await;
    let refusal = bed
        .refusal::<batchbridge_operator::crd::BatchJob>(
            "narcissus",
            timed("slurm", 0, 0, json!([{"name": "narcissus"}])),
        )
        .await;
    assert!(
        refusal.contains("a BatchJob cannot run after itself"),
        "{refusal}"
    );

    create_job(&bed, "a", timed("slurm", 0, 0, json!([{"name": "c"}]))).await;
    create_job(&bed, "b", timed("slurm", 0, 0, json!([{"name": "a"}]))).await;
    create_job(
        &bed,
        "outside",
        timed("slurm", 0, 0, json!([{"name": "b"}])),
    )
    .await;
    // The last edge closes the circle a -> c -> b -> a.
    create_job(&bed, "c", timed("slurm", 0, 0, json!([{"name": "b"}]))).await;
    for name in ["a", "b", "c"] {
        let message = refused(&bed, name, Reason::DependencyCycle).await;
        assert!(
            message.starts_with(&format!("spec.after waits in a circle: {name} -> ")),
            "{message}"
        );
    }
    let message = refused(&bed, "outside", Reason::DependencyFailed).await;
    assert!(
        message.starts_with("BatchJob b never ran (DependencyCycle)"),
        "{message}"
    );
    // Breaking the circle at a runs a again.
    patch_spec(&bed, "a", json!({"after": []})).await;
    ended(&bed, "a", Phase::Succeeded).await;
    operator.stop().await;
    bed.clean_up().await;
}
