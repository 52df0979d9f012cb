//! A mocked [`Shell`] that answers a backend's commands with canned replies, for unit
//! tests of error paths a real cluster cannot produce on demand (a schedd that does not
//! answer, a submit cut off mid-way).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use batchbridge_core::Result;
use batchbridge_core::shell::{Command, Output, Shell};

mockall::mock! {
    /// A [`Shell`] whose answers a test sets.
    pub Shell {}
    impl std::fmt::Debug for Shell {
        fn fmt<'a>(&self, f: &mut std::fmt::Formatter<'a>) -> std::fmt::Result;
    }
    #[async_trait]
    impl Shell for Shell {
        fn host(&self) -> &str;
        async fn run(&self, command: &Command) -> Result<Output>;
    }
}

/// The programs a [`scripted_shell`] was asked to run, in order (the work directory's
/// resolution left out).
pub type Programs = Arc<Mutex<Vec<String>>>;

/// A shell that resolves the work directory (`remote::WorkDir`'s `mkdir -p`) to
/// `work_dir` and answers every other command with the next of `replies`; a command
/// beyond them fails the test.
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
