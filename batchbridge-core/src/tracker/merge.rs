//! How a pushed event changes what the tracker knows of a job. Pure, so that every rule is
//! a row of the table in the tests.
//!
//! The rules: an event never takes a job out of a terminal state; a repeat of an event
//! already seen for a task is a duplicate (an event source's runs may replay what they
//! read before); `Started` makes a job Running; an exit code from 0 to 128 ends a job that
//! is not an array ([`TaskEnd::status`] decides the state and cause); `Held` makes it
//! Held with the reason; `Released` and `Evicted` put it back to Queued (`Evicted` as
//! [`requeued`](JobStatus::requeued), its count one more). Endings that look
//! alike from the job's side (a signal, a removal, an exit above 128: a cancel, a wall-time
//! limit, the OOM killer and a preemption all end a script so; exit
//! [`NOT_STARTED_EXIT_CODE`], a script that could not start or one that exited so) decide
//! nothing: they ask for an early poll, so that the backend's own words set the cause. An array goes Running at
//! its first started task and is ended by events only once every task's end is known; its
//! holds and evictions are left to the poll. Before the first poll of a job, which comes
//! at once for a newly followed one, events are only remembered (whether it is an array is
//! not known yet): its ends apply right after that poll ([`ended_by_events`]).

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::backend::JobId;
use crate::events::{EventKind, NATIVE_STATE_EVENT};
use crate::spec::MAX_ARRAY_TASKS;
use crate::state::{JobState, JobStatus};
use crate::wrapper::{NOT_STARTED_EXIT_CODE, TaskEnd};

/// The highest exit code that can only be the script's own `exit`: a shell reports a
/// script ended by signal N as 128 + N.
const LAST_PLAIN_EXIT_CODE: i32 = 128;

/// What events told of one job's tasks: at most one entry per task the job can have (its
/// polled task count, or [`MAX_ARRAY_TASKS`] before the first poll), so a flood of events
/// costs no memory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct TaskEvents {
    /// The kinds of event seen, per task, one bit each ([`kind_bit`]).
    seen: BTreeMap<u32, u8>,
    /// The exit code of each task that an event ended unambiguously, and when it ended.
    exited: BTreeMap<u32, (i32, SystemTime)>,
}

impl TaskEvents {
    /// Forgets tasks a job does not have, once a poll told how many it has.
    pub(super) fn keep_tasks_below(&mut self, total: u32) {
        self.seen.retain(|task, _| *task < total);
        self.exited.retain(|task, _| *task < total);
    }

    /// How many tasks events told anything of.
    #[cfg(test)]
    pub(super) fn tasks(&self) -> usize {
        self.seen.len()
    }
}

/// What to do with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Merge {
    /// Record this status, as a poll's would be.
    Observe(Box<JobStatus>),
    /// The event cannot decide the job's state: poll the job early.
    PollEarly,
    /// Nothing: a duplicate, a task the job does not have, a job already ended, or an
    /// event left to the poll.
    Ignore,
}

/// What event `kind` of task `task` of job `id` means, given the job's current status
/// (`None` before its first poll) and what earlier events told of its tasks (updated here).
/// `at` is when it happened: the time the event carries, else when it arrived.
pub(super) fn merge(
    id: &JobId,
    current: Option<&JobStatus>,
    known: &mut TaskEvents,
    task: u32,
    kind: &EventKind,
    at: SystemTime,
) -> Merge {
    let total = match current {
        None => MAX_ARRAY_TASKS,
        Some(status) => task_total(status),
    };
    if task >= total {
        return Merge::Ignore;
    }
    let seen = known.seen.entry(task).or_default();
    if *seen & kind_bit(kind) != 0 {
        return Merge::Ignore;
    }
    *seen |= kind_bit(kind);
    if let EventKind::Exited(code) = kind
        && is_plain_exit(*code)
    {
        known.exited.insert(task, (*code, at));
    }
    let Some(current) = current else {
        return Merge::Ignore;
    };
    if current.state.is_terminal() {
        return Merge::Ignore;
    }
    let array = current.tasks.is_some();
    match kind {
        EventKind::Started if current.state == JobState::Running => Merge::Ignore,
        EventKind::Started => Merge::Observe(Box::new(running(current, at))),
        EventKind::Exited(code) if is_plain_exit(*code) => ended_by_events(id, current, known)
            .map_or(Merge::Ignore, |ended| Merge::Observe(Box::new(ended))),
        // No shell exits with a negative code: garbage, ignored.
        EventKind::Exited(..0) => Merge::Ignore,
        EventKind::Exited(_) | EventKind::Signalled(_) | EventKind::Removed => Merge::PollEarly,
        EventKind::Held(_) | EventKind::Released | EventKind::Evicted if array => Merge::Ignore,
        EventKind::Held(reason) if current.state == JobState::Held && current.reason == *reason => {
            Merge::Ignore
        }
        EventKind::Released | EventKind::Evicted if current.state == JobState::Queued => {
            Merge::Ignore
        }
        EventKind::Held(reason) => {
            let mut held = from_event(current, JobState::Held);
            held.reason.clone_from(reason);
            Merge::Observe(Box::new(held))
        }
        EventKind::Released => Merge::Observe(Box::new(from_event(current, JobState::Queued))),
        EventKind::Evicted => {
            // Taken off its node after it had started: it waits to run again, requeued
            // (the next poll brings the scheduler's own count).
            let mut requeued = from_event(current, JobState::Queued);
            requeued.requeues += 1;
            Merge::Observe(Box::new(requeued))
        }
    }
}

/// The job's end, once events told how every one of its tasks exited; `None` while a task's
/// end is unknown, or when the job already ended. It ended when its last task did, as the
/// events tell: an event heard late must not stretch the job's run time.
pub(super) fn ended_by_events(
    id: &JobId,
    current: &JobStatus,
    known: &TaskEvents,
) -> Option<JobStatus> {
    if current.state.is_terminal() {
        return None;
    }
    let ends: Vec<(i32, SystemTime)> = (0..task_total(current))
        .map(|task| known.exited.get(&task).copied())
        .collect::<Option<_>>()?;
    let last_end = ends.iter().map(|(_, at)| *at).max()?;
    let tasks: Vec<JobStatus> = ends.iter().map(|(code, _)| task_end(*code)).collect();
    let mut ended = if current.tasks.is_some() {
        let tasks: Vec<Option<&JobStatus>> = tasks.iter().map(Some).collect();
        JobStatus::of_array(id.as_str(), "job events", &tasks)
    } else {
        tasks.into_iter().next()?
    };
    ended.native_state = NATIVE_STATE_EVENT.to_owned();
    ended.queue.clone_from(&current.queue);
    ended.submitted_at = current.submitted_at;
    ended.started_at = current.started_at;
    ended.ended_at = Some(last_end);
    Some(ended)
}

/// How many tasks a polled job has: its array's count, or 1.
fn task_total(status: &JobStatus) -> u32 {
    status.tasks.map_or(1, |tasks| tasks.total)
}

/// A task's status from its exit code ([`TaskEnd::status`]).
fn task_end(code: i32) -> JobStatus {
    TaskEnd::Exit(code).status(false)
}

/// Whether exit code `code` can only be the script's own `exit`: 0 to 128 (a shell
/// reports a script ended by signal N as 128 + N), except [`NOT_STARTED_EXIT_CODE`], which
/// the wrappers also exit with when the script could not be started (the backend's poll
/// tells which, from the task's reason file).
fn is_plain_exit(code: i32) -> bool {
    (0..=LAST_PLAIN_EXIT_CODE).contains(&code) && code != NOT_STARTED_EXIT_CODE
}

/// The job's status in `state` as an event says, keeping what polls said of it otherwise
/// (queue, submit time, task counts).
fn from_event(current: &JobStatus, state: JobState) -> JobStatus {
    let mut status = current.clone();
    status.state = state;
    status.native_state = NATIVE_STATE_EVENT.to_owned();
    status.reason = None;
    status
}

fn running(current: &JobStatus, at: SystemTime) -> JobStatus {
    let mut status = from_event(current, JobState::Running);
    status.started_at = status.started_at.or(Some(at));
    status.expected_start_at = None;
    status
}

/// One bit per kind of event, so a task's seen kinds fit a byte.
fn kind_bit(kind: &EventKind) -> u8 {
    match kind {
        EventKind::Started => 1,
        EventKind::Exited(_) => 1 << 1,
        EventKind::Signalled(_) => 1 << 2,
        EventKind::Held(_) => 1 << 3,
        EventKind::Released => 1 << 4,
        EventKind::Evicted => 1 << 5,
        EventKind::Removed => 1 << 6,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cause::FailureCause;
    use crate::state::TaskCounts;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// A status as a poll would report it.
    fn polled(state: JobState) -> JobStatus {
        let mut status = JobStatus::new(state, "POLLED").with_queue("batch");
        status.submitted_at = Some(at(100));
        status
    }

    fn array(state: JobState, total: u32) -> JobStatus {
        let mut status = polled(state);
        status.tasks = Some(TaskCounts::from_states(
            (0..total).map(|_| JobState::Queued),
        ));
        status
    }

    /// What an event made of a job: its expected observation, built from the status the
    /// event met.
    fn evented(current: &JobStatus, state: JobState) -> JobStatus {
        let mut status = current.clone();
        status.state = state;
        status.native_state = NATIVE_STATE_EVENT.to_owned();
        status.reason = None;
        status
    }

    fn started(current: &JobStatus) -> Merge {
        let mut status = evented(current, JobState::Running);
        status.started_at = Some(at(200));
        Merge::Observe(Box::new(status))
    }

    fn ended(
        current: &JobStatus,
        state: JobState,
        code: i32,
        cause: Option<FailureCause>,
    ) -> Merge {
        let mut status = evented(current, state);
        status.exit_code = Some(code);
        status.cause = cause;
        status.ended_at = Some(at(200));
        Merge::Observe(Box::new(status))
    }

    /// A row of the table: its name, the job's current status, the events seen before
    /// (task, kind), the event (task, kind), and what the merge must make of it.
    type Case = (
        &'static str,
        Option<JobStatus>,
        Vec<(u32, EventKind)>,
        (u32, EventKind),
        Merge,
    );

    /// Each row: the job's current status, the events seen before (task, kind), the event
    /// (task, kind), and what the merge must make of it.
    #[test]
    fn one_event_against_a_job_s_status() {
        use EventKind::*;
        use JobState::{Cancelled, Failed, Queued, Running, Succeeded};
        let queued = polled(Queued);
        let running = polled(Running);
        let mut held_reason = evented(&queued, JobState::Held);
        held_reason.reason = Some("disk quota".into());
        let cases: Vec<Case> = vec![
            (
                "started",
                Some(queued.clone()),
                vec![],
                (0, Started),
                started(&queued),
            ),
            (
                "started, already running",
                Some(running.clone()),
                vec![],
                (0, Started),
                Merge::Ignore,
            ),
            (
                "a start before the first poll waits for it (array or not?)",
                None,
                vec![],
                (0, Started),
                Merge::Ignore,
            ),
            (
                "held again with the same reason",
                Some({
                    let mut held = polled(JobState::Held);
                    held.reason = Some("disk quota".into());
                    held
                }),
                vec![],
                (0, Held(Some("disk quota".into()))),
                Merge::Ignore,
            ),
            (
                "released while already queued",
                Some(queued.clone()),
                vec![],
                (0, Released),
                Merge::Ignore,
            ),
            (
                "an end before the first poll waits for it",
                None,
                vec![],
                (0, Exited(0)),
                Merge::Ignore,
            ),
            (
                "exit 0",
                Some(running.clone()),
                vec![(0, Started)],
                (0, Exited(0)),
                ended(&running, Succeeded, 0, None),
            ),
            (
                "exit 3",
                Some(running.clone()),
                vec![],
                (0, Exited(3)),
                ended(&running, Failed, 3, Some(FailureCause::ExitCode(3))),
            ),
            (
                "exit 128 is still the script's",
                Some(running.clone()),
                vec![],
                (0, Exited(128)),
                ended(&running, Failed, 128, Some(FailureCause::ExitCode(128))),
            ),
            (
                "exit 70: the script never started, or exited 70 itself? poll",
                Some(running.clone()),
                vec![],
                (0, Exited(NOT_STARTED_EXIT_CODE)),
                Merge::PollEarly,
            ),
            (
                "exit 0 of a queued job (ran between polls)",
                Some(queued.clone()),
                vec![],
                (0, Exited(0)),
                ended(&queued, Succeeded, 0, None),
            ),
            (
                "exit 137 looks like a kill: poll",
                Some(running.clone()),
                vec![],
                (0, Exited(137)),
                Merge::PollEarly,
            ),
            (
                "a signal: cancel, limit or OOM? poll",
                Some(running.clone()),
                vec![],
                (0, Signalled(9)),
                Merge::PollEarly,
            ),
            (
                "removed: poll",
                Some(queued.clone()),
                vec![],
                (0, Removed),
                Merge::PollEarly,
            ),
            (
                "a negative exit is garbage",
                Some(running.clone()),
                vec![],
                (0, Exited(-1)),
                Merge::Ignore,
            ),
            (
                "held with a reason",
                Some(queued.clone()),
                vec![],
                (0, Held(Some("disk quota".into()))),
                Merge::Observe(Box::new(held_reason)),
            ),
            (
                "released",
                Some(polled(JobState::Held)),
                vec![],
                (0, Released),
                Merge::Observe(Box::new(evented(&polled(JobState::Held), Queued))),
            ),
            (
                "evicted",
                Some(running.clone()),
                vec![(0, Started)],
                (0, Evicted),
                Merge::Observe(Box::new(evented(&running, Queued).with_requeues(1))),
            ),
            (
                "a duplicate start",
                Some(queued.clone()),
                vec![(0, Started)],
                (0, Started),
                Merge::Ignore,
            ),
            (
                "a duplicate end",
                Some(running.clone()),
                vec![(0, Exited(0))],
                (0, Exited(0)),
                Merge::Ignore,
            ),
            (
                "a duplicate signal asks once",
                Some(running.clone()),
                vec![(0, Signalled(15))],
                (0, Signalled(15)),
                Merge::Ignore,
            ),
            (
                "never out of a terminal state",
                Some(polled(Succeeded)),
                vec![],
                (0, Started),
                Merge::Ignore,
            ),
            (
                "a terminal state is the poll's",
                Some(polled(Cancelled)),
                vec![],
                (0, Exited(0)),
                Merge::Ignore,
            ),
            (
                "no task 1 without an array",
                Some(running.clone()),
                vec![],
                (1, Exited(0)),
                Merge::Ignore,
            ),
            (
                "no task beyond the array",
                Some(array(Running, 3)),
                vec![],
                (3, Exited(0)),
                Merge::Ignore,
            ),
            (
                "an array runs at its first start",
                Some(array(Queued, 3)),
                vec![],
                (2, Started),
                started(&array(Queued, 3)),
            ),
            (
                "an array is not ended by one task",
                Some(array(Running, 3)),
                vec![(0, Exited(0))],
                (1, Exited(0)),
                Merge::Ignore,
            ),
            (
                "an array's task signalled: poll",
                Some(array(Running, 3)),
                vec![],
                (1, Signalled(9)),
                Merge::PollEarly,
            ),
            (
                "an array's holds are the poll's",
                Some(array(Queued, 3)),
                vec![],
                (1, Held(None)),
                Merge::Ignore,
            ),
        ];
        for (name, current, before, (task, kind), expected) in cases {
            let id = JobId::from("7");
            let mut known = TaskEvents::default();
            for (task, kind) in before {
                merge(&id, current.as_ref(), &mut known, task, &kind, at(150));
            }
            let merged = merge(&id, current.as_ref(), &mut known, task, &kind, at(200));
            assert_eq!(merged, expected, "{name}");
        }
    }

    /// An array ends by events once every task's end is known, with the array's state and
    /// the cause of its first failed task.
    #[test]
    fn an_array_ends_when_every_task_s_end_is_known() {
        let id = JobId::from("7");
        let current = array(JobState::Running, 3);
        let mut known = TaskEvents::default();
        for (task, code) in [(2, 0), (0, 0)] {
            let merged = merge(
                &id,
                Some(&current),
                &mut known,
                task,
                &EventKind::Exited(code),
                at(150),
            );
            assert_eq!(merged, Merge::Ignore, "task {task} of 3");
        }
        let Merge::Observe(ended) = merge(
            &id,
            Some(&current),
            &mut known,
            1,
            &EventKind::Exited(4),
            at(200),
        ) else {
            panic!("the last task's end ends the array");
        };
        assert_eq!(ended.state, JobState::Failed);
        assert_eq!(ended.cause, Some(FailureCause::ExitCode(4)));
        assert_eq!(ended.native_state, NATIVE_STATE_EVENT);
        let counts = ended.tasks.unwrap();
        assert_eq!((counts.total, counts.succeeded, counts.failed), (3, 2, 1));
        assert_eq!(
            (ended.queue.as_deref(), ended.ended_at),
            (Some("batch"), Some(at(200)))
        );
    }

    /// Ends seen before the first poll apply once the poll said what the job is; for an
    /// array, only once all of its tasks ended.
    #[test]
    fn ends_seen_before_the_first_poll_apply_after_it() {
        let id = JobId::from("7");
        let mut known = TaskEvents::default();
        for kind in [EventKind::Started, EventKind::Exited(0)] {
            merge(&id, None, &mut known, 0, &kind, at(150));
        }
        let single = polled(JobState::Running);
        let ended = ended_by_events(&id, &single, &known).unwrap();
        assert_eq!(
            (ended.state, ended.exit_code),
            (JobState::Succeeded, Some(0))
        );
        assert_eq!(
            ended_by_events(&id, &array(JobState::Running, 2), &known),
            None
        );
        assert_eq!(
            ended_by_events(&id, &polled(JobState::Failed), &known),
            None,
            "already over"
        );
    }

    /// Events for tasks a job cannot have leave nothing behind, whatever their number.
    #[test]
    fn knowledge_stays_bounded_by_the_job_s_tasks() {
        let id = JobId::from("7");
        let mut known = TaskEvents::default();
        for task in (0..1_000_000).step_by(7) {
            merge(&id, None, &mut known, task, &EventKind::Started, at(1));
        }
        assert!(
            known.tasks() <= MAX_ARRAY_TASKS as usize,
            "{}",
            known.tasks()
        );
        known.keep_tasks_below(1);
        assert_eq!(known.tasks(), 1);
        let running = polled(JobState::Running);
        for task in 0..1_000_000 {
            merge(
                &id,
                Some(&running),
                &mut known,
                task,
                &EventKind::Exited(1),
                at(1),
            );
        }
        assert_eq!(known.tasks(), 1);
    }
}
