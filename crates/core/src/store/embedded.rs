//! What the embedded stores kept in one file (redb, SQLite) share, besides their
//! [`Backend`](super::Backend) implementations: the boot each open settles, the checks of a
//! store file before it is opened and the temporary name a new one is built under, their
//! common accessors (`file_store_accessors!`) and the tests every one of them runs
//! (`file_store_checks!`).

#[cfg(any(feature = "redb", feature = "sqlite"))]
/// What opening a store file settled, kept for the store's whole life: where the file is,
/// the clock the store reads, this process's boot epoch and claim issuer, and how many
/// claims of earlier processes the boot fenced.
pub(crate) struct FileBoot {
    pub(crate) path: std::path::PathBuf,
    pub(crate) clock: std::sync::Arc<dyn crate::model::Clock>,
    pub(crate) epoch: u64,
    pub(crate) issuer: u64,
    pub(crate) fenced: usize,
}

#[cfg(any(feature = "redb", feature = "sqlite"))]
impl FileBoot {
    pub(crate) fn new(
        path: std::path::PathBuf,
        clock: std::sync::Arc<dyn crate::model::Clock>,
        epoch: u64,
        issuer: u64,
        fenced: usize,
    ) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            path,
            clock,
            epoch,
            issuer,
            fenced,
        })
    }

    /// The context one operation runs in: the clock read now, and this process's identity.
    pub(crate) fn ctx(&self) -> super::engine::Ctx {
        super::engine::Ctx {
            now: self.clock.now(),
            epoch: self.epoch,
            issuer: self.issuer,
        }
    }
}

/// An I/O failure on a store file, naming the file and what was being done.
pub(crate) fn io_error(path: &std::path::Path, what: &str, e: std::io::Error) -> super::StoreError {
    super::StoreError::unavailable(format!("{}: {what}: {e}", path.display()))
}

#[cfg(any(feature = "redb", feature = "sqlite"))]
/// Checks a store file that exists before it is opened: a regular file, not empty (only a
/// missing path creates a store, so an empty file is damage or someone else's), and
/// readable by its owner alone, tightened to 0600 if it is not.
pub(crate) fn check_existing_file(
    path: &std::path::Path,
    meta: &std::fs::Metadata,
) -> super::StoreResult<()> {
    use std::os::unix::fs::PermissionsExt;
    if !meta.is_file() {
        return Err(super::StoreError::corrupt(format!(
            "{}: not a file, so not a snodo store",
            path.display()
        )));
    }
    if meta.len() == 0 {
        return Err(super::StoreError::corrupt(format!(
            "{}: the file is empty, so it is not a snodo store (only a missing path \
             creates one); remove it, or restore it from a backup",
            path.display()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io_error(path, "others can read it and it cannot be made 0600", e))?;
    }
    Ok(())
}

/// Creates a new, empty 0600 file under a temporary name beside `path`, where a new store
/// is built before it is linked or renamed to `path`, so that the path never names a
/// half-created store. `fallback` names the file when `path` has no file name.
pub(crate) fn create_beside(
    path: &std::path::Path,
    fallback: &str,
) -> super::StoreResult<(std::fs::File, std::path::PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .map_or_else(|| fallback.into(), |n| n.to_string_lossy().into_owned());
    let temp = path.with_file_name(format!(".{name}.new-{:016x}", crate::ids::random_u64()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| io_error(path, "cannot create", e))?;
    Ok((file, temp))
}

#[cfg(any(feature = "redb", feature = "sqlite"))]
/// The inherent accessors and `Debug` of an embedded store kept in one file, for a type
/// with a `boot: Arc<FileBoot>` field.
macro_rules! file_store_accessors {
    ($ty:ident) => {
        impl $ty {
            fn ctx(&self) -> $crate::store::engine::Ctx {
                self.boot.ctx()
            }

            /// The file this store lives in.
            pub fn path(&self) -> &std::path::Path {
                &self.boot.path
            }

            /// This process's boot epoch (1 for a new file).
            pub fn epoch(&self) -> u64 {
                self.boot.epoch
            }

            /// How many claims of earlier processes were released when this one opened the
            /// file: the tasks that will be recovered.
            pub fn fenced_claims(&self) -> usize {
                self.boot.fenced
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("path", &self.boot.path)
                    .field("epoch", &self.boot.epoch)
                    .finish_non_exhaustive()
            }
        }
    };
}

/// The checks every store kept in one file owes its operator, written once: the boot epoch
/// and server key across reopening, a second open refused while the first holds the file,
/// an empty or foreign file refused and left as it was, and files private to the owner.
/// Expanded inside an adapter's tests with its type, its file name, a phrase its refusal
/// of a garbage file must contain, and the suffixes of the files it may leave beside its own
/// name once closed.
#[cfg(all(test, any(feature = "redb", feature = "sqlite")))]
macro_rules! file_store_checks {
    ($ty:ty, $file:literal, garbage_says: $garbage:literal, leaves: [$($suffix:literal),*]) => {
        mod shared_file_checks {
            use $crate::store::prelude::*;
            use $crate::store::{NewTask, StoreError};

            fn open(path: &std::path::Path) -> $crate::store::StoreResult<$ty> {
                <$ty>::open(path)
            }

            fn new_task() -> NewTask {
                let id = $crate::model::TaskId::generate();
                NewTask::new(
                    id,
                    $crate::model::Scope::new("t"),
                    $crate::model::Work::new("w", serde_json::json!({}), id.to_string()),
                )
            }

            #[tokio::test]
            async fn every_open_advances_the_boot_epoch_and_keeps_the_server_key() {
                let dir = tempfile::tempdir().expect("tmp");
                let path = dir.path().join($file);
                let mut key = None;
                for expected in 1..=3 {
                    let store = open(&path).expect("open");
                    assert_eq!(store.epoch(), expected);
                    assert_eq!(store.path(), path);
                    let k = store.server_key().await.expect("key");
                    assert_eq!(*key.get_or_insert(k), k, "the key survives reopening");
                }
            }

            #[tokio::test]
            async fn a_second_open_while_the_first_is_open_is_refused() {
                let dir = tempfile::tempdir().expect("tmp");
                let path = dir.path().join($file);
                let first = open(&path).expect("open");
                let err = open(&path).expect_err("second open");
                assert!(
                    matches!(&err, StoreError::Unavailable(m)
                        if m.contains("already open in another process")),
                    "{err}"
                );
                drop(first);
                let again = open(&path).expect("free again once the first is closed");
                assert_eq!(again.epoch(), 2, "the refused open changed nothing");
            }

            #[tokio::test]
            async fn a_file_that_is_not_a_store_is_refused_and_left_untouched() {
                let dir = tempfile::tempdir().expect("tmp");
                let path = dir.path().join($file);
                std::fs::write(&path, vec![0x5a; 64 * 1024]).expect("write");
                let err = open(&path).expect_err("garbage");
                assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
                assert!(err.to_string().contains($file), "names the file: {err}");
                assert!(err.to_string().contains($garbage), "{err}");
                assert_eq!(std::fs::read(&path).expect("read"), vec![0x5a; 64 * 1024]);
            }

            #[tokio::test]
            async fn an_empty_file_is_refused_never_initialised() {
                let dir = tempfile::tempdir().expect("tmp");
                let path = dir.path().join($file);
                std::fs::write(&path, b"").expect("write");
                let err = open(&path).expect_err("an empty file is not a store");
                assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
                assert!(err.to_string().contains($file), "names the file: {err}");
                assert!(err.to_string().contains("empty"), "{err}");
                let len = std::fs::metadata(&path).expect("meta").len();
                assert_eq!(len, 0, "untouched");
            }

            #[tokio::test]
            async fn a_new_store_is_private_and_an_existing_one_is_tightened() {
                use std::os::unix::fs::PermissionsExt;
                let mode = |p: &std::path::Path| {
                    std::fs::metadata(p).expect("meta").permissions().mode() & 0o777
                };
                let dir = tempfile::tempdir().expect("tmp");
                let data = dir.path().join("data");
                let path = data.join("nested").join($file);
                let store = open(&path).expect("create");
                store.create(new_task()).await.expect("create");
                drop(store);
                assert_eq!(mode(&data), 0o700);
                assert_eq!(mode(&data.join("nested")), 0o700);
                assert_eq!(mode(&path), 0o600);
                for entry in std::fs::read_dir(data.join("nested")).expect("list") {
                    let entry = entry.expect("entry");
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let allowed = [$(concat!($file, $suffix)),*];
                    assert!(allowed.contains(&name.as_str()), "no other file: {name}");
                    assert_eq!(mode(&entry.path()), 0o600, "{name}");
                }
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                    .expect("loosen");
                let store = open(&path).expect("reopen");
                assert_eq!(store.epoch(), 2, "the same store, reopened");
                assert_eq!(mode(&path), 0o600);
            }
        }
    };
}
