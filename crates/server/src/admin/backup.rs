//! What operators do to the store itself through a running server: take an online backup of
//! the single file it holds (which no other process may open while it serves). The file is
//! written on the server's machine, where the store is, and only inside `admin.backup_dir`
//! (by default the store file's directory); only an operator of every tenant may take one,
//! since it holds every tenant's tasks and the server key.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use snodo_core::store::Backup;

use super::{AdminError, Operator, Operators};

/// The body of `POST /admin/v1/backup`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupBody {
    /// Where to write the backup, on the server's machine: an absolute path to a file that
    /// does not exist yet, in a directory that does.
    pub to: PathBuf,
}

impl Operators {
    /// Copies the store as of one commit to `body.to`, read back and counted before it is
    /// reported.
    pub(crate) async fn backup(
        &self,
        op: &Operator,
        body: BackupBody,
    ) -> Result<Backup, AdminError> {
        if !op.cross_tenant {
            return Err(AdminError::Forbidden(
                "a backup holds every tenant's tasks: only an operator of every tenant takes one"
                    .into(),
            ));
        }
        if !body.to.is_absolute() {
            return Err(AdminError::Invalid(format!(
                "to: {} is not an absolute path (the file is written on the server's machine)",
                body.to.display()
            )));
        }
        let dir = self.backup_dir.as_deref().ok_or_else(|| {
            AdminError::Invalid(
                "this server writes no backup: set admin.backup_dir to the directory backups go in"
                    .into(),
            )
        })?;
        within(dir, &body.to)?;
        let started = std::time::Instant::now();
        let backup = self.tasks().store().backup(&body.to).await?;
        tracing::info!(
            path = %backup.path.display(),
            tasks = backup.tasks,
            bytes = backup.bytes,
            ms = started.elapsed().as_millis() as u64,
            operator = %op.principal.subject,
            "backup written and read back"
        );
        Ok(backup)
    }
}

/// Refuses `to` unless its directory, symbolic links resolved, is `dir` or inside it.
fn within(dir: &Path, to: &Path) -> Result<(), AdminError> {
    let outside = || {
        AdminError::Invalid(format!(
            "to: {} is not inside admin.backup_dir ({}): a backup through the server is written there",
            to.display(),
            dir.display()
        ))
    };
    let parent = to.parent().ok_or_else(outside)?;
    let (Ok(parent), Ok(dir)) = (parent.canonicalize(), dir.canonicalize()) else {
        return Err(outside());
    };
    if parent.starts_with(&dir) {
        Ok(())
    } else {
        Err(outside())
    }
}
