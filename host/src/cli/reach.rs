//! Where an operator command that works on a store acts: on the store itself, opened under a
//! one-off identity, or, when a server holds its single file, through that server's admin API.

use std::path::Path;
use std::sync::Arc;

use snodo::serve::ServeOptions;
use snodo::store::{Store, StoreConfig};

use super::tasks::{Api, ApiArgs};

/// Where an operator command acts: on the store it opened itself, or through the admin API
/// of the server that holds a single-file store (the file is that server's alone).
pub(super) enum Reached {
    Store(Arc<dyn Store>),
    Server(Api),
}

/// Opens the store `opts` names for an operator command, under a one-off identity (a
/// serving node's name would release its claims); a file store a server holds is reached
/// through that server's admin API instead (its `listen` in `config`, or `SNODO_URL`).
pub(super) async fn reach(opts: &ServeOptions, config: &Path) -> Result<Reached, String> {
    let mut store = opts.store.clone();
    match &mut store {
        StoreConfig::Postgres(pg) => {
            pg.node = snodo::serve::default_node_id();
            pg.migrate = false;
        }
        StoreConfig::Memory => {
            return Err(
                "a memory store lives only inside its server: name a redb, SQLite or PostgreSQL store"
                    .into(),
            );
        }
        _ => {}
    }
    match store.open().await {
        Ok(o) => Ok(Reached::Store(o.store)),
        Err(e) if e.to_string().contains("already open") => {
            match Api::new(&ApiArgs::of_config(config)).await {
                Ok(api) => Ok(Reached::Server(api)),
                Err(f) => Err(format!(
                    "{e}: a server holds this store file, and its admin API cannot be reached \
                     ({f}); name it with SNODO_URL, or stop the server to act on the file"
                )),
            }
        }
        Err(e) => Err(e.to_string()),
    }
}
