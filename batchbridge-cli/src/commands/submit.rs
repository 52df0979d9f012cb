//! `submit`: send a script, print the job's CLUSTER:ID; with `--wait` or `--follow`, also
//! what `wait` or `run` do.

use super::context::Context;
use super::sent::{Submitted, send};
use super::status::Row;
use super::{run, wait};
use crate::cli::{Format, JobArgs};
use crate::exit::{CliResult, Exit, job_exit_code};

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
