//! Measures the SLURM backend against the test bed's cluster (`tests/testbed/up.sh` first):
//!
//! - for N = 10, 100 and 1000 jobs, status cycles over all N until every job ended: the
//!   slurmctld RPCs each cycle cost (from `sdiag`, by our user), the scheduler commands each
//!   cycle ran, and the wall time of a cycle;
//! - submit throughput through the backend over one SSH connection, against a plain `sbatch`
//!   loop in one SSH session, in the same run;
//! - the SSH connections opened over the whole run.
//!
//! ```text
//! cargo run --release --example slurm_bench            # N = 10, 100, 1000
//! cargo run --release --example slurm_bench -- 10 50   # other sizes
//! ```

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use batchbridge_core::shell::{Command, Output, Shell, SshShell};
use batchbridge_core::{BatchBackend, Error, ErrorKind, JobId, JobKey, JobSpec, Result};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::ssh_facts;
use tokio::task::JoinSet;

/// A shell that counts the commands run through it, by the program that matters: `env
/// squeue` counts as squeue, `sh -c` as sh.
#[derive(Debug)]
struct CountingShell {
    inner: SshShell,
    counts: Mutex<BTreeMap<String, u64>>,
}

impl CountingShell {
    fn take_counts(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.counts.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl Shell for CountingShell {
    fn host(&self) -> &str {
        self.inner.host()
    }

    async fn run(&self, command: &Command) -> Result<Output> {
        let program = match command.program() {
            "env" => command
                .arguments()
                .iter()
                .find(|a| !a.contains('='))
                .cloned()
                .unwrap_or_default(),
            other => other.to_owned(),
        };
        *self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(program)
            .or_default() += 1;
        self.inner.run(command).await
    }
}

/// slurmctld's RPC count for our user, from `sdiag`.
async fn rpcs_by_user(shell: &SshShell, user: &str) -> Result<u64> {
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

fn spec(run: &str, i: usize) -> Result<JobSpec> {
    let mut spec = JobSpec::new(JobKey::new(format!("bench-{run}-{i}"))?, "bench", "true\n");
    spec.queue = Some("debug".into());
    Ok(spec)
}

async fn submit_all(slurm: &Arc<SlurmBackend>, run: &str, n: usize) -> Result<Vec<JobId>> {
    let mut submits = JoinSet::new();
    for i in 0..n {
        let slurm = Arc::clone(slurm);
        let spec = spec(run, i)?;
        submits.spawn(async move { slurm.submit(&spec).await });
    }
    let mut ids = Vec::with_capacity(n);
    while let Some(joined) = submits.join_next().await {
        ids.push(joined.map_err(|e| Error::new(ErrorKind::Io, e.to_string()))??);
    }
    Ok(ids)
}

struct Cycles {
    count: usize,
    rpcs: Vec<u64>,
    commands: Vec<u64>,
    wall: Vec<Duration>,
}

/// Status cycles over `ids` until all ended, measuring each one.
async fn run_cycles(
    slurm: &SlurmBackend,
    counting: &CountingShell,
    sdiag_shell: &SshShell,
    user: &str,
    ids: &[JobId],
) -> Result<Cycles> {
    let mut cycles = Cycles {
        count: 0,
        rpcs: Vec::new(),
        commands: Vec::new(),
        wall: Vec::new(),
    };
    loop {
        counting.take_counts();
        let before = rpcs_by_user(sdiag_shell, user).await?;
        let started = Instant::now();
        let statuses = slurm.status(ids).await?;
        cycles.wall.push(started.elapsed());
        let after = rpcs_by_user(sdiag_shell, user).await?;
        // The delta includes the first sdiag call itself.
        cycles
            .rpcs
            .push(after.saturating_sub(before).saturating_sub(1));
        let counts = counting.take_counts();
        cycles.commands.push(
            ["squeue", "sacct"]
                .iter()
                .map(|p| counts.get(*p).copied().unwrap_or(0))
                .sum(),
        );
        cycles.count += 1;
        if statuses.values().all(|s| s.state.is_terminal()) {
            return Ok(cycles);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Seconds for a plain `sbatch` loop of `n` jobs in one SSH session.
async fn plain_sbatch_loop(shell: &SshShell, n: usize) -> Result<f64> {
    let started = Instant::now();
    let script = "for i in $(seq \"$1\"); do sbatch -Q -p debug -o /dev/null --wrap true >/dev/null || exit; done";
    shell
        .run(
            &Command::new("sh")
                .args(["-c", script, "sh", &n.to_string()])
                .timeout(Duration::from_secs(600)),
        )
        .await?
        .check("the sbatch loop")?;
    Ok(started.elapsed().as_secs_f64())
}

fn stats(values: &[u64]) -> String {
    let min = values.iter().min().copied().unwrap_or(0);
    let max = values.iter().max().copied().unwrap_or(0);
    if min == max {
        format!("{min}")
    } else {
        format!("{min}–{max}")
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .map_err(|_| Error::invalid_input(format!("not a size: {a}")))
        })
        .collect::<Result<_>>()?;
    let sizes = if sizes.is_empty() {
        vec![10, 100, 1000]
    } else {
        sizes
    };
    let facts = ssh_facts();
    let counting = Arc::new(CountingShell {
        inner: facts.key_shell(),
        counts: Mutex::default(),
    });
    let slurm = Arc::new(SlurmBackend::new(
        Arc::clone(&counting) as Arc<dyn Shell>,
        SlurmConfig::default(),
    )?);
    let sdiag_shell = facts.key_shell();
    let run = format!("{:x}", std::process::id());

    println!(
        "| N | cycles | slurmctld RPCs per cycle | squeue+sacct per cycle | wall per cycle (mean) |"
    );
    println!("|---|---|---|---|---|");
    for &n in &sizes {
        let ids = submit_all(&slurm, &format!("{run}-{n}"), n).await?;
        let cycles = run_cycles(&slurm, &counting, &sdiag_shell, &facts.user, &ids).await?;
        let mean = cycles.wall.iter().sum::<Duration>() / u32::try_from(cycles.count).unwrap_or(1);
        println!(
            "| {n} | {} | {} | {} | {:.0} ms |",
            cycles.count,
            stats(&cycles.rpcs),
            stats(&cycles.commands),
            mean.as_secs_f64() * 1000.0
        );
    }

    let n = 200;
    let plain = plain_sbatch_loop(&sdiag_shell, n).await?;
    let started = Instant::now();
    let ids = submit_all(&slurm, &format!("{run}-throughput"), n).await?;
    let ours = started.elapsed().as_secs_f64();
    run_cycles(&slurm, &counting, &sdiag_shell, &facts.user, &ids).await?;
    println!();
    println!("| submit {n} jobs | seconds | jobs/s |");
    println!("|---|---|---|");
    println!(
        "| plain sbatch loop, one SSH session | {plain:.2} | {:.0} |",
        n as f64 / plain
    );
    println!(
        "| SlurmBackend::submit, one connection | {ours:.2} | {:.0} |",
        n as f64 / ours
    );
    println!();
    println!("backend throughput / plain loop: {:.2}", plain / ours);
    println!(
        "SSH connections opened by the backend: {}",
        counting.inner.connections_opened()
    );
    Ok(())
}
