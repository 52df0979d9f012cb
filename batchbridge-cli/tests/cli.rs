//! The `batchbridge` binary against the real test bed (tests/testbed/up.sh): the built-in
//! local cluster, SLURM over SSH (127.0.0.1:2222), HTCondor over SSH (127.0.0.1:2223) and
//! PBS over SSH, each invocation with its own home, config and state directories, as a user
//! would run it.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use batchbridge_testbed::{SlurmCluster, login, ssh_facts};
use serde_json::Value;

/// A user of the tool: a home directory with a config naming the test bed's clusters.
struct User {
    home: tempfile::TempDir,
}

impl User {
    fn new() -> Self {
        let user = Self {
            home: tempfile::tempdir().unwrap(),
        };
        let clusters = [
            ("slurm", "slurm", "ssh", "partition = \"debug\"\n"),
            ("condor", "htcondor", "htcondor", ""),
            ("pbs", "pbs", "pbs", ""),
        ];
        let config: String = clusters
            .into_iter()
            .map(|(name, scheduler, component, extra)| {
                let login = login(component);
                format!(
                    "[clusters.{name}]\nscheduler = \"{scheduler}\"\nhost = \"{}\"\nport = {}\n\
                     user = \"{}\"\nkey_file = \"{}\"\nknown_hosts = \"{}\"\n{extra}\n",
                    login.host,
                    login.port,
                    login.user,
                    login.private_key.display(),
                    login.known_hosts.display(),
                )
            })
            .collect();
        user.write_config(&config);
        user
    }

    fn write_config(&self, text: &str) {
        let dir = self.home.path().join("config/batchbridge");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), text).unwrap();
    }

    /// Adds `[clusters.NAME]` with `table` to the config.
    fn add_cluster(&self, name: &str, table: &str) {
        let path = self.home.path().join("config/batchbridge/config.toml");
        let config = std::fs::read_to_string(&path).unwrap();
        self.write_config(&format!("{config}\n[clusters.{name}]\n{table}"));
    }

    /// Writes the user's ~/.ssh/config. OpenSSH finds `~` in the password database, not in
    /// $HOME, so a cluster names this one with `ssh_config = "~/.ssh/config"` (the CLI reads
    /// $HOME), as a user whose home is elsewhere would.
    fn write_ssh_config(&self, text: &str) {
        let dir = self.home.path().join(".ssh");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config"), text).unwrap();
    }

    /// The tool run with `args` under a pseudo-terminal of util-linux `script`, as typed.
    fn on_terminal(&self, args: &str) -> Terminal {
        let line = format!("{} {args}", env!("CARGO_BIN_EXE_batchbridge"));
        let mut child = self
            .program("script")
            .args(["-qefc", &line, "/dev/null"])
            .env("TERM", "xterm")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        Terminal {
            keyboard: child.stdin.take().unwrap(),
            screen: child.stdout.take().unwrap(),
            child: Stopped(child),
            seen: Vec::new(),
        }
    }

    fn script(&self, name: &str, text: &str) -> PathBuf {
        let path = self.home.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = self.program(env!("CARGO_BIN_EXE_batchbridge"));
        command.args(args);
        command
    }

    /// `program` in this user's environment, and nothing of the test's.
    fn program(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", self.home.path())
            .env("USER", "nobody-here")
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("XDG_STATE_HOME", self.home.path().join("state"))
            .stdin(Stdio::null());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `submit`'s CLUSTER:ID.
    fn submit(&self, args: &[&str]) -> String {
        let output = self.run(&[&["submit"], args].concat());
        assert_eq!(code(&output), 0, "submit {args:?}: {}", stderr(&output));
        stdout(&output).trim().to_owned()
    }

    /// `status -o json` of jobs (every recorded job when none), parsed.
    fn status(&self, jobs: &[&str]) -> Vec<Value> {
        let output = self.run(&[&["-o", "json", "status"], jobs].concat());
        assert_eq!(code(&output), 0, "status: {}", stderr(&output));
        serde_json::from_slice::<Value>(&output.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// Polls `status` until the job is in `state`.
    fn wait_state(&self, job: &str, state: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let row = self.status(&[job]).remove(0);
            if row["status"]["state"] == state {
                return row;
            }
            assert!(Instant::now() < deadline, "{job} never {state}: {row}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// A child process killed when the test ends, however it ends.
struct Stopped(Child);

/// The tool on a pseudo-terminal: what is typed and what the screen shows.
struct Terminal {
    child: Stopped,
    keyboard: std::process::ChildStdin,
    screen: std::process::ChildStdout,
    seen: Vec<u8>,
}

impl Terminal {
    /// Reads the screen until it shows `text`.
    fn read_until(&mut self, text: &str) {
        use std::io::Read;
        while !String::from_utf8_lossy(&self.seen).contains(text) {
            let mut bytes = [0; 256];
            let n = self.screen.read(&mut bytes).unwrap();
            assert!(
                n > 0,
                "the terminal closed before {text:?}: {:?}",
                String::from_utf8_lossy(&self.seen)
            );
            self.seen.extend_from_slice(&bytes[..n]);
        }
    }

    fn type_in(&mut self, keys: &str) {
        use std::io::Write;
        self.keyboard.write_all(keys.as_bytes()).unwrap();
    }

    /// Waits (15 s at most) until the tool ends; its exit code and all the screen showed.
    fn finish(mut self, what: &str) -> (Option<i32>, String) {
        use std::io::Read;
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(status) = self.child.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "{what}: the CLI did not end");
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut rest = Vec::new();
        self.screen.read_to_end(&mut rest).unwrap();
        self.seen.extend(rest);
        (
            status.code(),
            String::from_utf8_lossy(&self.seen).into_owned(),
        )
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `run` prints the first line while the job still runs, and exits with the job's code.
fn run_prints_live_and_exits_with_the_jobs_code(user: &User, cluster: &str) {
    let ok = user.script("ok.sh", "echo first\nsleep 6\necho second\necho oops >&2\n");
    let mut child = user.spawn(&["-c", cluster, "run", ok.to_str().unwrap()]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "first");
    assert!(
        child.try_wait().unwrap().is_none(),
        "{cluster}: the first line came only after the job ended"
    );
    assert_eq!(lines.next().unwrap().unwrap(), "second");
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 0, "{cluster}: {}", stderr(&output));
    assert_eq!(stderr(&output), "oops\n");

    let three = user.script("three.sh", "echo bye\nexit 3\n");
    let output = user.run(&["-c", cluster, "run", three.to_str().unwrap()]);
    assert_eq!(code(&output), 3, "{cluster}: {}", stderr(&output));
    assert_eq!(stdout(&output), "bye\n");
    assert!(
        stderr(&output).contains("Failed, exit code 3"),
        "{}",
        stderr(&output)
    );
}

/// An array of 3 ends with 3 succeeded tasks in `status`; `logs --task` reads one task,
/// `logs` every task under its heading (also with `--tail` and `-f`, each byte once), and
/// `run` of an array prints every task's output.
fn an_arrays_tasks_are_counted(user: &User, cluster: &str) {
    let script = user.script(
        "array.sh",
        "echo task $BATCHBRIDGE_TASK_INDEX\necho warn $BATCHBRIDGE_TASK_INDEX >&2\n",
    );
    let job = user.submit(&["-c", cluster, "--array", "3", script.to_str().unwrap()]);
    let row = user.wait_state(&job, "Succeeded");
    let tasks = &row["status"]["tasks"];
    assert_eq!(
        (tasks["total"].as_u64(), tasks["succeeded"].as_u64()),
        (Some(3), Some(3)),
        "{row}"
    );
    let table = stdout(&user.run(&["status", &job]));
    assert!(table.contains("3 tasks: 3 succeeded"), "{table}");
    let output = user.run(&["logs", "--task", "2", &job]);
    assert_eq!(stdout(&output), "task 2\n", "{}", stderr(&output));
    let every = "==> task 0 <==\ntask 0\n==> task 1 <==\ntask 1\n==> task 2 <==\ntask 2\n";
    for args in [
        vec!["logs"],
        vec!["logs", "--tail", "7"],
        vec!["logs", "--tail", "7", "-f"],
    ] {
        let output = user.run(&[args.as_slice(), &[job.as_str()]].concat());
        assert_eq!(stdout(&output), every, "{args:?}: {}", stderr(&output));
        assert_eq!(
            stderr(&output),
            every.replace("\ntask ", "\nwarn "),
            "{args:?}"
        );
    }
    let output = user.run(&[
        "-c",
        cluster,
        "run",
        "--array",
        "3",
        script.to_str().unwrap(),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let streams = [
        ("stdout", stdout(&output), "task"),
        ("stderr", stderr(&output), "warn"),
    ];
    for (stream, text, word) in streams {
        let expected = (0..3).map(|task| (task, format!("{word} {task}\n")));
        assert_eq!(by_task(&text), expected.collect(), "{stream}: {text}");
    }
}

/// The output of an array's tasks, told apart by their `==> task N <==` headings.
fn by_task(output: &str) -> BTreeMap<u32, String> {
    let mut tasks = BTreeMap::new();
    let mut task = None;
    for line in output.split_inclusive('\n') {
        match line
            .strip_prefix("==> task ")
            .and_then(|rest| rest.strip_suffix(" <==\n"))
        {
            Some(number) => task = Some(number.parse().unwrap()),
            None => tasks
                .entry(task.expect("output before the first heading"))
                .or_insert_with(String::new)
                .push_str(line),
        }
    }
    tasks
}

/// `logs -f` of a running job prints what comes after it started and ends with the job.
fn logs_follow_a_running_job(user: &User, cluster: &str) {
    let script = user.script("slow.sh", "echo one\nsleep 5\necho two\n");
    let job = user.submit(&["-c", cluster, script.to_str().unwrap()]);
    user.wait_state(&job, "Running");
    let output = user.run(&["logs", "-f", &job]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "one\ntwo\n");
    let output = user.run(&["logs", "--tail", "1", &job]);
    assert_eq!(stdout(&output), "two\n");
    let output = user.run(&["logs", "--tail", "2B", &job]);
    assert_eq!(stdout(&output), "o\n");
}

/// `logs --tail N` prints the last N lines, as tail does; with a unit, bytes.
#[test]
fn logs_tail_counts_lines() {
    let user = User::new();
    let script = user.script("lines.sh", "seq 1 5000\nprintf 'no newline'\n");
    let job = user.submit(&["--wait", script.to_str().unwrap()]);
    let tail = |tail: &str| {
        let output = user.run(&["logs", "--tail", tail, &job]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        stdout(&output)
    };
    assert_eq!(tail("3"), "4999\n5000\nno newline");
    assert_eq!(tail("1"), "no newline");
    assert_eq!(tail("0"), "");
    assert_eq!(tail("4000").lines().count(), 4000);
    assert_eq!(tail("100000").lines().count(), 5001);
    assert_eq!(tail("5B"), "wline");
    assert_eq!(tail("1KiB").len(), 1024);
    let output = user.run(&["logs", "--tail", "5 lines", &job]);
    assert_eq!(code(&output), 2, "{}", stdout(&output));
}

/// `cancel` ends a running job; `wait` then reports it with exit code 1.
fn cancel_ends_a_job(user: &User, cluster: &str) {
    let script = user.script("long.sh", "sleep 300\n");
    let job = user.submit(&["-c", cluster, script.to_str().unwrap()]);
    user.wait_state(&job, "Running");
    let output = user.run(&["cancel", &job]);
    assert_eq!(
        (code(&output), stdout(&output)),
        (0, format!("cancelled {job}\n"))
    );
    let output = user.run(&["wait", "--timeout", "2m", &job]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(stdout(&output).contains("Cancelled"), "{}", stdout(&output));
    let output = user.run(&["cancel", &job]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with(&format!("{job} had already ended (Cancelled")),
        "{}",
        stdout(&output)
    );
}

fn every_command_on(cluster: &str) {
    let user = User::new();
    run_prints_live_and_exits_with_the_jobs_code(&user, cluster);
    an_arrays_tasks_are_counted(&user, cluster);
    logs_follow_a_running_job(&user, cluster);
    cancel_ends_a_job(&user, cluster);
    let recorded = user.status(&[]);
    assert_eq!(recorded.len(), 6, "every submitted job in the record");
    let output = user.run(&["forget", "--ended"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output).lines().count(), 6, "{}", stdout(&output));
    assert!(user.status(&[]).is_empty());
}

#[test]
fn every_command_on_this_machine() {
    every_command_on("local");
}

#[test]
fn every_command_on_slurm_over_ssh() {
    every_command_on("slurm");
}

#[test]
fn every_command_on_htcondor_over_ssh() {
    every_command_on("condor");
}

#[test]
fn every_command_on_pbs_over_ssh() {
    every_command_on("pbs");
}

#[test]
fn concurrent_submits_all_land_in_the_record() {
    let user = User::new();
    let script = user.script("quick.sh", "true\n");
    let children: Vec<Child> = (0..8)
        .map(|_| user.spawn(&["submit", script.to_str().unwrap()]))
        .collect();
    let mut submitted: Vec<String> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().unwrap();
            assert_eq!(code(&output), 0, "{}", stderr(&output));
            stdout(&output).trim().to_owned()
        })
        .collect();
    let mut recorded: Vec<String> = user
        .status(&[])
        .iter()
        .map(|row| row["job"].as_str().unwrap().to_owned())
        .collect();
    submitted.sort();
    recorded.sort();
    assert_eq!(recorded, submitted);
}

#[test]
fn clusters_reports_each_problem_with_what_to_do() {
    let user = User::new();
    let ssh = ssh_facts();
    user.write_config(&format!(
        "[clusters.good]\nscheduler = \"slurm\"\nhost = \"{host}\"\nport = {port}\nuser = \"{user}\"\n\
         key_file = \"{key}\"\nknown_hosts = \"{known}\"\n\n\
         [clusters.down]\nscheduler = \"slurm\"\nhost = \"127.0.0.1\"\nport = 1\nuser = \"{user}\"\n\
         key_file = \"{key}\"\nknown_hosts = \"{known}\"\n\n\
         [clusters.spoofed]\nscheduler = \"slurm\"\nhost = \"{host}\"\nport = {port}\nuser = \"{user}\"\n\
         key_file = \"{key}\"\nknown_hosts = \"{wrong}\"\n",
        host = ssh.host,
        port = ssh.port,
        user = ssh.user,
        key = ssh.private_key.display(),
        known = ssh.known_hosts.display(),
        wrong = ssh.wrong_known_hosts.display(),
    ));
    let output = user.run(&["-o", "json", "clusters"]);
    assert_ne!(code(&output), 0);
    let checks: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let check = |name: &str| checks.iter().find(|c| c["name"] == name).unwrap().clone();
    assert_eq!(check("local")["ok"], true);
    assert_eq!(check("good")["ok"], true);
    assert!(
        check("good")["version"].as_str().unwrap().contains("22.05"),
        "{checks:?}"
    );
    assert_eq!(
        check("good")["accounting"],
        true,
        "the test bed's slurmdbd answers"
    );
    let down = check("down");
    assert_eq!(
        (down["ok"].as_bool(), down["exit"].as_u64()),
        (Some(false), Some(69)),
        "{down}"
    );
    assert_eq!(
        down["accounting"],
        Value::Null,
        "unknown: it never answered"
    );
    assert!(
        down["hint"]
            .as_str()
            .unwrap()
            .contains("ssh -p 1 batch@127.0.0.1"),
        "{down}"
    );
    let spoofed = check("spoofed");
    assert_eq!(spoofed["exit"].as_u64(), Some(77), "{spoofed}");
    let keyscan = format!(
        "ssh-keyscan -p {} {} >> {}",
        ssh.port,
        ssh.host,
        ssh.wrong_known_hosts.display()
    );
    assert!(
        spoofed["hint"].as_str().unwrap().contains(&keyscan),
        "{spoofed}"
    );

    // A key the cluster does not know; and the right key, held by an ssh-agent.
    let stranger = user.home.path().join("stranger");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stranger)
        .status()
        .unwrap();
    assert!(made.success());
    let socket = user.home.path().join("agent.sock");
    let _agent = Stopped(
        Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    while !socket.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let added = Command::new("ssh-add")
        .arg(&ssh.private_key)
        .env("SSH_AUTH_SOCK", &socket)
        .output()
        .unwrap();
    assert!(added.status.success(), "{added:?}");
    let config =
        std::fs::read_to_string(user.home.path().join("config/batchbridge/config.toml")).unwrap();
    user.write_config(&format!(
        "{config}\n[clusters.stranger]\nscheduler = \"slurm\"\nhost = \"{host}\"\nport = {port}\n\
         user = \"{user}\"\nkey_file = \"{key}\"\nknown_hosts = \"{known}\"\n\n\
         [clusters.agent]\nscheduler = \"slurm\"\nhost = \"{host}\"\nport = {port}\n\
         user = \"{user}\"\nknown_hosts = \"{known}\"\n",
        host = ssh.host,
        port = ssh.port,
        user = ssh.user,
        key = stranger.display(),
        known = ssh.known_hosts.display(),
    ));
    let output = user
        .command(&["-o", "json", "clusters"])
        .env("SSH_AUTH_SOCK", &socket)
        .output()
        .unwrap();
    let checks: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let check = |name: &str| checks.iter().find(|c| c["name"] == name).unwrap().clone();
    assert_eq!(check("agent")["ok"], true, "{checks:?}");
    let stranger = check("stranger");
    assert_eq!(stranger["exit"].as_u64(), Some(77), "{stranger}");
    assert!(
        stranger["error"]
            .as_str()
            .unwrap()
            .contains("authentication failed"),
        "{stranger}"
    );
    assert!(
        stranger["hint"]
            .as_str()
            .unwrap()
            .contains("refused the key"),
        "{stranger}"
    );

    let table = user
        .command(&["clusters"])
        .env("SSH_AUTH_SOCK", &socket)
        .output()
        .unwrap();
    assert_eq!(code(&table), 77, "the highest problem's code");
    assert!(stdout(&table).contains(&keyscan), "{}", stdout(&table));
}

#[test]
fn wrong_commands_and_configs_have_their_own_exit_codes() {
    let user = User::new();
    assert_eq!(code(&user.run(&["submit"])), 2, "no script");
    assert_eq!(code(&user.run(&["submit", "/no/such/script.sh"])), 2);
    assert_eq!(code(&user.run(&["-c", "nowhere", "status", "1"])), 2);
    user.write_config("[clusters.hpc]\nscheduler = \"slurm\"\nhots = \"x\"\n");
    let output = user.run(&["status"]);
    assert_eq!(code(&output), 78);
    assert!(
        stderr(&output).contains("unknown field `hots`"),
        "{}",
        stderr(&output)
    );
    let completions = user.run(&["completions", "bash"]);
    assert!(stdout(&completions).contains("_batchbridge()"));
}

/// A job id no scheduler and no job directory knows is an error of its own (66) for
/// `status`, `wait` and `cancel`, at once, on every kind of cluster.
#[test]
fn unknown_jobs_are_errors_at_once() {
    let user = User::new();
    for cluster in ["local", "slurm", "condor", "pbs"] {
        let job = format!("{cluster}:999999");
        for command in [&["status"][..], &["cancel"], &["wait", "--timeout", "30s"]] {
            let started = Instant::now();
            let output = user.run(&[command, &[job.as_str()]].concat());
            assert_eq!(
                code(&output),
                66,
                "{command:?} {job}: {}{}",
                stdout(&output),
                stderr(&output)
            );
            let said = format!("{}{}", stdout(&output), stderr(&output));
            assert!(said.contains(&format!("no such job {job}")), "{said}");
            assert!(!said.contains("not submitted through"), "{said}");
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{command:?} {job}"
            );
        }
    }
}

/// `-c` narrows `status` and `clusters`, and an unknown one is refused as `run` refuses it;
/// `status --state` and `--since` choose among the jobs.
#[test]
fn status_and_clusters_honour_the_cluster_and_the_filters() {
    let user = User::new();
    let quick = user.script("quick.sh", "true\n");
    let long = user.script("long.sh", "sleep 300\n");
    let ended = user.submit(&["-c", "local", "--wait", quick.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(1100));
    let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let running = user.submit(&["-c", "slurm", long.to_str().unwrap()]);
    user.wait_state(&running, "Running");
    let jobs = |args: &[&str]| -> Vec<String> {
        let output = user.run(&[&["-o", "json"], args].concat());
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
        let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row["job"]
                    .as_str()
                    .or(row["name"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    for command in ["status", "clusters"] {
        let output = user.run(&["-c", "nosuch", command]);
        assert_eq!(code(&output), 2, "{command}: {}", stdout(&output));
        assert!(stderr(&output).contains("no cluster named \"nosuch\""));
    }
    assert_eq!(jobs(&["-c", "local", "status"]), [ended.as_str()]);
    assert_eq!(jobs(&["-c", "slurm", "status"]), [running.as_str()]);
    assert_eq!(jobs(&["-c", "slurm", "clusters"]), ["slurm"]);
    assert_eq!(jobs(&["status", "--state", "running"]), [running.as_str()]);
    assert_eq!(jobs(&["status", "--state", "ended"]), [ended.as_str()]);
    assert_eq!(jobs(&["status", "--state", "succeeded,active"]).len(), 2);
    assert!(jobs(&["status", "--state", "failed"]).is_empty());
    assert_eq!(jobs(&["status", "--since", &since]), [running.as_str()]);
    assert_eq!(jobs(&["status", "--since", "1h"]).len(), 2);
    let output = user.run(&["status", "--since", "yesterday-ish"]);
    assert_eq!(code(&output), 2);
    assert_eq!(code(&user.run(&["cancel", &running])), 0);
}

/// `--array 0-LAST` is sbatch's range of LAST+1 tasks numbered from 0; a range from elsewhere
/// or with a step is refused with the arithmetic that gives its numbers.
#[test]
fn arrays_take_sbatch_ranges_from_0() {
    let user = User::new();
    let script = user.script("index.sh", "echo index $BATCHBRIDGE_TASK_INDEX\n");
    let script = script.to_str().unwrap();
    let output = user.run(&["run", "--array", "0-2%2", script]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let expected = (0..3).map(|task| (task, format!("index {task}\n")));
    assert_eq!(by_task(&stdout(&output)), expected.collect());
    for (array, said) in [
        ("1-5", "ask for 0-4 and use $((BATCHBRIDGE_TASK_INDEX + 1))"),
        (
            "0-9:2",
            "ask for 0-4 and use $((BATCHBRIDGE_TASK_INDEX * 2))",
        ),
    ] {
        let output = user.run(&["submit", "--array", array, script]);
        assert_eq!(code(&output), 2, "{array}");
        assert!(stderr(&output).contains(said), "{}", stderr(&output));
    }
    let help = stdout(&user.run(&["submit", "--help"]));
    assert!(help.contains("$BATCHBRIDGE_TASK_INDEX"), "{help}");
}

/// `wait` shows the name and key the job was submitted with; `logs -f` of a job that is
/// cancelled says so.
#[test]
fn wait_names_the_job_and_logs_follow_says_how_it_ended() {
    let user = User::new();
    let script = user.script("long.sh", "echo started\nsleep 300\n");
    let key = "wait-names-the-job";
    let job = user.submit(&["--name", "sleeper", "--key", key, script.to_str().unwrap()]);
    user.wait_state(&job, "Running");
    let mut following = user.spawn(&["logs", "-f", &job]);
    let mut lines = BufReader::new(following.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "started");
    assert_eq!(code(&user.run(&["cancel", &job])), 0);
    let followed = following.wait_with_output().unwrap();
    assert_eq!(code(&followed), 1);
    assert!(
        stderr(&followed).starts_with(&format!("{job}: Cancelled")),
        "{}",
        stderr(&followed)
    );
    let output = user.run(&["-o", "json", "wait", &job]);
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (rows[0]["name"].as_str(), rows[0]["key"].as_str()),
        (Some("sleeper"), Some(key))
    );
    let table = stdout(&user.run(&["wait", &job]));
    assert!(table.contains(" sleeper "), "{table}");
}

/// `-v` shows core's connections and warnings, `-vv` every command run on the cluster,
/// never the key; without either, nothing of the sort.
#[test]
fn verbose_shows_what_ran_on_the_cluster() {
    let user = User::new();
    let said = |args: &[&str]| {
        stderr(&user.run(&[args, &["-c", "slurm", "status", "slurm:999999"]].concat()))
    };
    let quiet = said(&[]);
    assert!(
        !quiet.contains("squeue") && !quiet.contains("SSH master"),
        "{quiet}"
    );
    let info = said(&["-v"]);
    assert!(info.contains("SSH master connection established"), "{info}");
    assert!(!info.contains("squeue"), "{info}");
    let debug = said(&["-vv"]);
    assert!(
        debug.contains("running remotely") && debug.contains("squeue"),
        "{debug}"
    );
    let key = std::fs::read_to_string(login("ssh").private_key).unwrap();
    for secret in key.lines().filter(|line| !line.starts_with("-----")) {
        assert!(!debug.contains(secret), "the private key is in the log");
    }
}

/// Messages a person reads: flags rather than spec fields, a timeout as it was given, a
/// header on `clusters`, `-h` short, and `--help` whose config example fits 80 columns and
/// parses as pasted.
#[test]
fn messages_name_flags_and_help_fits_a_terminal() {
    let user = User::new();
    let script = user.script("nap.sh", "sleep 30\n");
    let script = script.to_str().unwrap();
    for (flag, value, said) in [
        (
            "--array",
            "0",
            "--array (its task count): must be at least 1",
        ),
        ("--mem", "0", "--mem: must be more than 0 bytes"),
    ] {
        let output = user.run(&["-c", "local", "submit", flag, value, script]);
        assert_eq!(code(&output), 2);
        assert_eq!(
            stderr(&output),
            format!(
                "error: {said} and at most {}\n",
                if flag == "--mem" { "1024 TiB" } else { "10000" }
            )
        );
    }
    let job = user.submit(&["-c", "local", script]);
    let output = user.run(&["wait", "--timeout", "2s", &job]);
    assert_eq!(code(&output), 75);
    assert!(
        stderr(&output).contains("did not end within 2s: "),
        "{}",
        stderr(&output)
    );
    assert_eq!(code(&user.run(&["cancel", &job])), 0);
    let clusters = stdout(&user.run(&["-c", "local", "clusters"]));
    assert!(clusters.starts_with("CLUSTER "), "{clusters}");

    let short = stdout(&user.run(&["-h"]));
    assert!(
        !short.contains("Exit codes:") && short.contains("--help"),
        "{short}"
    );
    let long = stdout(&user.run(&["--help"]));
    assert!(
        short.contains("SLURM, HTCondor, PBS or this machine"),
        "every scheduler named: {short}"
    );
    let config: String = long
        .lines()
        .skip_while(|line| !line.starts_with("Config ("))
        .skip(1)
        .take_while(|line| !line.is_empty())
        .map(|line| format!("{}\n", line.trim_start()))
        .collect();
    let parsed: toml::Table = toml::from_str(&config).unwrap();
    assert_eq!(
        parsed["clusters"]["hpc"]["partition"].as_str(),
        Some("short")
    );
    assert!(
        config.contains("pbs"),
        "partition and account are PBS's too: {config}"
    );
    let after = long.split_once("Examples:").unwrap().1;
    for line in after.lines() {
        assert!(line.chars().count() <= 80, "{line:?}");
    }
}

/// A job that waits says why: `logs` of it says it has not started, and the spinner on a
/// terminal shows the scheduler's reason.
#[test]
fn a_waiting_job_says_why() {
    let user = User::new();
    let script = user.script("big.sh", "echo never\n");
    let job = user.submit(&["-c", "local", "--cpus", "1024", script.to_str().unwrap()]);
    let output = user.run(&["logs", &job]);
    assert_eq!(code(&output), 0);
    assert!(
        stderr(&output).starts_with(&format!("{job} has not started: Queued: Resources: ")),
        "{}",
        stderr(&output)
    );
    let line = format!(
        "{} wait --timeout 3s {job}",
        env!("CARGO_BIN_EXE_batchbridge")
    );
    let on_terminal = user
        .program("script")
        .args(["-qefc", &line, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let seen = stdout(&on_terminal);
    assert!(
        seen.contains(&format!("{job} Queued: Resources: asks for 1024 CPUs")),
        "no reason on the spinner: {seen:?}"
    );
    assert_eq!(code(&user.run(&["cancel", &job])), 0);
}

/// With a cluster down, `status` says why once, and each of its jobs' rows points there.
#[test]
fn status_says_once_why_a_cluster_did_not_answer() {
    let user = User::new();
    let ssh = ssh_facts();
    user.write_config(&format!(
        "[clusters.down]\nscheduler = \"slurm\"\nhost = \"127.0.0.1\"\nport = 1\n\
         key_file = \"{}\"\nknown_hosts = \"{}\"\nconnect_timeout_secs = 2\n",
        ssh.private_key.display(),
        ssh.known_hosts.display()
    ));
    let state = user.home.path().join("state/batchbridge");
    std::fs::create_dir_all(&state).unwrap();
    let entries: String = (1..=3)
        .map(|id| {
            format!(
                "{{\"cluster\":\"down\",\"id\":\"{id}\",\"key\":\"k{id}\",\"name\":\"n\",\"submitted_at\":0}}\n"
            )
        })
        .collect();
    std::fs::write(state.join("jobs.jsonl"), entries).unwrap();
    let output = user.run(&["status"]);
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    assert_eq!(
        stderr(&output).matches("error: ").count(),
        1,
        "{}",
        stderr(&output)
    );
    let table = stdout(&output);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{table}");
    for row in rows {
        assert!(
            row.ends_with("down did not answer: see the error above"),
            "{row}"
        );
    }
    let json = user.run(&["-o", "json", "status"]);
    let rows: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(rows[0]["error"].as_str().unwrap().len() > 40, "{rows}");
}

/// Ctrl-C during `wait` (SIGINT to the whole process group, as a terminal sends it) leaves
/// no SSH directory with a stale control socket behind.
#[test]
fn an_interrupted_wait_leaves_no_ssh_directory() {
    use std::os::unix::process::CommandExt;

    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;

    let user = User::new();
    let script = user.script("long.sh", "sleep 300\n");
    let job = user.submit(&["-c", "condor", script.to_str().unwrap()]);
    let runtime = tempfile::tempdir().unwrap();
    let mut waiting = user.command(&["wait", &job]);
    waiting
        .env("XDG_RUNTIME_DIR", runtime.path())
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut waiting = Stopped(waiting.spawn().unwrap());
    let connected = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .any(|entry| entry.path().join("master").exists())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !connected(runtime.path()) {
        assert!(Instant::now() < deadline, "no SSH connection");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    let group = Pid::from_raw(i32::try_from(waiting.0.id()).unwrap());
    killpg(group, Signal::SIGINT).unwrap();
    let status = waiting.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_eq!(code(&user.run(&["cancel", &job])), 0);
}

/// `completions bash | head`: a reader that closes its end early is no panic.
#[test]
fn completions_to_a_closed_pipe_end_quietly() {
    let user = User::new();
    for _ in 0..5 {
        let mut child = user.spawn(&["completions", "bash"]);
        // Closed before the first write: the write fails with EPIPE.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        assert_eq!(stderr(&output), "");
    }
}

/// `logs` of a job `forget` removed says there is no such job, and why there may not be,
/// rather than that it was never submitted there.
#[test]
fn logs_of_a_forgotten_job_say_it_is_gone() {
    let user = User::new();
    let script = user.script("hi.sh", "echo hi\n");
    let job = user.submit(&["--wait", script.to_str().unwrap()]);
    assert_eq!(stdout(&user.run(&["logs", &job])), "hi\n");
    assert_eq!(code(&user.run(&["forget", &job])), 0);
    let output = user.run(&["logs", &job]);
    assert_eq!(code(&output), 66, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("files were removed (batchbridge forget)"),
        "{}",
        stderr(&output)
    );
}

/// `forget --ended` asks each cluster once for the states of all its jobs (before, once a
/// job), then removes them a few at once, each printed as it is forgotten.
#[test]
fn forget_asks_each_cluster_once() {
    const JOBS: usize = 4;
    let user = User::new();
    let script = user.script("quick.sh", "true\n");
    let jobs: Vec<String> = (0..JOBS)
        .map(|_| user.submit(&["-c", "pbs", script.to_str().unwrap()]))
        .collect();
    let mut wait = vec!["wait", "--timeout", "3m"];
    wait.extend(jobs.iter().map(String::as_str));
    let waited = user.run(&wait);
    assert_eq!(code(&waited), 0, "{}", stderr(&waited));
    let output = user.run(&["-vv", "forget", "--ended"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let mut forgotten: Vec<&str> = Vec::new();
    let printed = stdout(&output);
    for line in printed.lines() {
        forgotten.push(line.strip_prefix("forgot ").unwrap());
    }
    forgotten.sort_unstable();
    let mut expected: Vec<&str> = jobs.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(forgotten, expected);
    assert!(user.status(&[]).is_empty());
    // One query of the CLI's for every job, then one in each removal: core's cleanup checks
    // that its job ended.
    let log = stderr(&output);
    let queries = log
        .lines()
        .filter(|line| line.contains("running remotely") && line.contains("qstat"))
        .count();
    assert!(queries <= JOBS + 1, "{queries} qstat commands: {log}");
}

/// `--mem` as sbatch reads it: SLURM receives 4000 MiB for `4000`, 4096 for `4G`; what
/// could mean two sizes (a bare byte count) is refused, naming both.
#[test]
fn mem_is_what_sbatch_would_ask_for() {
    let user = User::new();
    let script = user.script("mem.sh", "true\n");
    let script = script.to_str().unwrap();
    for (mem, asked) in [
        ("4000", "4000M"),
        ("4G", "4G"),
        ("1G", "1G"),
        ("100M", "100M"),
        ("4096M", "4G"),
        ("2GiB", "2G"),
        ("4gb", "4G"),
    ] {
        let shown = scontrol_show(&user.submit(&["-c", "slurm", "--mem", mem, script]));
        assert!(
            shown.contains(&format!("MinMemoryNode={asked} ")),
            "--mem {mem}: {shown}"
        );
    }
    let output = user.run(&["-c", "slurm", "submit", "--mem", "4000000000", script]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("ambiguous") && stderr(&output).contains("bytes (3815 MiB)"),
        "{}",
        stderr(&output)
    );
}

/// `--time` as sbatch reads it, and in humantime's units: SLURM's TimeLimit.
#[test]
fn time_is_what_sbatch_would_ask_for() {
    let user = User::new();
    let script = user.script("time.sh", "true\n");
    let script = script.to_str().unwrap();
    for (time, limit) in [
        ("90", "01:30:00"),
        ("45:00", "00:45:00"),
        ("1:30:00", "01:30:00"),
        ("2-12", "2-12:00:00"),
        ("2-00:30", "2-00:30:00"),
        ("2-00:00:00", "2-00:00:00"),
        ("2h", "02:00:00"),
        ("90m", "01:30:00"),
    ] {
        let shown = scontrol_show(&user.submit(&["-c", "slurm", "--time", time, script]));
        assert!(
            shown.contains(&format!("TimeLimit={limit} ")),
            "--time {time}: {shown}"
        );
    }
    for (bad, said) in [
        ("1:2:3:4", "D-HH:MM:SS"),
        ("1h30x", "1h 30m"),
        ("0", "no limit"),
    ] {
        let output = user.run(&["-c", "slurm", "submit", "--time", bad, script]);
        assert_eq!(code(&output), 2, "{bad}");
        assert!(stderr(&output).contains(said), "{}", stderr(&output));
    }
}

/// `submit --after`: on SLURM the scheduler holds the job (scontrol's `Dependency=`); on
/// HTCondor, which has no dependencies of its own, the command holds it and submits it only
/// once the job it runs after has ended; a dependency that failed submits nothing (exit 1,
/// naming it); a job of another cluster or an unknown condition is refused (exit 2).
#[test]
fn submit_after_waits_in_the_scheduler_or_in_the_command() {
    let user = User::new();
    let slow = user.script("slow.sh", "sleep 5\n");
    let fails = user.script("fails.sh", "exit 3\n");
    let quick = user.script("quick.sh", "true\n");
    let [slow, fails, quick] = [&slow, &fails, &quick].map(|p| p.to_str().unwrap());
    let id = |job: &str| job.split_once(':').unwrap().1.to_owned();

    let first = user.submit(&["-c", "slurm", slow]);
    let second = user.submit(&["-c", "slurm", "--after", &first, quick]);
    let third = user.submit(&[
        "-c",
        "slurm",
        "--after",
        &format!("any:{}", id(&second)),
        quick,
    ]);
    let shown = scontrol_show(&second);
    assert!(
        shown.contains(&format!("Dependency=afterok:{}(unfulfilled)", id(&first))),
        "{shown}"
    );
    let shown = scontrol_show(&third);
    assert!(
        shown.contains(&format!("Dependency=afterany:{}(unfulfilled)", id(&second))),
        "{shown}"
    );
    user.wait_state(&third, "Succeeded");

    let first = user.submit(&["-c", "condor", slow]);
    let output = user.run(&["-c", "condor", "submit", "--after", &first, quick]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains(&format!("holding the job here until ok:{}", id(&first))),
        "{}",
        stderr(&output)
    );
    let when_submitted = user.status(&[&first]).remove(0);
    assert_eq!(
        when_submitted["status"]["state"], "Succeeded",
        "submitted only once its dependency ended: {when_submitted}"
    );
    user.wait_state(stdout(&output).trim(), "Succeeded");

    let failed = user.submit(&["-c", "condor", fails]);
    user.wait_state(&failed, "Failed");
    let output = user.run(&["-c", "condor", "submit", "--after", &failed, quick]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains(&format!("job {} ended Failed, exit code 3", id(&failed)))
            && stderr(&output).contains("was not submitted"),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).is_empty(), "{}", stdout(&output));

    for (after, said) in [
        ("slurm:12", "a job runs after jobs of its own cluster"),
        ("later:12", "that job is on cluster \"later\""),
        ("ok:", "the job id must be"),
        ("ok:1;id", "the job id must be"),
    ] {
        let output = user.run(&["-c", "condor", "submit", "--after", after, quick]);
        assert_eq!(code(&output), 2, "{after}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(said),
            "{after}: {}",
            stderr(&output)
        );
    }
}

/// `scontrol show job` of a CLUSTER:ID on SLURM 22.05, the CLI tests' `slurm` cluster.
fn scontrol_show(job: &str) -> String {
    let id = job.split_once(':').unwrap().1;
    let shown = SlurmCluster::Slurm2205
        .as_root("scontrol")
        .args(["show", "job", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&shown.stdout).into_owned()
}

/// Values a shell would interpret, in every flag and config value: refused before anything
/// runs, or handed to the job verbatim; no canary file ever appears.
#[test]
fn hostile_values_are_refused_or_passed_verbatim() {
    let user = User::new();
    let canary = PathBuf::from(format!(
        "/tmp/batchbridge-cli-canary-{}",
        std::process::id()
    ));
    let payloads = [
        format!("$(touch {})", canary.display()),
        format!("`touch {}`", canary.display()),
        format!("x'; touch {}; '", canary.display()),
        format!("x\"; touch {}; \"", canary.display()),
        format!("x\ntouch {}", canary.display()),
    ];
    let script = user.script("env.sh", "printf '%s' \"$VALUE\"\n");
    let script = script.to_str().unwrap();
    for cluster in ["local", "slurm"] {
        for payload in &payloads {
            for flag in [
                "--name",
                "--key",
                "--partition",
                "--array",
                "--mem",
                "--time",
                "--cpus",
            ] {
                let output = user.run(&["-c", cluster, "submit", flag, payload, script]);
                assert_eq!(
                    code(&output),
                    2,
                    "{cluster} {flag} {payload:?}: {}",
                    stderr(&output)
                );
            }
            let value = format!("VALUE={payload}");
            let output = user.run(&["-c", cluster, "run", "--env", &value, script]);
            assert_eq!(
                code(&output),
                0,
                "{cluster} --env {payload:?}: {}",
                stderr(&output)
            );
            assert_eq!(stdout(&output), *payload, "{cluster}: passed verbatim");
            let name = format!("{payload}=x");
            let output = user.run(&["-c", cluster, "submit", "--env", &name, script]);
            assert_eq!(code(&output), 2, "{cluster} env name {payload:?}");
            let output = user.run(&["-c", cluster, "status", payload]);
            assert!(
                code(&output) != 0,
                "{cluster} job id {payload:?}: {}",
                stdout(&output)
            );
        }
    }
    // Under the 128 KiB a single argument may have on Linux.
    let huge = "x".repeat(100_000);
    assert_eq!(code(&user.run(&["submit", "--name", &huge, script])), 2);
    assert_eq!(code(&user.run(&["status", &huge])), 2);

    let ssh = ssh_facts();
    for payload in &payloads {
        for (field, value) in [
            ("host", payload.clone()),
            ("host", format!("-oProxyCommand=touch {}", canary.display())),
            ("user", payload.clone()),
            ("user", format!("-oProxyCommand=touch {}", canary.display())),
            ("partition", payload.clone()),
            ("account", payload.clone()),
            ("work_dir", payload.clone()),
            ("key_file", payload.clone()),
            ("known_hosts", payload.clone()),
        ] {
            let mut fields = vec![
                ("host", ssh.host.clone()),
                ("user", ssh.user.clone()),
                ("key_file", ssh.private_key.display().to_string()),
                ("known_hosts", ssh.known_hosts.display().to_string()),
            ];
            fields.retain(|(name, _)| *name != field);
            fields.push((field, value.clone()));
            let mut table = toml::Table::new();
            table.insert("scheduler".into(), "slurm".into());
            table.insert("port".into(), i64::from(ssh.port).into());
            for (name, value) in fields {
                table.insert(name.into(), value.into());
            }
            let mut clusters = toml::Table::new();
            clusters.insert("hostile".into(), table.into());
            let mut config = toml::Table::new();
            config.insert("clusters".into(), clusters.into());
            user.write_config(&toml::to_string(&config).unwrap());
            let output = user.run(&["-c", "hostile", "run", "--env", "VALUE=ok", script]);
            let passed = code(&output) == 0 && stdout(&output) == "ok";
            // Refused as a usage or config error, by the scheduler, or by ssh (a known_hosts
            // file that does not exist vouches for no host).
            let refused = [2, 70, 77, 78].contains(&code(&output));
            assert!(
                passed || refused,
                "{field} = {value:?}: {} {}",
                code(&output),
                stderr(&output)
            );
        }
    }
    assert!(!canary.exists(), "a hostile value was executed");
}

/// Ctrl-C during `run --cancel-on-interrupt` cancels the job and exits with 130.
#[test]
fn an_interrupted_run_cancels_its_job_when_asked_to() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let user = User::new();
    let script = user.script("long.sh", "echo started\nsleep 300\n");
    let mut child = user.spawn(&["run", "--cancel-on-interrupt", script.to_str().unwrap()]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "started");
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    kill(pid, Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 130, "{}", stderr(&output));
    let job = user.status(&[]).remove(0)["job"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        stderr(&output).contains(&format!("cancelled {job}")),
        "{}",
        stderr(&output)
    );
    user.wait_state(&job, "Cancelled");
}

/// The spinner shows on a terminal (the CLI under a pseudo-terminal made by `script`) and
/// never in a pipe.
#[test]
fn the_progress_spinner_shows_on_a_terminal_only() {
    let user = User::new();
    let script = user.script("nap.sh", "sleep 2\n");
    let job = user.submit(&[script.to_str().unwrap()]);
    let piped = user.run(&["wait", &job]);
    assert_eq!(code(&piped), 0);
    assert_eq!(stderr(&piped), "", "nothing but the result in a pipe");
    assert!(!stdout(&piped).contains('\u{1b}'), "no colours in a pipe");

    let job = user.submit(&[script.to_str().unwrap()]);
    // util-linux `script` runs the line under a pseudo-terminal of its own.
    let line = format!("{} wait {job}", env!("CARGO_BIN_EXE_batchbridge"));
    let on_terminal = user
        .program("script")
        .args(["-qefc", &line, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let seen = stdout(&on_terminal);
    assert!(
        seen.contains(&format!("{job} Running (")),
        "no spinner on a terminal: {seen:?}"
    );
    assert!(
        seen.contains("\u{1b}[32mSucceeded"),
        "no colour on a terminal: {seen:?}"
    );
}

/// Ctrl-C typed at a terminal during `run` asks whether to cancel: "y" cancels the job,
/// "n" leaves it running and says how to follow it, and so does a second Ctrl-C, at once.
#[test]
fn an_interrupted_run_on_a_terminal_asks_before_cancelling() {
    let user = User::new();
    let script = user.script("long.sh", "echo started\nsleep 300\n");
    for (answer, goes_on) in [("y\n", false), ("n\n", true), ("\x03", true)] {
        // The ^C written to the terminal becomes a SIGINT from the terminal, as when typed.
        let mut terminal = user.on_terminal(&format!("run {}", script.display()));
        terminal.read_until("started");
        terminal.type_in("\x03");
        terminal.read_until("[y/N]");
        terminal.type_in(answer);
        let (status, seen) = terminal.finish(&format!("{answer:?} at the prompt"));
        assert_eq!(status, Some(130), "{seen}");
        let job = user.status(&[]).last().unwrap()["job"]
            .as_str()
            .unwrap()
            .to_owned();
        if goes_on {
            assert!(seen.contains(&format!("{job} goes on")), "{seen}");
            assert_eq!(user.status(&[&job])[0]["status"]["state"], "Running");
            assert_eq!(code(&user.run(&["cancel", &job])), 0);
        } else {
            assert!(seen.contains(&format!("cancelled {job}")), "{seen}");
            user.wait_state(&job, "Cancelled");
        }
    }
}

/// The EXIT column of `job`'s `status` row, and its exit status as `-o json` has it.
fn exit_shown(user: &User, job: &str) -> (String, String) {
    let table = stdout(&user.run(&["status", job]));
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let at = header.find("EXIT").unwrap();
    let row = lines.next().unwrap();
    let column = row
        .get(at..)
        .unwrap_or("")
        .split("  ")
        .next()
        .unwrap()
        .to_owned();
    let status = user.status(&[job]).remove(0)["status"].clone();
    let in_json = match (status["exitCode"].as_i64(), status["signal"].as_i64()) {
        (Some(code), None) => code.to_string(),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => String::new(),
        both => panic!("{job}: exit code and signal in JSON: {both:?} {status}"),
    };
    (column, in_json)
}

/// One exit-status rule for every backend (issue 31, point 7), the same in the table and in
/// JSON: a cancelled job shows the signal its wrapper recorded (`signal 15`) where its
/// backend reads that record, else nothing, and never 0, also once SLURM's accounting
/// answers; a running array shows none.
#[test]
fn a_cancelled_job_shows_one_exit_status_everywhere() {
    let user = User::new();
    let long = user.script("long.sh", "sleep 300\n");
    let long = long.to_str().unwrap();
    let quick = user.script("quick.sh", "true\n");
    let done = user.submit(&["-c", "local", "--wait", quick.to_str().unwrap()]);
    assert_eq!(exit_shown(&user, &done), ("0".to_owned(), "0".to_owned()));
    // Cancelled before the other jobs start: the local cluster runs a task a CPU.
    let array = user.submit(&["-c", "local", "--array", "2", long]);
    user.wait_state(&array, "Running");
    assert_eq!(
        exit_shown(&user, &array),
        (String::new(), String::new()),
        "a running array"
    );
    assert_eq!(code(&user.run(&["cancel", &array])), 0);
    let jobs: Vec<String> = ["local", "slurm", "condor", "pbs"]
        .iter()
        .map(|cluster| user.submit(&["-c", cluster, long]))
        .collect();
    for job in &jobs {
        user.wait_state(job, "Running");
    }
    let mut cancel = vec!["cancel"];
    cancel.extend(jobs.iter().map(String::as_str));
    assert_eq!(code(&user.run(&cancel)), 0);
    let mut wait = vec!["wait", "--timeout", "2m"];
    wait.extend(jobs.iter().map(String::as_str));
    assert_eq!(code(&user.run(&wait)), 1);
    // SLURM's accounting catches up within seconds: look a while, every look by the rule.
    let mut seen = BTreeMap::new();
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        for job in jobs.iter().chain([&array]) {
            let (column, in_json) = exit_shown(&user, job);
            assert_eq!(column, in_json, "{job}: the table and JSON differ");
            assert!(
                column.is_empty() || column == "signal 15",
                "{job}: a cancelled job shows {column:?}"
            );
            seen.entry(job.clone())
                .or_insert_with(Vec::new)
                .push(column);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    for (job, columns) in &mut seen {
        columns.dedup();
        eprintln!("{job}: {columns:?}");
    }
    assert_eq!(
        seen[&jobs[0]],
        ["signal 15"],
        "local keeps its wrapper's record"
    );
}

/// A test bed component's facts.json.
fn facts(component: &str) -> Value {
    let path = batchbridge_testbed::testbed_dir()
        .join(component)
        .join("facts.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "{}: {err}; run: sudo tests/testbed/{component}.sh up",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

/// A string of `facts`.
fn fact<'a>(facts: &'a Value, key: &str) -> &'a str {
    facts[key].as_str().unwrap()
}

/// The TOTP code (`oathtool --totp`) for otp.sh's sshd that pam_oath takes now: of this
/// 30 s step, or of the one after the step last used, as pam_oath refuses that one and any
/// before it again. Its window (4) takes a code up to 4 steps ahead; tests that log in
/// faster than one a step get there, and wait until the clock has caught up.
fn totp_code(otp: &Value) -> String {
    let secret = std::fs::read_to_string(fact(otp, "otp_secret_file")).unwrap();
    let code_at = |secs: u64| {
        let output = Command::new("oathtool")
            .args(["--totp", "--now", &format!("@{secs}"), secret.trim()])
            .output()
            .unwrap();
        assert!(output.status.success(), "oathtool: {}", stderr(&output));
        stdout(&output).trim().to_owned()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // users.oath: HOTP/T30 USER - SECRET COUNTER LAST_CODE LAST_USE_TIME, once used.
    let users = std::fs::read_to_string(fact(otp, "otp_users_file")).unwrap();
    let fields: Vec<&str> = users.split_whitespace().collect();
    let Some(&[last_code, used]) = fields.get(5..7) else {
        return code_at(now);
    };
    let used = humantime::parse_rfc3339_weak(used.trim_end_matches('L'))
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let next_step = (0..=10)
        .map(|k| used - 150 + 30 * k)
        .find(|&secs| code_at(secs) == last_code)
        .map_or(0, |secs| secs / 30 + 1);
    let ahead = next_step.saturating_sub(now / 30);
    if ahead > 3 {
        std::thread::sleep(Duration::from_secs((ahead - 3) * 30 - now % 30 + 1));
    }
    code_at(now.max(next_step * 30))
}

/// Logs out of a cluster when the test ends, however it ends: a login outlives the tool.
struct LoggedOutAtTheEnd<'a>(&'a User, &'a str);

impl Drop for LoggedOutAtTheEnd<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["logout", self.1]);
    }
}

/// The logins otp.sh's sshd accepted so far (its log says so once per full login).
fn otp_logins(otp: &Value) -> usize {
    std::fs::read_to_string(fact(otp, "sshd_log"))
        .unwrap()
        .matches("Accepted keyboard-interactive/pam for ")
        .count()
}

/// A cluster that asks for a one-time password after the key (otp.sh's sshd, the SLURM
/// host behind it): without a login every command refuses, naming `batchbridge login`;
/// `login` at a terminal answers the prompt once, and the next ten commands, none at a
/// terminal, go through that one login (the sshd counts one), until `logout` ends it.
#[test]
fn one_login_at_a_terminal_serves_the_next_ten_commands() {
    let otp = facts("otp");
    let user = User::new();
    user.write_ssh_config(&format!(
        "Host otp-login\n    HostName {}\n    Port {}\n    User {}\n    IdentityFile {}\n    \
         IdentitiesOnly yes\n    UserKnownHostsFile {}\n",
        fact(&otp, "host"),
        otp["port"],
        fact(&otp, "user"),
        fact(&otp, "private_key"),
        fact(&otp, "known_hosts"),
    ));
    user.add_cluster(
        "otp",
        "scheduler = \"slurm\"\nssh_alias = \"otp-login\"\nssh_config = \"~/.ssh/config\"\n\
         login = \"interactive\"\npartition = \"debug\"\n",
    );
    let refused = |output: Output| {
        assert_eq!(code(&output), 77, "{}", stderr(&output));
        assert!(
            stderr(&output).contains("hint: run `batchbridge login otp` at a terminal"),
            "{}",
            stderr(&output)
        );
    };
    let quick = user.script("quick.sh", "echo one\nsleep 2\necho two\n");
    let long = user.script("long.sh", "sleep 300\n");
    let before = otp_logins(&otp);
    refused(user.run(&["-c", "otp", "submit", quick.to_str().unwrap()]));
    assert!(user.status(&[]).is_empty(), "nothing submitted");

    let mut terminal = user.on_terminal("login otp");
    terminal.read_until("One-time password (OATH) for `batch': ");
    terminal.type_in(&format!("{}\n", totp_code(&otp)));
    let (status, seen) = terminal.finish("login");
    assert_eq!(status, Some(0), "{seen}");
    assert!(seen.contains("otp: logged in; "), "{seen}");
    assert_eq!(otp_logins(&otp) - before, 1);
    let _logged_out = LoggedOutAtTheEnd(&user, "otp");
    let sockets = user.home.path().join(".cache/batchbridge/login");
    let mode = std::fs::metadata(&sockets).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );

    // Ten commands, none on a terminal: one prompt would fail them.
    let job = user.submit(&["-c", "otp", quick.to_str().unwrap()]); // 1
    let output = user.run(&["logs", "-f", &job]); // 2
    assert_eq!(stdout(&output), "one\ntwo\n", "{}", stderr(&output));
    assert_eq!(user.status(&[&job])[0]["status"]["state"], "Succeeded"); // 3
    let sleeper = user.submit(&["-c", "otp", long.to_str().unwrap()]); // 4
    let output = user.run(&["cancel", &sleeper]); // 5
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = user.run(&["-c", "otp", "status"]); // 6
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = user.run(&["logs", "--tail", "1", &job]); // 7
    assert_eq!(stdout(&output), "two\n", "{}", stderr(&output));
    let output = user.run(&["-c", "otp", "clusters"]); // 8
    assert!(
        stdout(&output).contains("otp-login (ssh_config), logged in"),
        "{}",
        stdout(&output)
    );
    let output = user.run(&["wait", &sleeper]); // 9
    assert_eq!(code(&output), 1, "cancelled: {}", stderr(&output));
    let output = user.run(&["forget", &job]); // 10
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let logins = otp_logins(&otp) - before;
    eprintln!("sshd logins for one `login` and ten commands: {logins}");
    assert_eq!(logins, 1);

    let output = user.run(&["logout", "otp"]);
    assert_eq!(stdout(&output), "otp: logged out\n", "{}", stderr(&output));
    assert!(!sockets.join("otp").exists());
    refused(user.run(&["-c", "otp", "status"]));
    refused(user.run(&["cancel", &sleeper]));
    assert_eq!(otp_logins(&otp) - before, 1);
}

/// A cluster reached through bastion.sh's two jump hosts, configured only in the user's
/// ~/.ssh/config (Host, ProxyJump, IdentityFile, UserKnownHostsFile) and named by its
/// alias: submit, status, logs -f and cancel work; a hop whose key is unknown is refused
/// though that ssh_config says StrictHostKeyChecking no, and nothing is added to its known
/// hosts.
#[test]
fn every_command_through_two_bastions_by_an_ssh_config_alias() {
    let bastion = facts("bastion");
    let slurm = login("ssh");
    let hop = |n: usize| &bastion["hops"][n];
    let ssh_config = |hop2_known_hosts: &str| {
        format!(
            "Host bastion1\n    HostName {}\n    Port {}\n    User {}\n    IdentityFile {}\n    \
             UserKnownHostsFile {}\n\
             Host bastion2\n    HostName {}\n    Port {}\n    User {}\n    IdentityFile {}\n    \
             UserKnownHostsFile {hop2_known_hosts}\n    StrictHostKeyChecking no\n    \
             ProxyJump bastion1\n\
             Host hpc\n    HostName {}\n    Port {}\n    User {}\n    IdentityFile {}\n    \
             UserKnownHostsFile {}\n    ProxyJump bastion2\n\
             Host *\n    IdentitiesOnly yes\n",
            fact(hop(0), "host"),
            hop(0)["port"],
            fact(hop(0), "user"),
            fact(hop(0), "key"),
            fact(hop(0), "known_hosts"),
            fact(hop(1), "host"),
            hop(1)["port"],
            fact(hop(1), "user"),
            fact(hop(1), "key"),
            slurm.host,
            slurm.port,
            slurm.user,
            slurm.private_key.display(),
            slurm.known_hosts.display(),
        )
    };
    let user = User::new();
    user.write_ssh_config(&ssh_config(fact(hop(1), "known_hosts")));
    user.add_cluster(
        "hpc",
        "scheduler = \"slurm\"\nssh_alias = \"hpc\"\nssh_config = \"~/.ssh/config\"\n\
         partition = \"debug\"\n",
    );
    run_prints_live_and_exits_with_the_jobs_code(&user, "hpc");
    logs_follow_a_running_job(&user, "hpc");
    cancel_ends_a_job(&user, "hpc");

    let unknown = user.home.path().join("empty_known_hosts");
    std::fs::write(&unknown, "").unwrap();
    user.write_ssh_config(&ssh_config(unknown.to_str().unwrap()));
    let output = user.run(&["-c", "hpc", "clusters"]);
    assert_eq!(code(&output), 77, "{}", stdout(&output));
    assert!(
        stdout(&output).contains("host key verification failed"),
        "{}",
        stdout(&output)
    );
    assert!(
        stdout(&output).contains(&format!(
            "ssh-keyscan -p {} {} | ssh-keygen -lf -",
            hop(1)["port"],
            fact(hop(1), "host")
        )),
        "the hop is named: {}",
        stdout(&output)
    );
    assert_eq!(std::fs::read_to_string(&unknown).unwrap(), "");
}

/// `submit --dry-run` on a SLURM cluster nothing answers at (TEST-NET-1): it connects to
/// nothing, prints each `#SBATCH` line's fate and the spec, and a flag wins over a
/// directive; a refused directive exits 2 naming its line, for a dry run and a submit.
#[test]
fn dry_run_shows_what_became_of_each_directive_without_connecting() {
    let user = User {
        home: tempfile::tempdir().unwrap(),
    };
    // A key file that is never read: nothing logs in.
    let key = user.script("id_ed25519", "not a key\n");
    user.write_config(&format!(
        "[clusters.hpc]\nscheduler = \"slurm\"\nhost = \"192.0.2.1\"\nport = 9\nuser = \"u\"\n\
         key_file = \"{}\"\n",
        key.display()
    ));
    let script = user.script(
        "simulate.sh",
        "#!/bin/bash\n\
         #SBATCH --job-name=simulate\n\
         #SBATCH -p single\n\
         #SBATCH --time=1\n\
         #SBATCH --mem=100M\n\
         #SBATCH -c 2\n\
         #SBATCH -N 1\n\
         #SBATCH --gres=gpu:1\n\
         #SBATCH --array=0-3%2\n\
         #SBATCH --export=MODE=fast\n\
         #SBATCH -A physics\n\
         #SBATCH --qos=normal\n\
         #SBATCH --export=ALL\n\
         srun ./simulate\n",
    );
    let path = script.to_str().unwrap();
    let started = Instant::now();
    let output = user.run(&["-c", "hpc", "submit", "--dry-run", "--cpus", "8", path]);
    assert!(started.elapsed() < Duration::from_secs(10), "it connected");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let shown = stdout(&output);
    for line in [
        "line 2: #SBATCH --job-name=simulate: taken into name",
        "line 3: #SBATCH -p single: taken into queue",
        "line 4: #SBATCH --time=1: taken into resources.wallTime",
        "line 5: #SBATCH --mem=100M: taken into resources.memory",
        "line 6: #SBATCH -c 2: overridden: resources.cpus was set already",
        "line 7: #SBATCH -N 1: taken into resources.nodes",
        "line 8: #SBATCH --gres=gpu:1: taken into resources.gpus",
        "line 9: #SBATCH --array=0-3%2: taken into array",
        "line 10: #SBATCH --export=MODE=fast: taken into environment",
        "line 11: #SBATCH -A physics: passed to the scheduler as [\"--account=physics\"]",
        "line 12: #SBATCH --qos=normal: passed to the scheduler as [\"--qos=normal\"]",
        "line 13: #SBATCH --export=ALL: ignored: ",
    ] {
        assert!(shown.contains(line), "{line}\n{shown}");
    }
    let json = user.run(&[
        "-c",
        "hpc",
        "-o",
        "json",
        "submit",
        "--dry-run",
        "--cpus",
        "8",
        path,
    ]);
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    let json: Value = serde_json::from_str(&stdout(&json)).unwrap();
    let spec = &json["spec"];
    assert_eq!(spec["name"], "simulate");
    assert_eq!(spec["queue"], "single");
    assert_eq!(spec["resources"]["cpus"], 8);
    assert_eq!(spec["resources"]["wallTime"], "1m");
    assert_eq!(spec["resources"]["memory"], "100 MiB");
    assert_eq!(spec["array"]["count"], 4);
    assert_eq!(spec["environment"]["MODE"], "fast");
    assert_eq!(spec["passthrough"]["slurm"][1], "--qos=normal");
    assert_eq!(json["directives"].as_array().unwrap().len(), 12);

    let refused = user.script(
        "out.sh",
        "#!/bin/bash\n#SBATCH -t 5\n#SBATCH --output=x.log\ntrue\n",
    );
    let refused = refused.to_str().unwrap();
    for args in [&["submit", "--dry-run"][..], &["submit"], &["run"]] {
        let output = user.run(&[&["-c", "hpc"], args, &[refused]].concat());
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("line 3: #SBATCH --output=x.log: batchbridge keeps"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

/// A script written for sbatch, submitted as it is: SLURM shows what its `#SBATCH` lines
/// asked for, but where a flag said otherwise, and stderr notes the line the flag won over.
#[test]
fn a_plain_sbatch_script_is_submitted_as_is() {
    let user = User::new();
    let script = user.script(
        "plain.sh",
        "#!/bin/bash\n\
         #SBATCH --job-name=plain-sbatch\n\
         #SBATCH -p single\n\
         #SBATCH --time=1\n\
         #SBATCH --mem=100M\n\
         #SBATCH -c 2\n\
         #SBATCH -H\n\
         hostname\n",
    );
    let output = user.run(&[
        "-c",
        "slurm",
        "submit",
        "--cpus",
        "1",
        script.to_str().unwrap(),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("line 6: #SBATCH -c 2: overridden"),
        "{}",
        stderr(&output)
    );
    let job = stdout(&output).trim().to_owned();
    let shown = scontrol_show(&job);
    assert_eq!(code(&user.run(&["cancel", &job])), 0);
    let words: Vec<&str> = shown.split_whitespace().collect();
    for field in [
        "JobName=plain-sbatch",
        "Partition=single",
        "TimeLimit=00:01:00",
        "MinMemoryNode=100M",
        "Reason=JobHeldUser",
        "CPUs/Task=1",
    ] {
        assert!(words.contains(&field), "{field}: {shown}");
    }
}

/// Counts, every half second until `stop`, the lines `count` prints (as root on the test
/// bed's SLURM 22.05, the host's): the most it saw and how many counts answered.
fn sample_squeue(
    count: Vec<String>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(usize, usize)> {
    std::thread::spawn(move || {
        let (mut most, mut samples) = (0, 0);
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let output = SlurmCluster::Slurm2205
                .as_root(&count[0])
                .args(&count[1..])
                .output()
                .unwrap();
            if output.status.success() {
                most = most.max(stdout(&output).lines().count());
                samples += 1;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        (most, samples)
    })
}

/// Polls `status` of every recorded job until none is active; returns each one's state.
fn wait_all_ended(user: &User, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let states: Vec<String> = user
            .status(&[])
            .iter()
            .map(|row| row["status"]["state"].as_str().unwrap().to_owned())
            .collect();
        let ended = ["Succeeded", "Failed", "Cancelled"];
        if states.iter().all(|state| ended.contains(&state.as_str())) {
            return states;
        }
        assert!(Instant::now() < deadline, "jobs still active: {states:?}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Submit limits hold jobs, never fail them (issue 30): 200 `submit`s in a row of a 5 s job,
/// as a shell loop makes them, to SLURM's partition `capped` (10 jobs per user, tests/testbed/slurm.sh):
/// each one the limit refuses waits, saying so, and goes in when a job ends; squeue never
/// shows more than 10 and all 200 succeed.
#[test]
fn submits_over_a_submit_limit_wait_their_turn() {
    let user = User::new();
    let cap = SlurmCluster::Slurm2205.submit_cap();
    let login = login("ssh");
    user.add_cluster(
        "capped",
        &format!(
            "scheduler = \"slurm\"\nhost = \"{}\"\nport = {}\nuser = \"{}\"\nkey_file = \"{}\"\n\
             known_hosts = \"{}\"\npartition = \"{}\"\n",
            login.host,
            login.port,
            login.user,
            login.private_key.display(),
            login.known_hosts.display(),
            cap.queue,
        ),
    );
    // Long enough that ten are in the scheduler at once: with `true`, each job ends before
    // the next submit (one ssh command each) and the limit is never met.
    let script = user.script("nap.sh", "sleep 5\n");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let squeue = [
        "squeue",
        "-h",
        "-u",
        &login.user,
        "-p",
        &cap.queue,
        "-o",
        "%i",
    ];
    let sampler = sample_squeue(
        squeue.iter().map(|s| (*s).to_owned()).collect(),
        stop.clone(),
    );
    let started = Instant::now();
    let mut waited = 0;
    for _ in 0..200 {
        let output = user.run(&["-c", "capped", "submit", script.to_str().unwrap()]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        if stderr(&output).contains("held locally: the scheduler's submit limit") {
            waited += 1;
        }
    }
    let states = wait_all_ended(&user, Duration::from_secs(600));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (most, samples) = sampler.join().unwrap();
    eprintln!(
        "200 submits through the CLI: {waited} waited for the limit, most in squeue {most} \
         ({samples} samples), {:?}",
        started.elapsed()
    );
    assert_eq!(states.len(), 200);
    assert!(
        states.iter().all(|state| state == "Succeeded"),
        "{states:?}"
    );
    assert!(most <= cap.limit, "squeue showed {most} jobs at once");
    assert!(waited > 0, "no submit met the limit");
    assert!(samples > 10);
}

/// A cluster's `max_queued` keeps `submit` under a limit the site does not enforce: with
/// `max_queued = 2` on the one-job-at-a-time partition, 8 submits in a row never have more
/// than 2 of them in squeue, and each one over says it waits and why.
#[test]
fn max_queued_in_the_config_holds_submits() {
    let user = User::new();
    let login = login("ssh");
    user.add_cluster(
        "limited",
        &format!(
            "scheduler = \"slurm\"\nhost = \"{}\"\nport = {}\nuser = \"{}\"\nkey_file = \"{}\"\n\
             known_hosts = \"{}\"\npartition = \"single\"\nmax_queued = 2\n",
            login.host,
            login.port,
            login.user,
            login.private_key.display(),
            login.known_hosts.display(),
        ),
    );
    // Long enough that the two jobs in the scheduler are still there when the next submit
    // comes, however slowly a loaded machine starts the CLI (with `sleep 1`, only 4 of 6
    // waited in a run beside a CI build).
    let script = user.script("nap.sh", "sleep 5\n");
    // Other tests use `single` too: only this user's jobs, by their name, are counted.
    let name = format!("maxq-{}", std::process::id());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let squeue = ["squeue", "-h", "-p", "single", "-n", &name, "-o", "%i"];
    let sampler = sample_squeue(
        squeue.iter().map(|s| (*s).to_owned()).collect(),
        stop.clone(),
    );
    let mut waited = 0;
    for _ in 0..8 {
        let output = user.run(&[
            "-c",
            "limited",
            "submit",
            "--name",
            &name,
            script.to_str().unwrap(),
        ]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        if stderr(&output).contains("held locally: max_queued: 2 jobs already in the scheduler") {
            waited += 1;
        }
    }
    let states = wait_all_ended(&user, Duration::from_secs(300));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (most, _) = sampler.join().unwrap();
    assert!(
        states.iter().all(|state| state == "Succeeded"),
        "{states:?}"
    );
    assert_eq!(states.len(), 8);
    assert!(most <= 2, "squeue showed {most} of them at once");
    assert!(waited >= 5, "only {waited} submits waited");
}

/// `run --in --out` sends a file, waits for the job and fetches its results before it
/// exits; `get` fetches more later; in a pipe no progress bar is drawn, on a terminal the
/// files' bars are.
fn staging_in_and_out(cluster: &str) {
    let user = User::new();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let input = user.home.path().join("data.csv");
    std::fs::write(&input, &data).unwrap();
    let analyse = user.script(
        "analyse.sh",
        "mkdir -p results\nwc -c < data.csv > results/count\ncp data.csv results/copy.csv\n",
    );
    let back = user.home.path().join("back");
    let out = format!("results/*:{}", back.display());
    let output = user.run(&[
        "-c",
        cluster,
        "run",
        "--in",
        input.to_str().unwrap(),
        "--out",
        &out,
        analyse.to_str().unwrap(),
    ]);
    assert_eq!(code(&output), 0, "{cluster}: {}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(back.join("results/count"))
            .unwrap()
            .trim(),
        "3000000"
    );
    assert_eq!(std::fs::read(back.join("results/copy.csv")).unwrap(), data);
    let said = stderr(&output);
    assert!(
        !said.contains("=====") && !said.contains('\r'),
        "a bar in a pipe: {said:?}"
    );

    let job = user.status(&[]).remove(0)["job"]
        .as_str()
        .unwrap()
        .to_owned();
    let later = user.home.path().join("later");
    let output = user.run(&["get", &job, "results/count", later.to_str().unwrap()]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(later.join("results/count"))
            .unwrap()
            .trim(),
        "3000000"
    );

    let shown = user.home.path().join("shown");
    let line = format!(
        "-c {cluster} run --in {} --out 'results/*:{}' {}",
        input.display(),
        shown.display(),
        analyse.display()
    );
    let mut terminal = user.on_terminal(&line);
    // The job may wait in a busy queue for longer than `finish` waits for the tool to end.
    terminal.read_until("copy.csv (3000000 bytes)");
    let (exit, screen) = terminal.finish("run --in --out on a terminal");
    assert_eq!(exit, Some(0), "{screen}");
    assert!(
        screen.contains("data.csv") && screen.contains("====="),
        "no bars: {screen:?}"
    );
    assert_eq!(std::fs::read(shown.join("results/copy.csv")).unwrap(), data);
}

#[test]
fn staging_on_slurm_over_ssh() {
    staging_in_and_out("slurm");
}
