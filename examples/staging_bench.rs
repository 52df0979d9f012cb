//! Measures staging ([`batchbridge_core::staging`]) over the test bed's SSH
//! (`tests/testbed/up.sh` first) against `scp` and `rsync` of the same data in the same
//! run: one large file (1 GiB by default) in and out, then 1000 files of 4 KiB in and out,
//! in 3 rounds (ours first in odd rounds, last in even ones, so that a page cache warmed
//! or a neighbour's load favours neither; a `sync` before each transfer, untimed, so that
//! none pays for the writeback of the one before). `scp` runs twice: with OpenSSH's
//! default cipher and with AES-GCM, the one our connection offers first. Prints per round
//! seconds, MiB/s, the ratios to scp and rsync, and this process's peak resident memory
//! during each staging step.
//!
//! ```text
//! cargo run --release --example staging_bench               # 1 GiB, 1000 small files, 3 rounds
//! cargo run --release --example staging_bench -- 256 100 1  # 256 MiB, 100 small files, 1 round
//! ```

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use batchbridge_core::conformance::{peak_rss, reset_peak_rss};
use batchbridge_core::remote::StagingDir;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::staging::{StageIn, StageLimits, StageOut, StageWhen, Transfer};
use batchbridge_core::{Error, ErrorKind, Result};
use batchbridge_testbed::{SshFacts, ssh_facts};

/// The ssh options scp and rsync use: the test bed's key and host keys, nothing else.
fn ssh_options(facts: &SshFacts) -> Vec<String> {
    vec![
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        format!("UserKnownHostsFile={}", facts.known_hosts.display()),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
        "-i".into(),
        facts.private_key.display().to_string(),
    ]
}

/// Writes every dirty page to disk, untimed, so that no transfer pays for the writeback of
/// the one before it (the test bed's cluster and this process share one disk).
fn settle() -> Result<()> {
    std::process::Command::new("sync").status()?;
    Ok(())
}

/// Runs a local program and returns how long it took; fails when it fails.
fn timed(program: &str, args: &[String]) -> Result<f64> {
    settle()?;
    let start = Instant::now();
    let status = std::process::Command::new(program).args(args).status()?;
    if !status.success() {
        return Err(Error::new(
            ErrorKind::CommandFailed,
            format!("{program} {args:?}: {status}"),
        ));
    }
    Ok(start.elapsed().as_secs_f64())
}

/// `scp` with OpenSSH's default cipher, then with AES-GCM (the cipher our master offers
/// first, see `SshConfig::ciphers`) to `TO-gcm`: the seconds of each, to compare like with
/// like.
fn scp(facts: &SshFacts, from: &str, to: &str, recursive: bool) -> Result<(f64, f64)> {
    let run = |cipher: Option<&str>| {
        let mut args = ssh_options(facts);
        args.extend(["-q".into(), "-P".into(), facts.port.to_string()]);
        if let Some(cipher) = cipher {
            args.extend(["-c".into(), cipher.to_owned()]);
        }
        if recursive {
            args.push("-r".into());
        }
        let to = match cipher {
            Some(_) => format!("{to}-gcm"),
            None => to.to_owned(),
        };
        args.extend([from.to_owned(), to]);
        timed("scp", &args)
    };
    Ok((run(None)?, run(Some("aes128-gcm@openssh.com"))?))
}

fn rsync(facts: &SshFacts, from: &str, to: &str) -> Result<f64> {
    let ssh = format!("ssh -p {} {}", facts.port, ssh_options(facts).join(" "));
    let args = vec![
        "-a".into(),
        "-e".into(),
        ssh,
        from.to_owned(),
        to.to_owned(),
    ];
    timed("rsync", &args)
}

async fn remote(shell: &dyn Shell, script: &str, args: &[&str]) -> Result<String> {
    let output = shell
        .run(&Command::sh(script, args.iter().copied()))
        .await?
        .check("a benchmark step")?;
    Ok(output.stdout_text())
}

fn noise_file(path: &Path, bytes: u64, seed: u64) -> Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut state = seed | 1;
    let mut block = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for byte in block.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        let n = left.min(block.len() as u64) as usize;
        file.write_all(&block[..n])?;
        left -= n as u64;
    }
    file.flush()?;
    Ok(())
}

struct Row {
    round: u32,
    what: String,
    ours: f64,
    scp: (f64, f64),
    rsync: f64,
    bytes: u64,
    rss: u64,
}

impl Row {
    fn print(&self) {
        let mib = self.bytes as f64 / f64::from(1 << 20);
        println!(
            "| {} | {} | {:.2} s ({:.0} MiB/s) | {:.2} s ({:.0} MiB/s) | {:.2} s | {:.2} s ({:.0} MiB/s) | {:.2}× | {:.2}× | {:.2}× | {} MiB |",
            self.round,
            self.what,
            self.ours,
            mib / self.ours,
            self.scp.0,
            mib / self.scp.0,
            self.scp.1,
            self.rsync,
            mib / self.rsync,
            self.scp.0 / self.ours,
            self.scp.1 / self.ours,
            self.rsync / self.ours,
            self.rss >> 20
        );
    }
}

/// One staging step of ours: its seconds and peak RSS.
async fn ours<F: std::future::Future<Output = Result<()>>>(step: F) -> Result<(f64, u64)> {
    settle()?;
    reset_peak_rss();
    let start = Instant::now();
    step.await?;
    Ok((start.elapsed().as_secs_f64(), peak_rss()))
}

/// Runs `first` then `second`, or the other way round.
async fn in_order<A, B>(
    swap: bool,
    first: impl std::future::Future<Output = Result<A>>,
    second: impl FnOnce() -> Result<B>,
) -> Result<(A, B)> {
    if swap {
        let b = second()?;
        Ok((first.await?, b))
    } else {
        let a = first.await?;
        Ok((a, second()?))
    }
}

struct Bench<'a> {
    facts: &'a SshFacts,
    shell: &'a dyn Shell,
    target: String,
    large_mib: u64,
    small_files: u64,
}

impl Bench<'_> {
    async fn round(&self, round: u32, local: &Path, base: &str) -> Result<Vec<Row>> {
        let (facts, target) = (self.facts, &self.target);
        let ours_last = round.is_multiple_of(2);
        let timeout = std::time::Duration::from_secs(300);
        let limits = StageLimits::default();
        let transfer = Transfer::default();
        let mut rows = Vec::new();
        let ours_dir = format!("{base}/ours");
        let staging = StagingDir::new(self.shell, &ours_dir, timeout);

        // One large file.
        let large_mib = self.large_mib;
        let big = local.join("big.bin");
        noise_file(&big, large_mib << 20, u64::from(round))?;
        let bytes = large_mib << 20;
        let big_arg = big.to_str().unwrap_or_default().to_owned();
        let inputs = [StageIn::path(&big, "big.bin")];
        let ((ours_in, rss_in), (scp_in, rsync_in)) = in_order(
            ours_last,
            ours(async {
                staging
                    .stage_in(&inputs, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            || {
                let scp_in = scp(facts, &big_arg, &format!("{target}:{base}/scp.bin"), false)?;
                let rsync_in = rsync(facts, &big_arg, &format!("{target}:{base}/rsync.bin"))?;
                Ok((scp_in, rsync_in))
            },
        )
        .await?;
        rows.push(Row {
            round,
            what: format!("{large_mib} MiB in"),
            ours: ours_in,
            scp: scp_in,
            rsync: rsync_in,
            bytes,
            rss: rss_in,
        });
        std::fs::remove_file(&big)?;

        let back = local.join("back");
        let outputs = [StageOut::new("big.bin", &back).when(StageWhen::Always)];
        let scp_copy = local.join("scp.bin");
        let rsync_copy = local.join("rsync.bin");
        let ((ours_out, rss_out), (scp_out, rsync_out)) = in_order(
            ours_last,
            ours(async {
                staging
                    .stage_out(&outputs, true, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            || {
                let scp_out = scp(
                    facts,
                    &format!("{target}:{base}/scp.bin"),
                    scp_copy.to_str().unwrap_or_default(),
                    false,
                )?;
                let rsync_out = rsync(
                    facts,
                    &format!("{target}:{base}/rsync.bin"),
                    rsync_copy.to_str().unwrap_or_default(),
                )?;
                Ok((scp_out, rsync_out))
            },
        )
        .await?;
        std::fs::remove_dir_all(&back)?;
        std::fs::remove_file(&scp_copy)?;
        std::fs::remove_file(local.join("scp.bin-gcm"))?;
        std::fs::remove_file(&rsync_copy)?;
        rows.push(Row {
            round,
            what: format!("{large_mib} MiB out"),
            ours: ours_out,
            scp: scp_out,
            rsync: rsync_out,
            bytes,
            rss: rss_out,
        });
        remote(
            self.shell,
            "rm -f -- \"$1\"/ours/big.bin \"$1\"/scp.bin \"$1\"/scp.bin-gcm \"$1\"/rsync.bin",
            &[base],
        )
        .await?;

        // Many small files.
        let small_files = self.small_files;
        let small = local.join("small");
        std::fs::create_dir_all(&small)?;
        for i in 0..small_files {
            noise_file(&small.join(format!("f{i:04}.dat")), 4096, i + 2)?;
        }
        let bytes = small_files * 4096;
        let small_arg = small.to_str().unwrap_or_default().to_owned();
        let inputs = [StageIn::path(&small, "small")];
        let ((ours_in, rss_in), (scp_in, rsync_in)) = in_order(
            ours_last,
            ours(async {
                staging
                    .stage_in(&inputs, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            || {
                let scp_in = scp(
                    facts,
                    &small_arg,
                    &format!("{target}:{base}/scp-small"),
                    true,
                )?;
                let rsync_in = rsync(
                    facts,
                    &format!("{small_arg}/"),
                    &format!("{target}:{base}/rsync-small/"),
                )?;
                Ok((scp_in, rsync_in))
            },
        )
        .await?;
        rows.push(Row {
            round,
            what: format!("{small_files} × 4 KiB in"),
            ours: ours_in,
            scp: scp_in,
            rsync: rsync_in,
            bytes,
            rss: rss_in,
        });

        let outputs = [StageOut::new("small", &back)];
        let ((ours_out, rss_out), (scp_out, rsync_out)) = in_order(
            ours_last,
            ours(async {
                staging
                    .stage_out(&outputs, true, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            || {
                let scp_out = scp(
                    facts,
                    &format!("{target}:{base}/scp-small"),
                    local.join("scp-small").to_str().unwrap_or_default(),
                    true,
                )?;
                let rsync_out = rsync(
                    facts,
                    &format!("{target}:{base}/rsync-small/"),
                    &format!("{}/", local.join("rsync-small").display()),
                )?;
                Ok((scp_out, rsync_out))
            },
        )
        .await?;
        rows.push(Row {
            round,
            what: format!("{small_files} × 4 KiB out"),
            ours: ours_out,
            scp: scp_out,
            rsync: rsync_out,
            bytes,
            rss: rss_out,
        });
        Ok(rows)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let large_mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let small_files: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rounds: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let facts = ssh_facts();
    let shell = facts.key_shell();
    let bench = Bench {
        facts: &facts,
        shell: &shell,
        target: format!("{}@{}", facts.user, facts.host),
        large_mib,
        small_files,
    };
    let mut rows = Vec::new();
    for round in 1..=rounds {
        let run = format!("{:x}-{round}", std::process::id());
        let base = remote(
            &shell,
            "mkdir -p \"$HOME/.batchbridge/staging-bench-$1\" && cd \"$HOME/.batchbridge/staging-bench-$1\" && pwd -P",
            &[&run],
        )
        .await?
        .trim()
        .to_owned();
        let local = tempfile::tempdir()?;
        let done = bench.round(round, local.path(), &base).await;
        remote(&shell, "rm -rf -- \"$1\"", &[&base]).await?;
        rows.extend(done?);
    }
    println!(
        "| round | transfer | batchbridge | scp | scp, AES-GCM | rsync | scp time ÷ ours | scp AES-GCM time ÷ ours | rsync time ÷ ours | peak RSS (ours) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        row.print();
    }
    Ok(())
}
