//! The hostile-input table and its runner, shared by the local backend's test
//! (`batchbridge-core/tests/hostile_local.rs`), the SLURM, HTCondor and PBS backends'
//! (`tests/hostile_input.rs` in their crates, which include this module by path).
//!
//! Every case attacks one field with one input and says what must happen: refused with an
//! error of the right kind whose message names the field, or accepted and run (with the
//! value arriving byte for byte where that means something), per backend. Injection
//! payloads in fields that are not code try to create a canary file (`CANARY`: a unique
//! path in the cluster user's home, or its bare name relative to wherever a shell would run
//! it); after every case has finished, the runner searches the cluster (through the cluster
//! user's shell) and this machine for anything named like a canary. A positive control (a
//! script, which is meant to run, creating a file named alike) proves that the search
//! finds what it looks for.

// Each including test binary uses all of it; the allowances cover what one binary leaves
// unused, the panics that are the point of a test helper, and the report it prints.
#![allow(dead_code, clippy::unwrap_used, clippy::print_stdout)]

mod table;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::conformance::unique_key;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{
    BatchBackend, Error, ErrorKind, JobId, JobKey, JobOutput, JobSpec, JobState, JobStatus,
    OutputRequest,
};
use tokio::sync::Semaphore;

pub(crate) use table::{CASES, Case};

/// The backend a run is for; cases may expect different outcomes from each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Local,
    Slurm,
    Htcondor,
    Pbs,
}

/// What must become of a case's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// The call fails with this kind of error, the message containing these words.
    Refused(ErrorKind, &'static str),
    /// The job is accepted and Succeeds; its output is checked as the case says.
    Succeeds,
    /// The job is accepted and Failed, its stderr containing these words.
    Fails(&'static str),
    /// The job is accepted and waits Queued (the runner then cancels it).
    Queued,
    /// `status` of the id answers Unknown.
    Unknown,
    /// The call (cancel) returns `Ok`.
    NoError,
    /// The case does not apply to this backend, for the reason given.
    Skip(&'static str),
}

impl Expect {
    fn describe(self) -> String {
        match self {
            Self::Refused(kind, words) => format!("Refused({kind:?}, \"{words}\")"),
            Self::Succeeds => "Runs".to_owned(),
            Self::Fails(words) => format!("Runs, job Failed (\"{words}\")"),
            Self::Queued => "Accepted, stays Queued".to_owned(),
            Self::Unknown => "Unknown".to_owned(),
            Self::NoError => "Ok".to_owned(),
            Self::Skip(why) => format!("n/a ({why})"),
        }
    }
}

/// What a case hands to the backend.
pub(crate) enum Input {
    /// Submit this spec.
    Spec(JobSpec),
    /// The input could not even be built (a key `JobKey::new` refused).
    Invalid(Error),
    /// Submit the spec through a backend whose default account is this (SLURM).
    Account(String, JobSpec),
    /// Ask `status` about this id.
    Status(JobId),
    /// Cancel this id.
    Cancel(JobId),
    /// Fetch the output of this id.
    Fetch(JobId),
}

/// What a job that runs must print on stdout.
pub(crate) enum Check {
    /// Exactly these bytes, the whole stream.
    Exact(Vec<u8>),
    /// A stream of this many bytes, read in bounded windows while this process's memory is
    /// measured.
    Large(u64),
    /// Anything.
    Any,
}

/// What a case's builder knows.
pub(crate) struct Ctx {
    pub(crate) which: Backend,
    /// A key no other run used.
    pub(crate) key: JobKey,
    /// An absolute path that must never exist: `CANARY_DIR/batchbridge-canary-RUN-N`.
    pub(crate) canary: String,
    /// The canary's bare name, for payloads that a shell would resolve against its
    /// working directory.
    pub(crate) canary_name: String,
    /// Where the positive control's script creates its file.
    pub(crate) control: String,
    /// An existing directory on the machine that runs jobs whose name is hostile.
    pub(crate) hostile_dir: String,
}

impl Ctx {
    /// A spec running `script` under this case's key.
    pub(crate) fn spec(&self, script: &str) -> JobSpec {
        JobSpec::new(self.key.clone(), "hostile", script)
    }

    /// A spec whose script prints `$NAME` (without a newline), which the environment sets
    /// to `value`: submitted, it must print `value` byte for byte.
    pub(crate) fn printing_env(&self, name: &str, value: String) -> (Input, Check) {
        let mut spec = self.spec(&format!("printf '%s' \"${name}\"\n"));
        spec.environment.insert(name.to_owned(), value.clone());
        (Input::Spec(spec), Check::Exact(value.into_bytes()))
    }

    /// A spec printing `ok`, edited by `edit`: for fields whose value shows in no output.
    pub(crate) fn ok_with(&self, edit: impl FnOnce(&mut JobSpec)) -> (Input, Check) {
        let mut spec = self.spec("echo ok\n");
        edit(&mut spec);
        (Input::Spec(spec), Check::Exact(b"ok\n".to_vec()))
    }

    /// A spec with `passthrough[backend] = [option]`, printing `ok`.
    pub(crate) fn passthrough(&self, backend: &str, option: String) -> (Input, Check) {
        self.ok_with(|spec| {
            spec.passthrough.insert(backend.to_owned(), vec![option]);
        })
    }

    /// Replaces `CANARY` with the canary's path and `NAME` with its bare name.
    pub(crate) fn payload(&self, template: &str) -> String {
        template
            .replace("CANARY", &self.canary)
            .replace("NAME", &self.canary_name)
    }
}

/// Where a run happens and how to look around there.
pub(crate) struct Bed {
    pub(crate) which: Backend,
    pub(crate) backend: Arc<dyn BatchBackend>,
    /// A shell on the machine where jobs and submit commands run (`LocalShell` for the
    /// local backend), for the canary search.
    pub(crate) cluster: Arc<dyn Shell>,
    /// The directory canary paths point into (the cluster user's home).
    pub(crate) canary_dir: String,
    /// Where the canary search looks, recursively (with `find -maxdepth 6`).
    pub(crate) search_dirs: Vec<String>,
    /// An existing directory with a hostile name (see [`hostile_dir_name`]).
    pub(crate) hostile_dir: String,
    /// A backend on the same cluster whose default account is the given one (SLURM).
    pub(crate) with_account: Option<WithAccount>,
    /// What must happen instead on this bed's scheduler version, by case `input`: where
    /// one version of a scheduler answers differently from the one the table describes.
    pub(crate) version_except: &'static [(&'static str, Expect)],
    /// Whether the cases' specs are submitted together, in one
    /// [`submit_many`](BatchBackend::submit_many), instead of one `submit` each.
    pub(crate) batched: bool,
}

/// Makes a backend on the same cluster whose default account is the given one.
pub(crate) type WithAccount =
    Box<dyn Fn(&str) -> batchbridge_core::Result<Arc<dyn BatchBackend>> + Send + Sync>;

/// The last component of [`Bed::hostile_dir`]: quotes, a command substitution, a
/// semicolon, backticks, non-ASCII and a right-to-left override, but no `/`.
pub(crate) fn hostile_dir_name(run: &str) -> String {
    format!("it's a \"dir\" $(touch batchbridge-canary-{run}-dir) ; `id` ünï \u{202e}cod.sh")
}

/// One case's result, for the report.
pub(crate) struct Row {
    pub(crate) number: usize,
    pub(crate) field: &'static str,
    pub(crate) input: &'static str,
    pub(crate) expected: String,
    pub(crate) outcome: String,
    pub(crate) passed: bool,
}

/// What happened to a case before its job (if any) finished.
enum Early {
    Refused(Error),
    Submitted(JobId),
    Status(JobStatus),
    CancelOk,
    Fetched,
}

/// A whole run's results.
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
    pub(crate) memory: Vec<String>,
    pub(crate) canaries: Vec<String>,
    pub(crate) control_found: bool,
    pub(crate) elapsed: Duration,
}

impl Report {
    /// The rows as a Markdown table.
    pub(crate) fn markdown(&self, backend: Backend) -> String {
        let mut text = format!(
            "| # | field | input | expected ({backend:?}) | outcome |\n| --- | --- | --- | --- | --- |\n"
        );
        for row in &self.rows {
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} | {}{} |",
                row.number,
                row.field,
                row.input.replace('|', "\\|"),
                row.expected.replace('|', "\\|"),
                if row.passed { "" } else { "**FAILED** " },
                row.outcome.replace('|', "\\|").replace('\n', "\\n"),
            );
        }
        text
    }

    /// Panics with every failed case, a canary found, or a control not found.
    pub(crate) fn assert_clean(&self) {
        let failed: Vec<String> = self
            .rows
            .iter()
            .filter(|r| !r.passed)
            .map(|r| {
                format!(
                    "#{} {} {}: expected {}, got {}",
                    r.number, r.field, r.input, r.expected, r.outcome
                )
            })
            .collect();
        assert!(
            failed.is_empty(),
            "{} cases failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
        assert!(
            self.canaries.is_empty(),
            "canaries found: {:?}",
            self.canaries
        );
        assert!(
            self.control_found,
            "the positive control's file was not found: the canary search is blind"
        );
    }
}

/// The longest a run waits for its jobs.
const PATIENCE: Duration = Duration::from_secs(150);
/// The most cases in flight at once.
const IN_FLIGHT: usize = 24;
/// The most a fetch of a large output may grow this process's peak memory.
pub(crate) const MEMORY_BOUND: u64 = 64 * 1024 * 1024;

/// A case built for one run.
struct Pending {
    number: usize,
    case: &'static Case,
    expect: Expect,
    input: Input,
    check: Check,
}

type Checks = HashMap<usize, (&'static Case, Expect, Check)>;

/// Runs every case of [`CASES`] on `bed`, then searches for canaries.
///
/// The case with a large output goes first and alone, so that this process's memory is
/// measured before the other cases' megabytes have passed through its allocator; then
/// every other case runs concurrently.
pub(crate) async fn run(bed: Bed) -> Report {
    let started = Instant::now();
    reset_peak();
    let resident_at_start = resident();
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let bed = Arc::new(bed);

    for (input, _) in bed.version_except {
        assert!(
            CASES.iter().any(|case| case.input == *input),
            "version_except names no case: {input}"
        );
    }
    // Build every case; skip those that do not apply.
    let mut pending = Vec::new();
    let mut rows = Vec::new();
    for (index, case) in CASES.iter().enumerate() {
        let number = index + 1;
        let expect = bed
            .version_except
            .iter()
            .find(|(input, _)| *input == case.input)
            .map_or_else(|| case.expect_for(bed.which), |(_, expect)| *expect);
        if let Expect::Skip(_) = expect {
            rows.push(Row {
                number,
                field: case.field,
                input: case.input,
                expected: expect.describe(),
                outcome: "skipped".to_owned(),
                passed: true,
            });
            continue;
        }
        let ctx = Ctx {
            which: bed.which,
            key: unique_key(&format!("hostile{number}")),
            canary: format!("{}/batchbridge-canary-{run_id}-{number}", bed.canary_dir),
            canary_name: format!("batchbridge-canary-{run_id}-{number}"),
            control: format!("{}/batchbridge-control-{run_id}", bed.canary_dir),
            hostile_dir: bed.hostile_dir.clone(),
        };
        let (input, check) = (case.build)(&ctx);
        pending.push(Pending {
            number,
            case,
            expect,
            input,
            check,
        });
    }
    let (large, rest): (Vec<Pending>, Vec<Pending>) = pending
        .into_iter()
        .partition(|p| matches!(p.check, Check::Large(_)));

    let mut memory = Vec::new();
    let mut checks = Checks::new();
    let mut early = HashMap::new();
    let mut finals = HashMap::new();
    let mut outputs: HashMap<usize, Result<JobOutput, String>> = HashMap::new();
    for group in [large, rest] {
        let submitted = calls(&bed, group, &mut checks, &mut early).await;
        finals.extend(follow(&bed, &submitted, &checks).await);
        for (number, id) in &submitted {
            if let Some((_, _, Check::Large(total))) = checks.get(number) {
                let (lines, output) = measure_large(bed.backend.as_ref(), id, *total).await;
                memory.extend(lines);
                outputs.insert(*number, output);
            }
        }
        outputs.extend(fetch_outputs(&bed, &submitted, &checks).await);
    }
    memory.push(format!(
        "whole run (every case, the 8 MiB script and the 1 MiB values included): peak RSS +{:.1} MiB over the {:.1} MiB at its start",
        peak().saturating_sub(resident_at_start) as f64 / 1048576.0,
        resident_at_start as f64 / 1048576.0
    ));

    for (number, result) in early {
        let (case, expect, check) = &checks[&number];
        let (passed, outcome) = judge(
            *expect,
            check,
            &result,
            finals.get(&number),
            outputs.get(&number),
        );
        rows.push(Row {
            number,
            field: case.field,
            input: case.input,
            expected: expect.describe(),
            outcome,
            passed,
        });
    }
    rows.sort_by_key(|r| r.number);

    // The canary search, on the cluster and here, and the control.
    let canaries = search(&bed, &format!("batchbridge-canary-{run_id}")).await;
    let controls = search(&bed, &format!("batchbridge-control-{run_id}")).await;
    let control = format!("{}/batchbridge-control-{run_id}", bed.canary_dir);
    let removed = bed
        .cluster
        .run(&Command::sh("rm -f -- \"$1\"", [control.as_str()]))
        .await
        .unwrap();
    assert!(removed.success(), "{}", removed.stderr_text());
    Report {
        rows,
        memory,
        canaries,
        control_found: !controls.is_empty(),
        elapsed: started.elapsed(),
    }
}

/// Makes every case's call, concurrently (bounded); returns the jobs submitted.
async fn calls(
    bed: &Arc<Bed>,
    group: Vec<Pending>,
    checks: &mut Checks,
    early: &mut HashMap<usize, Early>,
) -> Vec<(usize, JobId)> {
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    let mut batch = Vec::new();
    for p in group {
        checks.insert(p.number, (p.case, p.expect, p.check));
        if let (true, Input::Spec(spec)) = (bed.batched, &p.input) {
            batch.push((p.number, spec.clone()));
            continue;
        }
        let bed = Arc::clone(bed);
        let limit = Arc::clone(&limit);
        tasks.spawn(async move {
            let _permit = limit.acquire().await.unwrap();
            (p.number, call(&bed, p.input).await)
        });
    }
    let mut submitted = Vec::new();
    if !batch.is_empty() {
        let specs: Vec<JobSpec> = batch.iter().map(|(_, spec)| spec.clone()).collect();
        let answers = bed.backend.submit_many(&specs).await;
        assert_eq!(answers.len(), specs.len(), "one answer per spec");
        for ((number, _), answer) in batch.into_iter().zip(answers) {
            let result = match answer {
                Ok(id) => {
                    submitted.push((number, id.clone()));
                    Early::Submitted(id)
                }
                Err(err) => Early::Refused(err),
            };
            early.insert(number, result);
        }
    }
    while let Some(done) = tasks.join_next().await {
        let (number, result) = done.unwrap();
        if let Early::Submitted(id) = &result {
            submitted.push((number, id.clone()));
        }
        early.insert(number, result);
    }
    submitted
}

/// Fetches the output of every submitted job whose output is checked (the large one
/// aside), concurrently (bounded).
async fn fetch_outputs(
    bed: &Arc<Bed>,
    submitted: &[(usize, JobId)],
    checks: &Checks,
) -> HashMap<usize, Result<JobOutput, String>> {
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    for (number, id) in submitted {
        let window = match checks.get(number) {
            Some((_, _, Check::Exact(expected))) => expected.len() as u64 + 4096,
            Some((_, _, Check::Any)) => 64 * 1024,
            _ => continue,
        };
        let bed = Arc::clone(bed);
        let limit = Arc::clone(&limit);
        let (number, id) = (*number, id.clone());
        tasks.spawn(async move {
            let _permit = limit.acquire().await.unwrap();
            let output = bed
                .backend
                .fetch_output(&id, &OutputRequest::tail(window))
                .await
                .map_err(|err| err.to_string());
            (number, output)
        });
    }
    let mut outputs = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        let (number, output) = done.unwrap();
        outputs.insert(number, output);
    }
    outputs
}

async fn call(bed: &Bed, input: Input) -> Early {
    let backend = &bed.backend;
    let submitted = |result: batchbridge_core::Result<JobId>| match result {
        Ok(id) => Early::Submitted(id),
        Err(err) => Early::Refused(err),
    };
    match input {
        Input::Invalid(err) => Early::Refused(err),
        Input::Spec(spec) => submitted(backend.submit(&spec).await),
        Input::Account(account, spec) => {
            let make = bed
                .with_account
                .as_ref()
                .expect("account cases run on SLURM only");
            match make(&account) {
                Ok(other) => submitted(other.submit(&spec).await),
                Err(err) => Early::Refused(err),
            }
        }
        Input::Status(id) => match backend.status(std::slice::from_ref(&id)).await {
            Ok(mut statuses) => Early::Status(statuses.remove(&id).unwrap()),
            Err(err) => Early::Refused(err),
        },
        Input::Cancel(id) => match backend.cancel(&id).await {
            Ok(()) => Early::CancelOk,
            Err(err) => Early::Refused(err),
        },
        Input::Fetch(id) => match backend.fetch_output(&id, &OutputRequest::tail(64)).await {
            Ok(_) => Early::Fetched,
            Err(err) => Early::Refused(err),
        },
    }
}

/// Polls every submitted job in one status call per second until each is terminal; a job
/// expected to wait Queued is cancelled once seen Queued.
async fn follow(
    bed: &Bed,
    submitted: &[(usize, JobId)],
    checks: &Checks,
) -> HashMap<usize, (JobStatus, Option<JobStatus>)> {
    let deadline = Instant::now() + PATIENCE;
    let mut finals: HashMap<usize, (JobStatus, Option<JobStatus>)> = HashMap::new();
    let mut queued_seen: HashMap<usize, JobStatus> = HashMap::new();
    loop {
        let open: Vec<&(usize, JobId)> = submitted
            .iter()
            .filter(|(n, _)| !finals.contains_key(n))
            .collect();
        if open.is_empty() || Instant::now() > deadline {
            for (n, _) in open {
                finals.insert(
                    *n,
                    (
                        JobStatus::unknown("still not finished when the run gave up"),
                        None,
                    ),
                );
            }
            return finals;
        }
        let ids: Vec<JobId> = open.iter().map(|(_, id)| id.clone()).collect();
        match bed.backend.status(&ids).await {
            Ok(statuses) => {
                for (n, id) in open {
                    let status = &statuses[id];
                    let waits = checks[n].1 == Expect::Queued;
                    if status.state.is_terminal() {
                        finals.insert(*n, (status.clone(), queued_seen.get(n).cloned()));
                    } else if waits
                        && status.state == JobState::Queued
                        && !queued_seen.contains_key(n)
                    {
                        queued_seen.insert(*n, status.clone());
                        bed.backend.cancel(id).await.unwrap();
                    }
                }
            }
            Err(err) => eprintln!("status failed, trying again: {err}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Fetches windows of a large output, each after resetting this process's peak resident
/// set (`/proc/self/clear_refs`), and reports how far the peak rose above the resident set
/// before the fetch.
async fn measure_large(
    backend: &dyn BatchBackend,
    id: &JobId,
    total: u64,
) -> (Vec<String>, Result<JobOutput, String>) {
    let requests = [
        ("tail of 1 MiB", OutputRequest::tail(1 << 20), 1u64 << 20),
        (
            "1 MiB from the middle",
            OutputRequest::bytes(total / 2, 1 << 20),
            1 << 20,
        ),
        (
            "tail of u64::MAX (clamped to MAX_OUTPUT_CHUNK)",
            OutputRequest::tail(u64::MAX),
            batchbridge_core::MAX_OUTPUT_CHUNK,
        ),
    ];
    let mut lines = Vec::new();
    let mut last = Err("not fetched".to_owned());
    for (what, request, bound) in requests {
        reset_peak();
        let before = resident();
        let started = Instant::now();
        let output = backend.fetch_output(id, &request).await;
        let elapsed = started.elapsed();
        let growth = peak().saturating_sub(before);
        match output {
            Ok(output) => {
                let got = output.stdout.data.len() as u64;
                let ok = got == bound && output.stdout.total_size == total && growth < MEMORY_BOUND;
                lines.push(format!(
                    "{what}: {got} bytes of {} (bound {bound}), peak RSS +{:.1} MiB (before: {:.1} MiB), {elapsed:.2?}{}",
                    output.stdout.total_size,
                    growth as f64 / 1048576.0,
                    before as f64 / 1048576.0,
                    if ok { "" } else { " **FAILED**" }
                ));
                let _ = output.stdout.text();
                last = if ok {
                    Ok(output)
                } else {
                    Err(lines.last().unwrap().clone())
                };
            }
            Err(err) => {
                lines.push(format!("{what}: {err}"));
                last = Err(err.to_string());
            }
        }
        if last.is_err() {
            break;
        }
    }
    (lines, last)
}

fn status_field(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// This process's resident set, in bytes.
pub(crate) fn resident() -> u64 {
    status_field("VmRSS:")
}

/// This process's peak resident set since the last [`reset_peak`], in bytes.
pub(crate) fn peak() -> u64 {
    status_field("VmHWM:")
}

/// Resets the peak resident set to the current one (Linux: `echo 5 > clear_refs`).
pub(crate) fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

fn judge(
    expect: Expect,
    check: &Check,
    early: &Early,
    end: Option<&(JobStatus, Option<JobStatus>)>,
    output: Option<&Result<JobOutput, String>>,
) -> (bool, String) {
    match (expect, early) {
        (Expect::Refused(kind, words), Early::Refused(err)) => {
            let message = err.to_string();
            // A clear error is one a person can read: it names the problem, briefly.
            let passed = err.kind() == kind && message.contains(words) && message.len() <= 4 * 1024;
            (passed, format!("{:?}: {}", err.kind(), shorten(&message)))
        }
        (_, Early::Refused(err)) => (
            false,
            format!("{:?}: {}", err.kind(), shorten(&err.to_string())),
        ),
        (Expect::Unknown, Early::Status(status)) => (
            status.state == JobState::Unknown,
            format!(
                "{:?} ({})",
                status.state,
                shorten(status.reason.as_deref().unwrap_or(""))
            ),
        ),
        (Expect::NoError, Early::CancelOk) => (true, "Ok".to_owned()),
        (_, Early::Status(status)) => (false, format!("status {:?}", status.state)),
        (_, Early::CancelOk) => (false, "cancel returned Ok".to_owned()),
        (_, Early::Fetched) => (false, "fetch_output returned output".to_owned()),
        (expect, Early::Submitted(id)) => {
            let Some((status, queued)) = end else {
                return (false, format!("job {id}: never followed"));
            };
            let state = format!("job {id} {:?} ({})", status.state, status.native_state);
            match expect {
                Expect::Queued => match queued {
                    Some(q) => (
                        status.state == JobState::Cancelled,
                        format!(
                            "job {id} stayed Queued ({}), then {:?} by cancel",
                            q.reason.as_deref().unwrap_or("no reason"),
                            status.state
                        ),
                    ),
                    None => (false, format!("{state}, never seen Queued")),
                },
                Expect::Succeeds if status.state == JobState::Succeeded => {
                    judge_output(check, output, &state)
                }
                Expect::Fails(words) if status.state == JobState::Failed => {
                    let stderr = output
                        .and_then(|o| o.as_ref().ok())
                        .map(|o| o.stderr.text().into_owned())
                        .unwrap_or_default();
                    (
                        stderr.contains(words),
                        format!(
                            "{state}, exit {:?}, stderr: {}",
                            status.exit_code,
                            shorten(stderr.trim())
                        ),
                    )
                }
                _ => (
                    false,
                    format!("{state}: {}", status.reason.as_deref().unwrap_or("")),
                ),
            }
        }
    }
}

fn judge_output(
    check: &Check,
    output: Option<&Result<JobOutput, String>>,
    state: &str,
) -> (bool, String) {
    match (check, output) {
        (Check::Any, _) => (true, state.to_owned()),
        (_, None) => (false, format!("{state}, output never fetched")),
        (_, Some(Err(err))) => (false, format!("{state}, fetch failed: {}", shorten(err))),
        (Check::Exact(expected), Some(Ok(output))) => {
            let got = &output.stdout.data;
            // The lossy text view must work whatever the bytes are.
            let text = output.stdout.text();
            let lossy_ok = std::str::from_utf8(got).is_ok() || text.contains('\u{fffd}');
            let exact = got == expected && output.stdout.total_size == expected.len() as u64;
            let what = if std::str::from_utf8(expected).is_ok() {
                "byte-exact"
            } else {
                "byte-exact, not UTF-8 (lossy text has U+FFFD)"
            };
            if exact && lossy_ok {
                (true, format!("{state}, stdout {} bytes {what}", got.len()))
            } else {
                (
                    false,
                    format!(
                        "{state}, stdout {} bytes (total {}) differs from the {} expected: {:?}",
                        got.len(),
                        output.stdout.total_size,
                        expected.len(),
                        shorten(&text)
                    ),
                )
            }
        }
        (Check::Large(total), Some(Ok(output))) => (
            output.stdout.total_size == *total,
            format!(
                "{state}, {} bytes of stdout read in windows of at most the bound (see memory)",
                output.stdout.total_size
            ),
        ),
    }
}

/// At most 300 characters of `text`, for the report.
fn shorten(text: &str) -> String {
    let cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        format!("{cut}… ({} bytes)", text.len())
    } else {
        cut
    }
}

/// Paths on the cluster (through its shell) and on this machine whose names start with
/// `prefix`.
async fn search(bed: &Bed, prefix: &str) -> Vec<String> {
    let script = "prefix=$1; shift; find \"$@\" -maxdepth 6 -name \"$prefix*\" 2>/dev/null; exit 0";
    let command = Command::sh(
        script,
        std::iter::once(prefix.to_owned()).chain(bed.search_dirs.iter().cloned()),
    )
    .timeout(Duration::from_secs(120));
    let output = bed.cluster.run(&command).await.unwrap();
    assert!(
        output.success(),
        "the canary search failed: {}",
        output.stderr_text()
    );
    let mut found: Vec<String> = output
        .stdout_text()
        .lines()
        .map(|l| format!("{}:{l}", bed.cluster.host()))
        .collect();
    for entry in std::fs::read_dir("/tmp").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) {
            found.push(format!("local:/tmp/{name}"));
        }
    }
    found
}

/// The report printed for the record: the table, the memory measured, the canary search.
pub(crate) fn print(report: &Report, backend: Backend) {
    println!("{}", report.markdown(backend));
    println!("memory:");
    for line in &report.memory {
        println!("- {line}");
    }
    let skipped = report
        .rows
        .iter()
        .filter(|r| r.outcome == "skipped")
        .count();
    println!(
        "{} cases ({} run, {} not applicable) in {:.1?}; canaries found: {:?}; control found: {}",
        report.rows.len(),
        report.rows.len() - skipped,
        skipped,
        report.elapsed,
        report.canaries,
        report.control_found
    );
}

/// The whole run for a backend on a cluster reached over SSH by `shell`: the run's
/// directories made there, every case run through `backend` (canaries pointing into the
/// login's home, searched there and in /tmp), the report printed, the directories and the
/// 100 MB outputs removed, and the report asserted clean.
pub(crate) async fn run_on_cluster(
    which: Backend,
    shell: Arc<dyn Shell>,
    backend: Arc<dyn BatchBackend>,
    with_account: Option<WithAccount>,
) {
    let dirs = RemoteDirs::make(shell.as_ref()).await;
    let name = backend.name().to_owned();
    let bed = Bed {
        which,
        backend,
        cluster: Arc::clone(&shell),
        canary_dir: dirs.home.clone(),
        search_dirs: vec![dirs.home.clone(), "/tmp".to_owned()],
        hostile_dir: dirs.hostile_dir.clone(),
        with_account,
        version_except: &[],
        batched: false,
    };
    let report = run(bed).await;
    print(&report, which);
    // The hostile directory and the 100 MB of output have served their purpose.
    dirs.remove(shell.as_ref(), &name).await;
    report.assert_clean();
}

/// A run's directories on a cluster: the login's home, where canaries would appear, and a
/// fresh directory with a hostile name under it.
pub(crate) struct RemoteDirs {
    pub(crate) home: String,
    pub(crate) hostile_dir: String,
    run_dir: String,
}

impl RemoteDirs {
    pub(crate) async fn make(shell: &dyn Shell) -> Self {
        let home = batchbridge_testbed::stdout_of(
            shell,
            Command::sh("printf '%s' \"$HOME\"", Vec::<String>::new()),
        )
        .await;
        let run = std::process::id().to_string();
        let run_dir = format!("{home}/.batchbridge/hostile-{run}");
        let hostile_dir = format!("{run_dir}/{}", hostile_dir_name(&run));
        batchbridge_testbed::stdout_of(
            shell,
            Command::sh("mkdir -p -- \"$1\"", [hostile_dir.as_str()]),
        )
        .await;
        Self {
            home,
            hostile_dir,
            run_dir,
        }
    }

    /// Removes the run's directory and the 100 MB outputs the backend kept under
    /// `~/.batchbridge/BACKEND/jobs`.
    pub(crate) async fn remove(&self, shell: &dyn Shell, backend: &str) {
        batchbridge_testbed::stdout_of(
            shell,
            Command::sh("rm -rf -- \"$1\"", [self.run_dir.as_str()]),
        )
        .await;
        let jobs = format!("{}/.batchbridge/{backend}/jobs", self.home);
        batchbridge_testbed::stdout_of(
            shell,
            Command::sh(
                "find \"$1\" -maxdepth 2 -name 'task-*.stdout' -size +50M -delete",
                [jobs.as_str()],
            ),
        )
        .await;
    }
}
