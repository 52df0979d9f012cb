//! The transport backends use to reach a cluster: run a program, write a file.
//!
//! A [`Shell`] runs one program with arguments and optional stdin on a host and captures its
//! exit status and output, each stream bounded by a size limit, the whole bounded by a
//! timeout. [`LocalShell`] runs on this machine; [`SshShell`] runs over one multiplexed
//! OpenSSH connection per host. Arguments are never glued into a command line by hand:
//! [`Command::to_shell_line`] quotes them with `shlex`.

mod capture;
mod certificate;
mod connect_failure;
mod credential;
mod jump;
mod kerberos;
mod lines;
mod local;
mod private_file;
mod ssh;

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};

pub use certificate::Certificate;
pub use credential::{HostKeys, Password, SshAuth};
pub use jump::JumpHost;
pub use kerberos::{KerberosKeytab, Keytab};
pub use local::LocalShell;
pub use ssh::{AES_GCM_FIRST, SshConfig, SshShell};

/// Default time limit for one command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default size limit for each captured stream.
pub const DEFAULT_OUTPUT_LIMIT: usize = 8 * 1024 * 1024;
/// The longest command line a remote shell accepts: `sshd` hands the whole line to the
/// login shell as one argument (`bash -c LINE`), and Linux refuses any one argument longer
/// than this (`MAX_ARG_STRLEN`, 128 KiB with its terminating NUL). [`SshShell`] refuses a
/// longer line itself, as invalid input, instead of sending one that cannot run.
pub const MAX_COMMAND_LINE: usize = 128 * 1024 - 1;

/// One program invocation: no shell interprets the arguments on the local side, and on a
/// remote host they arrive quoted, verbatim.
///
/// Named like [`std::process::Command`]: the builder methods are `arg`, `args`, `stdin`,
/// `timeout` and `output_limit`; what was set reads back through `get_program`,
/// `get_args`, `get_stdin`, `get_timeout` and `get_output_limit`.
///
/// ```
/// use batchbridge_core::shell::Command;
///
/// let cmd = Command::new("squeue").arg("--name").arg("it's $(evil)");
/// let line = cmd.to_shell_line().unwrap();
/// assert_eq!(line, r#"squeue --name "it's "'$(evil)'"#);
/// // A POSIX shell splits the line back into exactly the words given.
/// assert_eq!(shlex::split(&line).unwrap(), ["squeue", "--name", "it's $(evil)"]);
/// assert!(Command::new("echo").arg("nul\0byte").to_shell_line().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    program: String,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    output_limit: usize,
    bulk: bool,
}

impl Command {
    /// A command running `program` (looked up in `PATH`).
    pub fn new(program: impl Into<String>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            stdin: None,
            timeout: DEFAULT_TIMEOUT,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            bulk: false,
        }
    }

    /// `sh -c SCRIPT sh ARGS...`: a constant script whose values all arrive as positional
    /// parameters (`$1`, `$2`…), so no value is ever parsed as shell code.
    ///
    /// ```
    /// use batchbridge_core::shell::Command;
    ///
    /// let cmd = Command::sh("printf '%s\\n' \"$1\"", ["$(rm -rf ~)"]);
    /// assert_eq!(cmd.get_program(), "sh");
    /// assert_eq!(cmd.get_args(), ["-c", "printf '%s\\n' \"$1\"", "sh", "$(rm -rf ~)"]);
    /// ```
    pub fn sh<I, S>(script: &str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new("sh").arg("-c").arg(script).arg("sh").args(args)
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Feeds these bytes to the program's standard input (otherwise it reads nothing).
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// The time limit for the whole command.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most bytes kept of stdout and of stderr; the rest is read and dropped.
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// Marks the command as bulk work (a batch of submits, a staged file's transfer), which
    /// a shell that runs only so many commands at once lets take all but a few of its
    /// places, so that a burst of it never keeps short commands (a status poll, an output
    /// read) waiting behind it. [`SshShell`] keeps 2 of its
    /// [`max_sessions`](SshConfig::max_sessions) for commands that are not bulk, and gives a
    /// bulk command's stdout a 1 MiB pipe.
    ///
    /// ```
    /// use batchbridge_core::shell::Command;
    ///
    /// assert!(Command::new("sbatch").bulk().is_bulk());
    /// assert!(!Command::new("squeue").is_bulk());
    /// ```
    pub fn bulk(mut self) -> Self {
        self.bulk = true;
        self
    }

    /// Whether the command is [`bulk`](Self::bulk) work.
    pub fn is_bulk(&self) -> bool {
        self.bulk
    }

    /// The program.
    pub fn get_program(&self) -> &str {
        &self.program
    }

    /// The tool that does the work, for counting commands by tool: the program, or for
    /// `env NAME=VALUE… PROGRAM` (how backends set a command's environment) that program.
    ///
    /// ```
    /// use batchbridge_core::shell::Command;
    ///
    /// assert_eq!(Command::new("env").args(["SQUEUE_FORMAT=%i", "squeue"]).tool(), "squeue");
    /// assert_eq!(Command::new("sbatch").arg("--parsable").tool(), "sbatch");
    /// ```
    pub fn tool(&self) -> &str {
        match self.program.as_str() {
            "env" => self
                .args
                .iter()
                .find(|arg| !arg.contains('='))
                .map_or("env", String::as_str),
            program => program,
        }
    }

    /// The arguments.
    pub fn get_args(&self) -> &[String] {
        &self.args
    }

    /// The standard input, if any.
    pub fn get_stdin(&self) -> Option<&[u8]> {
        self.stdin.as_deref()
    }

    /// The time limit.
    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }

    /// The per-stream output limit.
    pub fn get_output_limit(&self) -> usize {
        self.output_limit
    }

    /// The command as one POSIX shell line, every word quoted so a shell reads it back
    /// verbatim. Fails on NUL bytes, which no command line can carry.
    pub fn to_shell_line(&self) -> Result<String> {
        self.check_no_nul()?;
        let words =
            std::iter::once(self.program.as_str()).chain(self.args.iter().map(String::as_str));
        shlex::try_join(words).map_err(|err| {
            Error::invalid_input(format!("cannot quote command {:?}: {err}", self.program))
        })
    }

    pub(crate) fn check_no_nul(&self) -> Result<()> {
        if self.program.contains('\0') || self.args.iter().any(|a| a.contains('\0')) {
            return Err(Error::invalid_input(format!(
                "command {:?}: arguments must not contain NUL bytes",
                self.program.replace('\0', "\\0")
            )));
        }
        Ok(())
    }
}

/// What a finished command left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The exit code, when the program exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the program, when one did and the transport can tell.
    pub signal: Option<i32>,
    /// Standard output, at most the command's output limit.
    pub stdout: Vec<u8>,
    /// Standard error, at most the command's output limit.
    pub stderr: Vec<u8>,
    /// Whether stdout was longer than the limit.
    pub stdout_truncated: bool,
    /// Whether stderr was longer than the limit.
    pub stderr_truncated: bool,
}

impl Output {
    /// Whether the program exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// Stdout as text (invalid UTF-8 replaced).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text (invalid UTF-8 replaced), trimmed.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_owned()
    }

    /// `Ok(self)` on exit code 0, else a [`ErrorKind::CommandFailed`] error naming `what`
    /// and quoting stderr.
    ///
    /// ```
    /// use batchbridge_core::shell::Output;
    ///
    /// let failed = Output { exit_code: Some(1), stderr: b"no such partition\n".to_vec(), ..Output::default() };
    /// let err = failed.check("sbatch").unwrap_err();
    /// assert_eq!(err.to_string(), "command failed: sbatch exited with 1: no such partition");
    /// ```
    pub fn check(self, what: &str) -> Result<Self> {
        if self.success() {
            return Ok(self);
        }
        let how = match (self.exit_code, self.signal) {
            (Some(code), _) => format!("exited with {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            (None, None) => "ended without an exit code".to_owned(),
        };
        Err(Error::new(
            ErrorKind::CommandFailed,
            format!("{what} {how}: {}", self.stderr_text()),
        ))
    }
}

/// Runs programs on one host.
///
/// Implement it to reach a cluster some other way (a jump service, a REST gateway); every
/// backend built on a `Shell` then works over it.
// The mock is public under the `conformance` feature: backend crates unit-test their error
// paths with it (conformance::scripted).
#[cfg_attr(any(test, feature = "conformance"), mockall::automock)]
#[async_trait]
pub trait Shell: Send + Sync + std::fmt::Debug {
    /// Where commands run, for messages (`"local"`, `"batch@login1:22"`).
    fn host(&self) -> &str;

    /// Runs a command to completion. A non-zero exit is an `Ok` [`Output`]; only a command
    /// that could not be run, timed out, or lost its connection is an `Err`.
    async fn run(&self, command: &Command) -> Result<Output>;

    /// Starts a long-lived command (an event follower) and hands back its stdout line by
    /// line, without the line ends, as it prints them. The channel closes when the command
    /// ends or its connection drops; dropping the receiver stops the command. Lines longer
    /// than [`MAX_STREAM_LINE`] arrive cut to that length. The command's timeout does not
    /// apply. A shell that cannot keep a command running says Unsupported (the default).
    async fn stream(&self, command: &Command) -> Result<LineStream> {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the shell to {} cannot keep `{}` running",
                self.host(),
                command.tool()
            ),
        ))
    }

    /// Runs a command to completion like [`run`](Self::run), but streams: its standard
    /// input is read from `input` (the command's own stdin, if any, is not used) and its
    /// standard output written to `output` as they go, so a transfer of any size costs
    /// bounded memory. The returned [`Output`]'s stdout is empty when `output` is given; its
    /// stderr is captured as usual. The command's timeout covers the whole transfer. A shell
    /// that cannot stream says Unsupported (the default).
    async fn pipe(
        &self,
        command: &Command,
        input: Option<PipeInput>,
        output: Option<PipeOutput>,
    ) -> Result<Output> {
        let _ = (input, output);
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the shell to {} cannot stream data through `{}`",
                self.host(),
                command.tool()
            ),
        ))
    }
}

/// A byte source streamed into a command's standard input by [`Shell::pipe`].
pub type PipeInput = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
/// Where [`Shell::pipe`] streams a command's standard output.
pub type PipeOutput = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// The most bytes of one line a [`Shell::stream`] hands over; the rest of a longer line is
/// dropped, so a command printing without line ends costs bounded memory.
pub const MAX_STREAM_LINE: usize = 64 * 1024;

/// The lines of a command kept running by [`Shell::stream`]; an `Err` says why the command
/// or its connection ended early, and is the last item.
pub type LineStream = tokio::sync::mpsc::Receiver<Result<String>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_lines_quote_every_hostile_word() {
        let cases: &[(&[&str], &str)] = &[
            (&["squeue", "-h"], "squeue -h"),
            (&["echo", "a b"], "echo 'a b'"),
            (&["echo", ""], "echo ''"),
            (&["echo", "it's"], r#"echo "it's""#),
            (&["echo", "$(id)"], "echo '$(id)'"),
            (&["echo", "`id`"], "echo '`id`'"),
            (&["echo", "a;b|c&d"], "echo 'a;b|c&d'"),
            (&["echo", "line\nbreak"], "echo 'line\nbreak'"),
            (&["echo", "ünïcode"], "echo 'ünïcode'"),
        ];
        for (words, expected) in cases {
            let cmd = Command::new(words[0]).args(words[1..].iter().copied());
            assert_eq!(cmd.to_shell_line().unwrap(), *expected, "{words:?}");
        }
    }

    #[test]
    fn nul_bytes_are_refused_with_a_clear_error() {
        let err = Command::new("echo")
            .arg("a\0b")
            .to_shell_line()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("NUL"), "{err}");
    }
}
