//! `completions`: a shell's completion script.

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::CliResult;

/// Prints `shell`'s completion script.
pub(super) fn print(shell: clap_complete::Shell) -> CliResult<u8> {
    let mut command = Cli::command();
    // clap_complete panics on a failed write, so the script is written to memory first.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "batchbridge", &mut script);
    super::print_generated(&script)
}
