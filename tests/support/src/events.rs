//! The job-event scenarios every backend whose job wrapper records events runs against its
//! real scheduler: a job's start and end, a failure, an array's tasks, a cancel, a killed
//! follower, and a follower that asks no scheduler anything.

use std::time::{Duration, Instant, SystemTime};

use crate::stdout_of;

use batchbridge_core::events::{EventKind, EventSource, EventStream, JobEvent};
use batchbridge_core::remote::WrapperEvents;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{ArraySpec, BatchBackend, JobId, JobSpec};

/// How long a scenario waits for the events it expects before it fails, saying what it saw.
pub const EVENTS_WITHIN: Duration = Duration::from_secs(180);

/// The events of job `id` in `events`, in the order they came: (task, kind).
pub fn of_job(events: &[JobEvent], id: &JobId) -> Vec<(u32, EventKind)> {
    events
        .iter()
        .filter(|event| &event.id == id)
        .map(|event| (event.task, event.kind.clone()))
        .collect()
}

/// Reads `stream` until `done` holds for the events read so far (every job's, in order)
/// and returns them; panics after [`EVENTS_WITHIN`], or when the stream ends first.
pub async fn read_until(
    stream: &mut EventStream,
    what: &str,
    done: impl Fn(&[JobEvent]) -> bool,
) -> Vec<JobEvent> {
    let deadline = Instant::now() + EVENTS_WITHIN;
    let mut events = Vec::new();
    while !done(&events) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.recv()).await {
            Ok(Some(event)) => events.push(event),
            Ok(None) => panic!("{what}: the event stream ended; read {events:?}"),
            Err(_) => panic!("{what}: not within {EVENTS_WITHIN:?}; read {events:?}"),
        }
    }
    events
}

/// Opens `backend`'s events, panicking when it has none.
pub async fn open(backend: &dyn BatchBackend) -> EventStream {
    let source = backend.events().expect("the backend has an event source");
    source.open().await.unwrap()
}

/// A job that exits 0 pushes Started then Exited(0), one that exits 3 Started then
/// Exited(3), each once; `spec` makes a spec from a name and a script.
pub async fn start_and_end(backend: &dyn BatchBackend, spec: impl Fn(&str, &str) -> JobSpec) {
    let mut stream = open(backend).await;
    // Whole seconds, by the cluster's clock (the test bed's clusters run on this machine).
    let before = SystemTime::now() - Duration::from_secs(1);
    let ok = backend
        .submit(&spec("events-ok", "echo hi\n"))
        .await
        .unwrap();
    let failed = backend
        .submit(&spec("events-fail", "exit 3\n"))
        .await
        .unwrap();
    let ended = |events: &[JobEvent], id: &JobId| {
        of_job(events, id)
            .iter()
            .any(|(_, kind)| matches!(kind, EventKind::Exited(_)))
    };
    let events = read_until(&mut stream, "both jobs' ends", |events| {
        ended(events, &ok) && ended(events, &failed)
    })
    .await;
    assert_eq!(
        of_job(&events, &ok),
        [(0, EventKind::Started), (0, EventKind::Exited(0))],
        "job {ok}"
    );
    assert_eq!(
        of_job(&events, &failed),
        [(0, EventKind::Started), (0, EventKind::Exited(3))],
        "job {failed}"
    );
    // Each carries when it happened, so that one heard late still dates the job rightly.
    let after = SystemTime::now();
    for event in events.iter().filter(|e| e.id == ok || e.id == failed) {
        let at = event
            .at
            .unwrap_or_else(|| panic!("{event:?} carries no time"));
        assert!(
            before <= at && at <= after,
            "{event:?}: not between {before:?} and {after:?}"
        );
    }
}

/// An array of three tasks, task 1 failing, pushes each task's start and end under the id
/// submit returned.
pub async fn array_tasks(backend: &dyn BatchBackend, spec: impl Fn(&str, &str) -> JobSpec) {
    let mut stream = open(backend).await;
    let mut array = spec(
        "events-array",
        "[ \"$BATCHBRIDGE_TASK_INDEX\" = 1 ] && exit 1\nexit 0\n",
    );
    array.array = Some(ArraySpec::new(3));
    let id = backend.submit(&array).await.unwrap();
    let events = read_until(&mut stream, "the array's three ends", |events| {
        of_job(events, &id)
            .iter()
            .filter(|(_, kind)| matches!(kind, EventKind::Exited(_)))
            .count()
            == 3
    })
    .await;
    let mut by_task = of_job(&events, &id);
    // Tasks run side by side: only each task's own order is fixed.
    by_task.sort_by_key(|(task, kind)| (*task, *kind != EventKind::Started));
    assert_eq!(
        by_task,
        [
            (0, EventKind::Started),
            (0, EventKind::Exited(0)),
            (1, EventKind::Started),
            (1, EventKind::Exited(1)),
            (2, EventKind::Started),
            (2, EventKind::Exited(0)),
        ],
        "array {id}: {events:?}"
    );
    for task in 0..3 {
        let kinds: Vec<_> = of_job(&events, &id)
            .into_iter()
            .filter(|(t, _)| *t == task)
            .map(|(_, kind)| kind)
            .collect();
        assert_eq!(kinds[0], EventKind::Started, "task {task} starts first");
    }
}

/// A running job cancelled pushes Signalled(15) after its start, and nothing else.
pub async fn cancel_running(backend: &dyn BatchBackend, spec: impl Fn(&str, &str) -> JobSpec) {
    let mut stream = open(backend).await;
    let id = backend
        .submit(&spec("events-cancel", "sleep 300\n"))
        .await
        .unwrap();
    let mut events = read_until(&mut stream, "the job's start", |events| {
        !of_job(events, &id).is_empty()
    })
    .await;
    backend.cancel(&id).await.unwrap();
    events.extend(
        read_until(&mut stream, "the cancelled job's end", |events| {
            !of_job(events, &id).is_empty()
        })
        .await,
    );
    assert_eq!(
        of_job(&events, &id),
        [(0, EventKind::Started), (0, EventKind::Signalled(15))],
        "job {id}"
    );
}

/// A follower whose processes are killed on the cluster (by their ids, found by the events
/// directory `dir` on their command line, which must be this follower's alone) ends its
/// stream; `shell` reaches the host it runs on.
pub async fn killed_follower_ends_the_stream(
    shell: &dyn Shell,
    source: &dyn EventSource,
    dir: &str,
) {
    let mut stream = source.open().await.unwrap();
    // The follower's shell and its listing loop: `sh -c SCRIPT sh DIR TICK...` (awk has no
    // DIR on its command line, and ends when the loop does).
    let find = Command::sh("pgrep -f -- \" sh $1 [0-9]\" || true", [dir]);
    let deadline = Instant::now() + EVENTS_WITHIN;
    let listed = loop {
        let found = shell.run(&find).await.unwrap().stdout_text();
        if found.lines().count() >= 2 {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no follower processes for {dir}: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // A subshell of the loop has its command line too, and may have ended since it was
    // listed ("No such process"); whether the follower itself died is what the stream's
    // end below tells.
    let kill = Command::sh(
        "kill -- \"$@\" 2>/dev/null; exit 0",
        listed.split_whitespace(),
    );
    shell.run(&kill).await.unwrap();
    let ended = tokio::time::timeout(EVENTS_WITHIN, async {
        while stream.recv().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream did not end with its follower");
}

/// The follower asks no scheduler anything: run with a `PATH` whose first directory holds
/// a stand-in for each of `tools` that writes its name to a log, it passes on `event_dir`'s
/// events (one is written here) and the log stays empty. `scratch` is a fresh directory on
/// the host `shell` reaches.
pub async fn follower_runs_no_scheduler_command(
    shell: &dyn Shell,
    events_dir: &str,
    scratch: &str,
    tools: &[&str],
) {
    let traps = Command::sh(
        r#"bin=$1/bin log=$1/ran
mkdir -p "$bin" || exit
shift
for tool in "$@"; do
    printf '#!/bin/sh\necho "$0" >>"%s"\n' "$log" >"$bin/$tool" && chmod +x "$bin/$tool" || exit
done"#,
        std::iter::once(scratch).chain(tools.iter().copied()),
    );
    shell.run(&traps).await.unwrap().check("traps").unwrap();
    let follower = WrapperEvents::follower(events_dir);
    let trapped = Command::new("env")
        .arg(format!("PATH={scratch}/bin:/usr/local/bin:/usr/bin:/bin"))
        .arg(follower.get_program())
        .args(follower.get_args().iter().cloned());
    let mut lines = shell.stream(&trapped).await.unwrap();
    let name = "4242.0.exit.0";
    let touch = Command::new("touch").arg(format!("{events_dir}/{name}"));
    shell.run(&touch).await.unwrap().check("touch").unwrap();
    let deadline = Instant::now() + EVENTS_WITHIN;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, lines.recv()).await;
        match line {
            Ok(Some(Ok(line))) if line == name => break,
            Ok(Some(Ok(_))) => {}
            other => panic!("the follower never printed {name}: {other:?}"),
        }
    }
    drop(lines);
    let ran = shell
        .run(&Command::sh(
            "cat -- \"$1/ran\" 2>/dev/null; exit 0",
            [scratch],
        ))
        .await
        .unwrap()
        .stdout_text();
    assert_eq!(ran, "", "the follower ran scheduler commands");
    let tidy = Command::new("rm").args(["-rf", "--", scratch, &format!("{events_dir}/{name}")]);
    shell.run(&tidy).await.unwrap().check("rm").unwrap();
}

/// A work directory of the calling test's own under the login directory of the host
/// `shell` reaches, with its `events/` created: (work directory, events directory), both
/// absolute, so that a follower of it is the test's alone. [`remove`] takes it away.
pub async fn own_work_dir(shell: &dyn Shell, name: &str) -> (String, String) {
    let home = stdout_of(shell, Command::new("pwd")).await;
    let key = batchbridge_core::conformance::unique_key(name);
    let work = format!("{}/.batchbridge/{key}", home.trim());
    let events = format!("{work}/events");
    stdout_of(shell, Command::new("mkdir").args(["-p", &events])).await;
    (work, events)
}

/// Removes a directory of [`own_work_dir`].
pub async fn remove(shell: &dyn Shell, work: &str) {
    stdout_of(shell, Command::new("rm").args(["-rf", "--", work])).await;
}
