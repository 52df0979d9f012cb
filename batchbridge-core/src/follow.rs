//! [`OutputFollower`]: a job's output as it grows, read by polling
//! [`BatchBackend::fetch_output`] from where the last read ended; [`Tracker::follow_output`]
//! hands it over as a stream.
//!
//! Output is not pushed: following costs one bounded `fetch_output` per interval (two when
//! one stream is far ahead of the other), and only while the tracker sees the job running
//! (or cannot tell): nothing is read while it waits in the queue. Pushed events make the
//! tracker see the start and the end sooner, so reading starts and stops sooner, but the
//! bytes themselves still come by polling. The follower only keeps the offsets of what it
//! has passed on; a backend that can push output can later feed the same [`NewOutput`]
//! without changing its callers.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::backend::{BatchBackend, JobId, MAX_OUTPUT_CHUNK, OutputChunk, OutputRequest};
use crate::error::Result;
use crate::state::{JobState, JobStatus};
use crate::tracker::{Tracker, Watch};

mod headings;

pub use headings::TaskHeadings;

/// How often an [`OutputStream`] reads a running job's output: a line printed by the job
/// reaches the stream about this long after it reached the job's output file (plus the
/// time of one `fetch_output`).
pub const OUTPUT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How many updates an [`OutputStream`] holds before it stops reading until its reader
/// takes one: with each read at most [`MAX_OUTPUT_CHUNK`] bytes of each of stdout and
/// stderr, a reader that falls behind costs bounded memory.
pub const OUTPUT_BUFFER: usize = 4;

/// Bytes of a job's output not passed on before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewOutput {
    /// New bytes of standard output.
    pub stdout: Vec<u8>,
    /// New bytes of standard error.
    pub stderr: Vec<u8>,
}

impl NewOutput {
    /// Whether neither stream grew.
    pub fn is_empty(&self) -> bool {
        self.stdout.is_empty() && self.stderr.is_empty()
    }
}

/// Follows one job's (or one array task's) output, passing on every byte once, in order.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use batchbridge_core::follow::OutputFollower;
/// use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, Tracker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let backend = Arc::new(LocalBackend::new(dir.path())?);
/// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
/// let script = "echo one; sleep 1; echo two >&2; exit 3";
/// let id = backend.submit(&JobSpec::new(JobKey::new("count")?, "count", script)).await?;
///
/// let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
/// let status = OutputFollower::new(id)
///     .follow(&tracker, Duration::from_millis(100), |new| {
///         stdout.extend(new.stdout);
///         stderr.extend(new.stderr);
///     })
///     .await?;
/// assert_eq!((status.state, status.exit_code), (JobState::Failed, Some(3)));
/// assert_eq!((&stdout[..], &stderr[..]), (&b"one\n"[..], &b"two\n"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OutputFollower {
    id: JobId,
    task: Option<u32>,
    stdout: u64,
    stderr: u64,
}

impl OutputFollower {
    /// Follows job `id` from the first byte of each stream.
    pub fn new(id: JobId) -> Self {
        Self {
            id,
            task: None,
            stdout: 0,
            stderr: 0,
        }
    }

    /// Follows task `task` of an array job instead of task 0.
    #[must_use]
    pub fn for_task(mut self, task: u32) -> Self {
        self.task = Some(task);
        self
    }

    /// Starts at these byte offsets of stdout and stderr instead of the first byte, e.g.
    /// after showing the tail of the output.
    #[must_use]
    pub fn starting_at(mut self, stdout: u64, stderr: u64) -> Self {
        self.stdout = stdout;
        self.stderr = stderr;
        self
    }

    /// The offsets `(stdout, stderr)` up to which output was passed on.
    pub fn offsets(&self) -> (u64, u64) {
        (self.stdout, self.stderr)
    }

    /// What was written since the last poll, at most [`MAX_OUTPUT_CHUNK`] bytes of each
    /// stream: one read from the lower of the two offsets, and a second from the higher
    /// one when the first window ended before it.
    pub async fn poll(&mut self, backend: &dyn BatchBackend) -> Result<NewOutput> {
        let low = self.stdout.min(self.stderr);
        let output = backend.fetch_output(&self.id, &self.request(low)).await?;
        let mut new = NewOutput {
            stdout: take_new(&output.stdout, &mut self.stdout),
            stderr: take_new(&output.stderr, &mut self.stderr),
        };
        let high = self.stdout.max(self.stderr);
        let behind = |chunk: &OutputChunk, offset: u64| offset < chunk.total_size;
        if high > low && (behind(&output.stdout, high) || behind(&output.stderr, high)) {
            let again = backend.fetch_output(&self.id, &self.request(high)).await?;
            if self.stdout == high {
                new.stdout.extend(take_new(&again.stdout, &mut self.stdout));
            }
            if self.stderr == high {
                new.stderr.extend(take_new(&again.stderr, &mut self.stderr));
            }
        }
        Ok(new)
    }

    /// Passes the output on to `on_output` as it grows, reading every `interval` while
    /// `tracker` sees the job Running or Suspended (or Unknown), until it sees the job end;
    /// then reads what is left and returns the job's terminal status.
    ///
    /// A temporary failure to read the output is retried at the next read; one while
    /// reading the rest at the end, and a permanent failure of the tracker's polls, is
    /// returned.
    pub async fn follow(
        &mut self,
        tracker: &Tracker,
        interval: Duration,
        mut on_output: impl FnMut(NewOutput),
    ) -> Result<JobStatus> {
        let backend = tracker.backend().clone();
        let watch = tracker.watch(self.id.clone());
        follow_watched(self, backend.as_ref(), watch, interval, |(new, _)| {
            on_output(new);
            std::future::ready(())
        })
        .await
    }

    /// The job's output as a stream, read every [`OUTPUT_POLL_INTERVAL`] while `tracker`
    /// sees the job running, from where this follower stands ([`starting_at`](Self::starting_at)
    /// resumes a stream that ended early), holding at most [`OUTPUT_BUFFER`] updates. It
    /// ends after the last read once the tracker sees the job end, with
    /// [`OutputUpdate::Ended`], or with the error that stopped it. Dropping the stream stops
    /// the reading.
    pub fn stream(mut self, tracker: &Tracker) -> OutputStream {
        let (sender, updates) = mpsc::channel(OUTPUT_BUFFER);
        let backend = tracker.backend().clone();
        let watch = tracker.watch(self.id.clone());
        let task = tracker.runtime().spawn(async move {
            let ended = follow_watched(
                &mut self,
                backend.as_ref(),
                watch,
                OUTPUT_POLL_INTERVAL,
                |(new, resume_at)| {
                    let sender = sender.clone();
                    async move {
                        // A reader that is gone drops the stream, which stops this task.
                        let _ = sender
                            .send(Ok(OutputUpdate::Output { new, resume_at }))
                            .await;
                    }
                },
            )
            .await;
            let _ = sender.send(ended.map(OutputUpdate::Ended)).await;
        });
        OutputStream { updates, task }
    }

    fn request(&self, offset: u64) -> OutputRequest {
        let request = OutputRequest::bytes(offset, MAX_OUTPUT_CHUNK);
        match self.task {
            Some(task) => request.for_task(task),
            None => request,
        }
    }
}

/// What [`follow_watched`] reads: one round while the job runs, the rest once it ended,
/// each piece passed on as soon as it was read.
trait Reading {
    /// A piece of output, with what the caller needs to know of where it belongs.
    type Piece;

    /// One round of reads of a running job.
    async fn round<Passed: Future<Output = ()>>(
        &mut self,
        backend: &dyn BatchBackend,
        pass_on: &mut impl FnMut(Self::Piece) -> Passed,
    ) -> Result<()>;

    /// Everything left of a job that ended.
    async fn rest<Passed: Future<Output = ()>>(
        &mut self,
        backend: &dyn BatchBackend,
        pass_on: &mut impl FnMut(Self::Piece) -> Passed,
    ) -> Result<()>;
}

impl Reading for OutputFollower {
    /// The new bytes and the offsets `(stdout, stderr)` just past them.
    type Piece = (NewOutput, (u64, u64));

    async fn round<Passed: Future<Output = ()>>(
        &mut self,
        backend: &dyn BatchBackend,
        pass_on: &mut impl FnMut(Self::Piece) -> Passed,
    ) -> Result<()> {
        let new = self.poll(backend).await?;
        if !new.is_empty() {
            pass_on((new, self.offsets())).await;
        }
        Ok(())
    }

    async fn rest<Passed: Future<Output = ()>>(
        &mut self,
        backend: &dyn BatchBackend,
        pass_on: &mut impl FnMut(Self::Piece) -> Passed,
    ) -> Result<()> {
        loop {
            let new = self.poll(backend).await?;
            if new.is_empty() {
                return Ok(());
            }
            pass_on((new, self.offsets())).await;
        }
    }
}

/// The loop of every follow: `reading`'s rounds every `interval` while the watched job
/// runs (Running, Suspended, or Unknown), then the rest once it ended; returns the job's
/// terminal status. A temporary failure of a round is retried at the next; any other
/// failure, one while reading the rest, and a permanent failure of the tracker's polls
/// are returned.
async fn follow_watched<R, F, Passed>(
    reading: &mut R,
    backend: &dyn BatchBackend,
    mut watch: Watch,
    interval: Duration,
    mut pass_on: F,
) -> Result<JobStatus>
where
    R: Reading,
    F: FnMut(R::Piece) -> Passed,
    Passed: Future<Output = ()>,
{
    let mut running = false;
    loop {
        tokio::select! {
            status = watch.next() => {
                let status = status?;
                if status.state.is_terminal() {
                    reading.rest(backend, &mut pass_on).await?;
                    return Ok(status);
                }
                running = matches!(
                    status.state,
                    JobState::Running | JobState::Suspended | JobState::Unknown
                );
            }
            () = tokio::time::sleep(interval), if running => {
                match reading.round(backend, &mut pass_on).await {
                    Err(err) if !err.is_temporary() => return Err(err),
                    _ => {}
                }
            }
        }
    }
}

/// How many tasks an [`ArrayOutputFollower`] reads per round, so that following an array
/// of any size costs a bounded number of reads per interval.
pub const TASK_READS_PER_ROUND: u32 = 4;

/// Follows every task of an array job, passing on each task's output once, in order
/// within the task, as it grows.
///
/// While the array runs, each round reads the next [`TASK_READS_PER_ROUND`] tasks in turn,
/// so a task's new output arrives within `interval × tasks / TASK_READS_PER_ROUND`; a task
/// that has not started reads as empty. Once the array ended, what is left of every task is
/// read in task order.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use batchbridge_core::follow::ArrayOutputFollower;
/// use batchbridge_core::{ArraySpec, BatchBackend, JobKey, JobSpec, LocalBackend, Tracker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let backend = Arc::new(LocalBackend::new(dir.path())?);
/// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
/// let mut spec = JobSpec::new(JobKey::new("tasks")?, "tasks", "echo task $BATCHBRIDGE_TASK_INDEX");
/// spec.array = Some(ArraySpec::new(3));
/// let id = backend.submit(&spec).await?;
///
/// let mut printed = vec![String::new(); 3];
/// ArrayOutputFollower::new(id, 3)
///     .follow(&tracker, Duration::from_millis(100), |task, new| {
///         printed[task as usize].push_str(&String::from_utf8_lossy(&new.stdout));
///     })
///     .await?;
/// assert_eq!(printed, ["task 0\n", "task 1\n", "task 2\n"]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ArrayOutputFollower {
    id: JobId,
    tasks: Vec<OutputFollower>,
    /// The task the next round starts with.
    next: usize,
}

impl ArrayOutputFollower {
    /// Follows the `tasks` tasks of array job `id` from the first byte of each stream.
    pub fn new(id: JobId, tasks: u32) -> Self {
        Self {
            id: id.clone(),
            tasks: (0..tasks)
                .map(|task| OutputFollower::new(id.clone()).for_task(task))
                .collect(),
            next: 0,
        }
    }

    /// Starts task `task` at these byte offsets of stdout and stderr instead of the first
    /// byte, e.g. after showing the tail of its output; a task past the array's end is
    /// left alone.
    #[must_use]
    pub fn starting_at(mut self, task: u32, stdout: u64, stderr: u64) -> Self {
        if let Some(follower) = self.tasks.get_mut(task as usize) {
            *follower = follower.clone().starting_at(stdout, stderr);
        }
        self
    }

    /// Passes each task's output on to `on_output(task, new)` as it grows, reading while
    /// `tracker` sees the array running, until it sees it end; then reads what is left of
    /// every task and returns the array's terminal status. Failures are handled as
    /// [`OutputFollower::follow`] handles them.
    pub async fn follow(
        &mut self,
        tracker: &Tracker,
        interval: Duration,
        mut on_output: impl FnMut(u32, NewOutput),
    ) -> Result<JobStatus> {
        let backend = tracker.backend().clone();
        let watch = tracker.watch(self.id.clone());
        follow_watched(self, backend.as_ref(), watch, interval, |(task, new)| {
            on_output(task, new);
            std::future::ready(())
        })
        .await
    }
}

impl Reading for ArrayOutputFollower {
    /// The task and its new bytes.
    type Piece = (u32, NewOutput);

    async fn round<Passed: Future<Output = ()>>(
        &mut self,
        backend: &dyn BatchBackend,
        pass_on: &mut impl FnMut(Self::Piece) -> Passed,
    ) -> Result<()> {
        let count = self.tasks.len();
        for _ in 0..count.min(TASK_READS_PER_ROUND as usize) {
            let task = self.next;
            self.next = (task + 1) % count;
            self.tasks[task]
                .round(backend, &mut |(new, _)| pass_on((task_number(task), new)))
                .await?;
        }
        Ok(())
    }

    async fn rest<Passed: Future<Output = ()>>(
        &mut self,
        backend: &dyn BatchBackend,
        pass_on: &mut impl FnMut(Self::Piece) -> Passed,
    ) -> Result<()> {
        for (task, follower) in self.tasks.iter_mut().enumerate() {
            follower
                .rest(backend, &mut |(new, _)| pass_on((task_number(task), new)))
                .await?;
        }
        Ok(())
    }
}

/// Task `index` of a follower's list, whose length came from a `u32`.
fn task_number(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// One step of a job's output stream, from [`OutputStream::next`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputUpdate {
    /// Bytes written since the last update.
    Output {
        /// The new bytes of each stream.
        new: NewOutput,
        /// The offsets `(stdout, stderr)` just past them: where a new stream resumes, with
        /// [`OutputFollower::starting_at`].
        resume_at: (u64, u64),
    },
    /// The job ended, with this status, and all its output was passed on: the last update.
    Ended(JobStatus),
}

/// A job's stdout and stderr as they grow, from [`Tracker::follow_output`] or
/// [`OutputFollower::stream`].
#[derive(Debug)]
pub struct OutputStream {
    updates: mpsc::Receiver<Result<OutputUpdate>>,
    task: JoinHandle<()>,
}

impl OutputStream {
    /// The next update; an error or [`OutputUpdate::Ended`] is the last one, then `None`.
    pub async fn next(&mut self) -> Option<Result<OutputUpdate>> {
        self.updates.recv().await
    }
}

impl Drop for OutputStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tracker {
    /// Streams job `id`'s stdout and stderr as the job writes them, until the tracker sees
    /// it end: [`OutputFollower::stream`] from the first byte. The job is followed while the
    /// stream lives.
    ///
    /// Output is read by polling, every [`OUTPUT_POLL_INTERVAL`] while the job runs; it is
    /// not pushed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::follow::OutputUpdate;
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, Tracker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
    /// let script = "for n in 1 2 3; do echo $n; sleep 0.3; done";
    /// let id = backend.submit(&JobSpec::new(JobKey::new("count")?, "count", script)).await?;
    ///
    /// let mut output = tracker.follow_output(id);
    /// let mut stdout = Vec::new();
    /// let ended = loop {
    ///     match output.next().await.expect("a stream ends with Ended or an error")? {
    ///         OutputUpdate::Output { new, .. } => stdout.extend(new.stdout),
    ///         OutputUpdate::Ended(status) => break status,
    ///         _ => {}
    ///     }
    /// };
    /// assert_eq!(ended.state, JobState::Succeeded);
    /// assert_eq!(stdout, b"1\n2\n3\n");
    /// # Ok(()) }
    /// ```
    pub fn follow_output(&self, id: JobId) -> OutputStream {
        OutputFollower::new(id).stream(self)
    }
}

/// The bytes of `chunk` at or after `offset`, moving `offset` past them.
fn take_new(chunk: &OutputChunk, offset: &mut u64) -> Vec<u8> {
    let end = chunk.offset + chunk.data.len() as u64;
    if *offset < chunk.offset || *offset >= end {
        return Vec::new();
    }
    let skip = usize::try_from(*offset - chunk.offset).unwrap_or(usize::MAX);
    *offset = end;
    chunk.data[skip..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bytes_past_the_offset_are_new() {
        let chunk = OutputChunk::new(b"abcdef".to_vec(), 10, 16);
        let cases = [
            (10, "abcdef", 16),
            (13, "def", 16),
            (16, "", 16),
            (4, "", 4),
            (30, "", 30),
        ];
        for (start, new, after) in cases {
            let mut offset = start;
            assert_eq!(
                take_new(&chunk, &mut offset),
                new.as_bytes(),
                "from {start}"
            );
            assert_eq!(offset, after, "from {start}");
        }
    }
}
