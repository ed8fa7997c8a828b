//! `snodo config validate`: check a configuration file.

use std::path::PathBuf;
use std::process::ExitCode;

/// Configuration files.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    #[command(subcommand)]
    what: ConfigCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ConfigCommand {
    /// Check a configuration file: syntax, values, and that every configured tool exists.
    Validate {
        /// The file.
        file: PathBuf,
    },
}

/// Validates the file: it loads, and every tool it configures is served. Settings that are
/// valid but often not what was meant are printed as notes.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: ConfigArgs) -> ExitCode {
    let ConfigCommand::Validate { file } = args.what;
    let name = file.display().to_string();
    let checked = snodo::config::Config::load(&file)
        .and_then(|config| {
            for note in config.notices() {
                println!("{name}: note: {note}");
            }
            config.to_serve_options(&name)
        })
        .map_err(|e| e.to_string())
        .and_then(|opts| {
            super::tools::print_tools(runtime, &opts).map_err(|e| format!("{name}: {e}"))
        });
    if checked.is_ok() {
        println!("{}: valid", file.display());
    }
    super::exit("snodo config validate", checked, 1)
}
