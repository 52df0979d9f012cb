//! [`JobDirs::fetch_output`]: bounded windows of a task's output, read on the cluster.

use std::sync::LazyLock;

use super::JobDirs;
use crate::backend::{JobOutput, MAX_OUTPUT_CHUNK, OutputChunk, OutputRange, OutputRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::shell::Command;
use crate::wrapper::{NO_SUCH_JOB_EXIT_CODE, NO_SUCH_TASK_EXIT_CODE, job_number_of, render_script};

/// The output script, with its exit codes filled in.
pub(super) static FETCH_OUTPUT: LazyLock<String> =
    LazyLock::new(|| render_script(include_str!("fetch_output.sh")));

impl JobDirs {
    /// A bounded window of one task's stdout and stderr from `WORK/ids/ID/`, streamed with
    /// `dd` so that no file is ever read whole. `id` must be a [`job_number`](crate::wrapper::job_number): anything else is
    /// [`InvalidInput`](ErrorKind::InvalidInput) (see [`job_number_of`]); a number this work
    /// directory has no job for is [`NotFound`](ErrorKind::NotFound). A task the job does not
    /// have (by its `tasks` file, which holds the task count) is
    /// [`InvalidInput`](ErrorKind::InvalidInput).
    pub async fn fetch_output(&self, number: &str, request: &OutputRequest) -> Result<JobOutput> {
        let id = job_number_of(number, "a job id")?;
        let work = self.work().await?;
        let not_found = || {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "job {id} has no output here: it was not submitted through this work directory"
                ),
            )
        };
        let task_number = request.task.unwrap_or(0);
        let task = task_number.to_string();
        let range = match request.range {
            OutputRange::Tail(n) => vec!["tail".to_owned(), n.min(MAX_OUTPUT_CHUNK).to_string()],
            OutputRange::Bytes { offset, len } => vec![
                "range".to_owned(),
                offset.to_string(),
                len.min(MAX_OUTPUT_CHUNK).to_string(),
            ],
        };
        let limit = usize::try_from(MAX_OUTPUT_CHUNK).unwrap_or(usize::MAX) + 64;
        let command = Command::sh(&FETCH_OUTPUT, [work, id, &task])
            .args(range)
            .output_limit(limit)
            .timeout(self.timeout());
        let output = self.shell().run(&command).await?;
        match output.exit_code {
            Some(NO_SUCH_JOB_EXIT_CODE) => return Err(not_found()),
            Some(NO_SUCH_TASK_EXIT_CODE) => {
                return Err(Error::invalid_input(format!(
                    "job {id} has {} task(s); there is no task {task_number}",
                    output.stdout_text().trim()
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
