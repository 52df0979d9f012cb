//! Sending a job: what `submit` and `run` share (its spec from the flags, the submit, the
//! record), apart from what each does next.

use batchbridge_core::JobId;

use super::context::Context;
use crate::cli::JobArgs;
use crate::config::Cluster;
use crate::exit::{CliError, CliResult};
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
