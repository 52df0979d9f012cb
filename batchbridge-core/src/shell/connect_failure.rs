//! What a failed `ssh` login means, read from its log: the one reading the login host and
//! every jump host share.

use crate::error::{Error, ErrorKind};

/// Turns the master's log into an error a user can act on.
pub(super) fn classify_connect_failure(target: &str, log: &str, exit_code: Option<i32>) -> Error {
    let mut detail = log
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && !line.starts_with("Warning: Permanently added"))
        .unwrap_or("ssh exited without a message");
    let has = |needle: &str| log.contains(needle);
    let (kind, summary) = if has("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || has("Host key verification failed")
        || has("host key is known")
    {
        // The line naming the host whose key failed (a ProxyJump hop's, perhaps) says more
        // than the last one ("Connection closed by UNKNOWN port 65535").
        detail = log
            .lines()
            .map(str::trim)
            .find(|line| line.contains("host key is known for ") || line.contains("Host key for "))
            .unwrap_or(detail);
        (
            ErrorKind::HostKeyMismatch,
            "the host's key is not among the trusted host keys",
        )
    } else if has("Permission denied") || has("Too many authentication failures") {
        (
            ErrorKind::AuthenticationFailed,
            "the credentials were refused",
        )
    } else {
        (ErrorKind::Unreachable, "cannot connect")
    };
    let code = exit_code.map_or_else(String::new, |c| format!(", ssh exit {c}"));
    Error::new(kind, format!("{target}: {summary} ({detail}{code})"))
}
