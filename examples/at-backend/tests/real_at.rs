//! What the conformance suite does not look at, against the test bed's real atd through its
//! sshd: a cancelled job's processes are gone, a submit cut off before its job number was
//! recorded finds its job in at, and a job starts in its working directory with its id.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_at::{AtBackend, AtConfig};
use batchbridge_core::conformance::{self, Config, unique_key};
use batchbridge_core::shell::{Command, Shell, SshShell};
use batchbridge_core::{BatchBackend, JobSpec, JobState, OutputRequest};
use batchbridge_testbed::ssh_facts;

/// The backend's default work directory, relative to `batch`'s home where commands start.
const WORK: &str = ".batchbridge/at";

fn backend() -> (AtBackend, SshShell) {
    let facts = ssh_facts();
    let backend = AtBackend::new(Arc::new(facts.key_shell()), AtConfig::default()).unwrap();
    (backend, facts.key_shell())
}

fn spec(name: &str, script: &str) -> JobSpec {
    JobSpec::new(unique_key(name), name, script)
}

/// Runs `script` (with `args` as `$1`…) as `batch` and returns whether it succeeded.
async fn remote(shell: &SshShell, script: &str, args: &[&str]) -> bool {
    shell
        .run(&Command::sh(script, args.iter().copied()))
        .await
        .unwrap()
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_running_job_leaves_no_process_behind() {
    let (at, shell) = backend();
    let spec = spec("cancel-stops", "sleep 600 &\necho $! >child.pid\nwait\n");
    let id = at.submit(&spec).await.unwrap();
    let config = Config::default();
    let child = format!("{WORK}/jobs/{}/child.pid", spec.key);
    let alive = "[ -s \"$1\" ] && kill -0 \"$(cat \"$1\")\" 2>/dev/null";
    let deadline = Instant::now() + Duration::from_secs(60);
    while !remote(&shell, alive, &[&child]).await {
        assert!(Instant::now() < deadline, "the job's sleep never started");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        conformance::wait_for(&at, &id, &config, "Running", |s| s.state
            == JobState::Running)
        .await
        .unwrap()
        .native_state,
        "="
    );

    at.cancel(&id).await.unwrap();
    let status = conformance::wait_terminal(&at, &id, &config).await.unwrap();
    assert_eq!(
        (status.state, status.signal),
        (JobState::Cancelled, Some(15))
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote(&shell, alive, &[&child]).await {
        assert!(
            Instant::now() < deadline,
            "the cancelled job's sleep still runs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    at.cancel(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_cut_off_before_the_job_number_was_recorded_finds_its_job_in_at() {
    let (at, shell) = backend();
    let spec = spec("cut-off", "sleep 600\n");
    let id = at.submit(&spec).await.unwrap();
    // What a submit cut off between at's reply and the record leaves: the key claimed, no
    // job number in its directory.
    let job_id = format!("{WORK}/jobs/{}/job_id", spec.key);
    assert!(remote(&shell, "rm -- \"$1\"", &[&job_id]).await);

    assert_eq!(at.find(&spec.key).await.unwrap(), Some(id.clone()));
    assert_eq!(
        at.submit(&spec).await.unwrap(),
        id,
        "a second submit made a second job"
    );
    at.cancel(&id).await.unwrap();
    let status = conformance::wait_terminal(&at, &id, &Config::default())
        .await
        .unwrap();
    assert_eq!(status.state, JobState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_starts_in_its_working_directory_with_its_id_in_a_queue_of_its_choice() {
    let (at, _) = backend();
    let mut spec = spec(
        "workdir",
        "pwd\necho \"$BATCHBRIDGE_JOB_ID $BATCHBRIDGE_TASK_INDEX\"\n",
    );
    spec.working_dir = Some("/tmp".into());
    spec.queue = Some("c".into());
    let id = at.submit(&spec).await.unwrap();
    let status = conformance::wait_terminal(&at, &id, &Config::default())
        .await
        .unwrap();
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let output = at
        .fetch_output(&id, &OutputRequest::tail(1024))
        .await
        .unwrap();
    assert_eq!(output.stdout.text(), format!("/tmp\n{id} 0\n"));
}
