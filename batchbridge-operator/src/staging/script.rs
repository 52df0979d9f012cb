//! The job's script with its inputs and outputs around it: the lines that fetch the inputs
//! before the script's own first command and the trap that sends the outputs when it exits.
//! Pure text in, text out, so the tables below pin what reaches the cluster.

use std::fmt::Write as _;

use batchbridge_core::{Error, Result};

use crate::crd::StageWhen;

/// Where an input's bytes come from, as the job's script sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    /// Carried in the script itself (a ConfigMap's or Secret's key: at most
    /// [`MAX_INLINE_BYTES`] for all of them together).
    Inline {
        /// The bytes.
        bytes: Vec<u8>,
        /// Readable by the job's user only (a Secret's key).
        private: bool,
    },
    /// Fetched by the job from this presigned URL.
    Url(String),
}

/// One input to write at `path` (relative to the working directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedInput {
    /// Where, relative to the working directory.
    pub path: String,
    /// What.
    pub source: InputSource,
}

/// One output to send from `path` (relative to the working directory) to a presigned URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedOutput {
    /// The file, relative to the working directory.
    pub path: String,
    /// When, by the script's exit code.
    pub when: StageWhen,
    /// The presigned PUT URL.
    pub url: String,
}

/// The most bytes of ConfigMap and Secret keys one job carries in its script (base64 makes
/// a third more of it): a ConfigMap holds at most 1 MiB, and the script travels with every
/// submit.
pub const MAX_INLINE_BYTES: usize = 1 << 20;

/// The shell functions the inputs and outputs use. `curl` or `wget`, whichever the node
/// has, chosen when the job runs (the login node and the compute node may differ); files
/// are written under a temporary name and renamed, so a failed fetch never leaves half a
/// file under the input's name.
const PRELUDE: &str = r#"# batchbridge: the BatchJob's spec.inputs and spec.outputs
__bb_get() {
    __bb_tmp="$2.bb-partial.$$"
    if command -v curl >/dev/null 2>&1; then
        curl -fsS --retry 3 -o "$__bb_tmp" -- "$1"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -t 3 -O "$__bb_tmp" -- "$1"
    else
        echo "batchbridge: neither curl nor wget on $(hostname): cannot fetch input $2" >&2
        false
    fi || { rm -f -- "$__bb_tmp"; echo "batchbridge: input $2 could not be fetched" >&2; exit 66; }
    mv -f -- "$__bb_tmp" "$2"
}
__bb_inline() {
    __bb_tmp="$2.bb-partial.$$"
    printf '%s' "$1" | base64 -d >"$__bb_tmp" && mv -f -- "$__bb_tmp" "$2" ||
        { rm -f -- "$__bb_tmp"; echo "batchbridge: input $2 could not be written" >&2; exit 66; }
}
__bb_put() {
    if [ ! -f "$2" ]; then
        echo "batchbridge: output $2 is missing, not sent" >&2
        return 1
    fi
    if command -v curl >/dev/null 2>&1; then
        curl -fsS --retry 3 -o /dev/null -T "$2" -- "$1"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -t 3 -O /dev/null --method=PUT --body-file="$2" -- "$1"
    else
        echo "batchbridge: neither curl nor wget on $(hostname): cannot send output $2" >&2
        false
    fi && echo "batchbridge: output $2 sent" >&2 || echo "batchbridge: output $2 could not be sent" >&2
}
"#;

/// `script` with `inputs` fetched before its first command and `outputs` sent when it exits
/// (by an EXIT trap that keeps the script's exit code). The script's leading comment block
/// (its scheduler directives) stays first. Exit code 66 means an input could not be had.
/// A script that sets its own EXIT trap replaces the one that sends the outputs.
///
/// ```
/// use batchbridge_operator::crd::StageWhen;
/// use batchbridge_operator::staging::{InputSource, StagedInput, StagedOutput, wrap_script};
///
/// let inputs = [StagedInput {
///     path: "data/in.csv".into(),
///     source: InputSource::Inline { bytes: b"a,b\n".to_vec(), private: false },
/// }];
/// let outputs = [StagedOutput {
///     path: "out.txt".into(),
///     when: StageWhen::Always,
///     url: "http://store/b/out.txt?X-Amz-Signature=1".into(),
/// }];
/// let script = wrap_script("#!/bin/bash\n#DIRECTIVE -n 1\nwc -l data/in.csv > out.txt\n", &inputs, &outputs)?;
/// assert!(script.starts_with("#!/bin/bash\n#DIRECTIVE -n 1\n# batchbridge"));
/// assert!(script.ends_with("wc -l data/in.csv > out.txt\n"));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn wrap_script(
    script: &str,
    inputs: &[StagedInput],
    outputs: &[StagedOutput],
) -> Result<String> {
    if inputs.is_empty() && outputs.is_empty() {
        return Ok(script.to_owned());
    }
    let (header, body) = split_header(script);
    let mut wrapped = String::with_capacity(script.len() + PRELUDE.len() + 256);
    wrapped.push_str(header);
    if !header.is_empty() && !header.ends_with('\n') {
        wrapped.push('\n');
    }
    wrapped.push_str(PRELUDE);
    for input in inputs {
        let path = quote(&input.path, "input path")?;
        if let Some(parent) = parent_of(&input.path) {
            writeln!(wrapped, "mkdir -p -- {}", quote(parent, "input path")?).ok();
        }
        match &input.source {
            InputSource::Inline { bytes, private } => {
                let encoded = base64_encode(bytes);
                if *private {
                    writeln!(
                        wrapped,
                        "(umask 077 && __bb_inline '{encoded}' {path}) || exit 66"
                    )
                    .ok();
                } else {
                    writeln!(wrapped, "__bb_inline '{encoded}' {path}").ok();
                }
            }
            InputSource::Url(url) => {
                writeln!(wrapped, "__bb_get {} {path}", quote(url, "input URL")?).ok();
            }
        }
    }
    if !outputs.is_empty() {
        wrapped.push_str("__bb_outputs() {\n    __bb_status=$?\n    trap - EXIT\n");
        for output in outputs {
            let send = format!(
                "__bb_put {} {}",
                quote(&output.url, "output URL")?,
                quote(&output.path, "output path")?
            );
            let line = match output.when {
                StageWhen::Always => format!("    {send}\n"),
                StageWhen::OnSuccess => format!("    [ \"$__bb_status\" -eq 0 ] && {send}\n"),
                StageWhen::OnFailure => format!("    [ \"$__bb_status\" -ne 0 ] && {send}\n"),
            };
            wrapped.push_str(&line);
        }
        wrapped.push_str("    exit \"$__bb_status\"\n}\ntrap __bb_outputs EXIT\n");
        // A TERM (a cancel, the end of the wall time) ends the script through the trap.
        wrapped.push_str("trap 'exit 143' TERM\n");
    }
    wrapped.push_str("# batchbridge: the BatchJob's script follows\n");
    wrapped.push_str(body);
    Ok(wrapped)
}

/// The script's leading lines that are comments or blank (where scheduler directives
/// are read), and the rest.
fn split_header(script: &str) -> (&str, &str) {
    let mut end = 0;
    for line in script.split_inclusive('\n') {
        let trimmed = line.trim();
        if !(trimmed.is_empty() || trimmed.starts_with('#')) {
            break;
        }
        end += line.len();
    }
    script.split_at(end)
}

fn parent_of(path: &str) -> Option<&str> {
    path.trim_end_matches('/')
        .rsplit_once('/')
        .map(|(parent, _)| parent)
        .filter(|parent| !parent.is_empty())
}

/// `value` as one shell word. Paths and URLs with control characters are refused: the
/// schema forbids them in paths, and a URL the operator signs has none.
fn quote(value: &str, what: &str) -> Result<String> {
    if value.chars().any(char::is_control) {
        return Err(Error::invalid_input(format!(
            "{what} {value:?} has a control character"
        )));
    }
    shlex::try_quote(value)
        .map(|quoted| quoted.into_owned())
        .map_err(|err| Error::invalid_input(format!("{what}: {err}")))
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline(path: &str, bytes: &[u8], private: bool) -> StagedInput {
        StagedInput {
            path: path.into(),
            source: InputSource::Inline {
                bytes: bytes.to_vec(),
                private,
            },
        }
    }

    #[test]
    fn headers_stay_first_and_bodies_last() {
        let cases = [
            ("echo hi\n", "", "echo hi\n"),
            ("#!/bin/bash\necho hi\n", "#!/bin/bash\n", "echo hi\n"),
            (
                "#!/bin/bash\n\n#DIRECTIVE -l x\n  # c\nrun\n#x\n",
                "#!/bin/bash\n\n#DIRECTIVE -l x\n  # c\n",
                "run\n#x\n",
            ),
            ("# only comments", "# only comments", ""),
        ];
        for (script, header, body) in cases {
            assert_eq!(split_header(script), (header, body), "{script:?}");
            let wrapped = wrap_script(script, &[inline("a", b"x", false)], &[]).unwrap();
            assert!(wrapped.starts_with(header), "{wrapped}");
            assert!(wrapped.ends_with(body), "{wrapped}");
        }
    }

    #[test]
    fn nothing_to_stage_leaves_the_script_as_it_is() {
        assert_eq!(wrap_script("#x\necho\n", &[], &[]).unwrap(), "#x\necho\n");
    }

    #[test]
    fn hostile_paths_and_urls_are_one_word_or_refused() {
        let input = |path: &str, url: &str| StagedInput {
            path: path.into(),
            source: InputSource::Url(url.into()),
        };
        let (path, url) = ("a b/$(touch x)'\\", "http://h/b?x=1&y=`id`;$HOME");
        let wrapped = wrap_script("true\n", &[input(path, url)], &[]).unwrap();
        let line = wrapped
            .lines()
            .find(|line| line.starts_with("__bb_get "))
            .unwrap();
        // What bash hands the function: the URL and the path, each one word, as they were.
        let run = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "__bb_get() {{ printf '%s\\n' \"$#\" \"$@\"; }}\n{line}"
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&run.stdout),
            format!("2\n{url}\n{path}\n"),
            "{line}"
        );
        for (path, url) in [("a\nb", "http://h"), ("a", "http://h/\n; id")] {
            let err = wrap_script("true\n", &[input(path, url)], &[]).unwrap_err();
            assert!(err.message().contains("control character"), "{err}");
        }
    }

    #[test]
    fn outputs_are_sent_by_the_exit_trap_as_when_says() {
        let output = |path: &str, when| StagedOutput {
            path: path.into(),
            when,
            url: format!("http://h/b/{path}"),
        };
        let wrapped = wrap_script(
            "exit 3\n",
            &[],
            &[
                output("ok", StageWhen::OnSuccess),
                output("bad", StageWhen::OnFailure),
                output("all", StageWhen::Always),
            ],
        )
        .unwrap();
        for line in [
            "    [ \"$__bb_status\" -eq 0 ] && __bb_put http://h/b/ok ok\n",
            "    [ \"$__bb_status\" -ne 0 ] && __bb_put http://h/b/bad bad\n",
            "    __bb_put http://h/b/all all\n",
            "trap __bb_outputs EXIT\n",
        ] {
            assert!(wrapped.contains(line), "{line:?} not in {wrapped}");
        }
        assert!(wrapped.ends_with("follows\nexit 3\n"), "{wrapped}");
    }

    #[test]
    fn secrets_are_written_private_and_parents_made() {
        let wrapped = wrap_script(
            "true\n",
            &[
                inline("conf/db/password", b"s3cr3t", true),
                inline("plain", b"p", false),
            ],
            &[],
        )
        .unwrap();
        assert!(wrapped.contains("mkdir -p -- conf/db\n"), "{wrapped}");
        assert!(
            wrapped.contains("(umask 077 && __bb_inline 'czNjcjN0' conf/db/password) || exit 66\n"),
            "{wrapped}"
        );
        assert!(wrapped.contains("__bb_inline 'cA==' plain\n"), "{wrapped}");
        assert!(!wrapped.contains("mkdir -p -- plain"), "{wrapped}");
    }
}
