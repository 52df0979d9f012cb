//! The tool's own record of the jobs it submitted: `STATE_DIR/jobs.jsonl`, one JSON object a
//! line. Every reader and writer holds a lock on `STATE_DIR/jobs.lock` (flock: shared to
//! read, exclusive to write), so two invocations at once neither lose nor tear an entry.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::exit::{CliError, CliResult, Exit};

/// One submitted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) cluster: String,
    pub(crate) id: String,
    pub(crate) key: String,
    pub(crate) name: String,
    /// Seconds since the Unix epoch.
    pub(crate) submitted_at: u64,
}

impl Entry {
    pub(crate) fn new(cluster: &str, id: &str, key: &str, name: &str) -> Self {
        let submitted_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        Self {
            cluster: cluster.to_owned(),
            id: id.to_owned(),
            key: key.to_owned(),
            name: name.to_owned(),
            submitted_at,
        }
    }

    /// `CLUSTER:ID`, how commands name the job.
    pub(crate) fn reference(&self) -> String {
        format!("{}:{}", self.cluster, self.id)
    }
}

/// The record in a state directory.
pub(crate) struct Record {
    dir: PathBuf,
}

impl Record {
    pub(crate) fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.to_path_buf(),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("jobs.jsonl")
    }

    fn lock(&self, how: FlockArg) -> CliResult<Flock<File>> {
        std::fs::create_dir_all(&self.dir).map_err(|err| self.failed("create", &err))?;
        let path = self.dir.join("jobs.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|err| self.failed("open", &err))?;
        Flock::lock(file, how).map_err(|(_, errno)| {
            CliError::new(
                Exit::Failure,
                format!("cannot lock {}: {errno}", path.display()),
            )
        })
    }

    fn failed(&self, what: &str, err: &std::io::Error) -> CliError {
        CliError::new(
            Exit::Failure,
            format!(
                "cannot {what} the job record in {}: {err}",
                self.dir.display()
            ),
        )
    }

    /// Adds `entry` at the end.
    pub(crate) fn add(&self, entry: &Entry) -> CliResult<()> {
        let _lock = self.lock(FlockArg::LockExclusive)?;
        let mut line = serde_json::to_vec(entry)
            .map_err(|err| CliError::new(Exit::Failure, err.to_string()))?;
        line.push(b'\n');
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path())
            .and_then(|mut file| file.write_all(&line).and_then(|()| file.sync_data()))
            .map_err(|err| self.failed("write", &err))
    }

    /// Every entry, oldest first.
    pub(crate) fn entries(&self) -> CliResult<Vec<Entry>> {
        let _lock = self.lock(FlockArg::LockShared)?;
        self.read()
    }

    fn read(&self) -> CliResult<Vec<Entry>> {
        let text = match std::fs::read_to_string(self.path()) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(self.failed("read", &err)),
        };
        text.lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(number, line)| {
                serde_json::from_str(line).map_err(|err| {
                    CliError::new(
                        Exit::Failure,
                        format!("{}:{}: {err}", self.path().display(), number + 1),
                    )
                    .with_hint("fix or remove that line; every other line is one job")
                })
            })
            .collect()
    }

    /// Removes the entries `drop` selects, keeping the rest as they were: the file is
    /// rewritten beside the old one and renamed over it.
    pub(crate) fn remove(&self, drop: impl Fn(&Entry) -> bool) -> CliResult<Vec<Entry>> {
        let _lock = self.lock(FlockArg::LockExclusive)?;
        let (dropped, kept): (Vec<Entry>, Vec<Entry>) = self.read()?.into_iter().partition(drop);
        if dropped.is_empty() {
            return Ok(dropped);
        }
        let mut text = Vec::new();
        for entry in &kept {
            text.extend(
                serde_json::to_vec(entry)
                    .map_err(|err| CliError::new(Exit::Failure, err.to_string()))?,
            );
            text.push(b'\n');
        }
        let fresh = self.dir.join("jobs.jsonl.new");
        std::fs::write(&fresh, text)
            .and_then(|()| std::fs::rename(&fresh, self.path()))
            .map_err(|err| self.failed("rewrite", &err))?;
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_concurrent_adds_and_a_removal() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let writers: Vec<_> = (0..8)
            .map(|writer| {
                let path = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let record = Record::new(&path);
                    for job in 0..25 {
                        let entry = Entry::new("local", &format!("{writer}-{job}"), "k", "n");
                        record
                            .add(&entry)
                            .map_err(|err| err.message)
                            .unwrap_or_else(|e| panic!("{e}"));
                    }
                })
            })
            .collect();
        let record = Record::new(dir.path());
        let removed = record
            .remove(|entry| entry.id.starts_with("0-"))
            .map_err(|err| err.message);
        for writer in writers {
            writer
                .join()
                .unwrap_or_else(|_| panic!("a writer panicked"));
        }
        let removed = removed.unwrap_or_else(|e| panic!("{e}")).len();
        let entries = record
            .entries()
            .map_err(|err| err.message)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entries.len() + removed, 200, "none lost, none torn");
    }
}
