//! `snodo migrate`: create or upgrade the PostgreSQL schema a configuration names.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Create or upgrade the PostgreSQL schema a configuration names (`[store] kind =
/// "postgres"`), then exit. Safe to run from several nodes at once.
#[derive(Debug, clap::Args)]
pub(crate) struct MigrateArgs {
    /// The configuration file.
    #[arg(long)]
    config: PathBuf,
}

/// Applies the pending migrations and says what it did.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: MigrateArgs) -> ExitCode {
    let done = migrate(runtime, &args.config).map(|line| println!("{line}"));
    super::exit("snodo migrate", done, 2)
}

/// Applies the PostgreSQL migrations of the store `file` configures.
fn migrate(runtime: &tokio::runtime::Runtime, file: &Path) -> Result<String, String> {
    let opts = super::load_config(file)?;
    let snodo::store::StoreConfig::Postgres(pg) = opts.store else {
        return Err(format!(
            "{}: store.kind: migrations are for a PostgreSQL store (kind = \"postgres\"); the embedded stores upgrade themselves on open",
            file.display()
        ));
    };
    let applied = runtime
        .block_on(snodo::store::migrate_postgres(&pg))
        .map_err(|e| e.to_string())?;
    let version = snodo::store::POSTGRES_SCHEMA_VERSION;
    Ok(if applied.is_empty() {
        format!(
            "schema {:?} is at version {version}: nothing to do",
            pg.schema
        )
    } else {
        format!(
            "schema {:?}: applied version(s) {applied:?}; now at version {version}",
            pg.schema
        )
    })
}
