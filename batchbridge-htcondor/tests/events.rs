//! HTCondor's user job event log as the backend's event source, against the test bed's real
//! pool over SSH: what a job's life pushes, and how the follower on the submit node ends.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use batchbridge_core::events::{EventKind, EventStream, JobEvent};
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{ArraySpec, BatchBackend, JobId, JobState};
use batchbridge_htcondor::events::EVENT_LOG;
use batchbridge_testbed::{login, stdout_of, unique_spec, wait_until};
use common::{PATIENCE, events_backend as backend, open_events as open};

/// The next event of job `id`, skipping other jobs'.
async fn next_of(events: &mut EventStream, id: &JobId) -> JobEvent {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let event = events.recv().await.expect("the event stream ended");
            if event.id == *id {
                return event;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no event of job {id} in {PATIENCE:?}"))
}

/// The events of job `id` until one of `last` kind, as (task, kind).
async fn until(
    events: &mut EventStream,
    id: &JobId,
    last: impl Fn(&EventKind) -> bool,
) -> Vec<(u32, EventKind)> {
    let mut seen = Vec::new();
    loop {
        let event = next_of(events, id).await;
        let done = last(&event.kind);
        seen.push((event.task, event.kind));
        if done {
            return seen;
        }
    }
}

fn ended(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Exited(_) | EventKind::Signalled(_) | EventKind::Removed
    )
}

#[tokio::test]
async fn a_job_pushes_started_then_its_exit_code() {
    let (condor, shell, work) = backend("ev-exit");
    let mut events = open(&condor, shell.as_ref(), &work).await;
    let succeeds = condor
        .submit(&unique_spec("ev-exit0", "echo hi\n"))
        .await
        .unwrap();
    assert_eq!(
        until(&mut events, &succeeds, ended).await,
        [(0, EventKind::Started), (0, EventKind::Exited(0))]
    );
    // Submitted once the first one's events are read: `until` skips other jobs' events,
    // and this one's start could come while it waits for the first one's.
    let fails = condor
        .submit(&unique_spec("ev-exit3", "exit 3\n"))
        .await
        .unwrap();
    assert_eq!(
        until(&mut events, &fails, ended).await,
        [(0, EventKind::Started), (0, EventKind::Exited(3))]
    );
    // The poll agrees with what was pushed.
    let status = condor.status_of(&fails).await.unwrap();
    assert_eq!(
        (status.state, status.exit_code),
        (JobState::Failed, Some(3))
    );
}

#[tokio::test]
async fn each_proc_of_a_cluster_pushes_its_own_events() {
    let (condor, shell, work) = backend("ev-array");
    let mut events = open(&condor, shell.as_ref(), &work).await;
    let mut spec = unique_spec("ev-array", "exit $((BATCHBRIDGE_TASK_INDEX + 10))\n");
    spec.array = Some(ArraySpec::new(3));
    let id = condor.submit(&spec).await.unwrap();
    let mut seen = Vec::new();
    while seen.iter().filter(|(_, kind)| ended(kind)).count() < 3 {
        let event = next_of(&mut events, &id).await;
        seen.push((event.task, event.kind));
    }
    for task in 0..3u32 {
        let of_task: Vec<&EventKind> = seen
            .iter()
            .filter(|(t, _)| *t == task)
            .map(|(_, kind)| kind)
            .collect();
        let exit_code = i32::try_from(task).unwrap() + 10;
        assert_eq!(
            of_task,
            [&EventKind::Started, &EventKind::Exited(exit_code)],
            "proc {task} in {seen:?}"
        );
    }
}

#[tokio::test]
async fn hold_release_and_removal_are_pushed_with_the_hold_reason() {
    let (condor, shell, work) = backend("ev-hold");
    let mut events = open(&condor, shell.as_ref(), &work).await;
    let id = condor
        .submit(&unique_spec("ev-hold", "sleep 600\n"))
        .await
        .unwrap();
    assert_eq!(next_of(&mut events, &id).await.kind, EventKind::Started);

    stdout_of(
        shell.as_ref(),
        Command::new("condor_hold").args(["-reason", "disk quota of project p7", id.as_str()]),
    )
    .await;
    let reason = format!(
        "disk quota of project p7 (by user {})",
        login("htcondor").user
    );
    // A running proc is first taken off its node.
    let held = until(&mut events, &id, |k| matches!(k, EventKind::Held(_))).await;
    assert_eq!(
        held,
        [
            (0, EventKind::Evicted),
            (0, EventKind::Held(Some(reason.clone())))
        ],
        "the reason is HTCondor's HoldReason"
    );
    let polled = wait_until(&condor, &id, PATIENCE, "Held", |s| {
        s.state == JobState::Held
    })
    .await;
    assert_eq!(
        polled.reason.as_deref(),
        Some(reason.as_str()),
        "the poll says the same: {polled:?}"
    );

    stdout_of(
        shell.as_ref(),
        Command::new("condor_release").arg(id.as_str()),
    )
    .await;
    assert_eq!(next_of(&mut events, &id).await.kind, EventKind::Released);

    condor.cancel(&id).await.unwrap();
    let removed = until(&mut events, &id, |k| *k == EventKind::Removed).await;
    assert_eq!(
        removed.last(),
        Some(&(0, EventKind::Removed)),
        "{removed:?}"
    );
    assert!(
        removed.iter().all(|(_, k)| matches!(
            k,
            EventKind::Started | EventKind::Evicted | EventKind::Removed
        )),
        "only a restart after the release may come before the removal: {removed:?}"
    );
}

/// The ids of the follower's processes on the submit node: those whose command line names
/// the work directory (tail's, and the heartbeat loop's `sh -c` with its arguments).
async fn follower_processes(shell: &dyn Shell, work: &str) -> Vec<(String, String)> {
    let user = login("htcondor").user;
    let ps = stdout_of(
        shell,
        Command::new("ps").args(["-u", user.as_str(), "-o", "pid=,args="]),
    )
    .await;
    ps.lines()
        .filter(|line| line.contains(work) && !line.contains("ps -u"))
        .filter_map(|line| {
            let (pid, args) = line.trim_start().split_once(' ')?;
            Some((pid.to_owned(), args.to_owned()))
        })
        .collect()
}

/// Waits until no process of the follower is left on the submit node.
async fn until_gone(shell: &dyn Shell, work: &str) {
    tokio::time::timeout(PATIENCE, async {
        while !follower_processes(shell, work).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the follower of {work} outlived its channel by {PATIENCE:?}"));
}

#[tokio::test]
async fn the_follower_killed_on_the_submit_node_ends_the_stream_and_nothing_is_left() {
    let (condor, shell, work) = backend("ev-kill");
    let mut events = open(&condor, shell.as_ref(), &work).await;
    let processes = follower_processes(shell.as_ref(), &work).await;
    let tail = format!("tail -F -n 0 -- {work}/{EVENT_LOG}");
    let (pid, _) = processes
        .iter()
        .find(|(_, args)| *args == tail)
        .unwrap_or_else(|| panic!("a `{tail}` among {processes:#?}"));
    stdout_of(shell.as_ref(), Command::new("kill").arg(pid.as_str())).await;

    let end =
        tokio::time::timeout(PATIENCE, async { while events.recv().await.is_some() {} }).await;
    assert!(end.is_ok(), "the stream ended once tail was killed");
    until_gone(shell.as_ref(), &work).await;
}

#[tokio::test]
async fn a_dropped_stream_leaves_no_process_on_the_submit_node() {
    let (condor, shell, work) = backend("ev-drop");
    let events = open(&condor, shell.as_ref(), &work).await;
    assert_eq!(
        follower_processes(shell.as_ref(), &work).await.len(),
        2,
        "tail and the heartbeat loop"
    );
    drop(events);
    until_gone(shell.as_ref(), &work).await;
}
