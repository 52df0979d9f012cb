//! Measures the PBS backend against the test bed's OpenPBS server (`tests/testbed/up.sh`
//! first):
//!
//! - for N = 10, 100 and 1000 jobs, status cycles over all N until every job ended: the
//!   scheduler commands (qstat) each cycle ran and the wall time of a cycle;
//! - submit throughput through the backend over one SSH connection, against a plain `qsub`
//!   loop (one job per call) in one SSH session, in the same run;
//! - the SSH connections opened over the whole run.
//!
//! ```text
//! cargo run --release --example pbs_bench            # N = 10, 100, 1000
//! cargo run --release --example pbs_bench -- 10 50   # other sizes
//! ```

#![allow(clippy::print_stdout)]

mod bench;

use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell, SshShell};
use batchbridge_core::{BatchBackend, JobId, JobKey, JobSpec, Result};
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::{CountingShell, pbs_shell};
use bench::{mean_ms, print_throughput, range, sizes_from_args, submit_all};

const SCHEDULER_COMMANDS: [&str; 1] = ["qstat"];

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

/// Status cycles over `ids` until all ended: scheduler commands and wall time of each.
async fn run_cycles(
    pbs: &PbsBackend,
    counting: &CountingShell<SshShell>,
    ids: &[JobId],
) -> Result<(Vec<u64>, Vec<Duration>)> {
    let (mut commands, mut walls) = (Vec::new(), Vec::new());
    loop {
        counting.take_counts();
        let started = Instant::now();
        let statuses = pbs.status(ids).await?;
        walls.push(started.elapsed());
        commands.push(counting.take_total(&SCHEDULER_COMMANDS));
        if statuses.values().all(|s| s.state.is_terminal()) {
            return Ok((commands, walls));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Seconds for a plain loop of `n` qsub calls, one job each, in one SSH session.
async fn plain_submit_loop(shell: &SshShell, n: usize) -> Result<f64> {
    let started = Instant::now();
    let script = "cd && for i in $(seq \"$1\"); do \
                  qsub -f -o /dev/null -j oe -- /bin/true >/dev/null || exit; \
                  done";
    shell
        .run(&Command::sh(script, [n.to_string()]).timeout(Duration::from_secs(600)))
        .await?
        .check("the qsub loop")?;
    Ok(started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> Result<()> {
    let sizes = sizes_from_args()?;
    let counting = Arc::new(CountingShell::new(pbs_shell()));
    let pbs = Arc::new(PbsBackend::new(
        Arc::clone(&counting) as Arc<dyn Shell>,
        PbsConfig::default(),
    )?);
    let run = format!("{:x}", std::process::id());

    println!("| N | cycles | qstat per cycle | wall per cycle (mean) |");
    println!("|---|---|---|---|");
    for &n in &sizes {
        let ids = submit_all(&pbs, specs(&format!("{run}-{n}"), n)?).await?;
        let (commands, walls) = run_cycles(&pbs, &counting, &ids).await?;
        println!(
            "| {n} | {} | {} | {:.0} ms |",
            commands.len(),
            range(&commands),
            mean_ms(&walls)
        );
    }

    let n = 200;
    let plain = plain_submit_loop(&pbs_shell(), n).await?;
    let started = Instant::now();
    let ids = submit_all(&pbs, specs(&format!("{run}-throughput"), n)?).await?;
    let ours = started.elapsed().as_secs_f64();
    run_cycles(&pbs, &counting, &ids).await?;
    print_throughput(
        n,
        "plain qsub loop, one SSH session",
        plain,
        "PbsBackend::submit, one connection",
        ours,
    );
    println!(
        "SSH connections opened by the backend: {}",
        counting.inner().connections_opened()
    );
    Ok(())
}
