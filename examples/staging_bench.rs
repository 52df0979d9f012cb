//! Measures staging ([`batchbridge_core::staging`]) over the test bed's SSH
//! (`tests/testbed/up.sh` first) against `scp` and `rsync` of the same data in the same
//! run: one large file (1 GiB by default) in and out, then 1000 files of 4 KiB in and out.
//! Prints seconds, MiB/s, the ratio to scp and rsync, and this process's peak resident
//! memory during each staging step.
//!
//! ```text
//! cargo run --release --example staging_bench             # 1 GiB, 1000 small files
//! cargo run --release --example staging_bench -- 256 100  # 256 MiB, 100 small files
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

/// Runs a local program and returns how long it took; fails when it fails.
fn timed(program: &str, args: &[String]) -> Result<f64> {
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

fn scp(facts: &SshFacts, from: &str, to: &str, recursive: bool) -> Result<f64> {
    let mut args = ssh_options(facts);
    args.extend(["-q".into(), "-P".into(), facts.port.to_string()]);
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
    what: String,
    ours: f64,
    scp: f64,
    rsync: f64,
    bytes: u64,
    rss: u64,
}

impl Row {
    fn print(&self) {
        let mib = self.bytes as f64 / f64::from(1 << 20);
        println!(
            "| {} | {:.2} s ({:.0} MiB/s) | {:.2} s ({:.0} MiB/s) | {:.2} s ({:.0} MiB/s) | {:.2}× | {:.2}× | {} MiB |",
            self.what,
            self.ours,
            mib / self.ours,
            self.scp,
            mib / self.scp,
            self.rsync,
            mib / self.rsync,
            self.scp / self.ours,
            self.rsync / self.ours,
            self.rss >> 20
        );
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let large_mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let small_files: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let facts = ssh_facts();
    let shell = facts.key_shell();
    let target = format!("{}@{}", facts.user, facts.host);
    let run = format!("{:x}", std::process::id());
    let base = remote(
        &shell,
        "mkdir -p \"$HOME/.batchbridge/staging-bench-$1\" && cd \"$HOME/.batchbridge/staging-bench-$1\" && pwd -P",
        &[&run],
    )
    .await?
    .trim()
    .to_owned();
    let local = tempfile::tempdir()?;
    let timeout = std::time::Duration::from_secs(120);
    let limits = StageLimits::default();
    let transfer = Transfer::default();
    let mut rows = Vec::new();

    // One large file.
    let big = local.path().join("big.bin");
    noise_file(&big, large_mib << 20, 1)?;
    let bytes = large_mib << 20;
    let ours_dir = format!("{base}/ours");
    let staging = StagingDir::new(&shell, &ours_dir, timeout);
    reset_peak_rss();
    let start = Instant::now();
    staging
        .stage_in(&[StageIn::path(&big, "big.bin")], &limits, &transfer)
        .await?;
    let ours_in = start.elapsed().as_secs_f64();
    let rss_in = peak_rss();
    let scp_in = scp(
        &facts,
        big.to_str().unwrap_or_default(),
        &format!("{target}:{base}/scp.bin"),
        false,
    )?;
    let rsync_in = rsync(
        &facts,
        big.to_str().unwrap_or_default(),
        &format!("{target}:{base}/rsync.bin"),
    )?;
    rows.push(Row {
        what: format!("{large_mib} MiB in"),
        ours: ours_in,
        scp: scp_in,
        rsync: rsync_in,
        bytes,
        rss: rss_in,
    });
    std::fs::remove_file(&big)?;

    let back = local.path().join("back");
    reset_peak_rss();
    let start = Instant::now();
    staging
        .stage_out(
            &[StageOut::new("big.bin", &back).when(StageWhen::Always)],
            true,
            &limits,
            &transfer,
        )
        .await?;
    let ours_out = start.elapsed().as_secs_f64();
    let rss_out = peak_rss();
    std::fs::remove_dir_all(&back)?;
    let scp_copy = local.path().join("scp.bin");
    let scp_out = scp(
        &facts,
        &format!("{target}:{base}/scp.bin"),
        scp_copy.to_str().unwrap_or_default(),
        false,
    )?;
    std::fs::remove_file(&scp_copy)?;
    let rsync_copy = local.path().join("rsync.bin");
    let rsync_out = rsync(
        &facts,
        &format!("{target}:{base}/rsync.bin"),
        rsync_copy.to_str().unwrap_or_default(),
    )?;
    std::fs::remove_file(&rsync_copy)?;
    rows.push(Row {
        what: format!("{large_mib} MiB out"),
        ours: ours_out,
        scp: scp_out,
        rsync: rsync_out,
        bytes,
        rss: rss_out,
    });
    remote(
        &shell,
        "rm -f -- \"$1\"/ours/big.bin \"$1\"/scp.bin \"$1\"/rsync.bin",
        &[&base],
    )
    .await?;

    // Many small files.
    let small = local.path().join("small");
    std::fs::create_dir_all(&small)?;
    for i in 0..small_files {
        noise_file(&small.join(format!("f{i:04}.dat")), 4096, i + 2)?;
    }
    let bytes = small_files * 4096;
    reset_peak_rss();
    let start = Instant::now();
    staging
        .stage_in(&[StageIn::path(&small, "small")], &limits, &transfer)
        .await?;
    let ours_in = start.elapsed().as_secs_f64();
    let rss_in = peak_rss();
    let small_arg = small.to_str().unwrap_or_default().to_owned();
    let scp_in = scp(
        &facts,
        &small_arg,
        &format!("{target}:{base}/scp-small"),
        true,
    )?;
    let rsync_in = rsync(
        &facts,
        &format!("{small_arg}/"),
        &format!("{target}:{base}/rsync-small/"),
    )?;
    rows.push(Row {
        what: format!("{small_files} × 4 KiB in"),
        ours: ours_in,
        scp: scp_in,
        rsync: rsync_in,
        bytes,
        rss: rss_in,
    });

    reset_peak_rss();
    let start = Instant::now();
    staging
        .stage_out(&[StageOut::new("small", &back)], true, &limits, &transfer)
        .await?;
    let ours_out = start.elapsed().as_secs_f64();
    let rss_out = peak_rss();
    let scp_out = scp(
        &facts,
        &format!("{target}:{base}/scp-small"),
        local.path().join("scp-small").to_str().unwrap_or_default(),
        true,
    )?;
    let rsync_out = rsync(
        &facts,
        &format!("{target}:{base}/rsync-small/"),
        &format!("{}/", local.path().join("rsync-small").display()),
    )?;
    rows.push(Row {
        what: format!("{small_files} × 4 KiB out"),
        ours: ours_out,
        scp: scp_out,
        rsync: rsync_out,
        bytes,
        rss: rss_out,
    });
    remote(&shell, "rm -rf -- \"$1\"", &[&base]).await?;

    println!(
        "| transfer | batchbridge | scp | rsync | scp time ÷ ours | rsync time ÷ ours | peak RSS (ours) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in &rows {
        row.print();
    }
    Ok(())
}
