//! What every command-line backend's configuration holds: [`WorkSettings`] (where its jobs
//! live, how long a command may take) and, for a scheduler with queues and accounts,
//! [`SubmitDefaults`].

use std::time::Duration;

use crate::error::{Error, Result, excerpt};
use crate::spec::JobSpec;

/// Where a [`RemoteBackend`](super::RemoteBackend) keeps its jobs and how long one command
/// may take: what [`CliScheduler::configure`](super::CliScheduler::configure) takes from a
/// backend's configuration for [`JobDirs`](super::JobDirs). A backend's configuration
/// embeds it (as its field `work`) and gets its builders from [`work_settings_builders!`](crate::work_settings_builders).
///
/// ```
/// use std::time::Duration;
/// use batchbridge_core::remote::WorkSettings;
///
/// let work = WorkSettings::new(".batchbridge/mine");
/// assert_eq!(work.command_timeout, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkSettings {
    /// The work directory: absolute, or relative to the login directory. It must be on a
    /// file system the nodes that run jobs share with the login node.
    pub work_dir: String,
    /// The longest any one remote command may take.
    pub command_timeout: Duration,
}

impl WorkSettings {
    /// Jobs under `work_dir`, each command limited to a minute.
    pub fn new(work_dir: impl Into<String>) -> Self {
        Self {
            work_dir: work_dir.into(),
            command_timeout: Duration::from_secs(60),
        }
    }
}

/// `with_work_dir` and `with_command_timeout`, the builders of a backend configuration
/// `$config` whose field `work` is its [`WorkSettings`]: written once here for every
/// backend.
///
/// ```
/// use std::time::Duration;
/// use batchbridge_core::remote::WorkSettings;
///
/// #[derive(Debug)]
/// pub struct MyConfig {
///     pub work: WorkSettings,
/// }
/// batchbridge_core::work_settings_builders!(MyConfig);
///
/// let config = MyConfig { work: WorkSettings::new(".batchbridge/mine") }
///     .with_work_dir("/scratch/me")
///     .with_command_timeout(Duration::from_secs(5));
/// assert_eq!(config.work.work_dir, "/scratch/me");
/// ```
#[macro_export]
macro_rules! work_settings_builders {
    ($config:ty) => {
        impl $config {
            /// Sets the work directory ([`WorkSettings::work_dir`](
            /// $crate::remote::WorkSettings::work_dir)).
            pub fn with_work_dir(mut self, work_dir: impl Into<String>) -> Self {
                self.work.work_dir = work_dir.into();
                self
            }

            /// Sets the longest any one remote command may take ([`WorkSettings::command_timeout`](
            /// $crate::remote::WorkSettings::command_timeout)).
            pub fn with_command_timeout(mut self, timeout: ::std::time::Duration) -> Self {
                self.work.command_timeout = timeout;
                self
            }
        }
    };
}

/// Cluster-wide choices a spec does not make itself, for a scheduler with queues (SLURM's
/// partitions, PBS's queues) and accounts.
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_core::remote::SubmitDefaults;
///
/// let mut defaults = SubmitDefaults::default();
/// defaults.queue = Some("batch".into());
/// defaults.account = Some("lab".into());
/// defaults.validate("MyConfig")?;
/// let spec = JobSpec::new(JobKey::new("k")?, "n", "true");
/// assert_eq!(defaults.queue_for(&spec), Some("batch"));
/// assert_eq!(defaults.queue_for(&spec.clone().with_queue("gpu")), Some("gpu"));
///
/// defaults.account = Some("two words".into());
/// let err = defaults.validate("MyConfig").unwrap_err();
/// assert!(err.message().starts_with("MyConfig defaults.account \"two words\""));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubmitDefaults {
    /// The queue (SLURM's partition) for specs without one; the scheduler's default queue
    /// when `None`.
    pub queue: Option<String>,
    /// The account every job is charged to; the user's default (SLURM) or none (PBS) when
    /// `None`.
    pub account: Option<String>,
}

impl SubmitDefaults {
    /// The queue `spec` goes to: its own, else the default; `None` leaves the choice to
    /// the scheduler.
    pub fn queue_for<'a>(&'a self, spec: &'a JobSpec) -> Option<&'a str> {
        spec.queue.as_deref().or(self.queue.as_deref())
    }

    /// Refuses a queue or account that no scheduler names so: empty, holding whitespace or
    /// control characters, or starting with `-` (which a command line would read as an
    /// option). `config` names the configuration in the error.
    pub fn validate(&self, config: &str) -> Result<()> {
        for (what, value) in [("queue", &self.queue), ("account", &self.account)] {
            if let Some(value) = value
                && (value.is_empty()
                    || value.starts_with('-')
                    || value.contains(|c: char| c.is_whitespace() || c.is_control()))
            {
                return Err(Error::invalid_input(format!(
                    "{config} defaults.{what} {:?}: must be a non-empty name without \
                     whitespace or control characters, not starting with '-'",
                    excerpt(value)
                )));
            }
        }
        Ok(())
    }
}
