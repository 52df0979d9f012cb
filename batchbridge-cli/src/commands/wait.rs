//! `wait`: until jobs end, then show them and exit with the job's code (one job) or 1 if
//! any did not succeed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use batchbridge_core::{JobState, JobStatus, Tracker};

use super::context::{Context, Resolved, tracker, unknown_job};
use super::status::{Row, print_rows};
use crate::describe;
use crate::exit::{CliResult, Exit, job_exit_code};
use crate::terminal;

/// `wait`.
pub(super) async fn wait(
    context: &mut Context,
    references: &[String],
    timeout: Option<Duration>,
) -> CliResult<u8> {
    let jobs = context.resolve_all(references)?;
    let statuses = until_ended(jobs, timeout).await?;
    let entries = context.record.entries()?;
    let rows: Vec<Row> = statuses
        .iter()
        .map(|(reference, status)| {
            let entry = entries.iter().find(|e| e.reference() == *reference);
            Row::named(reference, entry, Ok(status.clone()))
        })
        .collect();
    print_rows(context.format, &rows)?;
    Ok(match &statuses[..] {
        [(_, only)] => job_exit_code(only),
        all if all.iter().all(|(_, s)| s.state == JobState::Succeeded) => 0,
        _ => Exit::JobFailed as u8,
    })
}

/// Waits for every job, each reported as it ends, within `timeout` overall.
pub(super) async fn until_ended(
    jobs: Vec<Resolved>,
    timeout: Option<Duration>,
) -> CliResult<Vec<(String, JobStatus)>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    for (cluster, id, reference) in &jobs {
        let status = cluster
            .backend
            .status_of(id)
            .await
            .map_err(|err| cluster.explain(err))?;
        if let Some(err) = unknown_job(cluster, id, reference, &status).await {
            return Err(err);
        }
    }
    let mut trackers: BTreeMap<String, Tracker> = BTreeMap::new();
    let mut ended = Vec::new();
    for (cluster, id, reference) in jobs {
        let tracker = match trackers.get(&cluster.name) {
            Some(tracker) => tracker,
            None => trackers
                .entry(cluster.name.clone())
                .or_insert(tracker(&cluster)?),
        };
        let spinner = terminal::spinner(format!("{reference} waiting"));
        let mut left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        // What is left of a --timeout of whole seconds, as whole seconds: the message of a
        // wait that times out names it, and "2s" reads better than "1.999821303s".
        if timeout.is_some_and(|t| t.subsec_nanos() == 0) {
            left =
                Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() >= 500_000_000));
        }
        let status = tracker
            .wait_with(&id, left, |status| {
                spinner.set_message(format!("{reference} {}", describe::waiting(status)));
            })
            .await;
        spinner.finish_and_clear();
        ended.push((reference, status.map_err(|err| cluster.explain(err))?));
    }
    Ok(ended)
}
