//! What only shows on a terminal: the progress spinner and colours. In a pipe or a file
//! the tool prints plain text and no spinner, so scripts see only what they asked for.

use std::time::Duration;

use batchbridge_core::JobState;
use console::Style;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::exit::CliError;

/// A spinner on standard error with a message and the time elapsed, drawn only when
/// standard error is a terminal (indicatif hides it otherwise).
pub(crate) fn spinner(message: String) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A state's word, coloured when standard output is a terminal (and `NO_COLOR` is unset).
pub(crate) fn state_word(state: JobState) -> String {
    let style = match state {
        JobState::Succeeded => Style::new().green(),
        JobState::Failed => Style::new().red().bold(),
        JobState::Cancelled => Style::new().yellow(),
        JobState::Running => Style::new().cyan(),
        _ => Style::new(),
    };
    style.apply_to(format!("{state:?}")).to_string()
}

/// Prints an error and its hint on standard error, the word "error" red on a terminal.
pub(crate) fn print_error(err: &CliError) {
    let colour = console::colors_enabled_stderr();
    let red = Style::new().red().bold().force_styling(colour);
    eprintln!("{} {}", red.apply_to("error:"), err.message);
    if let Some(hint) = &err.hint {
        eprintln!(
            "{} {hint}",
            Style::new().bold().force_styling(colour).apply_to("hint:")
        );
    }
}

/// Whether standard input is a terminal a person can answer a question on.
pub(crate) fn can_ask() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}
