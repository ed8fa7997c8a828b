//! `snodo deploy`, `snodo deployments` and `snodo rollback`: change and read which
//! component versions the store a configuration names serves, without restarting a node:
//! on the store itself, or, when a server holds its single file, through that server's
//! admin API.

use std::path::PathBuf;
use std::process::ExitCode;

use snodo::admin::{DeployBody, RollbackBody, RolledBack, Uploaded};
use snodo::deploy::operate::{self, Deployed, NewComponent};
use snodo::deploy::{Deployer, read_signed};

use super::reach::{Reached, reach};
use super::tasks::{decode, encoded};

/// Deploy components to the store a configuration names: every node serving it swaps
/// them in within `deploy.poll_ms` (at once on PostgreSQL), and tasks created before keep
/// the version they started with.
#[derive(Debug, clap::Args)]
pub(crate) struct DeployArgs {
    /// The component files. Each replaces the deployed components that provide any of
    /// its tools, resources or prompts; one that overlaps none is added.
    #[arg(required = true)]
    components: Vec<PathBuf>,
    /// The configuration file (its store, cache directory and tool settings).
    #[arg(long)]
    config: PathBuf,
    /// Deploy exactly these components: the others stop serving new calls.
    #[arg(long)]
    exact: bool,
    /// What to record with the deployment (default: the files and this host).
    #[arg(long)]
    note: Option<String>,
}

/// List the deployments, newest first, and the stored components with the live tasks
/// pinned to each (how many, and which).
#[derive(Debug, clap::Args)]
pub(crate) struct DeploymentsArgs {
    /// The configuration file.
    #[arg(long)]
    config: PathBuf,
    /// How many deployments to show.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// How many of the tasks pinning each component to name (the count is exact).
    #[arg(long, default_value_t = 10)]
    tasks: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Deploy again what an earlier deployment named (the one before the current, or
/// `--to`), as a new deployment.
#[derive(Debug, clap::Args)]
pub(crate) struct RollbackArgs {
    /// The configuration file.
    #[arg(long)]
    config: PathBuf,
    /// The revision to go back to (default: the one before the current).
    #[arg(long)]
    to: Option<u64>,
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

/// The lines reporting a deployment.
fn deployed_lines(d: &Deployed) -> String {
    let dep = &d.deployment;
    let mut out = format!(
        "deployed revision {} ({} component{})",
        dep.revision,
        dep.components.len(),
        if dep.components.len() == 1 { "" } else { "s" }
    );
    for c in &dep.components {
        out.push_str(&format!("\n  {c}"));
    }
    for r in &d.retired {
        out.push_str(&format!(
            "\n  retired {} (replaced by {})",
            short(&r.digest),
            r.replaced_by
        ));
    }
    out
}

pub(crate) fn run_deploy(runtime: &tokio::runtime::Runtime, args: DeployArgs) -> ExitCode {
    let done = runtime.block_on(deploy(&args));
    super::exit("snodo deploy", done.map(|line| println!("{line}")), 1)
}

async fn deploy(args: &DeployArgs) -> Result<String, String> {
    let opts = super::load_config(&args.config)?;
    let note = args.note.clone().unwrap_or_else(|| {
        let files: Vec<String> = args
            .components
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        format!(
            "snodo deploy {} (from {})",
            files.join(" "),
            snodo::serve::default_node_id()
        )
    });
    match reach(&opts, &args.config).await? {
        Reached::Store(store) => {
            let deployer = Deployer::new(&opts.deployer_settings()).map_err(|e| e.to_string())?;
            // Every file loads (compiles, describes) before anything is stored.
            let mut loaded = Vec::new();
            for path in &args.components {
                let (bytes, signature) = read_signed(path).map_err(|e| e.to_string())?;
                let component = deployer
                    .load(path.clone(), bytes.clone(), signature.as_deref())
                    .await
                    .map_err(|e| e.to_string())?;
                loaded.push((path, bytes, signature, component));
            }
            let mut new = Vec::new();
            for (path, bytes, signature, component) in loaded {
                let digest = store
                    .store_component(&bytes, signature.as_deref())
                    .await
                    .map_err(|e| e.to_string())?;
                new.push(NewComponent {
                    label: path.display().to_string(),
                    digest,
                    component,
                });
            }
            let d = operate::deploy(&deployer, &*store, new, args.exact, &note)
                .await
                .map_err(|e| e.to_string())?;
            Ok(deployed_lines(&d))
        }
        Reached::Server(api) => {
            // The server loads each upload under its own trust policy before storing it.
            let mut digests = Vec::new();
            for path in &args.components {
                let (bytes, signature) = read_signed(path).map_err(|e| e.to_string())?;
                let headers = signature
                    .map(|s| {
                        use base64::Engine as _;
                        let text = base64::engine::general_purpose::STANDARD.encode(s);
                        vec![(snodo::admin::SIGNATURE_HEADER, text)]
                    })
                    .unwrap_or_default();
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let up = api
                    .post_bytes(
                        &format!("/admin/v1/components?name={}", encoded(&name)),
                        "application/wasm",
                        bytes,
                        headers,
                    )
                    .await
                    .map_err(|f| format!("{}: {f}", path.display()))?;
                let up: Uploaded = decode(up).map_err(|f| f.to_string())?;
                digests.push(up.digest);
            }
            let body = DeployBody {
                components: digests,
                exact: args.exact,
                note: Some(note),
            };
            let answer = api
                .post("/admin/v1/deployments", &body)
                .await
                .map_err(|f| f.to_string())?;
            let d: Deployed = decode(answer).map_err(|f| f.to_string())?;
            Ok(format!(
                "{}\n(through the server holding the store)",
                deployed_lines(&d)
            ))
        }
    }
}

pub(crate) fn run_deployments(
    runtime: &tokio::runtime::Runtime,
    args: DeploymentsArgs,
) -> ExitCode {
    let done = runtime.block_on(deployments(&args));
    super::exit("snodo deployments", done, 1)
}

async fn deployments(args: &DeploymentsArgs) -> Result<(), String> {
    let opts = super::load_config_read_only(&args.config)?;
    let view = match reach(&opts, &args.config).await? {
        Reached::Store(store) => operate::overview(&*store, args.limit, args.tasks)
            .await
            .map_err(|e| e.to_string())?,
        Reached::Server(api) => {
            let path = format!(
                "/admin/v1/deployments?limit={}&tasks={}",
                args.limit, args.tasks
            );
            let answer = api.get(&path).await.map_err(|f| f.to_string())?;
            decode(answer).map_err(|f| f.to_string())?
        }
    };
    if args.json {
        let _ = super::print_json(&view);
        return Ok(());
    }
    if view.deployments.is_empty() {
        println!("no deployment yet: a node deploys its configured components when it starts");
    }
    super::print_table(
        ["REVISION", "DEPLOYED", "COMPONENTS", "NOTE"],
        view.deployments.iter().map(|d| {
            [
                d.revision.to_string(),
                d.deployed_at.clone(),
                d.components
                    .iter()
                    .map(|c| short(c))
                    .collect::<Vec<_>>()
                    .join(","),
                d.note.clone(),
            ]
        }),
    );
    println!();
    super::print_table(
        ["COMPONENT", "BYTES", "STATE", "PINNED TASKS", "PINNED BY"],
        view.components.iter().map(|c| {
            [
                short(&c.digest).to_owned(),
                c.size.to_string(),
                c.retired_at
                    .as_ref()
                    .map_or_else(|| "serving".to_owned(), |t| format!("retired {t}")),
                c.pinned_tasks.to_string(),
                super::listed(&c.pinned_task_ids),
            ]
        }),
    );
    Ok(())
}

pub(crate) fn run_rollback(runtime: &tokio::runtime::Runtime, args: RollbackArgs) -> ExitCode {
    let done = runtime.block_on(rollback(&args));
    super::exit("snodo rollback", done.map(|line| println!("{line}")), 1)
}

async fn rollback(args: &RollbackArgs) -> Result<String, String> {
    let opts = super::load_config(&args.config)?;
    let (d, to) = match reach(&opts, &args.config).await? {
        Reached::Store(store) => {
            let by = format!("from {}", snodo::serve::default_node_id());
            operate::roll_back(&*store, args.to, &by)
                .await
                .map_err(|e| e.to_string())?
        }
        Reached::Server(api) => {
            let answer = api
                .post("/admin/v1/rollback", &RollbackBody { to: args.to })
                .await
                .map_err(|f| f.to_string())?;
            let r: RolledBack = decode(answer).map_err(|f| f.to_string())?;
            (r.deployment, r.components_of)
        }
    };
    Ok(format!(
        "deployed revision {}: the components of revision {to} ({})",
        d.revision,
        d.components
            .iter()
            .map(|c| short(c))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Sign a component for `deploy.trusted_keys`: writes `<COMPONENT>.sig`, an Ed25519
/// signature over the file's bytes.
#[derive(Debug, clap::Args)]
pub(crate) struct SignArgs {
    /// The component file.
    component: PathBuf,
    /// The private key (PKCS#8, as `snodo keygen` writes it).
    #[arg(long)]
    key: PathBuf,
}

/// Make an Ed25519 key pair for signing components: the private key goes to `--out`
/// (readable by its owner only), the public key (for `deploy.trusted_keys`) is printed.
#[derive(Debug, clap::Args)]
pub(crate) struct KeygenArgs {
    /// Where to write the private key.
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn run_sign(args: SignArgs) -> ExitCode {
    let done = (|| {
        let key = std::fs::read(&args.key).map_err(|e| format!("{}: {e}", args.key.display()))?;
        let bytes = std::fs::read(&args.component)
            .map_err(|e| format!("{}: {e}", args.component.display()))?;
        let signature = snodo::trust::sign(&key, &bytes).map_err(|e| e.to_string())?;
        let at = snodo::trust::signature_path(&args.component);
        use base64::Engine as _;
        let text = base64::engine::general_purpose::STANDARD.encode(signature) + "\n";
        std::fs::write(&at, text).map_err(|e| format!("{}: {e}", at.display()))?;
        println!("wrote {}", at.display());
        Ok(())
    })();
    super::exit("snodo sign", done, 1)
}

pub(crate) fn run_keygen(args: KeygenArgs) -> ExitCode {
    let done = (|| {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let (private, public) = snodo::trust::generate_key().map_err(|e| e.to_string())?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&args.out)
            .map_err(|e| format!("{}: {e}", args.out.display()))?;
        file.write_all(&private)
            .map_err(|e| format!("{}: {e}", args.out.display()))?;
        use base64::Engine as _;
        println!(
            "{}",
            base64::engine::general_purpose::STANDARD.encode(public)
        );
        Ok(())
    })();
    super::exit("snodo keygen", done, 1)
}
