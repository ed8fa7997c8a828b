//! `snodo tools`: list what a configuration (or the given components) serves.

use std::path::PathBuf;
use std::process::ExitCode;

use super::{listed, print_table};

/// List the tools a configuration (or the given components) serves.
#[derive(Debug, clap::Args)]
pub(crate) struct ToolsArgs {
    /// A configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Component files (when no configuration is given; default: the example guests).
    #[arg(long = "component")]
    components: Vec<PathBuf>,
}

/// Loads the components and prints their tools, resources and prompts.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: ToolsArgs) -> ExitCode {
    let opts = match (args.config, args.components) {
        (Some(file), _) => super::load_config_read_only(&file),
        (None, c) if c.is_empty() => super::default_components()
            .map(|c| snodo::serve::ServeOptions::new(PathBuf::from(".snodo"), c)),
        (None, c) => Ok(snodo::serve::ServeOptions::new(PathBuf::from(".snodo"), c)),
    };
    let listed = opts.and_then(|o| print_tools(runtime, &o));
    super::exit("snodo tools", listed, 1)
}

/// Loads the tools `opts` describe and prints them.
pub(crate) fn print_tools(
    runtime: &tokio::runtime::Runtime,
    opts: &snodo::serve::ServeOptions,
) -> Result<(), String> {
    // An operator command inspects; it never writes a compile cache into whatever
    // directory it was run from (only `serve` keeps one, beside its data).
    let mut opts = opts.clone();
    opts.cache_dir = None;
    let catalog = runtime
        .block_on(snodo::serve::load_tools(&opts))
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for t in catalog.tools() {
        // The SDK's words: the configured or declared mode, and the `Tool` methods the
        // component runs before a call is decided (`choose_mode` only where the
        // configuration leaves the mode to the tool).
        let mode = t.mode.unwrap_or(t.info.mode).as_str();
        let mut hooks = Vec::new();
        if t.info.has_mode_rule
            && t.mode.is_none()
            && t.info.mode == snodo::wasm::TaskMode::Optional
        {
            hooks.push("choose_mode");
        }
        if t.info.has_prepare {
            hooks.push("prepare");
        }
        rows.push([
            t.info.name.clone(),
            mode.to_owned(),
            listed(hooks),
            t.retry_policy.delays_ms().len().to_string(),
            t.ttl_ms.map_or("none".to_owned(), |v| v.to_string()),
            t.component.path().display().to_string(),
            outbound(t.grants.http.as_deref()),
        ]);
    }
    print_table(
        [
            "tool",
            "mode",
            "hooks",
            ">retries",
            ">ttl_ms",
            "component",
            "outbound",
        ],
        rows,
    );
    let sources = catalog.sources();
    let mut rows = Vec::new();
    for s in sources {
        let c = s.component.catalog();
        let path = s.component.path().display().to_string();
        for r in &c.resources {
            rows.push([r.uri.clone(), "fixed".into(), path.clone()]);
        }
        for t in &c.templates {
            rows.push([t.template.as_str().into(), "template".into(), path.clone()]);
        }
    }
    if !rows.is_empty() {
        println!();
        print_table(["resource", "kind", "component"], rows);
    }
    // Required arguments are marked with `*`.
    let mut rows = Vec::new();
    for s in sources {
        for p in &s.component.catalog().prompts {
            let args = p
                .arguments
                .iter()
                .map(|(n, required)| format!("{n}{}", if *required { "*" } else { "" }));
            let path = s.component.path().display().to_string();
            rows.push([p.name.clone(), listed(args), path]);
        }
    }
    if !rows.is_empty() {
        println!();
        print_table(["prompt", "arguments", "component"], rows);
    }
    Ok(())
}

/// What a tool may reach: `-` without a grant, else its allowed hosts, then whether its
/// tasks journal and how many headers the host injects.
fn outbound(grant: Option<&snodo::wasm::outbound::HttpGrant>) -> String {
    let Some(g) = grant else {
        return "-".into();
    };
    let hosts: Vec<String> = g.allowed.entries().iter().map(|e| e.to_string()).collect();
    let mut out = if hosts.is_empty() {
        "nothing-allowed".to_owned()
    } else {
        hosts.join(",")
    };
    out.push_str(if g.journal { " journal" } else { " no-journal" });
    if !g.inject.is_empty() {
        out.push_str(&format!(" inject:{}", g.inject.len()));
    }
    out
}
