//! Measures waiting for many jobs on the local backend: 200 jobs (or fewer), waited for
//! once with a `Tracker::wait` task per job and once with one `Tracker::wait_each`,
//! alternated, two rounds each. The jobs run `true`; the local scheduler runs a few at a
//! time, so they end spread out. Prints, per way of waiting, how often the waits were woken
//! (their futures polled), the process CPU time and the most resident memory above the
//! start while waiting (both include the tracker's polls, the same in both), and the wall
//! time to the last end.
//!
//! Each local job waiting for a CPU slot polls for one five times a second (its wrapper's
//! `flock -n` and `sleep 0.2`): 2000 of them at once took a shared 2-core machine to a load
//! of 1800, and 200 to 57, so the bench refuses more than 200.
//!
//! ```text
//! cargo run --release --example wait_bench [jobs]
//! ```

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use batchbridge_core::{BatchBackend, JobId, JobKey, JobSpec, LocalBackend, Result, Tracker};

const INTERVAL: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_secs(600);
/// The most jobs a round may have, and how many unless told: their wrappers poll while
/// they wait for a slot.
const MAX_JOBS: usize = 200;

/// This process's user plus system CPU time, from /proc/self/stat (in clock ticks of 10 ms).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|at| fields.get(*at)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// This process's resident memory in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `wait`, counting in `wakeups` each time it is polled: once at the start and once
/// per wake.
async fn counted<F: Future>(wakeups: &AtomicU64, wait: F) -> F::Output {
    let mut wait = std::pin::pin!(wait);
    std::future::poll_fn(|cx| {
        wakeups.fetch_add(1, Ordering::Relaxed);
        wait.as_mut().poll(cx)
    })
    .await
}

#[derive(Clone, Copy)]
enum Way {
    Tasks,
    Set,
}

async fn round(backend: &Arc<LocalBackend>, way: Way, round: usize, jobs: usize) -> Result<()> {
    let tracker = Arc::new(Tracker::new(backend.clone(), INTERVAL)?);
    let specs: Vec<JobSpec> = (0..jobs)
        .map(|n| {
            let key = JobKey::new(format!("wait-bench-{}-{round}-{n}", std::process::id()))?;
            Ok(JobSpec::new(key, "wait-bench", "true"))
        })
        .collect::<Result<_>>()?;
    let ids: Vec<JobId> = backend
        .submit_many(&specs)
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let base = resident_kib();
    let most = Arc::new(AtomicU64::new(base));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (most, done) = (Arc::clone(&most), Arc::clone(&done));
        async move {
            while !done.load(Ordering::Relaxed) {
                most.fetch_max(resident_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let wakeups = Arc::new(AtomicU64::new(0));
    let (cpu_before, started) = (cpu(), Instant::now());
    let ended = match way {
        Way::Tasks => {
            let mut waits = tokio::task::JoinSet::new();
            for id in ids {
                let (tracker, wakeups) = (Arc::clone(&tracker), Arc::clone(&wakeups));
                waits.spawn(async move { counted(&wakeups, tracker.wait(&id, TIMEOUT)).await });
            }
            let mut ended = 0;
            while let Some(status) = waits.join_next().await {
                status.map_err(|err| {
                    batchbridge_core::Error::new(batchbridge_core::ErrorKind::Io, err.to_string())
                })??;
                ended += 1;
            }
            ended
        }
        Way::Set => {
            let mut ends = tracker.wait_each(ids, TIMEOUT);
            let mut ended = 0;
            while let Some(end) = counted(&wakeups, ends.next()).await {
                end?;
                ended += 1;
            }
            ended
        }
    };
    let (took, cpu_used) = (started.elapsed(), cpu().saturating_sub(cpu_before));
    done.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let name = match way {
        Way::Tasks => "wait tasks",
        Way::Set => "wait_each ",
    };
    println!(
        "round {round} {name}: {ended} jobs, {} wakeups, cpu {:.2} s, peak rss +{} KiB, last end after {:.2} s, {} polls",
        wakeups.load(Ordering::Relaxed),
        cpu_used.as_secs_f64(),
        most.load(Ordering::Relaxed).saturating_sub(base),
        took.as_secs_f64(),
        tracker.polls()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let jobs = std::env::args()
        .nth(1)
        .map_or(Ok(MAX_JOBS), |n| n.parse::<usize>())
        .map_err(|err| batchbridge_core::Error::invalid_input(format!("jobs: {err}")))?;
    if jobs > MAX_JOBS {
        return Err(batchbridge_core::Error::invalid_input(format!(
            "{jobs} jobs: at most {MAX_JOBS}, since each waiting local job polls for a CPU slot"
        )));
    }
    let dir = tempfile::tempdir()?;
    let backend = Arc::new(LocalBackend::new(dir.path())?);
    for (n, way) in [Way::Tasks, Way::Set, Way::Set, Way::Tasks]
        .into_iter()
        .enumerate()
    {
        round(&backend, way, n, jobs).await?;
    }
    Ok(())
}
