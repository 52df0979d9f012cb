//! Measures [`BatchBackend::cleanup`] on the test bed's SLURM cluster
//! (`tests/testbed/up.sh` first): submits N tiny jobs (`true`, 1000 by default) into a work
//! directory of their own, waits until all ended, cleans every one up, and counts the
//! entries of `WORK/jobs` and `WORK/ids` before and after, with the seconds each phase took
//! and the remote commands the cleanups ran.
//!
//! ```text
//! cargo run --release --example cleanup_bench           # N = 1000
//! cargo run --release --example cleanup_bench -- 100    # another N
//! ```

#![allow(clippy::print_stdout)]

// The other benchmarks' table helpers are not used here.
#[allow(dead_code)]
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{BatchBackend, Error, ErrorKind, JobKey, JobSpec, Result};
use batchbridge_examples::bench::{sizes_from_args, submit_all};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::{CountingShell, ssh_facts};
use tokio::task::JoinSet;

/// The entries of `WORK/jobs` and `WORK/ids`, and the kilobytes under `WORK`.
async fn census(shell: &dyn Shell, work: &str) -> Result<(u64, u64, u64)> {
    let script = "cd -- \"$1\" && ls -A jobs | wc -l && ls -A ids | wc -l && du -sk . | cut -f1";
    let output = shell
        .run(&Command::sh(script, [work]))
        .await?
        .check("counting the work directory")?;
    let numbers: Vec<u64> = output
        .stdout_text()
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    match numbers[..] {
        [jobs, ids, kib] => Ok((jobs, ids, kib)),
        _ => Err(Error::new(
            ErrorKind::UnexpectedOutput,
            format!("census printed {:?}", output.stdout_text()),
        )),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    // The last size given; 1000 (the last of the defaults) when none is.
    let n = sizes_from_args()?.last().copied().unwrap_or(1000);
    let facts = ssh_facts();
    let counting = Arc::new(CountingShell::new(facts.key_shell()));
    let run = format!("{:x}", std::process::id());
    let work = format!(".batchbridge/cleanup-bench-{run}");
    let slurm = Arc::new(SlurmBackend::new(
        Arc::clone(&counting) as Arc<dyn Shell>,
        SlurmConfig::default().with_work_dir(work.clone()),
    )?);
    let keys: Vec<JobKey> = (0..n)
        .map(|i| JobKey::new(format!("cleanup-{run}-{i}")))
        .collect::<Result<_>>()?;
    let specs = keys
        .iter()
        .map(|key| {
            let mut spec = JobSpec::new(key.clone(), "cleanup-bench", "true\n");
            spec.queue = Some("debug".into());
            spec
        })
        .collect();

    let started = Instant::now();
    let ids = submit_all(&slurm, specs).await?;
    let submitted = started.elapsed();
    let started = Instant::now();
    loop {
        let statuses = slurm.status(&ids).await?;
        if statuses.values().all(|s| s.state.is_terminal()) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let ran = started.elapsed();
    let shell = facts.key_shell();
    let before = census(&shell, &work).await?;

    counting.take_counts();
    let started = Instant::now();
    let mut cleanups = JoinSet::new();
    for key in keys {
        let slurm = Arc::clone(&slurm);
        cleanups.spawn(async move { slurm.cleanup(&key).await });
    }
    while let Some(joined) = cleanups.join_next().await {
        joined.map_err(|e| Error::new(ErrorKind::Io, e.to_string()))??;
    }
    let cleaned = started.elapsed();
    let commands = counting.take_counts();
    let after = census(&shell, &work).await?;
    shell
        .run(&Command::sh("rm -rf -- \"$1\"", [work.as_str()]))
        .await?
        .check("removing the bench's work directory")?;

    println!("{n} jobs (`true`) on SLURM, work directory {work}");
    println!();
    println!("| | WORK/jobs entries | WORK/ids entries | KiB under WORK |");
    println!("|---|---|---|---|");
    println!(
        "| after the jobs ended | {} | {} | {} |",
        before.0, before.1, before.2
    );
    println!(
        "| after cleanup of all | {} | {} | {} |",
        after.0, after.1, after.2
    );
    println!();
    println!("| phase | seconds |");
    println!("|---|---|");
    println!("| submit all | {:.1} |", submitted.as_secs_f64());
    println!("| until all ended | {:.1} |", ran.as_secs_f64());
    println!(
        "| cleanup all | {:.1} ({:.1} ms per job) |",
        cleaned.as_secs_f64(),
        cleaned.as_secs_f64() * 1000.0 / n as f64
    );
    println!();
    println!("remote commands the cleanups ran, by program: {commands:?}");
    Ok(())
}
