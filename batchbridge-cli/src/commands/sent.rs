//! Sending a job: what `submit` and `run` share (its spec from the flags, the submit, the
//! record), apart from what each does next.

use batchbridge_core::directives::{DirectiveReport, Fate};
use batchbridge_core::staging::{StageLimits, StageOut};
use batchbridge_core::tracker::HeldLocally;
use batchbridge_core::{JobId, JobSpec, JobState, Refusal};

use batchbridge_core::after::Released;

use super::context::{Context, poll_interval, tracker};
use crate::cli::JobArgs;
use crate::config::Cluster;
use crate::exit::{CliError, CliResult, Exit};
use crate::record::Entry;
use crate::{describe, spec, terminal};

/// A job this invocation submitted.
pub(super) struct Submitted {
    pub(super) cluster: Cluster,
    pub(super) entry: Entry,
    pub(super) id: JobId,
    /// Its task count, when it is an array.
    pub(super) tasks: Option<u32>,
    /// What to fetch once it ended (`--out`), and the caps on it.
    pub(super) outputs: Vec<StageOut>,
    pub(super) limits: StageLimits,
}

/// The chosen cluster and the spec the flags and the script's directives describe for it,
/// with what became of each directive line (refused ones included, unchecked). Connects to
/// nothing: opening a cluster makes its shell, whose connection waits for a first command.
pub(super) fn prepare(
    context: &mut Context,
    job: JobArgs,
) -> CliResult<(Cluster, JobSpec, DirectiveReport)> {
    let flagged = spec::job_spec(job)?;
    let cluster = context.cluster(&context.chosen_cluster())?;
    let flagged = flagged.after(&cluster.name)?;
    let (spec, report) = spec::with_directives(flagged, cluster.backend.as_ref())?;
    Ok((cluster, spec, report))
}

/// Stops at a refused directive line: exit 2, naming it.
pub(super) fn stop_if_refused(report: &DirectiveReport) -> CliResult<()> {
    report
        .check()
        .map_err(|err| CliError::usage(format!("the script's directives: {}", err.message())))
}

/// [`stop_if_refused`]; else says on stderr which directive lines changed nothing
/// (overridden by a flag, ignored), so that no setting is lost silently.
fn refuse_or_note(report: &DirectiveReport) -> CliResult<()> {
    stop_if_refused(report)?;
    for line in &report.lines {
        if matches!(line.fate, Fate::Overridden { .. } | Fate::Ignored { .. }) {
            eprintln!("batchbridge: {line}");
        }
    }
    Ok(())
}

/// Submits a job with dependencies through core's [`Tracker::submit_after`](batchbridge_core::Tracker::submit_after): at once where
/// the scheduler holds it, else after holding it here (saying so: the command must keep
/// running). A dependency that can no longer be met submits nothing: exit 1, naming it.
async fn submit_after(context: &Context, cluster: &Cluster, spec: &JobSpec) -> CliResult<JobId> {
    let tracker = tracker(cluster)?;
    if !cluster.backend.capabilities().dependencies {
        let after: Vec<String> = spec.after.iter().map(ToString::to_string).collect();
        eprintln!(
            "batchbridge: holding the job here until {} (cluster {} has no dependencies of \
             its own; keep this command running)",
            after.join(", "),
            cluster.name
        );
    }
    let released = match tracker.submit_after(spec).await {
        // Its dependencies allow it and the scheduler is full: wait for room as any
        // submit does, with the same key; without native dependencies they are met.
        Err(err) if err.refusal() == Some(Refusal::SubmitLimit) => {
            let mut spec = spec.clone();
            if !cluster.backend.capabilities().dependencies {
                spec.after.clear();
            }
            return submit_when_room(context, cluster, &spec).await;
        }
        released => released.map_err(|err| cluster.explain(err))?,
    };
    match released {
        Released::Submitted(id) => Ok(id),
        Released::DependencyFailed { dependency, status } => Err(CliError::new(
            Exit::JobFailed,
            format!(
                "{} was not submitted: job {} ended {}, so the dependency {dependency} can \
                 no longer be met",
                spec.key,
                dependency.job,
                describe::end(&status)
            ),
        )),
        _ => Err(CliError::new(
            Exit::Failure,
            format!("{} was neither submitted nor refused", spec.key),
        )),
    }
}

/// Submits the job the flags and the script's directives describe to the chosen cluster and
/// records it.
pub(super) async fn send(context: &mut Context, job: JobArgs) -> CliResult<Submitted> {
    let (cluster, spec, report) = prepare(context, job)?;
    refuse_or_note(&report)?;
    let id = match spec.after.is_empty() {
        true => submit_when_room(context, &cluster, &spec).await?,
        false => submit_after(context, &cluster, &spec).await?,
    };
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
        outputs: spec.stage_out,
        limits: spec.stage_limits,
    })
}

/// Submits `spec`, holding it here (and saying so on stderr, once per reason) while the
/// cluster's `max_queued` of recorded jobs are in the scheduler or the scheduler refuses it
/// with its submit limit, trying again every poll interval. The same key each time, so a
/// submit that went through unseen is found, not repeated; interrupted, nothing is left
/// behind. Many invocations in a row (a shell loop) are submitted in their order.
async fn submit_when_room(
    context: &Context,
    cluster: &Cluster,
    spec: &JobSpec,
) -> CliResult<JobId> {
    let mut said: Option<HeldLocally> = None;
    loop {
        let held = match queued_over_max(context, cluster).await? {
            Some(held) => held,
            None => match cluster
                .backend
                .submit_with(spec, &terminal::transfer_bars())
                .await
            {
                Ok(id) => {
                    if said.is_some() {
                        eprintln!("batchbridge: {}: submitted as {id}", spec.name);
                    }
                    return Ok(id);
                }
                Err(err) if err.refusal() == Some(Refusal::SubmitLimit) => {
                    HeldLocally::SubmitLimit {
                        message: err.message().to_owned(),
                    }
                }
                Err(err) => return Err(cluster.explain(err)),
            },
        };
        if said
            .as_ref()
            .is_none_or(|said| std::mem::discriminant(said) != std::mem::discriminant(&held))
        {
            eprintln!(
                "batchbridge: {}: {held}; submitting it when one of your jobs on {} ends \
                 (interrupt to give up: nothing is submitted)",
                spec.name, cluster.name
            );
        }
        said = Some(held);
        tokio::time::sleep(poll_interval(cluster)).await;
    }
}

/// Why a submit waits for the cluster's `max_queued`: that many of the jobs recorded on it
/// are in the scheduler (one status call for all of them); `None` without a `max_queued`
/// or below it.
async fn queued_over_max(context: &Context, cluster: &Cluster) -> CliResult<Option<HeldLocally>> {
    let Some(limit) = cluster.max_queued else {
        return Ok(None);
    };
    let ids: Vec<JobId> = context
        .record
        .entries()?
        .into_iter()
        .filter(|entry| entry.cluster == cluster.name)
        .map(|entry| JobId::from(entry.id))
        .collect();
    if ids.len() < limit.get() {
        return Ok(None);
    }
    let statuses = cluster
        .backend
        .status(&ids)
        .await
        .map_err(|err| cluster.explain(err))?;
    // A job no source knows any more (Unknown) is long gone, not in the scheduler.
    let in_scheduler = |state: JobState| state.is_active() && state != JobState::Unknown;
    let active = statuses
        .values()
        .filter(|status| in_scheduler(status.state))
        .count();
    Ok((active >= limit.get()).then_some(HeldLocally::MaxQueued { limit: limit.get() }))
}

/// Fetches `--out`'s files of a job that ended, with progress bars on a terminal, and
/// names each fetched file on standard error.
pub(super) async fn fetch_outputs(job: &Submitted) -> CliResult<()> {
    if job.outputs.is_empty() {
        return Ok(());
    }
    fetch(&job.cluster, &job.id, &job.outputs, &job.limits).await
}

/// Fetches `outputs` of job `id`, naming each file on standard error.
pub(super) async fn fetch(
    cluster: &Cluster,
    id: &JobId,
    outputs: &[StageOut],
    limits: &StageLimits,
) -> CliResult<()> {
    let staged = cluster
        .backend
        .stage_out(id, outputs, limits, &terminal::transfer_bars())
        .await
        .map_err(|err| cluster.explain(err))?;
    for file in &staged.files {
        eprintln!("fetched {} ({} bytes)", file.local.display(), file.size);
    }
    Ok(())
}
