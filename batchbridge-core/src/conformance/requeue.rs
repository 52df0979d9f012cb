//! [`requeued_job_runs_again_under_its_id`]: a running job the scheduler puts back in its
//! queue waits, says why, and runs again under the same id.

use std::time::Instant;

use crate::backend::{BatchBackend, OutputRequest};
use crate::error::Result;
use crate::state::JobState;

use super::{Config, spec, status_of, wait_for, wait_line, wait_terminal};

/// The script: its first run marks the job directory (its working directory) and sleeps,
/// so that it is still running when it is requeued; its second run finds the mark and ends
/// at once.
const RUN_TWICE_SCRIPT: &str = "if [ -e requeue-mark ]; then echo 'second run'; exit 0; fi\n\
                                : >requeue-mark\necho 'first run'\nsleep 600\n";

/// A running job that the scheduler puts back in its queue ([`Config::requeue`]: SLURM's
/// `scontrol requeue`, PBS's `qrerun`, HTCondor's `condor_vacate_job`) is
/// [`requeued`](crate::JobStatus::requeued): Queued, with a
/// [`requeues`](crate::JobStatus::requeues) count above 0, never in a final state before it
/// ran again; then it runs again under the same id and succeeds (its output is its second
/// run's), and `find` by its key still names that id. A scheduler may start it again before
/// a poll sees it wait (PBS does so at once after `qrerun`): then it must be seen running
/// with its count above 0, or, if its short second run ended before the next poll (seen
/// once with HTCondor), succeeded with that count and its second run's output; the check
/// says on stderr what went unseen. The files its first run left (the end the job wrapper
/// recorded when the scheduler stopped it) must not make it look ended.
///
/// **Without `requeue` this check provokes nothing**: the scheduler cannot put a running
/// job back, or the backend's test cannot ask it to; the check says so on stderr.
pub async fn requeued_job_runs_again_under_its_id<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let Some(requeue) = config.requeue else {
        eprintln!(
            "requeued_job_runs_again_under_its_id: no Config::requeue for the {} backend: \
             its scheduler cannot put a running job back in its queue, or its test cannot \
             ask it to; nothing checked",
            backend.name()
        );
        return Ok(());
    };
    let spec = spec(config, "requeued", RUN_TWICE_SCRIPT);
    let id = backend.submit(&spec).await?;
    wait_for(backend, &id, config, "Running", |s| {
        s.state == JobState::Running
    })
    .await?;
    // Requeued before the script marked its directory, the second run would sleep too.
    assert_eq!(wait_line(backend, &id, config).await?, "first run");
    requeue(id.clone()).await?;

    let deadline = Instant::now() + config.timeout;
    let mut seen = Vec::new();
    let requeued = loop {
        let status = status_of(backend, &id).await?;
        if seen.last() != Some(&status.state) {
            seen.push(status.state);
        }
        if status.requeued() || status.state == JobState::Running && status.requeues > 0 {
            break status;
        }
        // A scheduler that starts the job again at once (HTCondor after a vacate) can run
        // the short second run to its end between two polls. Only the second run can
        // succeed: the first one is killed in its sleep. The output check below holds it
        // to that.
        if status.state == JobState::Succeeded && status.requeues > 0 {
            break status;
        }
        assert!(
            !status.state.is_terminal(),
            "requeued job {id} was reported in a final state (states seen: {seen:?}): {status:?}"
        );
        assert!(
            Instant::now() < deadline,
            "requeued job {id} was not seen back in the queue with its requeue count within \
             {:?} (states seen: {seen:?}); last status: {status:?}",
            config.timeout
        );
        tokio::time::sleep(config.poll_interval).await;
    };
    let seen_waiting = if requeued.requeued() {
        "waits again"
    } else if requeued.state == JobState::Running {
        "was started again before a poll saw it wait, and runs"
    } else {
        "waited, ran again and ended between two polls"
    };
    eprintln!(
        "requeued_job_runs_again_under_its_id: job {id} {seen_waiting}: {} ({}), requeues {}",
        requeued.native_state,
        requeued.reason.as_deref().unwrap_or("no reason given"),
        requeued.requeues
    );

    let ended = wait_terminal(backend, &id, config).await?;
    assert_eq!(ended.state, JobState::Succeeded, "{ended:?}");
    assert_eq!(ended.exit_code, Some(0), "{ended:?}");
    assert_eq!(ended.cause, None, "{ended:?}");
    let stdout = backend
        .fetch_output(&id, &OutputRequest::tail(4096))
        .await?
        .stdout
        .text()
        .into_owned();
    assert_eq!(
        stdout, "second run\n",
        "job {id}'s output is its second run's"
    );
    assert_eq!(
        backend.find(&spec.key).await?,
        Some(id),
        "the key names the job that was requeued"
    );
    Ok(())
}
