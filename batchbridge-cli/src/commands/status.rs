//! `status`: jobs as their schedulers see them, one batched query per cluster; and the
//! rows `status` and `wait` print.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use batchbridge_core::{JobId, JobStatus};
use serde::Serialize;

use super::context::{Context, Resolved, unknown_job};
use crate::cli::{Format, StateFilter};
use crate::config::Cluster;
use crate::exit::CliResult;
use crate::record::Entry;
use crate::{describe, table, terminal};

/// `status`: without jobs named, every recorded job on the chosen cluster (every cluster
/// when none was chosen).
pub(super) async fn status(
    context: &mut Context,
    references: &[String],
    states: &[StateFilter],
    since: Option<SystemTime>,
) -> CliResult<u8> {
    let entries = context.record.entries()?;
    if let Some(chosen) = context.chosen.clone() {
        context.cluster(&chosen)?;
    }
    let submitted_since = |entry: &Entry| {
        since.is_none_or(|since| UNIX_EPOCH + Duration::from_secs(entry.submitted_at) >= since)
    };
    let mut jobs: Vec<(Resolved, Option<Entry>)> = Vec::new();
    if references.is_empty() {
        let chosen = context.chosen.clone();
        let listed = entries.iter().filter(|entry| {
            chosen.as_ref().is_none_or(|c| *c == entry.cluster) && submitted_since(entry)
        });
        for entry in listed {
            let cluster = context.cluster(&entry.cluster)?;
            let reference = entry.reference();
            jobs.push((
                (cluster, JobId::from(entry.id.as_str()), reference),
                Some(entry.clone()),
            ));
        }
    } else {
        for reference in references {
            let resolved = context.resolve(reference, &entries)?;
            let entry = entries
                .iter()
                .find(|e| e.reference() == resolved.2)
                .cloned();
            if entry.as_ref().is_none_or(submitted_since) {
                jobs.push((resolved, entry));
            }
        }
    }
    let mut by_cluster: BTreeMap<String, (Cluster, Vec<JobId>)> = BTreeMap::new();
    for ((cluster, id, _), _) in &jobs {
        by_cluster
            .entry(cluster.name.clone())
            .or_insert_with(|| (cluster.clone(), Vec::new()))
            .1
            .push(id.clone());
    }
    let mut answers = BTreeMap::new();
    let mut worst = 0;
    for (name, (cluster, ids)) in by_cluster {
        let answer = cluster
            .backend
            .status(&ids)
            .await
            .map_err(|err| cluster.explain(err));
        if let Err(err) = &answer {
            worst = worst.max(err.exit as u8);
            terminal::print_error(err);
        }
        answers.insert(name, answer);
    }
    let mut rows = Vec::new();
    for ((cluster, id, reference), entry) in jobs {
        let mut status = match &answers[&cluster.name] {
            Ok(statuses) => Ok(statuses
                .get(&id)
                .cloned()
                .unwrap_or_else(|| JobStatus::unknown("not in the scheduler's answer"))),
            // Printed once above; a table row of each of the cluster's jobs only points
            // there, while JSON, whose readers see no stderr, keeps it whole.
            Err(err) => Err(match context.format {
                Format::Table => format!("{} did not answer: see the error above", cluster.name),
                Format::Json => err.message.clone(),
            }),
        };
        if let Ok(known) = &status
            && let Some(err) = unknown_job(&cluster, &id, &reference, known).await
        {
            worst = worst.max(err.exit as u8);
            status = Err(err.message);
        }
        // A job whose status is an error may be in any state: it stays in sight.
        if let Ok(known) = &status
            && !states.is_empty()
            && !states.iter().any(|filter| filter.admits(known.state))
        {
            continue;
        }
        rows.push(Row::named(&reference, entry.as_ref(), status));
    }
    print_rows(context.format, &rows)?;
    Ok(worst)
}

/// One job as `submit`, `status` and `wait` print it (`-o json` as it is serialised).
#[derive(Debug, Serialize)]
pub(super) struct Row {
    /// CLUSTER:ID.
    pub(super) job: String,
    pub(super) cluster: String,
    pub(super) id: String,
    /// The name and key the record has for the job; empty for a job this tool did not
    /// submit.
    pub(super) name: String,
    pub(super) key: String,
    /// The status with the exit code and signal the table shows (`describe::exit_status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<JobStatus>,
    /// Why there is no status: the cluster did not answer, or knows no such job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<String>,
}

impl Row {
    /// A recorded job, with its status when there is one.
    pub(super) fn of(entry: &Entry, status: Option<JobStatus>) -> Self {
        Self {
            job: entry.reference(),
            cluster: entry.cluster.clone(),
            id: entry.id.clone(),
            name: entry.name.clone(),
            key: entry.key.clone(),
            status,
            error: None,
        }
    }

    /// The job `reference` (CLUSTER:ID), named as the record's `entry` of it names it.
    pub(super) fn named(
        reference: &str,
        entry: Option<&Entry>,
        status: Result<JobStatus, String>,
    ) -> Self {
        let (cluster, id) = reference.split_once(':').unwrap_or(("", reference));
        let (status, error) = match status {
            Ok(status) => (Some(describe::as_shown(status)), None),
            Err(err) => (None, Some(err)),
        };
        Self {
            job: reference.to_owned(),
            cluster: cluster.to_owned(),
            id: id.to_owned(),
            name: entry.map(|e| e.name.clone()).unwrap_or_default(),
            key: entry.map(|e| e.key.clone()).unwrap_or_default(),
            status,
            error,
        }
    }

    /// The table's cells, in [`HEADER`]'s order.
    fn cells(&self) -> [String; 5] {
        let (state, exit, detail) = match (&self.status, &self.error) {
            (Some(status), _) => (
                terminal::state_word(status.state),
                describe::exit_column(status),
                status
                    .tasks
                    .as_ref()
                    .map(describe::tasks)
                    .or_else(|| status.reason.clone())
                    .unwrap_or_default(),
            ),
            (None, error) => (
                "error".into(),
                String::new(),
                error.clone().unwrap_or_default(),
            ),
        };
        [self.job.clone(), self.name.clone(), state, exit, detail]
    }
}

const HEADER: [&str; 5] = ["JOB", "NAME", "STATE", "EXIT", "TASKS/REASON"];

/// Prints `rows` as a table or as a JSON array.
pub(super) fn print_rows(format: Format, rows: &[Row]) -> CliResult<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string(rows)?),
        Format::Table => {
            let cells: Vec<[String; 5]> = rows.iter().map(Row::cells).collect();
            for line in table::lines(HEADER, &cells) {
                println!("{line}");
            }
        }
    }
    Ok(())
}
