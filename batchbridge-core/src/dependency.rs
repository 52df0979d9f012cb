//! Dependencies between jobs: a job that may start only once others have ended in a given
//! way ([`JobSpec::after`](crate::JobSpec::after)).
//!
//! A backend whose scheduler holds dependent jobs itself says so with
//! [`Capabilities::dependencies`](crate::Capabilities::dependencies) and turns each
//! [`Dependency`] into its scheduler's words; its scheduler then ends a dependent whose
//! dependency can no longer be met, and the backend reports that as
//! [`FailureCause::DependencyFailed`](crate::FailureCause::DependencyFailed). Every other
//! backend gets the portable path, [`Tracker::submit_after`](crate::Tracker::submit_after):
//! the dependent is held on the client and submitted (without its dependencies) once
//! [`readiness`] says they are met. Both paths decide by the same [`Condition`]s, so a job
//! runs after the same ends on every backend.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, truncate};
use crate::job_id::JobId;
use crate::state::JobState;

/// The most dependencies one job may have: more than any workflow step needs, few enough
/// that a scheduler's option stays short.
pub const MAX_DEPENDENCIES: usize = 64;

/// The longest job id a dependency may name, in bytes.
pub const MAX_DEPENDENCY_ID_LEN: usize = 128;

/// One job another must wait for, and the end of it that lets the other start.
///
/// In text (the command line's `--after`), `ok:ID` is [`Condition::AfterOk`], `notok:ID`
/// [`Condition::AfterNotOk`], `any:ID` [`Condition::AfterAny`], and a bare `ID` means
/// `ok:ID`.
///
/// ```
/// use batchbridge_core::{JobId, JobKey, JobSpec};
/// use batchbridge_core::dependency::{Condition, Dependency};
///
/// let analyse = JobSpec::new(JobKey::new("analyse-1")?, "analyse", "./analyse")
///     .with_after(Dependency::after_ok("4242"))
///     .with_after("any:4243".parse()?);
/// assert_eq!(analyse.after[1], Dependency::new(JobId::from("4243"), Condition::AfterAny));
/// assert_eq!(analyse.after[0].to_string(), "ok:4242");
/// analyse.validate()?;
///
/// // What a spec without dependencies looked like before stays valid.
/// let old: JobSpec = serde_json::from_str(r#"{"key":"k","name":"n","script":"true"}"#).unwrap();
/// assert!(old.after.is_empty());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Dependency {
    /// The job waited for, as its backend names it ([`BatchBackend::submit`]'s answer);
    /// on the same backend as the dependent.
    ///
    /// [`BatchBackend::submit`]: crate::BatchBackend::submit
    pub job: JobId,
    /// Which end of it lets the dependent start.
    #[serde(default)]
    pub condition: Condition,
}

/// Which end of a job lets the jobs after it start.
///
/// Exhaustive on purpose: these three are what SLURM, PBS and the portable path share, and
/// a condition added later must be a compile error in every backend that maps them, not a
/// dependency silently dropped.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_core::dependency::{Condition, Readiness};
///
/// assert_eq!(Condition::AfterOk.readiness(JobState::Succeeded), Readiness::Met);
/// assert_eq!(Condition::AfterOk.readiness(JobState::Failed), Readiness::NeverMet);
/// assert_eq!(Condition::AfterNotOk.readiness(JobState::Cancelled), Readiness::Met);
/// assert_eq!(Condition::AfterAny.readiness(JobState::Running), Readiness::Waiting);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Condition {
    /// After the job succeeded (the default).
    #[default]
    AfterOk,
    /// After the job failed or was cancelled.
    AfterNotOk,
    /// After the job ended, however it ended.
    AfterAny,
}

/// Where a dependency, or a job's set of them, stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Not decided yet: the job waited for has not ended.
    Waiting,
    /// Met: the dependent may start.
    Met,
    /// Can no longer be met: the dependent must never start.
    NeverMet,
}

impl Condition {
    /// The words of this condition in text (`ok`, `notok`, `any`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AfterOk => "ok",
            Self::AfterNotOk => "notok",
            Self::AfterAny => "any",
        }
    }

    /// Where a dependency with this condition stands while the job waited for is in
    /// `state`. Unknown counts as not ended: a job the backend lost sight of for a
    /// moment must not release or end its dependents.
    pub const fn readiness(self, state: JobState) -> Readiness {
        match (self, state) {
            (_, JobState::Queued | JobState::Held | JobState::Running)
            | (_, JobState::Suspended | JobState::Unknown) => Readiness::Waiting,
            (Self::AfterAny, _)
            | (Self::AfterOk, JobState::Succeeded)
            | (Self::AfterNotOk, JobState::Failed | JobState::Cancelled) => Readiness::Met,
            (Self::AfterOk, JobState::Failed | JobState::Cancelled)
            | (Self::AfterNotOk, JobState::Succeeded) => Readiness::NeverMet,
        }
    }
}

impl Dependency {
    /// A dependency on `job` with `condition`.
    pub fn new(job: impl Into<JobId>, condition: Condition) -> Self {
        Self {
            job: job.into(),
            condition,
        }
    }

    /// Run after `job` succeeded.
    pub fn after_ok(job: impl Into<JobId>) -> Self {
        Self::new(job, Condition::AfterOk)
    }

    /// Run after `job` failed or was cancelled.
    pub fn after_not_ok(job: impl Into<JobId>) -> Self {
        Self::new(job, Condition::AfterNotOk)
    }

    /// Run after `job` ended, however.
    pub fn after_any(job: impl Into<JobId>) -> Self {
        Self::new(job, Condition::AfterAny)
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.condition, self.job)
    }
}

impl FromStr for Dependency {
    type Err = Error;

    /// Reads `ok:ID`, `notok:ID`, `any:ID` or a bare `ID` (meaning `ok:ID`), and checks the
    /// id as [`JobSpec::validate`](crate::JobSpec::validate) does.
    fn from_str(text: &str) -> Result<Self> {
        let (condition, job) = match text.split_once(':') {
            None => (Condition::AfterOk, text),
            Some(("ok", job)) => (Condition::AfterOk, job),
            Some(("notok", job)) => (Condition::AfterNotOk, job),
            Some(("any", job)) => (Condition::AfterAny, job),
            Some((other, _)) => {
                return Err(Error::invalid_input(format!(
                    "dependency {:?}: the condition {:?} is none of ok, notok and any \
                     (write ok:ID, notok:ID, any:ID or just ID)",
                    truncate_for_message(text),
                    truncate_for_message(other)
                )));
            }
        };
        let dependency = Self::new(job, condition);
        match id_problem(&dependency.job) {
            Some(problem) => Err(Error::invalid_input(format!(
                "dependency {:?}: {problem}",
                truncate_for_message(text)
            ))),
            None => Ok(dependency),
        }
    }
}

/// `dependencies` as one list of `WORD:JOB` terms joined by commas, the shape several
/// schedulers' dependency options share, each condition's `WORD` given by `word` in the
/// scheduler's own vocabulary (which stays in its backend).
///
/// ```
/// use batchbridge_core::dependency::{Condition, Dependency, term_list};
///
/// let after = [Dependency::after_ok("41"), Dependency::after_any("42")];
/// let word = |condition| match condition {
///     Condition::AfterOk => "done",
///     Condition::AfterNotOk => "broken",
///     Condition::AfterAny => "ended",
/// };
/// assert_eq!(term_list(&after, word), "done:41,ended:42");
/// ```
pub fn term_list(dependencies: &[Dependency], word: impl Fn(Condition) -> &'static str) -> String {
    dependencies
        .iter()
        .map(|dependency| format!("{}:{}", word(dependency.condition), dependency.job))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a job's dependencies stand together, given the latest state seen of each job
/// waited for (`None`: not seen yet). All must be met: the first that can no longer be met
/// decides, and is returned with [`Readiness::NeverMet`] so that the message can name it.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_core::dependency::{Dependency, Readiness, readiness};
///
/// let first = Dependency::after_ok("1");
/// let second = Dependency::after_any("2");
/// assert_eq!(
///     readiness([(&first, Some(JobState::Succeeded)), (&second, None)]),
///     (Readiness::Waiting, None)
/// );
/// assert_eq!(
///     readiness([(&first, Some(JobState::Succeeded)), (&second, Some(JobState::Failed))]),
///     (Readiness::Met, None)
/// );
/// assert_eq!(
///     readiness([(&first, Some(JobState::Failed)), (&second, None)]),
///     (Readiness::NeverMet, Some(&first))
/// );
/// ```
pub fn readiness<'a>(
    dependencies: impl IntoIterator<Item = (&'a Dependency, Option<JobState>)>,
) -> (Readiness, Option<&'a Dependency>) {
    let mut overall = Readiness::Met;
    for (dependency, state) in dependencies {
        match state.map_or(Readiness::Waiting, |s| dependency.condition.readiness(s)) {
            Readiness::NeverMet => return (Readiness::NeverMet, Some(dependency)),
            Readiness::Waiting => overall = Readiness::Waiting,
            Readiness::Met => {}
        }
    }
    (overall, None)
}

/// What is wrong with a dependency's job id, if anything: ids go into schedulers' options,
/// so only letters, digits, `.`, `_`, `-` and `[`, `]` (an array task) are allowed.
fn id_problem(job: &JobId) -> Option<String> {
    let id = job.as_str();
    let allowed =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'[' | b']');
    if id.is_empty() || id.len() > MAX_DEPENDENCY_ID_LEN || !id.bytes().all(allowed) {
        Some(format!(
            "the job id must be 1 to {MAX_DEPENDENCY_ID_LEN} characters of letters, digits, \
             '.', '_', '-', '[' and ']'"
        ))
    } else {
        None
    }
}

/// The problems of a spec's dependencies, for [`JobSpec::validate`](crate::JobSpec::validate).
pub(crate) fn problems(after: &[Dependency]) -> Vec<String> {
    let mut problems = Vec::new();
    if after.len() > MAX_DEPENDENCIES {
        problems.push(format!(
            "after: {} dependencies, more than the {MAX_DEPENDENCIES} a job may have",
            after.len()
        ));
    }
    for (i, dependency) in after.iter().enumerate() {
        if let Some(problem) = id_problem(&dependency.job) {
            problems.push(format!(
                "after[{i}] {:?}: {problem}",
                truncate_for_message(dependency.job.as_str())
            ));
        }
        if after[..i].iter().any(|d| d.job == dependency.job) {
            problems.push(format!(
                "after[{i}]: job {} is named twice (one job, one condition)",
                truncate_for_message(dependency.job.as_str())
            ));
        }
    }
    problems
}

/// The start of a long id or text, as [`spec::truncate_for_message`](crate::spec::truncate_for_message)
/// cuts it (that module imports this one, so not from there).
fn truncate_for_message(s: &str) -> &str {
    truncate(s, 40)
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    /// Every condition against every state: the one table both paths decide by.
    #[test]
    fn readiness_of_each_condition_in_each_state() {
        use Readiness::{Met, NeverMet, Waiting};
        #[rustfmt::skip]
        let table = [
            //               Queued   Held     Running  Suspended Succeeded Failed    Cancelled Unknown
            (Condition::AfterOk,    [Waiting, Waiting, Waiting, Waiting, Met,      NeverMet, NeverMet, Waiting]),
            (Condition::AfterNotOk, [Waiting, Waiting, Waiting, Waiting, NeverMet, Met,      Met,      Waiting]),
            (Condition::AfterAny,   [Waiting, Waiting, Waiting, Waiting, Met,      Met,      Met,      Waiting]),
        ];
        let states = [
            Queued, Held, Running, Suspended, Succeeded, Failed, Cancelled, Unknown,
        ];
        for (condition, expected) in table {
            for (state, want) in states.into_iter().zip(expected) {
                assert_eq!(condition.readiness(state), want, "{condition} in {state:?}");
            }
        }
    }

    #[test]
    fn text_forms_read_and_round_trip() {
        let table = [
            ("4242", Dependency::after_ok("4242")),
            ("ok:4242", Dependency::after_ok("4242")),
            ("notok:17", Dependency::after_not_ok("17")),
            (
                "any:123.pbs-server",
                Dependency::after_any("123.pbs-server"),
            ),
        ];
        for (text, want) in table {
            let read: Dependency = text.parse().unwrap();
            assert_eq!(read, want, "{text}");
            assert_eq!(read.to_string().parse::<Dependency>().unwrap(), want);
        }
    }

    #[test]
    fn bad_text_is_refused_naming_it() {
        let table = [
            (
                "after:1",
                "the condition \"after\" is none of ok, notok and any",
            ),
            ("ok:", "the job id must be 1 to"),
            ("", "the job id must be 1 to"),
            ("ok:1,2", "the job id must be"),
            ("ok:1:2", "the job id must be"),
            ("1;rm -rf", "the job id must be"),
            ("any:$(id)", "the job id must be"),
        ];
        for (text, want) in table {
            let err = text.parse::<Dependency>().unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{text}");
            assert!(err.message().contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn spec_problems_name_the_dependency() {
        let mut after = vec![Dependency::after_ok("1"), Dependency::after_any("1")];
        after.push(Dependency::after_ok("x y"));
        let problems = problems(&after);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("after[1]: job 1 is named twice"));
        assert!(problems[1].contains("after[2] \"x y\""));
        let many: Vec<_> = (0..=MAX_DEPENDENCIES)
            .map(|i| Dependency::after_ok(i.to_string().as_str()))
            .collect();
        assert!(self::problems(&many)[0].contains("65 dependencies"));
    }

    #[test]
    fn serde_names_are_camel_case_and_condition_defaults_to_ok() {
        let dependency = Dependency::after_not_ok("7");
        let json = serde_json::to_string(&dependency).unwrap();
        assert_eq!(json, r#"{"job":"7","condition":"afterNotOk"}"#);
        let bare: Dependency = serde_json::from_str(r#"{"job":"7"}"#).unwrap();
        assert_eq!(bare, Dependency::after_ok("7"));
    }
}
