//! `snodo deploy`, `snodo deployments` and `snodo rollback`: change and read which
//! component versions the store a configuration names serves, without restarting a node.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use snodo::deploy::{Deployer, provides, read_signed};
use snodo::model::Deployment;
use snodo::serve::ServeOptions;
use snodo::store::{Store, StoreConfig};
use snodo_server::rfc3339;

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

/// Opens the store `opts` names for an operator command: under a one-off identity (a
/// serving node's name would release its claims). A file store a server holds is refused
/// by its lock.
async fn open(opts: &ServeOptions) -> Result<Arc<dyn Store>, String> {
    let mut config = opts.store.clone();
    match &mut config {
        StoreConfig::Postgres(pg) => {
            pg.node = snodo::serve::default_node_id();
            pg.migrate = false;
        }
        StoreConfig::Memory => {
            return Err(
                "a memory store lives only inside its server: deploy to a redb, SQLite or PostgreSQL store"
                    .into(),
            );
        }
        _ => {}
    }
    match config.open().await {
        Ok(o) => Ok(o.store),
        Err(e) if e.to_string().contains("already open") => Err(format!(
            "{e}: a server is using this store file; stop it to deploy, or serve from PostgreSQL, where nodes pick deployments up while running"
        )),
        Err(e) => Err(e.to_string()),
    }
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

pub(crate) fn run_deploy(runtime: &tokio::runtime::Runtime, args: DeployArgs) -> ExitCode {
    let done = runtime.block_on(deploy(&args));
    super::exit("snodo deploy", done.map(|line| println!("{line}")), 1)
}

async fn deploy(args: &DeployArgs) -> Result<String, String> {
    let opts = super::load_config(&args.config)?;
    let deployer = Deployer::new(&opts.deployer_settings()).map_err(|e| e.to_string())?;
    // Every file loads (compiles, describes) before anything is stored.
    let mut new = Vec::new();
    for path in &args.components {
        let (bytes, signature) = read_signed(path).map_err(|e| e.to_string())?;
        let component = deployer
            .load(path.clone(), bytes.clone(), signature.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        new.push((path, bytes, signature, component));
    }
    let store = open(&opts).await?;
    let current = store.deployment(None).await.map_err(|e| e.to_string())?;
    let revision = current.as_ref().map_or(0, |d| d.revision);
    let mut kept: Vec<(String, Arc<snodo::wasm::Component>)> = Vec::new();
    if let (Some(cur), false) = (&current, args.exact) {
        let loaded = deployer
            .load_stored(
                &*store,
                &cur.components,
                &format!("deployment {}", cur.revision),
            )
            .await
            .map_err(|e| e.to_string())?;
        kept = cur.components.iter().cloned().zip(loaded).collect();
    }
    let mut replaced = Vec::new();
    let mut components: Vec<String> = Vec::new();
    let mut catalog_parts = Vec::new();
    for (path, bytes, signature, component) in &new {
        let offers = provides(component);
        let (gone, stay): (Vec<_>, Vec<_>) = kept
            .into_iter()
            .partition(|(_, c)| !provides(c).is_disjoint(&offers));
        kept = stay;
        for (d, _) in gone {
            replaced.push(format!("{} (replaced by {})", short(&d), path.display()));
        }
        let digest = store
            .store_component(bytes, signature.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        components.push(digest);
        catalog_parts.push(component.clone());
    }
    for (d, c) in kept {
        if !components.contains(&d) {
            components.push(d);
            catalog_parts.push(c);
        }
    }
    // The result must be servable: nothing provided twice.
    deployer
        .catalog_of(&catalog_parts, false)
        .map_err(|e| format!("the deployment would not serve: {e}"))?;
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
    let dep = store
        .deploy(&components, &note, Some(revision))
        .await
        .map_err(|e| match e {
            snodo::store::StoreError::Conflict { current } => format!(
                "another deployment (revision {current}) was committed meanwhile; run the command again"
            ),
            other => other.to_string(),
        })?;
    let mut out = format!(
        "deployed revision {} ({} component{})",
        dep.revision,
        dep.components.len(),
        if dep.components.len() == 1 { "" } else { "s" }
    );
    for d in &dep.components {
        out.push_str(&format!("\n  {d}"));
    }
    for r in replaced {
        out.push_str(&format!("\n  retired {r}"));
    }
    Ok(out)
}

pub(crate) fn run_deployments(
    runtime: &tokio::runtime::Runtime,
    args: DeploymentsArgs,
) -> ExitCode {
    let done = runtime.block_on(deployments(&args));
    super::exit("snodo deployments", done, 1)
}

fn deployment_json(d: &Deployment) -> serde_json::Value {
    json!({
        "revision": d.revision,
        "deployedAt": rfc3339(d.deployed_at),
        "components": d.components,
        "note": d.note,
    })
}

async fn deployments(args: &DeploymentsArgs) -> Result<(), String> {
    let opts = super::load_config_read_only(&args.config)?;
    let store = open(&opts).await?;
    let list = store
        .deployments(args.limit)
        .await
        .map_err(|e| e.to_string())?;
    let components = store.components().await.map_err(|e| e.to_string())?;
    // Which live tasks pin each component (a scan of the live tasks, per component).
    let mut pinning = Vec::with_capacity(components.len());
    for c in &components {
        let ids = if c.pinned == 0 {
            Vec::new()
        } else {
            store
                .pinned_tasks(&c.digest, args.tasks)
                .await
                .map_err(|e| e.to_string())?
        };
        pinning.push(ids.iter().map(ToString::to_string).collect::<Vec<_>>());
    }
    if args.json {
        let v = json!({
            "deployments": list.iter().map(deployment_json).collect::<Vec<_>>(),
            "components": components.iter().zip(&pinning).map(|(c, ids)| json!({
                "digest": c.digest,
                "size": c.size,
                "storedAt": rfc3339(c.stored_at),
                "retiredAt": c.retired_at.map(rfc3339),
                "signed": c.signed,
                "pinnedTasks": c.pinned,
                "pinnedTaskIds": ids,
            })).collect::<Vec<_>>(),
        });
        let _ = super::print_json(&v);
        return Ok(());
    }
    if list.is_empty() {
        println!("no deployment yet: a node deploys its configured components when it starts");
    }
    super::print_table(
        ["REVISION", "DEPLOYED", "COMPONENTS", "NOTE"],
        list.iter().map(|d| {
            [
                d.revision.to_string(),
                rfc3339(d.deployed_at),
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
        components.iter().zip(&pinning).map(|(c, ids)| {
            [
                short(&c.digest).to_owned(),
                c.size.to_string(),
                c.retired_at.map_or_else(
                    || "serving".to_owned(),
                    |t| format!("retired {}", rfc3339(t)),
                ),
                c.pinned.to_string(),
                super::listed(ids),
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
    let store = open(&opts).await?;
    let current = store
        .deployment(None)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("nothing is deployed yet")?;
    let to = match args.to {
        Some(r) => r,
        None if current.revision > 1 => current.revision - 1,
        None => {
            return Err(
                "the current deployment is the first: there is nothing to roll back to".into(),
            );
        }
    };
    if to == current.revision {
        return Err(format!("revision {to} is the current deployment"));
    }
    let target = store
        .deployment(Some(to))
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("there is no deployment {to}"))?;
    let note = format!(
        "rollback to revision {to} (from {})",
        snodo::serve::default_node_id()
    );
    let dep = store
        .deploy(&target.components, &note, Some(current.revision))
        .await
        .map_err(|e| match e {
            snodo::store::StoreError::Invalid(m) => format!(
                "{m} (collected after its retention: deploy its file again with snodo deploy)"
            ),
            snodo::store::StoreError::Conflict { current } => format!(
                "another deployment (revision {current}) was committed meanwhile; run the command again"
            ),
            other => other.to_string(),
        })?;
    Ok(format!(
        "deployed revision {}: the components of revision {to} ({})",
        dep.revision,
        dep.components
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
