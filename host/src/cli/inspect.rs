//! `snodo inspect`: show a task from a store file, or from the store a configuration names.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use snodo::model::{Task, TaskId, Work};
use snodo::store::StoreConfig;
use snodo_server::rfc3339;

/// Show a task: from a redb or SQLite store file without a running server, or from the
/// store a configuration names (PostgreSQL included; a read that touches no claim).
#[derive(Debug, clap::Args)]
pub(crate) struct InspectArgs {
    /// The task id.
    task_id: String,
    /// The store file (redb or SQLite, told apart by its header).
    #[arg(long, default_value = ".snodo/tasks.redb")]
    store: PathBuf,
    /// A configuration file: inspect the store it names instead of --store.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// Prints the task as JSON.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: InspectArgs) -> ExitCode {
    let shown = inspect(runtime, &args.store, args.config.as_deref(), &args.task_id);
    super::exit("snodo inspect", shown, 1)
}

/// Reads a task from a store file (redb or SQLite) without opening it as a store.
fn inspect_file(store: &Path, id: &TaskId) -> Result<Option<(Task, Work)>, String> {
    use std::io::Read;
    let mut head = [0u8; 16];
    let sqlite = std::fs::File::open(store)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0";
    if sqlite {
        snodo::store::SqliteStore::inspect_file(store, id)
    } else {
        snodo::store::RedbStore::inspect_file(store, id)
    }
    .map_err(|e| e.to_string())
}

fn inspect(
    runtime: &tokio::runtime::Runtime,
    store: &Path,
    config: Option<&Path>,
    task_id: &str,
) -> Result<(), String> {
    let id = TaskId::parse(task_id).ok_or("a task id is 32 lowercase hex digits")?;
    let (found, place) = match config {
        None => (inspect_file(store, &id)?, store.display().to_string()),
        Some(file) => match super::load_config_read_only(file)?.store {
            StoreConfig::Redb(p) | StoreConfig::Sqlite(p) => {
                (inspect_file(&p, &id)?, p.display().to_string())
            }
            StoreConfig::Postgres(mut pg) => {
                // A one-off identity: opening under a serving node's name would release
                // that node's claims.
                pg.node = snodo::serve::default_node_id();
                pg.migrate = false;
                let place = format!("schema {:?}", pg.schema);
                let found = runtime.block_on(async {
                    use snodo::store::OperatorStore;
                    snodo::store::PgStore::open(pg).await?.inspect(&id).await
                });
                (found.map_err(|e| e.to_string())?, place)
            }
            StoreConfig::Memory => {
                return Err("a memory store lives only inside its server".into());
            }
        },
    };
    let (task, work) = found.ok_or_else(|| format!("no task {id} in {place}"))?;
    let view = serde_json::json!({
        "taskId": id.to_string(),
        "scope": task.scope,
        "status": task.status,
        "statusMessage": task.status_message,
        "createdAt": rfc3339(task.created_at),
        "lastUpdatedAt": rfc3339(task.last_updated_at),
        "ttlMs": task.ttl_ms,
        "revision": task.revision,
        "attempt": task.attempt,
        "generation": task.generation,
        "claim": task.claim.as_ref().map(|c| serde_json::json!({
            "generation": c.generation, "owner": c.owner,
            "leaseExpiresAt": rfc3339(c.expires_at), "bootEpoch": c.epoch})),
        "retry": {
            "policyMs": work.retry_policy.delays_ms(),
            "consumed": task.retry_count,
            "nextAt": task.retry_at.map(rfc3339),
        },
        "inputsOutstanding": task.outstanding_inputs().map(|(k, _)| k).collect::<Vec<_>>(),
        "inputsAnswered": task.inputs.iter().filter(|(_, e)| e.response.is_some()).map(|(k, _)| k).collect::<Vec<_>>(),
        "work": {"type": work.kind, "tool": work.input.get("tool"), "idempotencyKey": work.idempotency_key,
                 "componentDigest": work.component_digest, "trace": work.trace},
    });
    let text = serde_json::to_string_pretty(&view).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}
