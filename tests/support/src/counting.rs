//! [`CountingShell`]: a [`Shell`] that counts the commands run through it, for benchmarks
//! that report scheduler commands per status cycle.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use batchbridge_core::Result;
use batchbridge_core::shell::{Command, LineStream, Output, Shell};

/// Wraps a shell and counts its commands by the program that matters: `env squeue` counts
/// as `squeue`, anything else by its program (`condor_q`, `sh`…).
#[derive(Debug)]
pub struct CountingShell<S> {
    inner: S,
    counts: Mutex<BTreeMap<String, u64>>,
}

impl<S: Shell> CountingShell<S> {
    /// Counts the commands run through `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            counts: Mutex::default(),
        }
    }

    /// The wrapped shell.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The counts since the last call, by program.
    pub fn take_counts(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.counts.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// How many of the commands since the last [`take_counts`](Self::take_counts) ran one
    /// of `programs`; resets the counts.
    pub fn take_total(&self, programs: &[&str]) -> u64 {
        let counts = self.take_counts();
        programs
            .iter()
            .map(|p| counts.get(*p).copied().unwrap_or(0))
            .sum()
    }
}

#[async_trait]
impl<S: Shell> Shell for CountingShell<S> {
    fn host(&self) -> &str {
        self.inner.host()
    }

    async fn run(&self, command: &Command) -> Result<Output> {
        let program = command.tool().to_owned();
        *self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(program)
            .or_default() += 1;
        self.inner.run(command).await
    }

    /// Not counted: a stream is one long-lived command, not a query per use.
    async fn stream(&self, command: &Command) -> Result<LineStream> {
        self.inner.stream(command).await
    }
}
