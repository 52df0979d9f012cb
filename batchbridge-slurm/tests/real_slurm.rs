//! The state and exit-code mapping fed with real `squeue` and `sacct` output from the test
//! bed's SLURM cluster (tests/testbed/slurm.sh), reached as a regular user over SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell, SshShell};
use batchbridge_core::{JobState, JobStatus};
use batchbridge_slurm::state::status_from;
use batchbridge_testbed::ssh_facts;

async fn sbatch(shell: &SshShell, options: &[&str], script: &str) -> String {
    let command = Command::new("sbatch")
        .args(["--parsable", "--output=/dev/null"])
        .args(options.iter().copied())
        .arg("--wrap")
        .arg(script);
    let out = shell.run(&command).await.unwrap().check("sbatch").unwrap();
    out.stdout_text().trim().to_owned()
}

/// squeue's view, mapped: `%T|%r` of one job seen with `-t all`.
async fn squeue_status(shell: &SshShell, id: &str) -> JobStatus {
    let out = shell
        .run(&Command::new("squeue").args(["-t", "all", "-h", "-j", id, "-o", "%T|%r"]))
        .await
        .unwrap()
        .check("squeue")
        .unwrap();
    let line = out.stdout_text();
    let (state, reason) = line
        .trim()
        .split_once('|')
        .unwrap_or_else(|| panic!("squeue printed {line:?}"));
    status_from(state, reason, None)
}

/// sacct's view, mapped, when it has a row for the job.
async fn sacct_status(shell: &SshShell, id: &str) -> Option<JobStatus> {
    let out = shell
        .run(&Command::new("sacct").args([
            "-X",
            "-P",
            "-n",
            "-o",
            "State,Reason,ExitCode",
            "-j",
            id,
        ]))
        .await
        .unwrap()
        .check("sacct")
        .unwrap();
    let text = out.stdout_text();
    let fields: Vec<&str> = text.lines().next().unwrap_or("").split('|').collect();
    match fields.as_slice() {
        [state, reason, exit] => Some(status_from(state, reason, Some(exit))),
        _ => None,
    }
}

/// Polls `observe` until it yields a status `done` accepts; fails after 60 s.
async fn poll<F, Fut>(what: &str, observe: F, done: impl Fn(&JobStatus) -> bool) -> JobStatus
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<JobStatus>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = observe().await;
        if let Some(status) = status.as_ref().filter(|s| done(s)) {
            return status.clone();
        }
        assert!(Instant::now() < deadline, "{what}: last seen {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_squeue(shell: &SshShell, id: &str, done: impl Fn(&JobStatus) -> bool) -> JobStatus {
    poll(
        &format!("squeue for job {id}"),
        || async { Some(squeue_status(shell, id).await) },
        done,
    )
    .await
}

/// sacct lags squeue by a second or two, so wait for its row to show the end.
async fn sacct_final_status(shell: &SshShell, id: &str) -> JobStatus {
    poll(
        &format!("sacct for job {id}"),
        || sacct_status(shell, id),
        |s| s.state.is_terminal(),
    )
    .await
}

#[tokio::test]
async fn finished_jobs_map_to_succeeded_and_failed_with_exit_codes() {
    let shell = ssh_facts().key_shell();
    let ok = sbatch(&shell, &[], "echo fine").await;
    let failing = sbatch(&shell, &[], "echo failing; exit 3").await;

    let ok_status = wait_squeue(&shell, &ok, |s| s.state.is_terminal()).await;
    assert_eq!(
        (ok_status.state, ok_status.native_state.as_str()),
        (JobState::Succeeded, "COMPLETED")
    );
    let failed = wait_squeue(&shell, &failing, |s| s.state.is_terminal()).await;
    assert_eq!(
        (failed.state, failed.native_state.as_str()),
        (JobState::Failed, "FAILED")
    );
    assert_eq!(failed.reason.as_deref(), Some("NonZeroExitCode"));

    let ok_final = sacct_final_status(&shell, &ok).await;
    assert_eq!(
        (ok_final.state, ok_final.exit_code),
        (JobState::Succeeded, Some(0))
    );
    let failed_final = sacct_final_status(&shell, &failing).await;
    assert_eq!(
        (
            failed_final.state,
            failed_final.exit_code,
            failed_final.signal
        ),
        (JobState::Failed, Some(3), None)
    );
}

#[tokio::test]
async fn impossible_and_held_jobs_wait_then_cancel() {
    let shell = ssh_facts().key_shell();
    let impossible = sbatch(&shell, &["-c", "64"], "echo never").await;
    let held = sbatch(&shell, &["--hold"], "echo never").await;

    let queued = wait_squeue(&shell, &impossible, |s| {
        s.reason.as_deref() == Some("PartitionConfig")
    })
    .await;
    assert_eq!(queued.state, JobState::Queued);
    let held_status = wait_squeue(&shell, &held, |s| s.native_state == "PENDING").await;
    assert_eq!(held_status.state, JobState::Held, "{held_status:?}");

    shell
        .run(&Command::new("scancel").args([&impossible, &held]))
        .await
        .unwrap()
        .check("scancel")
        .unwrap();
    for id in [&impossible, &held] {
        let cancelled = sacct_final_status(&shell, id).await;
        assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:?}");
        assert!(
            cancelled.native_state.starts_with("CANCELLED"),
            "{cancelled:?}"
        );
    }
}
