//! When a job would start: [`StartEstimate`], what a backend answers to
//! [`BatchBackend::estimate_start`](crate::BatchBackend::estimate_start) for a spec it has
//! not been given yet.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
//!
//! let now = SystemTime::now();
//! let soon = StartEstimate::new(EstimatedStart::At(now + Duration::from_secs(60)));
//! assert!(StartEstimate::new(EstimatedStart::Now).starts_before(&soon, now));
//! ```

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind};
use crate::spec::JobKey;

/// When a job would start, as far as the scheduler can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum EstimatedStart {
    /// Resources that match are free: it would start at once.
    Now,
    /// The scheduler expects it to start then.
    At(#[serde(with = "humantime_serde")] SystemTime),
    /// It would wait, and the scheduler gives no time.
    Later,
}

/// A backend's answer to "when and where would this spec start".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StartEstimate {
    /// When.
    pub start: EstimatedStart,
    /// The partition or queue it would run in, when the scheduler says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The nodes it would run on, when the scheduler says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    /// What the scheduler said, in its words, for people (`3 idle slots match`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl StartEstimate {
    /// An estimate of `start` with nothing else known.
    pub fn new(start: EstimatedStart) -> Self {
        Self {
            start,
            queue: None,
            nodes: None,
            detail: None,
        }
    }

    /// The time it would start, taking `Now` as `now`; `None` for [`EstimatedStart::Later`].
    pub fn start_time(&self, now: SystemTime) -> Option<SystemTime> {
        match self.start {
            EstimatedStart::Now => Some(now),
            EstimatedStart::At(at) => Some(at.max(now)),
            EstimatedStart::Later => None,
        }
    }

    /// Whether this estimate promises an earlier start than `other` (a known time beats
    /// [`Later`](EstimatedStart::Later)).
    pub fn starts_before(&self, other: &StartEstimate, now: SystemTime) -> bool {
        match (self.start_time(now), other.start_time(now)) {
            (Some(mine), Some(theirs)) => mine < theirs,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// The error of a backend that cannot estimate starts: [`Unsupported`](ErrorKind::Unsupported),
/// which placement reads as "answered, without an estimate"
/// ([`Answer::NoEstimate`](crate::placement::Answer::NoEstimate)).
///
/// ```
/// use batchbridge_core::{ErrorKind, JobKey};
/// use batchbridge_core::estimate::cannot_estimate;
///
/// let err = cannot_estimate("pbs", &JobKey::new("k")?);
/// assert_eq!(err.kind(), ErrorKind::Unsupported);
/// assert_eq!(err.message(), "the pbs backend cannot estimate when job k would start");
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn cannot_estimate(backend: &str, key: &JobKey) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the {backend} backend cannot estimate when job {key} would start"),
    )
}

/// What a backend's estimate answers when a submit would refuse the spec (`refusal`): the
/// same error, except that [`Unsupported`](ErrorKind::Unsupported) (a capability the backend
/// lacks, such as containers or a queue) becomes [`InvalidInput`](ErrorKind::InvalidInput)
/// with the same message. An estimate's Unsupported means "this backend cannot estimate"
/// ([`cannot_estimate`]); a spec the backend cannot run must count the backend out of
/// placement instead ([`Skipped::Unsuitable`](crate::placement::Skipped::Unsuitable)).
///
/// ```
/// use batchbridge_core::{Error, ErrorKind};
/// use batchbridge_core::estimate::refused_by_submit;
///
/// let lacking = Error::new(ErrorKind::Unsupported, "the local backend does not support containers");
/// let err = refused_by_submit(lacking);
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert_eq!(err.message(), "the local backend does not support containers");
/// assert_eq!(refused_by_submit(Error::invalid_input("bad")).kind(), ErrorKind::InvalidInput);
/// ```
pub fn refused_by_submit(refusal: Error) -> Error {
    match refusal.kind() {
        ErrorKind::Unsupported => Error::new(ErrorKind::InvalidInput, refusal.message()),
        _ => refusal,
    }
}
