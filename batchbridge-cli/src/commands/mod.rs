//! The commands: this router hands each to its module, one a command, which does it and
//! says what the tool exits with.

mod cancel;
mod clusters;
mod completions;
mod context;
mod forget;
mod get;
mod login;
mod logs;
mod man;
mod run;
mod sent;
mod status;
mod submit;
mod wait;

use std::io::Write;

use crate::cli::{Cli, Command};
use crate::exit::{CliResult, Exit};
use context::Context;

/// Runs the command line's command; `Ok` holds the exit code.
pub(crate) async fn run(cli: Cli) -> CliResult<u8> {
    // Generated from the command line alone: no config is read, no cluster opened.
    match &cli.command {
        Command::Completions { shell } => return completions::print(*shell),
        Command::Man { dir } => return man::print(dir.as_deref()),
        _ => {}
    }
    let mut context = Context::new(&cli)?;
    // run and submit --follow ask what to do on Ctrl-C themselves. Elsewhere Ctrl-C ends the
    // command here rather than killing the process, so that the clusters' SSH shells are
    // dropped: their masters stopped and private directories (with the control socket)
    // removed, which a process killed by SIGINT leaves behind.
    if matches!(
        cli.command,
        Command::Run { .. } | Command::Submit { follow: true, .. }
    ) {
        return dispatch(&mut context, cli.command).await;
    }
    tokio::select! {
        done = dispatch(&mut context, cli.command) => done,
        _ = tokio::signal::ctrl_c() => Ok(Exit::Interrupted as u8),
    }
}

/// Does what `command` asks.
async fn dispatch(context: &mut Context, command: Command) -> CliResult<u8> {
    match command {
        Command::Submit {
            job,
            wait,
            follow,
            dry_run,
        } => submit::submit(context, job, wait, follow, dry_run).await,
        Command::Run {
            job,
            cancel_on_interrupt,
        } => run::run(context, job, cancel_on_interrupt).await,
        Command::Status { jobs, state, since } => {
            status::status(context, &jobs, &state, since).await
        }
        Command::Wait { jobs, timeout } => wait::wait(context, &jobs, timeout).await,
        Command::Logs {
            job,
            tail,
            follow,
            task,
        } => logs::logs(context, &job, tail, follow, task).await,
        Command::Get { job, pattern, dir } => get::get(context, &job, &pattern, dir).await,
        Command::Cancel { jobs } => cancel::cancel(context, &jobs).await,
        Command::Clusters => clusters::clusters(context).await,
        Command::Login { name, persist } => login::login(context, name, persist).await,
        Command::Logout { name } => login::logout(context, name).await,
        Command::Forget { jobs, ended } => forget::forget(context, &jobs, ended).await,
        Command::Completions { shell } => completions::print(shell),
        Command::Man { dir } => man::print(dir.as_deref()),
    }
}

/// Writes `text` (a completion script, a manual page) to standard output; a reader that
/// stops early (`| head`) is no failure of ours.
fn print_generated(text: &[u8]) -> CliResult<u8> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => Err(err.into()),
        _ => Ok(Exit::Success as u8),
    }
}
