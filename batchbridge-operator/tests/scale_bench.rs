//! The scale benchmark (issue 7): the `batchbridge-operator` binary, as a process of its
//! own, against the test bed's real kube-apiserver and SLURM, with N BatchJobs created at
//! once. A benchmark, not a timed test: it is ignored by default (CI only compiles it) and
//! reports what it measured rather than asserting goals. Run it with
//!
//! ```text
//! BATCHBRIDGE_BENCH_JOBS=1000 cargo test --release -p batchbridge-operator \
//!     --test scale_bench -- --ignored --nocapture
//! ```
//!
//! Settings (environment): `BATCHBRIDGE_BENCH_SCHEDULER` (`slurm`, the test bed's SLURM
//! 22.05, or `htcondor`, its pool; `slurm`), `BATCHBRIDGE_BENCH_JOBS` (N, 1000), `BATCHBRIDGE_BENCH_SLEEP`
//! (seconds each job sleeps before printing its end time, 2), `BATCHBRIDGE_BENCH_POLL` (the
//! BatchCluster's `pollInterval`, `5s`), `BATCHBRIDGE_BENCH_EVENTS` (its `pushEvents`,
//! `true`), `BATCHBRIDGE_BENCH_PLACEMENT` (`true`: the jobs name the cluster as their one
//! placement candidate instead of in `clusterRef`; `false`), `BATCHBRIDGE_BENCH_TIMEOUT` (seconds to wait for
//! the drain, 3600), `BATCHBRIDGE_BENCH_IDLE` (seconds observed before the first job and
//! after the drain, 30), `BATCHBRIDGE_BENCH_NICE` (the jobs' `sbatch --nice`, so that other
//! tests' jobs on the shared test bed go first; 100000, 0 for none).
//!
//! What it measures, and how (docs/PERFORMANCE.md has the results):
//! - with SLURM, before the operator's jobs, a plain `sbatch` loop of N held jobs in one SSH
//!   session (cancelled at once), the rate the operator's time to every job id is compared
//!   with;
//! - the operator process's peak RSS (`VmHWM`) and CPU seconds (`utime + stime`) from
//!   `/proc`, and separately its children (the SSH master), sampled every 0.5 s;
//! - the Kubernetes API requests the operator sends: its ServiceAccount's requests are
//!   routed through FlowSchemas of the benchmark's own (one per kind of request, all to the
//!   same `workload-low` priority level the built-in `service-accounts` schema uses), and
//!   the API server's `apiserver_flowcontrol_dispatched_requests_total` counts each schema;
//! - the scheduler commands the operator ran, by tool
//!   (`batchbridge_scheduler_commands_total`), per phase and per hour: `squeue`/`sacct` or
//!   `condor_q`/`condor_history`;
//! - with SLURM, slurmctld's RPCs from `sdiag` (by message type and by user), divided by the poll
//!   cycles the operator counted (`batchbridge_poll_duration_seconds_count`). slurmctld
//!   serves every client of the test bed, all as the same user, so the query RPCs per second
//!   seen while the operator polls nothing (the idle windows before and after) are
//!   subtracted as background;
//! - SSH connections opened (`batchbridge_ssh_connections_opened_total`, and the `ssh`
//!   child processes seen);
//! - the time from the first create until every BatchJob has finished with its output;
//! - the time to delete them all, and the entries of the work directory's `jobs/` before
//!   and after (each deletion removes its job's directory);
//! - the latency from a job's end to its BatchJob's terminal phase: each job prints
//!   `date +%s.%N` as its last line (so the time is in `status.outputTail`), a moment before
//!   SLURM's state change, and a watch on the BatchJobs records when each is first seen
//!   Succeeded. Latency = seen − printed: an upper bound of the true latency. Also in two
//!   legs from the status's own times, which this watch cannot delay: printed → SLURM's
//!   end time (`finishTime`) → the operator's `Finished` condition.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use batchbridge_core::shell::{Command as ShellCommand, Shell};
use batchbridge_operator::crd::{BatchCluster, BatchJob, Phase};
use batchbridge_operator::reason::ConditionType;
use batchbridge_operator::status::condition;
use batchbridge_testbed::{Login, login};
use common::Cluster;
use common::operator::{batch_job, create_secret, http_get};
use common::process::{OperatorProcess, write_operator_kubeconfig};
use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const LEASE: &str = "batchbridge-operator-bench";
/// BatchJob creates the benchmark keeps in flight.
const CREATES_IN_FLIGHT: usize = 32;
/// The label on the benchmark's FlowSchemas, with the namespace as its value.
const SCHEMA_LABEL: &str = "batchbridge.dev/scale-bench";
/// The priority level of the built-in `service-accounts` FlowSchema, which would otherwise
/// classify the operator's requests: routing them to the same level keeps the API server's
/// treatment of them unchanged.
const PRIORITY_LEVEL: &str = "workload-low";
/// The tools of the backends' status queries, as the operator's command counter names them.
const STATUS_TOOLS: [&str; 4] = ["squeue", "sacct", "condor_q", "condor_history"];
/// The RPCs a status query costs (squeue); everything else in sdiag is submits, the
/// compute node's own messages, and other clients.
const QUERY_RPCS: [&str; 6] = [
    "REQUEST_JOB_INFO",
    "REQUEST_JOB_USER_INFO",
    "REQUEST_JOB_INFO_SINGLE",
    "REQUEST_FED_INFO",
    "REQUEST_PARTITION_INFO",
    "REQUEST_NODE_INFO",
];

struct Settings {
    /// The BatchCluster's scheduler, and its name.
    scheduler: String,
    jobs: usize,
    sleep: u32,
    poll: String,
    push_events: bool,
    placement: bool,
    timeout: Duration,
    idle: Duration,
    nice: u32,
}

impl Settings {
    fn from_env() -> Self {
        fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
            std::env::var(name)
                .ok()
                .map(|v| {
                    v.parse()
                        .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value"))
                })
                .unwrap_or(default)
        }
        let scheduler = var("BATCHBRIDGE_BENCH_SCHEDULER", "slurm".to_owned());
        assert!(
            ["slurm", "htcondor"].contains(&scheduler.as_str()),
            "BATCHBRIDGE_BENCH_SCHEDULER={scheduler:?}: slurm or htcondor"
        );
        Self {
            scheduler,
            jobs: var("BATCHBRIDGE_BENCH_JOBS", 1000),
            sleep: var("BATCHBRIDGE_BENCH_SLEEP", 2),
            poll: var("BATCHBRIDGE_BENCH_POLL", "5s".to_owned()),
            push_events: var("BATCHBRIDGE_BENCH_EVENTS", true),
            placement: var("BATCHBRIDGE_BENCH_PLACEMENT", false),
            timeout: Duration::from_secs(var("BATCHBRIDGE_BENCH_TIMEOUT", 3600)),
            idle: Duration::from_secs(var("BATCHBRIDGE_BENCH_IDLE", 30)),
            nice: var("BATCHBRIDGE_BENCH_NICE", 100_000),
        }
    }

    fn slurm(&self) -> bool {
        self.scheduler == "slurm"
    }

    /// The test bed's login to the scheduler.
    fn login(&self) -> Login {
        login(if self.slurm() { "ssh" } else { "htcondor" })
    }

    fn script(&self) -> String {
        let sleep = if self.sleep > 0 {
            format!("sleep {}\n", self.sleep)
        } else {
            String::new()
        };
        format!("{sleep}date +%s.%N\n")
    }
}

// ---------------------------------------------------------------------------------------
// Processes, from /proc

/// What `/proc/PID/stat` says of a process.
struct Stat {
    comm: String,
    ppid: u32,
    /// utime + stime, in clock ticks.
    cpu_ticks: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, tail) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    // The fields after the command, from field 3 (state) on.
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        comm,
        ppid: u32::try_from(field(4)?).ok()?,
        cpu_ticks: field(14)? + field(15)?,
    })
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

fn children(parent: u32) -> Vec<(u32, Stat)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .filter(|(_, stat)| stat.ppid == parent)
        .collect()
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

#[derive(Debug, Default, Clone)]
struct ChildProcess {
    comm: String,
    /// The start of its command line.
    command: String,
    cpu_ticks: u64,
    peak_rss_kib: u64,
}

#[derive(Debug, Default, Clone)]
struct Processes {
    operator_peak_rss_kib: u64,
    children: BTreeMap<u32, ChildProcess>,
}

/// Samples the operator's RSS and its children every 0.5 s until dropped.
struct Sampler {
    seen: Arc<Mutex<Processes>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let seen = Arc::new(Mutex::new(Processes::default()));
        let task = tokio::spawn({
            let seen = Arc::clone(&seen);
            async move {
                loop {
                    let rss = status_kib(pid, "VmRSS").unwrap_or(0);
                    let kids = children(pid);
                    {
                        let mut seen = seen.lock().unwrap();
                        seen.operator_peak_rss_kib = seen.operator_peak_rss_kib.max(rss);
                        for (child, stat) in kids {
                            let entry = seen.children.entry(child).or_default();
                            if entry.command.is_empty() {
                                entry.command = std::fs::read(format!("/proc/{child}/cmdline"))
                                    .map(|line| {
                                        String::from_utf8_lossy(&line)
                                            .replace('\0', " ")
                                            .chars()
                                            .take(60)
                                            .collect()
                                    })
                                    .unwrap_or_default();
                            }
                            entry.comm = stat.comm;
                            entry.cpu_ticks = entry.cpu_ticks.max(stat.cpu_ticks);
                            entry.peak_rss_kib = entry
                                .peak_rss_kib
                                .max(status_kib(child, "VmHWM").unwrap_or(0));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        });
        Self { seen, task }
    }

    fn seen(&self) -> Processes {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// The BatchJobs, as a watch sees them

#[derive(Debug, Default, Clone)]
struct Seen {
    created: Option<SystemTime>,
    submitted: Option<SystemTime>,
    finished: Option<(SystemTime, Phase)>,
    /// When the operator decided the terminal phase: its Finished condition's
    /// lastTransitionTime (whole seconds).
    finished_written: Option<f64>,
    /// The scheduler's end time of the job (status.finishTime, whole seconds).
    scheduler_end: Option<f64>,
    collected: Option<SystemTime>,
    tail: Option<String>,
    phase: Option<Phase>,
}

type Book = Arc<Mutex<HashMap<String, Seen>>>;

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    created: usize,
    submitted: usize,
    finished: usize,
    collected: usize,
}

fn counts(book: &Book) -> (Counts, BTreeMap<String, usize>) {
    let book = book.lock().unwrap();
    let mut counts = Counts::default();
    let mut phases = BTreeMap::new();
    for seen in book.values() {
        counts.created += usize::from(seen.created.is_some());
        counts.submitted += usize::from(seen.submitted.is_some());
        counts.finished += usize::from(seen.finished.is_some());
        counts.collected += usize::from(seen.collected.is_some());
        let phase = seen
            .phase
            .map_or_else(|| "None".to_owned(), |p| format!("{p:?}"));
        *phases.entry(phase).or_insert(0) += 1;
    }
    (counts, phases)
}

/// Watches the namespace's BatchJobs, recording when each is first seen with a job id,
/// in a terminal phase, and with its output collected.
fn watch_jobs(bed: &Cluster, book: &Book) -> tokio::task::JoinHandle<()> {
    let api = bed.jobs();
    let book = Arc::clone(book);
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(job) = stream.next().await {
            let now = SystemTime::now();
            let job: BatchJob = match job {
                Ok(job) => job,
                Err(err) => {
                    eprintln!("watch: {err}");
                    continue;
                }
            };
            let status = job.status.unwrap_or_default();
            let mut book = book.lock().unwrap();
            let seen = book
                .entry(job.metadata.name.unwrap_or_default())
                .or_default();
            seen.phase = status.phase;
            if status.job_id.is_some() && seen.submitted.is_none() {
                seen.submitted = Some(now);
            }
            if let Some(phase) = status.phase.filter(|p| p.is_terminal())
                && seen.finished.is_none()
            {
                seen.finished = Some((now, phase));
                seen.finished_written = condition(&status.conditions, ConditionType::Finished)
                    .map(|c| c.last_transition_time.0.as_second() as f64);
                seen.scheduler_end = status.finish_time.as_ref().map(|t| t.0.as_second() as f64);
            }
            if condition(&status.conditions, ConditionType::OutputCollected).is_some()
                && seen.collected.is_none()
            {
                seen.collected = Some(now);
                seen.tail = status.output_tail;
            }
        }
    })
}

// ---------------------------------------------------------------------------------------
// Counters: the operator's /metrics, the API server's /metrics, sdiag

/// Every series of metric `name` in the Prometheus `text`: its labels and value.
fn series<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels, value.split(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The sum of the series of `name` whose labels contain every one of `labels`.
fn total(text: &str, name: &str, labels: &[&str]) -> f64 {
    series(text, name)
        .into_iter()
        .filter(|(have, _)| labels.iter().all(|l| have.contains(l)))
        .map(|(_, value)| value)
        .sum()
}

/// The value of label `key` in a printed label set.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    labels[start..].split('"').next()
}

#[derive(Debug, Default, Clone)]
struct Sdiag {
    since: String,
    jobs_submitted: u64,
    by_type: BTreeMap<String, u64>,
    by_user: BTreeMap<String, u64>,
}

fn parse_sdiag(text: &str) -> Sdiag {
    let mut sdiag = Sdiag::default();
    let mut section: Option<bool> = None; // Some(true): by type; Some(false): by user
    for line in text.lines() {
        if line.starts_with("Remote Procedure Call statistics by message type") {
            section = Some(true);
        } else if line.starts_with("Remote Procedure Call statistics by user") {
            section = Some(false);
        } else if !line.starts_with(char::is_whitespace) {
            section = None;
            if let Some(since) = line.strip_prefix("Data since") {
                since.trim().clone_into(&mut sdiag.since);
            }
            if let Some(n) = line.strip_prefix("Jobs submitted:") {
                sdiag.jobs_submitted = n.trim().parse().unwrap_or(0);
            }
        } else if let Some(by_type) = section {
            let line = line.trim();
            let name = line.split_whitespace().next().unwrap_or_default();
            let count = line
                .split("count:")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok());
            if let Some(count) = count {
                let map = if by_type {
                    &mut sdiag.by_type
                } else {
                    &mut sdiag.by_user
                };
                map.insert(name.to_owned(), count);
            }
        }
    }
    sdiag
}

/// What every counter said at one moment.
struct Snapshot {
    at: Instant,
    operator: String,
    apiserver: String,
    sdiag: Sdiag,
    cpu_ticks: u64,
    rss_kib: u64,
}

async fn apiserver_metrics(bed: &Cluster) -> String {
    let output = tokio::process::Command::new(&bed.facts.kubectl)
        .arg("--kubeconfig")
        .arg(&bed.facts.kubeconfig)
        .args(["get", "--raw", "/metrics"])
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "kubectl get --raw /metrics");
    String::from_utf8(output.stdout).unwrap()
}

/// The Events in the namespace by reason, with their counts (an Event repeated in a series
/// counts each time).
async fn events_by_reason(bed: &Cluster) -> String {
    let events = Api::<Event>::namespaced(bed.client.clone(), &bed.namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut reasons: BTreeMap<String, (usize, i64)> = BTreeMap::new();
    for event in events.items {
        let entry = reasons.entry(event.reason.unwrap_or_default()).or_default();
        entry.0 += 1;
        entry.1 += event.series.map_or(1, |s| i64::from(s.count));
    }
    format!("Events in the namespace by reason (objects, occurrences): {reasons:?}")
}

/// Runs `command` on the login node of `settings`' scheduler, trying for a minute (other
/// tests on the shared test bed may stop its sshd for a moment); empty output when it
/// never worked.
async fn on_login_node(settings: &Settings, command: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let shell = if settings.slurm() {
            batchbridge_testbed::ssh_facts().key_shell()
        } else {
            batchbridge_testbed::htcondor_shell()
        };
        match shell
            .run(&ShellCommand::sh(command, Vec::<String>::new()))
            .await
        {
            Ok(output) if output.success() => return output.stdout_text(),
            Ok(output) => eprintln!("{command}: {}", output.stderr_text()),
            Err(err) => eprintln!("{command}: {err}"),
        }
        if Instant::now() >= deadline {
            eprintln!("{command}: giving up; its counts are missing from the report");
            return String::new();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// What the issue compares the operator with: N jobs submitted by a plain `sbatch` loop in
/// one SSH session, held (`-H`, so that they take no slot from the operator's jobs) and
/// cancelled at once. Jobs/s, or None for HTCondor or when the loop failed.
#[allow(clippy::cast_precision_loss)]
async fn sbatch_loop(settings: &Settings, name: &str) -> Option<f64> {
    if !settings.slurm() {
        return None;
    }
    let shell = batchbridge_testbed::ssh_facts().key_shell();
    let started = Instant::now();
    let submitted = shell
        .run(&ShellCommand::sh(
            "i=0; while [ \"$i\" -lt \"$1\" ]; do
                sbatch -Q -H -o /dev/null -J \"$2\" --wrap true || exit
                i=$((i + 1))
            done",
            [settings.jobs.to_string(), format!("loop-{name}")],
        ))
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let _ = shell
        .run(&ShellCommand::sh(
            "scancel -n \"$1\"",
            [format!("loop-{name}")],
        ))
        .await;
    match submitted {
        Ok(output) if output.success() => {
            eprintln!(
                "plain sbatch loop: {} jobs in {elapsed:.1} s",
                settings.jobs
            );
            Some(settings.jobs as f64 / elapsed)
        }
        Ok(output) => {
            eprintln!("the sbatch loop failed: {}", output.stderr_text());
            None
        }
        Err(err) => {
            eprintln!("the sbatch loop failed: {err}");
            None
        }
    }
}

async fn snapshot(
    settings: &Settings,
    bed: &Cluster,
    operator: &OperatorProcess,
    pid: u32,
) -> Snapshot {
    let at = Instant::now();
    let sdiag = async {
        if settings.slurm() {
            on_login_node(settings, "sdiag").await
        } else {
            String::new()
        }
    };
    let (operator_metrics, apiserver, sdiag) =
        tokio::join!(operator.metrics(), apiserver_metrics(bed), sdiag);
    Snapshot {
        at,
        operator: operator_metrics,
        apiserver,
        sdiag: parse_sdiag(&sdiag),
        cpu_ticks: stat(pid).map_or(0, |s| s.cpu_ticks),
        rss_kib: status_kib(pid, "VmRSS").unwrap_or(0),
    }
}

// ---------------------------------------------------------------------------------------
// The FlowSchemas that count the operator's API requests

/// Kinds of request, each counted by a FlowSchema of its own, first match wins.
fn schema_rules() -> Vec<(&'static str, serde_json::Value)> {
    let all = |verbs: &[&str]| {
        json!({"resourceRules": [{"verbs": verbs, "apiGroups": ["*"], "resources": ["*"],
            "clusterScope": true, "namespaces": ["*"]}]})
    };
    let resource = |groups: &[&str], resources: &[&str]| {
        json!({"resourceRules": [{"verbs": ["*"], "apiGroups": groups, "resources": resources,
            "clusterScope": true, "namespaces": ["*"]}]})
    };
    let mut other = all(&["*"]);
    other["nonResourceRules"] = json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]);
    vec![
        ("watch", all(&["watch"])),
        ("list", all(&["list"])),
        (
            "batchjobs-status",
            resource(&["batchbridge.dev"], &["batchjobs/status"]),
        ),
        ("batchjobs", resource(&["batchbridge.dev"], &["batchjobs"])),
        ("events", resource(&["", "events.k8s.io"], &["events"])),
        ("leases", resource(&["coordination.k8s.io"], &["leases"])),
        ("other", other),
    ]
}

/// The benchmark's FlowSchemas, deleted when dropped.
struct FlowSchemas {
    kubectl: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
    namespace: String,
    /// (kind of request, schema name)
    names: Vec<(&'static str, String)>,
}

impl FlowSchemas {
    async fn create(bed: &Cluster, account: &str) -> Self {
        let api: Api<FlowSchema> = Api::all(bed.client.clone());
        let mut names = Vec::new();
        for (precedence, (kind, rule)) in (1001..).zip(schema_rules()) {
            let name = format!("scale-bench-{kind}-{}", bed.namespace);
            let mut rule = rule;
            rule["subjects"] = json!([{"kind": "ServiceAccount",
                "serviceAccount": {"name": account, "namespace": bed.namespace}}]);
            let schema: FlowSchema = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {SCHEMA_LABEL: bed.namespace}},
                "spec": {
                    "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
                    "matchingPrecedence": precedence,
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [rule],
                },
            }))
            .unwrap();
            api.create(&PostParams::default(), &schema).await.unwrap();
            names.push((kind, name));
        }
        // The API server's flow-control controller writes a schema's status once it has
        // taken the schema in.
        for (_, name) in &names {
            common::eventually(&format!("FlowSchema {name} to be in use"), || async {
                let schema = api.get(name).await.unwrap();
                schema
                    .status
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_.as_deref() == Some("Dangling")))
            })
            .await;
        }
        Self {
            kubectl: bed.facts.kubectl.clone(),
            kubeconfig: bed.facts.kubeconfig.clone(),
            namespace: bed.namespace.clone(),
            names,
        }
    }

    /// Requests dispatched per kind, from the API server's metrics `text`.
    fn dispatched(&self, text: &str) -> BTreeMap<&'static str, f64> {
        self.names
            .iter()
            .map(|(kind, name)| {
                let schema = format!("flow_schema=\"{name}\"");
                (
                    *kind,
                    total(
                        text,
                        "apiserver_flowcontrol_dispatched_requests_total",
                        &[&schema],
                    ),
                )
            })
            .collect()
    }

    /// (requests rejected, seconds waited in APF queues, requests that waited) over every
    /// schema.
    fn queueing(&self, text: &str) -> (f64, f64, f64) {
        let mut rejected = 0.0;
        let mut wait = 0.0;
        let mut waited = 0.0;
        for (_, name) in &self.names {
            let schema = format!("flow_schema=\"{name}\"");
            rejected += total(
                text,
                "apiserver_flowcontrol_rejected_requests_total",
                &[&schema],
            );
            let executed = [schema.as_str(), "execute=\"true\""];
            wait += total(
                text,
                "apiserver_flowcontrol_request_wait_duration_seconds_sum",
                &executed,
            );
            waited += total(
                text,
                "apiserver_flowcontrol_request_wait_duration_seconds_count",
                &executed,
            );
        }
        (rejected, wait, waited)
    }
}

impl Drop for FlowSchemas {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "delete",
                "flowschemas.flowcontrol.apiserver.k8s.io",
                "-l",
                &format!("{SCHEMA_LABEL}={}", self.namespace),
            ])
            .output();
    }
}

// ---------------------------------------------------------------------------------------
// The run

async fn create_cluster(bed: &Cluster, settings: &Settings, work_dir: &str) {
    let login = settings.login();
    create_secret(bed, "cluster-key", &login).await;
    let mut cluster = json!({
        "apiVersion": "batchbridge.dev/v1alpha1",
        "kind": "BatchCluster",
        "metadata": {"name": settings.scheduler},
        "spec": {
            "scheduler": settings.scheduler,
            "ssh": {"host": login.host, "port": login.port, "user": login.user},
            "secretRef": {"name": "cluster-key"},
            "knownHosts": std::fs::read_to_string(&login.known_hosts).unwrap(),
            "workDir": work_dir,
            "pollInterval": settings.poll,
            "pushEvents": settings.push_events,
        },
    });
    if settings.slurm() {
        cluster["spec"]["defaults"] = json!({"partition": "debug"});
    }
    let cluster: BatchCluster = serde_json::from_value(cluster).unwrap();
    bed.clusters()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
}

async fn create_jobs(bed: &Cluster, settings: &Settings, book: &Book) {
    let mut spec = json!({"script": settings.script()});
    if settings.placement {
        // The placement path (a start estimate per attempt, cached per shape) with the one
        // cluster as its only candidate, against clusterRef's fixed cluster.
        spec["placement"] = json!({"clusters": [settings.scheduler]});
    } else {
        spec["clusterRef"] = json!({"name": settings.scheduler});
    }
    if settings.slurm() && settings.nice > 0 {
        // Other tests' jobs go first: the benchmark's wait behind them, not the reverse.
        spec["passthrough"] = json!({"slurm": [format!("--nice={}", settings.nice)]});
    }
    futures::stream::iter(0..settings.jobs)
        .map(|i| {
            let api = bed.jobs();
            let name = format!("bench-{i:05}");
            let job = batch_job(&name, spec.clone());
            async move {
                api.create(&PostParams::default(), &job)
                    .await
                    .unwrap_or_else(|err| panic!("creating {name}: {err}"));
                (name, SystemTime::now())
            }
        })
        .buffer_unordered(CREATES_IN_FLIGHT)
        .for_each(|(name, at)| {
            book.lock().unwrap().entry(name).or_default().created = Some(at);
            async {}
        })
        .await;
}

/// Waits until `done` holds for the counts, printing progress every 15 s; the moment it
/// held, or `None` at `deadline`.
async fn wait_until(
    book: &Book,
    what: &str,
    deadline: Instant,
    pid: u32,
    done: impl Fn(Counts) -> bool,
) -> Option<Instant> {
    let mut next_report = Instant::now() + Duration::from_secs(15);
    loop {
        let (counts, phases) = counts(book);
        if done(counts) {
            return Some(Instant::now());
        }
        if Instant::now() >= deadline {
            eprintln!("timed out waiting for {what}: {counts:?} {phases:?}");
            return None;
        }
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(15);
            eprintln!(
                "waiting for {what}: {counts:?} phases {phases:?}; operator RSS {} MiB",
                status_kib(pid, "VmRSS").unwrap_or(0) / 1024
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value at quantile `q` (nearest rank) of sorted `values`.
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The job's end time it printed: the last line of its output tail.
fn printed_end(tail: &str) -> Option<f64> {
    tail.lines()
        .rev()
        .find(|l| !l.trim().is_empty())?
        .trim()
        .parse()
        .ok()
}

fn mib(kib: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let mib = kib as f64 / 1024.0;
    format!("{mib:.1} MiB")
}

/// What a run measured: the snapshots at its milestones, and the processes sampled.
struct Run<'a> {
    /// The plain `sbatch` loop's jobs/s in this run (SLURM only): [`sbatch_loop`].
    sbatch_loop: Option<f64>,
    /// Before `start`, by the idle time: the operator ready, no jobs yet.
    baseline: &'a Snapshot,
    start: &'a Snapshot,
    submitted: Option<&'a Snapshot>,
    drained: &'a Snapshot,
    idle: &'a Snapshot,
    /// When the first create was sent.
    started: SystemTime,
    processes: &'a Processes,
    /// Clock ticks per second (CPU times in /proc).
    ticks: f64,
}

#[allow(clippy::too_many_lines, clippy::cast_precision_loss)]
fn report(
    settings: &Settings,
    bed: &Cluster,
    schemas: &FlowSchemas,
    phases: &Run<'_>,
    book: &Book,
) -> String {
    let (started, ticks, processes) = (phases.started, phases.ticks, phases.processes);
    let mut out = String::new();
    let ns = &bed.namespace;
    let cluster = format!(
        "batchjob_namespace=\"{ns}\",batchcluster=\"{}\"",
        settings.scheduler
    );
    let n = settings.jobs;
    let op = |s: &Snapshot, name: &str| total(&s.operator, name, &[&cluster]);
    let polls = |s: &Snapshot| op(s, "batchbridge_poll_duration_seconds_count");
    let poll_seconds = |s: &Snapshot| op(s, "batchbridge_poll_duration_seconds_sum");
    let cpu = |a: &Snapshot, b: &Snapshot| (b.cpu_ticks.saturating_sub(a.cpu_ticks)) as f64 / ticks;
    let minutes = |a: &Snapshot, b: &Snapshot| (b.at - a.at).as_secs_f64() / 60.0;
    let (start, drained, idle) = (phases.start, phases.drained, phases.idle);

    let (counts, phase_counts) = counts(book);
    let book = book.lock().unwrap().clone();
    let latest = |f: fn(&Seen) -> Option<SystemTime>| book.values().filter_map(f).max();
    let last_finished = latest(|s| s.finished.map(|(at, _)| at));
    let last_collected = latest(|s| s.collected);
    let last_created = latest(|s| s.created);
    let since_start =
        |at: Option<SystemTime>| at.map_or(f64::NAN, |at| seconds(at) - seconds(started));
    // (the job's printed end, its latency)
    let ends: Vec<(f64, f64)> = book
        .values()
        .filter_map(|s| {
            let (at, phase) = s.finished?;
            (phase == Phase::Succeeded).then_some(())?;
            let end = printed_end(s.tail.as_deref()?)?;
            Some((end, seconds(at) - end))
        })
        .collect();
    let sorted = |ends: &mut dyn Iterator<Item = &(f64, f64)>| {
        let mut latencies: Vec<f64> = ends.map(|(_, latency)| *latency).collect();
        latencies.sort_by(f64::total_cmp);
        latencies
    };
    let latencies = sorted(&mut ends.iter());
    // The same in two legs, from the status's own times (whole seconds), which the
    // benchmark's watch cannot delay: the job's end to the scheduler's end time, and that
    // to the operator's decision of the terminal phase (its Finished condition).
    let legs = |leg: fn(&Seen, f64) -> Option<f64>| {
        let mut legs: Vec<f64> = book
            .values()
            .filter_map(|s| {
                let (_, phase) = s.finished?;
                (phase == Phase::Succeeded).then_some(())?;
                leg(s, printed_end(s.tail.as_deref()?)?)
            })
            .collect();
        legs.sort_by(f64::total_cmp);
        legs
    };
    let to_scheduler_end = legs(|s, printed| Some(s.scheduler_end? - printed));
    let to_written = legs(|s, _| Some(s.finished_written? - s.scheduler_end?));
    // Jobs that ended while the operator was still submitting, and those that ended after.
    let all_submitted = phases
        .submitted
        .map(|s| seconds(started) + (s.at - start.at).as_secs_f64());
    let split = all_submitted.map(|at| {
        (
            sorted(&mut ends.iter().filter(|(end, _)| *end < at)),
            sorted(&mut ends.iter().filter(|(end, _)| *end >= at)),
        )
    });
    let mut submit_latencies: Vec<f64> = book
        .values()
        .filter_map(|s| Some(seconds(s.submitted?) - seconds(s.created?)))
        .collect();
    submit_latencies.sort_by(f64::total_cmp);

    let _ = writeln!(out, "\n## Scale benchmark: {n} BatchJobs\n");
    let _ = writeln!(
        out,
        "Scheduler {}. Jobs: `{}`{}, pollInterval {}, pushEvents {}, {} {}, {CREATES_IN_FLIGHT} creates in flight; namespace {ns}.",
        settings.scheduler,
        settings.script().replace('\n', "; ").trim_end_matches("; "),
        if settings.slurm() {
            format!(", `sbatch --nice={}`", settings.nice)
        } else {
            String::new()
        },
        settings.poll,
        settings.push_events,
        if settings.placement {
            "placement.clusters"
        } else {
            "clusterRef"
        },
        settings.scheduler
    );
    let _ = writeln!(
        out,
        "Seen: {counts:?}; final phases {phase_counts:?}; jobs submitted to slurmctld by anyone during the run: {}.\n",
        drained
            .sdiag
            .jobs_submitted
            .saturating_sub(start.sdiag.jobs_submitted)
    );
    let _ = writeln!(out, "| measure | value |\n|---|---|");
    let mut row = |name: &str, value: String| {
        let _ = writeln!(out, "| {name} | {value} |");
    };
    row(
        "all created (s after the first create)",
        format!("{:.1}", since_start(last_created)),
    );
    if let Some(submitted) = phases.submitted {
        let seconds = (submitted.at - start.at).as_secs_f64();
        row(
            "all submitted: job id in status (s)",
            format!("{seconds:.1}"),
        );
        if let Some(sbatch_loop) = phases.sbatch_loop {
            let rate = n as f64 / seconds;
            row(
                "jobs/s to job id: operator / plain sbatch loop in this run (ratio)",
                format!("{rate:.1} / {sbatch_loop:.1} ({:.2})", rate / sbatch_loop),
            );
        }
    }
    row(
        "time to drain: last terminal phase seen (s)",
        format!("{:.1}", since_start(last_finished)),
    );
    row(
        "time to drain: last output collected (s)",
        format!("{:.1}", since_start(last_collected)),
    );
    let spread = |values: &[f64]| {
        format!(
            "{:.2} / {:.2} / {:.2} (of {} jobs)",
            quantile(values, 0.5),
            quantile(values, 0.99),
            values.last().copied().unwrap_or(f64::NAN),
            values.len()
        )
    };
    row(
        "latency job end → Succeeded seen: p50 / p99 / max (s)",
        spread(&latencies),
    );
    row(
        "… job end → scheduler's end time (s, whole seconds)",
        spread(&to_scheduler_end),
    );
    row(
        "… scheduler's end time → Finished condition written by the operator (s, whole seconds)",
        spread(&to_written),
    );
    if let Some((during, after)) = &split {
        row("… of jobs that ended while submits went on", spread(during));
        row("… of jobs that ended after the last submit", spread(after));
    }
    row(
        "create → job id in status: p50 / p99 / max (s)",
        spread(&submit_latencies),
    );
    row(
        "operator peak RSS (VmHWM)",
        mib(status_kib_or(
            processes.operator_peak_rss_kib,
            drained.rss_kib,
        )),
    );
    row(
        "operator RSS: ready / drained / after idle",
        format!(
            "{} / {} / {}",
            mib(start.rss_kib),
            mib(drained.rss_kib),
            mib(idle.rss_kib)
        ),
    );
    row(
        "operator CPU seconds: run / idle window",
        format!("{:.1} / {:.2}", cpu(start, drained), cpu(drained, idle)),
    );
    let ssh_children: Vec<&ChildProcess> = processes
        .children
        .values()
        .filter(|c| c.comm == "ssh")
        .collect();
    row(
        "SSH master processes (operator's children): count, CPU s, peak RSS",
        format!(
            "{}, {:.1}, {}",
            ssh_children.len(),
            ssh_children.iter().map(|c| c.cpu_ticks).sum::<u64>() as f64 / ticks,
            mib(ssh_children
                .iter()
                .map(|c| c.peak_rss_kib)
                .max()
                .unwrap_or(0))
        ),
    );
    let children: Vec<String> = processes
        .children
        .iter()
        .map(|(pid, c)| {
            format!(
                "{pid} `{}` ({:.1} CPU s, {})",
                c.command,
                c.cpu_ticks as f64 / ticks,
                mib(c.peak_rss_kib)
            )
        })
        .collect();
    row("child processes seen", children.join("; "));
    row(
        "SSH connections opened (operator metric)",
        format!(
            "{} (reconnects {})",
            op(drained, "batchbridge_ssh_connections_opened_total"),
            op(drained, "batchbridge_ssh_reconnects_total")
        ),
    );
    row(
        "submits (failures)",
        format!(
            "{} ({})",
            op(drained, "batchbridge_submits_total") - op(start, "batchbridge_submits_total"),
            op(drained, "batchbridge_submit_failures_total")
                - op(start, "batchbridge_submit_failures_total")
        ),
    );
    let errors: Vec<String> = series(&drained.operator, "batchbridge_reconcile_errors_total")
        .into_iter()
        .map(|(labels, value)| format!("{labels} {value}"))
        .collect();
    row("reconcile errors", format!("{errors:?}"));

    // Kubernetes API requests.
    let api_start = schemas.dispatched(&start.apiserver);
    let api_drained = schemas.dispatched(&drained.apiserver);
    let api_idle = schemas.dispatched(&idle.apiserver);
    let delta = |a: &BTreeMap<&str, f64>, b: &BTreeMap<&str, f64>| -> BTreeMap<String, f64> {
        b.iter()
            .map(|(k, v)| ((*k).to_owned(), v - a.get(k).copied().unwrap_or(0.0)))
            .collect()
    };
    let run = delta(&api_start, &api_drained);
    let idle_requests = delta(&api_drained, &api_idle);
    let run_total: f64 = run.values().sum();
    let idle_total: f64 = idle_requests.values().sum();
    let startup_total: f64 = api_start.values().sum();
    row(
        "API requests by the operator: startup (until ready)",
        format!("{startup_total}"),
    );
    row(
        "API requests by the operator: run (ready → drained)",
        format!(
            "{run_total} = {:.1} per job, {:.0} per minute",
            run_total / n as f64,
            run_total / minutes(start, drained)
        ),
    );
    row("API requests during the run, by kind", format!("{run:?}"));
    row(
        "API requests per minute, idle after the drain",
        format!(
            "{:.1} ({idle_requests:?})",
            idle_total / minutes(drained, idle)
        ),
    );
    let (rejected, wait, waited) = schemas.queueing(&drained.apiserver);
    row(
        "API priority and fairness: rejected, mean queue wait",
        format!(
            "{rejected}, {:.1} ms over {waited} requests",
            if waited > 0.0 {
                wait / waited * 1000.0
            } else {
                0.0
            }
        ),
    );

    // Polls and slurmctld RPCs.
    let commands = |a: &Snapshot, b: &Snapshot| -> BTreeMap<String, f64> {
        let before: HashMap<String, f64> =
            series(&a.operator, "batchbridge_scheduler_commands_total")
                .into_iter()
                .filter(|(l, _)| l.contains(&cluster))
                .filter_map(|(l, v)| Some((label(l, "command")?.to_owned(), v)))
                .collect();
        series(&b.operator, "batchbridge_scheduler_commands_total")
            .into_iter()
            .filter(|(l, _)| l.contains(&cluster))
            .filter_map(|(l, v)| {
                let command = label(l, "command")?.to_owned();
                let was = before.get(&command).copied().unwrap_or(0.0);
                Some((command, v - was))
            })
            .collect()
    };
    let sdiag_delta = |x: &BTreeMap<String, u64>, y: &BTreeMap<String, u64>| {
        y.iter()
            .map(|(k, v)| (k.clone(), v.saturating_sub(x.get(k).copied().unwrap_or(0))))
            .filter(|(_, v)| *v > 0)
            .collect::<BTreeMap<_, _>>()
    };
    let queries = |a: &Snapshot, b: &Snapshot| -> u64 {
        let by_type = sdiag_delta(&a.sdiag.by_type, &b.sdiag.by_type);
        QUERY_RPCS.iter().filter_map(|t| by_type.get(*t)).sum()
    };
    // slurmctld serves every client of the test bed: the query RPCs per second seen while
    // the operator polled nothing (before the first job, after the drain) are others'.
    let quiet: Vec<(&Snapshot, &Snapshot)> = [(phases.baseline, start), (drained, idle)]
        .into_iter()
        .filter(|(a, b)| polls(b) - polls(a) == 0.0)
        .collect();
    let quiet_seconds: f64 = quiet.iter().map(|(a, b)| (b.at - a.at).as_secs_f64()).sum();
    let quiet_queries: u64 = quiet.iter().map(|(a, b)| queries(a, b)).sum();
    let background = if quiet_seconds > 0.0 {
        quiet_queries as f64 / quiet_seconds
    } else {
        0.0
    };
    let _ = writeln!(
        out,
        "\nslurmctld query RPCs ({}) from other clients while the operator polled nothing: {quiet_queries} in {quiet_seconds:.0} s = {background:.2}/s (subtracted below as background).",
        QUERY_RPCS.join(", ")
    );
    let mut phase_rows: Vec<(&str, &Snapshot, &Snapshot)> = vec![(
        "before the jobs (ready, nothing followed)",
        phases.baseline,
        start,
    )];
    match phases.submitted {
        Some(submitted) => {
            phase_rows.push(("submitting (ready → all submitted)", start, submitted));
            phase_rows.push(("running (all submitted → drained)", submitted, drained));
        }
        None => phase_rows.push(("whole run (ready → drained)", start, drained)),
    }
    phase_rows.push(("idle (after the drain)", drained, idle));
    let _ = writeln!(
        out,
        "\n| phase | seconds | poll cycles | mean poll (s) | operator commands | status commands per hour ({}) | query RPCs, all clients | per poll cycle | per poll cycle, background subtracted | per hour, background subtracted | operator CPU s |\n|---|---|---|---|---|---|---|---|---|---|---|",
        STATUS_TOOLS.join(", ")
    );
    let mut details = String::new();
    for (name, a, b) in &phase_rows {
        let seconds = (b.at - a.at).as_secs_f64();
        let cycles = polls(b) - polls(a);
        let per_cycle = |value: f64| {
            if cycles > 0.0 {
                format!("{:.2}", value / cycles)
            } else {
                "-".to_owned()
            }
        };
        let mean_poll = per_cycle(poll_seconds(b) - poll_seconds(a));
        let query_rpcs = queries(a, b) as f64;
        let commands = commands(a, b);
        let status_commands: f64 = STATUS_TOOLS
            .iter()
            .filter_map(|tool| commands.get(*tool))
            .sum();
        let _ = writeln!(
            out,
            "| {name} | {seconds:.1} | {cycles} | {mean_poll} | {commands:?} | {:.0} | {query_rpcs} | {} | {} | {:.0} | {:.1} |",
            status_commands / seconds * 3600.0,
            per_cycle(query_rpcs),
            per_cycle((query_rpcs - background * seconds).max(0.0)),
            (query_rpcs - background * seconds).max(0.0) / seconds * 3600.0,
            cpu(a, b)
        );
        let _ = writeln!(
            details,
            "- {name}: sdiag by message type {:?}; by user {:?}",
            sdiag_delta(&a.sdiag.by_type, &b.sdiag.by_type),
            sdiag_delta(&a.sdiag.by_user, &b.sdiag.by_user)
        );
    }
    let _ = writeln!(out, "\n{details}");
    let snapshots = [
        Some(phases.baseline),
        Some(start),
        phases.submitted,
        Some(drained),
        Some(idle),
    ];
    let sinces: Vec<&str> = snapshots
        .iter()
        .flatten()
        .map(|s| s.sdiag.since.as_str())
        .collect();
    if !settings.slurm() {
        let _ = writeln!(
            out,
            "(No sdiag for {}: its query RPC columns are empty; the status commands are what it was asked.)",
            settings.scheduler
        );
    } else if sinces.contains(&"") {
        let _ = writeln!(
            out,
            "WARNING: sdiag could not be read at every milestone; some RPC counts are missing."
        );
    } else if sinces.windows(2).any(|w| w[0] != w[1]) {
        let _ = writeln!(
            out,
            "WARNING: slurmctld restarted during the run (its statistics start at {sinces:?}); the RPC counts across a restart are wrong.",
        );
    }
    out
}

/// The sampled peak, or the last reading when the sampler saw nothing.
fn status_kib_or(peak: u64, last: u64) -> u64 {
    peak.max(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored, see docs/PERFORMANCE.md"]
async fn scale() {
    let settings = Settings::from_env();
    eprintln!(
        "scale benchmark: {} jobs on {}, sleep {} s, pollInterval {}",
        settings.jobs, settings.scheduler, settings.sleep, settings.poll
    );
    let bed = Cluster::new("scale").await;
    let work_dir = format!(".batchbridge/scale-bench/{}", bed.namespace);
    create_cluster(&bed, &settings, &work_dir).await;
    let dir = tempfile::tempdir().unwrap();
    // Creates the ServiceAccount the operator authenticates as.
    write_operator_kubeconfig(&bed, dir.path()).await;
    let schemas = FlowSchemas::create(&bed, "batchbridge-operator").await;

    let operator = OperatorProcess::start("bench", &bed, dir.path(), Some(LEASE));
    let pid = operator.child.id().unwrap();
    let sampler = Sampler::start(pid);
    operator
        .wait_until(
            "it leads and is ready",
            Duration::from_secs(60),
            async |r| {
                r.leads().await
                    && http_get(r.address, "/readyz").await.map(|(code, _)| code) == Some(200)
            },
        )
        .await;
    common::eventually("the BatchCluster to be Reachable", || async {
        let cluster = bed.clusters().get(&settings.scheduler).await.unwrap();
        cluster.status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Reachable" && c.status == "True")
        })
    })
    .await;
    let book: Book = Arc::default();
    let watch = watch_jobs(&bed, &book);
    let ticks = clock_ticks();

    let sbatch_loop = sbatch_loop(&settings, &bed.namespace).await;
    let baseline = snapshot(&settings, &bed, &operator, pid).await;
    tokio::time::sleep(settings.idle).await;
    let start = snapshot(&settings, &bed, &operator, pid).await;
    let started = SystemTime::now();
    let deadline = Instant::now() + settings.timeout;
    create_jobs(&bed, &settings, &book).await;
    eprintln!(
        "created {} BatchJobs in {:?}",
        settings.jobs,
        start.at.elapsed()
    );
    let n = settings.jobs;
    let submitted =
        match wait_until(&book, "every job id", deadline, pid, |c| c.submitted >= n).await {
            Some(_) => Some(snapshot(&settings, &bed, &operator, pid).await),
            None => None,
        };
    let drained_in_time = wait_until(&book, "the drain", deadline, pid, |c| c.collected >= n)
        .await
        .is_some();
    let drained = snapshot(&settings, &bed, &operator, pid).await;
    tokio::time::sleep(settings.idle).await;
    let idle = snapshot(&settings, &bed, &operator, pid).await;
    let processes = sampler.seen();
    let text = report(
        &settings,
        &bed,
        &schemas,
        &Run {
            sbatch_loop,
            baseline: &baseline,
            start: &start,
            submitted: submitted.as_ref(),
            drained: &drained,
            idle: &idle,
            started,
            processes: &processes,
            ticks,
        },
        &book,
    );
    println!("{text}");
    println!("{}", events_by_reason(&bed).await);

    // Clean up: deleting the BatchJobs lets the operator remove their finalizers (and
    // cancel any job still active) and their job directories (cleanup: OnDelete); what it
    // leaves is counted, then the operator stops and the work directory goes.
    let count_job_directories = format!("ls -A {work_dir}/jobs | wc -l");
    let before_deletion = on_login_node(&settings, &count_job_directories).await;
    let deleting = Instant::now();
    // One request for 10,000 may outlast the API server's request timeout (it then drops
    // the connection, the deletions made so far kept): asked again until one completes.
    for attempt in 1.. {
        match bed
            .jobs()
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
        {
            Ok(_) => break,
            Err(err) if attempt < 10 => eprintln!("deleting the BatchJobs, again: {err}"),
            Err(err) => panic!("the BatchJobs could not be deleted: {err}"),
        }
    }
    let gone = async {
        loop {
            let left = bed
                .jobs()
                .list_metadata(&ListParams::default().limit(1))
                .await
                .unwrap();
            if left.items.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    match tokio::time::timeout(Duration::from_secs(600), gone).await {
        Ok(()) => println!(
            "deleting the {n} BatchJobs (finalizers removed by the operator, job files \
             removed from the cluster) took {:.1} s",
            deleting.elapsed().as_secs_f64()
        ),
        Err(_) => eprintln!("the BatchJobs were not all deleted within 600 s"),
    }
    println!(
        "entries in WORK/jobs: {} before the deletion, {} after",
        before_deletion.trim(),
        on_login_node(&settings, &count_job_directories)
            .await
            .trim()
    );
    watch.abort();
    drop(sampler);
    operator.signal("-TERM");
    let log = operator.log.clone();
    let _ = operator.exited().await;
    let kept = std::env::temp_dir().join(format!("scale-bench-{}.log", bed.namespace));
    if std::fs::copy(&log, &kept).is_ok() {
        println!("the operator's log: {}", kept.display());
    }
    on_login_node(&settings, &format!("rm -rf {work_dir}")).await;
    drop(schemas);
    bed.clean_up().await;
    assert!(drained_in_time, "the jobs did not drain in time");
}

#[test]
fn parses_prometheus_and_sdiag() {
    let text = "# HELP x\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"2\"} 4.5\nx_total_other 9\ny 1\n";
    assert_eq!(total(text, "x_total", &[]), 7.5);
    assert_eq!(total(text, "x_total", &["a=\"1\""]), 3.0);
    assert_eq!(total(text, "y", &[]), 1.0);
    assert_eq!(
        label("a=\"1\",command=\"squeue\"", "command"),
        Some("squeue")
    );
    let sdiag = parse_sdiag(
        "Data since      Sat Nov 21 10:27:36 2026 (1795256856)\n\
         Jobs submitted: 75\n\
         Remote Procedure Call statistics by message type\n\
         \tREQUEST_JOB_INFO                        ( 2003) count:5      ave_time:440    total_time:2204\n\
         \tREQUEST_FED_INFO                        ( 2049) count:55     ave_time:197    total_time:10859\n\
         \n\
         Remote Procedure Call statistics by user\n\
         \tbatch           (    1000) count:60     ave_time:1 total_time:2\n\
         \n\
         Pending RPC statistics\n\
         \tNo pending RPCs\n",
    );
    assert_eq!(sdiag.jobs_submitted, 75);
    assert_eq!(sdiag.by_type["REQUEST_JOB_INFO"], 5);
    assert_eq!(sdiag.by_type["REQUEST_FED_INFO"], 55);
    assert_eq!(sdiag.by_user["batch"], 60);
    assert_eq!(sdiag.by_type.len(), 2);
    assert!(sdiag.since.starts_with("Sat Nov 21"));
    assert_eq!(
        printed_end("x\n1795257377.123456789\n"),
        Some(1_795_257_377.123_456_8)
    );
    assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
    assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
}
