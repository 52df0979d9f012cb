//! What the scheduler benchmarks share: sizes from the command line, concurrent submits,
//! summaries for their tables, and the whole body of a benchmark that counts a backend's
//! status commands per cycle and compares its submits with a plain loop
//! ([`cycles_and_throughput`]).

// The benchmarks print their tables.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell, SshShell};
use batchbridge_core::{BatchBackend, Error, ErrorKind, JobId, JobKey, JobSpec, Result};
use batchbridge_testbed::CountingShell;
use tokio::task::JoinSet;

/// The job counts given on the command line, or 10, 100 and 1000.
pub fn sizes_from_args() -> Result<Vec<usize>> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .map_err(|_| Error::invalid_input(format!("not a size: {a}")))
        })
        .collect::<Result<_>>()?;
    Ok(if sizes.is_empty() {
        vec![10, 100, 1000]
    } else {
        sizes
    })
}

/// Submits every spec at once (the backend bounds its own concurrency) and returns the ids.
pub async fn submit_all<B: BatchBackend + 'static>(
    backend: &Arc<B>,
    specs: Vec<JobSpec>,
) -> Result<Vec<JobId>> {
    let mut submits = JoinSet::new();
    for spec in specs {
        let backend = Arc::clone(backend);
        submits.spawn(async move { backend.submit(&spec).await });
    }
    let mut ids = Vec::new();
    while let Some(joined) = submits.join_next().await {
        ids.push(joined.map_err(|e| Error::new(ErrorKind::Io, e.to_string()))??);
    }
    Ok(ids)
}

/// `min–max`, or the one value when they agree.
pub fn range(values: &[u64]) -> String {
    let min = values.iter().min().copied().unwrap_or(0);
    let max = values.iter().max().copied().unwrap_or(0);
    if min == max {
        format!("{min}")
    } else {
        format!("{min}–{max}")
    }
}

/// Prints the submit-throughput table: `n` jobs submitted each way in `rows` (what, seconds),
/// the first a plain loop of the scheduler's own submit command, which each row's
/// throughput is compared with.
pub fn print_throughput(n: usize, rows: &[(&str, f64)]) {
    let Some((_, plain)) = rows.first() else {
        return;
    };
    println!();
    println!("| submit {n} jobs | seconds | jobs/s | / plain loop |");
    println!("|---|---|---|---|");
    for (what, seconds) in rows {
        println!(
            "| {what} | {seconds:.2} | {:.0} | {:.2} |",
            n as f64 / seconds,
            plain / seconds
        );
    }
}

/// slurmctld's RPC count for `user`, from `sdiag` run through `shell`.
pub async fn rpcs_by_user(shell: &SshShell, user: &str) -> Result<u64> {
    let output = shell.run(&Command::new("sdiag")).await?.check("sdiag")?;
    let text = output.stdout_text();
    let line = text
        .lines()
        .skip_while(|l| !l.starts_with("Remote Procedure Call statistics by user"))
        .find(|l| l.trim_start().starts_with(user));
    line.and_then(|l| l.split("count:").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::UnexpectedOutput,
                format!("sdiag: no {user} line"),
            )
        })
}

/// The mean of `walls` in milliseconds.
pub fn mean_ms(walls: &[Duration]) -> f64 {
    let count = u32::try_from(walls.len().max(1)).unwrap_or(u32::MAX);
    (walls.iter().sum::<Duration>() / count).as_secs_f64() * 1000.0
}

/// The scheduler-specific parts of a benchmark whose body [`cycles_and_throughput`] runs.
pub struct Scheduler {
    /// The scheduler commands a status cycle is counted in, e.g. `["qstat"]`.
    pub status_commands: &'static [&'static str],
    /// One submit of a trivial job by the scheduler's own tool, for the plain loop.
    pub plain_submit: &'static str,
    /// The scheduler's submit tool, for the table, e.g. `qsub`.
    pub submit_tool: &'static str,
    /// One command of the scheduler's own that submits `$1` trivial jobs at once, when it
    /// has one (HTCondor's `queue N`); compared with too.
    pub submit_at_once: Option<&'static str>,
    /// The backend's type, for the table, e.g. `PbsBackend`.
    pub backend: &'static str,
    /// A pause before each way of submitting, so that none pays for the one before it:
    /// PBS authenticates each client command from a privileged port (512–1023), which
    /// stays in TIME_WAIT for 60 s after it closes, so 200 `qsub`s leave the next 200
    /// waiting for ports.
    pub rest_between: Duration,
}

fn specs(run: &str, n: usize) -> Result<Vec<JobSpec>> {
    (0..n)
        .map(|i| {
            Ok(JobSpec::new(
                JobKey::new(format!("bench-{run}-{i}"))?,
                "bench",
                "true\n",
            ))
        })
        .collect()
}

/// Status cycles over `ids` until all ended: the scheduler's status commands and the wall
/// time of each cycle.
async fn run_cycles<B: BatchBackend>(
    backend: &B,
    counting: &CountingShell<SshShell>,
    commands: &[&str],
    ids: &[JobId],
) -> Result<(Vec<u64>, Vec<Duration>)> {
    let (mut counts, mut walls) = (Vec::new(), Vec::new());
    loop {
        counting.take_counts();
        let started = Instant::now();
        let statuses = backend.status(ids).await?;
        walls.push(started.elapsed());
        counts.push(counting.take_total(commands));
        if statuses.values().all(|s| s.state.is_terminal()) {
            return Ok((counts, walls));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Seconds for a plain loop of `n` submits (`plain_submit`, one job each) in one SSH
/// session.
async fn plain_submit_loop(shell: &SshShell, plain_submit: &str, n: usize) -> Result<f64> {
    let script =
        format!("cd && for i in $(seq \"$1\"); do {plain_submit} >/dev/null || exit; done");
    timed(shell, &script, n).await
}

/// Seconds `script` (`$1`: `n`) takes in one SSH session, from its home directory.
async fn timed(shell: &SshShell, script: &str, n: usize) -> Result<f64> {
    let started = Instant::now();
    shell
        .run(&Command::sh(script, [n.to_string()]).timeout(Duration::from_secs(600)))
        .await?
        .check(script)?;
    Ok(started.elapsed().as_secs_f64())
}

/// The benchmark of a backend on the test bed, over shells from `connect`: for each size
/// from the command line, status cycles over that many jobs until all ended (the
/// scheduler's status commands and wall time per cycle); then submit throughput of 200
/// jobs through the backend against a plain loop of the scheduler's own submit; then the
/// SSH connections the backend opened.
pub async fn cycles_and_throughput<B: BatchBackend + 'static>(
    scheduler: &Scheduler,
    connect: fn() -> SshShell,
    backend: impl FnOnce(Arc<dyn Shell>) -> Result<B>,
) -> Result<()> {
    let sizes = sizes_from_args()?;
    let counting = Arc::new(CountingShell::new(connect()));
    let backend = Arc::new(backend(Arc::clone(&counting) as Arc<dyn Shell>)?);
    let run = format!("{:x}", std::process::id());
    let commands = scheduler.status_commands;

    println!(
        "| N | cycles | {} per cycle | wall per cycle (mean) |",
        commands.join("+")
    );
    println!("|---|---|---|---|");
    for &n in &sizes {
        let ids = submit_all(&backend, specs(&format!("{run}-{n}"), n)?).await?;
        let (counts, walls) = run_cycles(backend.as_ref(), &counting, commands, &ids).await?;
        println!(
            "| {n} | {} | {} | {:.0} ms |",
            counts.len(),
            range(&counts),
            mean_ms(&walls)
        );
    }

    let n = 200;
    let rest = || tokio::time::sleep(scheduler.rest_between);
    rest().await;
    let plain = plain_submit_loop(&connect(), scheduler.plain_submit, n).await?;
    rest().await;
    let started = Instant::now();
    let ids = submit_all(&backend, specs(&format!("{run}-throughput"), n)?).await?;
    let concurrent = started.elapsed().as_secs_f64();
    run_cycles(backend.as_ref(), &counting, commands, &ids).await?;
    let batch = specs(&format!("{run}-many"), n)?;
    rest().await;
    let started = Instant::now();
    let ids = backend
        .submit_many(&batch)
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let many = started.elapsed().as_secs_f64();
    run_cycles(backend.as_ref(), &counting, commands, &ids).await?;
    let (plain_loop, submits, batched) = (
        format!("plain {} loop, one SSH session", scheduler.submit_tool),
        format!(
            "{}::submit, {n} concurrent calls, one connection",
            scheduler.backend
        ),
        format!("{}::submit_many, one connection", scheduler.backend),
    );
    let mut rows = vec![
        (plain_loop.as_str(), plain),
        (submits.as_str(), concurrent),
        (batched.as_str(), many),
    ];
    let at_once = format!("one {} of {n} jobs", scheduler.submit_tool);
    if let Some(script) = scheduler.submit_at_once {
        rest().await;
        rows.push((at_once.as_str(), timed(&connect(), script, n).await?));
    }
    print_throughput(n, &rows);
    println!(
        "SSH connections opened by the backend: {}",
        counting.inner().connections_opened()
    );
    Ok(())
}
