//! What a user installing the tool gets, without the test bed: `cargo install` from the
//! source tree into a fresh root, and manual pages that render and name every command
//! `--help` lists.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn batchbridge(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_batchbridge"))
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "batchbridge {args:?}: {output:?}");
    output
}

/// The commands `batchbridge --help` lists, but `help`.
fn commands_in_help() -> Vec<String> {
    let help = String::from_utf8(batchbridge(&["--help"]).stdout).unwrap();
    let commands: Vec<String> = help
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        // A command's line starts with its name after two spaces; a wrapped description
        // continues further in.
        .filter_map(|line| line.strip_prefix("  "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect();
    assert!(commands.len() > 5, "no commands read from --help:\n{help}");
    commands
}

/// `page` as man-db's `man -l` shows it, 80 columns wide and without a pager.
fn render(page: &Path) -> String {
    let rendered = Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(page)
        .env("MANWIDTH", "80")
        .output()
        .unwrap_or_else(|err| {
            panic!("man: {err} (install man-db; .ci/run does when it is missing)")
        });
    assert!(
        rendered.status.success() && rendered.stderr.is_empty(),
        "man -l {}: {rendered:?}",
        page.display()
    );
    String::from_utf8(rendered.stdout).unwrap()
}

#[test]
fn the_man_page_renders_and_names_every_command_help_lists() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("batchbridge.1");
    std::fs::write(&page, batchbridge(&["man"]).stdout).unwrap();
    let text = render(&page);
    for section in [
        "NAME",
        "SYNOPSIS",
        "OPTIONS",
        "SUBCOMMANDS",
        "EXAMPLES",
        "CONFIG",
        "EXIT CODES",
    ] {
        assert!(
            text.lines().any(|line| line == section),
            "no {section} section:\n{text}"
        );
    }
    for command in commands_in_help() {
        assert!(
            text.contains(&format!("batchbridge-{command}(1)")),
            "the page does not name {command}:\n{text}"
        );
    }
    // The long help's examples, config and exit codes, which `-h` leaves out.
    for words in [
        "batchbridge run hello.sh",
        "default_cluster",
        "wait --timeout passed",
    ] {
        assert!(text.contains(words), "the page lacks {words:?}:\n{text}");
    }
    assert!(
        !text.contains("batchbridge-man(1)"),
        "the hidden `man` command is named:\n{text}"
    );
}

#[test]
fn man_dir_writes_a_page_for_every_command_the_main_page_names() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    batchbridge(&["man", "--dir", pages.to_str().unwrap()]);
    let mut written: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    written.sort();
    let mut expected: Vec<String> = commands_in_help()
        .iter()
        .map(|command| format!("batchbridge-{command}.1"))
        .chain(["batchbridge.1".to_owned()])
        .collect();
    expected.sort();
    assert_eq!(written, expected);
    let submit = render(&pages.join("batchbridge-submit.1"));
    for words in ["batchbridge-submit", "--cpus", "--array", "--cluster"] {
        assert!(
            submit.contains(words),
            "submit's page lacks {words}:\n{submit}"
        );
    }
}

/// The workspace's target directory: cargo install builds there (its release profile, beside
/// the tests' debug one, whose lock this test's own cargo holds), so a second run only links.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

#[test]
fn cargo_install_puts_a_working_batchbridge_in_a_fresh_root() {
    let root = tempfile::tempdir().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // --offline: the lock's crates are on this machine since this test was built.
    let install = Command::new(cargo)
        .args(["install", "--quiet", "--offline", "--locked", "--path"])
        .arg(env!("CARGO_MANIFEST_DIR"))
        .arg("--root")
        .arg(root.path())
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .unwrap();
    assert!(install.status.success(), "cargo install: {install:?}");
    let version = Command::new(root.path().join("bin/batchbridge"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        version.status.success(),
        "batchbridge --version: {version:?}"
    );
    assert_eq!(
        String::from_utf8(version.stdout).unwrap(),
        format!("batchbridge {}\n", env!("CARGO_PKG_VERSION"))
    );
}
