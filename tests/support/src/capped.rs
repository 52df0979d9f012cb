//! The test bed's submit caps (tests/testbed/slurm.sh, slurm2.sh, pbs.sh, htcondor.sh make
//! them, seen only by jobs that ask for them) and a drain of many jobs through a
//! [`Tracker`] against one, sampling the scheduler's own count of the user's jobs meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::tracker::Submitted;
use batchbridge_core::{JobSpec, JobState, Tracker};

use crate::{Facts, Login, SlurmCluster, login};

/// A queue (partition) where the test user may have at most `limit` jobs in the scheduler.
#[derive(Debug, Clone)]
pub struct SubmitCap {
    /// The partition or queue to send jobs to.
    pub queue: String,
    /// How many of the user's jobs it takes at once.
    pub limit: usize,
}

impl SlurmCluster {
    /// The cluster's partition `capped`, whose partition QOS has MaxSubmitJobsPerUser.
    pub fn submit_cap(self) -> SubmitCap {
        cap(&self.facts(), "capped_partition", "capped_max_submit")
    }
}

/// The PBS server's queue `capped`, with `max_queued = [u:PBS_GENERIC=N]`.
pub fn pbs_submit_cap() -> SubmitCap {
    cap(
        &Facts::read("pbs/facts.json"),
        "capped_queue",
        "capped_max_queued",
    )
}

/// The HTCondor pool's login as the user `capped`, whose tools talk to the second schedd,
/// which takes at most the returned number of jobs per owner (MAX_JOBS_PER_OWNER).
pub fn htcondor_capped_login() -> (Login, usize) {
    let facts = Facts::read("htcondor/facts.json");
    let mut capped = login("htcondor");
    capped.user = facts.field("capped_user");
    (capped, limit(&facts, "capped_max_jobs"))
}

fn cap(facts: &Facts, queue: &str, max: &str) -> SubmitCap {
    SubmitCap {
        queue: facts.field(queue),
        limit: limit(facts, max),
    }
}

fn limit(facts: &Facts, name: &str) -> usize {
    let limit = facts.0[name].as_u64();
    usize::try_from(limit.unwrap_or_else(|| panic!("facts.json lacks {name}"))).unwrap()
}

/// What a drain saw.
#[derive(Debug)]
pub struct DrainReport {
    /// Jobs given to the tracker.
    pub jobs: usize,
    /// Of them, how many the tracker held at submit instead of submitting.
    pub held_at_submit: usize,
    /// How many ended Succeeded.
    pub succeeded: usize,
    /// The others, with their final status.
    pub not_succeeded: Vec<String>,
    /// The most jobs the scheduler's own count showed at once.
    pub most_in_scheduler: usize,
    /// How many times the scheduler answered a count.
    pub samples: usize,
    /// From the first submit to the last end.
    pub took: Duration,
}

impl DrainReport {
    /// Checks what a drain through a cap of `limit` must show: every job succeeded, the
    /// scheduler never counted more than `limit` at once, the cap was met (jobs were held
    /// at submit: not a drain that never reached it; with one submit after another, all
    /// but `limit`, while in a batch a job after a refused one gets in when room freed
    /// meanwhile), and the count was sampled throughout. Prints the report first.
    pub fn assert_drained_under(&self, limit: usize) {
        eprintln!("{self:?}");
        assert!(self.not_succeeded.is_empty(), "{:#?}", self.not_succeeded);
        assert_eq!(self.succeeded, self.jobs);
        assert!(
            self.most_in_scheduler <= limit,
            "the scheduler showed {} jobs at once, over the limit of {limit}",
            self.most_in_scheduler
        );
        assert!(self.held_at_submit > 0, "{self:?}");
        assert!(self.samples > 10, "{self:?}");
    }
}

/// How a drain gives its jobs to the tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submit {
    /// All in one [`Tracker::submit_many`].
    Batch,
    /// One [`Tracker::submit`] after another.
    OneByOne,
}

/// Submits `specs` through `tracker` in order (`how`), then waits for them all with one
/// [`Tracker::wait_each_submitted`], while a task counts the user's jobs in the scheduler
/// every half second with `count` (a command printing one line per job) through `shell`.
pub async fn drain(
    tracker: &Tracker,
    how: Submit,
    specs: Vec<JobSpec>,
    shell: Arc<dyn Shell>,
    count: Command,
    timeout: Duration,
) -> DrainReport {
    let most = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (most, samples, done) = (Arc::clone(&most), Arc::clone(&samples), Arc::clone(&done));
        async move {
            while !done.load(Ordering::SeqCst) {
                // A count the scheduler did not answer (busy with the drain) is no sample.
                if let Ok(output) = shell.run(&count).await
                    && output.success()
                {
                    let jobs = output.stdout_text().lines().count();
                    most.fetch_max(jobs, Ordering::SeqCst);
                    samples.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    });
    let started = Instant::now();
    let answers = match how {
        Submit::Batch => tracker.submit_many(specs.clone()).await,
        Submit::OneByOne => {
            let mut answers = Vec::new();
            for spec in &specs {
                answers.push(tracker.submit(spec.clone()).await);
            }
            answers
        }
    };
    let held_at_submit = answers
        .into_iter()
        .filter(|answer| matches!(answer.as_ref().unwrap(), Submitted::Held(_)))
        .count();
    let mut succeeded = 0;
    let mut not_succeeded = Vec::new();
    let mut ends = tracker.wait_each_submitted(specs.iter().map(|spec| spec.key.clone()), timeout);
    while let Some(end) = ends.next().await {
        let end = end.unwrap();
        if end.status.state == JobState::Succeeded {
            succeeded += 1;
        } else {
            let key = end.key.unwrap();
            not_succeeded.push(format!("{key} ({}): {:?}", end.id, end.status));
        }
    }
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    sampler.await.unwrap();
    DrainReport {
        jobs: specs.len(),
        held_at_submit,
        succeeded,
        not_succeeded,
        most_in_scheduler: most.load(Ordering::SeqCst),
        samples: samples.load(Ordering::SeqCst),
        took,
    }
}
