//! A job's output as `logs` and `run` print it: a job's as it came, an array's tasks each
//! under `==> task N <==` headings (core's `TaskHeadings`), stdout to stdout and stderr to
//! stderr.

use std::io::Write;
use std::time::Duration;

use batchbridge_core::follow::{ArrayOutputFollower, NewOutput, OutputFollower, TaskHeadings};
use batchbridge_core::{
    BatchBackend, JobId, JobStatus, MAX_OUTPUT_CHUNK, OutputChunk, OutputRequest, Result, Tracker,
};

/// The output of one job, one task of it, or every task of an array, printed from where
/// each task's follower stands.
pub(crate) struct PrintedOutput {
    id: JobId,
    /// The array's task count when every task is printed.
    array: Option<u32>,
    /// Each printed task with its follower, in task order: one for a job or a single task.
    followers: Vec<(u32, OutputFollower)>,
    /// Present when every task of an array is printed.
    headings: Option<TaskHeadings>,
}

impl PrintedOutput {
    /// Every task of an array of `array` tasks, or else task `task` alone (0 for a job
    /// that is not an array).
    pub(crate) fn new(id: JobId, array: Option<u32>, task: u32) -> Self {
        let tasks: Vec<u32> = match array {
            Some(count) => (0..count).collect(),
            None => vec![task],
        };
        Self {
            followers: tasks
                .into_iter()
                .map(|task| (task, OutputFollower::new(id.clone()).for_task(task)))
                .collect(),
            headings: array.map(|_| TaskHeadings::default()),
            id,
            array,
        }
    }

    /// Prints the end of each task's streams, `tail` lines or bytes of each; what follows
    /// goes on from there.
    pub(crate) async fn tail(&mut self, backend: &dyn BatchBackend, tail: Tail) -> Result<()> {
        let end = |chunk: &OutputChunk| chunk.offset + chunk.data.len() as u64;
        for (task, follower) in &mut self.followers {
            let (stdout, stderr, ends) = match tail {
                Tail::Bytes(bytes) => {
                    let request = OutputRequest::tail(bytes).for_task(*task);
                    let output = backend.fetch_output(&self.id, &request).await?;
                    let ends = (end(&output.stdout), end(&output.stderr));
                    (output.stdout.data, output.stderr.data, ends)
                }
                Tail::Lines(lines) => {
                    // Lines have no length until read: a window of a few hundred bytes a
                    // line, four times larger until it holds them all or the chunk limit.
                    let mut window = lines
                        .saturating_add(1)
                        .saturating_mul(256)
                        .clamp(4096, MAX_OUTPUT_CHUNK);
                    loop {
                        let request = OutputRequest::tail(window).for_task(*task);
                        let output = backend.fetch_output(&self.id, &request).await?;
                        let last =
                            |chunk: &OutputChunk| last_lines(chunk, lines).map(<[u8]>::to_vec);
                        match (last(&output.stdout), last(&output.stderr)) {
                            (Some(stdout), Some(stderr)) => {
                                break (stdout, stderr, (end(&output.stdout), end(&output.stderr)));
                            }
                            _ if window >= MAX_OUTPUT_CHUNK => {
                                let ends = (end(&output.stdout), end(&output.stderr));
                                break (output.stdout.data, output.stderr.data, ends);
                            }
                            _ => window = window.saturating_mul(4).min(MAX_OUTPUT_CHUNK),
                        }
                    }
                }
            };
            print(&mut self.headings, *task, &NewOutput { stdout, stderr });
            *follower = follower.clone().starting_at(ends.0, ends.1);
        }
        Ok(())
    }

    /// Prints what each task has written so far.
    pub(crate) async fn written(&mut self, backend: &dyn BatchBackend) -> Result<()> {
        for (task, follower) in &mut self.followers {
            loop {
                let new = follower.poll(backend).await?;
                if new.is_empty() {
                    break;
                }
                print(&mut self.headings, *task, &new);
            }
        }
        Ok(())
    }

    /// Prints what comes, reading every `interval` while `tracker` sees the job running,
    /// until it ends; `around` runs each print (a spinner's `suspend`). Returns the job's
    /// terminal status.
    pub(crate) async fn follow(
        self,
        tracker: &Tracker,
        interval: Duration,
        around: impl Fn(&mut dyn FnMut()),
    ) -> Result<JobStatus> {
        let Self {
            id,
            array,
            mut followers,
            mut headings,
        } = self;
        let mut print =
            |task: u32, new: &NewOutput| around(&mut || print(&mut headings, task, new));
        match array {
            None => {
                // `new` gives a job that is not an array exactly one follower.
                let (task, mut follower) = followers.remove(0);
                follower
                    .follow(tracker, interval, |new| print(task, &new))
                    .await
            }
            Some(count) => {
                let mut every = ArrayOutputFollower::new(id, count);
                for (task, follower) in &followers {
                    let (stdout, stderr) = follower.offsets();
                    every = every.starting_at(*task, stdout, stderr);
                }
                every
                    .follow(tracker, interval, |task, new| print(task, &new))
                    .await
            }
        }
    }
}

/// How much of the end of each stream `logs --tail` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The last lines, as tail and kubectl count them (a last line without its newline
    /// counts).
    Lines(u64),
    /// The last bytes.
    Bytes(u64),
}

/// The last `lines` lines of a stream whose end `chunk` holds; None when the chunk, which
/// does not start at the stream's beginning, holds fewer.
fn last_lines(chunk: &OutputChunk, lines: u64) -> Option<&[u8]> {
    let data = chunk.data.as_slice();
    let Some(skip) = lines.checked_sub(1) else {
        return Some(&data[data.len()..]);
    };
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let start = usize::try_from(skip).ok().and_then(|skip| {
        body.iter()
            .enumerate()
            .rev()
            .filter(|(_, byte)| **byte == b'\n')
            .nth(skip)
            .map(|(at, _)| at)
    });
    match start {
        Some(newline) => Some(&data[newline + 1..]),
        None if chunk.offset == 0 => Some(data),
        None => None,
    }
}

/// Prints task `task`'s `new` output, under headings when there are any. A closed pipe
/// (`| head`) is no error of the job's: what is left is dropped.
fn print(headings: &mut Option<TaskHeadings>, task: u32, new: &NewOutput) {
    let (mut stdout, mut stderr) = (std::io::stdout().lock(), std::io::stderr().lock());
    match headings {
        Some(headings) => {
            let _ = headings.write_split(&mut stdout, &mut stderr, task, new);
        }
        None => {
            let _ = stdout.write_all(&new.stdout).and_then(|()| stdout.flush());
            let _ = stderr.write_all(&new.stderr).and_then(|()| stderr.flush());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_are_counted_as_tail_counts_them() {
        let chunk = |offset: u64, text: &str| OutputChunk::new(text.into(), offset, 0);
        let cases: &[(u64, &str, u64, Option<&str>)] = &[
            (0, "a\nb\nc\n", 2, Some("b\nc\n")),
            (0, "a\nb\nc", 2, Some("b\nc")),
            (0, "a\nb\nc\n", 3, Some("a\nb\nc\n")),
            (0, "a\nb\nc\n", 10, Some("a\nb\nc\n")),
            (0, "a\nb\nc\n", 0, Some("")),
            (0, "", 5, Some("")),
            (0, "\n\n\n", 2, Some("\n\n")),
            (100, "a\nb\nc\n", 2, Some("b\nc\n")),
            (100, "a\nb\nc\n", 3, None),
            (100, "partial line", 1, None),
        ];
        for (offset, text, lines, expected) in cases {
            let chunk = chunk(*offset, text);
            assert_eq!(
                last_lines(&chunk, *lines).map(|b| String::from_utf8_lossy(b).into_owned()),
                expected.map(str::to_owned),
                "{text:?} from {offset}, {lines} lines"
            );
        }
    }
}
