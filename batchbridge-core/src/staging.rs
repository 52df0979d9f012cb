//! Data in and out of a job: what a [`JobSpec`](crate::JobSpec) sends to the cluster before
//! its submit ([`StageIn`]) and fetches back after its end ([`StageOut`]), the caps on both
//! ([`StageLimits`]), and how a transfer reports its progress ([`Transfer`]).
//!
//! Every path on the cluster side is relative to the job's working directory: the spec's
//! `workingDir`, or, when it has none, the key's staging directory `WORK/staged/KEY`, which
//! a backend built on [`remote`](crate::remote) then makes the job's working directory.
//! Paths that leave it (`..`, absolute paths, symlinks pointing outside) are refused, on this
//! side by [`JobSpec::validate`](crate::JobSpec::validate) and on the cluster by the remote
//! command, which resolves each path with `realpath` before it reads or writes.
//!
//! - **Stage-in** happens inside [`BatchBackend::submit`](crate::BatchBackend::submit) (or
//!   [`submit_with`](crate::BatchBackend::submit_with) for progress), before the scheduler
//!   is asked: each file streams over the backend's own shell (the SSH master it already
//!   holds) to a temporary name, its size and SHA-256 are checked on the cluster, and only
//!   then is it renamed into place. A file already there with the same digest is not sent
//!   again. The job is submitted only when every input arrived whole.
//! - **Stage-out** is [`BatchBackend::stage_out`](crate::BatchBackend::stage_out), after the
//!   job ended: each entry whose [`StageWhen`] matches the job's end is listed on the
//!   cluster, each file streams to a temporary name in the local directory, its digest is
//!   checked, and it is renamed to its final name. Running it again starts the interrupted
//!   files over and skips none that are missing.
//!   [`Tracker::stage_out_when_ended`](crate::Tracker::stage_out_when_ended) runs it for a
//!   job the tracker follows.
//!
//! ```
//! use batchbridge_core::{JobKey, JobSpec};
//! use batchbridge_core::staging::{StageIn, StageLimits, StageOut, StageWhen};
//! use bytesize::ByteSize;
//!
//! let spec = JobSpec::new(JobKey::new("analyse-1")?, "analyse", "./analyse.sh data.csv")
//!     .with_stage_in(StageIn::path("/home/me/data.csv", "data.csv"))
//!     .with_stage_in(StageIn::bytes(b"#!/bin/sh\nwc -l \"$1\" > results/count\n".to_vec(), "analyse.sh"))
//!     .with_stage_out(StageOut::new("results/*", "/home/me/out").when(StageWhen::Always))
//!     .with_stage_limits(StageLimits::default().with_max_file_size(ByteSize::gib(2)));
//! spec.validate()?;
//! # Ok::<(), batchbridge_core::Error>(())
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

/// One input sent to the cluster before the submit.
///
/// ```
/// use batchbridge_core::staging::{StageIn, StageSource};
///
/// let input: StageIn = serde_json::from_str(r#"{"path": "in/data.csv", "dest": "data.csv"}"#).unwrap();
/// assert_eq!(input.source, StageSource::Path("in/data.csv".into()));
/// let config: StageIn = serde_json::from_str(r#"{"bytes": [104, 105], "dest": "conf/hi.txt"}"#).unwrap();
/// assert_eq!(config.source, StageSource::Bytes(b"hi".to_vec()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct StageIn {
    /// What is sent.
    #[serde(flatten)]
    pub source: StageSource,
    /// Where it goes, relative to the job's working directory: a file's name, or for a
    /// directory the directory its tree is copied into. No `..` component, no leading `/`,
    /// no control characters, quotes or backslashes.
    pub dest: String,
}

/// What a [`StageIn`] sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum StageSource {
    /// A file or directory on the machine that submits (a directory is sent whole, its
    /// symlinks followed when they point inside it and refused when they point outside).
    Path(PathBuf),
    /// These bytes, as one file (a ConfigMap key, a generated configuration). In JSON, an
    /// array of numbers.
    Bytes(Vec<u8>),
}

/// One output fetched after the job ended.
///
/// ```
/// use batchbridge_core::staging::{StageOut, StageWhen};
///
/// let out: StageOut = serde_json::from_str(r#"{"pattern": "results/*.csv", "localDir": "out"}"#).unwrap();
/// assert_eq!(out.when, StageWhen::OnSuccess);
/// assert!(!out.missing_ok);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct StageOut {
    /// A path or a POSIX shell glob (`*`, `?`, `[...]`) relative to the job's working
    /// directory; a directory it names or matches is fetched with everything under it.
    pub pattern: String,
    /// The local directory the files go to, each under its path relative to the working
    /// directory (`results/a.csv` lands in `LOCAL_DIR/results/a.csv`).
    pub local_dir: PathBuf,
    /// When to fetch.
    #[serde(default)]
    pub when: StageWhen,
    /// Whether a pattern matching nothing is fine (otherwise it fails the stage-out, after
    /// every other file was fetched).
    #[serde(default)]
    pub missing_ok: bool,
}

/// When a [`StageOut`] fetches, by how the job ended (PSI/J's stage-out flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StageWhen {
    /// After the job succeeded.
    #[default]
    OnSuccess,
    /// After it failed or was cancelled.
    OnFailure,
    /// After any end.
    Always,
}

/// Caps on what a job stages, in either direction; none by default. A file or a total over
/// its cap is refused as [`InvalidInput`](crate::ErrorKind::InvalidInput) naming the file and
/// the cap, before it is sent (stage-in) or fetched (stage-out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct StageLimits {
    /// The largest one file may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_size: Option<ByteSize>,
    /// The most all files of one direction may add up to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_size: Option<ByteSize>,
}

impl StageLimits {
    /// Sets [`StageLimits::max_file_size`].
    pub fn with_max_file_size(mut self, size: ByteSize) -> Self {
        self.max_file_size = Some(size);
        self
    }

    /// Sets [`StageLimits::max_total_size`].
    pub fn with_max_total_size(mut self, size: ByteSize) -> Self {
        self.max_total_size = Some(size);
        self
    }

    /// Whether no cap is set (what a spec leaves out when serialized).
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }
}

impl StageIn {
    /// Sends the local file or directory `path` to `dest`.
    pub fn path(path: impl Into<PathBuf>, dest: impl Into<String>) -> Self {
        Self {
            source: StageSource::Path(path.into()),
            dest: dest.into(),
        }
    }

    /// Sends `bytes` as the file `dest`.
    pub fn bytes(bytes: impl Into<Vec<u8>>, dest: impl Into<String>) -> Self {
        Self {
            source: StageSource::Bytes(bytes.into()),
            dest: dest.into(),
        }
    }
}

impl StageOut {
    /// Fetches what `pattern` matches into `local_dir` after the job succeeded, a pattern
    /// matching nothing being an error.
    pub fn new(pattern: impl Into<String>, local_dir: impl Into<PathBuf>) -> Self {
        Self {
            pattern: pattern.into(),
            local_dir: local_dir.into(),
            when: StageWhen::OnSuccess,
            missing_ok: false,
        }
    }

    /// Sets [`StageOut::when`].
    pub fn when(mut self, when: StageWhen) -> Self {
        self.when = when;
        self
    }

    /// Sets [`StageOut::missing_ok`].
    pub fn missing_ok(mut self, yes: bool) -> Self {
        self.missing_ok = yes;
        self
    }
}

impl StageWhen {
    /// Whether an output with this flag is fetched after a job that `succeeded` (or not).
    ///
    /// ```
    /// use batchbridge_core::staging::StageWhen;
    ///
    /// assert!(StageWhen::OnSuccess.applies(true) && !StageWhen::OnSuccess.applies(false));
    /// assert!(StageWhen::OnFailure.applies(false) && !StageWhen::OnFailure.applies(true));
    /// assert!(StageWhen::Always.applies(true) && StageWhen::Always.applies(false));
    /// ```
    pub fn applies(self, succeeded: bool) -> bool {
        match self {
            Self::OnSuccess => succeeded,
            Self::OnFailure => !succeeded,
            Self::Always => true,
        }
    }
}

/// Which way a file moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// To the cluster (stage-in).
    In,
    /// From the cluster (stage-out).
    Out,
}

/// How far one file's transfer is, as a [`Transfer`]'s progress callback sees it: called
/// when the file starts (`done` 0), at least every [`PROGRESS_STEP`] bytes, and when it is
/// complete (`done == total`). A file skipped because the cluster already holds it reports
/// its completion only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress<'a> {
    /// Which way.
    pub direction: Direction,
    /// The file's path relative to the job's working directory.
    pub file: &'a str,
    /// The file on this machine: the one a stage-in reads (none for bytes from memory), or
    /// the one a stage-out writes (under a temporary name until it is complete). Two
    /// stage-out rules may fetch the same `file` to two places, so this, not `file`, tells
    /// their transfers apart.
    pub local: Option<&'a Path>,
    /// Bytes moved so far.
    pub done: u64,
    /// The file's size.
    pub total: u64,
}

/// How often, in bytes, a transfer reports its progress.
pub const PROGRESS_STEP: u64 = 1 << 20;

/// The callback a [`Transfer`] reports progress to; several files may report at once.
pub type ProgressFn = Arc<dyn Fn(&Progress<'_>) + Send + Sync>;

/// How many files move at once unless [`Transfer::with_concurrency`] says otherwise.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// How a stage-in or stage-out runs: how many files at once and whom to tell its progress.
///
/// ```
/// use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
/// use batchbridge_core::staging::Transfer;
///
/// let moved = Arc::new(AtomicU64::new(0));
/// let seen = Arc::clone(&moved);
/// let transfer = Transfer::default()
///     .with_concurrency(8)
///     .with_progress(move |p| { seen.fetch_max(p.done, Ordering::Relaxed); });
/// assert_eq!(transfer.concurrency(), 8);
/// ```
#[derive(Clone)]
pub struct Transfer {
    concurrency: usize,
    progress: Option<ProgressFn>,
}

impl Default for Transfer {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            progress: None,
        }
    }
}

impl fmt::Debug for Transfer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transfer")
            .field("concurrency", &self.concurrency)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl Transfer {
    /// Moves up to `files` files at once (at least 1).
    pub fn with_concurrency(mut self, files: usize) -> Self {
        self.concurrency = files.max(1);
        self
    }

    /// Reports each file's progress to `progress`.
    pub fn with_progress(
        mut self,
        progress: impl Fn(&Progress<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// How many files move at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Tells the callback, if any.
    pub fn report(&self, progress: &Progress<'_>) {
        if let Some(callback) = &self.progress {
            callback(progress);
        }
    }
}

/// What a stage-out fetched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StagedOutputs {
    /// Each file fetched: its path relative to the working directory, where it now is, and
    /// its size.
    pub files: Vec<StagedFile>,
    /// The entries skipped because the job's end did not match their [`StageWhen`].
    pub skipped: Vec<String>,
}

/// One file a stage-out fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedFile {
    /// Its path relative to the job's working directory.
    pub remote: String,
    /// Where it was written.
    pub local: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256, lower-case hex, checked against the cluster's.
    pub sha256: String,
}

/// The longest path [`check_stage_path`] takes: Linux's `PATH_MAX`, as the spec's own paths
/// ([`MAX_PATH_LEN`](crate::spec::MAX_PATH_LEN)). Its own constant, so that this module, which
/// the spec's fields come from, imports nothing of the spec.
pub const MAX_STAGE_PATH_LEN: usize = 4096;

/// Why a path relative to the job's working directory is refused, if it is: empty,
/// absolute, with a `..` component, longer than [`MAX_STAGE_PATH_LEN`],
/// or with a control character (a newline would split the cluster tools' line-per-file
/// output), a quote or a backslash (which `sha256sum` escapes and job scripts rarely quote
/// right). Glob characters (`*`, `?`, `[`) only where `glob` allows them (stage-out).
///
/// ```
/// use batchbridge_core::staging::check_stage_path;
///
/// assert!(check_stage_path("results/run-1/out.csv", false).is_ok());
/// assert!(check_stage_path("results/*.csv", true).is_ok());
/// for hostile in ["../x", "/etc/passwd", "a/../../b", "", "two\nlines", "it's", "a\"b", "a\\b", "*.csv"] {
///     assert!(check_stage_path(hostile, false).is_err(), "{hostile:?}");
/// }
/// ```
pub fn check_stage_path(path: &str, glob: bool) -> std::result::Result<(), String> {
    if path.is_empty() {
        return Err("must not be empty".into());
    }
    if path.len() > MAX_STAGE_PATH_LEN {
        return Err(format!("must be at most {MAX_STAGE_PATH_LEN} bytes"));
    }
    if path.starts_with('/') {
        return Err("must be relative to the job's working directory, not absolute".into());
    }
    if path.split('/').any(|part| part == "..") {
        return Err("must not leave the job's working directory ('..')".into());
    }
    if path
        .chars()
        .any(|c| c.is_control() || matches!(c, '\'' | '"' | '\\' | '`'))
    {
        return Err("must not contain control characters, quotes or backslashes".into());
    }
    if !glob && path.contains(['*', '?', '[']) {
        return Err("must not contain glob characters ('*', '?', '[')".into());
    }
    Ok(())
}

/// How a job that stages out ended ([`Tracker::stage_out_when_ended`](crate::Tracker::stage_out_when_ended)):
/// its terminal status, and apart from it what its stage-out did (a job that succeeded whose outputs could not be fetched still succeeded).
#[derive(Debug)]
#[non_exhaustive]
pub struct EndedAndStaged {
    /// The job's terminal status, as the tracker saw it.
    pub status: crate::JobStatus,
    /// What the stage-out fetched, or why it could not.
    pub outputs: crate::Result<StagedOutputs>,
}
