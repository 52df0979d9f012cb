//! [`StagingDir`]: a job's working directory on the cluster as the staging of
//! [`crate::staging`] sees it, reached through a [`Shell`]. A large file streams through
//! [`Shell::pipe`] as one remote command (`staging.sh`), hashed as it goes out and its
//! SHA-256 sent after it, so it is read once on each side; small files go together, up to
//! [`BATCH_BYTES`] as one tar stream in one command ([`super::tar_stream`]), so a thousand of
//! them cost a few round trips rather than a thousand. Up to [`Transfer::concurrency`]
//! commands run at once over the shell's one connection.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::{FutureExt, StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio_util::io::SyncIoBridge;

use super::tar_stream::{self, Expected, FILE_BUFFER, Outgoing, Sync};
use crate::error::{Error, ErrorKind, Result, excerpt};
use crate::shell::{Command, MAX_COMMAND_LINE, Output, PipeInput, Shell};
use crate::staging::{
    Direction, PROGRESS_STEP, Progress, StageIn, StageLimits, StageOut, StageSource, StagedFile,
    StagedOutputs, Transfer, check_stage_path,
};

/// `sh -c STAGING sh VERB ROOT ARGS...`: the remote half of every staging step.
pub(super) const STAGING: &str = include_str!("staging.sh");
const REFUSED_EXIT_CODE: i32 = 3;
const DAMAGED_EXIT_CODE: i32 = 4;
const NO_DIGEST_TOOL_EXIT_CODE: i32 = 5;
/// The slowest a transfer may go before its command's time limit ends it: the limit of
/// one file is the backend's command time limit plus a second per MiB.
const SLOWEST_BYTES_PER_SECOND: u64 = 1 << 20;
/// Where a file is written before it is whole: hidden, beside its final name, and never
/// matched by a stage-out's listing.
const PARTIAL_SUFFIX: &str = ".bb-partial";
/// A file at most this big goes in a tar stream with others: below it a remote command's
/// round trip costs more than the bytes.
const BATCHED_FILE_SIZE: u64 = 1 << 20;
/// The most bytes one tar stream carries, so that a failed batch costs little to send again
/// and several batches can run at once.
const BATCH_BYTES: u64 = 64 << 20;

/// A job's working directory on the cluster, for staging files in and out.
///
/// ```
/// use std::time::Duration;
/// use batchbridge_core::remote::StagingDir;
/// use batchbridge_core::shell::LocalShell;
/// use batchbridge_core::staging::{StageIn, StageLimits, StageOut, Transfer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let tmp = tempfile::tempdir()?;
/// let cluster = tmp.path().join("cluster");
/// let staging = StagingDir::new(&LocalShell, cluster.to_str().unwrap(), Duration::from_secs(10));
/// let inputs = [StageIn::bytes(b"1,2\n".to_vec(), "data/in.csv")];
/// staging.stage_in(&inputs, &StageLimits::default(), &Transfer::default()).await?;
/// assert_eq!(std::fs::read(cluster.join("data/in.csv"))?, b"1,2\n");
///
/// let outputs = [StageOut::new("data/*.csv", tmp.path().join("back"))];
/// let fetched = staging.stage_out(&outputs, true, &StageLimits::default(), &Transfer::default()).await?;
/// assert_eq!(fetched.files[0].remote, "data/in.csv");
/// assert_eq!(std::fs::read(tmp.path().join("back/data/in.csv"))?, b"1,2\n");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StagingDir<'a> {
    shell: &'a dyn Shell,
    root: &'a str,
    timeout: Duration,
}

/// What [`StagingDir::stage_in`] staged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StagedInputs {
    /// The working directory, resolved (symlinks followed) on the cluster.
    pub root: String,
    /// Each file staged (or found there already), relative to it.
    pub files: Vec<String>,
}

/// One file of a stage-in, planned: what it is, where it goes, how big, its digest.
struct Upload {
    dest: String,
    payload: Payload,
    size: u64,
    /// Known up front for bytes and for files small enough to go in a tar stream; a larger
    /// file is hashed as it is sent, so that it is read once here.
    sha256: Option<String>,
    /// The digest of the file of the same size the cluster has already, when this file's
    /// own digest is not known yet: it is hashed before sending, to skip it if unchanged.
    found: Option<String>,
}

impl Upload {
    /// Tells `transfer` the whole file is there: sent, or found with the same digest.
    fn report_arrived(&self, transfer: &Transfer) {
        report(
            transfer,
            Direction::In,
            &self.dest,
            self.local(),
            self.size,
            self.size,
        );
    }

    /// The local file this stage-in reads, unless it sends bytes from memory.
    fn local(&self) -> Option<&Path> {
        match &self.payload {
            Payload::File(path) => Some(path),
            Payload::Bytes(_) => None,
        }
    }
}

enum Payload {
    File(PathBuf),
    Bytes(Arc<[u8]>),
}

/// What one remote command of a stage-in sends.
enum Sending {
    One(Upload),
    Many(Vec<Upload>),
}

/// What the probe of a stage-in found of the cluster.
struct Probed {
    /// The working directory, resolved.
    root: String,
    /// Whether `staging.sh put` may take a file's digest after its data.
    trailer: bool,
}

/// One file a stage-out's listing found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    remote: String,
    size: u64,
    local_dir: PathBuf,
}

impl<'a> StagingDir<'a> {
    /// The directory `root` (absolute) on the host `shell` reaches; each command's time
    /// limit is `timeout`, plus a second per MiB it moves.
    pub fn new(shell: &'a dyn Shell, root: &'a str, timeout: Duration) -> Self {
        Self {
            shell,
            root,
            timeout,
        }
    }

    /// Sends `inputs` (see [`crate::staging`]); Ok, with the directory's resolved path and
    /// the files, only when every file arrived whole or was already there with the same
    /// SHA-256.
    /// Caps in `limits` and paths leaving the directory are refused as
    /// [`InvalidInput`](ErrorKind::InvalidInput) before anything is sent.
    pub async fn stage_in(
        &self,
        inputs: &[StageIn],
        limits: &StageLimits,
        transfer: &Transfer,
    ) -> Result<StagedInputs> {
        let inputs = inputs.to_vec();
        let limits = *limits;
        let uploads = tokio::task::spawn_blocking(move || plan_uploads(&inputs, &limits))
            .await
            .map_err(|err| Error::new(ErrorKind::Io, format!("planning a stage-in: {err}")))??;
        let (cluster, present) = self.probe(&uploads).await?;
        let files = uploads.iter().map(|u| u.dest.clone()).collect();
        let mut to_send = Vec::new();
        for (mut upload, have) in uploads.into_iter().zip(present) {
            match (&upload.sha256, have) {
                (Some(sum), Some(have)) if *sum == have => upload.report_arrived(transfer),
                (None, have) => {
                    upload.found = have;
                    to_send.push(upload);
                }
                _ => to_send.push(upload),
            }
        }
        let sendings = in_batches(to_send, |u| (u.dest.as_str(), u.size))
            .into_iter()
            .map(|mut batch| {
                if batch.len() == 1 {
                    Ok(Sending::One(batch.remove(0)))
                } else {
                    Ok(Sending::Many(batch))
                }
            });
        futures::stream::iter(sendings)
            .try_for_each_concurrent(transfer.concurrency(), |sending| match sending {
                Sending::One(upload) => self.upload(&cluster, upload, transfer).left_future(),
                Sending::Many(batch) => self
                    .upload_many(&cluster.root, batch, transfer)
                    .right_future(),
            })
            .await?;
        Ok(StagedInputs {
            root: cluster.root,
            files,
        })
    }

    /// Fetches `outputs` whose [`StageWhen`](crate::staging::StageWhen) applies to a job
    /// that `succeeded` (or not). Every listed file is fetched before a pattern that matched
    /// nothing (unless [`missing_ok`](StageOut::missing_ok)) or a file refused by the
    /// cluster (a symlink pointing outside, a hostile name) fails the whole.
    pub async fn stage_out(
        &self,
        outputs: &[StageOut],
        succeeded: bool,
        limits: &StageLimits,
        transfer: &Transfer,
    ) -> Result<StagedOutputs> {
        let mut staged = StagedOutputs::default();
        let (applying, skipped): (Vec<_>, Vec<_>) =
            outputs.iter().partition(|out| out.when.applies(succeeded));
        staged.skipped = skipped.iter().map(|out| out.pattern.clone()).collect();
        for out in &applying {
            check_stage_path(&out.pattern, true).map_err(|why| {
                Error::invalid_input(format!("stage-out {:?}: {why}", excerpt(&out.pattern)))
            })?;
        }
        if applying.is_empty() {
            return Ok(staged);
        }
        let (listed, problems) = self.list(&applying).await?;
        check_out_limits(&listed, limits)?;
        let fetched: Vec<Vec<StagedFile>> =
            futures::stream::iter(in_batches(listed, |f| (f.remote.as_str(), f.size)))
                .map(|mut batch| {
                    if batch.len() == 1 {
                        let file = batch.remove(0);
                        async move { self.fetch(file, transfer).await.map(|f| vec![f]) }
                            .left_future()
                    } else {
                        self.fetch_many(batch, transfer).right_future()
                    }
                })
                .buffer_unordered(transfer.concurrency())
                .try_collect()
                .await?;
        staged.files = fetched.into_iter().flatten().collect();
        staged.files.sort_by(|a, b| a.remote.cmp(&b.remote));
        match problems {
            Some(err) => Err(err),
            None => Ok(staged),
        }
    }

    /// Removes the files `paths` (relative to the directory) if they are inside it.
    pub async fn remove(&self, paths: &[String]) -> Result<()> {
        for chunk in command_chunks(paths.iter().map(|p| vec![p.clone()])) {
            let args = ["remove", self.root]
                .into_iter()
                .map(str::to_owned)
                .chain(chunk);
            self.run(Command::sh(STAGING, args))
                .await?
                .check("removing staged files")?;
        }
        Ok(())
    }

    async fn run(&self, command: Command) -> Result<Output> {
        self.shell.run(&command.timeout(self.timeout)).await
    }

    /// The `staging.sh` command that moves `size` bytes: bulk work (see
    /// [`Command::bulk`]), with time for them at the slowest rate expected.
    fn transfer<I, S>(&self, args: I, size: u64) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Command::sh(STAGING, args)
            .timeout(self.timeout + Duration::from_secs(size / SLOWEST_BYTES_PER_SECOND))
            .bulk()
    }

    /// Creates the directory and asks which files are there already with their size:
    /// their digests, in `uploads`' order.
    async fn probe(&self, uploads: &[Upload]) -> Result<(Probed, Vec<Option<String>>)> {
        let mut real = None;
        let mut trailer = false;
        let mut present = Vec::with_capacity(uploads.len());
        let pairs = uploads
            .iter()
            .map(|u| vec![u.dest.clone(), u.size.to_string()]);
        let chunks = command_chunks(pairs);
        for chunk in if chunks.is_empty() {
            vec![Vec::new()]
        } else {
            chunks
        } {
            let args = ["probe", self.root]
                .into_iter()
                .map(str::to_owned)
                .chain(chunk);
            let output = self.run(Command::sh(STAGING, args)).await?;
            let output = refusal(output, "preparing the job's working directory")?;
            for line in output.stdout_text().lines() {
                if let Some(root) = line.strip_prefix("root ") {
                    real = Some(root.to_owned());
                } else if line == "trailer" {
                    trailer = true;
                } else if let Some(sum) = line.strip_prefix("have ") {
                    present.push(Some(sum.to_owned()));
                } else if line == "absent" {
                    present.push(None);
                } else if let Some(why) = line.strip_prefix("refused ") {
                    let dest = &uploads[present.len()].dest;
                    return Err(Error::invalid_input(format!(
                        "stage-in {dest:?}: refused by the cluster: {why}"
                    )));
                }
            }
        }
        match real {
            Some(root) if present.len() == uploads.len() => Ok((Probed { root, trailer }, present)),
            _ => Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!(
                    "the staging probe of {} answered for {} of {} files",
                    self.root,
                    present.len(),
                    uploads.len()
                ),
            )),
        }
    }

    /// Sends one file through `staging.sh put`. A file whose digest is not known yet is
    /// hashed as it is sent and its digest follows the data, where the cluster can take
    /// it; otherwise, or when the cluster has a file of its size already, it is hashed first.
    async fn upload(
        &self,
        cluster: &Probed,
        mut upload: Upload,
        transfer: &Transfer,
    ) -> Result<()> {
        if let (None, Payload::File(path)) = (&upload.sha256, &upload.payload)
            && (upload.found.is_some() || !cluster.trailer)
        {
            let path = path.clone();
            let (_, sum) = tokio::task::spawn_blocking(move || sha256_of(&path))
                .await
                .map_err(|err| Error::new(ErrorKind::Io, format!("hashing a stage-in: {err}")))??;
            if upload.found.as_deref() == Some(sum.as_str()) {
                upload.report_arrived(transfer);
                return Ok(());
            }
            upload.sha256 = Some(sum);
        }
        let input: PipeInput = match &upload.payload {
            Payload::File(path) => Box::new(tokio::fs::File::open(path).await.map_err(|err| {
                Error::new(ErrorKind::Io, format!("stage-in {}: {err}", path.display()))
            })?),
            Payload::Bytes(bytes) => Box::new(std::io::Cursor::new(Arc::clone(bytes))),
        };
        let counted = Counted::new(
            transfer.clone(),
            Direction::In,
            upload.dest.clone(),
            upload.local().map(Path::to_path_buf),
            upload.size,
        );
        let size = upload.size.to_string();
        let mut args = vec!["put", &cluster.root, &upload.dest, &size];
        let changed = Arc::new(OnceLock::new());
        let input: PipeInput = match &upload.sha256 {
            Some(sum) => {
                args.push(sum);
                Box::new(counted.reader(input))
            }
            None => Box::new(Trailed::new(input, counted, Arc::clone(&changed))),
        };
        let command = self.transfer(args, upload.size);
        let output = self.shell.pipe(&command, Some(input), None).await?;
        if let Some(why) = changed.get() {
            return Err(Error::new(
                ErrorKind::Io,
                format!("stage-in {}: {why}; it was not placed", upload.dest),
            )
            .temporary());
        }
        refusal(output, &format!("stage-in {}", upload.dest))?;
        upload.report_arrived(transfer);
        Ok(())
    }

    /// Sends the small files `batch` as one tar stream into one `staging.sh unpack`, which
    /// places none of them unless every one arrived whole.
    async fn upload_many(&self, real: &str, batch: Vec<Upload>, transfer: &Transfer) -> Result<()> {
        let lines =
            |field: fn(&Upload) -> String| batch.iter().map(field).collect::<Vec<_>>().join("\n");
        let total: u64 = batch.iter().map(|u| u.size).sum();
        let args = [
            "unpack".to_owned(),
            real.to_owned(),
            lines(|u| u.size.to_string()),
            lines(|u| {
                u.sha256
                    .clone()
                    .expect("a file small enough to batch was hashed while planning")
            }),
        ]
        .into_iter()
        .chain(batch.iter().map(|u| u.dest.clone()));
        let command = self.transfer(args, total);
        let what = format!(
            "stage-in of {} files ({} first)",
            batch.len(),
            batch[0].dest
        );
        for upload in &batch {
            report(
                transfer,
                Direction::In,
                &upload.dest,
                upload.local(),
                0,
                upload.size,
            );
        }
        let (sink, source) = tokio::io::duplex(FILE_BUFFER);
        let sink = SyncIoBridge::new(sink);
        let progress = transfer.clone();
        let writing = tokio::task::spawn_blocking(move || {
            let files = batch.iter().map(|upload| {
                let data: Box<dyn std::io::Read> = match &upload.payload {
                    Payload::File(path) => Box::new(std::fs::File::open(path).map_err(|err| {
                        std::io::Error::new(err.kind(), format!("{}: {err}", path.display()))
                    })?),
                    Payload::Bytes(bytes) => Box::new(&bytes[..]),
                };
                Ok(Outgoing {
                    name: &upload.dest,
                    size: upload.size,
                    data,
                })
            });
            tar_stream::write_archive(sink, files, |index| {
                let upload = &batch[index];
                let (file, local) = (&upload.dest, upload.local());
                report(
                    &progress,
                    Direction::In,
                    file,
                    local,
                    upload.size,
                    upload.size,
                );
            })
        });
        let piped = self
            .shell
            .pipe(&command, Some(Box::new(source)), None)
            .await;
        let written = writing
            .await
            .map_err(|err| Error::new(ErrorKind::Io, format!("{what}: {err}")))?;
        // The cluster's refusal says more than the broken pipe it caused here.
        refusal(piped?, &what)?;
        written.map_err(|err| Error::new(ErrorKind::Io, format!("{what}: {err}")).with_source(err))
    }

    /// Fetches the small files `batch` as one tar stream from one `staging.sh pack`: each
    /// member checked and written to its temporary name, then, when the sizes and digests
    /// the cluster printed agree with what arrived, each renamed into place.
    async fn fetch_many(&self, batch: Vec<Listed>, transfer: &Transfer) -> Result<Vec<StagedFile>> {
        let mut locals = Vec::with_capacity(batch.len());
        for file in &batch {
            locals.push(local_target(&file.local_dir, &file.remote).await?);
        }
        let expected: Vec<Expected> = batch
            .iter()
            .zip(&locals)
            .map(|(file, local)| Expected {
                name: file.remote.clone(),
                size: file.size,
                partial: partial_name(local),
            })
            .collect();
        let total: u64 = batch.iter().map(|f| f.size).sum();
        let args = ["pack", self.root]
            .into_iter()
            .map(str::to_owned)
            .chain(batch.iter().map(|f| f.remote.clone()));
        let command = self.transfer(args, total);
        let what = format!(
            "stage-out of {} files ({} first)",
            batch.len(),
            batch[0].remote
        );
        let (sink, source) = tokio::io::duplex(FILE_BUFFER);
        let source = SyncIoBridge::new(source);
        let progress = transfer.clone();
        let targets = locals.clone();
        let reading = tokio::task::spawn_blocking(move || {
            let mut counted: Vec<Counted> = expected
                .iter()
                .zip(targets)
                .map(|(e, local)| {
                    let (name, size) = (e.name.clone(), e.size);
                    Counted::new(progress.clone(), Direction::Out, name, Some(local), size)
                })
                .collect();
            let read = tar_stream::read_archive(source, &expected, |index, done| {
                counted[index].reached(done);
            });
            (expected, read)
        });
        let piped = self.shell.pipe(&command, None, Some(Box::new(sink))).await;
        let (expected, read) = reading
            .await
            .map_err(|err| Error::new(ErrorKind::Io, format!("{what}: {err}")))?;
        let checked = piped
            .and_then(|output| refusal(output, &what))
            .and_then(|output| {
                let received = read?;
                check_packed(&what, &output, &received)?;
                Ok(received)
            });
        let received = match checked {
            Ok(received) => received,
            Err(err) => {
                for file in &expected {
                    let _ = tokio::fs::remove_file(&file.partial).await;
                }
                return Err(err);
            }
        };
        let mut staged = Vec::with_capacity(batch.len());
        for ((file, local), (expected, (size, sha256))) in batch
            .into_iter()
            .zip(locals)
            .zip(expected.into_iter().zip(received))
        {
            let fetched = StagedFile {
                remote: file.remote,
                local,
                size,
                sha256,
            };
            staged.push(put_in_place(transfer, &expected.partial, fetched).await?);
        }
        Ok(staged)
    }

    /// Lists what the applying outputs match: the files, and the error for patterns that
    /// matched nothing or files the cluster refused, if any.
    async fn list(&self, outputs: &[&StageOut]) -> Result<(Vec<Listed>, Option<Error>)> {
        let args = ["list", self.root]
            .into_iter()
            .map(str::to_owned)
            .chain(outputs.iter().map(|out| out.pattern.clone()));
        let output = self.run(Command::sh(STAGING, args)).await?;
        let output = refusal(output, "listing the job's outputs")?;
        let text = output.stdout_text();
        let parsed = parse_listing(&text, outputs)?;
        Ok(parsed)
    }

    async fn fetch(&self, file: Listed, transfer: &Transfer) -> Result<StagedFile> {
        let local = local_target(&file.local_dir, &file.remote).await?;
        let partial = partial_name(&local);
        let io = |err: std::io::Error| {
            Error::new(
                ErrorKind::Io,
                format!("stage-out {}: {err}", local.display()),
            )
        };
        let counted = Counted::new(
            transfer.clone(),
            Direction::Out,
            file.remote.clone(),
            Some(local.clone()),
            file.size,
        );
        // Written and hashed by blocking code off the runtime, 1 MiB at a time; the duplex
        // buffer lets the SSH channel run ahead of the disk.
        let (sink, source) = tokio::io::duplex(FILE_BUFFER);
        let mut source = SyncIoBridge::new(source);
        let target = partial.clone();
        let receiving = tokio::task::spawn_blocking(move || {
            let mut counted = counted;
            tar_stream::receive(&mut source, &target, Sync::Now, |done| {
                counted.reached(done);
            })
        });
        let command = self.transfer(["fetch", self.root, &file.remote], file.size);
        let fetched = self.shell.pipe(&command, None, Some(Box::new(sink))).await;
        let received = receiving
            .await
            .map_err(|err| Error::new(ErrorKind::Io, format!("stage-out {}: {err}", file.remote)))
            .and_then(|received| received.map_err(io));
        let checked = fetched
            .and_then(|output| refusal(output, &format!("stage-out {}", file.remote)))
            .and_then(|output| check_fetched(&file.remote, &output, received?));
        let (size, sha256) = match checked {
            Ok(done) => done,
            Err(err) => {
                let _ = tokio::fs::remove_file(&partial).await;
                return Err(err);
            }
        };
        let fetched = StagedFile {
            remote: file.remote,
            local,
            size,
            sha256,
        };
        put_in_place(transfer, &partial, fetched).await
    }
}

/// Moves a fetched file from its temporary name `partial` to its place, and tells
/// `transfer` it is complete.
async fn put_in_place(
    transfer: &Transfer,
    partial: &Path,
    fetched: StagedFile,
) -> Result<StagedFile> {
    let local = &fetched.local;
    tokio::fs::rename(partial, local).await.map_err(|err| {
        Error::new(
            ErrorKind::Io,
            format!("stage-out {}: {err}", local.display()),
        )
    })?;
    let size = fetched.size;
    report(
        transfer,
        Direction::Out,
        &fetched.remote,
        Some(local),
        size,
        size,
    );
    Ok(fetched)
}

/// Where a file is written before it is whole: hidden, beside its final name.
fn partial_name(local: &Path) -> PathBuf {
    let name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    local.with_file_name(format!(".{name}{PARTIAL_SUFFIX}"))
}

/// Splits `items` into the groups that each go as one remote command: a large file (or
/// one whose name starts with `-`, which the cluster's tools would take for an option)
/// alone, small files together up to [`BATCH_BYTES`] and well under the command line's
/// limit (each costs its name and a line of size and digest).
fn in_batches<T>(items: Vec<T>, describe: impl Fn(&T) -> (&str, u64)) -> Vec<Vec<T>> {
    const PER_FILE: usize = 3 + 21 + 65;
    let budget = MAX_COMMAND_LINE / 2;
    let mut groups: Vec<Vec<T>> = Vec::new();
    let mut batch: Vec<T> = Vec::new();
    let (mut bytes, mut line) = (0u64, 0usize);
    for item in items {
        let (name, size) = describe(&item);
        if size > BATCHED_FILE_SIZE || name.starts_with('-') {
            groups.push(vec![item]);
            continue;
        }
        let cost = name.len() + PER_FILE;
        if !batch.is_empty() && (bytes + size > BATCH_BYTES || line + cost > budget) {
            groups.push(std::mem::take(&mut batch));
            (bytes, line) = (0, 0);
        }
        bytes += size;
        line += cost;
        batch.push(item);
    }
    if !batch.is_empty() {
        groups.push(batch);
    }
    groups
}

fn report(
    transfer: &Transfer,
    direction: Direction,
    file: &str,
    local: Option<&Path>,
    done: u64,
    total: u64,
) {
    transfer.report(&Progress {
        direction,
        file,
        local,
        done,
        total,
    });
}

/// Splits argument groups into chunks whose command lines stay well under a remote
/// shell's limit (the script itself takes some 6 KiB).
fn command_chunks(groups: impl Iterator<Item = Vec<String>>) -> Vec<Vec<String>> {
    let budget = MAX_COMMAND_LINE / 2;
    let mut chunks: Vec<Vec<String>> = Vec::new();
    let mut used = budget;
    for group in groups {
        let cost: usize = group.iter().map(|a| a.len() + 3).sum();
        if used + cost > budget {
            chunks.push(Vec::new());
            used = 0;
        }
        used += cost;
        chunks.last_mut().expect("a chunk was pushed").extend(group);
    }
    chunks
}

/// Turns a staging command's failure into its error: a refusal is InvalidInput, a file
/// that arrived damaged a temporary Io error (sending it again may well work).
fn refusal(output: Output, what: &str) -> Result<Output> {
    match output.exit_code {
        Some(REFUSED_EXIT_CODE) => Err(Error::invalid_input(format!(
            "{what}: refused by the cluster: {}",
            excerpt(&output.stderr_text())
        ))),
        Some(DAMAGED_EXIT_CODE) => Err(Error::new(
            ErrorKind::Io,
            format!("{what}: {}", excerpt(&output.stderr_text())),
        )
        .temporary()),
        Some(NO_DIGEST_TOOL_EXIT_CODE) => Err(Error::new(
            ErrorKind::Unsupported,
            format!("{what}: {}", excerpt(&output.stderr_text())),
        )),
        _ => output.check(what),
    }
}

/// What the cluster said of a fetched file (`size N sha256 HEX`, the last line of its
/// stderr) against what arrived: its size and digest when they agree.
fn check_fetched(remote: &str, output: &Output, got: (u64, String)) -> Result<(u64, String)> {
    let stderr = output.stderr_text();
    let said = stderr.lines().last().and_then(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("size"), Some(size), Some("sha256"), Some(sum)) => {
                Some((size.parse::<u64>().ok()?, sum.to_owned()))
            }
            _ => None,
        }
    });
    match said {
        Some(said) if said == got => Ok(got),
        Some((size, sum)) => Err(Error::new(
            ErrorKind::Io,
            format!(
                "stage-out {remote}: {} bytes with SHA-256 {} arrived, the cluster has {size} \
                 bytes with SHA-256 {sum}; fetch it again",
                got.0, got.1
            ),
        )
        .temporary()),
        None => Err(Error::new(
            ErrorKind::UnexpectedOutput,
            format!(
                "stage-out {remote}: the cluster printed no digest: {}",
                excerpt(&stderr)
            ),
        )),
    }
}

/// What the cluster said of a packed batch (its `sizes N` and `sums SHA` lines, one per
/// file in order) against what arrived.
fn check_packed(what: &str, output: &Output, received: &[(u64, String)]) -> Result<()> {
    let stderr = output.stderr_text();
    let field = |name: &str| -> Vec<&str> {
        stderr
            .lines()
            .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .collect()
    };
    let (sizes, sums) = (field("sizes"), field("sums"));
    if sizes.len() != received.len() || sums.len() != received.len() {
        return Err(Error::new(
            ErrorKind::UnexpectedOutput,
            format!(
                "{what}: the cluster printed {} sizes and {} digests for {} files: {}",
                sizes.len(),
                sums.len(),
                received.len(),
                excerpt(&stderr)
            ),
        ));
    }
    for ((size, sum), (got_size, got_sum)) in sizes.iter().zip(&sums).zip(received) {
        if *size != got_size.to_string() || sum != got_sum {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{what}: {got_size} bytes with SHA-256 {got_sum} arrived, the cluster has \
                     {size} bytes with SHA-256 {sum}; fetch it again"
                ),
            )
            .temporary());
        }
    }
    Ok(())
}

/// The listing's files, each once, and the error for what it refused or missed.
fn parse_listing(text: &str, outputs: &[&StageOut]) -> Result<(Vec<Listed>, Option<Error>)> {
    let mut files: Vec<Listed> = Vec::new();
    let mut refused = Vec::new();
    let mut missing = Vec::new();
    let entry = |n: &str| -> Result<&StageOut> {
        n.parse::<usize>()
            .ok()
            .and_then(|n| outputs.get(n.checked_sub(1)?))
            .copied()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::UnexpectedOutput,
                    format!("the stage-out listing named entry {n:?}"),
                )
            })
    };
    for line in text.lines() {
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("file"), Some(n), Some(size), Some(path)) => {
                let out = entry(n)?;
                let size = size.parse().map_err(|_| {
                    Error::new(ErrorKind::UnexpectedOutput, format!("listing: {line:?}"))
                })?;
                if !files
                    .iter()
                    .any(|f| f.remote == path && f.local_dir == out.local_dir)
                {
                    files.push(Listed {
                        remote: path.to_owned(),
                        size,
                        local_dir: out.local_dir.clone(),
                    });
                }
            }
            (Some("missing"), Some(n), None, None) => {
                let out = entry(n)?;
                if !out.missing_ok {
                    missing.push(format!("{:?}", out.pattern));
                }
            }
            (Some("refused"), Some(n), why, rest) => {
                let out = entry(n)?;
                let why = [why, rest]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" ");
                refused.push(format!("{:?}: {why}", out.pattern));
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::UnexpectedOutput,
                    format!("the stage-out listing printed {:?}", excerpt(line)),
                ));
            }
        }
    }
    let problem = if !refused.is_empty() {
        Some(Error::invalid_input(format!(
            "stage-out refused by the cluster: {}",
            refused.join("; ")
        )))
    } else if !missing.is_empty() {
        Some(Error::new(
            ErrorKind::NotFound,
            format!("stage-out: nothing matched {}", missing.join(", ")),
        ))
    } else {
        None
    };
    Ok((files, problem))
}

fn check_out_limits(listed: &[Listed], limits: &StageLimits) -> Result<()> {
    check_sizes(
        "stage-out",
        listed.iter().map(|f| (f.remote.as_str(), f.size)),
        limits,
    )
}

/// Refuses a file over the per-file cap or a total over the total cap, naming both.
fn check_sizes<'a>(
    what: &str,
    files: impl Iterator<Item = (&'a str, u64)>,
    limits: &StageLimits,
) -> Result<()> {
    let mut total = 0u64;
    for (name, size) in files {
        if let Some(cap) = limits.max_file_size
            && size > cap.as_u64()
        {
            return Err(Error::invalid_input(format!(
                "{what} {name:?}: {size} bytes, more than the per-file cap (stageLimits.maxFileSize) of {} bytes",
                cap.as_u64()
            )));
        }
        total = total.saturating_add(size);
        if let Some(cap) = limits.max_total_size
            && total > cap.as_u64()
        {
            return Err(Error::invalid_input(format!(
                "{what}: {total} bytes with {name:?}, more than the total cap (stageLimits.maxTotalSize) of {} bytes",
                cap.as_u64()
            )));
        }
    }
    Ok(())
}

/// Every file of `inputs`, hashed, within `limits`; directories walked, their symlinks
/// followed inside them and refused when they point outside.
fn plan_uploads(inputs: &[StageIn], limits: &StageLimits) -> Result<Vec<Upload>> {
    let mut uploads = Vec::new();
    for input in inputs {
        check_stage_path(&input.dest, false).map_err(|why| {
            Error::invalid_input(format!("stage-in {:?}: {why}", excerpt(&input.dest)))
        })?;
        match &input.source {
            StageSource::Bytes(bytes) => {
                let mut hasher = Sha256::new();
                hasher.update(bytes);
                uploads.push(Upload {
                    dest: input.dest.clone(),
                    payload: Payload::Bytes(Arc::from(bytes.as_slice())),
                    size: bytes.len() as u64,
                    sha256: Some(format!("{:x}", hasher.finalize())),
                    found: None,
                });
            }
            StageSource::Path(path) => plan_path(path, &input.dest, &mut uploads)?,
        }
    }
    check_sizes(
        "stage-in",
        uploads.iter().map(|u| (u.dest.as_str(), u.size)),
        limits,
    )?;
    Ok(uploads)
}

fn plan_path(path: &Path, dest: &str, uploads: &mut Vec<Upload>) -> Result<()> {
    let io = |what: &Path, err: std::io::Error| {
        Error::new(ErrorKind::Io, format!("stage-in {}: {err}", what.display())).with_source(err)
    };
    let meta = std::fs::metadata(path).map_err(|err| io(path, err))?;
    if meta.is_file() {
        uploads.push(planned(path, dest.to_owned(), meta.len())?);
        return Ok(());
    }
    if !meta.is_dir() {
        return Err(Error::invalid_input(format!(
            "stage-in {}: neither a file nor a directory",
            path.display()
        )));
    }
    let root = std::fs::canonicalize(path).map_err(|err| io(path, err))?;
    for entry in walkdir::WalkDir::new(&root)
        .follow_links(true)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|err| {
            Error::new(ErrorKind::Io, format!("stage-in {}: {err}", path.display()))
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let target = std::fs::canonicalize(entry.path()).map_err(|err| io(entry.path(), err))?;
        if !target.starts_with(&root) {
            return Err(Error::invalid_input(format!(
                "stage-in {}: a symlink pointing outside the directory ({})",
                entry.path().display(),
                target.display()
            )));
        }
        let relative = entry
            .path()
            .strip_prefix(&root)
            .ok()
            .and_then(Path::to_str)
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "stage-in {}: a name that is not UTF-8",
                    entry.path().display()
                ))
            })?;
        let file_dest = format!("{}/{relative}", dest.trim_end_matches('/'));
        check_stage_path(&file_dest, false).map_err(|why| {
            Error::invalid_input(format!("stage-in {}: {why}", entry.path().display()))
        })?;
        let size = entry.metadata().map_err(|err| {
            Error::new(
                ErrorKind::Io,
                format!("stage-in {}: {err}", entry.path().display()),
            )
        })?;
        uploads.push(planned(entry.path(), file_dest, size.len())?);
    }
    Ok(())
}

/// A file of `size` bytes to send: hashed now if it is small enough to go in a tar
/// stream, else when it is sent.
fn planned(path: &Path, dest: String, size: u64) -> Result<Upload> {
    let (size, sha256) = if size > BATCHED_FILE_SIZE {
        (size, None)
    } else {
        let (size, sum) = sha256_of(path)?;
        (size, Some(sum))
    };
    Ok(Upload {
        dest,
        payload: Payload::File(path.to_owned()),
        size,
        sha256,
        found: None,
    })
}

/// A file's size and SHA-256, computed as it is read (bounded memory).
fn sha256_of(path: &Path) -> Result<(u64, String)> {
    let io = |err: std::io::Error| {
        Error::new(ErrorKind::Io, format!("stage-in {}: {err}", path.display())).with_source(err)
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = std::io::BufReader::with_capacity(256 * 1024, file);
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut reader, &mut hasher).map_err(io)?;
    Ok((size, format!("{:x}", hasher.finalize())))
}

/// The local file a fetched `remote` path goes to under `local_dir`, its directories
/// created; refused when the path (from the cluster) would leave `local_dir`.
async fn local_target(local_dir: &Path, remote: &str) -> Result<PathBuf> {
    check_stage_path(remote, true)
        .map_err(|why| Error::invalid_input(format!("stage-out {:?}: {why}", excerpt(remote))))?;
    let io = |err: std::io::Error| {
        Error::new(
            ErrorKind::Io,
            format!("stage-out into {}: {err}", local_dir.display()),
        )
    };
    let local = local_dir.join(remote);
    let parent = local.parent().unwrap_or(local_dir).to_owned();
    tokio::fs::create_dir_all(&parent).await.map_err(io)?;
    let base = tokio::fs::canonicalize(local_dir).await.map_err(io)?;
    let real_parent = tokio::fs::canonicalize(&parent).await.map_err(io)?;
    if !real_parent.starts_with(&base) {
        return Err(Error::invalid_input(format!(
            "stage-out {remote:?}: {} is a symlink leading out of {}",
            parent.display(),
            local_dir.display()
        )));
    }
    if tokio::fs::symlink_metadata(&local)
        .await
        .is_ok_and(|meta| meta.file_type().is_symlink())
    {
        return Err(Error::invalid_input(format!(
            "stage-out {remote:?}: {} is a symlink; it is not written through",
            local.display()
        )));
    }
    Ok(local)
}

/// Counts the bytes of one file's transfer for its progress.
struct Counted {
    transfer: Transfer,
    direction: Direction,
    file: String,
    local: Option<PathBuf>,
    total: u64,
    done: u64,
    reported: u64,
}

impl Counted {
    fn new(
        transfer: Transfer,
        direction: Direction,
        file: String,
        local: Option<PathBuf>,
        total: u64,
    ) -> Self {
        report(&transfer, direction, &file, local.as_deref(), 0, total);
        Self {
            transfer,
            direction,
            file,
            local,
            total,
            done: 0,
            reported: 0,
        }
    }

    fn advance(&mut self, bytes: usize) {
        self.reached(self.done + bytes as u64);
    }

    /// `done` bytes of the file have moved.
    fn reached(&mut self, done: u64) {
        self.done = done;
        if self.done - self.reported >= PROGRESS_STEP && self.done < self.total {
            self.reported = self.done;
            report(
                &self.transfer,
                self.direction,
                &self.file,
                self.local.as_deref(),
                self.done,
                self.total,
            );
        }
    }

    fn reader(self, inner: PipeInput) -> CountedReader {
        CountedReader {
            inner,
            counted: self,
        }
    }
}

struct CountedReader {
    inner: PipeInput,
    counted: Counted,
}

impl AsyncRead for CountedReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.counted.advance(buf.filled().len() - before);
        }
        polled
    }
}

/// Exactly the `total` bytes of a file for `staging.sh put`, hashed as they go, then a
/// line with their SHA-256. A file that turns out shorter or longer than planned ends the
/// stream without that line (so the cluster places nothing) and says so in `changed`.
struct Trailed {
    inner: tokio::io::Take<PipeInput>,
    hasher: Sha256,
    counted: Counted,
    state: TrailedState,
    changed: Arc<OnceLock<String>>,
}

enum TrailedState {
    Data,
    Trailer(std::io::Cursor<Vec<u8>>),
    Ended,
}

impl Trailed {
    fn new(inner: PipeInput, counted: Counted, changed: Arc<OnceLock<String>>) -> Self {
        Self {
            inner: inner.take(counted.total),
            hasher: Sha256::new(),
            counted,
            state: TrailedState::Data,
            changed,
        }
    }

    /// Ends the stream without the digest, for the reason `why`.
    fn stop(&mut self, why: String) -> Poll<std::io::Result<()>> {
        let _ = self.changed.set(why);
        self.state = TrailedState::Ended;
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Trailed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match &mut this.state {
            TrailedState::Trailer(line) => return Pin::new(line).poll_read(cx, buf),
            TrailedState::Ended => return Poll::Ready(Ok(())),
            TrailedState::Data => {}
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let read = &buf.filled()[before..];
        if !read.is_empty() {
            this.hasher.update(read);
            this.counted.advance(read.len());
            return Poll::Ready(Ok(()));
        }
        let (sent, total) = (this.counted.done, this.counted.total);
        if sent < total {
            return this.stop(format!(
                "the file ended after {sent} of its {total} bytes: it changed while it was sent"
            ));
        }
        let mut one = [0u8; 1];
        let mut beyond = ReadBuf::new(&mut one);
        ready!(Pin::new(this.inner.get_mut()).poll_read(cx, &mut beyond))?;
        if !beyond.filled().is_empty() {
            return this.stop(format!(
                "the file grew beyond its {total} bytes: it changed while it was sent"
            ));
        }
        let line = format!("{:x}\n", std::mem::take(&mut this.hasher).finalize());
        this.state = TrailedState::Trailer(std::io::Cursor::new(line.into_bytes()));
        self.poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use bytesize::ByteSize;

    use super::*;
    use crate::shell::LocalShell;

    /// `staging.sh list` run on a working directory holding `results/a.csv`,
    /// `results/sub/b`, `results/it's`, `results/pw -> /etc/passwd` and
    /// `sshlink -> ~/.ssh`, for `results/*`, `nothing*` and `sshlink`.
    const LISTING: &str = "file 1 2 results/a.csv\n\
        refused 1 a name with a control character, quote or backslash\n\
        refused 1 results/pw resolves outside the working directory\n\
        file 1 2 results/sub/b\n\
        missing 2\n\
        refused 3 sshlink resolves outside the working directory\n";

    #[test]
    fn a_listing_yields_its_files_once_and_the_error_for_the_rest() {
        let outs = [
            StageOut::new("results/*", "/back"),
            StageOut::new("nothing*", "/back"),
            StageOut::new("sshlink", "/back"),
        ];
        let refs: Vec<&StageOut> = outs.iter().collect();
        let (files, problem) = parse_listing(LISTING, &refs).unwrap();
        let names: Vec<_> = files.iter().map(|f| (f.remote.as_str(), f.size)).collect();
        assert_eq!(names, [("results/a.csv", 2), ("results/sub/b", 2)]);
        let problem = problem.unwrap();
        assert_eq!(problem.kind(), ErrorKind::InvalidInput);
        assert!(
            problem.message().contains("results/pw resolves outside"),
            "{problem}"
        );
        assert!(problem.message().contains("\"sshlink\""), "{problem}");

        let (_, missing) = parse_listing("missing 2\n", &refs).unwrap();
        assert_eq!(missing.unwrap().kind(), ErrorKind::NotFound);
        let fine = [
            StageOut::new("a", "/b"),
            StageOut::new("nothing*", "/b").missing_ok(true),
        ];
        let refs: Vec<&StageOut> = fine.iter().collect();
        assert!(parse_listing("missing 2\n", &refs).unwrap().1.is_none());
        for bad in ["file 9 1 x\n", "file 1 big x\n", "what\n"] {
            let err = parse_listing(bad, &refs).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{bad:?}");
        }
    }

    #[test]
    fn a_fetched_file_counts_only_when_size_and_digest_agree() {
        let sum = "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7";
        let said = Output {
            exit_code: Some(0),
            stderr: format!("size 2 sha256 {sum}\n").into_bytes(),
            ..Output::default()
        };
        let cases: &[((u64, &str), Option<ErrorKind>)] = &[
            ((2, sum), None),
            ((1, sum), Some(ErrorKind::Io)),
            ((2, "00"), Some(ErrorKind::Io)),
        ];
        for ((size, digest), expected) in cases {
            let got = check_fetched("a", &said, (*size, (*digest).to_owned()));
            assert_eq!(got.err().map(|e| e.kind()), *expected, "{size} {digest}");
        }
        let silent = Output::default();
        let err = check_fetched("a", &silent, (2, sum.to_owned())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnexpectedOutput);
    }

    #[test]
    fn caps_name_the_file_and_the_cap() {
        let limits = StageLimits::default()
            .with_max_file_size(ByteSize::b(10))
            .with_max_total_size(ByteSize::b(15));
        type Case<'a> = (&'a [(&'a str, u64)], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (&[("a", 10), ("b", 5)], None),
            (
                &[("a", 11)],
                Some(
                    "\"a\": 11 bytes, more than the per-file cap (stageLimits.maxFileSize) of 10 bytes",
                ),
            ),
            (
                &[("a", 10), ("b", 6)],
                Some(
                    "16 bytes with \"b\", more than the total cap (stageLimits.maxTotalSize) of 15 bytes",
                ),
            ),
        ];
        for (files, expected) in cases {
            let result = check_sizes("stage-in", files.iter().copied(), &limits);
            match expected {
                None => result.unwrap(),
                Some(text) => {
                    let err = result.unwrap_err();
                    assert_eq!(err.kind(), ErrorKind::InvalidInput);
                    assert!(err.message().contains(text), "{err}");
                }
            }
        }
    }

    #[test]
    fn long_argument_lists_split_under_the_command_line_limit() {
        let groups = (0..10_000).map(|i| vec![format!("dir/file-{i:05}"), "4096".to_owned()]);
        let chunks = command_chunks(groups);
        assert!(chunks.len() > 1);
        assert_eq!(chunks.iter().map(Vec::len).sum::<usize>(), 20_000);
        for chunk in &chunks {
            let quoted: usize = chunk.iter().map(|a| a.len() + 3).sum();
            assert!(quoted <= MAX_COMMAND_LINE / 2);
            assert_eq!(chunk.len() % 2, 0, "a pair is never split");
        }
    }

    #[test]
    fn small_files_go_together_and_large_or_dash_named_ones_alone() {
        let files: Vec<(String, u64)> = [
            ("a", 10),
            ("big", BATCHED_FILE_SIZE + 1),
            ("b", 10),
            ("-opt", 10),
            ("c", BATCHED_FILE_SIZE),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_owned(), s))
        .collect();
        let groups = in_batches(files, |(n, s)| (n.as_str(), *s));
        let names: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| g.iter().map(|(n, _)| n.as_str()).collect())
            .collect();
        assert_eq!(names, [vec!["big"], vec!["-opt"], vec!["a", "b", "c"]]);

        let many = (0..200).map(|i| (format!("f{i}"), BATCHED_FILE_SIZE));
        let groups = in_batches(many.collect(), |(n, s)| (n.as_str(), *s));
        assert!(
            groups
                .iter()
                .all(|g| g.len() as u64 * BATCHED_FILE_SIZE <= BATCH_BYTES)
        );
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), 200);

        let long = (0..20_000).map(|i| (format!("dir/{i:0>200}"), 1));
        let groups = in_batches(long.collect(), |(n, s)| (n.as_str(), *s));
        assert!(groups.len() > 1, "split under the command line's limit");
        for group in &groups {
            let line: usize = group.iter().map(|(n, _)| n.len() + 89).sum();
            assert!(line <= MAX_COMMAND_LINE / 2);
        }
    }

    /// A directory of 1000 small files (and one over the batch size) in and back out,
    /// through `staging.sh unpack` and `pack` on this machine: byte for byte, nothing left
    /// under a temporary name.
    #[tokio::test]
    async fn a_thousand_small_files_round_trip_byte_for_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("source");
        for i in 0..1000u32 {
            let dir = source.join(format!("d{}", i % 7));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join(format!("f{i}")),
                i.to_string().repeat(i as usize % 50),
            )
            .unwrap();
        }
        std::fs::write(
            source.join("large"),
            vec![7u8; (BATCHED_FILE_SIZE + 1) as usize],
        )
        .unwrap();
        let root = tmp.path().join("cluster");
        let staging = StagingDir::new(&LocalShell, root.to_str().unwrap(), Duration::from_secs(30));
        let staged = staging
            .stage_in(
                &[StageIn::path(&source, "in")],
                &StageLimits::default(),
                &Transfer::default(),
            )
            .await
            .unwrap();
        assert_eq!(staged.files.len(), 1001);
        let back = tmp.path().join("back");
        let fetched = staging
            .stage_out(
                &[StageOut::new("in", &back)],
                true,
                &StageLimits::default(),
                &Transfer::default(),
            )
            .await
            .unwrap();
        assert_eq!(fetched.files.len(), 1001);
        let mut seen = 0;
        for entry in walkdir::WalkDir::new(&source) {
            let entry = entry.unwrap();
            if !entry.file_type().is_file() {
                continue;
            }
            let relative = entry.path().strip_prefix(&source).unwrap();
            let original = std::fs::read(entry.path()).unwrap();
            assert_eq!(
                std::fs::read(root.join("in").join(relative)).unwrap(),
                original
            );
            assert_eq!(
                std::fs::read(back.join("in").join(relative)).unwrap(),
                original
            );
            seen += 1;
        }
        assert_eq!(seen, 1001);
        let leftovers: Vec<_> = walkdir::WalkDir::new(tmp.path())
            .into_iter()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains(PARTIAL_SUFFIX))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[tokio::test]
    async fn an_input_over_its_cap_is_refused_before_anything_is_sent() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cluster");
        let staging = StagingDir::new(&LocalShell, root.to_str().unwrap(), Duration::from_secs(10));
        let limits = StageLimits::default().with_max_file_size(ByteSize::b(3));
        let inputs = [StageIn::bytes(b"four".to_vec(), "big.txt")];
        let err = staging
            .stage_in(&inputs, &limits, &Transfer::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("\"big.txt\": 4 bytes"), "{err}");
        assert!(!root.exists(), "nothing was created");
    }

    /// What a large file's stream carries when the file has the size planned, fewer
    /// bytes or more: the digest line only after exactly the planned bytes.
    #[tokio::test]
    async fn a_large_file_is_followed_by_its_digest_only_if_it_kept_its_size() {
        let sum_abcd = "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589";
        let cases: &[(&[u8], &str, Option<&str>)] = &[
            (b"abcd", "abcd\n", None),
            (b"abc", "abc", Some("ended after 3 of its 4 bytes")),
            (b"abcde", "abcd", Some("grew beyond its 4 bytes")),
        ];
        for (file, expected, changed) in cases {
            let transfer = Transfer::default();
            let counted = Counted::new(transfer, Direction::In, "f".to_owned(), None, 4);
            let said = Arc::new(OnceLock::new());
            let input: PipeInput = Box::new(std::io::Cursor::new(file.to_vec()));
            let mut sent = String::new();
            Trailed::new(input, counted, Arc::clone(&said))
                .read_to_string(&mut sent)
                .await
                .unwrap();
            let expected = expected.replace("\n", &format!("{sum_abcd}\n"));
            assert_eq!(sent, expected, "{file:?}");
            match changed {
                None => assert!(said.get().is_none(), "{file:?}"),
                Some(text) => assert!(said.get().unwrap().contains(text), "{file:?}"),
            }
        }
    }

    /// A directory of links to the programs on this machine's PATH but python3's, with
    /// `python3` the script `python3` when given.
    fn tools_but_python(python3: Option<&str>) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let bin = tempfile::tempdir().unwrap();
        let path = std::env::var_os("PATH").unwrap();
        for dir in std::env::split_paths(&path) {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name();
                let link = bin.path().join(&name);
                if !name.to_string_lossy().starts_with("python") && !link.exists() {
                    std::os::unix::fs::symlink(entry.path(), link).unwrap();
                }
            }
        }
        if let Some(script) = python3 {
            let shim = bin.path().join("python3");
            std::fs::write(&shim, script).unwrap();
            std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        bin
    }

    /// `staging.sh put` on this machine, its digest an argument or the line after the bytes,
    /// written by each writer a cluster may have: python3, no python3 (`head | tee`), a
    /// python3 that cannot hash and one that finds no Python. The file is placed only under
    /// its digest.
    #[tokio::test]
    async fn put_places_a_file_only_under_its_digest_whichever_writer_the_cluster_has() {
        let sum_abcd = "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589";
        let cases: &[(Option<&str>, String, Option<&str>)] = &[
            (None, format!("abcd{sum_abcd}\n"), None),
            (None, format!("abce{sum_abcd}\n"), Some("arrived damaged")),
            (None, "abcd".to_owned(), Some("arrived without its SHA-256")),
            (
                None,
                "abc".to_owned(),
                Some("arrived cut short: 3 of 4 bytes"),
            ),
            (
                None,
                format!("abcd{}\n", &sum_abcd[..10]),
                Some("arrived damaged"),
            ),
            (Some(sum_abcd), "abcd".to_owned(), None),
            (Some(sum_abcd), "abce".to_owned(), Some("arrived damaged")),
            (
                Some(sum_abcd),
                "abc".to_owned(),
                Some("cut short: 3 of 4 bytes"),
            ),
        ];
        let python3 = std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|dir| dir.join("python3"))
            .find(|path| path.is_file())
            .expect("python3, to test the writer a cluster with python3 uses");
        let marks = tempfile::tempdir().unwrap();
        let ran = marks.path().join("python3 ran");
        let writers = [
            (
                "python3",
                Some(format!(
                    "#!/bin/sh\n: > '{}'\nexec '{}' \"$@\"\n",
                    ran.display(),
                    python3.display()
                )),
            ),
            ("no python3", None),
            (
                "a python3 that cannot hash",
                Some("#!/bin/sh\nexit 9\n".to_owned()),
            ),
            (
                "a python3 shim that finds no python",
                Some(
                    "#!/bin/sh\necho 'pyenv: python3: command not found' >&2\nexit 127\n"
                        .to_owned(),
                ),
            ),
        ];
        for (writer, python3) in writers {
            let bin = tools_but_python(python3.as_deref());
            let script = format!("PATH='{}'\n{STAGING}", bin.path().display());
            for (sum, stdin, refused) in cases {
                let _ = std::fs::remove_file(&ran);
                let tmp = tempfile::tempdir().unwrap();
                let root = tmp.path().to_str().unwrap();
                let mut args = vec!["put", root, "f", "4"];
                args.extend(sum);
                let command = Command::sh(&script, args);
                let input: PipeInput = Box::new(std::io::Cursor::new(stdin.clone().into_bytes()));
                let output = LocalShell.pipe(&command, Some(input), None).await.unwrap();
                let case = format!("{writer}, {sum:?}, {stdin:?}");
                assert_eq!(ran.exists(), writer == "python3", "{case}");
                let placed: Vec<_> = std::fs::read_dir(tmp.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                match refused {
                    None => {
                        assert_eq!(
                            output.exit_code,
                            Some(0),
                            "{case}: {}",
                            output.stderr_text()
                        );
                        assert_eq!(placed, ["f"], "{case}");
                        assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), b"abcd");
                    }
                    Some(why) => {
                        let err = refusal(output, "put").unwrap_err();
                        assert_eq!(err.kind(), ErrorKind::Io, "{case}");
                        assert!(err.is_temporary(), "{err}");
                        assert!(err.message().contains(why), "{case}: {err}");
                        assert!(placed.is_empty(), "{case}: {placed:?}");
                    }
                }
            }
        }
    }

    /// A file too large to batch is hashed as it is sent; when the cluster has a file of its
    /// size, it is hashed first: not sent again if unchanged, sent if it changed.
    #[tokio::test]
    async fn an_unchanged_large_input_is_not_sent_again_and_a_changed_one_is() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cluster");
        let local = tmp.path().join("large");
        let size = BATCHED_FILE_SIZE as usize + 1;
        std::fs::write(&local, vec![1u8; size]).unwrap();
        let staging = StagingDir::new(&LocalShell, root.to_str().unwrap(), Duration::from_secs(30));
        let inputs = [StageIn::path(&local, "in/large")];
        let moved = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&moved);
        let transfer = Transfer::default().with_progress(move |p| {
            seen.lock().unwrap().push(p.done);
        });
        let limits = StageLimits::default();
        let stage = || staging.stage_in(&inputs, &limits, &transfer);
        stage().await.unwrap();
        let first = std::mem::take(&mut *moved.lock().unwrap());
        assert_eq!(first.first(), Some(&0), "sent: it starts at 0");
        assert_eq!(
            std::fs::read(root.join("in/large")).unwrap(),
            vec![1u8; size]
        );

        stage().await.unwrap();
        let again = std::mem::take(&mut *moved.lock().unwrap());
        assert_eq!(again, [size as u64], "skipped: only its completion");

        std::fs::write(&local, vec![2u8; size]).unwrap();
        stage().await.unwrap();
        let changed = std::mem::take(&mut *moved.lock().unwrap());
        assert_eq!(changed.first(), Some(&0), "sent again: it starts at 0");
        assert_eq!(
            std::fs::read(root.join("in/large")).unwrap(),
            vec![2u8; size]
        );
    }

    /// Two stage-out rules that fetch the same files to two directories: each copy's
    /// progress is told apart by its local file, and runs from 0 to its size on its own.
    #[tokio::test]
    async fn progress_tells_two_copies_of_one_file_apart_by_their_local_file() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cluster");
        std::fs::create_dir_all(root.join("out")).unwrap();
        let large = 3 * PROGRESS_STEP as usize;
        std::fs::write(root.join("out/large"), vec![1u8; large]).unwrap();
        std::fs::write(root.join("out/small"), b"small").unwrap();
        let staging = StagingDir::new(&LocalShell, root.to_str().unwrap(), Duration::from_secs(30));
        let reports = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&reports);
        let transfer = Transfer::default().with_progress(move |p| {
            let local = p
                .local
                .expect("a stage-out names its local file")
                .to_owned();
            seen.lock()
                .unwrap()
                .push((p.file.to_owned(), local, p.done, p.total));
        });
        let (here, there) = (tmp.path().join("here"), tmp.path().join("there"));
        let rules = [StageOut::new("out", &here), StageOut::new("out", &there)];
        staging
            .stage_out(&rules, true, &StageLimits::default(), &transfer)
            .await
            .unwrap();
        let reports = reports.lock().unwrap();
        for (file, size) in [("out/large", large as u64), ("out/small", 5)] {
            for dir in [&here, &there] {
                let local = dir.join(file);
                let done: Vec<u64> = reports
                    .iter()
                    .filter(|(_, l, _, _)| *l == local)
                    .map(|(f, _, done, total)| {
                        assert_eq!((f.as_str(), *total), (file, size));
                        *done
                    })
                    .collect();
                assert_eq!(done.first(), Some(&0), "{local:?}: {done:?}");
                assert_eq!(done.last(), Some(&size), "{local:?}: {done:?}");
                assert!(done.is_sorted(), "{local:?}: {done:?}");
                assert_eq!(std::fs::read(&local).unwrap().len() as u64, size);
            }
        }
    }

    #[tokio::test]
    async fn an_unchanged_input_is_not_sent_again() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cluster");
        let staging = StagingDir::new(&LocalShell, root.to_str().unwrap(), Duration::from_secs(10));
        let inputs = [StageIn::bytes(b"same".to_vec(), "a.txt")];
        let moved = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&moved);
        let transfer = Transfer::default().with_progress(move |p| {
            seen.lock().unwrap().push(p.done);
        });
        staging
            .stage_in(&inputs, &StageLimits::default(), &transfer)
            .await
            .unwrap();
        let first = std::mem::take(&mut *moved.lock().unwrap());
        assert_eq!(first.first(), Some(&0), "sent: it starts at 0");
        let mtime = std::fs::metadata(root.join("a.txt"))
            .unwrap()
            .modified()
            .unwrap();
        staging
            .stage_in(&inputs, &StageLimits::default(), &transfer)
            .await
            .unwrap();
        assert_eq!(*moved.lock().unwrap(), [4], "skipped: only its completion");
        assert_eq!(
            std::fs::metadata(root.join("a.txt"))
                .unwrap()
                .modified()
                .unwrap(),
            mtime
        );
    }
}
