//! The idempotent submit: [`JobDirs::submit`], the key's lock in this process
//! ([`SubmitLocks`]), and what a submit found ([`Submitted`]).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use super::JobDirs;
use crate::error::{Error, ErrorKind, Result, excerpt};
use crate::shell::{Command, MAX_COMMAND_LINE, Output};
use crate::spec::{JobKey, JobSpec};
use crate::wrapper::{
    SUBMIT_ID_TAKEN_EXIT_CODE, SUBMIT_REFUSED_EXIT_CODE, job_number, render_script,
};

/// The submit script, with its exit codes filled in.
pub(super) static SUBMIT: LazyLock<String> =
    LazyLock::new(|| render_script(include_str!("submit.sh")));

/// The submits in flight in this process, one lock per key. [`RemoteBackend`](super::RemoteBackend) holds the
/// key's lock around its [`JobDirs::submit`], so a second submit of the same key waits for
/// the first and then finds its job (`existing`), instead of seeing the key claimed by a
/// submit that has not answered yet. Submits in other processes still meet
/// [`Submitted::Claimed`].
///
/// ```
/// use batchbridge_core::JobKey;
/// use batchbridge_core::remote::SubmitLocks;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let locks = SubmitLocks::default();
/// let key = JobKey::new("k-1")?;
/// let soon = std::time::Duration::from_millis(50);
/// let first = locks.lock(&key).await;
/// let second = tokio::time::timeout(soon, locks.lock(&key)).await;
/// assert!(second.is_err(), "the key's submit is in flight");
/// let other = tokio::time::timeout(soon, locks.lock(&JobKey::new("k-2")?)).await;
/// assert!(other.is_ok(), "other keys are free");
/// drop(first);
/// assert!(tokio::time::timeout(soon, locks.lock(&key)).await.is_ok());
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct SubmitLocks {
    /// Weak, so that a key's lock goes away with its last submit.
    by_key: Mutex<HashMap<JobKey, Weak<AsyncMutex<()>>>>,
}

impl SubmitLocks {
    /// Waits until no other submit of `key` in this process is in flight, and holds the
    /// key until the guard is dropped.
    pub async fn lock(&self, key: &JobKey) -> OwnedMutexGuard<()> {
        self.lock_of(key).lock_owned().await
    }

    fn lock_of(&self, key: &JobKey) -> Arc<AsyncMutex<()>> {
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        by_key.retain(|_, lock| lock.strong_count() > 0);
        if let Some(lock) = by_key.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(AsyncMutex::new(()));
        by_key.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }
}

/// What [`JobDirs::submit`] found or did.
#[derive(Debug)]
pub enum Submitted {
    /// The scheduler accepted the job and gave it this id.
    New(String),
    /// The key already had a job, with this id; nothing was submitted.
    Existing(String),
    /// Another submit of the key is in flight (in another process: see [`SubmitLocks`]), or
    /// was cut off before the scheduler answered; only the scheduler itself can tell which
    /// job, if any, holds the key.
    Claimed,
    /// The scheduler refused the job; its output says why. The key was released.
    Refused(Output),
}

/// The error for [`Submitted::Refused`] when the scheduler refused the job itself (not
/// because it was unreachable): permanent [`Rejected`](ErrorKind::Rejected), with
/// `context` (e.g. ` on partition "debug"`) and the scheduler's message.
pub fn rejected(key: &JobKey, scheduler: &str, context: &str, refusal: &Output) -> Error {
    Error::new(
        ErrorKind::Rejected,
        format!(
            "{scheduler} refused job {key}{context}: {}",
            excerpt(refusal.stderr_text().trim())
        ),
    )
}

impl JobDirs {
    /// A submit in one remote command: claims `WORK/jobs/KEY` with an atomic `mkdir`, writes
    /// the spec's script (as `script.sh`, from stdin, any size) and each of `files` (name,
    /// content; `job.sh` is made executable), then runs `scheduler_command` and records the job
    /// id it prints first (its leading digits).
    ///
    /// Everything but the script travels on the command line, which is refused (as
    /// [`InvalidInput`](ErrorKind::InvalidInput), before anything is sent) when it would be
    /// longer than a remote shell accepts ([`MAX_COMMAND_LINE`]).
    ///
    /// A script that arrives shorter than it was sent (the connection dropped while it was on
    /// its way) is never submitted: the remote command releases the key and fails.
    ///
    /// A connection lost or a timeout mid-way is
    /// [`SubmitOutcomeUnknown`](ErrorKind::SubmitOutcomeUnknown), temporary: submitting the same
    /// key again returns the same job.
    pub async fn submit(
        &self,
        spec: &JobSpec,
        files: &[(&str, &str)],
        scheduler_command: Vec<String>,
    ) -> Result<Submitted> {
        let mut args = vec![
            self.work().await?.to_owned(),
            spec.key.to_string(),
            spec.script.len().to_string(),
            files.len().to_string(),
        ];
        for (name, content) in files {
            args.push((*name).to_owned());
            args.push((*content).to_owned());
        }
        args.push("--".to_owned());
        args.extend(scheduler_command);
        let command = Command::sh(&SUBMIT, args)
            .stdin(spec.script.as_bytes())
            .timeout(self.timeout());
        check_command_line(&command, spec)?;
        let output = match self.shell().run(&command).await {
            Ok(output) => output,
            Err(err) if matches!(err.kind(), ErrorKind::ConnectionLost | ErrorKind::Timeout) => {
                return Err(Error::new(
                    ErrorKind::SubmitOutcomeUnknown,
                    format!(
                        "the submit of job {} may or may not have reached the scheduler ({err}); \
                         submit it again or call find: its key never makes a second job",
                        spec.key
                    ),
                )
                .temporary());
            }
            Err(err) => return Err(err),
        };
        match output.exit_code {
            Some(0) => {}
            Some(SUBMIT_REFUSED_EXIT_CODE) => return Ok(Submitted::Refused(output)),
            Some(SUBMIT_ID_TAKEN_EXIT_CODE) => return Err(id_taken(&spec.key, &output)),
            _ => {
                return Err(Error::new(
                    ErrorKind::CommandFailed,
                    format!(
                        "submitting job {} failed (exit code {:?}): {}",
                        spec.key,
                        output.exit_code,
                        excerpt(output.stderr_text().trim())
                    ),
                ));
            }
        }
        let reply = output.stdout_text();
        let mut words = reply.split_whitespace();
        match (words.next(), words.next().and_then(job_number)) {
            (Some("submitted"), Some(id)) => Ok(Submitted::New(id.to_owned())),
            (Some("existing"), Some(id)) => Ok(Submitted::Existing(id.to_owned())),
            (Some("claimed"), None) => Ok(Submitted::Claimed),
            _ => Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!("submitting job {} printed {reply:?}", spec.key),
            )),
        }
    }

    /// The id recorded in `WORK/jobs/KEY/job_id`, if the key has a job submitted through this
    /// work directory.
    pub async fn recorded_id(&self, key: &JobKey) -> Result<Option<String>> {
        let work = self.work().await?;
        let command = Command::sh(
            "cat -- \"$1/jobs/$2/job_id\" 2>/dev/null; exit 0",
            [work, key.as_str()],
        )
        .timeout(self.timeout());
        let output = self
            .shell()
            .run(&command)
            .await?
            .check("reading a job id")?;
        Ok(job_number(output.stdout_text().trim()).map(str::to_owned))
    }
}

/// The error for a submit whose scheduler gave an id that another key's job holds: ids
/// must never repeat within a work directory ([`CliScheduler`](super::CliScheduler)'s "Job ids"). Permanent:
/// the key's job is not recorded, and submitting the key again says the same.
fn id_taken(key: &JobKey, output: &Output) -> Error {
    let text = output.stderr_text();
    let (id, other) = text.trim().split_once(' ').unwrap_or(("?", "?"));
    Error::new(
        ErrorKind::UnexpectedOutput,
        format!(
            "the scheduler gave job {key} the id {}, which job {} already holds in this work \
             directory: job ids must never repeat (a scheduler whose numbering restarts needs \
             ids that carry their epoch); the new job was submitted but is not recorded for \
             {key}: cancel it with the scheduler's own tools",
            excerpt(id),
            excerpt(other)
        ),
    )
}

/// Refuses a submit command too long for a remote shell with a message that names the
/// spec fields that travel on the command line, so that the caller knows what to shorten.
fn check_command_line(command: &Command, spec: &JobSpec) -> Result<()> {
    let length = command.to_shell_line()?.len();
    if length > MAX_COMMAND_LINE {
        return Err(Error::invalid_input(format!(
            "job spec {}: the submit command is {length} bytes once quoted, more than the \
             {MAX_COMMAND_LINE} a remote shell accepts on one command line; shorten the \
             environment, workingDir or passthrough options (the script travels apart and \
             may be any size)",
            spec.key
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::output::FETCH_OUTPUT;
    use super::*;
    use crate::shell::{LocalShell, Shell};
    use crate::wrapper::{
        NO_SUCH_JOB_EXIT_CODE, NO_SUCH_TASK_EXIT_CODE, SUBMIT_NO_ID_EXIT_CODE,
        SUBMIT_NOT_SENT_EXIT_CODE,
    };

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "name", "echo hi")
    }

    #[tokio::test]
    async fn a_submit_command_too_long_for_a_remote_shell_is_refused_before_it_is_sent() {
        let work = tempfile::tempdir().unwrap();
        let dirs = JobDirs::new(
            Arc::new(LocalShell),
            work.path().to_str().unwrap(),
            Duration::from_secs(10),
        )
        .unwrap();
        // 80 000 bytes that quoting grows past the limit: what counts is the quoted line.
        let content = "'$".repeat(40_000);
        let err = dirs
            .submit(
                &spec(),
                &[("env.sh", content.as_str())],
                vec!["sbatch".to_owned()],
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(!err.is_temporary());
        for words in [
            "job spec key-1",
            "bytes once quoted",
            "environment, workingDir or passthrough",
        ] {
            assert!(err.message().contains(words), "{words:?} in {err}");
        }
        assert!(!work.path().join("jobs/key-1").exists(), "nothing was sent");
    }

    /// Runs submit.sh locally in `work` with `stdin` as the script, announced as `size`
    /// bytes, and `command` as the scheduler's.
    async fn run_submit(
        work: &std::path::Path,
        size: usize,
        stdin: &[u8],
        command: &[&str],
    ) -> Output {
        let mut args = vec![
            work.to_str().unwrap().to_owned(),
            "key-1".to_owned(),
            size.to_string(),
            "0".to_owned(),
            "--".to_owned(),
        ];
        args.extend(command.iter().map(|word| (*word).to_owned()));
        LocalShell
            .run(&Command::sh(&SUBMIT, args).stdin(stdin))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_script_cut_short_on_its_way_is_never_submitted() {
        let work = tempfile::tempdir().unwrap();
        for dir in ["jobs", "ids"] {
            std::fs::create_dir(work.path().join(dir)).unwrap();
        }
        let scheduler_ran = work.path().join("scheduler-ran");
        let scheduler = ["touch", scheduler_ran.to_str().unwrap()];
        let script = b"sleep 1\nexit 8\n";

        let cut = run_submit(work.path(), script.len(), &script[..5], &scheduler).await;
        assert_eq!(cut.exit_code, Some(SUBMIT_NOT_SENT_EXIT_CODE), "{cut:?}");
        assert!(
            cut.stderr_text().contains(&format!(
                "the script arrived cut short: 5 of {} bytes",
                script.len()
            )),
            "{cut:?}"
        );
        assert!(!scheduler_ran.exists(), "the scheduler was never asked");
        assert!(
            !work.path().join("jobs/key-1").exists(),
            "the key is free again"
        );

        let whole = run_submit(work.path(), script.len(), script, &["echo", "42"]).await;
        assert_eq!(whole.stdout_text(), "submitted 42\n", "{whole:?}");
        assert_eq!(
            std::fs::read(work.path().join("jobs/key-1/script.sh")).unwrap(),
            script
        );
    }

    #[test]
    fn a_refusal_quotes_a_bounded_excerpt_of_what_the_scheduler_said() {
        let echo = Output {
            exit_code: Some(1),
            stderr: format!(
                "sbatch: error: Invalid time specification (pos=0): {}",
                "x".repeat(1 << 20)
            )
            .into_bytes(),
            ..Output::default()
        };
        let err = rejected(&JobKey::new("key-1").unwrap(), "SLURM", "", &echo);
        assert_eq!(err.kind(), ErrorKind::Rejected);
        assert!(
            err.message()
                .starts_with("SLURM refused job key-1: sbatch: error: Invalid time")
        );
        assert!(
            err.message().len() < 2 * crate::error::MAX_QUOTED,
            "{}",
            err.message().len()
        );
        assert!(
            err.message().ends_with("more bytes)"),
            "{}",
            &err.message()[2000..]
        );
    }

    /// A `@NAME@` left in a rendered script: a placeholder without a constant.
    fn leftover_placeholder(script: &str) -> Option<&str> {
        script.split('@').skip(1).step_by(2).find(|word| {
            !word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
    }

    #[test]
    fn every_placeholder_of_the_scripts_is_filled_in() {
        assert_eq!(
            leftover_placeholder("exit @NO_SUCH_CODE@"),
            Some("NO_SUCH_CODE")
        );
        for script in [SUBMIT.as_str(), FETCH_OUTPUT.as_str()] {
            assert_eq!(leftover_placeholder(script), None, "{script}");
        }
        // Each code appears in its script as a number of its own.
        let numbers = |script: &str| -> Vec<i32> {
            script
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|word| word.parse().ok())
                .collect()
        };
        let (submit, fetch) = (numbers(&SUBMIT), numbers(&FETCH_OUTPUT));
        for code in [
            SUBMIT_REFUSED_EXIT_CODE,
            SUBMIT_NO_ID_EXIT_CODE,
            SUBMIT_NOT_SENT_EXIT_CODE,
            SUBMIT_ID_TAKEN_EXIT_CODE,
        ] {
            assert!(submit.contains(&code), "{code}");
        }
        for code in [NO_SUCH_JOB_EXIT_CODE, NO_SUCH_TASK_EXIT_CODE] {
            assert!(fetch.contains(&code), "{code}");
        }
    }
}
