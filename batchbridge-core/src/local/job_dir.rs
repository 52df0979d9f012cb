//! Reading one local job's directory: its state, its process group, its output.

use std::fs::File;
use std::io::{ErrorKind as IoErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::killpg;
use nix::unistd::Pid;

use crate::backend::{JobId, JobOutput, OutputChunk, OutputRequest, Withdrawal};
use crate::cause::{CancelledBy, FailureCause};
use crate::error::{Error, ErrorKind, Result};
use crate::spec::JobSpec;
use crate::state::{JobState, JobStatus, TaskCounts};
use crate::wrapper::NOT_STARTED_EXIT_CODE;

/// How long a job may sit between its directory being created and its process group being
/// recorded before it counts as never started (the submitting program died in between).
const START_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub(super) struct JobDir {
    root: PathBuf,
    id: JobId,
}

/// One task as its files show it.
struct TaskView {
    state: JobState,
    native: &'static str,
    exit_code: Option<i32>,
    /// Why the wrapper could not start the script, when it wrote that down.
    not_started: Option<String>,
    started_at: Option<SystemTime>,
    ended_at: Option<SystemTime>,
}

impl TaskView {
    /// Why the task failed or was cancelled: cancels only ever come from this backend's
    /// `cancel`; a task whose wrapper wrote why the script never ran, or whose job never
    /// started at all, did not start; a `LOST` task ended without a record of how.
    fn cause(&self, never_started: bool) -> Option<FailureCause> {
        match self.state {
            JobState::Cancelled => Some(FailureCause::Cancelled(CancelledBy::Request)),
            JobState::Failed if self.not_started.is_some() => Some(FailureCause::NotStarted),
            JobState::Failed => Some(match self.exit_code {
                Some(code) => FailureCause::ExitCode(code),
                None if never_started => FailureCause::NotStarted,
                None => FailureCause::Other,
            }),
            _ => None,
        }
    }
}

impl JobDir {
    pub(super) fn new(jobs: &Path, id: JobId) -> Self {
        Self {
            root: jobs.join(id.as_str()),
            id,
        }
    }

    /// The job's directory, if `id` names one. Only plain numbers are ids, so a hostile id
    /// can never point outside the state directory.
    pub(super) fn open(jobs: &Path, id: &JobId) -> Option<Self> {
        crate::wrapper::job_number(id.as_str())?;
        let dir = Self::new(jobs, id.clone());
        dir.root.join("spec.json").is_file().then_some(dir)
    }

    pub(super) fn id(&self) -> &JobId {
        &self.id
    }

    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn task_path(&self, task: u32, name: &str) -> PathBuf {
        self.root.join("tasks").join(task.to_string()).join(name)
    }

    pub(super) fn spec(&self) -> Option<JobSpec> {
        let bytes = std::fs::read(self.path("spec.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Records the wrapper that leads the job's process group, with its start time so that
    /// a later reader can tell it from an unrelated process that reused the id.
    pub(super) fn record_group(&self, leader: u32) -> Result<()> {
        let record = match process_start_time(leader) {
            Some(start) => format!("{leader} {start}"),
            None => leader.to_string(),
        };
        write_atomically(&self.path("pgid"), record.as_bytes())
    }

    /// The job's process group while any of its processes lives.
    pub(super) fn live_group(&self) -> Option<i32> {
        let record = std::fs::read_to_string(self.path("pgid")).ok()?;
        let mut fields = record.split_whitespace();
        let pgid: i32 = fields.next()?.parse().ok()?;
        let recorded_start: Option<u64> = fields.next().and_then(|start| start.parse().ok());
        match killpg(Pid::from_raw(pgid), None) {
            Ok(()) | Err(nix::errno::Errno::EPERM) => {}
            Err(_) => return None,
        }
        // A process with the group's id that started at another time reused the id after our
        // group ended: Linux keeps an id reserved while any group member lives. The start
        // time, unlike the command line, is fixed from fork on; the command line reads
        // empty for a moment while the wrapper is still being exec'd.
        match (recorded_start, process_start_time(pgid.unsigned_abs())) {
            (Some(recorded), Some(current)) if recorded != current => None,
            _ => Some(pgid),
        }
    }

    /// Under the job's start lock, which the wrapper takes between a task's CPUs and its
    /// start: an ended job is [`Withdrawal::Ended`], one with a started task
    /// [`Withdrawal::Started`]; any other is marked cancelled, so that no task of it starts
    /// ([`Withdrawal::Withdrawn`]; the caller then stops its wrapper).
    pub(super) fn withdraw(&self, capacity: u32) -> Result<Withdrawal> {
        let path = self.path("start.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let _lock = lock_exclusive(file, &path)?;
        let status = self.status(capacity);
        if status.state.is_terminal() {
            return Ok(Withdrawal::Ended);
        }
        if status.started_at.is_some() {
            return Ok(Withdrawal::Started);
        }
        write_atomically(&self.path("cancelled"), b"")?;
        Ok(Withdrawal::Withdrawn)
    }

    pub(super) fn status(&self, capacity: u32) -> JobStatus {
        let Some(spec) = self.spec() else {
            return JobStatus::unknown(format!("local job {}: spec.json is unreadable", self.id));
        };
        // Liveness first: a group seen dead has already written every exit code it ever will.
        let alive = self.live_group().is_some();
        let cancelled = self.path("cancelled").exists();
        let submitted_at = modified(&self.path("spec.json"));
        let never_started = !alive
            && !self.path("pgid").exists()
            && submitted_at.is_some_and(|t| t.elapsed().unwrap_or_default() > START_GRACE);

        let tasks: Vec<TaskView> = (0..spec.task_count())
            .map(|task| self.task(task, alive, cancelled, never_started))
            .collect();

        let cpus = spec.resources.cpus.unwrap_or(1);
        let mut status = if let [task] = tasks.as_slice() {
            let mut status = JobStatus::new(task.state, task.native);
            status.exit_code = task.exit_code;
            status
        } else {
            let counts = TaskCounts::from_states(tasks.iter().map(|t| t.state));
            let mut status = JobStatus::new(counts.overall_state(), "ARRAY");
            status.exit_code = tasks.iter().filter_map(|t| t.exit_code).max();
            status.tasks = Some(counts);
            status
        };
        status.reason = match status.state {
            JobState::Queued if cpus > capacity => Some(format!(
                "Resources: asks for {cpus} CPUs, this machine's capacity is {capacity}"
            )),
            JobState::Queued => Some("Resources".to_owned()),
            JobState::Failed if never_started => {
                Some("never started: the submitting program stopped before starting it".to_owned())
            }
            JobState::Failed if tasks.iter().any(|t| t.native == "LOST") => Some(
                "the job's processes ended without recording an exit code (killed from outside?)"
                    .to_owned(),
            ),
            JobState::Failed => {
                let not_started = tasks
                    .iter()
                    .enumerate()
                    .find_map(|(index, t)| Some((index, t.not_started.as_deref()?)));
                match (status.tasks, not_started) {
                    (None, Some((_, why))) => Some(why.to_owned()),
                    (None, None) => status
                        .exit_code
                        .map(|code| format!("exited with code {code}")),
                    (Some(counts), Some((index, why))) => Some(format!(
                        "{} of {} tasks failed; task {index}: {why}",
                        counts.failed, counts.total
                    )),
                    (Some(counts), None) => Some(format!(
                        "{} of {} tasks failed",
                        counts.failed, counts.total
                    )),
                }
            }
            JobState::Cancelled => Some("cancelled by the user".to_owned()),
            _ => None,
        };
        if status.state == JobState::Cancelled {
            status.signal = Some(nix::libc::SIGTERM);
        }
        status.cause = tasks
            .iter()
            .find(|t| t.state == status.state)
            .and_then(|t| t.cause(never_started));
        status.submitted_at = submitted_at;
        status.started_at = tasks.iter().filter_map(|t| t.started_at).min();
        if status.state.is_terminal() {
            status.ended_at = tasks
                .iter()
                .filter_map(|t| t.ended_at)
                .max()
                .or_else(|| modified(&self.path("cancelled")));
        }
        status
    }

    fn task(&self, task: u32, alive: bool, cancelled: bool, never_started: bool) -> TaskView {
        let exit_path = self.task_path(task, "exit_code");
        let exit_code = std::fs::read_to_string(&exit_path)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok());
        let started_at = modified(&self.task_path(task, "started"));
        let not_started = exit_code
            .filter(|code| *code == NOT_STARTED_EXIT_CODE)
            .and_then(|_| std::fs::read_to_string(self.task_path(task, "reason")).ok())
            .map(|reason| reason.trim_end().to_owned());
        let (state, native) = match exit_code {
            Some(0) => (JobState::Succeeded, "EXITED"),
            Some(_) => (JobState::Failed, "EXITED"),
            None if cancelled => (JobState::Cancelled, "CANCELLED"),
            None if alive && started_at.is_some() => (JobState::Running, "RUNNING"),
            None if alive || !never_started && !self.path("pgid").exists() => {
                (JobState::Queued, "QUEUED")
            }
            None => (JobState::Failed, "LOST"),
        };
        TaskView {
            state,
            native,
            exit_code,
            not_started,
            started_at,
            ended_at: exit_code.and_then(|_| modified(&exit_path)),
        }
    }

    pub(super) fn output(&self, request: &OutputRequest) -> Result<JobOutput> {
        let task = request.task.unwrap_or(0);
        let tasks = self.spec().map_or(1, |spec| spec.task_count());
        if task >= tasks {
            return Err(Error::invalid_input(format!(
                "local job {} has {tasks} task(s); there is no task {task}",
                self.id
            )));
        }
        Ok(JobOutput {
            stdout: read_chunk(&self.task_path(task, "stdout"), request)?,
            stderr: read_chunk(&self.task_path(task, "stderr"), request)?,
        })
    }
}

/// When a process started, in clock ticks since boot (field 22 of `/proc/PID/stat`).
fn process_start_time(pid: u32) -> Option<u64> {
    start_time_in_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn start_time_in_stat(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses; it ends at the last ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reads only the requested window; the file is never loaded whole.
fn read_chunk(path: &Path, request: &OutputRequest) -> Result<OutputChunk> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == IoErrorKind::NotFound => return Ok(OutputChunk::default()),
        Err(err) => return Err(err.into()),
    };
    let total_size = file.metadata()?.len();
    let (offset, len) = request.window(total_size);
    file.seek(SeekFrom::Start(offset))?;
    let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(len).read_to_end(&mut data)?;
    Ok(OutputChunk {
        data,
        offset,
        total_size,
    })
}

/// Waits for an exclusive lock on `file` (opened from `path`, which the error names).
pub(super) fn lock_exclusive(file: File, path: &Path) -> Result<Flock<File>> {
    Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| {
        Error::new(
            ErrorKind::Io,
            format!("cannot lock {}: {errno}", path.display()),
        )
    })
}

/// Writes a small file so that readers see all of it or none of it.
pub(super) fn write_atomically(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_of_proc_stat() {
        // Captured from this machine: the wrapper mid-exec, a zombie, and a command name
        // chosen to confuse a parser that splits on spaces or on the first ')'.
        let cases = [
            (
                "3581 (bash) R 2526 3581 21755 0 -1 4194304 2 0 0 0 0 0 0 0 20 0 1 0 603241 4096 0",
                Some(603241),
            ),
            (
                "5382 (bash) Z 5235 5382 21755 0 -1 4228108 172 0 0 0 0 0 0 0 20 0 1 0 603476 0 0",
                Some(603476),
            ),
            (
                "77 (a) b (c) S 1 77 77 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0",
                Some(99),
            ),
            ("77 (bash) S 1 77", None),
            ("no parenthesis at all", None),
        ];
        for (stat, expected) in cases {
            assert_eq!(start_time_in_stat(stat), expected, "{stat}");
        }
    }

    #[test]
    fn a_reused_group_id_is_not_the_job() {
        use std::os::unix::process::CommandExt;
        let jobs = tempfile::tempdir().expect("temp dir");
        let dir = JobDir::new(jobs.path(), JobId::from("1"));
        std::fs::create_dir(dir.root()).expect("job dir");
        let mut leader = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let pid = leader.id();
        dir.record_group(pid).expect("record");
        let recorded = std::fs::read_to_string(dir.path("pgid")).expect("pgid file");
        let start: u64 = recorded
            .split_whitespace()
            .nth(1)
            .and_then(|start| start.parse().ok())
            .expect("start time recorded");
        let alive = dir.live_group();
        write_atomically(&dir.path("pgid"), format!("{pid} {}", start + 1).as_bytes())
            .expect("record");
        let reused = dir.live_group();
        leader.kill().expect("kill sleep");
        leader.wait().expect("reap sleep");
        let ended = dir.live_group();
        assert_eq!(alive, pid.try_into().ok(), "the recorded leader is alive");
        assert_eq!(reused, None, "same id, another start time: not the job");
        assert_eq!(ended, None, "the group has ended");
    }
}
