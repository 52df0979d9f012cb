//! [`JobId`], a backend's name for a job: in a module of its own because the trait
//! ([`backend`](crate::backend)) and the events it pushes ([`events`](crate::events)) both
//! speak it, and neither should import the other for it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A backend's own id for a job (`"4242"` in SLURM, `"17"` for an HTCondor cluster).
///
/// ```
/// use batchbridge_core::JobId;
/// let id = JobId::from("4242");
/// assert_eq!(id.as_str(), "4242");
/// assert_eq!(id.to_string(), "4242");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for JobId {
    fn from(id: String) -> Self {
        Self(id)
    }
}

impl From<&str> for JobId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
