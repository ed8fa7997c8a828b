//! The `snodo` subcommands, one file each, and what their output shares.

pub(crate) mod archive;
pub(crate) mod backup;
pub(crate) mod bench;
pub(crate) mod config;
pub(crate) mod deploy;
pub(crate) mod inspect;
pub(crate) mod migrate;
pub(crate) mod new;
pub(crate) mod probe;
mod reach;
pub(crate) mod schedules;
pub(crate) mod serve;
pub(crate) mod stress;
pub(crate) mod tasks;
pub(crate) mod tools;
pub(crate) mod webhooks;

use std::path::Path;
use std::process::ExitCode;

pub(crate) use crate::guests::default_components;
pub(crate) use crate::scratch::PG_URL;

/// The serve options a configuration file (and the environment) describes, or why it
/// cannot be used.
pub(crate) fn load_config(file: &Path) -> Result<snodo::serve::ServeOptions, String> {
    let name = file.display().to_string();
    let config = snodo::config::Config::load(file).map_err(|e| e.to_string())?;
    config.to_serve_options(&name).map_err(|e| e.to_string())
}

/// [`load_config`] for a command that never uses a secret value (it lists tools, reads
/// deployments or a task): the secrets' variables and files need not be there.
pub(crate) fn load_config_read_only(file: &Path) -> Result<snodo::serve::ServeOptions, String> {
    let name = file.display().to_string();
    let config = snodo::config::Config::load(file).map_err(|e| e.to_string())?;
    config
        .without_secret_values()
        .to_serve_options(&name)
        .map_err(|e| e.to_string())
}

/// Joins `items` with commas, or `-` for none.
pub(crate) fn listed<T: AsRef<str>>(items: impl IntoIterator<Item = T>) -> String {
    let joined: Vec<T> = items.into_iter().collect();
    if joined.is_empty() {
        "-".to_owned()
    } else {
        joined
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Prints a table under `header` (see [`table`]).
pub(crate) fn print_table<const N: usize>(
    header: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) {
    print!("{}", table(header, rows));
}

/// A table under `header`, each column as wide as its widest cell, one line each (every
/// line ends in a newline). A header written `>name` is a column of figures, aligned right
/// as `format!`'s `>` would.
pub(crate) fn table<const N: usize>(
    header: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let right = header.map(|h| h.starts_with('>'));
    let header = header.map(|h| h.trim_start_matches('>'));
    let rows: Vec<[String; N]> = rows.into_iter().collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        for (i, cell) in cells.iter().enumerate() {
            let w = widths[i];
            if i > 0 {
                out.push(' ');
            }
            if right[i] {
                out.push_str(&format!("{cell:>w$}"));
            } else if i + 1 < N {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(cell);
            }
        }
        out.push('\n');
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
    out
}

/// Prints `value` as pretty JSON.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("snodo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The exit of a command named `what` that returned `result`: success, or its error on
/// stderr with `code`.
pub(crate) fn exit(what: &str, result: Result<(), String>, code: u8) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{what}: {e}");
            ExitCode::from(code)
        }
    }
}
