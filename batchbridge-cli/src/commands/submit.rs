//! `submit`: send a script, print the job's CLUSTER:ID; with `--wait` or `--follow`, also
//! what `wait` or `run` do.

use super::context::Context;
use super::sent::{fetch_outputs, prepare, send, stop_if_refused};
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
    dry_run: bool,
) -> CliResult<u8> {
    if dry_run {
        return show_without_submitting(context, job);
    }
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
    let statuses = wait::until_ended(
        vec![(
            submitted.cluster.clone(),
            submitted.id.clone(),
            submitted.entry.reference(),
        )],
        None,
    )
    .await?;
    fetch_outputs(&submitted).await?;
    Ok(statuses
        .first()
        .map_or(Exit::Success as u8, |(_, status)| job_exit_code(status)))
}

/// `submit --dry-run`: what became of each directive line and the spec that would be
/// submitted (without its script, which is the file given), then the exit a submit would
/// have for them: 2 naming the refused lines, else 0. Connects to nothing.
fn show_without_submitting(context: &mut Context, job: JobArgs) -> CliResult<u8> {
    let (cluster, spec, report) = prepare(context, job)?;
    let mut shown = serde_json::to_value(&spec)?;
    if let Some(fields) = shown.as_object_mut() {
        fields.remove("script");
    }
    match context.format {
        Format::Table => {
            println!("cluster: {}", cluster.name);
            match report.is_empty() {
                true => println!("directives: none"),
                false => print!("directives:\n{report}"),
            }
            println!("spec: {}", serde_json::to_string_pretty(&shown)?);
        }
        Format::Json => {
            let mut out = serde_json::Map::new();
            out.insert("cluster".into(), cluster.name.clone().into());
            out.insert("directives".into(), serde_json::to_value(&report.lines)?);
            out.insert("spec".into(), shown);
            println!("{}", serde_json::Value::Object(out));
        }
    }
    stop_if_refused(&report)?;
    Ok(Exit::Success as u8)
}
