//! `submit`: send a script, print the job's CLUSTER:ID; with `--wait` or `--follow`, also
//! what `wait` or `run` do.

use batchbridge_core::JobId;

use super::context::Context;
use super::status::Row;
use super::{run, wait};
use crate::cli::{Format, JobArgs};
use crate::config::Cluster;
use crate::exit::{CliError, CliResult, Exit, job_exit_code};
use crate::record::Entry;
use crate::{spec, terminal};

/// A job this invocation submitted.
pub(super) struct Submitted {
    pub(super) cluster: Cluster,
    pub(super) entry: Entry,
    pub(super) id: JobId,
    /// Its task count, when it is an array.
    pub(super) tasks: Option<u32>,
}

/// `submit`.
pub(super) async fn submit(
    context: &mut Context,
    job: JobArgs,
    wait: bool,
    follow: bool,
) -> CliResult<u8> {
    let submitted = send(context, job).await?;
    if follow {
        return run::follow(&submitted, false).await;
    }
    let row = Row::of(&submitted.entry, None);
    match context.format {
        Format::Table => println!("{}", row.job),
        Format::Json => println!("{}", serde_json::to_string(&row)?),
    }
    if !wait {
        return Ok(Exit::Success as u8);
    }
    let Submitted {
        cluster, entry, id, ..
    } = submitted;
    let statuses = wait::until_ended(vec![(cluster, id, entry.reference())], None).await?;
    Ok(statuses
        .first()
        .map_or(Exit::Success as u8, |(_, status)| job_exit_code(status)))
}

/// Submits the job the flags describe to the chosen cluster and records it.
pub(super) async fn send(context: &mut Context, job: JobArgs) -> CliResult<Submitted> {
    let spec = spec::job_spec(job)?;
    let cluster = context.cluster(&context.chosen_cluster())?;
    let id = cluster
        .backend
        .submit(&spec)
        .await
        .map_err(|err| cluster.explain(err))?;
    let entry = Entry::new(&cluster.name, id.as_str(), spec.key.as_str(), &spec.name);
    let known = context.record.entries()?.iter().any(|e| {
        (e.cluster.as_str(), e.id.as_str()) == (entry.cluster.as_str(), entry.id.as_str())
    });
    if !known && let Err(err) = context.record.add(&entry) {
        // The job runs all the same: say which it is rather than lose it.
        terminal::print_error(&CliError {
            message: format!(
                "{} was submitted but not recorded: {}",
                entry.reference(),
                err.message
            ),
            ..err
        });
    }
    Ok(Submitted {
        cluster,
        entry,
        id,
        tasks: spec.array.map(|array| array.count),
    })
}
