//! The test bed's HTCondor pool (tests/testbed/htcondor.sh), reached as a regular user over
//! SSH, behaves as the backend will rely on: `queue N` makes one cluster of N procs, each
//! proc's exit code is in `condor_history -json`, and a finished job leaves `condor_q`.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use batchbridge_core::shell::Command;
use batchbridge_testbed::{htcondor_shell, stdout_of};

#[tokio::test]
async fn a_cluster_of_three_procs_reports_each_exit_code_in_history() {
    let shell = htcondor_shell();
    // Proc 1 fails; `$(Process)` is the submit language's macro for the proc number.
    let description = "executable = /bin/sh\n\
                       arguments = \"-c 'test $(Process) -ne 1 || exit 4'\"\n\
                       transfer_executable = false\n\
                       should_transfer_files = NO\n\
                       queue 3\n";
    let reply = stdout_of(
        &shell,
        Command::new("condor_submit")
            .args(["-terse", "-"])
            .stdin(description),
    )
    .await;
    let cluster = reply.split('.').next().unwrap().trim().to_owned();
    assert!(
        reply.trim().ends_with(".2"),
        "-terse prints FIRST - LAST: {reply:?}"
    );

    let deadline = Instant::now() + Duration::from_secs(120);
    let records = loop {
        let history = stdout_of(
            &shell,
            Command::new("condor_history").args([
                cluster.as_str(),
                "-json",
                "-attributes",
                "ProcId,JobStatus,ExitCode",
            ]),
        )
        .await;
        let records: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
        if records.len() == 3 {
            break records;
        }
        assert!(Instant::now() < deadline, "history after 120 s: {history}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut ends: Vec<(u64, u64, u64)> = records
        .iter()
        .map(|r| {
            let n = |name: &str| r[name].as_u64().unwrap();
            (n("ProcId"), n("JobStatus"), n("ExitCode"))
        })
        .collect();
    ends.sort_unstable();
    assert_eq!(
        ends,
        [(0, 4, 0), (1, 4, 4), (2, 4, 0)],
        "JobStatus 4 is completed"
    );

    let queue = stdout_of(
        &shell,
        Command::new("condor_q").args([cluster.as_str(), "-json"]),
    )
    .await;
    assert_eq!(queue.trim(), "", "finished procs have left the queue");
}
