//! The HTCondor backend against the test bed's real pool (tests/testbed/htcondor.sh), as a
//! regular user over SSH: what the conformance suite does not cover.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use batchbridge_core::shell::Command;
use batchbridge_core::{
    ArraySpec, BatchBackend, CancelledBy, ErrorKind, FailureCause, JobState, OutputRequest,
};
use batchbridge_htcondor::description::PASSTHROUGH_KEY;
use batchbridge_testbed::{htcondor_shell, login, stdout_of, testbed_script};
use common::{backend, spec, wait_for};

#[tokio::test]
async fn a_cluster_of_three_procs_with_one_failing_counts_two_succeeded_one_failed() {
    let condor = backend();
    let mut spec = spec(
        "queue3",
        "echo \"proc $BATCHBRIDGE_TASK_INDEX\"\n[ \"$BATCHBRIDGE_TASK_INDEX\" != 1 ] || exit 4\n",
    );
    spec.array = Some(ArraySpec::new(3));
    let id = condor.submit(&spec).await.unwrap();
    let status = wait_for(&condor, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(status.state, JobState::Failed, "{status:?}");
    let tasks = status.tasks.unwrap();
    assert_eq!(
        (tasks.total, tasks.succeeded, tasks.failed),
        (3, 2, 1),
        "{status:?}"
    );
    assert_eq!(
        status.cause,
        Some(FailureCause::ExitCode(4)),
        "issue 21 case 1: {status:?}"
    );

    // It is one cluster of three procs, and HTCondor's own record agrees.
    let history = stdout_of(
        &htcondor_shell(),
        Command::new("condor_history").args([id.as_str(), "-af", "ProcId", "ExitCode"]),
    )
    .await;
    let mut ends: Vec<&str> = history.lines().collect();
    ends.sort_unstable();
    assert_eq!(ends, ["0 0", "1 4", "2 0"]);
    let output = condor
        .fetch_output(&id, &OutputRequest::tail(100).for_task(2))
        .await
        .unwrap();
    assert_eq!(output.stdout.text(), "proc 2\n");
}

#[tokio::test]
async fn a_job_whose_executable_cannot_run_is_held_with_a_readable_reason() {
    let condor = backend();
    let mut spec = spec("badexe", "echo never\n");
    spec.passthrough.insert(
        PASSTHROUGH_KEY.into(),
        vec![
            "executable = /nonexistent/bin/tool".into(),
            "transfer_executable = false".into(),
        ],
    );
    let id = condor.submit(&spec).await.unwrap();
    let held = wait_for(&condor, &id, "Held", |s| s.state == JobState::Held).await;
    let reason = held.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("/nonexistent/bin/tool"),
        "the hold reason names the executable: {held:?}"
    );
    assert_eq!(held.native_state, "Held");

    condor.cancel(&id).await.unwrap();
    let end = wait_for(&condor, &id, "Cancelled", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Cancelled, "{end:?}");
    assert_eq!(
        end.cause,
        Some(FailureCause::Cancelled(CancelledBy::Request)),
        "{end:?}"
    );
}

#[tokio::test]
async fn a_job_removed_on_the_pool_side_is_cancelled_with_the_reason() {
    let condor = backend();
    let id = condor
        .submit(&spec("outsiderm", "sleep 600\n"))
        .await
        .unwrap();
    wait_for(&condor, &id, "Running", |s| s.state == JobState::Running).await;
    stdout_of(
        &htcondor_shell(),
        Command::new("condor_rm").arg(id.as_str()),
    )
    .await;
    let end = wait_for(&condor, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Cancelled, "{end:?}");
    assert!(
        end.reason
            .as_deref()
            .unwrap_or_default()
            .contains("condor_rm"),
        "{end:?}"
    );
    assert_eq!(
        end.cause,
        Some(FailureCause::Cancelled(CancelledBy::Account(
            login("htcondor").user
        ))),
        "removed by hand, by the account HTCondor names: {end:?}"
    );
    assert!(end.ended_at.is_some(), "{end:?}");
}

#[tokio::test]
async fn a_job_is_found_by_key_after_a_restart_even_without_its_recorded_id() {
    let spec = spec("restart", "sleep 3\n");
    let id = backend().submit(&spec).await.unwrap();

    // A new process: a new backend over a new connection.
    let restarted = backend();
    assert_eq!(restarted.find(&spec.key).await.unwrap(), Some(id.clone()));
    assert_eq!(restarted.submit(&spec).await.unwrap(), id, "no second job");

    // Without the id recorded in the job directory, HTCondor's own key attribute answers:
    // condor_q while the job is queued or running, condor_history once it has ended.
    let shell = htcondor_shell();
    stdout_of(
        &shell,
        Command::sh(
            "rm -- \"$HOME/.batchbridge/htcondor/jobs/$1/job_id\"",
            [spec.key.as_str()],
        ),
    )
    .await;
    assert_eq!(restarted.find(&spec.key).await.unwrap(), Some(id.clone()));
    wait_for(&restarted, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(restarted.find(&spec.key).await.unwrap(), Some(id));

    let never = batchbridge_core::conformance::unique_key("never");
    assert_eq!(restarted.find(&never).await.unwrap(), None);
}

#[tokio::test]
async fn a_job_over_its_wall_time_is_removed_and_failed() {
    let condor = backend();
    let mut spec = spec("walltime", "echo started\nsleep 600\n");
    spec.resources.wall_time = Some(Duration::from_secs(3));
    let id = condor.submit(&spec).await.unwrap();
    let end = wait_for(&condor, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Failed, "{end:?}");
    assert!(
        end.reason
            .as_deref()
            .unwrap_or_default()
            .contains("JobCurrentStartDate > 3"),
        "the reason shows the limit: {end:?}"
    );
    assert_eq!(end.cause, Some(FailureCause::WallTimeExceeded), "{end:?}");
}

#[tokio::test]
async fn removing_another_users_job_is_permission_denied() {
    testbed_script("htcondor.sh", &["foreign-job"]);
    let shell = htcondor_shell();
    let listed = stdout_of(
        &shell,
        Command::new("condor_q").args([
            "-allusers",
            "-constraint",
            "Owner == \"other\" && JobStatus == 1",
            "-af",
            "ClusterId",
        ]),
    )
    .await;
    let foreign = listed.lines().last().unwrap().to_owned();
    let Err(err) = backend().cancel(&foreign.as_str().into()).await else {
        // Seen once in CI (2026-11-27), not reproduced in 130 runs since: say what the
        // pool showed of the job then, so that a recurrence tells why.
        let after = stdout_of(
            &shell,
            Command::new("condor_q").args(["-allusers", &foreign, "-af", "Owner", "JobStatus"]),
        )
        .await;
        let ended = stdout_of(
            &shell,
            Command::new("condor_history").args([
                "-limit",
                "1",
                &foreign,
                "-af",
                "JobStatus",
                "RemoveReason",
            ]),
        )
        .await;
        panic!(
            "cancelling cluster {foreign} of `other` (listed: {listed:?}) answered Ok; \
             condor_q now shows owner and JobStatus {after:?}, condor_history {ended:?}"
        );
    };
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(err.message().contains("other"), "{err}");
}

/// Two processes (two backends, each with its own connection and submit locks) submitting
/// one key at once get the one job's id, as on SLURM; the one that found the key claimed
/// waited for the other's submit instead of answering SubmitOutcomeUnknown (issue 27).
#[tokio::test]
async fn concurrent_submits_of_one_key_from_two_backends_return_the_one_job() {
    let spec = spec("two-backends", "echo once\n");
    let backends: Vec<_> = (0..4).map(|_| backend()).collect();
    // Connected first, so that the submits reach the login node together.
    for warm in &backends {
        warm.find(&common::spec("warm-up", "true\n").key)
            .await
            .unwrap();
    }
    let (a, b, c, d) = tokio::join!(
        backends[0].submit(&spec),
        backends[1].submit(&spec),
        backends[2].submit(&spec),
        backends[3].submit(&spec),
    );
    let ids: Vec<_> = [a, b, c, d]
        .into_iter()
        .map(|r| r.unwrap_or_else(|err| panic!("{:?} {err}", err.kind())))
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let status = wait_for(&backends[0], &ids[0], "the end", |s| s.state.is_terminal()).await;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let output = backends[0]
        .fetch_output(&ids[0], &OutputRequest::tail(100))
        .await
        .unwrap();
    assert_eq!(output.stdout.text(), "once\n");
}

/// A container job on a pool whose slots have no container runtime (the test bed's: no
/// Apptainer, no Docker) waits with a reason saying so, not HTCondor's bare "no match
/// found" (issue 27).
#[tokio::test]
async fn a_container_job_without_a_container_slot_says_why_it_waits() {
    let condor = backend();
    let mut spec = spec("container-nowhere", "true\n");
    spec.container = Some(batchbridge_core::Container::new("/images/nowhere.sif"));
    let id = condor.submit(&spec).await.unwrap();
    let waiting = wait_for(&condor, &id, "the negotiator's answer", |s| {
        s.reason
            .as_deref()
            .is_some_and(|r| r != "not matched to a slot yet")
    })
    .await;
    condor.cancel(&id).await.unwrap();
    assert_eq!(waiting.state, JobState::Queued, "{waiting:?}");
    let reason = waiting.reason.unwrap_or_default();
    assert!(
        reason.contains("no slot") && reason.contains("container"),
        "{reason}"
    );
}
