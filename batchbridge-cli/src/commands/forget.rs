//! `forget`: remove ended jobs' files on their clusters and drop them from the record.

use std::collections::BTreeMap;

use batchbridge_core::{JobId, JobKey};
use tokio::task::JoinSet;

use super::context::Context;
use crate::config::Cluster;
use crate::exit::{CliError, CliResult, Exit};
use crate::record::{Entry, Record};
use crate::terminal;

/// How many jobs `forget` removes at once: within the sshd's default ten sessions a
/// connection, with room for the status queries of the same invocation.
const REMOVALS_AT_ONCE: usize = 8;

/// `forget`: the jobs named, or every ended job in the record; an active job named is an
/// error, one of the record's is left for later.
pub(super) async fn forget(
    context: &mut Context,
    references: &[String],
    all_ended: bool,
) -> CliResult<u8> {
    let entries = context.record.entries()?;
    let chosen: Vec<Entry> = if all_ended {
        entries.clone()
    } else {
        let mut chosen = Vec::new();
        for reference in references {
            let (_, _, reference) = context.resolve(reference, &entries)?;
            let entry = entries
                .iter()
                .find(|e| e.reference() == reference)
                .ok_or_else(|| {
                    CliError::usage(format!("{reference} is not in this tool's record of jobs"))
                        .with_hint("`batchbridge status` lists the jobs it knows")
                })?;
            chosen.push(entry.clone());
        }
        chosen
    };
    let mut worst = 0;
    let mut by_cluster: BTreeMap<String, (Cluster, Vec<Entry>)> = BTreeMap::new();
    for entry in chosen {
        let cluster = context.cluster(&entry.cluster)?;
        by_cluster
            .entry(cluster.name.clone())
            .or_insert_with(|| (cluster, Vec::new()))
            .1
            .push(entry);
    }
    // A removal costs a few round trips on its cluster; several at once over the
    // shell's multiplexed connection, each printed as it is done, keep a long list from
    // taking minutes in silence.
    let mut removals = JoinSet::new();
    for (cluster, entries) in by_cluster.into_values() {
        let ids: Vec<JobId> = entries.iter().map(|e| JobId::from(e.id.as_str())).collect();
        let statuses = match cluster.backend.status(&ids).await {
            Ok(statuses) => statuses,
            Err(err) => {
                let err = cluster.explain(err);
                worst = worst.max(err.exit as u8);
                terminal::print_error(&err);
                continue;
            }
        };
        for (entry, id) in entries.into_iter().zip(ids) {
            if statuses.get(&id).is_some_and(|s| s.state.is_active()) {
                if !all_ended {
                    worst = worst.max(Exit::Failure as u8);
                    terminal::print_error(
                        &CliError::new(
                            Exit::Failure,
                            format!("{} is still active", entry.reference()),
                        )
                        .with_hint(format!(
                            "cancel it first: batchbridge cancel {}",
                            entry.reference()
                        )),
                    );
                }
                continue;
            }
            while removals.len() >= REMOVALS_AT_ONCE {
                if let Some(done) = removals.join_next().await {
                    worst = worst.max(forgotten(&context.record, done)?);
                }
            }
            let cluster = cluster.clone();
            removals.spawn(async move {
                let removed = match JobKey::new(entry.key.as_str()) {
                    Ok(key) => cluster.backend.cleanup(&key).await,
                    Err(err) => Err(err),
                };
                let removed = removed.map_err(|err| cluster.explain(err));
                (entry, removed)
            });
        }
    }
    while let Some(done) = removals.join_next().await {
        worst = worst.max(forgotten(&context.record, done)?);
    }
    Ok(worst)
}

/// Drops a job whose files were removed from the record and says so; returns the exit
/// code of a removal that failed.
fn forgotten(
    record: &Record,
    done: Result<(Entry, CliResult<()>), tokio::task::JoinError>,
) -> CliResult<u8> {
    let (entry, removed) =
        done.map_err(|err| CliError::new(Exit::Failure, format!("a removal failed: {err}")))?;
    match removed {
        Ok(()) => {
            let reference = entry.reference();
            record.remove(|e| e.reference() == reference)?;
            println!("forgot {reference}");
            Ok(0)
        }
        Err(err) => {
            terminal::print_error(&err);
            Ok(err.exit as u8)
        }
    }
}
