//! [`TaskHeadings`]: the output of an array's tasks in one place, told apart as `tail -f`
//! tells several files apart.

use std::io::{self, Write};

use super::NewOutput;

/// Writes pieces of several tasks' output one after another, with a line `==> task N <==`
/// whenever the task changes, on a line of its own, so that a reader of one stream (a
/// log, a terminal) knows whose lines follow. Pieces keep their bytes: a task's line
/// split over two pieces is whole again once the task's next piece comes.
///
/// ```
/// use batchbridge_core::follow::{NewOutput, TaskHeadings};
///
/// let piece = |text: &str| NewOutput { stdout: text.into(), stderr: Vec::new() };
/// let (mut headings, mut log) = (TaskHeadings::default(), Vec::new());
/// headings.write_merged(&mut log, 1, &piece("one\n"))?;
/// headings.write_merged(&mut log, 0, &piece("zero"))?;
/// headings.write_merged(&mut log, 1, &piece("again\n"))?;
/// assert_eq!(
///     String::from_utf8_lossy(&log),
///     "==> task 1 <==\none\n==> task 0 <==\nzero\n==> task 1 <==\nagain\n"
/// );
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct TaskHeadings {
    /// The task whose output was written last.
    printing: Option<u32>,
    /// The last byte written where the headings go.
    last: Option<u8>,
}

impl TaskHeadings {
    /// Writes task `task`'s `new` output to `out`: stdout, then stderr, after a heading
    /// when the task changed. For one stream that holds both, as a log pod's does.
    pub fn write_merged(
        &mut self,
        out: &mut impl Write,
        task: u32,
        new: &NewOutput,
    ) -> io::Result<()> {
        self.head(out, task)?;
        for bytes in [&new.stdout, &new.stderr] {
            out.write_all(bytes)?;
            self.wrote(bytes);
        }
        out.flush()
    }

    /// Writes task `task`'s stdout to `out` after a heading when the task changed, and its
    /// stderr to `err`. For a terminal's two streams: the headings go with stdout.
    pub fn write_split(
        &mut self,
        out: &mut impl Write,
        err: &mut impl Write,
        task: u32,
        new: &NewOutput,
    ) -> io::Result<()> {
        self.head(out, task)?;
        out.write_all(&new.stdout)?;
        self.wrote(&new.stdout);
        out.flush()?;
        err.write_all(&new.stderr)?;
        err.flush()
    }

    fn head(&mut self, out: &mut impl Write, task: u32) -> io::Result<()> {
        if self.printing == Some(task) {
            return Ok(());
        }
        if self.last.is_some_and(|byte| byte != b'\n') {
            writeln!(out)?;
        }
        writeln!(out, "==> task {task} <==")?;
        self.printing = Some(task);
        self.last = Some(b'\n');
        Ok(())
    }

    fn wrote(&mut self, bytes: &[u8]) {
        self.last = bytes.last().copied().or(self.last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(task: u32, stdout: &str, stderr: &str) -> (u32, NewOutput) {
        (
            task,
            NewOutput {
                stdout: stdout.into(),
                stderr: stderr.into(),
            },
        )
    }

    #[test]
    fn merged_pieces_print_under_a_heading_whenever_the_task_changes() {
        let cases = [
            (
                "one task's pieces under one heading",
                vec![piece(0, "a\n", ""), piece(0, "b\n", "e\n")],
                "==> task 0 <==\na\nb\ne\n",
            ),
            (
                "tasks taking turns",
                vec![
                    piece(1, "x\n", ""),
                    piece(0, "a\n", ""),
                    piece(1, "y\n", ""),
                ],
                "==> task 1 <==\nx\n==> task 0 <==\na\n==> task 1 <==\ny\n",
            ),
            (
                "a heading after a piece without its line end starts a line of its own",
                vec![
                    piece(0, "partial", ""),
                    piece(1, "", "err"),
                    piece(0, " line\n", ""),
                ],
                "==> task 0 <==\npartial\n==> task 1 <==\nerr\n==> task 0 <==\n line\n",
            ),
            ("nothing written, no heading", vec![], ""),
        ];
        for (name, pieces, expected) in cases {
            let (mut headings, mut out) = (TaskHeadings::default(), Vec::new());
            for (task, new) in &pieces {
                headings.write_merged(&mut out, *task, new).unwrap();
            }
            assert_eq!(String::from_utf8(out).unwrap(), expected, "{name}");
        }
    }

    #[test]
    fn split_pieces_keep_stderr_apart_and_head_stdout() {
        let cases = [
            (
                "stdout under headings, stderr on its own",
                vec![piece(0, "a\n", "e0\n"), piece(1, "b\n", "e1\n")],
                ("==> task 0 <==\na\n==> task 1 <==\nb\n", "e0\ne1\n"),
            ),
            (
                "a task with only stderr still gets its heading",
                vec![piece(0, "a\n", ""), piece(1, "", "oops\n")],
                ("==> task 0 <==\na\n==> task 1 <==\n", "oops\n"),
            ),
            (
                "only stdout's line ends count for the heading's line",
                vec![piece(0, "half", "whole\n"), piece(1, "b\n", "")],
                ("==> task 0 <==\nhalf\n==> task 1 <==\nb\n", "whole\n"),
            ),
        ];
        for (name, pieces, (stdout, stderr)) in cases {
            let mut headings = TaskHeadings::default();
            let (mut out, mut err) = (Vec::new(), Vec::new());
            for (task, new) in &pieces {
                headings
                    .write_split(&mut out, &mut err, *task, new)
                    .unwrap();
            }
            assert_eq!(String::from_utf8(out).unwrap(), stdout, "{name}");
            assert_eq!(String::from_utf8(err).unwrap(), stderr, "{name}");
        }
    }
}
