//! `get`: fetch files an ended job left in its working directory.

use std::path::PathBuf;

use batchbridge_core::staging::{StageLimits, StageOut, StageWhen};

use super::context::Context;
use super::sent::fetch;
use crate::exit::{CliError, CliResult, Exit};

/// `get JOB PATTERN [DIR]`: what PATTERN matches, into DIR (default: the current
/// directory), whatever the job's end.
pub(super) async fn get(
    context: &mut Context,
    reference: &str,
    pattern: &str,
    dir: Option<PathBuf>,
) -> CliResult<u8> {
    batchbridge_core::staging::check_stage_path(pattern, true)
        .map_err(|why| CliError::usage(format!("{pattern:?}: {why}")))?;
    let entries = context.record.entries()?;
    let (cluster, id, _) = context.resolve(reference, &entries)?;
    let output =
        StageOut::new(pattern, dir.unwrap_or_else(|| PathBuf::from("."))).when(StageWhen::Always);
    fetch(&cluster, &id, &[output], &StageLimits::default()).await?;
    Ok(Exit::Success as u8)
}
