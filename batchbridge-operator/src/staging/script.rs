//! The job's script with its inputs and outputs around it: the lines that fetch the inputs
//! before the script's own first command and the trap that sends the outputs when it exits.
//! Pure text in, text out, so the tables below pin what reaches the cluster.

use std::fmt::Write as _;

use batchbridge_core::{Error, Result};

use super::post_policy::PostForm;
use crate::crd::{OutputFiles, StageWhen};

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

/// One output to send from `path` (relative to the working directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedOutput {
    /// The file, glob or directory (ending in /), relative to the working directory.
    pub path: String,
    /// When, by the script's exit code.
    pub when: StageWhen,
    /// Where to.
    pub target: OutputTarget,
}

/// Where an output's files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputTarget {
    /// One file, PUT to this presigned URL.
    Put(String),
    /// The files of a glob or directory, each posted to this form under its prefix.
    Post(PostForm),
}

/// The most files one glob or directory output sends; beyond, it sends none.
pub const MAX_OUTPUT_FILES: usize = 1000;

/// The most bytes one glob or directory output sends, all its files together (and so the
/// most of one object, which its POST policy says); beyond, it sends none.
pub const MAX_OUTPUT_BYTES: u64 = 5 << 30;

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
        printf 'url = "%s"\n' "$1" | curl -fsS --retry 3 -o "$__bb_tmp" -K -
    elif command -v wget >/dev/null 2>&1; then
        printf '%s\n' "$1" | wget -q -t 3 -O "$__bb_tmp" -i -
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
        printf 'url = "%s"\n' "$1" | curl -fsS --retry 3 -o /dev/null -T "$2" -K -
    elif command -v wget >/dev/null 2>&1; then
        printf '%s\n' "$1" | wget -q -t 3 -O /dev/null --method=PUT --body-file="$2" -i -
    else
        echo "batchbridge: neither curl nor wget on $(hostname): cannot send output $2" >&2
        false
    fi && echo "batchbridge: output $2 sent" >&2 || echo "batchbridge: output $2 could not be sent" >&2
}
__bb_shown() {
    printf '%s' "$1" | tr '[:cntrl:]' '?'
}
__bb_match() {
    __bb_rel=${1#"$__bb_leading"}
    case "$1" in
    *[[:cntrl:]]*)
        echo "batchbridge: output $__bb_out: $(__bb_shown "$1") skipped: a control character in its name" >&2
        return ;;
    esac
    case "/$__bb_rel/" in
    //*|*/../*|*/./*)
        echo "batchbridge: output $__bb_out: $1 skipped: an absolute path or a . or .. component" >&2
        return ;;
    esac
    if [ -L "$1" ]; then
        echo "batchbridge: output $__bb_out: $1 skipped: a symbolic link, not followed" >&2
    elif [ -d "$1" ] && [ "$__bb_kind" = directory ]; then
        __bb_walk "$1"
    elif [ -f "$1" ]; then
        printf '%s\n' "$1" >>"$__bb_list"
    else
        echo "batchbridge: output $__bb_out: $1 skipped: not a regular file" >&2
    fi
}
__bb_walk() {
    for __bb_f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
        if [ -e "$__bb_f" ] || [ -L "$__bb_f" ]; then __bb_match "$__bb_f"; fi
    done
}
__bb_post() (
    __bb_out=$7 __bb_leading=$8 __bb_kind=$9
    if ! command -v curl >/dev/null 2>&1; then
        echo "batchbridge: output $__bb_out not sent: a glob or directory is sent with curl, and $(hostname) has none" >&2
        exit 1
    fi
    __bb_list=$(mktemp "${TMPDIR:-/tmp}/batchbridge-output.XXXXXX") || exit 1
    trap 'rm -f -- "$__bb_list"' EXIT
    IFS=''
    set +f
    if [ "$__bb_kind" = directory ]; then
        if [ ! -d "$__bb_out" ] || [ -L "${__bb_out%/}" ]; then
            echo "batchbridge: output $__bb_out is no directory (or a symbolic link), not sent" >&2
            exit 1
        fi
        __bb_walk "${__bb_out%/}"
    else
        for __bb_f in $__bb_out; do
            if [ -e "$__bb_f" ] || [ -L "$__bb_f" ]; then __bb_match "$__bb_f"; fi
        done
    fi
    __bb_count=0 __bb_bytes=0
    while IFS= read -r __bb_f; do
        __bb_count=$((__bb_count + 1))
        __bb_bytes=$((__bb_bytes + $(wc -c <"$__bb_f")))
    done <"$__bb_list"
    if [ "$__bb_count" -eq 0 ]; then
        echo "batchbridge: output $__bb_out matched no file, nothing sent" >&2
        exit 1
    elif [ "$__bb_count" -gt "$__bb_max_files" ]; then
        echo "batchbridge: output $__bb_out not sent: $__bb_count files, more than $__bb_max_files" >&2
        exit 1
    elif [ "$__bb_bytes" -gt "$__bb_max_bytes" ]; then
        echo "batchbridge: output $__bb_out not sent: $__bb_bytes bytes, more than $__bb_max_bytes" >&2
        exit 1
    fi
    __bb_failed=0
    while IFS= read -r __bb_f; do
        # In curl's config a value is quoted with \ and " escaped, and -F's file name
        # @"…" inside it once more; the names have no newline.
        __bb_key=$(printf '%s\n' "$2${__bb_f#"$__bb_leading"}" | sed 's/[\\"]/\\&/g')
        __bb_name=$(printf '%s\n' "$__bb_f" | sed 's/[\\"]/\\&/g; s/[\\"]/\\&/g')
        printf '%s\n' "url = \"$1\"" "form-string = \"key=$__bb_key\"" \
            'form-string = "x-amz-algorithm=AWS4-HMAC-SHA256"' \
            "form-string = \"x-amz-credential=$4\"" "form-string = \"x-amz-date=$5\"" \
            "form-string = \"policy=$3\"" "form-string = \"x-amz-signature=$6\"" \
            "form = \"file=@\\\"$__bb_name\\\"\"" | curl -fsS --retry 3 -o /dev/null -K - ||
            { __bb_failed=$((__bb_failed + 1)); echo "batchbridge: output $__bb_out: $__bb_f could not be sent" >&2; }
    done <"$__bb_list"
    if [ "$__bb_failed" -eq 0 ]; then
        echo "batchbridge: output $__bb_out sent: $__bb_count files, $__bb_bytes bytes" >&2
    else
        echo "batchbridge: output $__bb_out: $__bb_failed of $__bb_count files could not be sent" >&2
        exit 1
    fi
)
"#;

/// `script` with `inputs` fetched before its first command and `outputs` sent when it exits
/// (by an EXIT trap that keeps the script's exit code). The script's leading comment block
/// (its scheduler directives) stays first. Exit code 66 means an input could not be had.
/// A script that sets its own EXIT trap replaces the one that sends the outputs.
///
/// ```
/// use batchbridge_operator::crd::StageWhen;
/// use batchbridge_operator::staging::{
///     InputSource, OutputTarget, StagedInput, StagedOutput, wrap_script,
/// };
///
/// let inputs = [StagedInput {
///     path: "data/in.csv".into(),
///     source: InputSource::Inline { bytes: b"a,b\n".to_vec(), private: false },
/// }];
/// let outputs = [StagedOutput {
///     path: "out.txt".into(),
///     when: StageWhen::Always,
///     target: OutputTarget::Put("http://store/b/out.txt?X-Amz-Signature=1".into()),
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
        writeln!(
            wrapped,
            "__bb_max_files={MAX_OUTPUT_FILES} __bb_max_bytes={MAX_OUTPUT_BYTES}"
        )
        .ok();
        // `set +e`: under the script's `set -e`, an output not sent would end the trap
        // there, leaving the later outputs unsent and exiting 1 instead of the script's code.
        wrapped.push_str("__bb_outputs() {\n    __bb_status=$?\n    set +e\n    trap - EXIT\n");
        for output in outputs {
            let send = send_line(output)?;
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

/// The shell line that sends `output`, every value one quoted word.
fn send_line(output: &StagedOutput) -> Result<String> {
    let path = quote(&output.path, "output path")?;
    let post = |form: &PostForm, leading: &str, kind: &str| -> Result<String> {
        let mut words = Vec::new();
        for value in [
            &form.url,
            &form.prefix,
            &form.policy,
            &form.credential,
            &form.date,
            &form.signature,
        ] {
            words.push(quote(value, "output form field")?);
        }
        let leading = quote(leading, "output path")?;
        Ok(format!(
            "__bb_post {} {path} {leading} {kind}",
            words.join(" ")
        ))
    };
    match (&output.target, OutputFiles::of(&output.path)) {
        (OutputTarget::Put(url), OutputFiles::One) => {
            Ok(format!("__bb_put {} {path}", quote(url, "output URL")?))
        }
        (OutputTarget::Post(form), OutputFiles::Glob { leading }) => post(form, leading, "glob"),
        (OutputTarget::Post(form), OutputFiles::Directory) => post(form, &output.path, "directory"),
        _ => Err(Error::invalid_input(format!(
            "output {:?}: one file goes to a key, a glob or directory to a prefix",
            output.path
        ))),
    }
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
            target: OutputTarget::Put(format!("http://h/b/{path}")),
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

    fn form() -> PostForm {
        PostForm {
            url: "http://h/b/".into(),
            prefix: "run 1/".into(),
            policy: "eyJ4IjoxfQ==".into(),
            credential: "AK/20261126/us-east-1/s3/aws4_request".into(),
            date: "20261126T000000Z".into(),
            signature: "ab12".into(),
        }
    }

    #[test]
    fn one_file_goes_to_a_key_and_many_to_a_prefix() {
        let output = |path: &str, target| StagedOutput {
            path: path.into(),
            when: StageWhen::Always,
            target,
        };
        let put = || OutputTarget::Put("http://h/b/k".into());
        let post = || OutputTarget::Post(form());
        let rest = "'eyJ4IjoxfQ==' AK/20261126/us-east-1/s3/aws4_request 20261126T000000Z ab12";
        let cases = [
            (
                output("a.txt", put()),
                Ok("__bb_put http://h/b/k a.txt".to_owned()),
            ),
            (
                output("results/*.csv", post()),
                Ok(format!(
                    "__bb_post http://h/b/ 'run 1/' {rest} 'results/*.csv' results/ glob"
                )),
            ),
            (
                output("out dir/", post()),
                Ok(format!(
                    "__bb_post http://h/b/ 'run 1/' {rest} 'out dir/' 'out dir/' directory"
                )),
            ),
            (output("results/", put()), Err(())),
            (output("a.txt", post()), Err(())),
        ];
        for (output, expected) in cases {
            let got = send_line(&output);
            assert_eq!(
                got.as_ref().map_err(|_| ()),
                expected.as_ref().map_err(|_| ()),
                "{output:?}: {got:?}"
            );
        }
    }

    /// What `__bb_post` sends of a working directory with hostile names, under bash and
    /// dash: `curl` is a function here that prints the key and file it was given, so the
    /// table pins the wrapper's choice of files and keys (the test bed's SeaweedFS takes
    /// them in tests/staging.rs).
    #[test]
    fn globs_and_directories_send_regular_files_and_skip_hostile_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("results/sub")).unwrap();
        for name in [
            "a.csv",
            "b \"q;x.csv",
            "sub/c.txt",
            "..\nevil.csv",
            "x\ny.csv",
            ".h",
        ] {
            std::fs::write(root.join("results").join(name), name).unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", root.join("results/link.csv")).unwrap();
        let cases = [
            (
                "results/*.csv",
                "glob",
                vec![
                    "key=p/a.csv file=@\"results/a.csv\"",
                    "key=p/b \"q;x.csv file=@\"results/b \\\"q;x.csv\"",
                ],
            ),
            (
                "results/",
                "directory",
                vec![
                    "key=p/.h file=@\"results/.h\"",
                    "key=p/a.csv file=@\"results/a.csv\"",
                    "key=p/b \"q;x.csv file=@\"results/b \\\"q;x.csv\"",
                    "key=p/sub/c.txt file=@\"results/sub/c.txt\"",
                ],
            ),
            ("results/.*", "glob", vec!["key=p/.h file=@\"results/.h\""]),
        ];
        for shell in ["bash", "dash"] {
            for (path, kind, expected) in &cases {
                let run = std::process::Command::new(shell)
                    .current_dir(root)
                    .arg("-c")
                    .arg(format!(
                        "{PRELUDE}__bb_max_files=10 __bb_max_bytes=1000\n\
                         curl() {{ sed -n 's/^form[-a-z]* = \"\\(\\(key\\|file\\)=.*\\)\"$/\\1/p' | sed 's/\\\\\\([\"\\\\]\\)/\\1/g' | tr '\\n' ' '; echo; }}\n\
                         __bb_post http://h/b/ p/ P C D S \"$1\" results/ \"$2\""
                    ))
                    .args([shell, path, kind])
                    .output()
                    .unwrap();
                let sent = String::from_utf8_lossy(&run.stdout);
                let mut sent: Vec<&str> = sent.lines().map(str::trim_end).collect();
                sent.sort_unstable();
                assert_eq!(sent, *expected, "{shell} {path}: {run:?}");
                let said = String::from_utf8_lossy(&run.stderr);
                let hostile = [
                    "link.csv skipped: a symbolic link",
                    "x?y.csv skipped: a control",
                ];
                for skipped in hostile {
                    assert_eq!(
                        said.contains(skipped),
                        *path != "results/.*",
                        "{shell} {path}: {skipped}: {said}"
                    );
                }
                assert!(run.status.success(), "{shell} {path}: {said}");
            }
        }
    }

    #[test]
    fn too_many_files_or_bytes_send_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("r")).unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join("r").join(name), "12345").unwrap();
        }
        for (files, bytes, said) in [
            (2, 100, "r/ not sent: 3 files, more than 2"),
            (10, 14, "r/ not sent: 15 bytes, more than 14"),
        ] {
            let run = std::process::Command::new("sh")
                .current_dir(dir.path())
                .arg("-c")
                .arg(format!(
                    "{PRELUDE}__bb_max_files={files} __bb_max_bytes={bytes}\n\
                     curl() {{ echo sent; }}\n__bb_post u p/ P C D S r/ r/ directory"
                ))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&run.stdout), "", "{said}");
            assert!(
                String::from_utf8_lossy(&run.stderr).contains(said),
                "{run:?}"
            );
            assert!(!run.status.success());
        }
    }

    /// A script under `set -e` whose outputs cannot be sent still has every output tried
    /// and keeps its own exit code.
    #[test]
    fn an_output_not_sent_does_not_stop_the_others_under_set_e() {
        let output = |path: &str, target| StagedOutput {
            path: path.into(),
            when: StageWhen::Always,
            target,
        };
        let dir = tempfile::tempdir().unwrap();
        for (code, shell) in [(0, "bash"), (4, "bash"), (0, "dash"), (4, "dash")] {
            let wrapped = wrap_script(
                &format!("set -e\nexit {code}\n"),
                &[],
                &[
                    output(
                        "missing.txt",
                        OutputTarget::Put("http://127.0.0.1:9/b/k".into()),
                    ),
                    output("none/", OutputTarget::Post(form())),
                    output(
                        "also-missing.txt",
                        OutputTarget::Put("http://127.0.0.1:9/b/j".into()),
                    ),
                ],
            )
            .unwrap();
            let run = std::process::Command::new(shell)
                .current_dir(dir.path())
                .arg("-c")
                .arg(&wrapped)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&run.stderr);
            assert_eq!(run.status.code(), Some(code), "{shell}: {said}");
            for line in [
                "output missing.txt is missing, not sent",
                "output none/ is no directory",
                "output also-missing.txt is missing, not sent",
            ] {
                assert!(
                    said.contains(line),
                    "{shell} {code}: {line:?} not in {said}"
                );
            }
        }
    }
}
