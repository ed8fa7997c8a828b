//! The PostgreSQL schema: embedded migrations, applied in order under an advisory lock,
//! and the checks every node makes before it serves.

use deadpool_postgres::Pool;
use tokio_postgres::{Client, NoTls};

use crate::store::{StoreError, StoreResult};

use super::{PgOptions, pg_error, pool_error};

/// The schema version this build writes. A database at a newer version is refused; an
/// older one is brought up to date by [`migrate`].
pub const POSTGRES_SCHEMA_VERSION: i64 = 9;

/// The migrations, by the version they bring the schema to.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("schema.sql")),
    (2, include_str!("schema_2.sql")),
    (3, include_str!("schema_3.sql")),
    (4, include_str!("schema_4.sql")),
    (5, include_str!("schema_5.sql")),
    (6, include_str!("schema_6.sql")),
    (7, include_str!("schema_7.sql")),
    (8, include_str!("schema_8.sql")),
    (9, include_str!("schema_9.sql")),
];

/// Brings the configured schema up to [`POSTGRES_SCHEMA_VERSION`], creating it if needed,
/// and returns the versions it applied (none when it was current). Safe to run from
/// several nodes at once: they take turns on an advisory lock.
pub async fn migrate(options: &PgOptions) -> StoreResult<Vec<i64>> {
    let cfg = options.pg_config()?;
    let (mut client, connection) = cfg.connect(NoTls).await.map_err(pg_error)?;
    let driver = tokio::spawn(connection);
    let applied = migrate_on(&mut client, &options.schema, POSTGRES_SCHEMA_VERSION).await;
    drop(client);
    let _ = driver.await;
    applied
}

/// Drops the configured schema and everything in it: for tools that make a throwaway
/// schema (`snodo stress`), never called by a serving node.
pub async fn drop_schema(options: &PgOptions) -> StoreResult<()> {
    let cfg = options.pg_config()?;
    let (client, connection) = cfg.connect(NoTls).await.map_err(pg_error)?;
    let driver = tokio::spawn(connection);
    let dropped = client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", options.schema))
        .await
        .map_err(pg_error);
    drop(client);
    let _ = driver.await;
    dropped
}

/// [`drop_schema`] from synchronous code, also inside an async runtime (a test fixture's
/// `Drop`): runs on a thread of its own, with a runtime of its own, and waits for it.
pub fn drop_schema_blocking(options: &PgOptions) -> StoreResult<()> {
    let options = options.clone();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::unavailable(format!("cannot start a runtime: {e}")))?
            .block_on(drop_schema(&options))
    })
    .join()
    .unwrap_or_else(|_| Err(StoreError::unavailable("dropping the schema panicked")))
}

/// Applies the migrations after the schema's version up to `upto` (a test brings a schema
/// to an old version to upgrade it).
pub(super) async fn migrate_on(
    client: &mut Client,
    schema: &str,
    upto: i64,
) -> StoreResult<Vec<i64>> {
    let tx = client.transaction().await.map_err(pg_error)?;
    // One migrator per schema at a time; the lock ends with the transaction.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('snodo.migrate.' || $1::text))",
        &[&schema],
    )
    .await
    .map_err(pg_error)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
             version bigint PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .await
    .map_err(pg_error)?;
    let current = version(&tx).await?;
    refuse_newer(current)?;
    let mut applied = Vec::new();
    for (v, sql) in MIGRATIONS
        .iter()
        .filter(|(v, _)| *v > current && *v <= upto)
    {
        tx.batch_execute(sql).await.map_err(pg_error)?;
        tx.execute("INSERT INTO schema_migrations (version) VALUES ($1)", &[v])
            .await
            .map_err(pg_error)?;
        applied.push(*v);
    }
    tx.commit().await.map_err(pg_error)?;
    Ok(applied)
}

async fn version(client: &impl tokio_postgres::GenericClient) -> StoreResult<i64> {
    let row = client
        .query_one(
            "SELECT coalesce(max(version), 0)::bigint FROM schema_migrations",
            &[],
        )
        .await
        .map_err(|e| match e.as_db_error().map(|d| d.code().code()) {
            // 42P01: undefined_table.
            Some("42P01") => StoreError::IncompatibleSchema(
                "the database has no Snodo schema yet; run `snodo migrate` (or enable \
                 store.migrate)"
                    .into(),
            ),
            _ => pg_error(e),
        })?;
    Ok(row.get(0))
}

fn refuse_newer(current: i64) -> StoreResult<()> {
    if current > POSTGRES_SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema(
            format!(
                "the database schema is at version {current}; this build knows up to \
                 {POSTGRES_SCHEMA_VERSION}. Upgrade snodo; the database was left untouched"
            )
            .into(),
        ));
    }
    Ok(())
}

/// Refuses a schema that is newer than this build or not yet migrated.
pub(super) async fn check_current(client: &Client) -> StoreResult<()> {
    let current = version(client).await?;
    refuse_newer(current)?;
    if current < POSTGRES_SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema(
            format!(
                "the database schema is at version {current}; this build needs \
                 {POSTGRES_SCHEMA_VERSION}: run `snodo migrate` (or enable store.migrate)"
            )
            .into(),
        ));
    }
    Ok(())
}

/// The store's secret, created by the first node that needs it and shared by all. It sits
/// in `server_key`, a table only its owner may read (migration 2).
pub(super) async fn server_key(pool: &Pool) -> StoreResult<[u8; 32]> {
    let client = pool.get().await.map_err(pool_error)?;
    let fresh = crate::ids::random_bytes::<32>();
    client
        .execute(
            "INSERT INTO server_key (value) VALUES ($1) ON CONFLICT (id) DO NOTHING",
            &[&fresh.as_slice()],
        )
        .await
        .map_err(pg_error)?;
    let row = client
        .query_one("SELECT value FROM server_key", &[])
        .await
        .map_err(pg_error)?;
    let stored: &[u8] = row.get(0);
    stored
        .try_into()
        .map_err(|_| StoreError::corrupt("the stored server key is not 32 bytes"))
}
