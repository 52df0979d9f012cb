//! What the scheduler benchmarks share: sizes from the command line, concurrent submits,
//! and summaries for their tables.

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::{BatchBackend, Error, ErrorKind, JobId, JobSpec, Result};
use tokio::task::JoinSet;

/// The job counts given on the command line, or 10, 100 and 1000.
pub(crate) fn sizes_from_args() -> Result<Vec<usize>> {
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
pub(crate) async fn submit_all<B: BatchBackend + 'static>(
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
pub(crate) fn range(values: &[u64]) -> String {
    let min = values.iter().min().copied().unwrap_or(0);
    let max = values.iter().max().copied().unwrap_or(0);
    if min == max {
        format!("{min}")
    } else {
        format!("{min}–{max}")
    }
}

/// Prints the submit-throughput table: `n` jobs by a plain loop of the scheduler's own
/// submit command in `plain` seconds, by the backend in `ours` seconds.
pub(crate) fn print_throughput(n: usize, plain_loop: &str, plain: f64, backend: &str, ours: f64) {
    println!();
    println!("| submit {n} jobs | seconds | jobs/s |");
    println!("|---|---|---|");
    println!("| {plain_loop} | {plain:.2} | {:.0} |", n as f64 / plain);
    println!("| {backend} | {ours:.2} | {:.0} |", n as f64 / ours);
    println!();
    println!("backend throughput / plain loop: {:.2}", plain / ours);
}

/// The mean of `walls` in milliseconds.
pub(crate) fn mean_ms(walls: &[Duration]) -> f64 {
    let count = u32::try_from(walls.len().max(1)).unwrap_or(u32::MAX);
    (walls.iter().sum::<Duration>() / count).as_secs_f64() * 1000.0
}
