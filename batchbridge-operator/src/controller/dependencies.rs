//! spec.after in the cluster: what the operator's cache shows of a job's dependencies and
//! of the circle it may wait in ([`Dependencies::of`]), and the index from a BatchJob to
//! the jobs whose spec.after names it ([`Dependents`]), through which a dependency's
//! change wakes its dependents at once. Every name is looked up in the job's own
//! namespace: spec.after never reaches another.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::crd::{BatchJob, Phase};
use crate::decision::dependencies::{Attempt, Dependency, Seen, cycle_through, waits};

/// What the cache shows of one job's dependencies.
#[derive(Debug, Default)]
pub struct Dependencies {
    names: Vec<String>,
    seen: Vec<Seen>,
    attempts: Vec<Option<OwnedAttempt>>,
    cycle: Option<Vec<String>>,
}

/// A dependency's current attempt, kept from the cache ([`Attempt`] borrows it).
#[derive(Debug)]
struct OwnedAttempt {
    cluster: String,
    job_id: String,
    last: bool,
}

impl Dependencies {
    /// What `jobs` shows of the BatchJobs `job`'s spec.after names, and the circle `job`
    /// waits in through them (looked for only while `job` itself waits: a job submitted
    /// or ended is in no circle that matters).
    pub fn of(job: &BatchJob, jobs: &Store<BatchJob>) -> Self {
        if job.spec.after.is_empty() {
            return Self::default();
        }
        let namespace = job.namespace().unwrap_or_default();
        let seen_as = |name: &str| seen(jobs, &namespace, name);
        let own = Seen::Present {
            phase: job
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .unwrap_or(Phase::Pending),
            reason: job.status.as_ref().and_then(|s| s.reason),
            deleting: false,
        };
        let name = job.name_any();
        let cycle = waits(own)
            .then(|| {
                cycle_through(&name, |other| {
                    let after = if other == name {
                        Some(job.spec.after.iter().map(|d| d.name.clone()).collect())
                    } else {
                        waits(seen_as(other))
                            .then(|| jobs.get(&ObjectRef::new(other).within(&namespace)))
                            .flatten()
                            .map(|other| other.spec.after.iter().map(|d| d.name.clone()).collect())
                    };
                    after.unwrap_or_default()
                })
            })
            .flatten();
        Self {
            names: job.spec.after.iter().map(|d| d.name.clone()).collect(),
            seen: job.spec.after.iter().map(|d| seen_as(&d.name)).collect(),
            attempts: job
                .spec
                .after
                .iter()
                .map(|d| attempt(jobs, &namespace, &d.name))
                .collect(),
            cycle,
        }
    }

    /// spec.after of `job` (the job [`of`](Self::of) was asked for) with what was seen of
    /// each entry.
    pub fn after<'a>(&'a self, job: &'a BatchJob) -> Vec<Dependency<'a>> {
        job.spec
            .after
            .iter()
            .zip(&self.names)
            .zip(&self.seen)
            .zip(&self.attempts)
            .map(|(((entry, name), seen), attempt)| Dependency {
                name: name.as_str(),
                condition: entry.condition,
                seen: *seen,
                attempt: attempt.as_ref().map(|a| Attempt {
                    cluster: &a.cluster,
                    job_id: &a.job_id,
                    last: a.last,
                }),
            })
            .collect()
    }

    /// The circle found, if any.
    pub fn cycle(&self) -> Option<&[String]> {
        self.cycle.as_deref()
    }
}

/// What `jobs` shows of BatchJob `name` in `namespace`.
fn seen(jobs: &Store<BatchJob>, namespace: &str, name: &str) -> Seen {
    match jobs.get(&ObjectRef::new(name).within(namespace)) {
        None => Seen::Missing,
        Some(job) => {
            let status = job.status.as_ref();
            Seen::Present {
                phase: status.and_then(|s| s.phase).unwrap_or(Phase::Pending),
                reason: status.and_then(|s| s.reason),
                deleting: job.metadata.deletion_timestamp.is_some(),
            }
        }
    }
}

/// What `jobs` shows of the current attempt of BatchJob `name` in `namespace`, if it has one
/// with a job id. It is the last when nothing runs the job again under another id: a
/// clusterRef (no placement, no move) and no retry left.
fn attempt(jobs: &Store<BatchJob>, namespace: &str, name: &str) -> Option<OwnedAttempt> {
    let job = jobs.get(&ObjectRef::new(name).within(namespace))?;
    let status = job.status.as_ref()?;
    let retries_left = job
        .spec
        .retry_policy
        .as_ref()
        .is_some_and(|policy| status.retries < policy.max_retries);
    Some(OwnedAttempt {
        cluster: status.cluster.clone()?,
        job_id: status.job_id.clone()?,
        last: job.spec.placement.is_none() && job.spec.fixed_cluster().is_some() && !retries_left,
    })
}

/// The jobs that name each BatchJob in their spec.after, kept from the BatchJob watch.
#[derive(Debug, Default)]
pub struct Dependents {
    index: Mutex<Index>,
}

#[derive(Debug, Default)]
struct Index {
    /// Per dependency, the jobs that name it.
    of: HashMap<ObjectRef<BatchJob>, HashSet<ObjectRef<BatchJob>>>,
    /// Per job, the dependencies it names.
    names: HashMap<ObjectRef<BatchJob>, Vec<ObjectRef<BatchJob>>>,
}

impl Index {
    fn set(&mut self, job: &BatchJob) {
        let reference = ObjectRef::from(job);
        self.remove(&reference);
        let namespace = job.namespace().unwrap_or_default();
        let named: Vec<_> = job
            .spec
            .after
            .iter()
            .map(|d| ObjectRef::new(&d.name).within(&namespace))
            .collect();
        if named.is_empty() {
            return;
        }
        for dependency in &named {
            self.of
                .entry(dependency.clone())
                .or_default()
                .insert(reference.clone());
        }
        self.names.insert(reference, named);
    }

    fn remove(&mut self, job: &ObjectRef<BatchJob>) {
        for dependency in self.names.remove(job).unwrap_or_default() {
            if let Some(dependents) = self.of.get_mut(&dependency) {
                dependents.remove(job);
                if dependents.is_empty() {
                    self.of.remove(&dependency);
                }
            }
        }
    }

    fn dependents(&self, job: &ObjectRef<BatchJob>) -> Vec<ObjectRef<BatchJob>> {
        self.of
            .get(job)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl Dependents {
    /// Takes in what the BatchJob watch saw and returns the jobs to wake: those that name
    /// the job that changed, appeared or went. A relist starts the index afresh.
    pub fn saw(&self, event: &watcher::Event<BatchJob>) -> Vec<ObjectRef<BatchJob>> {
        // Poisoned only if a panic happened while the lock was held; the index is still
        // whole then (every update is a few map operations).
        let mut index = self
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            watcher::Event::Init => {
                *index = Index::default();
                Vec::new()
            }
            watcher::Event::InitDone => Vec::new(),
            watcher::Event::Apply(job) | watcher::Event::InitApply(job) => {
                index.set(job);
                index.dependents(&ObjectRef::from(job))
            }
            watcher::Event::Delete(job) => {
                let reference = ObjectRef::from(job);
                index.remove(&reference);
                index.dependents(&reference)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AfterCondition, BatchJobSpec, BatchJobStatus, Dependency as After};
    use crate::reason::Reason;

    fn job(namespace: &str, name: &str, after: &[&str]) -> BatchJob {
        let spec = BatchJobSpec {
            after: after
                .iter()
                .map(|name| After {
                    name: (*name).to_owned(),
                    condition: AfterCondition::Succeeded,
                })
                .collect(),
            ..serde_json::from_str(r#"{"clusterRef": {"name": "hpc"}, "script": "true"}"#)
                .unwrap_or_else(|err| panic!("{err}"))
        };
        let mut job = BatchJob::new(name, spec);
        job.metadata.namespace = Some(namespace.to_owned());
        job
    }

    fn names(refs: &[ObjectRef<BatchJob>]) -> Vec<String> {
        let mut names: Vec<String> = refs.iter().map(|r| r.name.clone()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_change_wakes_the_jobs_that_name_it_in_its_namespace_only() {
        let dependents = Dependents::default();
        assert!(
            dependents
                .saw(&watcher::Event::Apply(job("a", "c", &["p"])))
                .is_empty()
        );
        dependents.saw(&watcher::Event::Apply(job("a", "d", &["p", "q"])));
        dependents.saw(&watcher::Event::Apply(job("b", "e", &["p"])));
        let woken = dependents.saw(&watcher::Event::Apply(job("a", "p", &[])));
        assert_eq!(names(&woken), ["c", "d"]);
        let woken = dependents.saw(&watcher::Event::Delete(job("b", "p", &[])));
        assert_eq!(names(&woken), ["e"]);
        // An edit that drops a dependency stops waking for it.
        dependents.saw(&watcher::Event::Apply(job("a", "d", &["q"])));
        assert_eq!(
            names(&dependents.saw(&watcher::Event::Apply(job("a", "p", &[])))),
            ["c"]
        );
        assert_eq!(
            names(&dependents.saw(&watcher::Event::Apply(job("a", "q", &[])))),
            ["d"]
        );
        // A deleted dependent is forgotten.
        dependents.saw(&watcher::Event::Delete(job("a", "c", &["p"])));
        assert!(
            dependents
                .saw(&watcher::Event::Apply(job("a", "p", &[])))
                .is_empty()
        );
        // A relist starts afresh, its jobs listed again.
        dependents.saw(&watcher::Event::Init);
        assert!(
            dependents
                .saw(&watcher::Event::Apply(job("a", "q", &[])))
                .is_empty()
        );
        dependents.saw(&watcher::Event::InitApply(job("a", "d", &["q"])));
        assert_eq!(
            names(&dependents.saw(&watcher::Event::Apply(job("a", "q", &[])))),
            ["d"]
        );
    }

    fn with_phase(mut job: BatchJob, phase: Phase) -> BatchJob {
        job.status = Some(BatchJobStatus {
            phase: Some(phase),
            ..BatchJobStatus::default()
        });
        job
    }

    /// What a job's dependencies look like comes from its own namespace only: a job of the
    /// same name elsewhere is not seen, and no circle closes through another namespace.
    #[test]
    fn dependencies_are_looked_up_in_the_jobs_namespace_only() {
        let (jobs, mut writer) = kube::runtime::reflector::store::<BatchJob>();
        let stored = [
            with_phase(job("other", "prepare", &[]), Phase::Succeeded),
            job("other", "analyse", &["simulate"]),
            job("mine", "simulate", &["analyse"]),
            job("mine", "waits", &["prepare"]),
        ];
        for stored in &stored {
            writer.apply_watcher_event(&watcher::Event::Apply(stored.clone()));
        }
        let waits = job("mine", "waits", &["prepare"]);
        let found = Dependencies::of(&waits, &jobs);
        assert_eq!(
            found.after(&waits),
            [Dependency {
                name: "prepare",
                condition: AfterCondition::Succeeded,
                seen: Seen::Missing,
                attempt: None,
            }]
        );
        let simulate = job("mine", "simulate", &["analyse"]);
        assert_eq!(Dependencies::of(&simulate, &jobs).cycle(), None);

        // In one namespace the same shape is a circle.
        writer.apply_watcher_event(&watcher::Event::Apply(job(
            "mine",
            "analyse",
            &["simulate"],
        )));
        let found = Dependencies::of(&simulate, &jobs);
        assert_eq!(
            found.cycle(),
            Some(
                [
                    "simulate".to_owned(),
                    "analyse".to_owned(),
                    "simulate".to_owned()
                ]
                .as_slice()
            )
        );
        // A job that ran already is in no circle that matters.
        let ran = with_phase(job("mine", "simulate", &["analyse"]), Phase::Running);
        assert_eq!(Dependencies::of(&ran, &jobs).cycle(), None);
        // One already failed for the circle still closes it for the others.
        let mut failed = with_phase(job("mine", "analyse", &["simulate"]), Phase::Failed);
        if let Some(status) = failed.status.as_mut() {
            status.reason = Some(Reason::DependencyCycle);
        }
        writer.apply_watcher_event(&watcher::Event::Apply(failed));
        assert!(Dependencies::of(&simulate, &jobs).cycle().is_some());
    }
}
