//! Feeding stdin and draining stdout/stderr of a child, bounded, shared by every transport.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One captured stream: at most `limit` bytes kept, the rest read and dropped so the child
/// never blocks on a full pipe.
pub(super) struct Captured {
    pub(super) data: Vec<u8>,
    pub(super) truncated: bool,
}

async fn capture(
    reader: Option<impl AsyncRead + Unpin>,
    limit: usize,
) -> std::io::Result<Captured> {
    let mut captured = Captured {
        data: Vec::new(),
        truncated: false,
    };
    let Some(mut reader) = reader else {
        return Ok(captured);
    };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Ok(captured);
        }
        let room = limit.saturating_sub(captured.data.len());
        captured.truncated |= n > room;
        captured.data.extend_from_slice(&chunk[..n.min(room)]);
    }
}

async fn feed(writer: Option<impl AsyncWrite + Unpin>, data: Option<&[u8]>) -> std::io::Result<()> {
    if let (Some(mut writer), Some(data)) = (writer, data) {
        match writer.write_all(data).await.and(writer.shutdown().await) {
            // A program may exit without reading all its input; that is its business.
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other?,
        }
    }
    Ok(())
}

/// Writes stdin while reading both outputs, so no pipe can fill up and deadlock.
pub(super) async fn exchange(
    stdin: Option<impl AsyncWrite + Unpin>,
    data: Option<&[u8]>,
    stdout: Option<impl AsyncRead + Unpin>,
    stderr: Option<impl AsyncRead + Unpin>,
    limit: usize,
) -> std::io::Result<(Captured, Captured)> {
    let (fed, out, err) = tokio::join!(
        feed(stdin, data),
        capture(stdout, limit),
        capture(stderr, limit)
    );
    fed?;
    Ok((out?, err?))
}

/// The buffer each direction of a [`Shell::pipe`](super::Shell::pipe) copies through: large
/// enough that a fast link is not held back by small reads, small enough to cost nothing.
const PIPE_BUFFER: usize = 256 * 1024;

async fn pump(
    from: Option<impl AsyncRead + Unpin>,
    to: Option<impl AsyncWrite + Unpin>,
) -> std::io::Result<()> {
    let (Some(from), Some(mut to)) = (from, to) else {
        return Ok(());
    };
    let mut from = tokio::io::BufReader::with_capacity(PIPE_BUFFER, from);
    match tokio::io::copy_buf(&mut from, &mut to)
        .await
        .and(to.shutdown().await)
    {
        // A program may exit without reading all its input; its exit status says why.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map(drop),
    }
}

/// [`exchange`] for [`Shell::pipe`](super::Shell::pipe): streams `input` into the child's
/// stdin and its stdout into `output`, capturing only stderr (at most `limit` bytes).
pub(super) async fn exchange_streams(
    stdin: Option<impl AsyncWrite + Unpin>,
    input: Option<super::PipeInput>,
    stdout: Option<impl AsyncRead + Unpin>,
    output: Option<super::PipeOutput>,
    stderr: Option<impl AsyncRead + Unpin>,
    limit: usize,
) -> std::io::Result<Captured> {
    let (fed, drained, err) = tokio::join!(
        pump(input, stdin),
        pump(stdout, output),
        capture(stderr, limit)
    );
    fed?;
    drained?;
    err
}
