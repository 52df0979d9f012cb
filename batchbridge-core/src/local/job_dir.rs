//! Reading one local job's directory: its state, its process group, its output.

use std::fs::File;
use std::io::{ErrorKind as IoErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::sys::signal::killpg;
use nix::unistd::Pid;

use crate::backend::{JobId, JobOutput, OutputChunk, OutputRequest};
use crate::error::{Error, Result};
use crate::spec::JobSpec;
use crate::state::{JobState, JobStatus, TaskCounts};

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
    started_at: Option<SystemTime>,
    ended_at: Option<SystemTime>,
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
        let id_text = id.as_str();
        if id_text.is_empty() || id_text.len() > 20 || !id_text.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
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

    fn spec(&self) -> Option<JobSpec> {
        let bytes = std::fs::read(self.path("spec.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The job's process group while any of its processes lives.
    pub(super) fn live_group(&self) -> Option<i32> {
        let pgid: i32 = std::fs::read_to_string(self.path("pgid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        match killpg(Pid::from_raw(pgid), None) {
            Ok(()) | Err(nix::errno::Errno::EPERM) => {}
            Err(_) => return None,
        }
        // Guard against the group id having been reused by an unrelated process: while
        // our wrapper leads the group, its command line names this job's directory.
        match std::fs::read(format!("/proc/{pgid}/cmdline")) {
            Ok(cmdline) => {
                let root = self.root.as_os_str().as_encoded_bytes();
                cmdline
                    .split(|b| *b == 0)
                    .any(|arg| arg == root)
                    .then_some(pgid)
            }
            // The leader is gone but members remain (or there is no /proc): still ours.
            Err(_) => Some(pgid),
        }
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
            JobState::Failed => status.tasks.map_or_else(
                || {
                    status
                        .exit_code
                        .map(|code| format!("exited with code {code}"))
                },
                |counts| {
                    Some(format!(
                        "{} of {} tasks failed",
                        counts.failed, counts.total
                    ))
                },
            ),
            JobState::Cancelled => Some("cancelled by the user".to_owned()),
            _ => None,
        };
        if status.state == JobState::Cancelled {
            status.signal = Some(nix::libc::SIGTERM);
        }
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

/// Writes a small file so that readers see all of it or none of it.
pub(super) fn write_atomically(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
