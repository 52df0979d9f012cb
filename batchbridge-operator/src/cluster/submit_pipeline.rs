//! A cluster's submit pipeline: the BatchJobs waiting to be submitted on one cluster are
//! gathered into batches, each handed to the backend as one
//! [`submit_many`](BatchBackend::submit_many), and each job gets its own answer.
//!
//! A burst of thousands of new BatchJobs was one remote command per job, five at once;
//! a backend that submits several jobs per command needs them together. The first job
//! waiting opens a batch; it goes once [`Batching::size`] jobs joined it or
//! [`Batching::delay`] passed, whichever comes first, as soon as one of
//! [`Batching::in_flight`] places is free (jobs that came meanwhile join it). When to cut
//! a batch is [`Batching::next`], a pure function with a test table; the task around it
//! only waits for what it says.
//!
//! Restart safety is the backend's: each job is submitted under its key, and a batch cut
//! short by a crash resubmits nothing that already got an id when its jobs come again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use batchbridge_core::{BatchBackend, Error, ErrorKind, JobId, JobSpec};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use crate::crd::SubmitSettings;
use crate::decision::SubmitGate;

/// What a submit through the pipeline came to: the backend's answer, or, the scheduler not
/// asked, the message of the submit limit that held the job ([`SubmitGate::holds`]).
pub type Submitted = Result<batchbridge_core::Result<JobId>, String>;

/// How one cluster's jobs are gathered into batches (its BatchCluster's `spec.submit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// The most jobs in one batch.
    pub size: usize,
    /// How long the first waiting job waits for others to join its batch.
    pub delay: Duration,
    /// How many batches are submitted at once.
    pub in_flight: usize,
}

/// What the pipeline does next with the jobs waiting in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing waits: wait for a job.
    Idle,
    /// Send a batch, once a place in flight is free.
    Send,
    /// Wait this long for more jobs (or until one comes).
    Gather(Duration),
}

impl Batching {
    /// `spec.submit.batchSize` when absent.
    pub const DEFAULT_SIZE: u32 = 200;
    /// `spec.submit.batchSize`'s largest value.
    pub const MAX_SIZE: u32 = 1000;
    /// `spec.submit.batchDelay` when absent.
    pub const DEFAULT_DELAY: Duration = Duration::from_millis(100);
    /// `spec.submit.batchDelay`'s largest value.
    pub const MAX_DELAY: Duration = Duration::from_secs(1);
    /// `spec.submit.concurrency` when absent.
    pub const DEFAULT_IN_FLIGHT: u32 = 4;

    /// The batching `settings` ask for, each absent one at its default. A value out of
    /// bounds (stored before the CRD refused it) is held to them, as the CRD would have.
    ///
    /// ```
    /// use std::time::Duration;
    /// use batchbridge_operator::cluster::submit_pipeline::Batching;
    /// use batchbridge_operator::crd::SubmitSettings;
    ///
    /// let batching = Batching::of(None);
    /// assert_eq!((batching.size, batching.delay, batching.in_flight), (200, Duration::from_millis(100), 4));
    /// let settings = SubmitSettings { batch_size: Some(1_000_000_000), ..SubmitSettings::default() };
    /// assert_eq!(Batching::of(Some(&settings)).size, 1000);
    /// ```
    pub fn of(settings: Option<&SubmitSettings>) -> Self {
        let settings = settings.cloned().unwrap_or_default();
        let size = settings
            .batch_size
            .unwrap_or(Self::DEFAULT_SIZE)
            .clamp(1, Self::MAX_SIZE);
        let in_flight = settings
            .concurrency
            .unwrap_or(Self::DEFAULT_IN_FLIGHT)
            .clamp(1, super::SUBMITS_AT_ONCE as u32);
        Self {
            size: size as usize,
            delay: settings
                .batch_delay
                .map_or(Self::DEFAULT_DELAY, Duration::from)
                .min(Self::MAX_DELAY),
            in_flight: in_flight as usize,
        }
    }

    /// What to do with `waiting` jobs, the first of which has waited `waited`: a full
    /// batch, or one whose first job waited out the delay, goes; else the pipeline gathers
    /// until the delay is over.
    pub fn next(&self, waiting: usize, waited: Duration) -> Next {
        if waiting == 0 {
            Next::Idle
        } else if waiting >= self.size || waited >= self.delay {
            Next::Send
        } else {
            Next::Gather(self.delay - waited)
        }
    }
}

/// A job waiting in the pipeline.
struct Request {
    spec: JobSpec,
    /// The BatchJob's uid, as its [`SubmitGate`] knows it.
    uid: String,
    since: Instant,
    answer: oneshot::Sender<Submitted>,
}

/// The submit pipeline of one cluster: a task of its own, which stops once the pipeline is
/// dropped and every job in it has its answer.
#[derive(Debug)]
pub struct SubmitPipeline {
    requests: mpsc::UnboundedSender<Request>,
}

impl SubmitPipeline {
    /// Starts the pipeline of a cluster driven by `backend`, whose submit limit `gate`
    /// keeps, batching its jobs as `batching` says.
    pub fn start(
        backend: Arc<dyn BatchBackend>,
        gate: Arc<Mutex<SubmitGate>>,
        batching: Batching,
    ) -> Self {
        let (requests, waiting) = mpsc::unbounded_channel();
        tokio::spawn(gather(waiting, backend, gate, batching));
        Self { requests }
    }

    /// Submits `spec`, of the BatchJob whose uid is `uid`, in the next batch; `Err(message)`,
    /// the scheduler not asked, when its submit limit became known meanwhile and this job's
    /// submit is not the probe of it ([`SubmitGate::holds`]), as the batch is sent.
    pub async fn submit(&self, spec: JobSpec, uid: String) -> Submitted {
        let (answer, answered) = oneshot::channel();
        let request = Request {
            spec,
            uid,
            since: Instant::now(),
            answer,
        };
        // Either the pipeline's task ended (it panicked) before the job was sent, or after,
        // without an answer: the job may have been submitted.
        let lost = || {
            Ok(Err(Error::new(
                ErrorKind::SubmitOutcomeUnknown,
                "the operator's submit pipeline stopped without an answer",
            )))
        };
        if self.requests.send(request).is_err() {
            return lost();
        }
        answered.await.unwrap_or_else(|_| lost())
    }
}

/// The pipeline's task: gathers the jobs `requests` brings and sends them in batches, as
/// [`Batching::next`] says, until the pipeline is dropped.
async fn gather(
    mut requests: mpsc::UnboundedReceiver<Request>,
    backend: Arc<dyn BatchBackend>,
    gate: Arc<Mutex<SubmitGate>>,
    batching: Batching,
) {
    let places = Arc::new(Semaphore::new(batching.in_flight));
    let mut waiting = VecDeque::new();
    loop {
        while let Ok(request) = requests.try_recv() {
            waiting.push_back(request);
        }
        let waited = waiting
            .front()
            .map_or(Duration::ZERO, |first: &Request| first.since.elapsed());
        match batching.next(waiting.len(), waited) {
            Next::Idle => match requests.recv().await {
                Some(request) => waiting.push_back(request),
                None => return,
            },
            Next::Gather(wait) => {
                tokio::select! {
                    request = requests.recv() => match request {
                        Some(request) => waiting.push_back(request),
                        // Every sender is gone, so is every caller: nobody awaits an answer.
                        None => return,
                    },
                    () = tokio::time::sleep(wait) => {}
                }
            }
            Next::Send => {
                // The semaphore is never closed, so a permit always comes.
                let Ok(place) = Arc::clone(&places).acquire_owned().await else {
                    return;
                };
                // Jobs that came while the batch waited for its place join it.
                while let Ok(request) = requests.try_recv() {
                    waiting.push_back(request);
                }
                let batch: Vec<Request> =
                    waiting.drain(..batching.size.min(waiting.len())).collect();
                let (backend, gate) = (Arc::clone(&backend), Arc::clone(&gate));
                tokio::spawn(async move {
                    send(batch, &*backend, &gate).await;
                    drop(place);
                });
            }
        }
    }
}

/// Submits `batch` in one call of `backend`, but for the jobs `gate` holds and those whose
/// caller stopped waiting (its action was aborted: the next reconcile submits it again,
/// under the same key), and answers each job.
async fn send(batch: Vec<Request>, backend: &dyn BatchBackend, gate: &Mutex<SubmitGate>) {
    let mut specs = Vec::with_capacity(batch.len());
    let mut answers = Vec::with_capacity(batch.len());
    for request in batch {
        if request.answer.is_closed() {
            continue;
        }
        let held = gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .holds(&request.uid)
            .map(|limit| format!("not submitted while the cluster's submit limit holds: {limit}"));
        match held {
            Some(message) => {
                let _ = request.answer.send(Err(message));
            }
            None => {
                specs.push(request.spec);
                answers.push(request.answer);
            }
        }
    }
    if specs.is_empty() {
        return;
    }
    let mut submitted = backend.submit_many(&specs).await.into_iter();
    for answer in answers {
        // A backend that answered fewer jobs than it was given broke its contract: the
        // jobs it left out may have been submitted.
        let result = submitted.next().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::SubmitOutcomeUnknown,
                format!(
                    "the {} backend answered fewer jobs than its batch held",
                    backend.name()
                ),
            ))
        });
        // A caller that stopped waiting meanwhile submits again under the same key.
        let _ = answer.send(Ok(result));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_goes_when_full_or_when_its_first_job_waited_out_the_delay() {
        let batching = Batching {
            size: 200,
            delay: Duration::from_millis(100),
            in_flight: 4,
        };
        let ms = Duration::from_millis;
        let cases = [
            ("nothing waits", 0, ms(0), Next::Idle),
            ("nothing waits, long after", 0, ms(500), Next::Idle),
            ("one job, just come", 1, ms(0), Next::Gather(ms(100))),
            ("one job, 40 ms in", 1, ms(40), Next::Gather(ms(60))),
            ("one job, delay over", 1, ms(100), Next::Send),
            ("one job, long over", 1, ms(900), Next::Send),
            ("199 jobs, 99 ms in", 199, ms(99), Next::Gather(ms(1))),
            ("a full batch, just come", 200, ms(0), Next::Send),
            ("more than a batch", 1000, ms(0), Next::Send),
        ];
        for (case, waiting, waited, expected) in cases {
            assert_eq!(batching.next(waiting, waited), expected, "{case}");
        }
        let at_once = Batching {
            delay: Duration::ZERO,
            ..batching
        };
        assert_eq!(at_once.next(1, ms(0)), Next::Send, "no delay");
        let one_by_one = Batching {
            size: 1,
            ..batching
        };
        assert_eq!(one_by_one.next(1, ms(0)), Next::Send, "batches of one");
    }

    #[test]
    fn settings_take_their_defaults_and_are_held_to_their_bounds() {
        let ms = Duration::from_millis;
        let settings = |size, delay: Option<Duration>, in_flight| SubmitSettings {
            batch_size: size,
            batch_delay: delay.map(Into::into),
            concurrency: in_flight,
        };
        let cases = [
            ("absent", None, (200, ms(100), 4)),
            (
                "every field absent",
                Some(settings(None, None, None)),
                (200, ms(100), 4),
            ),
            (
                "chosen",
                Some(settings(Some(50), Some(ms(20)), Some(2))),
                (50, ms(20), 2),
            ),
            (
                "no delay, one at a time",
                Some(settings(Some(1), Some(ms(0)), Some(1))),
                (1, ms(0), 1),
            ),
            (
                "too large",
                Some(settings(
                    Some(1_000_000_000),
                    Some(Duration::from_secs(3600)),
                    Some(1_000_000_000),
                )),
                (1000, ms(1000), 5),
            ),
            (
                "zero",
                Some(settings(Some(0), None, Some(0))),
                (1, ms(100), 1),
            ),
        ];
        for (case, settings, (size, delay, in_flight)) in cases {
            assert_eq!(
                Batching::of(settings.as_ref()),
                Batching {
                    size,
                    delay,
                    in_flight
                },
                "{case}"
            );
        }
    }
}
