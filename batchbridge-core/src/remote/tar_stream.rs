//! The tar streams that move many small staged files in one remote command each way
//! ([`super::staging`]): written here for a stage-in, read here for a stage-out. What
//! arrives from the cluster is not trusted: every member must be exactly the regular file
//! asked for, in the order asked ([`check_member`]), before a byte of it is written.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tar::EntryType;

use crate::error::{Error, ErrorKind, Result, excerpt};

/// The buffer each file is read and written with: large enough that a gigabyte costs a
/// thousand system calls, small enough to stay out of the memory budget.
pub(super) const FILE_BUFFER: usize = 1 << 20;

/// One file of a stage-in's stream: its name in the archive (relative to the working
/// directory), its size, and its bytes.
pub(super) struct Outgoing<'a> {
    pub(super) name: &'a str,
    pub(super) size: u64,
    pub(super) data: Box<dyn Read + 'a>,
}

/// Writes `files` as one tar stream into `sink`, calling `sent` with each one's index
/// after it; a file that
/// yields other than its size fails the stream (the cluster's check would refuse it too).
pub(super) fn write_archive<'a>(
    sink: impl Write,
    files: impl Iterator<Item = io::Result<Outgoing<'a>>>,
    mut sent: impl FnMut(usize),
) -> io::Result<()> {
    let mut builder = tar::Builder::new(io::BufWriter::with_capacity(FILE_BUFFER, sink));
    builder.mode(tar::HeaderMode::Deterministic);
    for (index, file) in files.enumerate() {
        let file = file?;
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(EntryType::Regular);
        header.set_size(file.size);
        header.set_mode(0o644);
        let mut counted = CountingReader {
            inner: file.data.take(file.size),
            count: 0,
        };
        builder.append_data(&mut header, file.name, &mut counted)?;
        if counted.count != file.size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: {} bytes read, {} expected: it changed while it was sent",
                    file.name, counted.count, file.size
                ),
            ));
        }
        sent(index);
    }
    builder.into_inner()?.flush()
}

struct CountingReader<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// One file a stage-out's stream must bring: its name in the archive, its size as
/// listed, and the temporary file it is written to.
pub(super) struct Expected {
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) partial: PathBuf,
}

/// What a member's header says, as far as deciding whether to take it goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct MemberHeader<'a> {
    pub(super) kind: EntryType,
    pub(super) name: &'a [u8],
    pub(super) link: Option<&'a [u8]>,
    pub(super) size: u64,
}

/// How an accepted member is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// Its bytes follow.
    Bytes,
    /// A hard link to the earlier member of that index (two names of one file on the
    /// cluster): a copy of what that member brought.
    CopyOf(usize),
}

/// Whether the `index`th member, described by `header`, is what `expected` asks for at
/// that place; why not otherwise. Pure: the table in the tests holds the hostile cases.
pub(super) fn check_member(
    header: &MemberHeader<'_>,
    index: usize,
    expected: &[Expected],
) -> std::result::Result<Take, String> {
    let name = String::from_utf8_lossy(header.name);
    let Some(wanted) = expected.get(index) else {
        return Err(format!(
            "a member {:?} beyond the {} files asked for",
            excerpt(&name),
            expected.len()
        ));
    };
    if name.starts_with('/') {
        return Err(format!(
            "a member with an absolute name {:?}",
            excerpt(&name)
        ));
    }
    if name.split('/').any(|part| part == "..") {
        return Err(format!(
            "a member {:?} leaving the directory",
            excerpt(&name)
        ));
    }
    if header.name != wanted.name.as_bytes() {
        return Err(format!(
            "a member {:?} where {:?} was asked for",
            excerpt(&name),
            wanted.name
        ));
    }
    match header.kind {
        EntryType::Regular | EntryType::Continuous if header.size == wanted.size => Ok(Take::Bytes),
        EntryType::Regular | EntryType::Continuous => Err(format!(
            "{:?} holds {} bytes, {} were listed (did it change?)",
            wanted.name, header.size, wanted.size
        )),
        EntryType::Link => {
            let link = header.link.unwrap_or_default();
            expected[..index]
                .iter()
                .position(|earlier| earlier.name.as_bytes() == link)
                .map(Take::CopyOf)
                .ok_or_else(|| {
                    format!(
                        "{:?} is a hard link to {:?}, not a file fetched before it",
                        wanted.name,
                        excerpt(&String::from_utf8_lossy(link))
                    )
                })
        }
        EntryType::Symlink => Err(format!(
            "{:?} is a symlink (to {:?}), not a regular file",
            wanted.name,
            excerpt(&String::from_utf8_lossy(header.link.unwrap_or_default()))
        )),
        other => Err(format!(
            "{:?} is a {other:?} member, not a regular file",
            wanted.name
        )),
    }
}

/// Reads a stage-out's stream from `source`: each member checked, written to its
/// [`Expected::partial`], hashed as it is written. The size and SHA-256 of each, in
/// order; `progress` hears of each file's bytes as they arrive.
pub(super) fn read_archive(
    source: impl Read,
    expected: &[Expected],
    mut progress: impl FnMut(usize, u64),
) -> Result<Vec<(u64, String)>> {
    let refused = |why: String| Error::invalid_input(format!("stage-out refused: {why}"));
    let broken = |err: io::Error| {
        Error::new(
            ErrorKind::Io,
            format!("stage-out: the tar stream from the cluster: {err}"),
        )
        .with_source(err)
        .temporary()
    };
    let mut archive = tar::Archive::new(source);
    let mut received: Vec<(u64, String)> = Vec::with_capacity(expected.len());
    for entry in archive.entries().map_err(broken)? {
        let mut entry = entry.map_err(broken)?;
        let name = entry.path_bytes().into_owned();
        let link = entry.link_name_bytes().map(|l| l.into_owned());
        let header = MemberHeader {
            kind: entry.header().entry_type(),
            name: &name,
            link: link.as_deref(),
            size: entry.size(),
        };
        let index = received.len();
        let take = check_member(&header, index, expected).map_err(refused)?;
        let wanted = &expected[index];
        let got = match take {
            Take::Bytes => receive(&mut entry, &wanted.partial, Sync::Later, |done| {
                progress(index, done);
            })
            .map_err(|err| local_error(&wanted.partial, err))?,
            Take::CopyOf(earlier) => {
                std::fs::copy(&expected[earlier].partial, &wanted.partial)
                    .map_err(|err| local_error(&wanted.partial, err))?;
                received[earlier].clone()
            }
        };
        received.push(got);
    }
    if received.len() < expected.len() {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "stage-out: the tar stream from the cluster ended after {} of {} files",
                received.len(),
                expected.len()
            ),
        )
        .temporary());
    }
    // What follows the last member (the end blocks) is read, so the cluster's tar is
    // never cut off by a closed pipe.
    io::copy(&mut archive.into_inner(), &mut io::sink()).map_err(broken)?;
    sync_files(expected.iter().map(|e| e.partial.as_path()))
        .map_err(|err| local_error(&expected[0].partial, err))?;
    Ok(received)
}

/// Whether [`receive`] syncs the file it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sync {
    Now,
    /// The caller syncs a whole batch at once ([`sync_files`]).
    Later,
}

/// Makes `files` durable before they are renamed. On Linux one `syncfs` per file system
/// they are on: a thousand `fsync`s of small files cost seconds (2.9 s measured on the
/// test VM), one `syncfs` a tenth of one. Elsewhere each file's own `fsync`.
fn sync_files<'a>(files: impl Iterator<Item = &'a Path>) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let mut devices = Vec::new();
        for file in files {
            let opened = std::fs::File::open(file)?;
            let device = opened.metadata()?.dev();
            if !devices.contains(&device) {
                devices.push(device);
                nix::unistd::syncfs(&opened).map_err(io::Error::from)?;
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        for file in files {
            std::fs::File::open(file)?.sync_all()?;
        }
        Ok(())
    }
}

fn local_error(path: &Path, err: io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("stage-out {}: {err}", path.display()),
    )
    .with_source(err)
}

/// Streams `reader` into a new file at `partial`, hashing as it writes, then syncs it
/// unless `sync` says the caller will: its size and SHA-256. `progress` hears the bytes written so far.
pub(super) fn receive(
    reader: &mut impl Read,
    partial: &Path,
    sync: Sync,
    mut progress: impl FnMut(u64),
) -> io::Result<(u64, String)> {
    let mut file = std::fs::File::create(partial)?;
    let flusher = match sync {
        Sync::Now => Some(Flusher::start(&file)?),
        Sync::Later => None,
    };
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; FILE_BUFFER];
    let mut done = 0u64;
    let mut flushed = 0u64;
    loop {
        let n = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        hasher.update(&buffer[..n]);
        file.write_all(&buffer[..n])?;
        done += n as u64;
        progress(done);
        if let Some(flusher) = &flusher
            && done - flushed >= FLUSH_STEP
        {
            flusher.nudge();
            flushed = done;
        }
    }
    if let Some(flusher) = flusher {
        flusher.finish()?;
        file.sync_all()?;
    }
    Ok((done, format!("{:x}", hasher.finalize())))
}

/// How much of a file [`receive`] writes between two nudges of its [`Flusher`].
const FLUSH_STEP: u64 = 32 << 20;

/// Flushes a file to disk from a second thread while it is still written, a step behind
/// the writer, so that the `fsync` before its rename waits for the last step rather than
/// the whole file: a GiB's `fsync` alone cost 0.3 s on the test VM, and over a second
/// behind other writers of the same disk.
struct Flusher {
    nudges: Option<std::sync::mpsc::SyncSender<()>>,
    thread: std::thread::JoinHandle<io::Result<()>>,
}

impl Flusher {
    fn start(file: &std::fs::File) -> io::Result<Self> {
        let file = file.try_clone()?;
        // One nudge waiting at most: a writer ahead of the disk does not queue flushes.
        let (nudges, nudged) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("batchbridge-flush".to_owned())
            .spawn(move || {
                for () in nudged {
                    file.sync_data()?;
                }
                Ok(())
            })?;
        Ok(Self {
            nudges: Some(nudges),
            thread,
        })
    }

    /// Asks for a flush of what has been written, unless one is asked for already.
    fn nudge(&self) {
        if let Some(nudges) = &self.nudges {
            let _ = nudges.try_send(());
        }
    }

    /// Waits for the flushes asked for; the first one that failed is the error.
    fn finish(mut self) -> io::Result<()> {
        drop(self.nudges.take());
        self.thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the flushing thread panicked")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of several flush steps, flushed while written, arrives whole and synced, with
    /// the digest `sha256sum` gives for it; progress counts every byte.
    #[test]
    fn a_file_flushed_while_it_is_written_arrives_whole() {
        let dir = tempfile::tempdir().unwrap();
        let partial = dir.path().join(".big.bb-partial");
        let size = 2 * FLUSH_STEP + 5;
        let mut reader = io::repeat(0).take(size);
        let mut reached = 0;
        let received = receive(&mut reader, &partial, Sync::Now, |done| reached = done).unwrap();
        // head -c 67108869 /dev/zero | sha256sum
        let sum = "e137416c8a18fa8914ef0cc00dc3c0ec5248a719465647a54755612c25dd14b1";
        assert_eq!(received, (size, sum.to_owned()));
        assert_eq!(reached, size);
        assert_eq!(std::fs::metadata(&partial).unwrap().len(), size);
    }

    fn expected(names: &[(&str, u64)]) -> Vec<Expected> {
        names
            .iter()
            .map(|(name, size)| Expected {
                name: (*name).to_owned(),
                size: *size,
                partial: PathBuf::from(format!("/nowhere/{name}")),
            })
            .collect()
    }

    #[test]
    fn a_member_is_taken_only_when_it_is_the_regular_file_asked_for() {
        let asked = expected(&[("out/a.csv", 3), ("out/b.csv", 3)]);
        type Case<'a> = (
            EntryType,
            &'a str,
            Option<&'a str>,
            u64,
            usize,
            Result<Take, &'a str>,
        );
        let cases: &[Case<'_>] = &[
            (EntryType::Regular, "out/a.csv", None, 3, 0, Ok(Take::Bytes)),
            (
                EntryType::Continuous,
                "out/a.csv",
                None,
                3,
                0,
                Ok(Take::Bytes),
            ),
            (EntryType::Regular, "out/b.csv", None, 3, 1, Ok(Take::Bytes)),
            (
                EntryType::Link,
                "out/b.csv",
                Some("out/a.csv"),
                0,
                1,
                Ok(Take::CopyOf(0)),
            ),
            (
                EntryType::Regular,
                "/etc/passwd",
                None,
                3,
                0,
                Err("an absolute name"),
            ),
            (
                EntryType::Regular,
                "../x",
                None,
                3,
                0,
                Err("leaving the directory"),
            ),
            (
                EntryType::Regular,
                "out/../../x",
                None,
                3,
                0,
                Err("leaving the directory"),
            ),
            (
                EntryType::Regular,
                "out/b.csv",
                None,
                3,
                0,
                Err("where \"out/a.csv\" was asked"),
            ),
            (
                EntryType::Regular,
                "./out/a.csv",
                None,
                3,
                0,
                Err("was asked for"),
            ),
            (
                EntryType::Regular,
                "out/c.csv",
                None,
                3,
                2,
                Err("beyond the 2 files"),
            ),
            (
                EntryType::Regular,
                "out/a.csv",
                None,
                4,
                0,
                Err("holds 4 bytes, 3 were listed"),
            ),
            (
                EntryType::Symlink,
                "out/a.csv",
                Some("/root/.ssh"),
                0,
                0,
                Err("a symlink"),
            ),
            (
                EntryType::Symlink,
                "out/a.csv",
                Some("b.csv"),
                0,
                0,
                Err("a symlink"),
            ),
            (
                EntryType::Link,
                "out/a.csv",
                Some("/etc/shadow"),
                0,
                0,
                Err("a hard link"),
            ),
            (
                EntryType::Link,
                "out/a.csv",
                Some("out/b.csv"),
                0,
                0,
                Err("a hard link"),
            ),
            (
                EntryType::Link,
                "out/b.csv",
                Some("../out/a.csv"),
                0,
                1,
                Err("a hard link"),
            ),
            (
                EntryType::Char,
                "out/a.csv",
                None,
                0,
                0,
                Err("not a regular file"),
            ),
            (
                EntryType::Block,
                "out/a.csv",
                None,
                0,
                0,
                Err("not a regular file"),
            ),
            (
                EntryType::Fifo,
                "out/a.csv",
                None,
                0,
                0,
                Err("not a regular file"),
            ),
            (
                EntryType::Directory,
                "out/a.csv",
                None,
                0,
                0,
                Err("not a regular file"),
            ),
            (
                EntryType::GNUSparse,
                "out/a.csv",
                None,
                3,
                0,
                Err("not a regular file"),
            ),
        ];
        for (kind, name, link, size, index, want) in cases {
            let header = MemberHeader {
                kind: *kind,
                name: name.as_bytes(),
                link: link.map(str::as_bytes),
                size: *size,
            };
            let got = check_member(&header, *index, &asked);
            match (want, got) {
                (Ok(take), Ok(got)) => assert_eq!(*take, got, "{kind:?} {name}"),
                (Err(why), Err(got)) => assert!(got.contains(why), "{kind:?} {name}: {got}"),
                (want, got) => panic!("{kind:?} {name}: {got:?}, expected {want:?}"),
            }
        }
    }

    /// A stream of `members` (kind, name, link, bytes) as a tar of the cluster would
    /// write them, built with the raw headers so the hostile ones are possible.
    fn archive(members: &[(EntryType, &str, &str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (kind, name, link, bytes) in members {
            let mut header = tar::Header::new_old();
            let raw = header.as_old_mut();
            raw.name[..name.len()].copy_from_slice(name.as_bytes());
            raw.linkname[..link.len()].copy_from_slice(link.as_bytes());
            header.set_entry_type(*kind);
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            out.extend_from_slice(header.as_bytes());
            out.extend_from_slice(bytes);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.resize(out.len() + 1024, 0);
        out
    }

    #[test]
    fn a_hostile_stream_writes_nothing_outside_and_nothing_under_a_final_name() {
        let tmp = tempfile::tempdir().unwrap();
        let partial = |name: &str| tmp.path().join(format!(".{name}.bb-partial"));
        let asked = vec![
            Expected {
                name: "a".into(),
                size: 2,
                partial: partial("a"),
            },
            Expected {
                name: "b".into(),
                size: 2,
                partial: partial("b"),
            },
        ];
        // One member: its type, name, link target and content.
        type Member<'a> = (EntryType, &'a str, &'a str, &'a [u8]);
        let hostile: &[&[Member<'_>]] = &[
            &[(EntryType::Regular, "../escaped", "", b"xx")],
            &[(EntryType::Regular, "/tmp/escaped", "", b"xx")],
            &[(EntryType::Symlink, "a", "/etc/passwd", b"")],
            &[
                (EntryType::Regular, "a", "", b"ok"),
                (EntryType::Link, "b", "/etc/passwd", b""),
            ],
            &[
                (EntryType::Regular, "a", "", b"ok"),
                (EntryType::Regular, "b", "", b"ok"),
                (EntryType::Regular, "c", "", b"ok"),
            ],
        ];
        for members in hostile {
            let err = read_archive(&archive(members)[..], &asked, |_, _| ()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{members:?}: {err}");
        }
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.ends_with(".bb-partial"))
            .collect();
        assert!(names.is_empty(), "only temporary names: {names:?}");
        assert!(!tmp.path().parent().unwrap().join("escaped").exists());

        let short = archive(&[(EntryType::Regular, "a", "", b"ok")]);
        let err = read_archive(&short[..], &asked, |_, _| ()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.is_temporary(), "{err}");

        let linked = archive(&[
            (EntryType::Regular, "a", "", b"ok"),
            (EntryType::Link, "b", "a", b""),
        ]);
        let got = read_archive(&linked[..], &asked, |_, _| ()).unwrap();
        assert_eq!(got[0], got[1]);
        assert_eq!(std::fs::read(partial("b")).unwrap(), b"ok");
    }

    #[test]
    fn what_is_written_reads_back_member_for_member() {
        let tmp = tempfile::tempdir().unwrap();
        let files: Vec<(String, Vec<u8>)> = (0..300)
            .map(|i| (format!("d{}/f{i}", i % 3), vec![i as u8; i * 7]))
            .collect();
        let mut stream = Vec::new();
        let mut sent = 0;
        write_archive(
            &mut stream,
            files.iter().map(|(name, bytes)| {
                Ok(Outgoing {
                    name,
                    size: bytes.len() as u64,
                    data: Box::new(&bytes[..]),
                })
            }),
            |index| {
                assert_eq!(index, sent, "each file's index, in order");
                sent += 1;
            },
        )
        .unwrap();
        assert_eq!(sent, files.len());
        let asked: Vec<Expected> = files
            .iter()
            .enumerate()
            .map(|(i, (name, bytes))| Expected {
                name: name.clone(),
                size: bytes.len() as u64,
                partial: tmp.path().join(format!("p{i}")),
            })
            .collect();
        let got = read_archive(&stream[..], &asked, |_, _| ()).unwrap();
        for (i, ((_, bytes), (size, sum))) in files.iter().zip(&got).enumerate() {
            assert_eq!(
                std::fs::read(tmp.path().join(format!("p{i}"))).unwrap(),
                *bytes
            );
            assert_eq!(*size, bytes.len() as u64);
            assert_eq!(*sum, format!("{:x}", Sha256::digest(bytes)));
        }

        let mut short = Vec::new();
        let err = write_archive(
            &mut short,
            std::iter::once(Ok(Outgoing {
                name: "a",
                size: 5,
                data: Box::new(&b"abc"[..]),
            })),
            |_| (),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("changed while it was sent"),
            "{err}"
        );
    }
}
