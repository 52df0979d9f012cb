//! A job's output as `logs` and `run` print it: a job's as it came, an array's tasks each
//! under `==> task N <==` headings (core's `TaskHeadings`), stdout to stdout and stderr to
//! stderr.

use std::io::Write;
use std::time::Duration;

use batchbridge_core::follow::{ArrayOutputFollower, NewOutput, OutputFollower, TaskHeadings};
use batchbridge_core::{
    BatchBackend, JobId, JobStatus, OutputChunk, OutputRequest, Result, Tracker,
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

    /// Prints the last `bytes` of each task's streams; what follows goes on from there.
    pub(crate) async fn tail(&mut self, backend: &dyn BatchBackend, bytes: u64) -> Result<()> {
        let end = |chunk: &OutputChunk| chunk.offset + chunk.data.len() as u64;
        for (task, follower) in &mut self.followers {
            let request = OutputRequest::tail(bytes).for_task(*task);
            let output = backend.fetch_output(&self.id, &request).await?;
            print(
                &mut self.headings,
                *task,
                &NewOutput {
                    stdout: output.stdout.data.clone(),
                    stderr: output.stderr.data.clone(),
                },
            );
            *follower = follower
                .clone()
                .starting_at(end(&output.stdout), end(&output.stderr));
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
