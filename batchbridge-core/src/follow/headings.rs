//! [`TaskHeadings`]: the output of an array's tasks in one place, told apart as `tail -f`
//! tells several files apart.

use std::io::{self, Write};

use super::NewOutput;

/// Writes pieces of several tasks' output one after another, with a line `==> task N <==`
/// whenever the task changes, on a line of its own, so that a reader of the stream (a
/// log, a terminal, a file stdout went to) knows whose lines follow. Pieces keep their
/// bytes: a task's line split over two pieces is whole again once the task's next piece
/// comes.
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
    /// Where stdout goes, and both streams when they are merged.
    out: Headed,
    /// Where stderr goes when it is kept apart.
    err: Headed,
}

/// One stream's headings: whose output it showed last, and its last byte.
#[derive(Debug, Clone, Default)]
struct Headed {
    printing: Option<u32>,
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
        self.out.write(out, task, &[&new.stdout, &new.stderr])
    }

    /// Writes task `task`'s stdout to `out` and its stderr to `err`, each with headings of
    /// its own, so that either read alone (stdout redirected to a file, stderr on the
    /// terminal) says whose lines follow. For a terminal's two streams.
    pub fn write_split(
        &mut self,
        out: &mut impl Write,
        err: &mut impl Write,
        task: u32,
        new: &NewOutput,
    ) -> io::Result<()> {
        self.out.write(out, task, &[&new.stdout])?;
        self.err.write(err, task, &[&new.stderr])
    }
}

impl Headed {
    /// Writes `pieces` of task `task`, after its heading when the task changed; nothing,
    /// not even a heading, when they are empty.
    fn write(&mut self, out: &mut impl Write, task: u32, pieces: &[&Vec<u8>]) -> io::Result<()> {
        if pieces.iter().all(|bytes| bytes.is_empty()) {
            return Ok(());
        }
        if self.printing != Some(task) {
            if self.last.is_some_and(|byte| byte != b'\n') {
                writeln!(out)?;
            }
            writeln!(out, "==> task {task} <==")?;
            self.printing = Some(task);
            self.last = Some(b'\n');
        }
        for bytes in pieces {
            out.write_all(bytes)?;
            self.last = bytes.last().copied().or(self.last);
        }
        out.flush()
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

    /// Each case in both modes: merged into one stream, and kept apart.
    #[test]
    fn pieces_print_under_a_heading_whenever_the_task_changes() {
        let cases = [
            (
                "one task's pieces under one heading",
                vec![piece(0, "a\n", ""), piece(0, "b\n", "e\n")],
                "==> task 0 <==\na\nb\ne\n",
                ("==> task 0 <==\na\nb\n", "==> task 0 <==\ne\n"),
            ),
            (
                "tasks taking turns",
                vec![
                    piece(1, "x\n", ""),
                    piece(0, "a\n", ""),
                    piece(1, "y\n", ""),
                ],
                "==> task 1 <==\nx\n==> task 0 <==\na\n==> task 1 <==\ny\n",
                (
                    "==> task 1 <==\nx\n==> task 0 <==\na\n==> task 1 <==\ny\n",
                    "",
                ),
            ),
            (
                "a heading after a piece without its line end starts a line of its own",
                vec![
                    piece(0, "partial", ""),
                    piece(1, "", "err"),
                    piece(0, " line\n", ""),
                ],
                "==> task 0 <==\npartial\n==> task 1 <==\nerr\n==> task 0 <==\n line\n",
                ("==> task 0 <==\npartial line\n", "==> task 1 <==\nerr"),
            ),
            (
                "a task with only stderr gives stdout no empty heading",
                vec![
                    piece(0, "a\n", ""),
                    piece(1, "", "oops\n"),
                    piece(0, "c\n", ""),
                ],
                "==> task 0 <==\na\n==> task 1 <==\noops\n==> task 0 <==\nc\n",
                ("==> task 0 <==\na\nc\n", "==> task 1 <==\noops\n"),
            ),
            (
                "each stream's own line ends count for its headings",
                vec![piece(0, "half", "whole\n"), piece(1, "b\n", "x\n")],
                "==> task 0 <==\nhalfwhole\n==> task 1 <==\nb\nx\n",
                (
                    "==> task 0 <==\nhalf\n==> task 1 <==\nb\n",
                    "==> task 0 <==\nwhole\n==> task 1 <==\nx\n",
                ),
            ),
            (
                "nothing written, no heading",
                vec![piece(2, "", "")],
                "",
                ("", ""),
            ),
        ];
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
        for (name, pieces, merged, (stdout, stderr)) in cases {
            let (mut one, mut two) = (TaskHeadings::default(), TaskHeadings::default());
            let (mut log, mut out, mut err) = (Vec::new(), Vec::new(), Vec::new());
            for (task, new) in &pieces {
                one.write_merged(&mut log, *task, new).unwrap();
                two.write_split(&mut out, &mut err, *task, new).unwrap();
            }
            assert_eq!(text(log), merged, "{name}: merged");
            assert_eq!(
                (text(out), text(err)),
                (stdout.into(), stderr.into()),
                "{name}: apart"
            );
        }
    }
}
