//! Aligned columns for people: a header and rows, two spaces between columns, no borders.
//!
//! tabled lays them out by display width, so a job name in CJK or with an emoji keeps its
//! columns straight, and its `ansi` feature measures a cell without the colour codes
//! `console` put in it (a state word green on a terminal is as wide as in a pipe).

use tabled::builder::Builder;
use tabled::settings::object::{Columns, Segment};
use tabled::settings::{Padding, Style};

/// The gap between two columns.
const GAP: usize = 2;

/// The lines of a table of `header` and `rows`, each line without trailing spaces. A cell
/// holds one line: a line break in it (a scheduler's reason may have one) becomes a space,
/// so that each row is one line and a caller can print lines of its own between them.
pub(crate) fn lines<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> Vec<String> {
    let mut builder = Builder::with_capacity(rows.len() + 1, N);
    builder.push_record(header);
    for row in rows {
        builder.push_record(row.iter().map(|cell| cell.replace(['\r', '\n'], " ")));
    }
    let mut table = builder.build();
    table
        .with(Style::empty())
        .modify(Segment::all(), Padding::new(0, GAP, 0, 0))
        .modify(Columns::last(), Padding::zero());
    table
        .to_string()
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_by_display_width() {
        let rows = [
            [
                "local:1".to_owned(),
                "ascii".to_owned(),
                "Running".to_owned(),
            ],
            ["local:22".to_owned(), "日本語".to_owned(), String::new()],
            [
                "local:3".to_owned(),
                "x".to_owned(),
                console::style("Failed")
                    .red()
                    .force_styling(true)
                    .to_string(),
            ],
        ];
        let laid = lines(["JOB", "NAME", "STATE"], &rows);
        assert_eq!(laid[0], "JOB       NAME    STATE");
        assert_eq!(laid[1], "local:1   ascii   Running");
        assert_eq!(
            laid[2], "local:22  日本語",
            "six columns wide, trailing spaces gone"
        );
        assert_eq!(
            console::strip_ansi_codes(&laid[3]),
            "local:3   x       Failed",
            "colour codes take no width"
        );
        let broken = [["a".to_owned(), "two\nlines".to_owned(), "z".to_owned()]];
        assert_eq!(lines(["A", "B", "C"], &broken)[1], "a  two lines  z");
    }
}
