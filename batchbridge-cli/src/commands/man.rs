//! `man`: the manual pages, made by clap_mangen from the command line's own definition, so
//! they say what `--help` says, flag for flag.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_mangen::roff::{self, Roff};

use crate::cli::Cli;
use crate::exit::{CliResult, Exit};

/// Prints the batchbridge(1) manual page, or with `dir` writes it and a page per command
/// (batchbridge-submit(1), ...) there: the pages its SUBCOMMANDS section names.
pub(super) fn print(dir: Option<&Path>) -> CliResult<u8> {
    // No `help` command in the pages: `man` is the help there.
    let command = Cli::command().disable_help_subcommand(true);
    // NAME reads "batchbridge - run batch jobs ...", not "batchbridge - batchbridge: ...".
    let about = command.get_about().map_or_else(String::new, |about| {
        let about = about.to_string();
        about.trim_start_matches("batchbridge: ").to_owned()
    });
    let mut command = command.about(about);
    // Building names each command's page (batchbridge-submit) and gives it the global flags.
    command.build();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        write_page(&command, &mut page)?;
        return super::print_generated(&page);
    };
    std::fs::create_dir_all(dir)?;
    for command in std::iter::once(&command).chain(visible_subcommands(&command)) {
        let man = clap_mangen::Man::new(command.clone());
        let mut page = std::fs::File::create(dir.join(man.get_filename()))?;
        write_page(command, &mut page)?;
    }
    Ok(Exit::Success as u8)
}

/// The commands that get a page: `man` itself is hidden.
fn visible_subcommands(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command.get_subcommands().filter(|sub| !sub.is_hide_set())
}

/// `command`'s page: clap_mangen's sections, and in place of its EXTRA section (the after
/// help as filled text, which runs the examples' aligned columns together) a section per
/// block of the long help, its examples and tables kept as written.
fn write_page(command: &clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    if visible_subcommands(command).next().is_some() {
        man.render_subcommands_section(out)?;
    }
    if let Some(help) = command.get_after_long_help().or(command.get_after_help()) {
        out.write_all(help_sections(&help.to_string()).to_roff().as_bytes())?;
    }
    if command.get_version().is_some() {
        man.render_version_section(out)?;
    }
    Ok(())
}

/// The blocks of an after help (separated by empty lines) as roff: a block headed
/// `Examples:` or `Config (...):` starts a section of that name, and its indented lines stay
/// as written; a block without a heading is a paragraph of the section before it.
fn help_sections(help: &str) -> Roff {
    let mut roff = Roff::new();
    for block in help.split("\n\n") {
        let mut lines = block.lines().peekable();
        match lines.peek().and_then(|first| first.strip_suffix(':')) {
            Some(heading) => {
                let (name, note) = heading.split_once(" (").unwrap_or((heading, ""));
                roff.control("SH", [name.to_uppercase().as_str()]);
                if let Some(note) = note.strip_suffix(')') {
                    roff.text([roff::roman(note)]).control("PP", []);
                }
                lines.next();
            }
            None => {
                roff.control("PP", []);
            }
        }
        let mut as_written = false;
        for line in lines {
            let indented = line.strip_prefix("  ");
            if indented.is_some() != as_written {
                as_written = indented.is_some();
                roff.control(if as_written { "nf" } else { "fi" }, []);
            }
            roff.text([roff::roman(indented.unwrap_or(line))]);
        }
        if as_written {
            roff.control("fi", []);
        }
    }
    roff
}
