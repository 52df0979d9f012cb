//! The state and exit-code mapping fed with real `squeue` and `sacct` output, and the
//! backend's behaviour on a real cluster: on each of the test bed's two SLURM clusters
//! (22.05, tests/testbed/slurm.sh; 24.11, tests/testbed/slurm2.sh), reached as a regular
//! user over SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, SshShell};
use batchbridge_core::{JobState, JobStatus};
use batchbridge_slurm::state::status_from;
use batchbridge_testbed::{SlurmCluster, stdout_of};

on_both_clusters!(
    finished_jobs_map_to_succeeded_and_failed_with_exit_codes,
    impossible_and_held_jobs_wait_then_cancel,
    a_job_over_its_time_limit_ends_timeout,
    a_job_cancelled_on_the_cluster_side_shows_cancelled,
    a_job_purged_from_squeue_is_answered_by_sacct,
    an_invalid_partition_is_refused_clearly_and_frees_the_key,
    a_job_refused_in_the_middle_of_a_batch_leaves_the_others_submitted_once,
    a_job_no_node_could_hold,
    a_throttled_array_counts_its_tasks_and_its_failure,
    withdrawing_an_array_with_a_started_task_leaves_every_task_to_run,
    cancelling_someone_elses_job_is_permission_denied,
    a_large_environment_value_reaches_the_job_intact,
    the_largest_resources_a_spec_may_ask_for_reach_slurm_exactly,
    an_array_beyond_the_clusters_max_array_size_is_refused_naming_it,
    a_scripts_sbatch_directives_reach_slurm_field_by_field,
    a_job_preempted_with_requeue_waits_then_runs_again,
);

async fn sbatch(shell: &SshShell, options: &[&str], script: &str) -> String {
    let command = Command::new("sbatch")
        .args(["--parsable", "--output=/dev/null"])
        .args(options.iter().copied())
        .arg("--wrap")
        .arg(script);
    stdout_of(shell, command).await.trim().to_owned()
}

/// squeue's view, mapped: `%T|%r` of one job seen with `-t all`.
async fn squeue_status(shell: &SshShell, id: &str) -> JobStatus {
    let command = Command::new("squeue").args(["-t", "all", "-h", "-j", id, "-o", "%T|%r"]);
    let line = stdout_of(shell, command).await;
    let (state, reason) = line
        .trim()
        .split_once('|')
        .unwrap_or_else(|| panic!("squeue printed {line:?}"));
    status_from(state, reason, None)
}

/// sacct's view, mapped, when it has a row for the job.
async fn sacct_status(shell: &SshShell, id: &str) -> Option<JobStatus> {
    let command =
        Command::new("sacct").args(["-X", "-P", "-n", "-o", "State,Reason,ExitCode", "-j", id]);
    let text = stdout_of(shell, command).await;
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

async fn finished_jobs_map_to_succeeded_and_failed_with_exit_codes(cluster: SlurmCluster) {
    let shell = cluster.shell();
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

/// squeue's reason for a job asking for 64 CPUs, which the running node (16 CPUs) cannot
/// give: 22.05 queues it although no node could (PartitionConfig); 24.11 refuses such a job
/// at submission, so its test bed declares a 64-CPU node that stays down.
fn waits_for_64_cpus_because(cluster: SlurmCluster) -> &'static str {
    match cluster {
        SlurmCluster::Slurm2205 => "PartitionConfig",
        SlurmCluster::Slurm2411 => "ReqNodeNotAvail, UnavailableNodes:slurm2big",
    }
}

async fn impossible_and_held_jobs_wait_then_cancel(cluster: SlurmCluster) {
    let shell = cluster.shell();
    let impossible = sbatch(&shell, &["-c", "64"], "echo never").await;
    let held = sbatch(&shell, &["--hold"], "echo never").await;

    let queued = wait_squeue(&shell, &impossible, |s| {
        s.reason.as_deref() == Some(waits_for_64_cpus_because(cluster))
    })
    .await;
    assert_eq!(queued.state, JobState::Queued);
    let held_status = wait_squeue(&shell, &held, |s| s.native_state == "PENDING").await;
    assert_eq!(held_status.state, JobState::Held, "{held_status:?}");

    stdout_of(&shell, Command::new("scancel").args([&impossible, &held])).await;
    for id in [&impossible, &held] {
        let cancelled = sacct_final_status(&shell, id).await;
        assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:?}");
        assert!(
            cancelled.native_state.starts_with("CANCELLED"),
            "{cancelled:?}"
        );
    }
}

use batchbridge_core::{
    ArraySpec, BatchBackend, CancelledBy, ErrorKind, FailureCause, JobId, OutputRequest, Withdrawal,
};

async fn a_job_over_its_time_limit_ends_timeout(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec("timeout", "echo started\nsleep 600\n");
    spec.resources.wall_time = Some(Duration::from_secs(60));
    let id = slurm.submit(&spec).await.unwrap();
    let status = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(
        (status.state, status.native_state.as_str()),
        (JobState::Failed, "TIMEOUT"),
        "{status:?}"
    );
    assert_eq!(status.reason.as_deref(), Some("TimeLimit"), "{status:?}");
    assert_eq!(
        status.cause,
        Some(FailureCause::WallTimeExceeded),
        "{status:?}"
    );
    assert_eq!(status.queue.as_deref(), Some("debug"), "{status:?}");
    assert_eq!(
        status.signal,
        Some(15),
        "SLURM ends it with SIGTERM: {status:?}"
    );
    let output = slurm
        .fetch_output(&id, &OutputRequest::tail(100))
        .await
        .unwrap();
    assert_eq!(output.stdout.text(), "started\n");
}

async fn a_job_cancelled_on_the_cluster_side_shows_cancelled(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let id = slurm
        .submit(&common::spec("external-cancel", "sleep 600\n"))
        .await
        .unwrap();
    common::wait_for(&slurm, &id, "Running", |s| s.state == JobState::Running).await;
    let someone_else = cluster.shell();
    stdout_of(&someone_else, Command::new("scancel").arg(id.as_str())).await;
    let status = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert!(status.native_state.starts_with("CANCELLED"), "{status:?}");
    assert!(
        matches!(
            status.cause,
            Some(FailureCause::Cancelled(
                CancelledBy::Account(_) | CancelledBy::Unknown
            ))
        ),
        "not batchbridge's cancel: {status:?}"
    );
}

async fn a_job_purged_from_squeue_is_answered_by_sacct(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let id = slurm
        .submit(&common::spec("purged", "echo bye\nexit 6\n"))
        .await
        .unwrap();
    common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    common::wait_purged(&cluster.shell(), &id).await;
    let status = slurm.status(std::slice::from_ref(&id)).await.unwrap()[&id].clone();
    assert_eq!(
        (status.state, status.native_state.as_str(), status.exit_code),
        (JobState::Failed, "FAILED", Some(6)),
        "sacct's record: {status:?}"
    );
    assert_eq!(status.cause, Some(FailureCause::ExitCode(6)), "{status:?}");
    assert_eq!(status.queue.as_deref(), Some("debug"), "{status:?}");
    assert!(status.ended_at.is_some(), "{status:?}");
    assert!(slurm.capabilities().accounting);
    let output = slurm
        .fetch_output(&id, &OutputRequest::tail(10))
        .await
        .unwrap();
    assert_eq!(output.stdout.text(), "bye\n");
}

async fn an_invalid_partition_is_refused_clearly_and_frees_the_key(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec("bad-partition", "echo fixed\n");
    spec.queue = Some("no-such-partition".into());
    let err = slurm.submit(&spec).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    assert!(!err.is_temporary(), "{err}");
    assert!(
        err.message().contains("no-such-partition")
            && err.message().contains("Invalid partition name"),
        "{err}"
    );
    assert_eq!(
        slurm.find(&spec.key).await.unwrap(),
        None,
        "nothing left behind"
    );

    spec.queue = Some("debug".into());
    let id = slurm.submit(&spec).await.unwrap();
    let status = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(
        status.state,
        JobState::Succeeded,
        "the corrected spec runs: {status:?}"
    );
}

/// A batch whose middle job sbatch refuses: the jobs before and after it are submitted, the
/// refused one gets its own error, and the same batch again submits nothing new: SLURM
/// itself holds one job per key (by comment).
async fn a_job_refused_in_the_middle_of_a_batch_leaves_the_others_submitted_once(
    cluster: SlurmCluster,
) {
    let slurm = common::backend(cluster);
    let mut specs: Vec<_> = ["batch-before", "batch-refused", "batch-after"]
        .into_iter()
        .map(|name| common::spec(name, "echo ok\n"))
        .collect();
    specs[1].queue = Some("no-such-partition".into());
    let answers = slurm.submit_many(&specs).await;
    let err = answers[1].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    assert!(err.message().contains("no-such-partition"), "{err}");
    let ids: Vec<JobId> = [&answers[0], &answers[2]]
        .map(|answer| answer.as_ref().unwrap().clone())
        .into();
    let again = slurm.submit_many(&specs).await;
    assert_eq!(again[0].as_ref().unwrap(), &ids[0], "{again:?}");
    assert_eq!(again[2].as_ref().unwrap(), &ids[1], "{again:?}");
    assert_eq!(again[1].as_ref().unwrap_err().kind(), ErrorKind::Rejected);
    let shell = cluster.shell();
    let comments = stdout_of(
        &shell,
        Command::new("squeue").args(["--me", "-h", "-t", "all", "-o", "%k"]),
    )
    .await;
    for (spec, expected) in [(&specs[0], 1), (&specs[1], 0), (&specs[2], 1)] {
        let jobs = comments
            .lines()
            .filter(|comment| comment.trim() == spec.key.as_str())
            .count();
        assert_eq!(jobs, expected, "jobs with the comment {}", spec.key);
    }
    for id in &ids {
        let status = common::wait_for(&slurm, id, "the end", |s| s.state.is_terminal()).await;
        assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    }
}

/// More CPUs than any node declares: 22.05 queues the job for ever (PartitionConfig), 24.11
/// refuses it, and the backend says so as Rejected and leaves nothing behind.
async fn a_job_no_node_could_hold(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec("no-node", "echo never\n");
    spec.resources.cpus = Some(65);
    match cluster {
        SlurmCluster::Slurm2205 => {
            let id = slurm.submit(&spec).await.unwrap();
            let queued = common::wait_for(&slurm, &id, "a reason", |s| s.reason.is_some()).await;
            assert_eq!(
                (queued.state, queued.reason.as_deref()),
                (JobState::Queued, Some("PartitionConfig")),
                "{queued:?}"
            );
            slurm.cancel(&id).await.unwrap();
        }
        SlurmCluster::Slurm2411 => {
            let err = slurm.submit(&spec).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
            assert!(!err.is_temporary(), "{err}");
            assert!(
                err.message()
                    .contains("Requested node configuration is not available"),
                "{err}"
            );
            assert_eq!(slurm.find(&spec.key).await.unwrap(), None);
        }
    }
}

async fn a_throttled_array_counts_its_tasks_and_its_failure(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec(
        "array",
        "echo \"task $BATCHBRIDGE_TASK_INDEX\"\nsleep 2\n[ \"$BATCHBRIDGE_TASK_INDEX\" != 1 ] || exit 4\n",
    );
    spec.array = Some(ArraySpec::new(3).with_max_parallel(1));
    let id = slurm.submit(&spec).await.unwrap();
    let running = common::wait_for(&slurm, &id, "a task running", |s| {
        s.state == JobState::Running
    })
    .await;
    let tasks = running.tasks.unwrap();
    assert_eq!(
        (tasks.total, tasks.running),
        (3, 1),
        "%1 runs one at a time: {running:?}"
    );
    assert_eq!(
        tasks.pending + tasks.succeeded + tasks.failed,
        2,
        "{running:?}"
    );

    let done = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    let tasks = done.tasks.unwrap();
    assert_eq!(done.state, JobState::Failed, "{done:?}");
    assert_eq!(
        (tasks.succeeded, tasks.failed, tasks.cancelled),
        (2, 1, 0),
        "{done:?}"
    );
    assert!(done.native_state.contains("FAILED"), "{done:?}");
    assert_eq!(
        done.cause,
        Some(FailureCause::ExitCode(4)),
        "issue 21 case 1: {done:?}"
    );
    let failed_task = slurm
        .fetch_output(&id, &OutputRequest::tail(100).for_task(1))
        .await
        .unwrap();
    assert_eq!(failed_task.stdout.text(), "task 1\n");
}

/// A withdraw (to move a waiting job) of an array whose first task runs while the others
/// wait: Started, and the hold it placed on the waiting tasks is released, so that every
/// task still runs to its end.
async fn withdrawing_an_array_with_a_started_task_leaves_every_task_to_run(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec(
        "withdraw-array",
        "echo \"task $BATCHBRIDGE_TASK_INDEX\"\nsleep 2\n",
    );
    spec.array = Some(ArraySpec::new(3).with_max_parallel(1));
    let id = slurm.submit(&spec).await.unwrap();
    common::wait_for(&slurm, &id, "a task running", |s| {
        s.state == JobState::Running
    })
    .await;
    assert_eq!(slurm.withdraw(&id).await.unwrap(), Withdrawal::Started);
    let done = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    let tasks = done.tasks.unwrap();
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert_eq!(tasks.succeeded, 3, "{done:?}");
    assert_eq!(slurm.withdraw(&id).await.unwrap(), Withdrawal::Ended);
}

/// Root (the test runner; the test bed needs it) owns a job; `batch` may not cancel it.
async fn cancelling_someone_elses_job_is_permission_denied(cluster: SlurmCluster) {
    let output = cluster
        .as_root("sbatch")
        .args([
            "--parsable",
            "-p",
            "debug",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "sbatch as root: {output:?}");
    let id = JobId::from(String::from_utf8(output.stdout).unwrap().trim());
    let slurm = common::backend(cluster);
    let err = slurm.cancel(&id).await.unwrap_err();
    cluster
        .as_root("scancel")
        .arg(id.as_str())
        .status()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(err.message().contains("permission denied"), "{err}");
}

async fn a_large_environment_value_reaches_the_job_intact(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec("big-env", "printf '%s' \"$BIG\" | wc -c\n");
    spec.environment
        .insert("BIG".into(), "é$x`\"".repeat(10_000));
    let id = slurm.submit(&spec).await.unwrap();
    let status = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let output = slurm
        .fetch_output(&id, &OutputRequest::tail(100))
        .await
        .unwrap();
    assert_eq!(output.stdout.text().trim(), "60000");
}

/// `scontrol show job ID`'s `NAME=VALUE` words.
async fn scontrol_fields(shell: &SshShell, id: &str) -> Vec<String> {
    let text = stdout_of(shell, Command::new("scontrol").args(["show", "job", id])).await;
    text.split_whitespace().map(str::to_owned).collect()
}

async fn the_largest_resources_a_spec_may_ask_for_reach_slurm_exactly(cluster: SlurmCluster) {
    use batchbridge_core::spec::{MAX_CPUS, MAX_DISK, MAX_MEMORY, MAX_NODES, MAX_WALL_TIME};

    let slurm = common::backend(cluster);
    let mut spec = common::spec("maxima", "true\n");
    spec.resources.cpus = Some(MAX_CPUS);
    spec.resources.memory = Some(MAX_MEMORY);
    spec.resources.disk = Some(MAX_DISK);
    spec.resources.wall_time = Some(MAX_WALL_TIME);
    spec.resources.nodes = Some(MAX_NODES);
    // Held, so that the job only shows what SLURM made of the request.
    spec.passthrough
        .insert("slurm".into(), vec!["--hold".into()]);
    let id = slurm.submit(&spec).await.unwrap();
    let shell = cluster.shell();
    let fields = scontrol_fields(&shell, id.as_str()).await;
    slurm.cancel(&id).await.unwrap();
    for expected in [
        "TimeLimit=365-00:00:00",
        "CPUs/Task=32768",
        "MinMemoryNode=1P",
        "MinTmpDiskNode=1P",
        "NumNodes=65536-65536",
    ] {
        assert!(
            fields.iter().any(|f| f == expected),
            "{expected} in {fields:?}"
        );
    }
}

async fn an_array_beyond_the_clusters_max_array_size_is_refused_naming_it(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec("big-array", "true\n");
    // The test bed's MaxArraySize is 1001: indices 0 to 1000.
    spec.array = Some(ArraySpec::new(1002));
    let err = slurm.submit(&spec).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    assert!(
        err.message()
            .contains("an array of 1002 tasks: the cluster's MaxArraySize"),
        "{err}"
    );
    assert_eq!(slurm.find(&spec.key).await.unwrap(), None);
}

/// A script written for sbatch, with a dozen `#SBATCH` lines, submitted through
/// `apply_directives`: what `scontrol show job` shows of it is what the lines asked for. A
/// refused line stops it before anything reaches SLURM.
async fn a_scripts_sbatch_directives_reach_slurm_field_by_field(cluster: SlurmCluster) {
    use batchbridge_core::JobSpec;
    use batchbridge_core::conformance::unique_key;
    use batchbridge_core::directives::Fate;

    let slurm = common::backend(cluster);
    let script = "#!/bin/bash\n\
                  #SBATCH --job-name=directives-e2e\n\
                  #SBATCH -p single\n\
                  #SBATCH --time=1-02:30:00\n\
                  #SBATCH -c 2\n\
                  #SBATCH --mem=100M\n\
                  #SBATCH --tmp=64M\n\
                  #SBATCH -N 1\n\
                  #SBATCH --array=0-3%2\n\
                  #SBATCH --export=MODE=fast\n\
                  #SBATCH --nice=10\n\
                  #SBATCH --time-min=30\n\
                  #SBATCH -H\n\
                  echo \"$MODE\"\n";
    let spec = JobSpec::new(unique_key("directives"), "", script);
    let (spec, report) = slurm.apply_directives(spec).unwrap();
    report.check().unwrap();
    assert_eq!(report.lines.len(), 12, "{report}");
    assert!(
        report
            .lines
            .iter()
            .all(|l| matches!(l.fate, Fate::Taken { .. } | Fate::Passed { .. })),
        "{report}"
    );
    // Held (the last directive), so that the job only shows what SLURM made of the request.
    let id = slurm.submit(&spec).await.unwrap();
    let shell = cluster.shell();
    let fields = scontrol_fields(&shell, id.as_str()).await;
    slurm.cancel(&id).await.unwrap();
    for expected in [
        "JobName=directives-e2e",
        "Partition=single",
        "TimeLimit=1-02:30:00",
        "TimeMin=00:30:00",
        "CPUs/Task=2",
        "MinMemoryNode=100M",
        "MinTmpDiskNode=64M",
        "ArrayTaskThrottle=2",
        "Nice=10",
        "Reason=JobHeldUser",
        &format!("Comment={}", spec.key),
    ] {
        assert!(
            fields.iter().any(|f| f == expected),
            "{expected} in {fields:?}"
        );
    }
    for prefix in ["NumNodes=1", "ArrayTaskId=0-3"] {
        assert!(
            fields.iter().any(|f| f.starts_with(prefix)),
            "{prefix} in {fields:?}"
        );
    }
    assert_eq!(spec.environment["MODE"], "fast");

    let refused = JobSpec::new(
        unique_key("directives-refused"),
        "",
        "#!/bin/bash\n#SBATCH -p single\n#SBATCH --output=/tmp/x.log\ntrue\n",
    );
    let key = refused.key.clone();
    let (_, report) = slurm.apply_directives(refused).unwrap();
    let err = report.check().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(
        err.message()
            .starts_with("line 3: #SBATCH --output=/tmp/x.log: "),
        "{err}"
    );
    assert_eq!(slurm.find(&key).await.unwrap(), None);
}

/// Issue 30, point 4: a job in the test bed's `preemptee` partition (PreemptMode=REQUEUE)
/// holding the one `preempt` GRES is preempted by a job in `preemptor` that needs it. SLURM
/// requeues it: the backend shows it Queued and requeued (never ended), then it runs again
/// under its id and succeeds. Its script ends at once on its second run (it marks its job
/// directory on the first).
async fn a_job_preempted_with_requeue_waits_then_runs_again(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut low = common::spec(
        "preempted",
        "if [ -e requeue-mark ]; then echo second run; exit 0; fi\n\
         : >requeue-mark\necho first run\nsleep 600\n",
    );
    low.queue = Some("preemptee".into());
    low.passthrough
        .insert("slurm".into(), vec!["--gres=preempt:1".into()]);
    let id = slurm.submit(&low).await.unwrap();
    common::wait_for(&slurm, &id, "Running", |s| s.state == JobState::Running).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let shell = cluster.shell();
    let high = sbatch(&shell, &["-p", "preemptor", "--gres=preempt:1"], "sleep 5").await;
    let requeued = common::wait_for(&slurm, &id, "requeued or ended", |s| {
        s.requeued() || s.state.is_terminal()
    })
    .await;
    assert!(requeued.requeued(), "preempted by job {high}: {requeued:?}");
    let ended = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(
        (ended.state, ended.exit_code, ended.requeues),
        (JobState::Succeeded, Some(0), 1),
        "{ended:?}"
    );
}
