//! `login` and `logout`: one interactive OpenSSH login that the cluster's later commands
//! reuse through its control socket (ControlMaster, ControlPersist), so a password or
//! one-time password is typed once, at a terminal, and never asked for again meanwhile.

use std::path::Path;
use std::time::Duration;

use super::context::Context;
use crate::config::Login;
use crate::exit::{CliError, CliResult, Exit};

/// How long `login` waits for the master to leave the terminal's session, and `logout` for
/// it to end.
const LOGOUT_WAIT: Duration = Duration::from_secs(5);

/// `login`: opens the cluster's master connection on this terminal, unless one is open.
pub(super) async fn login(
    context: &mut Context,
    name: Option<String>,
    persist: Option<Duration>,
) -> CliResult<u8> {
    let name = name.unwrap_or_else(|| context.chosen_cluster());
    let (ssh, login) = context.clusters.login_settings(&name)?;
    if login.is_open() {
        println!(
            "{name}: logged in already; `batchbridge logout {name}` closes the login ({})",
            login.socket.display()
        );
        return Ok(Exit::Success as u8);
    }
    // ssh prompts on the terminal, not on stdin; without one it could only fail.
    if std::fs::File::open("/dev/tty").is_err() {
        return Err(CliError::usage(format!(
            "{name}: `batchbridge login` needs a terminal to ask for what the cluster asks"
        )));
    }
    context.clusters.private_login_dir()?;
    // A socket left by a master that did not end cleanly would make ssh give up being one.
    let _ = std::fs::remove_file(&login.socket);
    let persist = persist.unwrap_or(login.persist);
    let command = ssh
        .login_command(&login.socket, persist)
        .map_err(CliError::from)?;
    let status = tokio::process::Command::from(command)
        .status()
        .await
        .map_err(|err| {
            CliError::new(
                Exit::Failure,
                format!("cannot start {}: {err}", ssh.ssh_program.display()),
            )
        })?;
    if !status.success() || !login.is_open() || !detached(&ssh.ssh_program, &login).await {
        // ssh has said why on the terminal.
        return Err(CliError::new(
            Exit::Refused,
            format!(
                "{name}: login failed (ssh {})",
                status
                    .code()
                    .map_or_else(|| "killed".to_owned(), |code| format!("exit {code}"))
            ),
        ));
    }
    println!(
        "{name}: logged in; commands use this login until it has been unused for {}. \
         `batchbridge logout {name}` closes it",
        humantime::format_duration(persist)
    );
    Ok(Exit::Success as u8)
}

/// Whether the master `ssh -f` left behind is in a session of its own (within
/// [`LOGOUT_WAIT`]). `ssh -f` returns as soon as it has forked the master, which leaves the
/// terminal's session a moment later: a terminal closed in between (a script's `script`,
/// a window closed right after the command) would hang it up.
async fn detached(ssh_program: &Path, login: &Login) -> bool {
    let ours = session_of("self");
    let deadline = tokio::time::Instant::now() + LOGOUT_WAIT;
    while tokio::time::Instant::now() < deadline {
        let check = tokio::process::Command::new(ssh_program)
            .args(["-F", "none", "-S"])
            .arg(&login.socket)
            .args(["-O", "check", "--", "batchbridge-login"])
            .stdin(std::process::Stdio::null())
            .output()
            .await;
        // "Master running (pid=4242)"
        let master = check.ok().and_then(|output| {
            let said = String::from_utf8_lossy(&output.stderr).into_owned();
            let pid = said.split_once("(pid=")?.1.split_once(')')?.0.to_owned();
            Some(pid)
        });
        match master.and_then(|pid| session_of(&pid)) {
            Some(session) if Some(session) != ours => return true,
            Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            None => return false,
        }
    }
    false
}

/// The session of process `pid` (a number or `self`): the field after state, parent and
/// group past the command's name in `/proc/PID/stat`.
fn session_of(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// `logout`: asks the cluster's master to end (`ssh -O exit`) and waits until it has.
pub(super) async fn logout(context: &mut Context, name: Option<String>) -> CliResult<u8> {
    let name = name.unwrap_or_else(|| context.chosen_cluster());
    let (ssh, login) = context.clusters.login_settings(&name)?;
    if !login.is_open() {
        let _ = std::fs::remove_file(&login.socket);
        println!("{name}: no login open");
        return Ok(Exit::Success as u8);
    }
    let output = tokio::process::Command::new(&ssh.ssh_program)
        .args(["-F", "none", "-S"])
        .arg(&login.socket)
        .args(["-O", "exit", "--", "batchbridge-login"])
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    if !output.status.success() || !closed(&login).await {
        return Err(CliError::new(
            Exit::Failure,
            format!(
                "{name}: the login did not end: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        ));
    }
    println!("{name}: logged out");
    Ok(Exit::Success as u8)
}

/// Whether the login ends within [`LOGOUT_WAIT`].
async fn closed(login: &Login) -> bool {
    let deadline = tokio::time::Instant::now() + LOGOUT_WAIT;
    while login.is_open() {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}
