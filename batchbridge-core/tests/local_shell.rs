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
