//! `snodo new`: create a tool project (Rust, Python or JavaScript) that builds into a
//! component.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::scaffold::{Lang, default_sdk, scaffold};

/// Create a tool project that builds into a component with one command (then build and
/// serve it with the commands it prints).
#[derive(Debug, clap::Args)]
pub(crate) struct NewArgs {
    /// The project's name (ASCII letters, digits, '-' and '_').
    name: String,
    /// The language to write the tools in.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    lang: Lang,
    /// Where to create it (default: ./NAME).
    #[arg(long)]
    path: Option<PathBuf>,
    /// The snodo-guest SDK to build with (default: guest-sdk/, guest-sdk-python/ or
    /// guest-sdk-js/ of the checkout this binary was built from).
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// Writes the crate and prints how to build and serve it.
pub(crate) fn run(args: NewArgs) -> ExitCode {
    let NewArgs {
        name,
        lang,
        path,
        sdk,
    } = args;
    let dir = path.unwrap_or_else(|| PathBuf::from(&name));
    let Some(sdk) = sdk.or_else(|| default_sdk(lang)) else {
        eprintln!(
            "error: where is the snodo-guest SDK? Pass --sdk PATH ({}/ in the Snodo repository)",
            lang.sdk_dir()
        );
        return ExitCode::from(2);
    };
    let made = scaffold(&name, &dir, &sdk, lang).map(|made| {
        let (what, once) = match lang {
            Lang::Rust => (
                "crate {name}: tools count_words and check_url, in src/lib.rs",
                "  rustup target add wasm32-wasip2   # once\n",
            ),
            Lang::Python => (
                "{name}: the tool count_words, a resource and a prompt, in app.py",
                "",
            ),
            Lang::Js => (
                "{name}: the tool count_words, a resource and a prompt, in app.js",
                "",
            ),
        };
        println!(
            "Created {} ({}).\n\nNext:\n  cd {}\n{once}  {}\n  snodo serve --component {}",
            made.dir.display(),
            what.replace("{name}", &name),
            made.dir.display(),
            made.build,
            made.component.display()
        );
        if lang == Lang::Rust {
            println!(
                "\ncheck_url reaches only the hosts a configuration allows (allowed_outbound_hosts; docs/outbound.md)."
            );
        }
    });
    super::exit("error", made, 2)
}
