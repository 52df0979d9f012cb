//! `OutputFollower`, `ArrayOutputFollower` and `Tracker::follow_output` on real jobs of the
//! local backend: every byte of both streams passed on once and in order, however far one
//! stream runs ahead of the other, every task of an array followed while it runs, and the
//! rest read after the job ended.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::follow::{ArrayOutputFollower, OutputFollower, OutputUpdate};
use batchbridge_core::{
    ArraySpec, BatchBackend, JobKey, JobSpec, JobState, LocalBackend, MAX_OUTPUT_CHUNK, Tracker,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_streams_arrive_whole_when_one_is_far_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::new(dir.path()).unwrap());
    let tracker = Tracker::new(backend.clone(), Duration::from_millis(100)).unwrap();
    // stdout runs more than a chunk ahead of stderr, then stderr catches up while stdout
    // waits, then both grow after a pause.
    let big = MAX_OUTPUT_CHUNK + 3_000_000;
    let script = format!(
        "head -c {big} /dev/zero | tr '\\0' o; echo one >&2; sleep 1; seq 1 100000 >&2; sleep 1; echo end; echo end >&2"
    );
    let spec = JobSpec::new(JobKey::new("ahead").unwrap(), "ahead", script);
    let id = backend.submit(&spec).await.unwrap();

    let (mut stdout, mut stderr, mut pieces) = (Vec::new(), Vec::new(), 0);
    let mut follower = OutputFollower::new(id);
    let status = follower
        .follow(&tracker, Duration::from_millis(100), |new| {
            pieces += 1;
            stdout.extend(new.stdout);
            stderr.extend(new.stderr);
        })
        .await
        .unwrap();
    assert_eq!(status.state, JobState::Succeeded);

    let mut expected_stdout = vec![b'o'; usize::try_from(big).unwrap()];
    expected_stdout.extend(b"end\n");
    assert!(
        stdout == expected_stdout,
        "stdout: {} bytes, expected {}",
        stdout.len(),
        expected_stdout.len()
    );
    let numbers: String = (1..=100_000).map(|n| format!("{n}\n")).collect();
    assert_eq!(
        String::from_utf8(stderr).unwrap(),
        format!("one\n{numbers}end\n")
    );
    assert_eq!(
        follower.offsets(),
        (big + 4, u64::try_from(4 + numbers.len() + 4).unwrap())
    );
    assert!(pieces >= 2, "passed on as it grew, not once at the end");
}

/// `follow_output` of a job printing a line every 100 ms for 10 s: every line arrives, in
/// order, in many pieces while the job runs, and the stream ends with the job's end; a
/// stream started at an offset it handed out resumes from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_output_streams_a_running_job_line_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::new(dir.path()).unwrap());
    let tracker = Tracker::new(backend.clone(), Duration::from_millis(500)).unwrap();
    let script = "i=1; while [ $i -le 100 ]; do echo \"line $i\"; i=$((i + 1)); sleep 0.1; done; echo done >&2";
    let spec = JobSpec::new(JobKey::new("lines").unwrap(), "lines", script);
    let id = backend.submit(&spec).await.unwrap();

    let mut output = tracker.follow_output(id.clone());
    let (mut stdout, mut stderr, mut pieces, mut halfway) = (Vec::new(), Vec::new(), 0, None);
    let ended = loop {
        match output.next().await.unwrap().unwrap() {
            OutputUpdate::Output { new, resume_at } => {
                pieces += 1;
                stdout.extend(new.stdout);
                stderr.extend(new.stderr);
                if halfway.is_none() && stdout.len() > 300 {
                    halfway = Some((resume_at, stdout.len()));
                }
            }
            OutputUpdate::Ended(status) => break status,
            other => panic!("unexpected update {other:?}"),
        }
    };
    assert!(output.next().await.is_none(), "nothing after the end");
    assert_eq!(ended.state, JobState::Succeeded);
    let lines: String = (1..=100).map(|n| format!("line {n}\n")).collect();
    assert_eq!(String::from_utf8(stdout).unwrap(), lines);
    assert_eq!(stderr, b"done\n");
    assert!(pieces >= 5, "passed on as it grew, in {pieces} pieces");
    assert_eq!(tracker.followed(), 0, "the ended stream let its job go");

    let ((stdout_at, stderr_at), seen) = halfway.unwrap();
    let mut resumed = OutputFollower::new(id)
        .starting_at(stdout_at, stderr_at)
        .stream(&tracker);
    let mut rest = Vec::new();
    while let Some(update) = resumed.next().await {
        if let OutputUpdate::Output { new, .. } = update.unwrap() {
            rest.extend(new.stdout);
        }
    }
    assert_eq!(String::from_utf8(rest).unwrap(), lines[seen..]);
}

/// Dropping the tracker ends its output streams with an error, and the job goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tracker_ends_its_output_streams() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::new(dir.path()).unwrap());
    let tracker = Tracker::new(backend.clone(), Duration::from_millis(100)).unwrap();
    let spec = JobSpec::new(JobKey::new("long").unwrap(), "long", "echo up; sleep 600");
    let id = backend.submit(&spec).await.unwrap();
    let mut output = tracker.follow_output(id.clone());
    let Some(Ok(OutputUpdate::Output { new, .. })) = output.next().await else {
        panic!("the first line arrives while the job runs");
    };
    assert_eq!(new.stdout, b"up\n");
    drop(tracker);
    let err = output.next().await.unwrap().unwrap_err();
    assert_eq!(err.message(), "the tracker stopped");
    assert!(output.next().await.is_none());
    assert_eq!(
        backend.status_of(&id).await.unwrap().state,
        JobState::Running
    );
    backend.cancel(&id).await.unwrap();
}

/// An array of 6 tasks, two running at a time, each printing a line every 200 ms for 2 s:
/// every task's lines arrive whole and in order, in pieces from tasks running side by side
/// (not one task after the other once the array ended), with stderr too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_of_an_array_is_followed_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::with_capacity(dir.path(), 2).unwrap());
    let tracker = Tracker::new(backend.clone(), Duration::from_millis(200)).unwrap();
    let script = "for i in 1 2 3 4 5 6 7 8 9 10; do echo \"task $BATCHBRIDGE_TASK_INDEX line $i\"; sleep 0.2; done; echo \"task $BATCHBRIDGE_TASK_INDEX done\" >&2";
    let mut spec = JobSpec::new(JobKey::new("tasks").unwrap(), "tasks", script);
    spec.array = Some(ArraySpec::new(6));
    let id = backend.submit(&spec).await.unwrap();

    let mut stdout = vec![String::new(); 6];
    let mut stderr = vec![String::new(); 6];
    let mut pieces = Vec::new();
    let status = ArrayOutputFollower::new(id, 6)
        .follow(&tracker, Duration::from_millis(100), |task, new| {
            pieces.push(task);
            stdout[task as usize].push_str(&String::from_utf8(new.stdout).unwrap());
            stderr[task as usize].push_str(&String::from_utf8(new.stderr).unwrap());
        })
        .await
        .unwrap();
    assert_eq!(status.state, JobState::Succeeded);
    for task in 0..6 {
        let lines: String = (1..=10)
            .map(|i| format!("task {task} line {i}\n"))
            .collect();
        assert_eq!(stdout[task], lines, "task {task}");
        assert_eq!(stderr[task], format!("task {task} done\n"), "task {task}");
    }
    assert!(
        pieces.windows(2).any(|pair| pair[1] < pair[0]),
        "tasks followed side by side while they ran, not in task order at the end: {pieces:?}"
    );
    assert!(pieces.len() > 12, "each task in several pieces: {pieces:?}");
}
