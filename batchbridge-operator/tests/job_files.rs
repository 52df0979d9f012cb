//! The job files a BatchJob leaves on the cluster, end to end on the real API server and
//! SLURM: deleting a BatchJob (finished or running) removes its directory from the work
//! directory unless `cleanup: Never`; `ttlSecondsAfterFinished` deletes a finished
//! BatchJob; a cluster that cannot be reached does not hold a deletion back for longer
//! than the operator's removal deadline. What is on the cluster is checked over SSH as the
//! cluster user.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant, SystemTime};

use batchbridge_core::shell::Shell;
use batchbridge_operator::Operator;
use batchbridge_operator::crd::Phase;
use common::Cluster;
use common::operator::*;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::oneshot;

/// The work directory of the test bed's BatchClusters: they set no workDir, so the SLURM
/// backend's default (relative to the login directory) applies.
fn work_dir() -> String {
    batchbridge_slurm::SlurmConfig::default().work.work_dir
}

/// What the cluster holds of the job with key `key`: its directory under `jobs/` and its
/// link under `ids/`, as `ls` finds them.
async fn on_cluster(key: &str, id: &str) -> (bool, bool) {
    let work = work_dir();
    let found = slurm(&format!(
        "test -d {work}/jobs/{key} && echo dir; test -L {work}/ids/{id} && echo link; true"
    ))
    .await;
    (found.contains("dir"), found.contains("link"))
}

async fn delete_and_wait(bed: &Cluster, name: &str) {
    bed.jobs()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(bed, name).await;
}

async fn wait_gone(bed: &Cluster, name: &str) {
    let deadline = Instant::now() + PATIENCE;
    while bed.jobs().get_opt(name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "BatchJob {name} was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The key (the UID: attempt 1) and job id of a finished BatchJob whose output was
/// collected.
async fn finished(bed: &Cluster, name: &str) -> (String, String) {
    let job = wait_for(bed, name, "its output", |s| {
        s.phase == Some(Phase::Succeeded) && s.output_tail.is_some()
    })
    .await;
    (job.uid().unwrap(), status(&job).job_id.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_job_removes_its_files_unless_told_to_keep_them() {
    let (bed, operator) = set_up("files-delete", "ssh", "slurm").await;
    let script = json!("echo kept on the cluster until deleted\n");
    create_job(
        &bed,
        "done",
        json!({"clusterRef": {"name": "slurm"}, "script": script}),
    )
    .await;
    create_job(
        &bed,
        "kept",
        json!({"clusterRef": {"name": "slurm"}, "script": script, "cleanup": "Never"}),
    )
    .await;
    create_job(
        &bed,
        "running",
        json!({"clusterRef": {"name": "slurm"}, "script": "sleep 300\n"}),
    )
    .await;
    let (done_key, done_id) = finished(&bed, "done").await;
    let (kept_key, kept_id) = finished(&bed, "kept").await;
    let running = wait_for_phase(&bed, "running", Phase::Running).await;
    let (running_key, running_id) = (running.uid().unwrap(), status(&running).job_id.unwrap());
    for (key, id) in [
        (&done_key, &done_id),
        (&kept_key, &kept_id),
        (&running_key, &running_id),
    ] {
        assert_eq!(on_cluster(key, id).await, (true, true), "job {id} before");
    }

    delete_and_wait(&bed, "done").await;
    assert_eq!(on_cluster(&done_key, &done_id).await, (false, false));
    assert!(
        events_with(&bed, "done", &["FilesRemoved"])
            .await
            .iter()
            .any(|(reason, _)| reason == "FilesRemoved"),
        "{:?}",
        events_of(&bed, "done").await
    );

    delete_and_wait(&bed, "kept").await;
    assert_eq!(
        on_cluster(&kept_key, &kept_id).await,
        (true, true),
        "cleanup: Never keeps the files"
    );

    // A running job is cancelled first; its files go once SLURM reports it ended.
    delete_and_wait(&bed, "running").await;
    let state = slurm_state(&running_id).await;
    assert!(
        state.starts_with("CANCELLED"),
        "job {running_id} is {state}"
    );
    assert_eq!(on_cluster(&running_key, &running_id).await, (false, false));

    slurm(&format!(
        "rm -rf {work}/jobs/{kept_key} {work}/ids/{kept_id}",
        work = work_dir()
    ))
    .await;
    operator.stop().await;
    bed.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_is_deleted_its_ttl_after_it_finished() {
    let (bed, operator) = set_up("files-ttl", "ssh", "slurm").await;
    create_job(
        &bed,
        "short-lived",
        json!({"clusterRef": {"name": "slurm"}, "script": "echo bye\n", "ttlSecondsAfterFinished": 4}),
    )
    .await;
    let (key, id) = finished(&bed, "short-lived").await;
    let finish_time = status(&bed.jobs().get("short-lived").await.unwrap())
        .finish_time
        .unwrap();
    wait_gone(&bed, "short-lived").await;
    let lived = SystemTime::now()
        .duration_since(SystemTime::from(finish_time.0))
        .unwrap();
    // finishTime has whole seconds; the deletion comes after 4 s, well before PATIENCE.
    assert!(
        lived >= Duration::from_secs(3),
        "deleted {lived:?} after it finished"
    );
    assert_eq!(on_cluster(&key, &id).await, (false, false));
    let reasons: Vec<String> = events_with(&bed, "short-lived", &["Expired", "FilesRemoved"])
        .await
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    assert!(reasons.iter().any(|r| r == "Expired"), "{reasons:?}");
    assert!(reasons.iter().any(|r| r == "FilesRemoved"), "{reasons:?}");

    // Without a ttl the job stays.
    create_job(
        &bed,
        "long-lived",
        json!({"clusterRef": {"name": "slurm"}, "script": "true\n"}),
    )
    .await;
    finished(&bed, "long-lived").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(bed.jobs().get_opt("long-lived").await.unwrap().is_some());
    delete_and_wait(&bed, "long-lived").await;
    operator.stop().await;
    bed.clean_up().await;
}

/// Issue 21 point 4: a deleted BatchJob whose cluster cannot be reached any more is let go
/// after the removal deadline, with a Warning Event that says what may remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_holds_a_deletion_back_only_until_the_deadline() {
    let (bed, operator) = set_up("files-unreachable", "ssh", "slurm").await;
    // This test's own operator, with a deadline a test can wait for.
    operator.stop().await;
    let (stop, stopped) = oneshot::channel::<()>();
    let client = bed.operator_client().await;
    let deadline = Duration::from_secs(6);
    let task = tokio::spawn(
        Operator::new(client.clone())
            .namespace(bed.namespace.clone())
            .image("batchbridge-operator:test")
            .removal_deadline(deadline)
            .run(async move {
                let _ = stopped.await;
            }),
    );
    let operator = RunningOperator { client, stop, task };

    create_job(
        &bed,
        "stranded",
        json!({"clusterRef": {"name": "slurm"}, "script": "echo stranded\n"}),
    )
    .await;
    let (key, id) = finished(&bed, "stranded").await;
    // Port 1 of the login node: nothing listens, every connection is refused.
    bed.clusters()
        .patch(
            "slurm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ssh": {"port": 1}}})),
        )
        .await
        .unwrap();
    let asked = Instant::now();
    delete_and_wait(&bed, "stranded").await;
    let took = asked.elapsed();
    assert!(
        took >= deadline - Duration::from_secs(1) && took < deadline + Duration::from_secs(30),
        "released after {took:?}"
    );
    let events = events_with(&bed, "stranded", &["RemovalAbandoned"]).await;
    let abandoned = events
        .iter()
        .find(|(reason, _)| reason == "RemovalAbandoned")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(
        abandoned.1.contains(&format!("jobs/{key}")),
        "{abandoned:?}"
    );
    assert_eq!(
        on_cluster(&key, &id).await,
        (true, true),
        "nothing could be removed"
    );
    slurm(&format!(
        "rm -rf {work}/jobs/{key} {work}/ids/{id}",
        work = work_dir()
    ))
    .await;
    operator.stop().await;
    bed.clean_up().await;
}

/// A job re-run on another cluster (its clusterRef changed from HTCondor to SLURM after it
/// ran) has attempts' files on both: deleting it removes them from both, and the Event
/// counts both clusters. Before status.clustersUsed, HTCondor's were left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_job_removes_its_files_from_every_cluster_it_ran_on() {
    let (bed, operator) = set_up("files-clusters", "ssh", "slurm").await;
    let pool = batchbridge_testbed::login("htcondor");
    create_secret(&bed, "pool-key", &pool).await;
    create_cluster(&bed, "htcondor", "htcondor", &pool, "pool-key").await;
    create_job(
        &bed,
        "rerun",
        json!({"clusterRef": {"name": "htcondor"}, "script": "echo first\n"}),
    )
    .await;
    let (key, _) = finished(&bed, "rerun").await;
    let pool_work = batchbridge_htcondor::HtcondorConfig::default()
        .work
        .work_dir;
    let on_pool = || async {
        let shell = batchbridge_testbed::htcondor_shell();
        let found = shell
            .run(&batchbridge_core::shell::Command::sh(
                "test -d \"$1/jobs/$2\" && echo dir; true",
                [pool_work.as_str(), key.as_str()],
            ))
            .await
            .unwrap();
        found.stdout_text().contains("dir")
    };
    assert!(on_pool().await, "attempt 1's files on the pool");

    patch_spec(&bed, "rerun", json!({"clusterRef": {"name": "slurm"}})).await;
    let rerun = wait_for(&bed, "rerun", "attempt 2 on SLURM", |s| {
        s.attempts == 2 && s.phase == Some(Phase::Succeeded) && s.output_tail.is_some()
    })
    .await;
    let used = status(&rerun).clusters_used;
    assert_eq!(used, ["htcondor", "slurm"]);

    delete_and_wait(&bed, "rerun").await;
    assert!(!on_pool().await, "attempt 1's files left on the pool");
    let events = events_with(&bed, "rerun", &["FilesRemoved"]).await;
    assert!(
        events
            .iter()
            .any(|(reason, message)| reason == "FilesRemoved"
                && message.contains("from 2 cluster(s)")),
        "{events:?}"
    );
    operator.stop().await;
    bed.clean_up().await;
}
