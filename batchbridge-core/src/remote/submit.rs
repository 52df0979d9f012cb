//! The idempotent submit: [`JobDirs::submit`], the key's lock in this process
//! ([`SubmitLocks`]), and what a submit found ([`Submitted`]).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use futures::StreamExt;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use super::JobDirs;
use super::answers::{each_answered, each_failed, unanswered};
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

/// One job of [`JobDirs::submit_many`]: its spec (whose key and script it submits), the
/// files written beside its script (name, content; `job.sh` is made executable), and the
/// scheduler's command that submits it.
#[derive(Debug, Clone)]
pub struct SubmitJob<'a> {
    /// The spec: its key is claimed, its script written as `script.sh`.
    pub spec: &'a JobSpec,
    /// Files by name, written into the job directory before the command runs; not one of
    /// the names the submit writes itself (`script.sh`, `claim`, `submit.stderr`, `job_id`,
    /// `id_taken`).
    pub files: Vec<(&'a str, &'a str)>,
    /// The scheduler's program and its arguments.
    pub command: Vec<String>,
}

/// The most jobs one remote command submits: the command's time limit covers them all, so a
/// slow scheduler must not turn a batch into a timeout (a timed-out batch is
/// [`SubmitOutcomeUnknown`](ErrorKind::SubmitOutcomeUnknown) for every job in it).
pub const MAX_JOBS_PER_BATCH: usize = 100;

/// How many batches are in flight at once, each in its own remote command (an SSH session
/// of the one connection): [`SshConfig`](crate::shell::SshConfig)'s default session limit, so
/// that a batch's jobs spread over the sessions instead of one remote loop doing them all.
/// The commands are [`bulk`](Command::bulk): an [`SshShell`](crate::shell::SshShell) runs
/// 6 of them at once and keeps its other 2 sessions for short commands.
pub const BATCHES_IN_FLIGHT: usize = 8;

/// The most bytes of a refusal a batch sends back per job: errors quote an excerpt anyway.
const MAX_REFUSAL: usize = 16 * 1024;

impl JobDirs {
    /// A submit in one remote command: [`submit_many`](Self::submit_many) of one job.
    pub async fn submit(
        &self,
        spec: &JobSpec,
        files: &[(&str, &str)],
        scheduler_command: Vec<String>,
    ) -> Result<Submitted> {
        let job = SubmitJob {
            spec,
            files: files.to_vec(),
            command: scheduler_command,
        };
        self.submit_many(std::slice::from_ref(&job))
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::UnexpectedOutput, "no answer")))
    }

    /// Submits `jobs` (their keys all different) in as few remote commands as fit, each one
    /// `sh` session of submit.sh that writes each job's script (as `script.sh`) and files
    /// into a staging directory `WORK/claiming/NONCE/KEY`, makes every `job.sh` executable
    /// with one `chmod`, claims `WORK/jobs/KEY` for all of them with one `mv` (renaming a
    /// directory that is not empty onto a key's directory that exists fails, so of two
    /// submits of one key one claims it), then, job after job, runs its `command` and records
    /// the job id it prints first (its leading digits). Answers for each job, in order, what
    /// became of it. Per job, only the scheduler's command and an `ln` (the id's link) fork
    /// (and `head` for a script longer than 2 KiB):
    /// on a busy login node a fork costs about a third of an `sbatch`.
    ///
    /// The jobs are split into even batches, [`BATCHES_IN_FLIGHT`] of them in flight at once
    /// (a pipeline: one that ends lets the next start), each holding at most
    /// [`MAX_JOBS_PER_BATCH`] jobs; all but the scripts travel on its command line, which
    /// must stay under what a remote shell accepts ([`MAX_COMMAND_LINE`]): jobs are split into
    /// as many commands as that takes, and a job too long on its own is refused (as
    /// [`InvalidInput`](ErrorKind::InvalidInput), before anything is sent). The scripts
    /// travel on stdin (never on a command line, which other users of a login node may
    /// read), one after the other, each followed by a line with the batch's nonce and its
    /// key that shows where it ends; the shell's own `read` takes one of up to 2 KiB line by
    /// line, `head` (a fork) a longer one.
    ///
    /// A script that arrives shorter than it was sent (the connection dropped while it was on
    /// its way) is never submitted, nor any script after it: their keys are released.
    ///
    /// A connection lost or a timeout mid-way is
    /// [`SubmitOutcomeUnknown`](ErrorKind::SubmitOutcomeUnknown), temporary, for every job of
    /// that command: submitting the same keys again returns the jobs that were made, and
    /// never submits a job that got an id again. The batch goes on without its caller (it
    /// ignores hang-ups) and releases the keys of the jobs it could not answer for. A batch
    /// killed outright leaves the keys it had claimed but not yet sent claimed: a later batch
    /// on the same machine takes them over once that shell is gone; from another machine
    /// (another login node behind the same name) they are [`Submitted::Claimed`].
    pub async fn submit_many(&self, jobs: &[SubmitJob<'_>]) -> Vec<Result<Submitted>> {
        let work = match self.work().await {
            Ok(work) => work.to_owned(),
            Err(err) => return each_failed(jobs.len(), &err),
        };
        let base = Command::sh(&SUBMIT, [work.as_str(), &nonce(), "999"])
            .to_shell_line()
            .map_or(0, |line| line.len());
        let mut answers = unanswered(jobs.len());
        // Batches of (index, its arguments).
        let mut batches: Vec<Vec<(usize, Vec<String>)>> = Vec::new();
        let mut length = base;
        // Even batches, so that the sessions in flight share the jobs.
        let per_batch = jobs
            .len()
            .div_ceil(BATCHES_IN_FLIGHT)
            .clamp(1, MAX_JOBS_PER_BATCH);
        for (index, job) in jobs.iter().enumerate() {
            let args = job_args(job);
            let own = match quoted_length(&args) {
                Ok(own) => own,
                Err(err) => {
                    answers[index] = Some(Err(err));
                    continue;
                }
            };
            if base + own > MAX_COMMAND_LINE {
                answers[index] = Some(Err(too_long(base + own, job.spec)));
                continue;
            }
            let full = batches
                .last()
                .is_none_or(|batch| batch.len() >= per_batch || length + own > MAX_COMMAND_LINE);
            if full {
                batches.push(Vec::new());
                length = base;
            }
            length += own;
            if let Some(batch) = batches.last_mut() {
                batch.push((index, args));
            }
        }
        // A pipeline: each batch that ends lets the next one start, so that a slow batch
        // does not hold the sessions of the others.
        let mut sends = Vec::with_capacity(batches.len());
        for batch in &batches {
            let work = work.as_str();
            sends.push(async move { (batch, self.submit_batch(work, jobs, batch).await) });
        }
        let mut outcomes = futures::stream::iter(sends).buffer_unordered(BATCHES_IN_FLIGHT);
        while let Some((batch, outcomes)) = outcomes.next().await {
            for ((index, _), outcome) in batch.iter().zip(outcomes) {
                answers[*index] = Some(outcome);
            }
        }
        each_answered(answers, "a job")
    }

    /// One remote command for `batch` (indexes into `jobs`, with their arguments).
    async fn submit_batch(
        &self,
        work: &str,
        jobs: &[SubmitJob<'_>],
        batch: &[(usize, Vec<String>)],
    ) -> Vec<Result<Submitted>> {
        let mark = nonce();
        let mut args = vec![work.to_owned(), mark.clone(), batch.len().to_string()];
        let mut stdin = Vec::new();
        for (index, job_args) in batch {
            let spec = jobs[*index].spec;
            args.extend(job_args.iter().cloned());
            stdin.extend_from_slice(spec.script.as_bytes());
            if script_size(&spec.script) == "lines-no-eol" {
                stdin.push(b'\n');
            }
            stdin.extend_from_slice(format!("{mark} {}\n", spec.key).as_bytes());
        }
        let command = Command::sh(&SUBMIT, args)
            .stdin(stdin)
            .bulk()
            .timeout(self.timeout())
            .output_limit(batch.len() * (MAX_REFUSAL + 256) + 4096);
        let specs = batch.iter().map(|(index, _)| jobs[*index].spec);
        match self.shell().run(&command).await {
            Ok(output) => read_records(&output, specs),
            Err(err) if matches!(err.kind(), ErrorKind::ConnectionLost | ErrorKind::Timeout) => {
                specs
                    .map(|spec| Err(outcome_unknown(&spec.key, &err)))
                    .collect()
            }
            Err(err) => each_failed(specs.len(), &err),
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

/// A fresh nonce for the lines that end each script on a batch's stdin: a script cannot
/// forge an end it does not know.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut words = [0u64; 2];
    for word in &mut words {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        *word = hasher.finish();
    }
    format!("batchbridge-end-{:016x}{:016x}", words[0], words[1])
}

/// The longest script read on the cluster line by line by the shell's own `read`, instead of
/// by `head` (a fork): `read` takes a pipe a byte at a time, cheap for a short script only.
/// Scripts never travel on the command line, which other users of a login node may read.
const MAX_SCRIPT_READ_BY_LINES: usize = 2048;

/// How submit.sh reads `script` from stdin: `lines` or `lines-no-eol` (a short script
/// without NUL, which `read` cannot carry; the sender adds the missing last newline), else
/// its length in bytes.
fn script_size(script: &str) -> String {
    if script.len() > MAX_SCRIPT_READ_BY_LINES || script.contains('\0') {
        script.len().to_string()
    } else if script.is_empty() || script.ends_with('\n') {
        "lines".to_owned()
    } else {
        "lines-no-eol".to_owned()
    }
}

/// A job's arguments to submit.sh: `KEY SIZE NFILES NAME CONTENT... NWORDS WORD...`.
fn job_args(job: &SubmitJob<'_>) -> Vec<String> {
    let mut args = vec![
        job.spec.key.to_string(),
        script_size(&job.spec.script),
        job.files.len().to_string(),
    ];
    for (name, content) in &job.files {
        args.push((*name).to_owned());
        args.push((*content).to_owned());
    }
    args.push(job.command.len().to_string());
    args.extend(job.command.iter().cloned());
    args
}

/// What `args` add to a command line once quoted, with the space before each.
fn quoted_length(args: &[String]) -> Result<usize> {
    let line = Command::new("")
        .args(args.iter().cloned())
        .to_shell_line()?;
    Ok(line.len() - "''".len())
}

/// The error for a job whose batch was cut off (connection lost, time limit) before its
/// answer came.
fn outcome_unknown(key: &JobKey, err: &Error) -> Error {
    Error::new(
        ErrorKind::SubmitOutcomeUnknown,
        format!(
            "the submit of job {key} may or may not have reached the scheduler ({err}); \
             submit it again or call find: its key never makes a second job"
        ),
    )
    .temporary()
}

/// Each job's answer from a batch's records (`KEY OUTCOME ID LENGTH`, a newline, LENGTH
/// bytes of message), in the order of `specs`.
fn read_records<'a>(
    output: &Output,
    specs: impl Iterator<Item = &'a JobSpec>,
) -> Vec<Result<Submitted>> {
    let mut records = HashMap::new();
    let mut rest = output.stdout.as_slice();
    while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
        let head = String::from_utf8_lossy(&rest[..newline]).into_owned();
        let words: Vec<&str> = head.split(' ').collect();
        let [key, outcome, id, length] = words[..] else {
            break;
        };
        let Ok(length) = length.parse::<usize>() else {
            break;
        };
        let body = &rest[newline + 1..];
        let message = body[..length.min(body.len())].to_vec();
        rest = &body[length.min(body.len())..];
        records.insert(key.to_owned(), (outcome.to_owned(), id.to_owned(), message));
    }
    specs
        .map(|spec| match records.remove(spec.key.as_str()) {
            Some((outcome, id, message)) => answer(spec, &outcome, &id, message),
            None => Err(Error::new(
                ErrorKind::CommandFailed,
                format!(
                    "submitting job {} failed before its turn (exit code {:?}): {}",
                    spec.key,
                    output.exit_code,
                    excerpt(output.stderr_text().trim())
                ),
            )),
        })
        .collect()
}

/// One job's answer from its record.
fn answer(spec: &JobSpec, outcome: &str, id: &str, message: Vec<u8>) -> Result<Submitted> {
    let id = job_number(id);
    match (outcome, id) {
        ("submitted", Some(id)) => return Ok(Submitted::New(id.to_owned())),
        ("existing", Some(id)) => return Ok(Submitted::Existing(id.to_owned())),
        ("claimed", None) => return Ok(Submitted::Claimed),
        _ => {}
    }
    let said = Output {
        exit_code: outcome.parse().ok(),
        stderr: message,
        ..Output::default()
    };
    match said.exit_code {
        Some(SUBMIT_REFUSED_EXIT_CODE) => Ok(Submitted::Refused(said)),
        Some(SUBMIT_ID_TAKEN_EXIT_CODE) => Err(id_taken(&spec.key, &said)),
        Some(_) => Err(Error::new(
            ErrorKind::CommandFailed,
            format!(
                "submitting job {} failed (exit code {:?}): {}",
                spec.key,
                said.exit_code,
                excerpt(said.stderr_text().trim())
            ),
        )),
        None => Err(Error::new(
            ErrorKind::UnexpectedOutput,
            format!("submitting job {} printed {outcome:?} {id:?}", spec.key),
        )),
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

/// The error for a job whose submit command would be longer than a remote shell accepts, with
/// a message that names the spec fields that travel on the command line, so that the caller
/// knows what to shorten.
fn too_long(length: usize, spec: &JobSpec) -> Error {
    Error::invalid_input(format!(
        "job spec {}: the submit command is {length} bytes once quoted, more than the \
         {MAX_COMMAND_LINE} a remote shell accepts on one command line; shorten the \
         environment, workingDir or passthrough options (the script travels apart and \
         may be any size)",
        spec.key
    ))
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

    /// Job directories in `work`, reached through this machine's shell, commands limited to
    /// `timeout` seconds.
    fn local_dirs(work: &tempfile::TempDir, timeout: u64) -> JobDirs {
        JobDirs::new(
            Arc::new(LocalShell),
            work.path().to_str().unwrap(),
            Duration::from_secs(timeout),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_submit_command_too_long_for_a_remote_shell_is_refused_before_it_is_sent() {
        let work = tempfile::tempdir().unwrap();
        let dirs = local_dirs(&work, 10);
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

    /// Runs submit.sh locally in `work` for one job, `key-1`, with `stdin` as what arrives
    /// for its script (announced as `size` bytes) and `command` as the scheduler's.
    async fn run_submit(
        work: &std::path::Path,
        size: &str,
        stdin: &[u8],
        command: &[&str],
    ) -> Output {
        let mut args = vec![
            work.to_str().unwrap().to_owned(),
            "mark".to_owned(),
            "1".to_owned(),
            "key-1".to_owned(),
            size.to_owned(),
            "0".to_owned(),
            command.len().to_string(),
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

        let size = script.len().to_string();
        let cut = run_submit(work.path(), &size, &script[..5], &scheduler).await;
        let message = "the script of job key-1 arrived cut short; this job was not sent";
        assert_eq!(
            cut.stdout_text(),
            format!(
                "key-1 {SUBMIT_NOT_SENT_EXIT_CODE} - {}\n{message}",
                message.len()
            ),
            "{cut:?}"
        );
        assert!(!scheduler_ran.exists(), "the scheduler was never asked");
        assert!(
            !work.path().join("jobs/key-1").exists(),
            "the key is free again"
        );

        // Whole, but without the line that ends it: where it ends is not known.
        let unmarked = run_submit(work.path(), &size, script, &scheduler).await;
        assert!(unmarked.stdout_text().contains(message), "{unmarked:?}");
        assert!(!scheduler_ran.exists(), "the scheduler was never asked");
        // Read line by line, the same: cut in a line, or whole without the end line.
        for stdin in [&script[..5], &script[..]] {
            let cut = run_submit(work.path(), "lines", stdin, &scheduler).await;
            assert!(cut.stdout_text().contains(message), "{cut:?}");
            assert!(!scheduler_ran.exists(), "the scheduler was never asked");
        }

        let mut whole = script.to_vec();
        whole.extend_from_slice(b"mark key-1\n");
        let sent = run_submit(work.path(), &size, &whole, &["echo", "42"]).await;
        assert_eq!(sent.stdout_text(), "key-1 submitted 42 0\n", "{sent:?}");
        assert_eq!(
            std::fs::read(work.path().join("jobs/key-1/script.sh")).unwrap(),
            script
        );
    }

    #[tokio::test]
    async fn each_job_of_a_batch_gets_its_own_answer() {
        let work = tempfile::tempdir().unwrap();
        let dirs = local_dirs(&work, 10);
        // c's script, read line by line: spaces, backslashes, quotes, an empty line, a tab, a
        // carriage return and no last newline arrive as they were.
        let tricky = " lead \\ \"q\" 'x' $(y)\n\n\tlast\r";
        let specs: Vec<JobSpec> = [("a", "echo a"), ("b", "echo b"), ("c", tricky)]
            .map(|(key, script)| JobSpec::new(JobKey::new(key).unwrap(), "n", script))
            .into();
        let say = |words: &str| vec!["sh".to_owned(), "-c".to_owned(), words.to_owned()];
        let jobs = [
            (&specs[0], say("echo 11")),
            (&specs[1], say("echo 'no such queue' >&2; exit 1")),
            (&specs[2], say("echo 13")),
        ]
        .map(|(spec, command)| SubmitJob {
            spec,
            files: vec![("f", "it's $(x)")],
            command,
        });
        let answers = dirs.submit_many(&jobs).await;
        assert!(
            matches!(&answers[0], Ok(Submitted::New(id)) if id == "11"),
            "{answers:?}"
        );
        match &answers[1] {
            Ok(Submitted::Refused(output)) => {
                assert_eq!(output.stderr_text(), "no such queue");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            !work.path().join("jobs/b").exists(),
            "the refused key is free"
        );
        assert!(
            matches!(&answers[2], Ok(Submitted::New(id)) if id == "13"),
            "{answers:?}"
        );
        assert_eq!(
            std::fs::read_to_string(work.path().join("jobs/c/f")).unwrap(),
            "it's $(x)"
        );
        assert_eq!(
            std::fs::read_to_string(work.path().join("jobs/c/script.sh")).unwrap(),
            tricky
        );
        // Again: the jobs that were made are found, the refused one is asked again.
        let again = dirs.submit_many(&jobs).await;
        assert!(
            matches!(&again[0], Ok(Submitted::Existing(id)) if id == "11"),
            "{again:?}"
        );
        assert!(matches!(&again[1], Ok(Submitted::Refused(_))), "{again:?}");
        assert!(
            matches!(&again[2], Ok(Submitted::Existing(id)) if id == "13"),
            "{again:?}"
        );
    }

    #[tokio::test]
    async fn a_batch_cut_in_the_middle_resubmits_no_job_that_got_an_id() {
        let work = tempfile::tempdir().unwrap();
        let dirs = |timeout| local_dirs(&work, timeout);
        // 24 jobs make 8 batches of 3: jobs 0, 1 and 2 share the first.
        let specs: Vec<JobSpec> = (0..24)
            .map(|i| JobSpec::new(JobKey::new(format!("j{i}")).unwrap(), "n", "echo hi"))
            .collect();
        // Each run of a job's submit command leaves a line in its own file.
        let runs = |i: usize| work.path().join(format!("runs-{i}"));
        let batch = |then: &dyn Fn(usize) -> String| -> Vec<SubmitJob<'_>> {
            specs
                .iter()
                .enumerate()
                .map(|(i, spec)| SubmitJob {
                    spec,
                    files: vec![],
                    command: vec![
                        "sh".to_owned(),
                        "-c".to_owned(),
                        format!("echo run >>\"$1\"; {}", then(i)),
                        "sh".to_owned(),
                        runs(i).to_str().unwrap().to_owned(),
                    ],
                })
                .collect()
        };
        // Job 1's submit hangs past the command's time limit: its batch is cut after job 0
        // got its id, while job 1 is in flight and before job 2's turn.
        let cut = batch(&|i| match i {
            1 => "sleep 3; echo 101".to_owned(),
            _ => format!("echo {}", 100 + i),
        });
        let answers = dirs(1).submit_many(&cut).await;
        for answer in &answers[..3] {
            let err = answer.as_ref().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::SubmitOutcomeUnknown, "{answers:?}");
            assert!(err.is_temporary());
        }
        for answer in &answers[3..] {
            assert!(matches!(answer, Ok(Submitted::New(_))), "{answers:?}");
        }
        let again = batch(&|i| format!("echo {}", 200 + i));
        let answers = dirs(10).submit_many(&again).await;
        for (i, answer) in answers.iter().enumerate() {
            match i {
                // Job 1 may have reached the scheduler: it is not sent again blindly; only
                // the scheduler can tell (RemoteBackend asks it, by key).
                1 => assert!(matches!(answer, Ok(Submitted::Claimed)), "{i}: {answer:?}"),
                // Job 2 was claimed with it, never sent, by a shell that is gone: this batch
                // takes its key over.
                2 => assert!(
                    matches!(answer, Ok(Submitted::New(id)) if id == "202"),
                    "{i}: {answer:?}"
                ),
                _ => assert!(
                    matches!(answer, Ok(Submitted::Existing(id)) if *id == (100 + i).to_string()),
                    "{i}: {answer:?}"
                ),
            }
        }
        for i in 0..24 {
            assert_eq!(
                std::fs::read_to_string(runs(i)).unwrap(),
                "run\n",
                "job {i}"
            );
        }
        // The cut batch's staging directory went with its shell.
        let staging = std::fs::read_dir(work.path().join("claiming")).unwrap();
        assert_eq!(staging.count(), 0);
    }

    #[tokio::test]
    async fn a_key_claimed_by_a_shell_that_still_runs_is_never_taken_over() {
        let work = tempfile::tempdir().unwrap();
        let dirs = local_dirs(&work, 10);
        // What a batch still on its way leaves: the key claimed, nothing sent yet, and this
        // machine's running process (this test) as its owner.
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let claimed = work.path().join("jobs/busy");
        std::fs::create_dir_all(&claimed).unwrap();
        let owner = format!(
            "{} {} {} 0123\n",
            boot.trim(),
            ns.display(),
            std::process::id()
        );
        std::fs::write(claimed.join("claim"), owner).unwrap();
        let spec = JobSpec::new(JobKey::new("busy").unwrap(), "n", "echo hi");
        let runs = work.path().join("runs");
        let job = SubmitJob {
            spec: &spec,
            files: vec![],
            command: vec![
                "sh".to_owned(),
                "-c".to_owned(),
                "echo run >>\"$1\"; echo 7".to_owned(),
                "sh".to_owned(),
                runs.to_str().unwrap().to_owned(),
            ],
        };
        let answers = dirs.submit_many(&[job]).await;
        assert!(matches!(answers[0], Ok(Submitted::Claimed)), "{answers:?}");
        assert!(!runs.exists(), "the claimed job was sent again");
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
