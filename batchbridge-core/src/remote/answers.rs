//! The answers of one call for many items (jobs, output windows), gathered by index as the
//! commands that carry them come back, some answered before any command ran.

use crate::error::{Error, ErrorKind, Result};

/// Room for one answer per item, none yet.
pub(super) fn unanswered<T>(items: usize) -> Vec<Option<Result<T>>> {
    (0..items).map(|_| None).collect()
}

/// The same error for each of `items` items: the call failed as a whole.
pub(super) fn each_failed<T>(items: usize, err: &Error) -> Vec<Result<T>> {
    (0..items).map(|_| Err(err.again())).collect()
}

/// Each item's answer, an item left without one an
/// [`UnexpectedOutput`](ErrorKind::UnexpectedOutput) error: `what` was left out of its
/// command (a defect, not something a scheduler does).
pub(super) fn each_answered<T>(answers: Vec<Option<Result<T>>>, what: &str) -> Vec<Result<T>> {
    answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(Error::new(
                    ErrorKind::UnexpectedOutput,
                    format!("{what} was left out of its command"),
                ))
            })
        })
        .collect()
}
