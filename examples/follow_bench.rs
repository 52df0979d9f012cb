//! Measures `Tracker::follow_output`: the time from a line printed by a job to its arrival
//! in the stream, for a job printing its clock every 100 ms for 10 s, on the local backend
//! and on the test bed's SLURM over SSH (`tests/testbed/up.sh` first; its login node is
//! this machine, so both clocks are one). Each line is the job's `date +%s%N`; its latency
//! is the time the stream handed it over minus that. Prints p50, p99 and the worst, per
//! backend, and whether every line arrived in order.
//!
//! ```text
//! cargo run --release --example follow_bench
//! ```

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use batchbridge_core::follow::OutputUpdate;
use batchbridge_core::shell::Shell;
use batchbridge_core::{
    BatchBackend, Error, ErrorKind, JobKey, JobSpec, JobState, LocalBackend, Result, Tracker,
};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::ssh_facts;

/// Lines the job prints, one every 100 ms.
const LINES: usize = 100;

/// Follows one clock-printing job on `backend` and returns each line's latency, in order.
async fn latencies(backend: Arc<dyn BatchBackend>, queue: Option<&str>) -> Result<Vec<Duration>> {
    let tracker = Tracker::new(backend.clone(), Duration::from_secs(1))?;
    let script =
        format!("i=0; while [ $i -lt {LINES} ]; do date +%s%N; i=$((i + 1)); sleep 0.1; done\n");
    let key = JobKey::new(format!("follow-bench-{:x}", std::process::id()))?;
    let mut spec = JobSpec::new(key, "follow-bench", script);
    spec.queue = queue.map(str::to_owned);
    let id = backend.submit(&spec).await?;
    let mut output = tracker.follow_output(id);
    let (mut pending, mut latencies, mut last) = (Vec::new(), Vec::new(), 0);
    loop {
        let update = output
            .next()
            .await
            .ok_or_else(|| Error::new(ErrorKind::Io, "the stream ended without the job's end"))??;
        let arrived = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        match update {
            OutputUpdate::Output { new, .. } => {
                pending.extend(new.stdout);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let printed: u64 =
                        String::from_utf8_lossy(&line).trim().parse().map_err(|_| {
                            Error::new(ErrorKind::UnexpectedOutput, "a line that is not a clock")
                        })?;
                    if printed < last {
                        return Err(Error::new(
                            ErrorKind::UnexpectedOutput,
                            "lines out of order",
                        ));
                    }
                    last = printed;
                    latencies.push(arrived.saturating_sub(Duration::from_nanos(printed)));
                }
            }
            OutputUpdate::Ended(status) if status.state == JobState::Succeeded => {
                return Ok(latencies);
            }
            OutputUpdate::Ended(status) => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("the job ended {status:?}"),
                ));
            }
            _ => {}
        }
    }
}

fn report(backend: &str, mut latencies: Vec<Duration>) {
    let lines = latencies.len();
    latencies.sort();
    let at = |q: f64| {
        let index = ((lines as f64 * q).ceil() as usize).clamp(1, lines) - 1;
        latencies[index].as_secs_f64() * 1000.0
    };
    println!(
        "| {backend} | {lines}/{LINES} | {:.0} ms | {:.0} ms | {:.0} ms |",
        at(0.5),
        at(0.99),
        at(1.0)
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    let state = std::env::temp_dir().join(format!("follow-bench-{:x}", std::process::id()));
    let local: Arc<dyn BatchBackend> = Arc::new(LocalBackend::new(&state)?);
    let slurm: Arc<dyn BatchBackend> = Arc::new(SlurmBackend::new(
        Arc::new(ssh_facts().key_shell()) as Arc<dyn Shell>,
        SlurmConfig::default(),
    )?);
    println!("| backend | lines, in order | p50 | p99 | worst |");
    println!("|---|---|---|---|---|");
    report("local", latencies(local, None).await?);
    report("SLURM over SSH", latencies(slurm, Some("debug")).await?);
    std::fs::remove_dir_all(state)?;
    Ok(())
}
