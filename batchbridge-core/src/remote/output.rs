//! [`JobDirs::fetch_output`] and [`JobDirs::fetch_outputs`]: bounded windows of tasks'
//! output, read on the cluster.

use std::sync::LazyLock;

use super::JobDirs;
use super::answers::{each_answered, each_failed, unanswered};
use crate::backend::{JobOutput, MAX_OUTPUT_CHUNK, OutputChunk, OutputRange, OutputRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::shell::{Command, Output};
use crate::wrapper::{NO_SUCH_JOB_EXIT_CODE, NO_SUCH_TASK_EXIT_CODE, job_number_of, render_script};

/// The output script, with its exit codes filled in.
pub(super) static FETCH_OUTPUT: LazyLock<String> =
    LazyLock::new(|| render_script(include_str!("fetch_output.sh")));

/// The script that runs [`FETCH_OUTPUT`] for many windows in one command, one frame each.
const FETCH_OUTPUTS: &str = include_str!("fetch_outputs.sh");

/// The most windows one command of [`JobDirs::fetch_outputs`] reads: its command line
/// stays a few kilobytes.
const WINDOWS_PER_COMMAND: usize = 100;

/// The most bytes the windows of one command of [`JobDirs::fetch_outputs`] may answer: what
/// one window of the largest size answers, so that a command holds no more in memory than
/// a single [`JobDirs::fetch_output`] may.
const BYTES_PER_COMMAND: usize = window_limit(MAX_OUTPUT_CHUNK);

/// The most bytes the answer to a window of `len` bytes per stream (at most
/// [`MAX_OUTPUT_CHUNK`]) holds: both streams and their headers.
const fn window_limit(len: u64) -> usize {
    2 * (len as usize + 64)
}

/// One window to read: a job's number, checked, and the fetch script's arguments for it.
struct Window<'a> {
    id: &'a str,
    task: u32,
    /// `ID TASK MODE A B`.
    args: [String; 5],
    /// The most bytes its answer holds ([`window_limit`]).
    limit: usize,
}

impl<'a> Window<'a> {
    /// The window `request` asks for of job `number`, which must be a
    /// [`job_number`](crate::wrapper::job_number).
    fn new(number: &'a str, request: &OutputRequest) -> Result<Self> {
        let id = job_number_of(number, "a job id")?;
        let task = request.task.unwrap_or(0);
        let (mode, a, b) = match request.range {
            OutputRange::Tail(_) => ("tail", request.max_len(), 0),
            OutputRange::Bytes { offset, .. } => ("range", offset, request.max_len()),
        };
        Ok(Self {
            id,
            task,
            args: [
                id.to_owned(),
                task.to_string(),
                mode.to_owned(),
                a.to_string(),
                b.to_string(),
            ],
            limit: window_limit(request.max_len()),
        })
    }

    /// What the fetch script's `output` for this window says: the two streams' windows,
    /// or why there are none.
    fn answer(&self, output: Output) -> Result<JobOutput> {
        let id = self.id;
        match output.exit_code {
            Some(NO_SUCH_JOB_EXIT_CODE) => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "job {id} has no output here: it was not submitted through this work \
                         directory"
                    ),
                ));
            }
            Some(NO_SUCH_TASK_EXIT_CODE) => {
                return Err(Error::invalid_input(format!(
                    "job {id} has {} task(s); there is no task {}",
                    output.stdout_text().trim(),
                    self.task
                )));
            }
            _ => {}
        }
        let output = output.check("reading job output")?;
        match (parse_window(&output.stdout), parse_window(&output.stderr)) {
            (Some(stdout), Some(stderr))
                if !output.stdout_truncated && !output.stderr_truncated =>
            {
                Ok(JobOutput { stdout, stderr })
            }
            _ => Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!("reading the output of job {id} gave no SIZE OFFSET header"),
            )),
        }
    }
}

impl JobDirs {
    /// A bounded window of one task's stdout and stderr from `WORK/ids/ID/`, streamed with
    /// `dd` so that no file is ever read whole. `id` must be a [`job_number`](crate::wrapper::job_number): anything else is
    /// [`InvalidInput`](ErrorKind::InvalidInput) (see [`job_number_of`]); a number this work
    /// directory has no job for is [`NotFound`](ErrorKind::NotFound). A task the job does not
    /// have (by its `tasks` file, which holds the task count) is
    /// [`InvalidInput`](ErrorKind::InvalidInput).
    pub async fn fetch_output(&self, number: &str, request: &OutputRequest) -> Result<JobOutput> {
        let window = Window::new(number, request)?;
        let work = self.work().await?;
        let command = Command::sh(&FETCH_OUTPUT, [work])
            .args(window.args.iter().cloned())
            .output_limit(window.limit / 2)
            .timeout(self.timeout());
        window.answer(self.shell().run(&command).await?)
    }

    /// [`fetch_output`](Self::fetch_output) of each of `requests` (a job's number and the
    /// window to read), answered in order, each with its own error: up to 100 windows in
    /// one command, each command answering at most what one window of
    /// [`MAX_OUTPUT_CHUNK`] bytes may, one command after another. A command that fails as a
    /// whole (the connection lost) fails each of its windows.
    pub async fn fetch_outputs(
        &self,
        requests: &[(&str, &OutputRequest)],
    ) -> Vec<Result<JobOutput>> {
        let mut answers = unanswered(requests.len());
        // Commands of (index, window).
        let mut commands: Vec<Vec<(usize, Window<'_>)>> = Vec::new();
        let mut bytes = 0;
        for (index, (number, request)) in requests.iter().enumerate() {
            let window = match Window::new(number, request) {
                Ok(window) => window,
                Err(err) => {
                    answers[index] = Some(Err(err));
                    continue;
                }
            };
            let full = commands.last().is_none_or(|command| {
                command.len() >= WINDOWS_PER_COMMAND || bytes + window.limit > BYTES_PER_COMMAND
            });
            if full {
                commands.push(Vec::new());
                bytes = 0;
            }
            bytes += window.limit;
            if let Some(command) = commands.last_mut() {
                command.push((index, window));
            }
        }
        for command in &commands {
            let windows: Vec<&Window<'_>> = command.iter().map(|(_, window)| window).collect();
            let read = self.read_windows(&windows).await;
            for ((index, _), answer) in command.iter().zip(read) {
                answers[*index] = Some(answer);
            }
        }
        each_answered(answers, "an output window")
    }

    /// One command that reads `windows`, and each one's answer, in order.
    async fn read_windows(&self, windows: &[&Window<'_>]) -> Vec<Result<JobOutput>> {
        let count = windows.len();
        let work = match self.work().await {
            Ok(work) => work.to_owned(),
            Err(err) => return each_failed(count, &err),
        };
        let mut args = vec![FETCH_OUTPUT.clone(), work];
        let mut limit = 0;
        for window in windows {
            args.extend(window.args.iter().cloned());
            limit += window.limit + 64;
        }
        let command = Command::sh(FETCH_OUTPUTS, args)
            .output_limit(limit)
            .timeout(self.timeout());
        let output = match self.shell().run(&command).await {
            Ok(output) => output,
            Err(err) => return each_failed(count, &err),
        };
        if output.stdout_truncated {
            let err = Error::new(
                ErrorKind::UnexpectedOutput,
                "reading the output of many jobs answered more than it was asked for",
            );
            return each_failed(count, &err);
        }
        // Frames stop early only when the command did: its own failure, else a short answer.
        let cut_short = Output {
            exit_code: output.exit_code,
            signal: output.signal,
            stderr: output.stderr.clone(),
            ..Output::default()
        }
        .check("reading the output of many jobs")
        .err();
        let mut frames = Frames(&output.stdout);
        windows
            .iter()
            .map(|window| match frames.next() {
                Some(frame) => window.answer(frame),
                None => Err(cut_short.as_ref().map_or_else(
                    || {
                        Error::new(
                            ErrorKind::UnexpectedOutput,
                            format!(
                                "reading the output of many jobs gave no answer for job {}",
                                window.id
                            ),
                        )
                    },
                    Error::again,
                )),
            })
            .collect()
    }
}

/// The frames of `fetch_outputs.sh`'s stdout, each as the single fetch script's output.
struct Frames<'a>(&'a [u8]);

impl Iterator for Frames<'_> {
    type Item = Output;

    fn next(&mut self) -> Option<Output> {
        let newline = self.0.iter().position(|b| *b == b'\n')?;
        let header = std::str::from_utf8(&self.0[..newline]).ok()?;
        let mut fields = header.split(' ').map(str::parse::<usize>);
        let (Some(Ok(rc)), Some(Ok(out)), Some(Ok(err)), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        let body = &self.0[newline + 1..];
        if body.len() < out + err {
            return None;
        }
        self.0 = &body[out + err..];
        Some(Output {
            exit_code: i32::try_from(rc).ok(),
            stdout: body[..out].to_vec(),
            stderr: body[out..out + err].to_vec(),
            ..Output::default()
        })
    }
}

/// Reads one stream of the fetch script: a `SIZE OFFSET` line, then the bytes.
fn parse_window(stream: &[u8]) -> Option<OutputChunk> {
    let newline = stream.iter().position(|b| *b == b'\n')?;
    let header = std::str::from_utf8(&stream[..newline]).ok()?;
    let (size, offset) = header.split_once(' ')?;
    Some(OutputChunk {
        data: stream[newline + 1..].to_vec(),
        offset: offset.parse().ok()?,
        total_size: size.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::shell::MockShell;

    #[tokio::test]
    async fn a_huge_id_is_quoted_only_in_part_and_never_sent() {
        let huge = format!("1;{}", "x".repeat(1 << 20));
        let mut shell = MockShell::new();
        shell.expect_run().never();
        let dirs = JobDirs::new(Arc::new(shell), "/w", Duration::from_secs(1)).unwrap();
        let err = dirs
            .fetch_output(&huge, &OutputRequest::tail(1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(
            err.message().len() < 2 * crate::error::MAX_QUOTED,
            "{} bytes",
            err.message().len()
        );
    }

    #[test]
    fn frames_are_cut_by_their_lengths_whatever_the_bytes() {
        let frame = |rc: i32, out: &[u8], err: &[u8]| Output {
            exit_code: Some(rc),
            stdout: out.to_vec(),
            stderr: err.to_vec(),
            ..Output::default()
        };
        let cases: [(&str, &[u8], Vec<Output>); 6] = [
            ("nothing", b"", vec![]),
            (
                "two frames, the first with a newline and a header-like line inside",
                b"0 12 7\n3 0\n2 0\nab\n1 1\n0 0\n0 4 0\n4 0\n",
                vec![
                    frame(0, b"3 0\n2 0\nab\n1", b" 1\n0 0\n"),
                    frame(0, b"4 0\n", b""),
                ],
            ),
            (
                "an exit code and binary bytes",
                b"3 2 5\n\xff\0no ok",
                vec![frame(3, b"\xff\0", b"no ok")],
            ),
            ("a frame cut short", b"0 10 0\nabc", vec![]),
            ("a header cut short", b"0 10", vec![]),
            ("a header with a field too many", b"0 1 1 1\nab", vec![]),
        ];
        for (case, stdout, expected) in cases {
            assert_eq!(Frames(stdout).collect::<Vec<_>>(), expected, "{case}");
        }
    }

    /// The batch script under a real `sh`, on a work directory laid out as the job wrapper
    /// leaves it: each window is read as alone, in one command, a missing job and task
    /// each with its own error, a malformed number never sent.
    #[tokio::test]
    async fn many_windows_in_one_command_each_answered_as_alone() {
        let work = tempfile::tempdir().unwrap();
        for (id, stdout, stderr) in [("7", "seven\n", ""), ("8", "", "eight\x01\n")] {
            let dir = work.path().join("ids").join(id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("task-0.stdout"), stdout).unwrap();
            std::fs::write(dir.join("task-0.stderr"), stderr).unwrap();
            std::fs::write(dir.join("tasks"), "1\n").unwrap();
        }
        let dirs = JobDirs::new(
            Arc::new(crate::shell::LocalShell),
            work.path().to_str().unwrap(),
            Duration::from_secs(10),
        )
        .unwrap();
        let tail = OutputRequest::tail(4);
        let second_task = OutputRequest::tail(4).for_task(1);
        let whole = OutputRequest::bytes(0, 100);
        let requests = [
            ("7", &tail),
            ("8", &whole),
            ("9", &tail),
            ("7; touch canary", &tail),
            ("7", &second_task),
        ];
        let answers = dirs.fetch_outputs(&requests).await;
        assert_eq!(answers.len(), requests.len());
        let seven = answers[0].as_ref().unwrap();
        assert_eq!(
            (seven.stdout.data.as_slice(), seven.stdout.offset),
            (&b"ven\n"[..], 2)
        );
        let eight = answers[1].as_ref().unwrap();
        assert_eq!(eight.stderr.data, b"eight\x01\n");
        assert!(eight.stdout.data.is_empty());
        let kinds: Vec<_> = answers[2..]
            .iter()
            .map(|answer| answer.as_ref().unwrap_err().kind())
            .collect();
        assert_eq!(
            kinds,
            [
                ErrorKind::NotFound,
                ErrorKind::InvalidInput,
                ErrorKind::InvalidInput
            ]
        );
        for (index, (number, request)) in requests.iter().enumerate() {
            let alone = dirs.fetch_output(number, request).await;
            match (&answers[index], alone) {
                (Ok(many), Ok(one)) => assert_eq!(*many, one, "request {index}"),
                (Err(many), Err(one)) => assert_eq!(many.message(), one.message()),
                (many, one) => panic!("request {index}: {many:?} / {one:?}"),
            }
        }
        assert!(!work.path().join("canary").exists());
        assert!(!std::env::current_dir().unwrap().join("canary").exists());
    }

    #[test]
    fn output_windows() {
        let chunk = parse_window(b"1048580 1048480\nxxEND\n").unwrap();
        assert_eq!(
            (chunk.total_size, chunk.offset, chunk.data.as_slice()),
            (1_048_580, 1_048_480, b"xxEND\n".as_slice())
        );
        let empty = parse_window(b"0 0\n").unwrap();
        assert!(empty.data.is_empty());
        let binary = parse_window(b"3 0\n\xff\n\0").unwrap();
        assert_eq!(binary.data, b"\xff\n\0");
        for bad in [&b""[..], b"12\nxx", b"a b\n", b"1 2"] {
            assert_eq!(parse_window(bad), None, "{bad:?}");
        }
    }
}
