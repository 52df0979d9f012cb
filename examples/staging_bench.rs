//! Measures staging ([`batchbridge_core::staging`]) over the test bed's SSH
//! (`tests/testbed/up.sh` first) against `scp` and `rsync` of the same data in the same
//! run: one large file (1 GiB by default) in and out, then 1000 files of 4 KiB in and out,
//! in 4 rounds (`scp` runs twice, with OpenSSH's default cipher and with AES-GCM, the one
//! our connection offers first; the four transfers of a step take turns, so that over four
//! rounds each runs once in each place and a page cache warmed or a disk still busy
//! favours none; a `sync` before each transfer, untimed, so that none pays for the
//! writeback of the one before). Prints per round seconds, MiB/s, the ratios to scp and
//! rsync, and this process's peak resident memory during each staging step.
//!
//! ```text
//! cargo run --release --example staging_bench               # 1 GiB, 1000 small files, 4 rounds
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

/// AES-GCM, the cipher our connection offers first (see `SshConfig::ciphers`): `scp` runs
/// with it as well as with OpenSSH's default, to compare like with like.
const AES_GCM: &str = "aes128-gcm@openssh.com";

fn scp(
    facts: &SshFacts,
    from: &str,
    to: &str,
    recursive: bool,
    cipher: Option<&str>,
) -> Result<f64> {
    let mut args = ssh_options(facts);
    args.extend(["-q".into(), "-P".into(), facts.port.to_string()]);
    if let Some(cipher) = cipher {
        args.extend(["-c".into(), cipher.to_owned()]);
    }
    if recursive {
        args.push("-r".into());
    }
    args.extend([from.to_owned(), to.to_owned()]);
    timed("scp", &args)
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
    /// The round, or `all` for a transfer's sum over the rounds.
    round: String,
    what: String,
    ours: f64,
    scp: (f64, f64),
    rsync: f64,
    bytes: u64,
    rss: u64,
}

impl Row {
    /// Each transfer summed over the rounds: with as many rounds as transfers in a step
    /// (four), each of them ran once in each place.
    fn totals(rows: &[Row]) -> Vec<Row> {
        let mut totals: Vec<Row> = Vec::new();
        for row in rows {
            match totals.iter_mut().find(|total| total.what == row.what) {
                Some(total) => {
                    total.ours += row.ours;
                    total.scp = (total.scp.0 + row.scp.0, total.scp.1 + row.scp.1);
                    total.rsync += row.rsync;
                    total.bytes += row.bytes;
                    total.rss = total.rss.max(row.rss);
                }
                None => totals.push(Row {
                    round: "all".to_owned(),
                    what: row.what.clone(),
                    ..*row
                }),
            }
        }
        totals
    }

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

/// Runs our step and the three others' (scp, scp with AES-GCM, rsync) in an order that
/// turns with the round, so that over four rounds each runs once in each place: here a
/// transfer that follows others' gigabytes runs slower (the cluster and this process share
/// one disk), most of all one that waits for its file to reach the disk, as ours does.
async fn rotated(
    round: u32,
    ours: impl std::future::Future<Output = Result<(f64, u64)>>,
    theirs: [&dyn Fn() -> Result<f64>; 3],
) -> Result<((f64, u64), [f64; 3])> {
    let mut ours = Some(ours);
    let (mut mine, mut times) = ((0.0, 0), [0.0; 3]);
    for place in 0..4 {
        match (place + round as usize - 1) % 4 {
            0 => {
                if let Some(step) = ours.take() {
                    mine = step.await?;
                }
            }
            other => times[other - 1] = theirs[other - 1]()?,
        }
    }
    Ok((mine, times))
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
        let timeout = std::time::Duration::from_secs(300);
        let limits = StageLimits::default();
        let transfer = Transfer::default();
        let mut rows = Vec::new();
        let ours_dir = format!("{base}/ours");
        let staging = StagingDir::new(self.shell, &ours_dir, timeout);
        let row =
            |what: String, bytes: u64, (ours, rss): (f64, u64), [scp, gcm, rsync]: [f64; 3]| Row {
                round: round.to_string(),
                what,
                ours,
                scp: (scp, gcm),
                rsync,
                bytes,
                rss,
            };
        let here = |name: &str| local.join(name).display().to_string();
        let there = |name: &str| format!("{target}:{base}/{name}");

        // One large file.
        let large_mib = self.large_mib;
        let big = local.join("big.bin");
        noise_file(&big, large_mib << 20, u64::from(round))?;
        let bytes = large_mib << 20;
        let big_arg = big.to_str().unwrap_or_default().to_owned();
        let inputs = [StageIn::path(&big, "big.bin")];
        let (mine, theirs) = rotated(
            round,
            ours(async {
                staging
                    .stage_in(&inputs, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            [
                &|| scp(facts, &big_arg, &there("scp.bin"), false, None),
                &|| scp(facts, &big_arg, &there("scp-gcm.bin"), false, Some(AES_GCM)),
                &|| rsync(facts, &big_arg, &there("rsync.bin")),
            ],
        )
        .await?;
        rows.push(row(format!("{large_mib} MiB in"), bytes, mine, theirs));
        std::fs::remove_file(&big)?;

        let back = local.join("back");
        let outputs = [StageOut::new("big.bin", &back).when(StageWhen::Always)];
        let (mine, theirs) = rotated(
            round,
            ours(async {
                staging
                    .stage_out(&outputs, true, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            [
                &|| scp(facts, &there("scp.bin"), &here("scp.bin"), false, None),
                &|| {
                    scp(
                        facts,
                        &there("scp-gcm.bin"),
                        &here("scp-gcm.bin"),
                        false,
                        Some(AES_GCM),
                    )
                },
                &|| rsync(facts, &there("rsync.bin"), &here("rsync.bin")),
            ],
        )
        .await?;
        rows.push(row(format!("{large_mib} MiB out"), bytes, mine, theirs));
        std::fs::remove_dir_all(&back)?;
        for copy in ["scp.bin", "scp-gcm.bin", "rsync.bin"] {
            std::fs::remove_file(local.join(copy))?;
        }
        remote(
            self.shell,
            "cd -- \"$1\" && rm -f -- ours/big.bin scp.bin scp-gcm.bin rsync.bin",
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
        let (mine, theirs) = rotated(
            round,
            ours(async {
                staging
                    .stage_in(&inputs, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            [
                &|| scp(facts, &small_arg, &there("scp-small"), true, None),
                &|| {
                    scp(
                        facts,
                        &small_arg,
                        &there("scp-gcm-small"),
                        true,
                        Some(AES_GCM),
                    )
                },
                &|| {
                    rsync(
                        facts,
                        &format!("{small_arg}/"),
                        &format!("{}/", there("rsync-small")),
                    )
                },
            ],
        )
        .await?;
        rows.push(row(
            format!("{small_files} × 4 KiB in"),
            bytes,
            mine,
            theirs,
        ));

        let outputs = [StageOut::new("small", &back)];
        let (mine, theirs) = rotated(
            round,
            ours(async {
                staging
                    .stage_out(&outputs, true, &limits, &transfer)
                    .await
                    .map(drop)
            }),
            [
                &|| scp(facts, &there("scp-small"), &here("scp-small"), true, None),
                &|| {
                    scp(
                        facts,
                        &there("scp-gcm-small"),
                        &here("scp-gcm-small"),
                        true,
                        Some(AES_GCM),
                    )
                },
                &|| {
                    rsync(
                        facts,
                        &format!("{}/", there("rsync-small")),
                        &format!("{}/", here("rsync-small")),
                    )
                },
            ],
        )
        .await?;
        rows.push(row(
            format!("{small_files} × 4 KiB out"),
            bytes,
            mine,
            theirs,
        ));
        Ok(rows)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let large_mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let small_files: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rounds: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
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
    for row in rows.iter().chain(&Row::totals(&rows)) {
        row.print();
    }
    Ok(())
}
