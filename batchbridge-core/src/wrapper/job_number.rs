//! [`job_number`]: what a job id must be to reach a path or a command line.

use std::collections::HashMap;

use crate::backend::JobId;
use crate::error::{Error, Result, excerpt};
use crate::state::JobStatus;

/// `text` if it is a job number: digits only, at most 20 of them. Anything else never
/// reaches a command line or a path.
///
/// ```
/// use batchbridge_core::wrapper::job_number;
///
/// assert_eq!(job_number("4242"), Some("4242"));
/// assert_eq!(job_number("../etc"), None);
/// assert_eq!(job_number(""), None);
/// ```
pub fn job_number(text: &str) -> Option<&str> {
    (!text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit()))
        .then_some(text)
}

/// `id`'s [`job_number`], or the [`InvalidInput`](crate::ErrorKind::InvalidInput) error every
/// backend gives for an id that cannot be one of its jobs (`what` names what it is not,
/// e.g. "a SLURM job id").
///
/// ```
/// use batchbridge_core::ErrorKind;
/// use batchbridge_core::wrapper::job_number_of;
///
/// assert_eq!(job_number_of("42", "a job id").unwrap(), "42");
/// let err = job_number_of("../42", "a SLURM job id").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert_eq!(err.message(), "\"../42\" is not a SLURM job id");
/// ```
pub fn job_number_of<'a>(id: &'a str, what: &str) -> Result<&'a str> {
    job_number(id).ok_or_else(|| Error::invalid_input(format!("{:?} is not {what}", excerpt(id))))
}

/// The job numbers among `ids`, sorted and without repeats, and an Unknown status for
/// every id that is not one (`what` says what it is not, e.g. "a SLURM job id").
///
/// ```
/// use batchbridge_core::{JobId, JobState};
/// use batchbridge_core::wrapper::job_numbers;
///
/// let ids = [JobId::from("12"), JobId::from("x;y"), JobId::from("3"), JobId::from("12")];
/// let (numbers, unknown) = job_numbers(&ids, "a job id");
/// assert_eq!(numbers, ["12", "3"]);
/// assert_eq!(unknown[&JobId::from("x;y")].state, JobState::Unknown);
/// ```
pub fn job_numbers<'a>(ids: &'a [JobId], what: &str) -> (Vec<&'a str>, HashMap<JobId, JobStatus>) {
    let mut numbers = Vec::with_capacity(ids.len());
    let mut unknown = HashMap::new();
    for id in ids {
        match job_number_of(id.as_str(), what) {
            Ok(number) => numbers.push(number),
            Err(err) => {
                unknown.insert(id.clone(), JobStatus::unknown(err.message()));
            }
        }
    }
    numbers.sort_unstable();
    numbers.dedup();
    (numbers, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_numbers_are_job_numbers() {
        for (id, ok) in [
            ("123", true),
            ("", false),
            ("123_1", false),
            ("12.0", false),
            ("../123", false),
            ("1;scancel -u me", false),
            ("123456789012345678901", false),
        ] {
            assert_eq!(job_number(id).is_some(), ok, "{id:?}");
        }
    }

    #[test]
    fn a_huge_id_is_quoted_only_in_part() {
        let huge = JobId::from(format!("1;{}", "x".repeat(1 << 20)));
        let (_, unknown) = job_numbers(std::slice::from_ref(&huge), "a job id");
        let reason = unknown[&huge].reason.clone().unwrap();
        assert!(
            reason.len() < 2 * crate::error::MAX_QUOTED,
            "{} bytes",
            reason.len()
        );
    }
}
