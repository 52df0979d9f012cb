//! A [`Shell`] that answers a backend's commands with canned replies, for unit tests of the
//! error paths a real cluster cannot produce on demand (a scheduler that does not answer, a
//! submit cut off mid-way). Built on [`MockShell`], the [`mockall`](https://docs.rs/mockall)
//! mock of [`Shell`] this feature also exports, for tests that check each command.
//!
//! ```
//! use batchbridge_core::conformance::scripted::{reply, scripted_shell};
//! use batchbridge_core::shell::Command;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (shell, programs) = scripted_shell("/w", vec![reply(1, "", "sbatch: error: down\n")]);
//! let output = shell.run(&Command::new("sbatch")).await.unwrap();
//! assert_eq!(output.exit_code, Some(1));
//! assert_eq!(*programs.lock().unwrap(), ["sbatch"]);
//! # }
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;
use crate::shell::{MockShell, Output, Shell};

/// The programs a [`scripted_shell`] was asked to run, in order (the work directory's
/// resolution left out).
pub type Programs = Arc<Mutex<Vec<String>>>;

/// A shell that resolves the work directory (`remote::WorkDir`'s `mkdir -p`) to
/// `work_dir` and answers every other command with the next of `replies`; a command
/// beyond them panics (fails the test).
pub fn scripted_shell(work_dir: &str, replies: Vec<Result<Output>>) -> (Arc<dyn Shell>, Programs) {
    let replies = Mutex::new(VecDeque::from(replies));
    let programs = Programs::default();
    let seen = Arc::clone(&programs);
    let resolved = format!("{work_dir}\n");
    let mut shell = MockShell::new();
    shell.expect_host().return_const("scripted".to_owned());
    shell.expect_run().returning(move |command| {
        if command
            .get_args()
            .get(1)
            .is_some_and(|s| s.starts_with("mkdir -p"))
        {
            return reply(0, &resolved, "");
        }
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(command.get_program().to_owned());
        replies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .unwrap_or_else(|| panic!("unexpected command {command:?}"))
    });
    (Arc::new(shell), programs)
}

/// A command that exited with `exit_code`, printing `stdout` and `stderr`.
pub fn reply(exit_code: i32, stdout: &str, stderr: &str) -> Result<Output> {
    Ok(Output {
        exit_code: Some(exit_code),
        stdout: stdout.into(),
        stderr: stderr.into(),
        ..Output::default()
    })
}

/// What a backend's submit command (the batch script of
/// [`RemoteBackend`](crate::remote::RemoteBackend)) prints for one job: its record, with
/// `outcome` `submitted` or `existing` and the job's `id`, `claimed` (another submit holds
/// the key), or the exit code of what failed (71, a refusal) and its `message`.
///
/// ```
/// use batchbridge_core::conformance::scripted::submit_record;
///
/// let refused = submit_record("key-1", "71", None, "sbatch: error: bad\n").unwrap();
/// assert_eq!(refused.stdout, b"key-1 71 - 19\nsbatch: error: bad\n");
/// assert_eq!(submit_record("key-1", "submitted", Some("42"), "").unwrap().stdout, b"key-1 submitted 42 0\n");
/// ```
pub fn submit_record(key: &str, outcome: &str, id: Option<&str>, message: &str) -> Result<Output> {
    let id = id.unwrap_or("-");
    let record = format!("{key} {outcome} {id} {}\n{message}", message.len());
    reply(0, &record, "")
}
