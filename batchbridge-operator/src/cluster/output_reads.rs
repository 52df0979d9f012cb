//! A cluster's output reads: the windows of output that the collections of many BatchJobs
//! ask for at once are read in one [`fetch_outputs`](BatchBackend::fetch_outputs) call.
//!
//! A job's end is written with its output, so the end waits for its read. In a burst of
//! 10,000 short jobs thousands end while the submits go on, and one remote command per
//! read, two at once, made them wait minutes for their status (docs/PERFORMANCE.md). A read
//! goes at once when one of [`OUTPUT_READS_AT_ONCE`] places is free; the reads that came
//! while every place was taken go together in the next call, up to [`READS_PER_CALL`]
//! windows and [`BYTES_PER_CALL`] bytes asked for. No delay is added to gather them: a read
//! that finds a place free goes alone.

use std::sync::Arc;

use batchbridge_core::{BatchBackend, Error, ErrorKind, JobId, JobOutput, OutputRequest};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::OUTPUT_READS_AT_ONCE;

/// The most windows read in one call.
pub const READS_PER_CALL: usize = 100;

/// The most bytes the windows of one call may ask for, both streams counted: what a call's
/// answers hold in memory at most (a window asking for more goes alone).
pub const BYTES_PER_CALL: u64 = 4 << 20;

/// The bytes `request` may answer, both streams counted.
fn asked(request: &OutputRequest) -> u64 {
    2 * request.max_len()
}

/// Whether a window asking for `next` bytes joins a call that holds `windows` windows
/// asking for `bytes`: the first always does.
fn joins(windows: usize, bytes: u64, next: u64) -> bool {
    windows == 0 || windows < READS_PER_CALL && bytes + next <= BYTES_PER_CALL
}

/// A read waiting for its call.
struct Read {
    id: JobId,
    request: OutputRequest,
    answer: oneshot::Sender<batchbridge_core::Result<JobOutput>>,
}

/// The output reads of one cluster: a task of its own, which stops once this is dropped
/// and every read in it has its answer.
#[derive(Debug)]
pub struct OutputReads {
    reads: mpsc::UnboundedSender<Read>,
}

impl OutputReads {
    /// Starts the reads of a cluster driven by `backend`.
    pub fn start(backend: Arc<dyn BatchBackend>) -> Self {
        let (reads, waiting) = mpsc::unbounded_channel();
        tokio::spawn(gather(waiting, backend));
        Self { reads }
    }

    /// Job `id`'s output as `request` asks, read in the next call.
    pub async fn fetch(
        &self,
        id: &JobId,
        request: &OutputRequest,
    ) -> batchbridge_core::Result<JobOutput> {
        let (answer, answered) = oneshot::channel();
        let read = Read {
            id: id.clone(),
            request: *request,
            answer,
        };
        let lost = || {
            Error::new(
                ErrorKind::Io,
                "the operator's output reads stopped without an answer",
            )
            .temporary()
        };
        if self.reads.send(read).is_err() {
            return Err(lost());
        }
        answered.await.unwrap_or_else(|_| Err(lost()))
    }
}

/// The task: takes the reads `reads` brings, as many together as wait and fit in a call,
/// once a place is free, until every sender is gone.
async fn gather(mut reads: mpsc::UnboundedReceiver<Read>, backend: Arc<dyn BatchBackend>) {
    let places = Arc::new(Semaphore::new(OUTPUT_READS_AT_ONCE));
    // A read that did not fit in the last call: the first of the next.
    let mut left = None;
    loop {
        let first = match left.take() {
            Some(read) => read,
            None => match reads.recv().await {
                Some(read) => read,
                None => return,
            },
        };
        // The semaphore is never closed, so a permit always comes.
        let Ok(place) = Arc::clone(&places).acquire_owned().await else {
            return;
        };
        let mut bytes = asked(&first.request);
        let mut call = vec![first];
        while let Ok(read) = reads.try_recv() {
            let next = asked(&read.request);
            if !joins(call.len(), bytes, next) {
                left = Some(read);
                break;
            }
            bytes += next;
            call.push(read);
        }
        let backend = Arc::clone(&backend);
        tokio::spawn(async move {
            read(call, &*backend).await;
            drop(place);
        });
    }
}

/// Reads `call` in one call of `backend`, but for the reads whose caller stopped waiting,
/// and answers each.
async fn read(call: Vec<Read>, backend: &dyn BatchBackend) {
    let (requests, answers): (Vec<_>, Vec<_>) = call
        .into_iter()
        .filter(|read| !read.answer.is_closed())
        .map(|read| ((read.id, read.request), read.answer))
        .unzip();
    if requests.is_empty() {
        return;
    }
    let mut outputs = backend.fetch_outputs(&requests).await.into_iter();
    for answer in answers {
        let output = outputs.next().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!(
                    "the {} backend answered fewer output reads than it was given",
                    backend.name()
                ),
            ))
        });
        let _ = answer.send(output);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use batchbridge_core::backend::MockBatchBackend;
    use batchbridge_core::{JobOutput, OutputChunk};

    use super::*;

    /// Reads that come together go in one call, and each caller gets its own job's
    /// answer, the failed one its own error. On one thread, the 40 reads are all waiting
    /// before the pipeline's task first runs.
    #[tokio::test(flavor = "current_thread")]
    async fn reads_that_wait_go_in_one_call_each_answered() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let mut backend = MockBatchBackend::new();
        let seen = Arc::clone(&calls);
        backend.expect_fetch_outputs().returning(move |requests| {
            seen.lock().unwrap().push(requests.len());
            requests
                .iter()
                .map(|(id, _)| match id.as_str() {
                    "13" => Err(Error::new(ErrorKind::NotFound, "no job 13")),
                    id => Ok(JobOutput::new(
                        OutputChunk::new(id.as_bytes().to_vec(), 0, id.len() as u64),
                        OutputChunk::default(),
                    )),
                })
                .collect()
        });
        let reads = Arc::new(OutputReads::start(Arc::new(backend)));
        let fetches: Vec<_> = (0..40)
            .map(|id| {
                let reads = Arc::clone(&reads);
                tokio::spawn(async move {
                    let id = JobId::from(id.to_string());
                    (
                        id.clone(),
                        reads.fetch(&id, &OutputRequest::tail(4096)).await,
                    )
                })
            })
            .collect();
        for fetch in fetches {
            let (id, output) = fetch.await.unwrap();
            match output {
                Ok(output) => assert_eq!(output.stdout.data, id.as_str().as_bytes()),
                Err(err) => assert_eq!((id.as_str(), err.kind()), ("13", ErrorKind::NotFound)),
            }
        }
        assert_eq!(*calls.lock().unwrap(), [40]);
    }

    #[test]
    fn reads_join_a_call_up_to_its_count_and_bytes() {
        const MIB: u64 = 1 << 20;
        let cases = [
            ("the first, however large", 0, 0, 64 * MIB, true),
            (
                "a small tail to a small call",
                10,
                80 * 1024,
                8 * 1024,
                true,
            ),
            ("up to the bytes", 3, 3 * MIB, MIB, true),
            ("past the bytes", 3, 3 * MIB, MIB + 1, false),
            ("a full call", READS_PER_CALL, 0, 0, false),
            ("one short of full", READS_PER_CALL - 1, 0, 8192, true),
        ];
        for (case, windows, bytes, next, expected) in cases {
            assert_eq!(joins(windows, bytes, next), expected, "{case}");
        }
    }

    #[test]
    fn a_window_asks_for_both_streams_at_most_a_chunk_each() {
        let chunk = batchbridge_core::backend::MAX_OUTPUT_CHUNK;
        let cases = [
            (OutputRequest::tail(4096), 8192),
            (OutputRequest::bytes(1 << 30, 10), 20),
            (OutputRequest::tail(u64::MAX), 2 * chunk),
        ];
        for (request, expected) in cases {
            assert_eq!(asked(&request), expected, "{request:?}");
        }
    }
}
