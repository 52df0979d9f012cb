//! `OutputFollower` on real jobs of the local backend: every byte of both streams passed on
//! once and in order, however far one stream runs ahead of the other, and the rest read
//! after the job ended.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::follow::OutputFollower;
use batchbridge_core::{
    BatchBackend, JobKey, JobSpec, JobState, LocalBackend, MAX_OUTPUT_CHUNK, Tracker,
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
