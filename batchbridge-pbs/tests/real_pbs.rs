//! The PBS backend against the test bed's real OpenPBS server (tests/testbed/pbs.sh), as a
//! regular user over SSH: what the conformance suite does not cover.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::remote::NATIVE_STATE_EXIT_FILE;
use batchbridge_core::{
    ArraySpec, BatchBackend, CancelledBy, FailureCause, JobState, OutputRequest,
};
use batchbridge_pbs::script::PASSTHROUGH_KEY;
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::pbs_shell;
use common::{as_user, backend, spec, wait_for};

#[tokio::test]
async fn an_array_with_one_failing_subjob_counts_two_succeeded_one_failed() {
    let pbs = backend();
    let mut spec = spec(
        "array3",
        "echo \"subjob $BATCHBRIDGE_TASK_INDEX\"\n[ \"$BATCHBRIDGE_TASK_INDEX\" != 1 ] || exit 4\n",
    );
    spec.array = Some(ArraySpec::new(3).with_max_parallel(1));
    let id = pbs.submit(&spec).await.unwrap();
    let status = wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(status.state, JobState::Failed, "{status:?}");
    assert_eq!(status.cause, Some(FailureCause::ExitCode(4)), "{status:?}");
    assert_eq!(status.queue.as_deref(), Some("workq"), "{status:?}");
    let tasks = status.tasks.unwrap();
    assert_eq!(
        (tasks.total, tasks.succeeded, tasks.failed),
        (3, 2, 1),
        "{status:?}"
    );
    // PBS's own record: one array of three subjobs, at most one running at a time.
    let record = as_user("qstat", &["-x", "-f", &format!("{id}[]")]).await;
    assert!(record.contains("max_run_subjobs = 1"), "{record}");
    assert!(record.contains("array_indices_submitted = 0-2"), "{record}");
    let output = pbs
        .fetch_output(&id, &OutputRequest::tail(100).for_task(2))
        .await
        .unwrap();
    assert_eq!(output.stdout.text(), "subjob 2\n");
}

#[tokio::test]
async fn a_held_job_is_held_until_qrls_releases_it() {
    let pbs = backend();
    let mut spec = spec("held", "echo released\n");
    spec.passthrough
        .insert(PASSTHROUGH_KEY.into(), vec!["-h".into()]);
    let id = pbs.submit(&spec).await.unwrap();
    let held = wait_for(&pbs, &id, "Held", |s| s.state == JobState::Held).await;
    assert_eq!(held.native_state, "H", "{held:?}");
    assert!(held.reason.is_some(), "a held job says why: {held:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pbs.status_of(&id).await.unwrap().state, JobState::Held);

    as_user("qrls", &[id.as_str()]).await;
    let end = wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Succeeded, "{end:?}");
    let output = pbs
        .fetch_output(&id, &OutputRequest::tail(100))
        .await
        .unwrap();
    assert_eq!(output.stdout.text(), "released\n");
}

#[tokio::test]
async fn a_job_past_its_walltime_fails_with_that_cause() {
    let pbs = backend();
    let mut spec = spec("walltime", "echo started\nsleep 300\n");
    spec.resources.wall_time = Some(Duration::from_secs(3));
    let id = pbs.submit(&spec).await.unwrap();
    let end = wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Failed, "{end:?}");
    assert_eq!(end.cause, Some(FailureCause::WallTimeExceeded), "{end:?}");
    assert!(end.reason.unwrap().contains("walltime"));
}

#[tokio::test]
async fn a_job_deleted_with_qdel_outside_batchbridge_is_cancelled() {
    let pbs = backend();
    let id = pbs
        .submit(&spec("outsideqdel", "echo started\nsleep 300\n"))
        .await
        .unwrap();
    wait_for(&pbs, &id, "Running", |s| s.state == JobState::Running).await;
    as_user("qdel", &[id.as_str()]).await;
    let end = wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Cancelled, "{end:?}");
    assert_eq!(
        end.cause,
        Some(FailureCause::Cancelled(CancelledBy::Account(
            "batch".into()
        ))),
        "PBS's comment names who deleted it: {end:?}"
    );

    // batchbridge's own cancel says so.
    let id = pbs.submit(&spec("ownqdel", "sleep 300\n")).await.unwrap();
    wait_for(&pbs, &id, "Running", |s| s.state == JobState::Running).await;
    pbs.cancel(&id).await.unwrap();
    let end = wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Cancelled, "{end:?}");
    assert_eq!(
        end.cause,
        Some(FailureCause::Cancelled(CancelledBy::Request)),
        "{end:?}"
    );
}

#[tokio::test]
async fn a_job_purged_from_the_history_is_decided_by_its_exit_code_file() {
    let pbs = backend();
    let id = pbs
        .submit(&spec("purged", "echo done\nexit 5\n"))
        .await
        .unwrap();
    let end = wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(
        (end.state, end.native_state.as_str()),
        (JobState::Failed, "F")
    );

    as_user("qdel", &["-x", id.as_str()]).await;
    let after = pbs.status_of(&id).await.unwrap();
    assert_eq!(after.native_state, NATIVE_STATE_EXIT_FILE, "{after:?}");
    assert_eq!(after.cause, Some(FailureCause::ExitCode(5)), "{after:?}");
    assert_eq!(
        (after.state, after.exit_code),
        (JobState::Failed, Some(5)),
        "{after:?}"
    );
    // Says where the answer came from, as SLURM's does (issue 27).
    assert_eq!(
        after.reason.as_deref(),
        Some("from the exit-code file: PBS no longer knows the job"),
        "{after:?}"
    );
}

#[tokio::test]
async fn find_after_a_restart_names_the_same_job_even_without_its_directory() {
    let first = backend();
    let spec = spec("restart", "echo once\n");
    let id = first.submit(&spec).await.unwrap();
    drop(first);

    // A new process: a new connection, nothing in memory.
    let second = PbsBackend::new(Arc::new(pbs_shell()), PbsConfig::default()).unwrap();
    assert_eq!(second.find(&spec.key).await.unwrap(), Some(id.clone()));
    assert_eq!(second.submit(&spec).await.unwrap(), id, "one key, one job");
    let end = wait_for(&second, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(end.state, JobState::Succeeded, "{end:?}");

    // With its directory gone, PBS's own record (the key variable) still names it.
    second.cleanup(&spec.key).await.unwrap();
    assert_eq!(second.find(&spec.key).await.unwrap(), Some(id));
}

/// A script written for qsub, with a dozen `#PBS` lines, submitted through
/// `apply_directives`: what `qstat -f` shows of the job is what the lines asked for. Held
/// (`-h`), so that the record shows the request and nothing runs. A refused line stops the
/// script before anything reaches PBS.
#[tokio::test]
async fn a_scripts_pbs_directives_reach_pbs_field_by_field() {
    use batchbridge_core::conformance::unique_key;
    use batchbridge_core::directives::Fate;
    use batchbridge_core::{ErrorKind, JobSpec};

    let pbs = backend();
    let script = "#!/bin/bash\n\
                  #PBS -N pbsdirectives\n\
                  #PBS -q workq\n\
                  #PBS -l select=1:ncpus=2:mem=100mb\n\
                  #PBS -l walltime=1:30:00\n\
                  #PBS -J 0-3%2\n\
                  #PBS -v MODE=fast,LEVEL=3\n\
                  #PBS -l place=pack\n\
                  #PBS -A physics\n\
                  #PBS -P proj7\n\
                  #PBS -m n\n\
                  #PBS -p 10\n\
                  #PBS -r y\n\
                  #PBS -S /bin/bash\n\
                  #PBS -h\n\
                  echo \"$MODE\"\n";
    let spec = JobSpec::new(unique_key("pbsdirectives"), "", script);
    let (spec, report) = pbs.apply_directives(spec).unwrap();
    report.check().unwrap();
    // Taken: the name, the queue, select's nodes, cpus and memory, the walltime, the array
    // and -v's two variables.
    let taken = |fate: &Fate| matches!(fate, Fate::Taken { .. });
    assert_eq!(
        report.lines.iter().filter(|l| taken(&l.fate)).count(),
        9,
        "{report}"
    );
    assert!(
        report
            .lines
            .iter()
            .all(|l| !matches!(l.fate, Fate::Overridden { .. } | Fate::Refused { .. })),
        "{report}"
    );
    assert_eq!(spec.environment["MODE"], "fast");
    assert_eq!(spec.environment["LEVEL"], "3");
    let id = pbs.submit(&spec).await.unwrap();
    let record = as_user("qstat", &["-x", "-f", &format!("{id}[]")]).await;
    pbs.cancel(&id).await.unwrap();
    let fields: Vec<&str> = record.lines().map(str::trim).collect();
    for expected in [
        "Job_Name = pbsdirectives",
        "queue = workq",
        "Resource_List.select = 1:ncpus=2:mem=100mb",
        "Resource_List.ncpus = 2",
        "Resource_List.mem = 100mb",
        "Resource_List.walltime = 01:30:00",
        "Resource_List.place = pack",
        "array_indices_submitted = 0-3",
        "max_run_subjobs = 2",
        "Account_Name = physics",
        "project = proj7",
        "Mail_Points = n",
        "Priority = 10",
        "Hold_Types = u",
        "Rerunable = True",
    ] {
        assert!(fields.contains(&expected), "{expected} in {record}");
    }

    let refused = JobSpec::new(
        unique_key("pbsrefused"),
        "",
        "#!/bin/bash\n#PBS -q workq\n#PBS -o /tmp/x.log\ntrue\n",
    );
    let key = refused.key.clone();
    let (_, report) = pbs.apply_directives(refused).unwrap();
    let err = report.check().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(
        err.message().starts_with("line 3: #PBS -o /tmp/x.log: "),
        "{err}"
    );
    assert_eq!(pbs.find(&key).await.unwrap(), None);
}
