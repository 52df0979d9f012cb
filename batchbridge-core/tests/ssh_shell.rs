//! `SshShell` against the real sshd that `tests/testbed/up.sh` starts on 127.0.0.1:2222.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use batchbridge_core::ErrorKind;
use batchbridge_core::shell::{Command, HostKeys, Password, Shell, SshAuth, SshShell};
use batchbridge_testbed::{ssh_facts, whoami};

#[tokio::test]
async fn key_authentication_runs_commands_as_the_user() {
    let shell = ssh_facts().key_shell();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    assert_eq!(shell.host(), "batch@127.0.0.1:2222");
}

#[tokio::test]
async fn password_authentication_through_askpass() {
    let f = ssh_facts();
    let shell = SshShell::new(f.config(
        SshAuth::Password(Password::new(f.password.clone())),
        HostKeys::File(f.known_hosts.clone()),
    ))
    .unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
}

#[tokio::test]
async fn key_and_host_keys_given_as_text() {
    let f = ssh_facts();
    let key = std::fs::read_to_string(&f.private_key).unwrap();
    let entries = std::fs::read_to_string(&f.known_hosts).unwrap();
    let shell = SshShell::new(f.config(
        SshAuth::Key(Password::new(key.trim_end())),
        HostKeys::Entries(entries),
    ))
    .unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
}

/// An ssh-agent of its own on a socket in `dir`, holding `key` when given; stopped on drop.
struct Agent(std::process::Child);

impl Agent {
    fn start(dir: &std::path::Path, key: Option<&std::path::Path>) -> (Self, std::path::PathBuf) {
        let socket = dir.join("agent.sock");
        let agent = std::process::Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        while !socket.exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if let Some(key) = key {
            let added = std::process::Command::new("ssh-add")
                .arg(key)
                .env("SSH_AUTH_SOCK", &socket)
                .output()
                .unwrap();
            assert!(added.status.success(), "{added:?}");
        }
        (Self(agent), socket)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn an_agents_key_logs_in_and_an_empty_agent_is_refused() {
    let f = ssh_facts();
    let dir = tempfile::tempdir().unwrap();
    let (_agent, socket) = Agent::start(dir.path(), Some(&f.private_key));
    let shell = SshShell::new(f.config(
        SshAuth::Agent(socket),
        HostKeys::File(f.known_hosts.clone()),
    ))
    .unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");

    let empty = tempfile::tempdir().unwrap();
    let (_agent, socket) = Agent::start(empty.path(), None);
    let shell = SshShell::new(f.config(
        SshAuth::Agent(socket),
        HostKeys::File(f.known_hosts.clone()),
    ))
    .unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AuthenticationFailed, "{err}");
}

#[tokio::test]
async fn a_wrong_host_key_is_refused() {
    let f = ssh_facts();
    let shell = SshShell::new(f.config(
        SshAuth::KeyFile(f.private_key.clone()),
        HostKeys::File(f.wrong_known_hosts.clone()),
    ))
    .unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HostKeyMismatch, "{err}");
    assert!(!err.is_temporary());
    assert!(err.message().contains("batch@127.0.0.1:2222"), "{err}");
}

#[tokio::test]
async fn an_unknown_host_is_refused_when_strict() {
    let f = ssh_facts();
    let shell = SshShell::new(f.config(
        SshAuth::KeyFile(f.private_key.clone()),
        HostKeys::Entries(String::new()),
    ))
    .unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HostKeyMismatch, "{err}");
}

#[tokio::test]
async fn a_wrong_password_is_an_authentication_error() {
    let f = ssh_facts();
    let shell = SshShell::new(f.config(
        SshAuth::Password(Password::new("not-the-password")),
        HostKeys::File(f.known_hosts.clone()),
    ))
    .unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AuthenticationFailed, "{err}");
    assert!(
        !err.message().contains("not-the-password"),
        "the password leaked: {err}"
    );
}

/// A site locks an account after a few refused logins: refused credentials are not tried
/// again until the wait is over, and the error says so.
#[tokio::test]
async fn refused_credentials_are_not_tried_again_until_the_wait_is_over() {
    let f = ssh_facts();
    let mut config = f.config(
        SshAuth::Password(Password::new("not-the-password")),
        HostKeys::File(f.known_hosts.clone()),
    );
    config.refused_login_backoff = Duration::from_secs(3);
    let shell = SshShell::new(config).unwrap();

    let first = whoami(&shell).await.unwrap_err();
    assert_eq!(first.kind(), ErrorKind::AuthenticationFailed, "{first}");
    assert!(
        first
            .message()
            .contains("refused once: no new login for 3s"),
        "{first}"
    );
    // Within the wait nothing reaches sshd: the count stays at one.
    let again = whoami(&shell).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::AuthenticationFailed, "{again}");
    assert!(
        again.message().contains("refused once: no new login for"),
        "{again}"
    );
    assert!(!again.is_temporary(), "{again}");

    tokio::time::sleep(Duration::from_millis(3500)).await;
    // After it, one new login, refused again: the next wait is twice as long.
    let later = whoami(&shell).await.unwrap_err();
    assert!(
        later
            .message()
            .contains("refused 2 times in a row: no new login for 6s"),
        "{later}"
    );
}

#[tokio::test]
async fn a_closed_port_is_unreachable_and_temporary() {
    let f = ssh_facts();
    let shell = SshShell::new(
        f.config(
            SshAuth::KeyFile(f.private_key.clone()),
            HostKeys::File(f.known_hosts.clone()),
        )
        .port(1),
    )
    .unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    assert!(err.is_temporary());
    assert!(err.message().contains("Connection refused"), "{err}");
}

#[tokio::test]
async fn hostile_arguments_arrive_verbatim() {
    let shell = ssh_facts().key_shell();
    let hostile = [
        "it's",
        "$(touch /tmp/batchbridge-canary)",
        "`touch /tmp/batchbridge-canary`",
        "a; touch /tmp/batchbridge-canary",
        "line\nbreak",
        "ünïcødé ✓",
        "",
        "*",
        "--",
    ];
    let out = shell
        .run(&Command::new("printf").arg("[%s]\\n").args(hostile))
        .await
        .unwrap()
        .check("printf")
        .unwrap();
    let expected: String = hostile.iter().map(|h| format!("[{h}]\n")).collect();
    assert_eq!(out.stdout_text(), expected);
    let canary = shell
        .run(&Command::new("test").args(["-e", "/tmp/batchbridge-canary"]))
        .await
        .unwrap();
    assert_eq!(
        canary.exit_code,
        Some(1),
        "the canary file exists: something was evaluated"
    );
}

#[tokio::test]
async fn exit_codes_stdin_and_output_limits() {
    let shell = ssh_facts().key_shell();
    let out = shell
        .run(&Command::new("sh").args(["-c", "echo oops >&2; exit 7"]))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(7));
    assert_eq!(out.stderr_text(), "oops");
    assert_eq!(
        out.check("sh").unwrap_err().kind(),
        ErrorKind::CommandFailed
    );

    let missing = shell
        .run(&Command::new("no-such-program-batchbridge"))
        .await
        .unwrap();
    assert_eq!(missing.exit_code, Some(127));

    let input: Vec<u8> = (0..=255u8).cycle().take(3 * 1024 * 1024).collect();
    let echoed = shell
        .run(&Command::new("cat").stdin(input.clone()))
        .await
        .unwrap();
    assert!(echoed.success());
    assert_eq!(echoed.stdout.len(), input.len());
    assert!(echoed.stdout == input, "binary stdin came back changed");

    let big = shell
        .run(
            &Command::new("head")
                .args(["-c", "5000000", "/dev/zero"])
                .output_limit(1000),
        )
        .await
        .unwrap();
    assert!(big.success());
    assert_eq!(big.stdout.len(), 1000);
    assert!(big.stdout_truncated);
}

#[tokio::test]
async fn a_slow_command_times_out() {
    let shell = ssh_facts().key_shell();
    let err = shell
        .run(
            &Command::new("sleep")
                .arg("30")
                .timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(
        whoami(&shell).await.unwrap(),
        "batch",
        "the connection survives a timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_commands_share_one_connection() {
    let shell = std::sync::Arc::new(ssh_facts().key_shell());
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let shell = shell.clone();
            tokio::spawn(async move {
                let out = shell
                    .run(&Command::new("echo").arg(i.to_string()))
                    .await
                    .unwrap();
                assert_eq!(out.stdout_text(), format!("{i}\n"));
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(shell.connections_opened(), 1);
}

/// Bulk commands (a burst of submit batches) take all sessions but two, one after another
/// here with 3 sessions, while a short command started after them runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_commands_leave_sessions_for_short_ones() {
    let f = ssh_facts();
    let mut config = f.config(
        SshAuth::KeyFile(f.private_key.clone()),
        HostKeys::File(f.known_hosts.clone()),
    );
    config.max_sessions = 3;
    let shell = std::sync::Arc::new(SshShell::new(config).unwrap());
    whoami(&*shell).await.unwrap();
    let times = |output: batchbridge_core::shell::Output| -> Vec<f64> {
        output
            .stdout_text()
            .lines()
            .map(|line| line.parse().unwrap())
            .collect()
    };
    let bulk = || {
        let shell = shell.clone();
        tokio::spawn(async move {
            let command = Command::sh("date +%s.%N; sleep 2; date +%s.%N", [] as [&str; 0]).bulk();
            shell.run(&command).await.unwrap()
        })
    };
    let (first, second) = (bulk(), bulk());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let short = shell
        .run(&Command::new("date").arg("+%s.%N"))
        .await
        .unwrap();
    let (first, second) = (times(first.await.unwrap()), times(second.await.unwrap()));
    let short = times(short)[0];
    let (first_ended, second_started) = (first[1].min(second[1]), first[0].max(second[0]));
    assert!(
        second_started >= first_ended,
        "the two bulk commands ran at once: {first:?} {second:?}"
    );
    assert!(
        short < first_ended,
        "the short command waited for a bulk one: at {short}, the first bulk ended at {first_ended}"
    );
}

#[tokio::test]
async fn a_killed_connection_is_reestablished() {
    let shell = ssh_facts().key_shell();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    // Kill the server side of our connection from inside it, as a network drop would.
    let killed = shell
        .run(&Command::new("sh").args([
            "-c",
            "kill -9 $(ps -o ppid= -p $PPID) $PPID 2>/dev/null; sleep 5",
        ]))
        .await;
    assert!(
        killed.is_err() || killed.as_ref().is_ok_and(|o| !o.success()),
        "{killed:?}"
    );
    if let Err(err) = &killed {
        assert_eq!(err.kind(), ErrorKind::ConnectionLost, "{err}");
        assert!(err.is_temporary());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    assert_eq!(shell.connections_opened(), 2);
}

/// Every file under `dir`, with its mode and whether it holds `secret`.
fn files_holding(dir: &std::path::Path, secret: &str) -> Vec<(std::path::PathBuf, u32, bool)> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o7777;
        if entry.file_type().unwrap().is_dir() {
            found.push((path.clone(), mode, false));
            found.extend(files_holding(&path, secret));
        } else {
            let text = std::fs::read(&path).unwrap_or_default();
            let holds = String::from_utf8_lossy(&text).contains(secret);
            found.push((path, mode, holds));
        }
    }
    found
}

/// A key or password given as text is on disk only while the master authenticates, also
/// when it reconnects; the private directory is 0700, in the runtime directory asked for, and
/// gone with the shell.
#[tokio::test]
async fn credentials_are_on_disk_only_while_the_master_authenticates() {
    let f = ssh_facts();
    let key = std::fs::read_to_string(&f.private_key).unwrap();
    let key_body = key.lines().nth(1).unwrap().to_owned();
    for (auth, secret) in [
        (SshAuth::Key(Password::new(key.clone())), key_body),
        (
            SshAuth::Password(Password::new(f.password.clone())),
            f.password.clone(),
        ),
    ] {
        let runtime = tempfile::tempdir().unwrap();
        let mut config = f.config(auth, HostKeys::File(f.known_hosts.clone()));
        config.runtime_dir = Some(runtime.path().to_owned());
        let shell = SshShell::new(config).unwrap();
        for round in 0..2 {
            assert_eq!(whoami(&shell).await.unwrap(), "batch");
            let files = files_holding(runtime.path(), &secret);
            let dirs: Vec<_> = files.iter().filter(|(p, _, _)| p.is_dir()).collect();
            assert_eq!(dirs.len(), 1, "one private directory: {files:?}");
            assert_eq!(dirs[0].1, 0o700, "{files:?}");
            assert!(
                files.iter().all(|(_, _, holds)| !holds),
                "round {round}: the credential is still on disk: {files:?}"
            );
            // Drop the connection from the server's side: the next command reconnects.
            let _ = shell
                .run(&Command::new("sh").args([
                    "-c",
                    "kill -9 $(ps -o ppid= -p $PPID) $PPID 2>/dev/null; sleep 5",
                ]))
                .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(shell.connections_opened(), 2);
        drop(shell);
        assert_eq!(
            std::fs::read_dir(runtime.path()).unwrap().count(),
            0,
            "the private directory goes with the shell"
        );
    }
}

/// A long-lived command's lines arrive while it runs, over the connection the commands use.
#[tokio::test]
async fn a_stream_hands_over_lines_as_printed_on_the_same_connection() {
    let shell = ssh_facts().key_shell();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    let mut lines = shell
        .stream(&Command::sh(
            r#"echo first; while [ ! -e "$1" ]; do sleep 0.05; done; echo second"#,
            ["/tmp/batchbridge-stream-gate-ssh"],
        ))
        .await
        .unwrap();
    // The second line waits for a file only this test makes after reading the first.
    assert_eq!(lines.recv().await.unwrap().unwrap(), "first");
    shell
        .run(&Command::new("touch").arg("/tmp/batchbridge-stream-gate-ssh"))
        .await
        .unwrap();
    assert_eq!(lines.recv().await.unwrap().unwrap(), "second");
    assert!(
        lines.recv().await.is_none(),
        "the stream ends with the command"
    );
    shell
        .run(&Command::new("rm").arg("/tmp/batchbridge-stream-gate-ssh"))
        .await
        .unwrap();
    assert_eq!(shell.connections_opened(), 1);
}

/// Dropping the stream stops the remote command (at its next write).
#[tokio::test]
async fn dropping_a_stream_stops_its_remote_command() {
    let shell = ssh_facts().key_shell();
    let mut lines = shell
        .stream(&Command::sh(
            "echo $$; while :; do echo tick; sleep 0.1; done",
            Vec::<String>::new(),
        ))
        .await
        .unwrap();
    let pid = lines.recv().await.unwrap().unwrap();
    assert_eq!(lines.recv().await.unwrap().unwrap(), "tick");
    drop(lines);
    let mut alive = true;
    for _ in 0..50 {
        let probe = shell
            .run(&Command::new("kill").args(["-0", &pid]))
            .await
            .unwrap();
        alive = probe.success();
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !alive,
        "remote process {pid} still runs after the stream was dropped"
    );
}

/// A connection killed under a stream ends it; the shell's next command reconnects.
#[tokio::test]
async fn a_killed_connection_ends_the_stream() {
    let shell = ssh_facts().key_shell();
    let mut lines = shell
        .stream(&Command::sh(
            "echo $PPID $(ps -o ppid= -p $PPID); while :; do echo tick; sleep 0.1; done",
            Vec::<String>::new(),
        ))
        .await
        .unwrap();
    // The server side of the connection, killed as a network drop would.
    let sshd = lines.recv().await.unwrap().unwrap();
    let _ = shell
        .run(&Command::new("kill").arg("-9").args(sshd.split_whitespace()))
        .await;
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.recv().await {
            if line.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream did not end with its connection");
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
}
