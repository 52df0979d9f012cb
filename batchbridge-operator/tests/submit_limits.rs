//! Submit limits hold jobs, never fail them (issue 30, point 2): 200 BatchJobs drain
//! through the partition `capped` of the test bed's SLURM 24.11 (its QOS lets the test user
//! have 10 jobs in the scheduler) with the BatchCluster's spec.maxQueued at 10, against the
//! real API server, the operator binary running as a process of its own (SIGKILLed like a
//! crashed pod); once with the operator left alone, once killed three times during the drain;
//! and once without maxQueued, the scheduler's limit alone holding the jobs.
//!
//! Each job appends its name to a marker file in the cluster user's home; the count of
//! each name there says how often it ran. While the drain goes on, squeue is sampled for
//! this test's jobs (by their key, the BatchJob's uid) in the capped partition: another
//! test's jobs there share the QOS limit, never this count.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use batchbridge_operator::crd::Phase;
use batchbridge_operator::reason::Reason;
use batchbridge_testbed::SlurmCluster;
use common::Cluster;
use common::operator::*;
use common::process::{OperatorProcess, write_operator_kubeconfig};
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;
use tokio::sync::Mutex;

/// The jobs of a drain.
const JOBS: usize = 200;
/// The partition's QOS limit and the BatchCluster's maxQueued.
const CAP: usize = 10;
/// How long a drain may take before the test fails.
const DRAIN_PATIENCE: Duration = Duration::from_secs(25 * 60);

/// The drains share the partition's QOS limit: one at a time, so each drains at full speed.
static CAPPED_PARTITION: Mutex<()> = Mutex::const_new(());

/// The SLURM cluster with the capped partition.
const CAPPED: SlurmCluster = SlurmCluster::Slurm2411;

/// What a drain saw.
struct Drain {
    /// The most of this test's jobs squeue showed at once.
    most_in_scheduler: usize,
    /// How many squeue samples were taken.
    samples: usize,
    /// Whether a job was seen Pending with reason SubmitLimit and a message naming
    /// spec.maxQueued, or the scheduler's limit.
    held_seen: bool,
    /// How long from the first job's creation to the last one's success.
    took: Duration,
    /// The most a job was accepted after a younger one.
    latest: Duration,
    /// The submits the operator sent to the scheduler, and how many it refused
    /// (`batchbridge_submits_total`, `batchbridge_submit_failures_total`, summed over the
    /// operator's lives, each read just before its kill: a lower bound with kills).
    submits: (f64, f64),
}

impl Drain {
    /// Prints the drain's figures, `what` saying which drain it was.
    fn print(&self, what: &str) {
        eprintln!(
            "drain of {JOBS}{what}: {:.0} s, at most {} in the scheduler over {} samples, a job \
             accepted at most {:?} after a younger one, {:?} submits sent and refused",
            self.took.as_secs_f64(),
            self.most_in_scheduler,
            self.samples,
            self.latest,
            self.submits
        );
    }
}

/// The names of the operator's successive lives.
const LIVES: [&str; 4] = ["first", "second", "third", "fourth"];

/// `batchbridge_submits_total` and `batchbridge_submit_failures_total` of `operator` for
/// the BatchCluster `slurm` of `namespace`.
async fn submits(operator: &OperatorProcess, namespace: &str) -> (f64, f64) {
    let metrics = operator.metrics().await;
    let labels = format!(r#"{{batchjob_namespace="{namespace}",batchcluster="slurm"}}"#);
    let read = |name: &str| metric(&metrics, &format!("{name}{labels}")).unwrap_or(0.0);
    (
        read("batchbridge_submits_total"),
        read("batchbridge_submit_failures_total"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_jobs_drain_through_a_cap_of_ten_and_none_fails() {
    let _partition = CAPPED_PARTITION.lock().await;
    drain("limits-drain", 0, Some(CAP)).await.print("");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_the_operator_killed_three_times_runs_each_job_once() {
    let _partition = CAPPED_PARTITION.lock().await;
    drain("limits-kill", 3, Some(CAP))
        .await
        .print(" with 3 kills");
}

/// Without spec.maxQueued, the scheduler's own limit holds the jobs: its refusal shows in
/// the held jobs' message, and the drain ends as with maxQueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedulers_limit_alone_holds_jobs_and_none_fails() {
    let _partition = CAPPED_PARTITION.lock().await;
    drain("limits-qos", 0, None)
        .await
        .print(" under the scheduler's limit alone");
}

/// Drains [`JOBS`] jobs through the capped partition (spec.maxQueued `max_queued`), killing the operator `kills` times
/// (each after another sixth of the jobs succeeded) and starting a new one at once, and
/// checks what a user would: none failed, all succeeded, each ran once, at most [`CAP`]
/// in the scheduler at any sample, the held ones said why.
async fn drain(test: &str, kills: usize, max_queued: Option<usize>) -> Drain {
    let bed = Cluster::new(test).await;
    let ssh = CAPPED.login();
    let shell = Arc::new(CAPPED.shell());
    create_secret(&bed, "cluster-key", &ssh).await;
    let mut spec = cluster_spec("slurm", &SshLogin::from(&ssh), "cluster-key");
    spec["defaults"] = json!({"partition": "capped"});
    if let Some(max) = max_queued {
        spec["maxQueued"] = json!(max);
    }
    // What a held job's message says: the setting, or the scheduler's words.
    let held_for = match max_queued {
        Some(max) => format!("spec.maxQueued {max}"),
        None => "QOSMaxSubmitJobPerUserLimit".to_owned(),
    };
    create_cluster_with(&bed, "slurm", spec).await;
    let dir = tempfile::tempdir().unwrap();
    write_operator_kubeconfig(&bed, dir.path()).await;
    let mut operator = OperatorProcess::start(LIVES[0], &bed, dir.path(), None);
    let mut sent = (0.0, 0.0);

    let marker = format!(".batchbridge-drain-{}", bed.namespace);
    run_sh(&shell, &format!("rm -f \"$HOME/{marker}\"")).await;
    let started = Instant::now();
    let mut uids = HashSet::new();
    for n in 0..JOBS {
        let name = format!("job-{n:03}");
        let job = create_job(
            &bed,
            &name,
            json!({
                "clusterRef": {"name": "slurm"},
                "script": "echo \"$NAME\" >> \"$HOME/$MARKER\"\n",
                "environment": {"NAME": name, "MARKER": marker},
            }),
        )
        .await;
        uids.insert(job.uid().unwrap());
    }

    // squeue, sampled while the drain goes on.
    let most = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(AtomicUsize::new(0));
    let sampling = {
        let (most, samples, uids) = (Arc::clone(&most), Arc::clone(&samples), uids.clone());
        let shell = Arc::clone(&shell);
        tokio::spawn(async move {
            loop {
                let keys = run_sh(&shell, "squeue -h -u \"$USER\" -p capped -o %k").await;
                let mine = keys
                    .lines()
                    .filter(|key| uids.contains(key.split('.').next().unwrap_or_default()))
                    .count();
                most.fetch_max(mine, Ordering::SeqCst);
                samples.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    let mut held_seen = false;
    let mut killed = 0;
    loop {
        let jobs = bed.jobs().list(&ListParams::default()).await.unwrap();
        let mut phases = BTreeMap::<String, usize>::new();
        for job in &jobs {
            let status = status(job);
            let phase = status.phase.unwrap_or(Phase::Pending);
            assert_ne!(
                phase,
                Phase::Failed,
                "{} failed: {:?}",
                job.name_any(),
                status.message
            );
            held_seen |= phase == Phase::Pending
                && status.reason == Some(Reason::SubmitLimit)
                && status
                    .message
                    .as_deref()
                    .is_some_and(|m| m.contains(&held_for));
            *phases.entry(format!("{phase:?}")).or_default() += 1;
        }
        let succeeded = phases.get("Succeeded").copied().unwrap_or_default();
        if succeeded == JOBS {
            break;
        }
        if killed < kills && succeeded >= (killed + 1) * JOBS / (kills + 3) {
            let (total, refused) = submits(&operator, &bed.namespace).await;
            sent = (sent.0 + total, sent.1 + refused);
            operator.crash();
            operator.exited().await;
            killed += 1;
            eprintln!(
                "killed the operator ({killed}) at {succeeded} succeeded, {:.0} s in",
                started.elapsed().as_secs_f64()
            );
            operator = OperatorProcess::start(LIVES[killed], &bed, dir.path(), None);
        }
        assert!(
            started.elapsed() < DRAIN_PATIENCE,
            "the drain is not over after {DRAIN_PATIENCE:?}: {phases:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let took = started.elapsed();
    sampling.abort();
    let (total, refused) = submits(&operator, &bed.namespace).await;
    sent = (sent.0 + total, sent.1 + refused);
    assert_eq!(killed, kills);

    let ran = run_sh(
        &shell,
        &format!("cat \"$HOME/{marker}\"; rm -f \"$HOME/{marker}\""),
    )
    .await;
    let mut runs = BTreeMap::<&str, usize>::new();
    for name in ran.lines() {
        *runs.entry(name).or_default() += 1;
    }
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert_eq!(runs.len(), JOBS, "jobs that ran");
    assert!(twice.is_empty(), "jobs that ran more than once: {twice:?}");

    // The operator's logs, kept for a failure's reading.
    let logs = std::env::temp_dir().join(format!("batchbridge-{}", bed.namespace));
    std::fs::create_dir_all(&logs).unwrap();
    for life in &LIVES[..=killed] {
        let log = dir.path().join(format!("{life}.log"));
        let _ = std::fs::copy(&log, logs.join(format!("{life}.log")));
    }

    // Submitted in creation order (the names sort as the jobs were created): with
    // maxQueued and one operator, a job's acceptance may come a little after a younger
    // one's, as up to 5 submits run at once, but an older job never waits behind younger ones
    // for as long as a held job waited to be submitted again before (30 s). Across kills,
    // and once the scheduler refused a submit (its limit is shared with other tests' jobs),
    // the order is measured, not asserted (see docs/RELIABILITY.md, "Submit limits").
    let mut jobs = bed.jobs().list(&ListParams::default()).await.unwrap().items;
    jobs.sort_by_key(ResourceExt::name_any);
    let accepted: Vec<_> = jobs
        .iter()
        .map(|job| status(job).submit_time.unwrap().0)
        .collect();
    let mut youngest_before = accepted[0];
    let mut latest = Duration::ZERO;
    for at in &accepted {
        let late = Duration::try_from(youngest_before.duration_since(*at)).unwrap_or_default();
        latest = latest.max(late);
        youngest_before = youngest_before.max(*at);
    }
    assert!(
        kills > 0 || max_queued.is_none() || sent.1 > 0.0 || latest < Duration::from_secs(30),
        "a job was accepted {latest:?} after a younger one"
    );

    let drain = Drain {
        most_in_scheduler: most.load(Ordering::SeqCst),
        samples: samples.load(Ordering::SeqCst),
        held_seen,
        took,
        latest,
        submits: sent,
    };
    assert!(drain.samples > 10, "squeue sampled {} times", drain.samples);
    assert!(
        drain.most_in_scheduler <= CAP,
        "{} of this test's jobs in the scheduler at once",
        drain.most_in_scheduler
    );
    // Under the scheduler's limit alone, a drain whose jobs end as fast as they are sent
    // may never meet the limit: nothing is held then.
    assert!(
        drain.held_seen || (max_queued.is_none() && drain.submits.1 == 0.0),
        "no job was seen held with reason SubmitLimit"
    );
    operator.signal("-TERM");
    operator.exited().await;
    bed.clean_up().await;
    drain
}
