//! `snodo new`: create a tool crate that builds into a component.

use std::path::PathBuf;
use std::process::ExitCode;

/// Create a tool crate that builds into a component (then build and serve it with the
/// commands it prints).
#[derive(Debug, clap::Args)]
pub(crate) struct NewArgs {
    /// The crate's name (ASCII letters, digits, '-' and '_').
    name: String,
    /// Where to create it (default: ./NAME).
    #[arg(long)]
    path: Option<PathBuf>,
    /// The snodo-guest crate to depend on (default: guest-sdk/ of the checkout this
    /// binary was built from).
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// Writes the crate and prints how to build and serve it.
pub(crate) fn run(args: NewArgs) -> ExitCode {
    let NewArgs { name, path, sdk } = args;
    let dir = path.unwrap_or_else(|| PathBuf::from(&name));
    let Some(sdk) = sdk.or_else(crate::scaffold::default_sdk) else {
        eprintln!(
            "error: where is the snodo-guest crate? Pass --sdk PATH (guest-sdk/ in the Snodo repository)"
        );
        return ExitCode::from(2);
    };
    let made = crate::scaffold::scaffold(&name, &dir, &sdk).map(|made| {
        println!(
            "Created {} (crate {name}: tools count_words and check_url, in src/lib.rs).\n\nNext:\n  cd {}\n  rustup target add wasm32-wasip2   # once\n  cargo build --release --target wasm32-wasip2\n  snodo serve --component {}\n\ncheck_url reaches only the hosts a configuration allows (allowed_outbound_hosts; docs/outbound.md).",
            made.dir.display(),
            made.dir.display(),
            made.component.display()
        );
    });
    super::exit("error", made, 2)
}
