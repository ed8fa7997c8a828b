//! Archives: tasks past their TTL kept, with their history and (when asked) their journal,
//! in a directory or an S3-compatible bucket before the reaper removes them.
//!
//! The runner's reaper hands a [`TaskArchive`] each batch of tasks past their TTL and
//! removes exactly the ones it kept, after it kept them ([`snodo_runner::Archive`]). Each
//! task is one object named by its id (`<prefix>/<last two hex digits>/<id>.ndjson`), one
//! line of JSON ([`ArchivedTask`]). A task past its TTL never changes, so every keeping of
//! it writes the same bytes under the same name: a batch kept twice (a crash between
//! keeping and removing, two nodes' reapers reading the same tasks) leaves one object per
//! task, the same as keeping it once. That is what makes the archive exactly once per task
//! across nodes and restarts without a lease.
//!
//! Objects in a directory are synced to disk (file and directory) before the reaper may
//! remove their tasks: the store's removal is durable, so the archive must be first.

mod config;

use std::sync::Arc;

use base64::Engine as _;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use serde::{Deserialize, Serialize};

use snodo_core::model::{JournalEntry, JournalRequest, Task, TaskId, Work};
use snodo_core::store::Store;

use crate::admin::TaskDetail;
use crate::telemetry::Metrics;

pub use config::{ArchiveSettings, S3Settings};

/// The `format` every archived task carries.
pub const ARCHIVE_FORMAT: &str = "snodo.archive.v1";

/// How many objects one batch writes at once.
const PUTS_IN_FLIGHT: usize = 8;

/// One archived task: the line its object holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedTask {
    /// [`ARCHIVE_FORMAT`].
    pub format: String,
    /// What an operator sees of the task (`snodo tasks show`): its summary, arguments,
    /// questions, outcome and whole history.
    pub task: TaskDetail,
    /// Its outbound journal by position, when `[archive] journal` is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<Vec<ArchivedEntry>>,
}

/// One journal entry as archived: the request, and the response with its body in base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedEntry {
    /// The position.
    pub seq: u32,
    /// What was asked.
    pub request: JournalRequest,
    /// The response's status code.
    pub status: u16,
    /// The response's headers (lower-case names), in order.
    pub headers: Vec<(String, String)>,
    /// The response's body, base64 (standard alphabet, padded).
    pub body_base64: String,
}

impl ArchivedEntry {
    fn of(e: JournalEntry) -> Self {
        Self {
            seq: e.seq,
            request: e.request,
            status: e.response.status,
            headers: e.response.headers,
            body_base64: base64::engine::general_purpose::STANDARD.encode(&e.response.body),
        }
    }
}

impl ArchivedTask {
    /// The record of `task`, run with `work`, and its journal when kept.
    pub fn of(task: &Task, work: &Work, journal: Option<Vec<JournalEntry>>) -> Self {
        Self {
            format: ARCHIVE_FORMAT.to_owned(),
            task: TaskDetail::of(task, work),
            journal: journal.map(|j| j.into_iter().map(ArchivedEntry::of).collect()),
        }
    }

    /// The object's bytes: the record on one line, ended by a newline, so a directory's
    /// objects concatenated are newline-delimited JSON of tasks.
    pub fn encode(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("an archived task serializes");
        line.push(b'\n');
        line
    }
}

/// Why the archive could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The settings name a place that cannot be used (a directory that cannot be made, a
    /// bucket setting object_store refuses).
    #[error("archive at {place}: {reason}")]
    Open {
        /// Where.
        place: String,
        /// Why.
        reason: String,
    },
    /// Reading or writing an object failed.
    #[error("archive at {place}: {reason}")]
    Io {
        /// Where.
        place: String,
        /// Why.
        reason: String,
    },
    /// An object is not an archived task of a format this build reads.
    #[error("archive at {place}: object {key} is not an archived task: {reason}")]
    Malformed {
        /// Where.
        place: String,
        /// The object.
        key: String,
        /// Why.
        reason: String,
    },
}

/// An archive: where tasks are kept, and what goes with them.
pub struct TaskArchive {
    objects: Arc<dyn ObjectStore>,
    /// The directory, for a directory archive: objects are synced under it.
    directory: Option<std::path::PathBuf>,
    prefix: Option<ObjectPath>,
    /// `directory /x` or `s3://bucket/prefix`, for messages.
    place: String,
    journal: bool,
    /// The store journals are read from, and the counters, once keeping.
    keeping: Option<(Arc<dyn Store>, Arc<Metrics>)>,
}

impl std::fmt::Debug for TaskArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskArchive")
            .field("place", &self.place)
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
}

impl TaskArchive {
    /// Opens the archive `settings` name (checked already), making a directory that is
    /// missing. Nothing is sent to a bucket until a task is kept or read.
    pub fn open(settings: &ArchiveSettings) -> Result<Self, ArchiveError> {
        match (&settings.directory, &settings.s3) {
            (Some(dir), _) => Self::directory(dir, settings.journal),
            (None, Some(s3)) => Self::s3(s3, settings.journal),
            (None, None) => Err(ArchiveError::Open {
                place: "[archive]".into(),
                reason: "neither a directory nor a bucket is named".into(),
            }),
        }
    }

    fn directory(dir: &std::path::Path, journal: bool) -> Result<Self, ArchiveError> {
        let place = format!("directory {}", dir.display());
        let open = |reason: String| ArchiveError::Open {
            place: place.clone(),
            reason,
        };
        std::fs::create_dir_all(dir).map_err(|e| open(e.to_string()))?;
        let dir = std::fs::canonicalize(dir).map_err(|e| open(e.to_string()))?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
            .map_err(|e| open(e.to_string()))?;
        Ok(Self {
            objects: Arc::new(fs),
            directory: Some(dir),
            prefix: None,
            place,
            journal,
            keeping: None,
        })
    }

    fn s3(s3: &S3Settings, journal: bool) -> Result<Self, ArchiveError> {
        // Requests are signed with ring, as the rest of the process's TLS is; the first
        // provider installed stays (a second install is refused, harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let place = if s3.prefix.is_empty() {
            format!("s3://{}", s3.bucket)
        } else {
            format!("s3://{}/{}", s3.bucket, s3.prefix)
        };
        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(&s3.bucket);
        if let Some(region) = &s3.region {
            b = b.with_region(region);
        }
        if let Some(endpoint) = &s3.endpoint {
            b = b
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        if s3.allow_http {
            b = b.with_allow_http(true);
        }
        let objects = b.build().map_err(|e| ArchiveError::Open {
            place: place.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            objects: Arc::new(objects),
            directory: None,
            prefix: (!s3.prefix.is_empty()).then(|| ObjectPath::from(s3.prefix.as_str())),
            place,
            journal,
            keeping: None,
        })
    }

    /// The archive, keeping tasks of `store` (their journals are read from it) and
    /// counting what it keeps in `metrics`.
    pub fn keeping(mut self, store: Arc<dyn Store>, metrics: Arc<Metrics>) -> Self {
        self.keeping = Some((store, metrics));
        self
    }

    /// Where it is, as messages name it.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// The object a task is kept in: `<prefix>/<last two hex digits>/<id>.ndjson`, so
    /// tasks spread over 256 subdirectories (an id's last digits are random; its first
    /// ones are its creation time), and reading one back needs only its id.
    pub fn key(&self, id: &TaskId) -> ObjectPath {
        let id = id.to_string();
        let parts = [id[id.len() - 2..].to_owned(), format!("{id}.ndjson")];
        match &self.prefix {
            Some(p) => parts
                .iter()
                .fold(p.clone(), |p, part| p.join(part.as_str())),
            None => ObjectPath::from_iter(parts),
        }
    }

    fn io(&self, reason: impl std::fmt::Display) -> ArchiveError {
        ArchiveError::Io {
            place: self.place.clone(),
            reason: reason.to_string(),
        }
    }

    /// The archived task `id`, if the archive holds it.
    pub async fn read(&self, id: &TaskId) -> Result<Option<ArchivedTask>, ArchiveError> {
        let key = self.key(id);
        let got = match self.objects.get(&key).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.io(e)),
        };
        let bytes = got.bytes().await.map_err(|e| self.io(e))?;
        let malformed = |reason: String| ArchiveError::Malformed {
            place: self.place.clone(),
            key: key.to_string(),
            reason,
        };
        let record: ArchivedTask =
            serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))?;
        if record.format != ARCHIVE_FORMAT {
            return Err(malformed(format!(
                "its format is {:?}; this build reads {ARCHIVE_FORMAT:?}",
                record.format
            )));
        }
        Ok(Some(record))
    }

    /// Writes `task`'s object.
    async fn put(&self, task: &Task, work: &Work) -> Result<(), ArchiveError> {
        let journal = match (&self.keeping, self.journal) {
            (Some((store, _)), true) => Some(
                store
                    .task_journal(&task.id)
                    .await
                    .map_err(|e| self.io(format!("reading task {}'s journal: {e}", task.id)))?,
            ),
            _ => None,
        };
        let line = ArchivedTask::of(task, work, journal).encode();
        self.objects
            .put(&self.key(&task.id), PutPayload::from(line))
            .await
            .map_err(|e| self.io(format!("keeping task {}: {e}", task.id)))?;
        Ok(())
    }

    /// Syncs a directory archive's objects for `ids`, and their directories, to disk.
    async fn sync(&self, ids: Vec<TaskId>) -> Result<(), ArchiveError> {
        let Some(dir) = self.directory.clone() else {
            return Ok(());
        };
        let files: Vec<std::path::PathBuf> = ids
            .iter()
            .map(|id| dir.join(self.key(id).as_ref()))
            .collect();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut dirs = std::collections::BTreeSet::new();
            for f in &files {
                std::fs::File::open(f)?.sync_all()?;
                if let Some(parent) = f.parent() {
                    dirs.insert(parent.to_path_buf());
                }
            }
            // A new subdirectory's entry lives in the archive's own directory.
            dirs.insert(dir);
            for d in dirs {
                std::fs::File::open(d)?.sync_all()?;
            }
            Ok(())
        })
        .await
        .map_err(|e| self.io(e))?
        .map_err(|e| self.io(format!("syncing to disk: {e}")))
    }
}

#[async_trait::async_trait]
impl snodo_runner::Archive for TaskArchive {
    async fn keep(&self, tasks: &[(Task, Work)]) -> Result<(), String> {
        let mut kept = Ok(());
        for chunk in tasks.chunks(PUTS_IN_FLIGHT) {
            let puts = chunk.iter().map(|(task, work)| self.put(task, work));
            if let Err(e) = futures_util::future::try_join_all(puts).await {
                kept = Err(e);
                break;
            }
        }
        if kept.is_ok() {
            kept = self.sync(tasks.iter().map(|(t, _)| t.id).collect()).await;
        }
        if let Some((_, metrics)) = &self.keeping {
            match &kept {
                Ok(()) => metrics.archived(tasks.len() as u64, 0),
                Err(_) => metrics.archived(0, 1),
            }
        }
        kept.map_err(|e| e.to_string())
    }
}
