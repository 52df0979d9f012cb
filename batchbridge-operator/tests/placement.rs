//! Placement across the test bed's clusters, end to end: BatchJobs with spec.placement on
//! the real kube-apiserver, placed by an operator in this process over SLURM 22.05
//! (127.0.0.1:2222), SLURM 24.11 (127.0.0.1:2225) and a BatchCluster whose login does not
//! answer; what ran where is asked of SLURM itself (sacct on each cluster).

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use batchbridge_core::shell::{Command, Shell};
use batchbridge_operator::crd::{Estimate, MoveOutcome, Phase};
use batchbridge_testbed::{Login, SlurmCluster, login};
use common::Cluster;
use common::operator::*;
use common::process::{OperatorProcess, write_operator_kubeconfig};
use serde_json::json;

/// Taken by every test here for its whole run: two of them fill a cluster's every CPU with
/// a blocker, which would hold up the jobs the others expect to run there (one test's
/// blocker on SLURM 24.11 made the other's move to it look a day away).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A name no earlier run used, for jobs looked up by name in sacct.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{nanos}")
}

/// Runs `command` as `batch` on `cluster`'s login node; its stdout.
async fn on(cluster: SlurmCluster, command: &str) -> String {
    let output = cluster
        .shell()
        .run(&Command::sh(command, Vec::<String>::new()))
        .await
        .unwrap();
    assert!(output.success(), "{command}: {}", output.stderr_text());
    output.stdout_text()
}

/// Every job named `name` on `cluster` in the last hour: `id|state|start` rows, once
/// `count` ended ones are in its accounting (slurmdbd records an end a moment after it).
async fn jobs_named(cluster: SlurmCluster, name: &str, count: usize) -> Vec<String> {
    let query = format!("sacct -X -n -P -S now-1hours --name={name} -o JobID,State,Start");
    let mut rows = Vec::new();
    common::eventually(&format!("{count} job(s) named {name} in sacct"), || {
        let query = query.clone();
        async move {
            let ended = |row: &&str| !row.contains("|PENDING|") && !row.contains("|RUNNING|");
            on(cluster, &query).await.lines().filter(ended).count() >= count
        }
    })
    .await;
    rows.extend(on(cluster, &query).await.lines().map(str::to_owned));
    rows
}

/// A BatchCluster `name` of `scheduler` reached through `login` with Secret `secret`.
async fn cluster_at(
    bed: &Cluster,
    name: &str,
    login: &Login,
    secret: &str,
    labels: &[(&str, &str)],
) {
    create_cluster(bed, name, "slurm", login, secret).await;
    if !labels.is_empty() {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        bed.clusters()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .unwrap();
    }
}

/// One candidate's login does not answer (a closed port): the job goes to the other one,
/// and it is never Failed on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_candidate_is_skipped() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bed = Cluster::new("place-down").await;
    let slurm2 = login("slurm2");
    create_secret(&bed, "key", &slurm2).await;
    // The first candidate in order: the real host key, a port nothing listens on.
    let closed = Login {
        port: 1,
        ..slurm2.clone()
    };
    cluster_at(&bed, "down", &closed, "key", &[]).await;
    cluster_at(&bed, "up", &slurm2, "key", &[]).await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    let name = unique("skip");
    create_job(
        &bed,
        &name,
        json!({
            "placement": {"clusters": ["down", "up"], "policy": "Ordered"},
            "script": "echo placed on $SLURM_CLUSTER_NAME\n",
        }),
    )
    .await;
    let done = wait_for(&bed, &name, "success or failure", |s| {
        assert_ne!(s.phase, Some(Phase::Failed), "{s:?}");
        s.phase == Some(Phase::Succeeded)
    })
    .await;
    let done = status(&done);
    assert_eq!(done.cluster.as_deref(), Some("up"));
    assert_eq!(
        done.output_tail.as_deref(),
        Some("placed on batchbridge2\n")
    );
    let seen: Vec<_> = done
        .placement
        .as_ref()
        .unwrap()
        .candidates
        .iter()
        .map(|c| (c.cluster.as_str(), c.answer))
        .collect();
    println!("candidates: {seen:?}");
    assert_eq!(seen[0], ("down", Estimate::Unreachable));
    assert_eq!(seen[1].0, "up");
    assert_ne!(seen[1].1, Estimate::Unreachable);
    let rows = jobs_named(SlurmCluster::Slurm2411, &name, 1).await;
    assert_eq!(rows.len(), 1, "one job ran: {rows:?}");
    assert!(rows[0].contains("|COMPLETED|"), "{rows:?}");
    let events = events_with(&bed, &name, &["Placed"]).await;
    println!("events: {events:?}");
    assert!(
        events
            .iter()
            .any(|(reason, note)| reason == "Placed" && note.starts_with("placed on up")),
        "{events:?}"
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// A job naming its candidates by label lands on one of the two SLURM clusters, and its
/// status names what both answered; clusters without the label are not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_asks_every_matching_cluster() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bed = Cluster::new("place-selector").await;
    let (slurm1, slurm2) = (login("ssh"), login("slurm2"));
    create_secret(&bed, "key1", &slurm1).await;
    create_secret(&bed, "key2", &slurm2).await;
    cluster_at(&bed, "campus", &slurm1, "key1", &[("site", "test")]).await;
    cluster_at(&bed, "national", &slurm2, "key2", &[("site", "test")]).await;
    cluster_at(&bed, "elsewhere", &slurm2, "key2", &[("site", "other")]).await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    let name = unique("selector");
    create_job(
        &bed,
        &name,
        json!({
            "placement": {"selector": {"matchLabels": {"site": "test"}}},
            "script": "echo ran\n",
        }),
    )
    .await;
    let done = status(&wait_for_phase(&bed, &name, Phase::Succeeded).await);
    let candidates = &done.placement.as_ref().unwrap().candidates;
    println!("candidates: {candidates:?}");
    let names: Vec<&str> = candidates.iter().map(|c| c.cluster.as_str()).collect();
    assert_eq!(
        names,
        ["campus", "national"],
        "in name order, the matching ones only"
    );
    assert!(
        candidates
            .iter()
            .all(|c| !matches!(c.answer, Estimate::Unreachable | Estimate::NoAnswer)),
        "both answered: {candidates:?}"
    );
    let chosen = done.cluster.clone().unwrap();
    assert!(names.contains(&chosen.as_str()));
    let ran_on = if chosen == "campus" {
        SlurmCluster::Slurm2205
    } else {
        SlurmCluster::Slurm2411
    };
    let other = if chosen == "campus" {
        SlurmCluster::Slurm2411
    } else {
        SlurmCluster::Slurm2205
    };
    assert_eq!(jobs_named(ran_on, &name, 1).await.len(), 1);
    assert_eq!(jobs_named(other, &name, 0).await, Vec::<String>::new());
    // `kubectl get bj` shows where it ran.
    let listed = bed.kubectl(&["get", "bj", &name, "-n", &bed.namespace, "--no-headers"]);
    assert!(
        listed.split_whitespace().any(|word| word == chosen),
        "{listed}"
    );
    operator.stop().await;
    bed.clean_up().await;
}

/// SLURM 22.05's partition full (a blocker holds every CPU): a new job naming both SLURM
/// clusters goes to 24.11, which would start it at once, and its status names what both
/// estimated; nothing with its name ever reached 22.05.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_sends_a_new_job_to_the_other() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bed = Cluster::new("place-full").await;
    let (slurm1, slurm2) = (login("ssh"), login("slurm2"));
    create_secret(&bed, "key1", &slurm1).await;
    create_secret(&bed, "key2", &slurm2).await;
    cluster_at(&bed, "campus", &slurm1, "key1", &[]).await;
    cluster_at(&bed, "national", &slurm2, "key2", &[]).await;
    let _blocker = block_every_cpu(SlurmCluster::Slurm2205).await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    let name = unique("full");
    create_job(
        &bed,
        &name,
        json!({
            "placement": {"clusters": ["campus", "national"]},
            "resources": {"cpus": 1, "wallTime": "5m"},
            "script": "echo ran\n",
        }),
    )
    .await;
    let done = status(&wait_for_phase(&bed, &name, Phase::Succeeded).await);
    assert_eq!(done.cluster.as_deref(), Some("national"));
    let candidates = &done.placement.as_ref().unwrap().candidates;
    let answer = |cluster: &str| {
        candidates
            .iter()
            .find(|c| c.cluster == cluster)
            .unwrap_or_else(|| panic!("no answer of {cluster}: {candidates:?}"))
    };
    assert!(
        matches!(
            answer("campus").answer,
            Estimate::StartsAt | Estimate::StartsLater
        ),
        "{candidates:?}"
    );
    assert!(
        matches!(
            answer("national").answer,
            Estimate::StartsNow | Estimate::StartsAt
        ),
        "{candidates:?}"
    );
    assert_eq!(
        jobs_named(SlurmCluster::Slurm2205, &name, 0).await,
        Vec::<String>::new()
    );
    assert_eq!(jobs_named(SlurmCluster::Slurm2411, &name, 1).await.len(), 1);
    operator.stop().await;
    bed.clean_up().await;
}

/// Spillover: a job queued on SLURM 22.05 behind a job holding every CPU moves to SLURM
/// 24.11 once that cluster can take it (its Secret appears after the job was placed) and
/// moveAfter has passed; exactly one job with its name ran, on 24.11, and the one on 22.05
/// was withdrawn without starting. Deleting the BatchJob removes the directory that
/// attempt left on 22.05 too.
///
/// A candidate that cannot estimate never promises a clearly earlier start, so no move
/// happens without the backends' start estimates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stuck_behind_a_blocker_moves() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bed = Cluster::new("place-spill").await;
    let (slurm1, slurm2) = (login("ssh"), login("slurm2"));
    create_secret(&bed, "key1", &slurm1).await;
    cluster_at(&bed, "campus", &slurm1, "key1", &[]).await;
    // Its Secret does not exist yet: not usable, skipped at the first placement.
    cluster_at(&bed, "national", &slurm2, "key2", &[]).await;
    // Long enough that its end is well past MOVE_MARGIN away; cancelled however the test
    // ends, as it holds the shared cluster's every CPU.
    let _blocker = block_every_cpu(SlurmCluster::Slurm2205).await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    let name = unique("spill");
    create_job(
        &bed,
        &name,
        json!({
            "placement": {"clusters": ["campus", "national"], "moveAfter": "20s", "maxMoves": 1},
            "resources": {"cpus": 1, "wallTime": "5m"},
            "script": "echo ran on $SLURM_CLUSTER_NAME\n",
        }),
    )
    .await;
    let queued = status(&wait_for_phase(&bed, &name, Phase::Queued).await);
    assert_eq!(queued.cluster.as_deref(), Some("campus"));
    create_secret(&bed, "key2", &slurm2).await;
    let done = wait_for(&bed, &name, "the moved job to succeed", |s| {
        assert_ne!(s.phase, Some(Phase::Failed), "{s:?}");
        s.phase == Some(Phase::Succeeded)
    })
    .await;
    let done = status(&done);
    assert_eq!(done.cluster.as_deref(), Some("national"));
    assert_eq!(
        done.attempts, 2,
        "submitted again under the next attempt's key"
    );
    assert_eq!(done.moves.len(), 1);
    let moved = &done.moves[0];
    assert_eq!(
        (moved.from.as_str(), moved.to.as_str(), moved.outcome),
        ("campus", "national", MoveOutcome::Moved)
    );
    let on_campus = jobs_named(SlurmCluster::Slurm2205, &name, 1).await;
    assert_eq!(on_campus.len(), 1, "{on_campus:?}");
    assert!(
        on_campus[0].starts_with(&format!("{}|CANCELLED", moved.job_id)),
        "{on_campus:?}"
    );
    assert!(
        on_campus[0].ends_with("|None") || on_campus[0].ends_with("|Unknown"),
        "never started: {on_campus:?}"
    );
    let on_national = jobs_named(SlurmCluster::Slurm2411, &name, 1).await;
    assert_eq!(on_national.len(), 1, "{on_national:?}");
    assert!(on_national[0].contains("|COMPLETED|"), "{on_national:?}");
    let reasons: Vec<String> = events_with(&bed, &name, &["Placed", "Moving", "Moved"])
        .await
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    assert!(
        ["Placed", "Moving", "Moved"]
            .iter()
            .all(|r| reasons.iter().any(|seen| seen == r)),
        "{reasons:?}"
    );
    // The attempt it withdrew left its directory on the cluster it left, until the
    // BatchJob is deleted.
    let uid = bed.jobs().get(&name).await.unwrap().metadata.uid.unwrap();
    let work = batchbridge_slurm::SlurmConfig::default().work.work_dir;
    let left_behind = format!("test -d {work}/jobs/{uid} && echo kept; true");
    assert_eq!(
        on(SlurmCluster::Slurm2205, &left_behind).await.trim(),
        "kept"
    );
    bed.jobs()
        .delete(&name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    common::eventually("the files it left on campus removed", || {
        let left_behind = left_behind.clone();
        async move {
            on(SlurmCluster::Slurm2205, &left_behind)
                .await
                .trim()
                .is_empty()
        }
    })
    .await;
    operator.stop().await;
    bed.clean_up().await;
}

/// The operator binary SIGKILLed again and again while `JOBS` jobs queued behind a blocker on SLURM 24.11 move to the HTCondor pool: every
/// job ran exactly once, on the pool, and each one left on 24.11 was cancelled without
/// having started.
///
/// Needs the backends' start estimates (issue 18, items 1-2), like the test above. With
/// them (the estimate branch merged), 50 jobs and 61 kills: every job moved and ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_during_moves_lose_nothing_and_run_nothing_twice() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    const JOBS: usize = 50;
    let bed = Cluster::new("place-kills").await;
    let (slurm2, condor) = (login("slurm2"), login("htcondor"));
    create_secret(&bed, "key-a", &slurm2).await;
    cluster_at(&bed, "a", &slurm2, "key-a", &[]).await;
    // The pool's Secret comes once every job waits on a.
    create_cluster(&bed, "b", "htcondor", &condor, "key-b").await;
    let _blocker = block_every_cpu(SlurmCluster::Slurm2411).await;
    let dir = tempfile::tempdir().unwrap();
    write_operator_kubeconfig(&bed, dir.path()).await;
    let start = |n: usize| {
        let name: &'static str = Box::leak(format!("op{n}").into_boxed_str());
        OperatorProcess::start(name, &bed, dir.path(), None)
    };
    let mut operator = start(0);
    let names: Vec<String> = (0..JOBS).map(|i| unique(&format!("kill{i}"))).collect();
    for name in &names {
        create_job(
            &bed,
            name,
            json!({
                "placement": {"clusters": ["a", "b"], "moveAfter": "5s"},
                "resources": {"cpus": 1, "wallTime": "5m"},
                "script": "echo once\n",
            }),
        )
        .await;
    }
    for name in &names {
        let queued = status(&wait_for_phase(&bed, name, Phase::Queued).await);
        assert_eq!(queued.cluster.as_deref(), Some("a"));
    }
    create_secret(&bed, "key-b", &condor).await;
    // Kills at uneven moments over the two minutes in which the moves happen.
    let mut kills: usize = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(120) {
        let pause = u64::try_from(700 + (kills * 977) % 2900).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        operator.crash();
        let _ = operator.exited().await;
        kills += 1;
        operator = start(kills);
    }
    println!("operator killed {kills} times");
    let mut moved = 0;
    for name in &names {
        let done = wait_for(&bed, name, "success", |s| {
            assert_ne!(s.phase, Some(Phase::Failed), "{s:?}");
            s.phase == Some(Phase::Succeeded)
        })
        .await;
        let done = status(&done);
        assert_eq!(done.cluster.as_deref(), Some("b"), "{name}: {done:?}");
        let on_a = jobs_named(SlurmCluster::Slurm2411, name, 1).await;
        assert_eq!(on_a.len(), 1, "{name}: one job on a: {on_a:?}");
        assert!(on_a[0].contains("|CANCELLED"), "{name}: {on_a:?}");
        assert!(
            on_a[0].ends_with("|None") || on_a[0].ends_with("|Unknown"),
            "{name} never started on a: {on_a:?}"
        );
        let on_b = batchbridge_testbed::htcondor_shell()
            .run(&Command::sh(
                &format!(
                    "condor_history -constraint 'JobBatchName == \"{name}\"' -af ClusterId JobStatus; \
                     condor_q -constraint 'JobBatchName == \"{name}\"' -af ClusterId JobStatus"
                ),
                Vec::<String>::new(),
            ))
            .await
            .unwrap()
            .stdout_text();
        let runs: Vec<&str> = on_b.lines().collect();
        assert_eq!(runs.len(), 1, "{name}: one job on b: {runs:?}");
        assert!(runs[0].ends_with(" 4"), "{name} completed on b: {runs:?}");
        moved += usize::from(done.moves.iter().any(|m| m.outcome == MoveOutcome::Moved));
    }
    assert_eq!(moved, JOBS);
    println!("{JOBS} jobs moved, each ran once, with {kills} kills");
    drop(operator);
    bed.clean_up().await;
}

/// A SLURM job cancelled (as root, where that cluster runs) when this is dropped, even by a
/// failing test.
/// Fills every CPU of `cluster`'s debug partition with one job (20 minutes at most), which
/// the returned guard cancels however the test ends.
async fn block_every_cpu(cluster: SlurmCluster) -> Cancelled {
    let cpus = cluster.cpus();
    let blocker = on(
        cluster,
        &format!("sbatch --parsable -p debug -n {cpus} -t 20 --wrap 'sleep 1200'"),
    )
    .await;
    Cancelled(cluster, blocker.trim().to_owned())
}

struct Cancelled(SlurmCluster, String);

impl Drop for Cancelled {
    fn drop(&mut self) {
        let _ = self.0.as_root("scancel").arg(&self.1).status();
    }
}
