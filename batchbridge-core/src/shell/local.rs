//! [`LocalShell`]: commands on this machine.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use async_trait::async_trait;

use super::capture::{exchange, exchange_streams};
use super::lines::stream_lines;
use super::{Command, LineStream, Output, PipeInput, PipeOutput, Shell};
use crate::error::{Error, ErrorKind, Result};

/// Runs commands as child processes of this program.
///
/// ```
/// use batchbridge_core::shell::{Command, LocalShell, Shell};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let out = LocalShell.run(&Command::new("printf").arg("%s").arg("a b")).await?;
/// assert_eq!(out.stdout, b"a b");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalShell;

#[async_trait]
impl Shell for LocalShell {
    fn host(&self) -> &str {
        "local"
    }

    async fn stream(&self, command: &Command) -> Result<LineStream> {
        command.check_no_nul()?;
        let mut child = tokio::process::Command::new(command.get_program())
            .args(command.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| cannot_run(command, err))?;
        let stdout = child
            .stdout
            .take()
            .expect("the command's stdout was asked to be piped");
        Ok(stream_lines(
            stdout,
            child,
            format!("{:?}", command.get_program()),
        ))
    }

    async fn run(&self, command: &Command) -> Result<Output> {
        command.check_no_nul()?;
        let mut child = tokio::process::Command::new(command.get_program())
            .args(command.get_args())
            .stdin(if command.get_stdin().is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| cannot_run(command, err))?;
        let run = async {
            let (stdout, stderr) = exchange(
                child.stdin.take(),
                command.get_stdin(),
                child.stdout.take(),
                child.stderr.take(),
                command.get_output_limit(),
            )
            .await?;
            let status = child.wait().await?;
            Ok::<_, std::io::Error>(Output {
                exit_code: status.code(),
                signal: status.signal(),
                stdout: stdout.data,
                stderr: stderr.data,
                stdout_truncated: stdout.truncated,
                stderr_truncated: stderr.truncated,
            })
        };
        within_time_limit(command, run).await
    }

    async fn pipe(
        &self,
        command: &Command,
        input: Option<PipeInput>,
        output: Option<PipeOutput>,
    ) -> Result<Output> {
        command.check_no_nul()?;
        let piped = |yes: bool| if yes { Stdio::piped() } else { Stdio::null() };
        let mut child = tokio::process::Command::new(command.get_program())
            .args(command.get_args())
            .stdin(piped(input.is_some()))
            .stdout(piped(output.is_some()))
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| cannot_run(command, err))?;
        let run = async {
            let stderr = exchange_streams(
                child.stdin.take(),
                input,
                child.stdout.take(),
                output,
                child.stderr.take(),
                command.get_output_limit(),
            )
            .await?;
            let status = child.wait().await?;
            Ok::<_, std::io::Error>(Output {
                exit_code: status.code(),
                signal: status.signal(),
                stderr: stderr.data,
                stderr_truncated: stderr.truncated,
                ..Output::default()
            })
        };
        within_time_limit(command, run).await
    }
}

/// `run`, the exchange with `command`'s spawned child, cut off at the command's time limit;
/// the child, spawned with `kill_on_drop`, is killed with it.
async fn within_time_limit(
    command: &Command,
    run: impl Future<Output = std::io::Result<Output>>,
) -> Result<Output> {
    match tokio::time::timeout(command.get_timeout(), run).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "{:?} did not finish within {:?}; it was killed",
                command.get_program(),
                command.get_timeout()
            ),
        )),
    }
}

fn cannot_run(command: &Command, err: std::io::Error) -> Error {
    Error::new(
        ErrorKind::CommandFailed,
        format!("cannot run {:?}: {err}", command.get_program()),
    )
    .with_source(err)
    .permanent()
}
