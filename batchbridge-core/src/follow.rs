//! [`OutputFollower`]: a job's output as it grows, read by polling
//! [`BatchBackend::fetch_output`] from where the last read ended.
//!
//! No backend pushes output yet, so following costs one bounded `fetch_output` per
//! interval (two when one stream is far ahead of the other). The follower only keeps the
//! offsets of what it has passed on; a backend that can push output can later feed the same
//! [`NewOutput`] without changing its callers.

use std::time::Duration;

use crate::backend::{BatchBackend, JobId, MAX_OUTPUT_CHUNK, OutputChunk, OutputRequest};
use crate::error::Result;
use crate::state::JobStatus;
use crate::tracker::Tracker;

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

    /// Passes the output on to `on_output` as it grows, polling every `interval`, until the
    /// job ends; then reads what is left and returns the job's terminal status.
    ///
    /// A temporary failure to read the output is retried at the next poll; one while
    /// reading the rest at the end, and any failure of the tracker's wait, is returned.
    pub async fn follow(
        &mut self,
        tracker: &Tracker,
        interval: Duration,
        mut on_output: impl FnMut(NewOutput),
    ) -> Result<JobStatus> {
        let backend = tracker.backend().clone();
        let id = self.id.clone();
        let ended = tracker.wait(&id, Duration::MAX);
        tokio::pin!(ended);
        loop {
            tokio::select! {
                status = &mut ended => {
                    let status = status?;
                    loop {
                        let new = self.poll(backend.as_ref()).await?;
                        if new.is_empty() {
                            return Ok(status);
                        }
                        on_output(new);
                    }
                }
                () = tokio::time::sleep(interval) => match self.poll(backend.as_ref()).await {
                    Ok(new) if !new.is_empty() => on_output(new),
                    Ok(_) => {}
                    Err(err) if err.is_temporary() => {}
                    Err(err) => return Err(err),
                },
            }
        }
    }

    fn request(&self, offset: u64) -> OutputRequest {
        let request = OutputRequest::bytes(offset, MAX_OUTPUT_CHUNK);
        match self.task {
            Some(task) => request.for_task(task),
            None => request,
        }
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
