//! `LocalBackend` behaviour beyond the shared conformance suite.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::conformance::{Config, wait_for, wait_terminal};
use batchbridge_core::{
    ArraySpec, BatchBackend, Container, ErrorKind, FailureCause, JobId, JobKey, JobSpec, JobState,
    LocalBackend, OutputRequest,
};

fn spec(key: &str, script: &str) -> JobSpec {
    JobSpec::new(JobKey::new(key).unwrap(), key, script)
}

fn config() -> Config {
    {
        let mut config = Config::default();
        config.timeout = Duration::from_secs(60);
        config.poll_interval = Duration::from_millis(50);
        config
    }
}

async fn stdout(backend: &LocalBackend, id: &JobId, task: u32) -> String {
    let output = backend
        .fetch_output(id, &OutputRequest::tail(4096).for_task(task))
        .await
        .unwrap();
    output.stdout.text().into_owned()
}

/// The process group the local backend recorded for the job (the file's first word; the
/// second is the group leader's start time).
fn job_pgid(dir: &std::path::Path, id: &JobId) -> i32 {
    let text = std::fs::read_to_string(dir.join("jobs").join(id.as_str()).join("pgid")).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// Whether any process of the job's group (the wrapper, bash, the script's children) lives.
fn process_group_alive(dir: &std::path::Path, id: &JobId) -> bool {
    let pgid = job_pgid(dir, id).to_string();
    let processes = std::process::Command::new("ps")
        .args(["-e", "-o", "pgid=,stat="])
        .output()
        .unwrap();
    String::from_utf8_lossy(&processes.stdout)
        .lines()
        .any(|line| {
            let mut fields = line.split_whitespace();
            // Zombies wait for a reaper but run nothing.
            fields.next() == Some(pgid.as_str()) && !fields.next().unwrap_or("Z").starts_with('Z')
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_backend_on_the_same_state_dir_sees_and_controls_earlier_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let first = LocalBackend::new(dir.path()).unwrap();
    let long = first
        .submit(&spec("long", "echo started\nsleep 600\n"))
        .await
        .unwrap();
    let short = first.submit(&spec("short", "echo done\n")).await.unwrap();
    wait_for(&first, &long, &config(), "Running", |s| {
        s.state == JobState::Running
    })
    .await
    .unwrap();
    wait_terminal(&first, &short, &config()).await.unwrap();
    drop(first);

    let second = LocalBackend::new(dir.path()).unwrap();
    let statuses = second.status(&[long.clone(), short.clone()]).await.unwrap();
    assert_eq!(statuses[&long].state, JobState::Running);
    assert_eq!(statuses[&short].state, JobState::Succeeded);
    assert_eq!(
        second.find(&JobKey::new("long").unwrap()).await.unwrap(),
        Some(long.clone())
    );
    assert_eq!(stdout(&second, &short, 0).await, "done\n");

    assert!(
        process_group_alive(dir.path(), &long),
        "the job runs before the cancel"
    );
    second.cancel(&long).await.unwrap();
    let status = wait_terminal(&second, &long, &config()).await.unwrap();
    assert_eq!(status.state, JobState::Cancelled);
    assert_eq!(status.signal, Some(15));
    assert!(
        !process_group_alive(dir.path(), &long),
        "cancel left the job's processes running"
    );

    let third = second.submit(&spec("third", "true\n")).await.unwrap();
    assert!(
        ![&long, &short].contains(&&third),
        "a restarted backend reused an id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_submits_of_one_key_start_one_job() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(LocalBackend::new(dir.path()).unwrap());
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let backend = backend.clone();
            tokio::spawn(async move { backend.submit(&spec("race", "echo once\n")).await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let jobs = std::fs::read_dir(dir.path().join("jobs")).unwrap().count();
    assert_eq!(jobs, 1, "losing submits left job directories behind");
    wait_terminal(backend.as_ref(), &ids[0], &config())
        .await
        .unwrap();
    assert_eq!(stdout(&backend, &ids[0], 0).await, "once\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_wait_for_cpus_and_run_when_they_free_up() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::with_capacity(dir.path(), 1).unwrap();
    let first = backend.submit(&spec("first", "sleep 1\n")).await.unwrap();
    wait_for(&backend, &first, &config(), "Running", |s| {
        s.state == JobState::Running
    })
    .await
    .unwrap();
    let second = backend.submit(&spec("second", "true\n")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = backend
        .status(std::slice::from_ref(&second))
        .await
        .unwrap()
        .remove(&second)
        .unwrap();
    assert_eq!(waiting.state, JobState::Queued, "{waiting:?}");
    assert_eq!(waiting.reason.as_deref(), Some("Resources"));

    let first_done = wait_terminal(&backend, &first, &config()).await.unwrap();
    let second_done = wait_terminal(&backend, &second, &config()).await.unwrap();
    assert_eq!(second_done.state, JobState::Succeeded);
    assert!(second_done.started_at.unwrap() >= first_done.ended_at.unwrap());
}

#[tokio::test]
async fn a_job_larger_than_the_machine_says_so_while_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::with_capacity(dir.path(), 2).unwrap();
    let mut big = spec("big", "true\n");
    big.resources.cpus = Some(3);
    let id = backend.submit(&big).await.unwrap();
    let status = wait_for(&backend, &id, &config(), "Queued", |s| {
        s.state == JobState::Queued
    })
    .await
    .unwrap();
    assert_eq!(
        status.reason.as_deref(),
        Some("Resources: asks for 3 CPUs, this machine's capacity is 2")
    );
    backend.cancel(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_never_runs_more_tasks_than_max_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::with_capacity(dir.path(), 4).unwrap();
    let mut array = spec("serial", "date +%s%N\nsleep 0.3\ndate +%s%N\n");
    array.array = Some(ArraySpec::new(3).with_max_parallel(1));
    let id = backend.submit(&array).await.unwrap();
    let status = wait_terminal(&backend, &id, &config()).await.unwrap();
    assert_eq!(status.state, JobState::Succeeded);
    assert_eq!(status.tasks.unwrap().succeeded, 3);
    let mut spans = Vec::new();
    for task in 0..3 {
        let text = stdout(&backend, &id, task).await;
        let times: Vec<u128> = text.lines().map(|l| l.parse().unwrap()).collect();
        spans.push((times[0], times[1]));
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "tasks overlapped: {spans:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_killed_from_outside_is_failed_not_succeeded() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::new(dir.path()).unwrap();
    let id = backend
        .submit(&spec("victim", "sleep 600\n"))
        .await
        .unwrap();
    wait_for(&backend, &id, &config(), "Running", |s| {
        s.state == JobState::Running
    })
    .await
    .unwrap();
    let pgid = job_pgid(dir.path(), &id);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = wait_terminal(&backend, &id, &config()).await.unwrap();
    assert_eq!(status.state, JobState::Failed, "{status:?}");
    assert_eq!(status.native_state, "LOST");
    assert_eq!(
        status.cause,
        Some(FailureCause::Other),
        "no record says how it ended"
    );
    assert!(
        status
            .reason
            .unwrap()
            .contains("without recording an exit code")
    );
}

#[tokio::test]
async fn version_names_the_crate_and_fails_once_the_state_dir_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let backend = LocalBackend::new(&state).unwrap();
    assert_eq!(
        backend.version().await.unwrap(),
        format!("local (batchbridge-core {})", env!("CARGO_PKG_VERSION"))
    );
    std::fs::remove_dir_all(&state).unwrap();
    let err = backend.version().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert!(err.message().contains("local state directory"), "{err}");
}

#[tokio::test]
async fn hostile_ids_name_no_job() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::new(dir.path()).unwrap();
    let hostile: Vec<JobId> = [
        "../../etc",
        "1/../1",
        "",
        "/etc/passwd",
        "1 2",
        "-1",
        "99999999999999999999999",
    ]
    .into_iter()
    .map(JobId::from)
    .collect();
    let statuses = backend.status(&hostile).await.unwrap();
    for id in &hostile {
        let why = format!("{:?} is not a local job id", id.as_str());
        assert_eq!(statuses[id].state, JobState::Unknown, "{id:?}");
        assert_eq!(statuses[id].reason.as_deref(), Some(why.as_str()));
        let cancel = backend.cancel(id).await.unwrap_err();
        let fetch = backend
            .fetch_output(id, &OutputRequest::tail(10))
            .await
            .unwrap_err();
        for err in [cancel, fetch] {
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{id:?}");
            assert_eq!(err.message(), why);
        }
    }
}

#[tokio::test]
async fn working_directory_environment_and_unsupported_requests() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::new(dir.path()).unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut job = spec(
        "wd",
        "pwd\necho \"$BATCHBRIDGE_JOB_ID $BATCHBRIDGE_JOB_NAME $GREETING\"\n",
    );
    job.working_dir = Some(work.path().to_str().unwrap().to_owned());
    job.environment.insert("GREETING".into(), "hi there".into());
    let id = backend.submit(&job).await.unwrap();
    wait_terminal(&backend, &id, &config()).await.unwrap();
    assert_eq!(
        stdout(&backend, &id, 0).await,
        format!("{}\n{id} wd hi there\n", work.path().display())
    );

    // A file is not a directory: the job fails before its script runs, saying why.
    let file = work.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let mut not_a_dir = spec("file-wd", "echo ran\n");
    not_a_dir.working_dir = Some(file.to_str().unwrap().to_owned());
    let id = backend.submit(&not_a_dir).await.unwrap();
    let status = wait_terminal(&backend, &id, &config()).await.unwrap();
    assert_eq!(
        (status.state, status.exit_code),
        (JobState::Failed, Some(70)),
        "{status:?}"
    );
    let why = format!(
        "the script never ran: cannot enter its working directory {}: it is not a directory",
        file.display()
    );
    assert_eq!(status.reason.as_deref(), Some(why.as_str()));
    assert_eq!(status.cause, Some(FailureCause::NotStarted));
    assert_eq!(stdout(&backend, &id, 0).await, "");

    // A script of its own exiting with the wrapper's not-started code did start.
    let id = backend
        .submit(&spec("exits-70", "exit 70\n"))
        .await
        .unwrap();
    let status = wait_terminal(&backend, &id, &config()).await.unwrap();
    assert_eq!(status.cause, Some(FailureCause::ExitCode(70)), "{status:?}");

    let mut container = spec("container", "true\n");
    container.container = Some(Container::new("docker://alpine"));
    assert_eq!(
        backend.submit(&container).await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );

    let mut gpu = spec("gpu", "true\n");
    gpu.resources.gpus = Some(1);
    assert_eq!(
        backend.submit(&gpu).await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );

    let err = backend
        .fetch_output(&id, &OutputRequest::tail(10).for_task(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

/// By default a job inherits this program's environment (cargo sets CARGO_MANIFEST_DIR for
/// this test); with `clean_environment` it sees only PATH, HOME, LANG, the BATCHBRIDGE_*
/// variables and the spec's own.
#[tokio::test]
async fn a_clean_environment_keeps_this_programs_variables_from_the_job() {
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let print_env = "env | cut -d= -f1 | sort | tr '\\n' ' '; echo; echo \"$PATH|$HOME\"\n";
    for clean in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = LocalBackend::new(dir.path()).unwrap();
        if clean {
            backend = backend.clean_environment();
        }
        let mut job = spec("env", print_env);
        job.environment.insert("MINE".into(), "1".into());
        let id = backend.submit(&job).await.unwrap();
        wait_terminal(&backend, &id, &config()).await.unwrap();
        let out = stdout(&backend, &id, 0).await;
        let (names, paths) = out.split_once('\n').unwrap();
        let names: Vec<&str> = names.split_whitespace().collect();
        assert!(names.contains(&"MINE"), "{out}");
        assert!(names.contains(&"BATCHBRIDGE_JOB_ID"), "{out}");
        assert_eq!(names.contains(&"CARGO_MANIFEST_DIR"), !clean, "{out}");
        if clean {
            let shell_own = ["PWD", "SHLVL", "_", "OLDPWD"];
            let unexpected: Vec<_> = names
                .iter()
                .filter(|name| {
                    !name.starts_with("BATCHBRIDGE_")
                        && !["PATH", "HOME", "LANG", "MINE"].contains(name)
                        && !shell_own.contains(name)
                })
                .collect();
            assert!(unexpected.is_empty(), "inherited: {unexpected:?}");
            let job_dir = dir.path().join("jobs").join(id.as_str());
            assert_eq!(
                paths.trim_end(),
                format!("/usr/local/bin:/usr/bin:/bin|{}", job_dir.display())
            );
        }
    }
}

/// The names in `dir`, sorted.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_leaves_nothing_of_a_job_and_its_id_is_never_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::with_capacity(dir.path(), 2).unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        let id = backend
            .submit(&spec(&format!("job-{n}"), "echo hi\n"))
            .await
            .unwrap();
        wait_terminal(&backend, &id, &config()).await.unwrap();
        ids.push(id);
    }
    assert_eq!(entries(&dir.path().join("jobs")), ["1", "2", "3"]);
    for n in 1..3 {
        backend
            .cleanup(&JobKey::new(format!("job-{n}")).unwrap())
            .await
            .unwrap();
    }
    assert_eq!(entries(&dir.path().join("jobs")), ["1"], "job-0 is kept");
    assert_eq!(entries(&dir.path().join("keys")), ["job-0"]);
    assert_eq!(stdout(&backend, &ids[0], 0).await, "hi\n");

    // A backend started later (the program restarted) must not give job 3's id to a new
    // job: whoever still holds it would read another job's status and output.
    drop(backend);
    let restarted = LocalBackend::with_capacity(dir.path(), 2).unwrap();
    let id = restarted
        .submit(&spec("job-1", "echo again\n"))
        .await
        .unwrap();
    assert_eq!(id, JobId::from("4"), "ids 2 and 3 are not handed out again");
    wait_terminal(&restarted, &id, &config()).await.unwrap();
    assert_eq!(stdout(&restarted, &id, 0).await, "again\n");
    assert_eq!(
        restarted.status(&ids[1..]).await.unwrap()[&ids[2]].state,
        JobState::Unknown,
        "a job cleaned up is unknown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_cut_short_is_finished_by_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::with_capacity(dir.path(), 1).unwrap();
    let id = backend.submit(&spec("cut", "true\n")).await.unwrap();
    wait_terminal(&backend, &id, &config()).await.unwrap();
    // As if the program died after removing the directory, before the key.
    std::fs::remove_dir_all(dir.path().join("jobs").join(id.as_str())).unwrap();
    let key = JobKey::new("cut").unwrap();
    assert_eq!(backend.find(&key).await.unwrap(), Some(id));
    backend.cleanup(&key).await.unwrap();
    assert_eq!(backend.find(&key).await.unwrap(), None);
    assert!(entries(&dir.path().join("keys")).is_empty());
}
