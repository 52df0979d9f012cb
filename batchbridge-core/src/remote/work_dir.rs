//! [`WorkDir`]: where a command-line backend keeps its jobs on the cluster, and
//! [`environment_file`], the `env.sh` written there.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use crate::error::{Error, ErrorKind, Result};
use crate::shell::{Command, Shell};
use crate::spec::JobSpec;
use crate::wrapper::ResolvedDir;

/// The most bytes an environment file may have once quoted: it travels as one argument of
/// the submit command, which must stay well under the remote shell's 128 KiB limit.
pub const MAX_ENVIRONMENT_BYTES: usize = 64 * 1024;

/// A work directory on a cluster, resolved to an absolute path (and created) on first use.
///
/// ```
/// use batchbridge_core::remote::WorkDir;
///
/// assert!(WorkDir::new(".batchbridge/slurm").is_ok());
/// assert!(WorkDir::new("").is_err());
/// assert!(WorkDir::new("two\nlines").is_err());
/// ```
#[derive(Debug)]
pub struct WorkDir {
    configured: String,
    absolute: OnceCell<String>,
}

impl WorkDir {
    /// A work directory at `path`: absolute, or relative to the login directory.
    pub fn new(path: impl Into<String>) -> Result<Self> {
        let configured = path.into();
        if configured.is_empty() || configured.contains(['\0', '\n', '\r']) {
            return Err(Error::invalid_input(
                "work_dir: must be a non-empty path without NUL bytes or line breaks",
            ));
        }
        Ok(Self {
            configured,
            absolute: OnceCell::new(),
        })
    }

    /// The path as configured.
    pub fn configured(&self) -> &str {
        &self.configured
    }

    /// The absolute path, with `jobs/`, `ids/` and `events/` created the first time it is
    /// asked for.
    pub async fn resolve(&self, shell: &dyn Shell, timeout: Duration) -> Result<&str> {
        let dir = self
            .absolute
            .get_or_try_init(|| async {
                let command = Command::sh(
                    "mkdir -p -- \"$1/jobs\" \"$1/ids\" \"$1/events\" && cd -- \"$1\" && pwd -P",
                    [self.configured.as_str()],
                )
                .timeout(timeout);
                let output = shell
                    .run(&command)
                    .await?
                    .check("creating the work directory")?;
                let dir = output.stdout_text().trim_end_matches('\n').to_owned();
                if !dir.starts_with('/') || dir.contains(['\n', '\r']) {
                    return Err(Error::new(
                        ErrorKind::UnexpectedOutput,
                        format!("the work directory resolved to {dir:?}, not an absolute path"),
                    ));
                }
                Ok(dir)
            })
            .await?;
        Ok(dir)
    }
}

/// `env.sh`: the spec's [`environment_script`](JobSpec::environment_script), refused (with
/// a clear error) beyond [`MAX_ENVIRONMENT_BYTES`].
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_core::remote::{MAX_ENVIRONMENT_BYTES, environment_file};
///
/// let mut spec = JobSpec::new(JobKey::new("k")?, "n", "true");
/// spec.environment.insert("BIG".into(), "x".repeat(MAX_ENVIRONMENT_BYTES));
/// assert!(environment_file(&spec).is_err());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn environment_file(spec: &JobSpec) -> Result<String> {
    let file = spec.environment_script()?;
    if file.len() > MAX_ENVIRONMENT_BYTES {
        return Err(Error::invalid_input(format!(
            "environment: {} bytes once quoted, more than the {MAX_ENVIRONMENT_BYTES} a submit \
             can carry; put large values in a file the script reads",
            file.len()
        )));
    }
    Ok(file)
}

/// The `events/` directory of a work directory, for the event follower, which resolves the
/// work directory (within `timeout`) when it first opens.
#[derive(Debug)]
pub(super) struct EventsOf {
    pub(super) work_dir: Arc<WorkDir>,
    pub(super) timeout: Duration,
}

#[async_trait]
impl ResolvedDir for EventsOf {
    async fn events_dir(&self, shell: &dyn Shell) -> Result<String> {
        Ok(format!(
            "{}/events",
            self.work_dir.resolve(shell, self.timeout).await?
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::JobKey;

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "name", "echo hi")
    }

    /// What bash makes of `variable` after reading `lines`.
    fn bash_value(lines: &str, variable: &str) -> String {
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("{lines}\nprintf '%s' \"${variable}\""))
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    #[test]
    fn environment_values_are_quoted_never_evaluated() {
        let mut spec = spec();
        spec.environment
            .insert("HOSTILE".into(), "$(touch /tmp/x) `id` ' \"\r\n;".into());
        spec.environment.insert("EMPTY".into(), String::new());
        let file = environment_file(&spec).unwrap();
        assert!(file.starts_with("# The environment of batchbridge job key-1.\n"));
        assert_eq!(bash_value(&file, "HOSTILE"), spec.environment["HOSTILE"]);
        assert_eq!(bash_value(&file, "EMPTY"), "");
    }

    #[test]
    fn an_environment_too_large_for_the_command_line_is_refused() {
        let mut spec = spec();
        spec.environment
            .insert("BIG".into(), "x".repeat(MAX_ENVIRONMENT_BYTES));
        let err = environment_file(&spec).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("environment"), "{err}");
        spec.environment.insert("BIG".into(), "x".repeat(60 * 1024));
        assert!(environment_file(&spec).is_ok());
    }
}
