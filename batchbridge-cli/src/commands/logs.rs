//! `logs`: a job's output, or its last lines, or as it comes until the job ends.

use batchbridge_core::JobState;

use super::context::{Context, poll_interval, tracker, unknown_job};
use crate::describe;
use crate::exit::{CliResult, Exit, job_exit_code};
use crate::output::{PrintedOutput, Tail};

/// `logs`: one task's output when `task` names it, else the job's, or every task's under
/// `==> task N <==` headings when the job is an array.
pub(super) async fn logs(
    context: &mut Context,
    reference: &str,
    tail: Option<Tail>,
    follow: bool,
    task: Option<u32>,
) -> CliResult<u8> {
    let entries = context.record.entries()?;
    let (cluster, id, reference) = context.resolve(reference, &entries)?;
    let explain = |err| cluster.explain(err);
    let status = cluster.backend.status_of(&id).await.map_err(explain)?;
    if let Some(err) = unknown_job(&cluster, &id, &reference, &status).await {
        return Err(err);
    }
    let array = match task {
        Some(_) => None,
        None => status.tasks.as_ref().map(|counts| counts.total),
    };
    if matches!(status.state, JobState::Queued | JobState::Held) && status.tasks.is_none() {
        // Nothing to print yet; silence would read as a job that printed nothing.
        eprintln!(
            "{reference} has not started: {}",
            describe::waiting(&status)
        );
    }
    let mut output = PrintedOutput::new(id.clone(), array, task.unwrap_or(0));
    let backend = cluster.backend.as_ref();
    if let Some(tail) = tail {
        output.tail(backend, tail).await.map_err(explain)?;
    }
    if follow {
        let tracker = tracker(&cluster)?;
        let status = output
            .follow(&tracker, poll_interval(&cluster), |print| print())
            .await
            .map_err(explain)?;
        if status.state != JobState::Succeeded {
            eprintln!("{reference}: {}", describe::end(&status));
        }
        return Ok(job_exit_code(&status));
    }
    if tail.is_none() {
        output.written(backend).await.map_err(explain)?;
    }
    Ok(Exit::Success as u8)
}
