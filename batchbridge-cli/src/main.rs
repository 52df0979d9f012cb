//! `batchbridge`, the command line: one set of commands for SLURM, HTCondor, PBS and this
//! machine, built on the batchbridge library's public API.
//!
//! `batchbridge --help` lists the commands, the config file, and the exit codes.

// A command-line tool's output is its purpose.
#![allow(clippy::print_stdout)]

mod cli;
mod commands;
mod config;
mod describe;
mod exit;
mod output;
mod record;
mod spec;
mod table;
mod terminal;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    log_to_stderr(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start: {err}");
            return exit::Exit::Failure.into();
        }
    };
    let ran = runtime.block_on(commands::run(cli));
    // Dropping the runtime would wait for its blocking threads, one of which may sit in a
    // terminal read (the cancel prompt a second Ctrl-C answered) until Enter is pressed.
    runtime.shutdown_background();
    match ran {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            terminal::print_error(&err);
            err.exit.into()
        }
    }
}

/// Core's log (tracing) to stderr: what RUST_LOG says, else nothing without `-v`, warnings
/// and connections (info) with `-v`, every remote command (debug) with `-vv`, trace beyond.
fn log_to_stderr(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::filter::LevelFilter;

    let level = match verbose {
        0 => LevelFilter::OFF,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let filter = match std::env::var_os("RUST_LOG") {
        Some(_) => EnvFilter::from_default_env(),
        None => EnvFilter::default().add_directive(level.into()),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(console::colors_enabled_stderr())
        .without_time()
        .init();
}
