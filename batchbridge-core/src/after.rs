//! The portable path for dependencies: [`Tracker::submit_after`] holds a job on the
//! client until the jobs it runs after have ended as it requires, for backends whose
//! scheduler has no dependencies of its own (HTCondor, the local backend, a custom one).
//!
//! In a module of its own beside the tracker because it needs the spec (through the
//! backend) and the dependency rules, which the tracker itself does not.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use crate::cause::FailureCause;
use crate::dependency::{self, Dependency, Readiness};
use crate::error::Result;
use crate::job_id::JobId;
use crate::spec::JobSpec;
use crate::state::JobStatus;
use crate::tracker::Tracker;

/// What became of a job submitted through [`Tracker::submit_after`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Released {
    /// Submitted: the backend's id for it.
    Submitted(JobId),
    /// Never submitted: this dependency can no longer be met (its job ended as `status`
    /// says).
    DependencyFailed {
        /// The dependency that decided.
        dependency: Dependency,
        /// The terminal status of the job it names.
        status: Box<JobStatus>,
    },
}

impl Released {
    /// [`FailureCause::DependencyFailed`] naming the dependency's job, when it was never
    /// submitted; what a caller records as the dependent's end.
    pub fn cause(&self) -> Option<FailureCause> {
        match self {
            Self::Submitted(_) => None,
            Self::DependencyFailed { dependency, .. } => {
                Some(FailureCause::DependencyFailed(dependency.job.to_string()))
            }
        }
    }
}

impl Tracker {
    /// Submits `spec` to this tracker's backend once its [`after`](JobSpec::after) allows.
    ///
    /// A backend with native dependencies
    /// ([`Capabilities::dependencies`](crate::Capabilities::dependencies)), or a spec with
    /// none, is submitted at once: the scheduler holds it. Otherwise the jobs it runs after
    /// are followed (sharing this tracker's polls) until [`dependency::readiness`] decides:
    /// met, and the spec is submitted without its dependencies; never met (the first
    /// dependency whose job ended the wrong way), and nothing is submitted. The call
    /// returns only then, so the program holding the job must keep running; a job the
    /// backend does not know stays Unknown, which waits (bound it with
    /// `tokio::time::timeout`).
    ///
    /// Fails with the spec's validation error, a poll that failed permanently, or the
    /// submit's error.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::{BatchBackend, Dependency, FailureCause, JobKey, JobSpec, LocalBackend, Tracker};
    /// use batchbridge_core::after::Released;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
    /// let prepare = backend.submit(&JobSpec::new(JobKey::new("prepare")?, "prepare", "exit 3")).await?;
    ///
    /// let simulate = JobSpec::new(JobKey::new("simulate")?, "simulate", "true")
    ///     .with_after(Dependency::after_ok(prepare.clone()));
    /// let released = tracker.submit_after(&simulate).await?;
    /// assert!(matches!(released, Released::DependencyFailed { .. }));
    /// assert_eq!(released.cause(), Some(FailureCause::DependencyFailed(prepare.to_string())));
    ///
    /// let report = JobSpec::new(JobKey::new("report")?, "report", "true")
    ///     .with_after(Dependency::after_not_ok(prepare));
    /// assert!(matches!(tracker.submit_after(&report).await?, Released::Submitted(_)));
    /// # Ok(()) }
    /// ```
    pub async fn submit_after(&self, spec: &JobSpec) -> Result<Released> {
        spec.validate()?;
        let backend = self.backend();
        if spec.after.is_empty() {
            return backend.submit(spec).await.map(Released::Submitted);
        }
        if backend.capabilities().dependencies {
            return self.submit_native(spec).await;
        }
        let mut watches: Vec<_> = spec
            .after
            .iter()
            .map(|dependency| self.watch(dependency.job.clone()))
            .collect();
        let mut ended: Vec<Option<JobStatus>> = vec![None; spec.after.len()];
        loop {
            let states = spec
                .after
                .iter()
                .zip(&ended)
                .map(|(d, end)| (d, end.as_ref()));
            match decide(states) {
                Decision::Waiting => {}
                Decision::Met => break,
                Decision::NeverMet(released) => return Ok(released),
            }
            // The next status of any dependency still running; `Watch::next` is
            // cancel-safe, so a future dropped unready loses nothing.
            let (index, status) = std::future::poll_fn(|cx| {
                for (index, watch) in watches.iter_mut().enumerate() {
                    if ended[index].is_some() {
                        continue;
                    }
                    if let Poll::Ready(next) = pin!(watch.next()).poll(cx) {
                        return Poll::Ready(next.map(|status| (index, status)));
                    }
                }
                Poll::Pending
            })
            .await?;
            if status.state.is_terminal() {
                ended[index] = Some(status);
            }
        }
        drop(watches);
        let mut released = spec.clone();
        released.after.clear();
        backend.submit(&released).await.map(Released::Submitted)
    }

    /// The native path, after one look at the jobs waited for: one that already ended
    /// the wrong way decides here, and ones that ended the right way are left out of what
    /// the scheduler gets. A scheduler may count a job it has forgotten as met whatever
    /// its end (SLURM does once the job leaves its memory), or refuse its id (PBS).
    async fn submit_native(&self, spec: &JobSpec) -> Result<Released> {
        let backend = self.backend();
        let ids: Vec<JobId> = spec.after.iter().map(|d| d.job.clone()).collect();
        let seen = backend.status(&ids).await?;
        let ended = |d: &Dependency| seen.get(&d.job).filter(|s| s.state.is_terminal());
        let states = spec.after.iter().map(|d| (d, ended(d)));
        if let Decision::NeverMet(released) = decide(states) {
            return Ok(released);
        }
        let mut native = spec.clone();
        native.after.retain(|d| ended(d).is_none());
        backend.submit(&native).await.map(Released::Submitted)
    }
}

/// What the ends seen so far decide, by [`dependency::readiness`].
enum Decision {
    Waiting,
    Met,
    NeverMet(Released),
}

/// Decides on each dependency and the terminal status seen of its job, if any.
fn decide<'a>(
    ends: impl Iterator<Item = (&'a Dependency, Option<&'a JobStatus>)> + Clone,
) -> Decision {
    let states = ends.clone().map(|(d, status)| (d, status.map(|s| s.state)));
    match dependency::readiness(states) {
        (Readiness::Waiting, _) => Decision::Waiting,
        (Readiness::Met, _) => Decision::Met,
        (Readiness::NeverMet, failed) => {
            let (dependency, status) = ends
                .into_iter()
                .find(|(d, _)| Some(*d) == failed)
                .expect("readiness names the dependency that can never be met");
            Decision::NeverMet(Released::DependencyFailed {
                dependency: dependency.clone(),
                status: Box::new(status.cloned().expect("decided by an end")),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{BatchBackend, JobKey, JobState, LocalBackend};

    /// A chain of three on a backend without native dependencies: each link is submitted
    /// only once the one before it has succeeded.
    #[tokio::test]
    async fn a_chain_is_submitted_link_by_link() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let backend = Arc::new(LocalBackend::new(dir.path())?);
        assert!(!backend.capabilities().dependencies);
        let tracker = Tracker::new(backend.clone(), Duration::from_millis(50))?;
        let marks = dir.path().join("marks");
        let step = |n: u32| {
            JobSpec::new(
                JobKey::new(format!("step-{n}")).unwrap(),
                format!("step-{n}"),
                format!("sleep 0.3; echo {n} >> '{}'", marks.display()),
            )
        };
        let first = backend.submit(&step(1)).await?;
        let Released::Submitted(second) = tracker
            .submit_after(&step(2).with_after(Dependency::after_ok(first.clone())))
            .await?
        else {
            panic!("step 2 was not submitted")
        };
        assert_eq!(backend.status_of(&first).await?.state, JobState::Succeeded);
        let Released::Submitted(third) = tracker
            .submit_after(&step(3).with_after(Dependency::after_ok(second.clone())))
            .await?
        else {
            panic!("step 3 was not submitted")
        };
        assert_eq!(backend.status_of(&second).await?.state, JobState::Succeeded);
        tracker.wait(&third, Duration::from_secs(30)).await?;
        assert_eq!(std::fs::read_to_string(&marks)?, "1\n2\n3\n");
        Ok(())
    }

    /// The first dependency that can no longer be met decides at once, even while
    /// another is still running.
    #[tokio::test]
    async fn a_failed_dependency_ends_the_hold_while_others_run() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let backend = Arc::new(LocalBackend::new(dir.path())?);
        let tracker = Tracker::new(backend.clone(), Duration::from_millis(50))?;
        let job = |key: &str, script: &str| JobSpec::new(JobKey::new(key).unwrap(), key, script);
        let slow = backend.submit(&job("slow", "sleep 30")).await?;
        let failing = backend.submit(&job("failing", "exit 1")).await?;
        let dependent = job("dependent", "true")
            .with_after(Dependency::after_any(slow.clone()))
            .with_after(Dependency::after_ok(failing.clone()));
        let released =
            tokio::time::timeout(Duration::from_secs(20), tracker.submit_after(&dependent))
                .await
                .expect("decided before the slow job ended")?;
        let Released::DependencyFailed { dependency, status } = &released else {
            panic!("submitted: {released:?}")
        };
        assert_eq!(dependency, &Dependency::after_ok(failing.clone()));
        assert_eq!(status.state, JobState::Failed);
        assert_eq!(
            released.cause(),
            Some(FailureCause::DependencyFailed(failing.to_string()))
        );
        assert_eq!(backend.status_of(&slow).await?.state, JobState::Running);
        backend.cancel(&slow).await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_bad_dependency_is_refused_before_anything_runs() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let backend = Arc::new(LocalBackend::new(dir.path())?);
        let tracker = Tracker::new(backend.clone(), Duration::from_millis(50))?;
        let spec = JobSpec::new(JobKey::new("k")?, "n", "true")
            .with_after(Dependency::after_ok("1;reboot"));
        let err = tracker.submit_after(&spec).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(err.message().contains("after[0] \"1;reboot\""), "{err}");
        let direct = backend.submit(&spec).await.unwrap_err();
        assert_eq!(direct.kind(), crate::ErrorKind::InvalidInput, "{direct}");
        Ok(())
    }
}
