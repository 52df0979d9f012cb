//! `run` (and `submit --follow`): print a job's output as it runs and exit with its code;
//! on Ctrl-C, cancel it when asked to.

use batchbridge_core::{JobId, JobState};

use super::context::{Context, poll_interval, tracker};
use super::sent::{Submitted, fetch_outputs, send};
use crate::cli::JobArgs;
use crate::config::Cluster;
use crate::exit::{CliResult, Exit, job_exit_code};
use crate::output::PrintedOutput;
use crate::record::Entry;
use crate::{describe, terminal};

/// `run`.
pub(super) async fn run(
    context: &mut Context,
    job: JobArgs,
    cancel_on_interrupt: bool,
) -> CliResult<u8> {
    let submitted = send(context, job).await?;
    follow(&submitted, cancel_on_interrupt).await
}

/// Prints the job's output as it runs (an array's tasks under `==> task N <==` headings)
/// and returns its exit code; on Ctrl-C, cancels it when asked to (or when the person at
/// the terminal says so).
pub(super) async fn follow(job: &Submitted, cancel_on_interrupt: bool) -> CliResult<u8> {
    let Submitted {
        cluster,
        entry,
        id,
        tasks,
        ..
    } = job;
    let tracker = tracker(cluster)?;
    let spinner = terminal::spinner(format!("{} Queued", entry.reference()));
    let mut changes = tracker.changes();
    let shown = spinner.clone();
    let reference = entry.reference();
    let watching = tokio::spawn(async move {
        while let Some((_, status)) = changes.recv().await {
            if matches!(status.state, JobState::Queued | JobState::Held) {
                shown.set_message(format!("{reference} {}", describe::waiting(&status)));
            } else {
                shown.finish_and_clear();
            }
        }
    });
    let following = PrintedOutput::new(id.clone(), *tasks, 0).follow(
        &tracker,
        poll_interval(cluster),
        |print| spinner.suspend(print),
    );
    let outcome = tokio::select! {
        status = following => Some(status),
        _ = tokio::signal::ctrl_c() => None,
    };
    watching.abort();
    spinner.finish_and_clear();
    match outcome {
        Some(status) => {
            let status = status.map_err(|err| cluster.explain(err))?;
            if status.state != JobState::Succeeded {
                eprintln!("{}: {}", entry.reference(), describe::end(&status));
            }
            // The outputs are fetched before the exit, whatever the job's end; a failed
            // fetch is said, and a job that failed keeps its own exit code.
            let fetched = fetch_outputs(job).await;
            match fetched {
                Err(err) if status.state == JobState::Succeeded => Err(err),
                Err(err) => {
                    terminal::print_error(&err);
                    Ok(job_exit_code(&status))
                }
                Ok(()) => Ok(job_exit_code(&status)),
            }
        }
        None => {
            interrupted(cluster, entry, id, cancel_on_interrupt).await?;
            Ok(Exit::Interrupted as u8)
        }
    }
}

/// Ctrl-C during `run`: cancel the job if asked to, or ask the person at the terminal.
async fn interrupted(cluster: &Cluster, entry: &Entry, id: &JobId, cancel: bool) -> CliResult<()> {
    let reference = entry.reference();
    let cancel =
        cancel || (terminal::can_ask() && ask(&format!("cancel {reference}? [y/N] ")).await);
    if cancel {
        cluster
            .backend
            .cancel(id)
            .await
            .map_err(|err| cluster.explain(err))?;
        eprintln!("cancelled {reference}");
    } else {
        eprintln!(
            "{reference} goes on: `batchbridge logs -f {reference}` follows it, \
             `batchbridge cancel {reference}` cancels it"
        );
    }
    Ok(())
}

/// Asks a yes/no question on the terminal; another Ctrl-C or end of input is "no".
async fn ask(question: &str) -> bool {
    eprint!("\n{question}");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    tokio::select! {
        answer = answer => matches!(answer, Ok(Ok(line)) if line.trim().eq_ignore_ascii_case("y") || line.trim().eq_ignore_ascii_case("yes")),
        _ = tokio::signal::ctrl_c() => false,
    }
}
