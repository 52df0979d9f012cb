//! Faults, end to end: the `batchbridge-operator` binary as deployed (a process of its own,
//! with a ServiceAccount token bound to exactly the roles in `deploy/rbac/`), the test bed's
//! real kube-apiserver, and the real SLURM over SSH, while parts of that chain fail:
//!
//! 1. the login node's sshd stops for a minute, its connections with it;
//! 2. slurmctld restarts mid-run, and slurmdbd (accounting) is down while jobs finish;
//! 3. the operator process alone is SIGKILLed at random moments of a 200-job run, at least 10
//!    times, and leaves no process behind (its OpenSSH masters die with it);
//!    and again 10 times while its submit pipeline has batches of new jobs gathering or in
//!    flight;
//! 4. the operator's OpenSSH master connection is killed while jobs run.
//!
//! What is checked, each time: no job is failed by the fault, every job ends in the state
//! its script calls for (with its exit code), and SLURM's accounting holds exactly one job
//! per idempotency key (the BatchJob's UID). These tests stop shared services (sshd,
//! slurmctld, slurmdbd), so they take turns ([`SERIAL`]) and put every service back even
//! when they fail ([`RunOnDrop`]). The measured times are printed; `docs/RELIABILITY.md`
//! ("Faults") records them.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use batchbridge_operator::crd::{BatchJob, Phase};
use batchbridge_operator::reason::Reason;
use batchbridge_testbed::{RunOnDrop, login, ssh_facts, testbed_script};
use common::Cluster;
use common::operator::{
    batch_job, create_cluster, create_job, create_secret, http_get, metric, slurm, status,
};
use common::process::{OperatorProcess, Proc, write_operator_kubeconfig};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The fault tests stop services every test shares: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A BatchJob that sleeps `seconds`, then exits with `code`.
fn sleeper(seconds: u32, code: i32) -> Value {
    json!({
        "clusterRef": {"name": "slurm"},
        "script": format!("sleep {seconds}\nexit {code}\n"),
    })
}

/// Runs a test bed script without blocking the runtime's workers.
async fn script(name: &'static str, args: &'static [&'static str]) {
    tokio::task::spawn_blocking(move || testbed_script(name, args))
        .await
        .unwrap();
}

/// Waits until SLURM runs and queues nothing (other tests' jobs would hold these tests'
/// jobs back and spoil their times); fails, saying so, if it stays busy for two minutes.
async fn wait_for_idle_slurm() {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let busy = slurm("squeue -h -a -t PD,R,CG,S -o '%i %u %j'").await;
        if busy.trim().is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "SLURM stays busy with other jobs; the fault tests need the test bed to \
             themselves: {} jobs, first {:?}",
            busy.lines().count(),
            busy.lines().next()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A test namespace with the test bed's SLURM as BatchCluster `slurm` and the operator's
/// kubeconfig in a directory of its own, where operator processes keep their logs.
struct Fixture {
    bed: Cluster,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn new(test: &str) -> Self {
        wait_for_idle_slurm().await;
        let bed = Cluster::new(test).await;
        let login = login("ssh");
        create_secret(&bed, "cluster-key", &login).await;
        create_cluster(&bed, "slurm", "slurm", &login, "cluster-key").await;
        let dir = tempfile::tempdir().unwrap();
        write_operator_kubeconfig(&bed, dir.path()).await;
        Self { bed, dir }
    }

    /// Starts an operator process named `name` (without leader election: one runs at a
    /// time) and waits until it is ready.
    async fn start(&self, name: String) -> Operator {
        let name: &'static str = Box::leak(name.into_boxed_str());
        let process = OperatorProcess::start(name, &self.bed, self.dir.path(), None);
        process
            .wait_until("it is ready", Duration::from_secs(30), async |r| {
                http_get(r.address, "/readyz").await.map(|(code, _)| code) == Some(200)
            })
            .await;
        Operator {
            process: Some(process),
            namespace: self.bed.namespace.clone(),
        }
    }

    /// Starts an operator process without waiting for it.
    fn spawn(&self, name: String) -> Operator {
        let name: &'static str = Box::leak(name.into_boxed_str());
        Operator {
            process: Some(OperatorProcess::start(
                name,
                &self.bed,
                self.dir.path(),
                None,
            )),
            namespace: self.bed.namespace.clone(),
        }
    }

    /// Every BatchJob of the namespace, by name.
    async fn jobs(&self) -> BTreeMap<String, BatchJob> {
        list_jobs(&self.bed.jobs()).await
    }

    /// Polls the jobs every 100 ms until `check` holds for them; fails after `patience`.
    async fn wait_jobs(
        &self,
        what: &str,
        patience: Duration,
        check: impl Fn(&BTreeMap<String, BatchJob>) -> bool,
    ) -> BTreeMap<String, BatchJob> {
        let deadline = Instant::now() + patience;
        loop {
            let jobs = self.jobs().await;
            if check(&jobs) {
                return jobs;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; phases: {:?}",
                phases(&jobs)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn list_jobs(api: &kube::Api<BatchJob>) -> BTreeMap<String, BatchJob> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|job| (job.name_any(), job))
        .collect()
}

fn phase(job: &BatchJob) -> Option<Phase> {
    status(job).phase
}

fn phases(jobs: &BTreeMap<String, BatchJob>) -> BTreeMap<String, Option<Phase>> {
    jobs.iter()
        .map(|(name, job)| (name.clone(), phase(job)))
        .collect()
}

fn is_terminal(job: &BatchJob) -> bool {
    phase(job).is_some_and(Phase::is_terminal)
}

/// An operator process of this test.
struct Operator {
    /// `None` once stopped or killed.
    process: Option<OperatorProcess>,
    namespace: String,
}

impl Operator {
    fn process(&self) -> &OperatorProcess {
        self.process.as_ref().unwrap()
    }

    fn pid(&self) -> u32 {
        self.process().child.id().unwrap()
    }

    /// Its OpenSSH master processes (`ssh -M`, children of the operator).
    fn ssh_masters(&self) -> Vec<Proc> {
        Proc::all()
            .into_iter()
            .filter(|p| p.parent == self.pid() && p.is_ssh_master())
            .collect()
    }

    /// A counter of the BatchCluster `slurm` (0 when the series is absent).
    async fn counter(&self, name: &str) -> f64 {
        let series = format!(
            r#"{name}{{batchjob_namespace="{}",batchcluster="slurm"}}"#,
            self.namespace
        );
        metric(&self.process().metrics().await, &series).unwrap_or(0.0)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.process().log).unwrap_or_default()
    }

    /// SIGKILLs the operator process alone ([`OperatorProcess::crash`]) and returns the
    /// processes it left behind (its OpenSSH masters, had they not died with it) after a
    /// grace of 2 s.
    async fn crash(mut self) -> Vec<Proc> {
        let process = self.process.take().unwrap();
        process.crash();
        // Counted before `exited`, whose drop of the process kills its group. The operator
        // itself is a zombie until then, which `in_group` leaves out.
        let deadline = Instant::now() + Duration::from_secs(2);
        let left = loop {
            let left = Proc::in_group(process.group());
            if left.is_empty() || Instant::now() > deadline {
                break left;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let status = process.exited().await;
        assert_eq!(status.code(), None, "killed by a signal: {status:?}");
        left
    }

    /// Stops it gracefully.
    async fn stop(mut self) {
        let process = self.process.take().unwrap();
        process.signal("-TERM");
        let status = process.exited().await;
        assert!(status.success(), "a graceful stop exits 0: {status:?}");
    }
}

/// The pids of the server side (sshd) of the TCP connection that the ssh client `client`
/// holds to `port` on this machine, as `ss` shows them.
fn server_side_of(client: u32, port: u16) -> Vec<u32> {
    let output = std::process::Command::new("ss")
        .args(["-tnpH", "state", "established"])
        .output()
        .unwrap();
    assert!(output.status.success(), "ss failed: {output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    // Recv-Q Send-Q Local Peer Process
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|line| line.split_whitespace().collect())
        .filter(|row: &Vec<&str>| row.len() >= 5)
        .collect();
    let server = format!(":{port}");
    let pids = |row: &[&str]| -> Vec<u32> {
        row[4..]
            .join(" ")
            .split("pid=")
            .skip(1)
            .filter_map(|rest| rest.split(',').next()?.parse().ok())
            .collect()
    };
    let Some(local) = rows
        .iter()
        .find(|row| row[3].ends_with(&server) && pids(row).contains(&client))
        .map(|row| row[2])
    else {
        return Vec::new();
    };
    rows.iter()
        .filter(|row| row[2].ends_with(&server) && row[3] == local)
        .flat_map(|row| pids(row))
        .collect()
}

/// Waits until something speaking SSH answers on `port`; returns when it first did.
async fn ssh_answers(port: u16) -> Instant {
    use tokio::io::AsyncReadExt;
    loop {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let mut banner = [0u8; 4];
            let read =
                tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut banner)).await;
            if matches!(read, Ok(Ok(_))) && &banner == b"SSH-" {
                return Instant::now();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a [`Sampler`] saw.
#[derive(Debug, Default)]
struct Seen {
    /// Every phase each job was seen in.
    phases: BTreeMap<String, HashSet<Phase>>,
    /// The reasons of every `ClusterReady=False` each job showed.
    not_ready: BTreeMap<String, BTreeSet<String>>,
    /// The BatchCluster's `Reachable` condition at each change: when, status, reason.
    reachable: Vec<(Instant, String, String)>,
    samples: u32,
}

impl Seen {
    /// The first time after `since` the cluster's Reachable was `holds`.
    fn reachable_at(&self, holds: bool, since: Instant) -> Option<Instant> {
        let wanted = if holds { "True" } else { "False" };
        self.reachable
            .iter()
            .find(|(at, status, _)| *at >= since && status == wanted)
            .map(|(at, _, _)| *at)
    }

    /// The jobs seen in one of `bad`, with every phase they were seen in.
    fn seen_in(&self, bad: &[Phase]) -> BTreeMap<String, Vec<Phase>> {
        self.phases
            .iter()
            .filter(|(_, seen)| bad.iter().any(|phase| seen.contains(phase)))
            .map(|(name, seen)| (name.clone(), seen.iter().copied().collect()))
            .collect()
    }
}

/// Samples every BatchJob and the BatchCluster `slurm` every 100 ms, in the background.
struct Sampler {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Sampler {
    fn start(bed: &Cluster) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (jobs, clusters) = (bed.jobs(), bed.clusters());
        let task = tokio::spawn({
            let seen = Arc::clone(&seen);
            async move {
                loop {
                    let listed = list_jobs(&jobs).await;
                    let cluster = clusters.get("slurm").await.unwrap();
                    let now = Instant::now();
                    let reachable = cluster.status.unwrap_or_default().conditions;
                    let reachable = reachable.iter().find(|c| c.type_ == "Reachable");
                    record(&mut seen.lock().unwrap(), &listed, reachable, now);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Self { seen, task }
    }

    fn peek<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        read(&self.seen.lock().unwrap())
    }

    async fn stop(self) -> Seen {
        self.task.abort();
        let _ = self.task.await;
        Arc::try_unwrap(self.seen).unwrap().into_inner().unwrap()
    }
}

/// Adds one sample of the jobs and the cluster's Reachable condition to `seen`.
fn record(
    seen: &mut Seen,
    listed: &BTreeMap<String, BatchJob>,
    reachable: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    now: Instant,
) {
    seen.samples += 1;
    for (name, job) in listed {
        let status = status(job);
        if let Some(phase) = status.phase {
            seen.phases.entry(name.clone()).or_default().insert(phase);
        }
        for c in &status.conditions {
            if c.type_ == "ClusterReady" && c.status == "False" {
                seen.not_ready
                    .entry(name.clone())
                    .or_default()
                    .insert(c.reason.clone());
            }
        }
    }
    if let Some(c) = reachable {
        let changed = seen
            .reachable
            .last()
            .is_none_or(|(_, status, reason)| *status != c.status || *reason != c.reason);
        if changed {
            seen.reachable
                .push((now, c.status.clone(), c.reason.clone()));
        }
    }
}

/// One SLURM accounting record.
#[derive(Debug, Clone)]
struct Record {
    id: String,
    comment: String,
    state: String,
    exit_code: String,
    end: String,
}

/// SLURM's accounting records of the last hour whose comment (the idempotency key) is one of
/// `uids` or a later attempt's key of one (`UID.N`), by UID; waits until every UID has one
/// (sacct stores a job's comment once the job ends, and may lag), at most `patience`.
async fn accounting(uids: &BTreeSet<String>, patience: Duration) -> BTreeMap<String, Vec<Record>> {
    let deadline = Instant::now() + patience;
    loop {
        let text = slurm(
            "SLURM_TIME_FORMAT=%s sacct -X -n -P -S now-1hour -o JobID,Comment,State,ExitCode,End",
        )
        .await;
        let mut records: BTreeMap<String, Vec<Record>> = BTreeMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split('|').collect();
            let [id, comment, state, exit_code, end] = fields[..] else {
                continue;
            };
            let uid = comment.split('.').next().unwrap_or_default();
            if uids.contains(uid) {
                records.entry(uid.to_owned()).or_default().push(Record {
                    id: id.to_owned(),
                    comment: comment.to_owned(),
                    state: state.to_owned(),
                    exit_code: exit_code.to_owned(),
                    end: end.to_owned(),
                });
            }
        }
        if records.len() == uids.len() || Instant::now() > deadline {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Checks that SLURM ran each job exactly once under its key, as the job id its status
/// names, ending as its exit code says; `expected` is each job's exit code.
async fn assert_ran_once(jobs: &BTreeMap<String, BatchJob>, expected: &BTreeMap<String, i32>) {
    let uids: BTreeSet<String> = jobs.values().map(|job| job.uid().unwrap()).collect();
    let records = accounting(&uids, Duration::from_secs(60)).await;
    for (name, job) in jobs {
        let uid = job.uid().unwrap();
        let found = records.get(&uid).cloned().unwrap_or_default();
        assert_eq!(
            found.len(),
            1,
            "{name}: SLURM jobs with key {uid} (zero is a lost job, more a duplicate): {found:?}"
        );
        let record = &found[0];
        let code = expected[name];
        let state = if code == 0 { "COMPLETED" } else { "FAILED" };
        assert_eq!(
            (
                record.comment.as_str(),
                Some(record.id.as_str()),
                record.state.as_str(),
                record.exit_code.clone(),
            ),
            (
                uid.as_str(),
                status(job).job_id.as_deref(),
                state,
                format!("{code}:0"),
            ),
            "{name}: SLURM's record"
        );
    }
    // Nothing with these keys is left in the queue either.
    let queued = slurm("squeue -h --me -o '%i %k'").await;
    let left: Vec<&str> = queued
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(1)
                .is_some_and(|key| uids.contains(key.split('.').next().unwrap_or_default()))
        })
        .collect();
    assert!(
        left.is_empty(),
        "SLURM jobs with these keys still queued: {left:?}"
    );
}

/// Checks each job's final status against the exit code its script ends with.
fn assert_final_states(jobs: &BTreeMap<String, BatchJob>, expected: &BTreeMap<String, i32>) {
    assert_eq!(
        jobs.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "every job is there"
    );
    for (name, job) in jobs {
        let status = status(job);
        let code = expected[name];
        let (phase, reason) = if code == 0 {
            (Phase::Succeeded, None)
        } else {
            (Phase::Failed, Some(Reason::NonZeroExitCode))
        };
        assert_eq!(
            (status.phase, status.exit_code, status.attempts),
            (Some(phase), Some(code), 1),
            "{name}: final status {status:#?}"
        );
        if let Some(reason) = reason {
            assert_eq!(status.reason, Some(reason), "{name}: {status:#?}");
        }
        assert!(status.job_id.is_some(), "{name}: no job id");
    }
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Scenario 1: the login node's sshd stops for 60 s while jobs run, and the connection the
/// operator had goes with it. SLURM keeps running the jobs. No job is failed; the
/// BatchCluster says Reachable=False and every job ClusterReady=False during the outage
/// (issue 21, case 6); once sshd answers again, every job shows SLURM's state, and all
/// succeed, each run once. How long Reachable=False took into the outage (one poll, 1.86 s
/// seen) and the jobs took to show SLURM's state after it (0.5 s to 5.7 s seen) is
/// measured and printed, not asserted: on a loaded machine both vary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sshd_down_for_a_minute() {
    /// How long sshd stays down.
    const OUTAGE: Duration = Duration::from_secs(60);
    /// How long the jobs may take to show SLURM's state once sshd answers: far beyond the
    /// one poll interval it takes on an idle machine, so that only a real failure to
    /// converge fails the test.
    const CONVERGENCE_PATIENCE: Duration = Duration::from_secs(60);
    let _serial = SERIAL.lock().await;
    let f = Fixture::new("faults-sshd").await;
    let operator = f.start("sshd".into()).await;
    let port = ssh_facts().port;
    let mut expected = BTreeMap::new();
    // Short jobs end while sshd is down; long ones run on after it is back.
    for (name, seconds) in [
        ("short-0", 20),
        ("short-1", 20),
        ("short-2", 25),
        ("long-0", 85),
        ("long-1", 85),
        ("long-2", 85),
    ] {
        create_job(&f.bed, name, sleeper(seconds, 0)).await;
        expected.insert(name.to_owned(), 0);
    }
    f.wait_jobs("every job Running", Duration::from_secs(60), |jobs| {
        jobs.len() == expected.len() && jobs.values().all(|j| phase(j) == Some(Phase::Running))
    })
    .await;
    let sampler = Sampler::start(&f.bed);
    let masters = operator.ssh_masters();
    assert_eq!(masters.len(), 1, "one SSH connection: {masters:?}");

    // The outage: sshd stops (its script stops the listener), and the sessions of the
    // operator's connection end, as on a reboot of the login node: a stopped listener alone
    // leaves established connections up.
    script("sshd.sh", &["down"]).await;
    let _sshd_back = RunOnDrop::script("sshd.sh", &["up"]);
    let down_at = Instant::now();
    let down_epoch = epoch_now();
    let sessions = server_side_of(masters[0].pid, port);
    assert!(
        !sessions.is_empty(),
        "no sshd session serves the operator's connection"
    );
    for pid in &sessions {
        if let Some(process) = Proc::read(*pid) {
            process.kill("-KILL");
        }
    }
    tokio::time::sleep_until((down_at + OUTAGE).into()).await;
    let unreachable_at = sampler.peek(|seen| seen.reachable_at(false, down_at));
    let during = f.jobs().await;

    let answering = tokio::spawn(ssh_answers(port));
    script("sshd.sh", &["up"]).await;
    let up_at = answering.await.unwrap();
    let up_epoch = epoch_now();
    // The short jobs ended during the outage: only a poll after it can show them
    // Succeeded. The long ones run on, unless converging took until they ended too.
    let converged = f
        .wait_jobs(
            "the short jobs Succeeded, the long ones Running (or Succeeded)",
            CONVERGENCE_PATIENCE,
            |jobs| {
                jobs.iter().all(|(name, job)| match phase(job) {
                    Some(Phase::Succeeded) => true,
                    Some(Phase::Running) => !name.starts_with("short"),
                    _ => false,
                })
            },
        )
        .await;
    let convergence = up_at.elapsed();
    let reachable_again = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(at) = sampler.peek(|seen| seen.reachable_at(true, up_at)) {
                break at.saturating_duration_since(up_at);
            }
            assert!(
                Instant::now() < deadline,
                "the BatchCluster never became Reachable again: {:?}",
                sampler.peek(|seen| seen.reachable.clone())
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let done = f
        .wait_jobs("every job Succeeded", Duration::from_secs(90), |jobs| {
            jobs.values().all(|j| phase(j) == Some(Phase::Succeeded))
        })
        .await;
    let seen = sampler.stop().await;
    let reconnects = operator.counter("batchbridge_ssh_reconnects_total").await;

    eprintln!(
        "sshd down {OUTAGE:?} ({} server-side session processes ended); Reachable=False {:?} \
         after the outage began; job phases at its end {:?}; after sshd answered again: every \
         job converged in {convergence:?} (to {:?}), Reachable=True in {reachable_again:?}; \
         SSH reconnects {reconnects}; ClusterReady=False seen on jobs: {:?}; {} samples",
        sessions.len(),
        unreachable_at.map(|at| at - down_at),
        phases(&during),
        phases(&converged),
        seen.not_ready,
        seen.samples,
    );
    let bad = seen.seen_in(&[Phase::Failed, Phase::Unknown, Phase::Cancelled]);
    assert!(bad.is_empty(), "jobs failed by the outage: {bad:?}");
    let unreachable_at = unreachable_at.unwrap_or_else(|| {
        panic!(
            "the BatchCluster never showed Reachable=False during the outage: {:?}; log:\n{}",
            seen.reachable,
            operator.log()
        )
    });
    let reason = seen
        .reachable
        .iter()
        .find(|(at, _, _)| *at == unreachable_at)
        .map(|(_, _, reason)| reason.clone());
    assert!(
        matches!(reason.as_deref(), Some("Unreachable" | "ConnectionLost")),
        "Reachable=False says {reason:?}"
    );
    assert!(
        during.values().all(|j| phase(j) == Some(Phase::Running)),
        "every job keeps its phase while its cluster is unreachable: {:?}",
        phases(&during)
    );
    // ... and says that its cluster is not ready, then that it is again.
    for name in expected.keys() {
        let reasons = seen.not_ready.get(name).cloned().unwrap_or_default();
        assert!(
            reasons
                .iter()
                .any(|r| r == "Unreachable" || r == "ConnectionLost"),
            "{name} never showed ClusterReady=False during the outage: {reasons:?}"
        );
    }
    assert!(
        done.values().all(|job| {
            status(job)
                .conditions
                .iter()
                .any(|c| c.type_ == "ClusterReady" && c.status == "True")
        }),
        "every job's cluster is ready again"
    );
    assert!(reconnects >= 1.0, "the operator reconnected: {reconnects}");
    assert_final_states(&done, &expected);
    assert_ran_once(&done, &expected).await;
    // SLURM ran the short jobs to their end while sshd was down.
    let uids: BTreeSet<String> = done.values().map(|job| job.uid().unwrap()).collect();
    let records = accounting(&uids, Duration::from_secs(30)).await;
    for (name, job) in &done {
        if name.starts_with("short") {
            let end: u64 = records[&job.uid().unwrap()][0].end.parse().unwrap();
            assert!(
                (down_epoch..=up_epoch).contains(&end),
                "{name} ended at {end}, outside the outage {down_epoch}..={up_epoch}"
            );
        }
    }
    operator.stop().await;
    f.bed.clean_up().await;
}

/// Scenario 2: slurmctld restarts while jobs run (one job is created during the restart),
/// then slurmdbd stops and the jobs finish without accounting (two more are submitted
/// then, one failing). Every job ends as its script says, a failing one Failed with its
/// exit code; once slurmdbd is back, SLURM's accounting agrees, one record per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmctld_restart_and_slurmdbd_down() {
    let _serial = SERIAL.lock().await;
    let f = Fixture::new("faults-slurm").await;
    let operator = f.start("slurm".into()).await;
    let mut expected = BTreeMap::new();
    for (name, seconds, code) in [
        ("ok-0", 15, 0),
        ("ok-1", 15, 0),
        ("ok-2", 18, 0),
        ("ok-3", 18, 0),
        ("fails", 15, 3),
    ] {
        create_job(&f.bed, name, sleeper(seconds, code)).await;
        expected.insert(name.to_owned(), code);
    }
    f.wait_jobs("every job Running", Duration::from_secs(60), |jobs| {
        jobs.len() == expected.len() && jobs.values().all(|j| phase(j) == Some(Phase::Running))
    })
    .await;
    let sampler = Sampler::start(&f.bed);

    // `slurm.sh up` brings back whatever a failure below leaves down.
    let _slurm_back = RunOnDrop::script("slurm.sh", &["up"]);
    let restarted = Instant::now();
    let restart = tokio::spawn(script("slurm.sh", &["restart-slurmctld"]));
    create_job(&f.bed, "during-restart", sleeper(2, 0)).await;
    expected.insert("during-restart".into(), 0);
    restart.await.unwrap();
    let restart_took = restarted.elapsed();

    script("slurm.sh", &["stop-slurmdbd"]).await;
    let _slurmdbd_back = RunOnDrop::script("slurm.sh", &["start-slurmdbd"]);
    let dbd_down_at = Instant::now();
    let at_dbd_stop = f.jobs().await;
    let early: Vec<&String> = at_dbd_stop
        .iter()
        .filter(|(name, job)| {
            expected.contains_key(*name) && *name != "during-restart" && is_terminal(job)
        })
        .map(|(name, _)| name)
        .collect();
    assert!(
        early.is_empty(),
        "jobs ended before slurmdbd stopped, so they test nothing: {early:?}"
    );
    for (name, code) in [("dbd-down-ok", 0), ("dbd-down-fails", 4)] {
        create_job(&f.bed, name, sleeper(2, code)).await;
        expected.insert(name.to_owned(), code);
    }
    let done = f
        .wait_jobs("every job finished", Duration::from_secs(90), |jobs| {
            jobs.len() == expected.len() && jobs.values().all(is_terminal)
        })
        .await;
    let finished_after = dbd_down_at.elapsed();
    // Accounting was down all along: sacct cannot answer.
    let accounting_state =
        slurm("sacct -X -n -S now-1hour >/dev/null 2>&1 && echo up || echo down").await;
    assert_eq!(accounting_state.trim(), "down", "slurmdbd stayed down");
    let seen = sampler.stop().await;
    let submit_failures = operator.counter("batchbridge_submit_failures_total").await;
    eprintln!(
        "slurmctld restart took {restart_took:?}; with slurmdbd down every job finished \
         within {finished_after:?}; submit failures {submit_failures}; ClusterReady=False \
         seen on jobs: {:?}; phases seen: {:?}",
        seen.not_ready, seen.phases
    );
    assert_final_states(&done, &expected);
    let wrong = seen.seen_in(&[Phase::Failed, Phase::Unknown, Phase::Cancelled]);
    let wrong: Vec<&String> = wrong.keys().filter(|name| expected[*name] == 0).collect();
    assert!(wrong.is_empty(), "succeeding jobs seen failed: {wrong:?}");

    script("slurm.sh", &["start-slurmdbd"]).await;
    assert_ran_once(&done, &expected).await;
    operator.stop().await;
    f.bed.clean_up().await;
}

/// SplitMix64: a small seeded generator, so a kill schedule can be replayed.
struct Rng(u64);

impl Rng {
    /// Seeded from `FAULTS_SEED`, or from the clock (and the seed printed, to replay it);
    /// with the seed.
    fn seeded() -> (Self, u64) {
        let seed = std::env::var("FAULTS_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                u64::from(
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap()
                        .subsec_nanos(),
                )
            });
        eprintln!("kill schedule seed {seed} (FAULTS_SEED={seed} replays it)");
        (Self(seed), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// Scenario 3: the operator process is SIGKILLed at random moments (a seeded schedule;
/// `FAULTS_SEED` replays one) at least 10 times during a run of 200 short jobs, some of
/// which fail, and a new process starts after each kill. No job is lost or run twice
/// (SLURM's accounting: exactly one job per key), every final state is right, and no kill
/// leaves a process behind: the OpenSSH masters die with the operator (PR_SET_PDEATHSIG),
/// where a container runtime would not be there to kill them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_during_200_jobs() {
    const JOBS: usize = 200;
    const KILLS: u32 = 12;
    let _serial = SERIAL.lock().await;
    let (mut rng, seed) = Rng::seeded();
    let f = Fixture::new("faults-kill").await;
    let mut expected = BTreeMap::new();
    let mut specs = Vec::new();
    for i in 0..JOBS {
        let seconds = u32::try_from(rng.between(1, 5)).unwrap();
        let code = if rng.between(1, 100) <= 15 {
            i32::try_from(rng.between(1, 9)).unwrap()
        } else {
            0
        };
        let name = format!("job-{i:03}");
        expected.insert(name.clone(), code);
        specs.push((name, sleeper(seconds, code)));
    }
    let started = Instant::now();
    let mut operator = f.spawn("kill-0".into());
    let creating = {
        let jobs = f.bed.jobs();
        tokio::spawn(async move {
            futures::stream::iter(specs)
                .map(|(name, spec)| {
                    let jobs = jobs.clone();
                    async move {
                        jobs.create(&Default::default(), &batch_job(&name, spec))
                            .await
                            .unwrap();
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<()>>()
                .await;
        })
    };

    let mut kills = Vec::new();
    for kill in 1..=KILLS {
        let delay = Duration::from_millis(rng.between(300, 4000));
        tokio::time::sleep(delay).await;
        let jobs = f.jobs().await;
        let finished = jobs.values().filter(|job| is_terminal(job)).count();
        assert!(
            finished < JOBS,
            "the run ended before kill {kill} of {KILLS}: too short to test anything"
        );
        let left = operator.crash().await;
        assert!(
            left.is_empty(),
            "kill {kill}: the SIGKILLed operator left processes behind: {left:#?}"
        );
        kills.push((delay, finished));
        operator = f.spawn(format!("kill-{kill}"));
    }
    creating.await.unwrap();
    let done = f
        .wait_jobs("every job finished", Duration::from_secs(150), |jobs| {
            jobs.len() == JOBS && jobs.values().all(is_terminal)
        })
        .await;
    let run_took = started.elapsed();
    let failed = done
        .values()
        .filter(|job| phase(job) == Some(Phase::Failed))
        .count();
    eprintln!(
        "seed {seed}: {} kills (delay after the previous start, jobs finished by then): \
         {kills:?}; {JOBS} jobs ({failed} failing by design) finished in {run_took:?}; \
         no kill left a process behind",
        kills.len()
    );
    assert_final_states(&done, &expected);
    assert_ran_once(&done, &expected).await;
    operator.stop().await;
    f.bed.clean_up().await;
}

/// Scenario 3b: the operator process is SIGKILLed 10 times while its submit pipeline
/// has batches of jobs gathering or in flight. 200 BatchJobs come in 10 waves of 20; after
/// each wave the test waits until the operator has submits in progress
/// (`batchbridge_actions_in_progress{action="submit"}`), lets a random 0 to 600 ms pass
/// (a batch gathers for 100 ms, then is submitted, then its answers are written) and kills
/// it; a new process starts after each kill. Every BatchJob ends Succeeded with its one job:
/// SLURM's accounting holds exactly one job per key (none lost, none twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_while_batches_are_submitted() {
    const WAVES: usize = 10;
    const WAVE: usize = 20;
    let _serial = SERIAL.lock().await;
    let (mut rng, seed) = Rng::seeded();
    let f = Fixture::new("faults-batch-kill").await;
    let mut expected = BTreeMap::new();
    let started = Instant::now();
    let mut operator = f.spawn("batch-kill-0".into());
    let mut kills = Vec::new();
    for wave in 0..WAVES {
        let names: Vec<String> = (0..WAVE)
            .map(|i| format!("job-{:03}", wave * WAVE + i))
            .collect();
        futures::stream::iter(&names)
            .map(|name| {
                let jobs = f.bed.jobs();
                async move {
                    jobs.create(&Default::default(), &batch_job(name, sleeper(1, 0)))
                        .await
                        .unwrap();
                }
            })
            .buffer_unordered(WAVE)
            .collect::<Vec<()>>()
            .await;
        expected.extend(names.into_iter().map(|name| (name, 0)));
        let submitting = |metrics: &str| {
            metric(
                metrics,
                r#"batchbridge_actions_in_progress{action="submit"}"#,
            )
            .unwrap_or(0.0)
        };
        operator
            .process()
            .wait_until(
                "submits are in progress",
                Duration::from_secs(60),
                async |p| submitting(&p.metrics().await) > 0.0,
            )
            .await;
        let delay = Duration::from_millis(rng.between(0, 600));
        tokio::time::sleep(delay).await;
        let in_progress = submitting(&operator.process().metrics().await);
        let left = operator.crash().await;
        assert!(
            left.is_empty(),
            "kill {}: the SIGKILLed operator left processes behind: {left:#?}",
            wave + 1
        );
        kills.push((delay, in_progress));
        operator = f.spawn(format!("batch-kill-{}", wave + 1));
    }
    let done = f
        .wait_jobs("every job finished", Duration::from_secs(300), |jobs| {
            jobs.len() == WAVES * WAVE && jobs.values().all(is_terminal)
        })
        .await;
    eprintln!(
        "seed {seed}: {} kills (delay after submits were seen in progress, submits in \
         progress just before the kill): {kills:?}; {} jobs finished in {:?}",
        kills.len(),
        WAVES * WAVE,
        started.elapsed()
    );
    assert_final_states(&done, &expected);
    assert_ran_once(&done, &expected).await;
    operator.stop().await;
    f.bed.clean_up().await;
}

/// Scenario 4: the operator's OpenSSH master connection is killed, three times, while jobs
/// run, and a job is created right after each kill. The connection is opened again
/// (`batchbridge_ssh_reconnects_total`), jobs show at most a passing ClusterReady
/// condition, none is failed, and each runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_master_killed() {
    const ROUNDS: usize = 3;
    let _serial = SERIAL.lock().await;
    let f = Fixture::new("faults-master").await;
    let operator = f.start("master".into()).await;
    let mut expected = BTreeMap::new();
    for i in 0..4 {
        let name = format!("run-{i}");
        create_job(&f.bed, &name, sleeper(25, 0)).await;
        expected.insert(name, 0);
    }
    f.wait_jobs("every job Running", Duration::from_secs(60), |jobs| {
        jobs.len() == expected.len() && jobs.values().all(|j| phase(j) == Some(Phase::Running))
    })
    .await;
    let sampler = Sampler::start(&f.bed);
    assert_eq!(
        operator.counter("batchbridge_ssh_reconnects_total").await,
        0.0,
        "no reconnect before the first kill"
    );

    let mut reconnect_times = Vec::new();
    for round in 1..=ROUNDS {
        let masters = operator.ssh_masters();
        assert_eq!(masters.len(), 1, "one SSH master: {masters:?}");
        let before = operator.counter("batchbridge_ssh_reconnects_total").await;
        masters[0].kill("-KILL");
        let killed = Instant::now();
        let name = format!("after-kill-{round}");
        create_job(&f.bed, &name, sleeper(2, 0)).await;
        expected.insert(name, 0);
        let deadline = killed + Duration::from_secs(30);
        loop {
            let reconnects = operator.counter("batchbridge_ssh_reconnects_total").await;
            let now = operator.ssh_masters();
            if reconnects > before && now.len() == 1 && now[0].pid != masters[0].pid {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no new SSH connection; masters {now:?}, reconnects \
                 {reconnects}; log:\n{}",
                operator.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        reconnect_times.push(killed.elapsed());
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let done = f
        .wait_jobs("every job Succeeded", Duration::from_secs(90), |jobs| {
            jobs.len() == expected.len()
                && jobs.values().all(|j| phase(j) == Some(Phase::Succeeded))
        })
        .await;
    let seen = sampler.stop().await;
    let reconnects = operator.counter("batchbridge_ssh_reconnects_total").await;
    let opened = operator
        .counter("batchbridge_ssh_connections_opened_total")
        .await;
    eprintln!(
        "{ROUNDS} master kills; reconnected after {reconnect_times:?}; reconnects {reconnects}, \
         connections opened {opened}; ClusterReady=False seen on jobs: {:?}; Reachable \
         changes: {:?}",
        seen.not_ready,
        seen.reachable
            .iter()
            .map(|(_, status, reason)| format!("{status}/{reason}"))
            .collect::<Vec<_>>()
    );
    let bad = seen.seen_in(&[Phase::Failed, Phase::Unknown, Phase::Cancelled]);
    assert!(bad.is_empty(), "jobs failed by a lost connection: {bad:?}");
    assert!(
        reconnects >= 1.0 && reconnects <= opened,
        "reconnects {reconnects}, connections opened {opened}"
    );
    assert_eq!(
        reconnects,
        f64::from(u32::try_from(ROUNDS).unwrap()),
        "one reconnect per kill"
    );
    for (name, job) in &done {
        let ready = status(job)
            .conditions
            .into_iter()
            .find(|c| c.type_ == "ClusterReady");
        assert_eq!(
            ready.map(|c| c.status).as_deref(),
            Some("True"),
            "{name}: a lost connection leaves no lasting condition"
        );
    }
    assert_final_states(&done, &expected);
    assert_ran_once(&done, &expected).await;
    operator.stop().await;
    f.bed.clean_up().await;
}
