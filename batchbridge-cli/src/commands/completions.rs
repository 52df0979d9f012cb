//! `completions`: a shell's completion script.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::{CliResult, Exit};

/// Prints `shell`'s completion script.
pub(super) fn print(shell: clap_complete::Shell) -> CliResult<u8> {
    let mut command = Cli::command();
    // clap_complete panics on a failed write; a reader that stops early (`| head`) is no
    // failure of ours.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "batchbridge", &mut script);
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&script).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => Err(err.into()),
        _ => Ok(Exit::Success as u8),
    }
}
