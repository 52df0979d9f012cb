//! `LocalShell`: the transport for commands on this machine.

use std::time::{Duration, Instant};

use batchbridge_core::ErrorKind;
use batchbridge_core::shell::{Command, LocalShell, Shell};

#[tokio::test]
async fn runs_programs_with_arguments_verbatim() {
    let out = LocalShell
        .run(&Command::new("printf").args(["[%s]", "a b", "$(id)", "it's", "ü"]))
        .await
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout_text(), "[a b][$(id)][it's][ü]");
}

#[tokio::test]
async fn reports_exit_codes_signals_and_stderr() {
    let out = LocalShell
        .run(&Command::new("sh").args(["-c", "echo bad >&2; exit 5"]))
        .await
        .unwrap();
    assert_eq!(
        (out.exit_code, out.stderr_text().as_str()),
        (Some(5), "bad")
    );
    let out = LocalShell
        .run(&Command::new("sh").args(["-c", "kill -TERM $$"]))
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.signal), (None, Some(15)));
    assert!(
        out.check("sh")
            .unwrap_err()
            .message()
            .contains("killed by signal 15")
    );
}

#[tokio::test]
async fn feeds_stdin_and_bounds_output() {
    let input = vec![b'z'; 2 * 1024 * 1024];
    let out = LocalShell
        .run(&Command::new("cat").stdin(input.clone()).output_limit(1024))
        .await
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout, &input[..1024]);
    assert!(out.stdout_truncated && !out.stderr_truncated);
}

#[tokio::test]
async fn a_missing_program_is_a_clear_permanent_error() {
    let err = LocalShell
        .run(&Command::new("no-such-program-batchbridge"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CommandFailed);
    assert!(!err.is_temporary());
    assert!(
        err.message().contains("no-such-program-batchbridge"),
        "{err}"
    );
}

#[tokio::test]
async fn a_slow_program_is_killed_at_its_time_limit() {
    let started = Instant::now();
    let err = LocalShell
        .run(
            &Command::new("sleep")
                .arg("30")
                .timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn nul_bytes_in_arguments_are_refused() {
    let err = LocalShell
        .run(&Command::new("echo").arg("a\0b"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn a_stream_hands_over_lines_as_printed_and_ends_with_the_command() {
    let gate = tempfile::tempdir().unwrap();
    let gate = gate.path().join("gate");
    let mut lines = LocalShell
        .stream(&Command::sh(
            r#"echo first; while [ ! -e "$1" ]; do sleep 0.05; done; echo second"#,
            [gate.to_str().unwrap()],
        ))
        .await
        .unwrap();
    assert_eq!(lines.recv().await.unwrap().unwrap(), "first");
    std::fs::write(&gate, "").unwrap();
    assert_eq!(lines.recv().await.unwrap().unwrap(), "second");
    assert!(lines.recv().await.is_none());
}

#[tokio::test]
async fn dropping_a_stream_kills_its_command() {
    let mut lines = LocalShell
        .stream(&Command::sh(
            "echo $$; while :; do echo tick; sleep 0.1; done",
            Vec::<String>::new(),
        ))
        .await
        .unwrap();
    let pid: i32 = lines.recv().await.unwrap().unwrap().parse().unwrap();
    drop(lines);
    let mut gone = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Reaped (gone) or a zombie waiting for tokio's reaper: either way not running.
        gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.contains(") Z "));
        if gone {
            break;
        }
    }
    assert!(
        gone,
        "process {pid} still runs after the stream was dropped"
    );
}
