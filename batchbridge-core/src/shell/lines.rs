//! Handing a long-lived command's stdout over line by line, bounded, shared by every
//! transport's [`Shell::stream`](super::Shell::stream).

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

use super::{LineStream, MAX_STREAM_LINE};
use crate::error::{Error, ErrorKind};

/// How many lines a [`LineStream`] holds before the command's output waits in its pipe.
const LINE_BUFFER: usize = 256;

/// Starts a task that sends the lines `reader` yields (cut to [`MAX_STREAM_LINE`] bytes,
/// invalid UTF-8 replaced) until it ends, the receiver goes away, or reading fails (sent
/// as a last `Err` of kind ConnectionLost naming `what`). `process` lives as long as the
/// task: dropping it is what stops the command.
pub(super) fn stream_lines<R, P>(reader: R, process: P, what: String) -> LineStream
where
    R: AsyncRead + Unpin + Send + 'static,
    P: Send + 'static,
{
    let (tx, rx) = mpsc::channel(LINE_BUFFER);
    tokio::spawn(async move {
        let _process = process;
        let mut reader = BufReader::new(reader);
        let mut line = Vec::new();
        loop {
            let read = tokio::select! {
                read = next_line(&mut reader, &mut line) => read,
                () = tx.closed() => return,
            };
            let item = match read {
                Ok(false) => return,
                Ok(true) => Ok(String::from_utf8_lossy(&line).into_owned()),
                Err(err) => Err(Error::new(
                    ErrorKind::ConnectionLost,
                    format!("reading the output of {what} failed: {err}"),
                )
                .with_source(err)),
            };
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    });
    rx
}

/// Reads the next line into `line` (without its end), keeping at most [`MAX_STREAM_LINE`]
/// bytes of it and dropping the rest; `false` at the end of the stream with nothing read.
async fn next_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    line.clear();
    let mut read_any = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let (part, end) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], Some(at + 1)),
            None => (buffer, None),
        };
        let room = MAX_STREAM_LINE.saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        let consumed = end.unwrap_or(buffer.len());
        reader.consume(consumed);
        if end.is_some() {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(input: &[u8]) -> Vec<String> {
        let mut rx = stream_lines(std::io::Cursor::new(input.to_vec()), (), "test".into());
        let mut lines = Vec::new();
        while let Some(line) = rx.recv().await {
            lines.push(line.unwrap());
        }
        lines
    }

    #[tokio::test]
    async fn lines_arrive_whole_cut_and_without_ends() {
        let long = vec![b'x'; MAX_STREAM_LINE * 3 + 5];
        let mut flood = long.clone();
        flood.extend_from_slice(b"\nafter\n");
        #[rustfmt::skip]
        let cases: Vec<(&str, Vec<u8>, Vec<String>)> = vec![
            ("two lines", b"a\nb\n".to_vec(), vec!["a".into(), "b".into()]),
            ("a last line without its end", b"a\nb".to_vec(), vec!["a".into(), "b".into()]),
            ("empty lines stay", b"\n\n".to_vec(), vec![String::new(), String::new()]),
            ("nothing", Vec::new(), vec![]),
            ("invalid UTF-8 replaced", b"\xff\n".to_vec(), vec!["\u{fffd}".into()]),
            ("a line without end is cut, the next one whole", flood, vec!["x".repeat(MAX_STREAM_LINE), "after".into()]),
        ];
        for (name, input, expected) in cases {
            assert_eq!(lines_of(&input).await, expected, "{name}");
        }
    }
}
