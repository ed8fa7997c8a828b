//! The one [`Store`](super::Store) implementation the embedded adapters share.
//!
//! An embedded adapter provides two inherent methods, `write` (run a closure over a
//! [`Txn`](super::engine::Txn) inside one atomic, acknowledged-when-durable write) and `read`
//! (run a closure over a consistent [`View`](super::engine::View)); this macro maps every
//! contract method onto the engine's rules through them.

macro_rules! embedded_store {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::Store for $ty {
            async fn now(&self) -> $crate::store::StoreResult<$crate::model::Timestamp> {
                Ok(self.ctx().now)
            }

            async fn check_writable(
                &self,
                within: std::time::Duration,
            ) -> $crate::store::StoreResult<()> {
                match tokio::time::timeout(within, self.write(|_, _| Ok(()))).await {
                    Ok(committed) => committed,
                    Err(_) => Err($crate::store::StoreError::unavailable(format!(
                        "a probe write did not commit within {} ms",
                        within.as_millis()
                    ))),
                }
            }

            async fn create(
                &self,
                new: $crate::store::NewTask,
            ) -> $crate::store::StoreResult<$crate::model::Task> {
                self.write(move |txn, ctx| $crate::store::engine::create(txn, ctx, new))
                    .await
            }

            async fn create_claimed(
                &self,
                new: $crate::store::NewTask,
                request: &$crate::store::ClaimRequest,
            ) -> $crate::store::StoreResult<$crate::store::Claimed> {
                let request = request.clone();
                self.write(move |txn, ctx| {
                    $crate::store::engine::create_claimed(txn, ctx, new, &request)
                })
                .await
            }

            async fn authorize(
                &self,
                principal: &$crate::model::Principal,
                action: $crate::store::Action,
                task_id: &str,
            ) -> $crate::store::StoreResult<$crate::store::Access> {
                let (principal, task_id) = (principal.clone(), task_id.to_owned());
                self.read(move |view, ctx| {
                    $crate::store::engine::authorize(view, ctx, &principal, action, &task_id)
                })
                .await
            }

            async fn authorize_read(
                &self,
                principal: &$crate::model::Principal,
                task_id: &str,
            ) -> $crate::store::StoreResult<($crate::store::Access, $crate::model::Task)> {
                let (principal, task_id) = (principal.clone(), task_id.to_owned());
                self.read(move |view, ctx| {
                    $crate::store::engine::authorize_read(view, ctx, &principal, &task_id)
                })
                .await
            }

            async fn get(
                &self,
                access: &$crate::store::Access,
            ) -> $crate::store::StoreResult<$crate::model::Task> {
                let access = access.clone();
                self.read(move |view, ctx| $crate::store::engine::get(view, ctx, &access))
                    .await
            }

            async fn transition(
                &self,
                by: $crate::store::Authority<'_>,
                event: $crate::model::TaskEvent,
                expected_revision: Option<u64>,
            ) -> $crate::store::StoreResult<$crate::store::Committed> {
                match by {
                    $crate::store::Authority::Worker(lease) => {
                        let lease = lease.clone();
                        self.write(move |txn, ctx| {
                            $crate::store::engine::transition(
                                txn,
                                ctx,
                                $crate::store::Authority::Worker(&lease),
                                event,
                                expected_revision,
                            )
                        })
                        .await
                    }
                    $crate::store::Authority::Request(access) => {
                        let access = access.clone();
                        self.write(move |txn, ctx| {
                            $crate::store::engine::transition(
                                txn,
                                ctx,
                                $crate::store::Authority::Request(&access),
                                event,
                                expected_revision,
                            )
                        })
                        .await
                    }
                }
            }

            async fn claim(
                &self,
                task_id: &$crate::model::TaskId,
                request: &$crate::store::ClaimRequest,
            ) -> $crate::store::StoreResult<$crate::store::Claimed> {
                let (id, request) = (*task_id, request.clone());
                self.write(move |txn, ctx| $crate::store::engine::claim(txn, ctx, &id, &request))
                    .await
            }

            async fn claim_next(
                &self,
                request: &$crate::store::ClaimRequest,
            ) -> $crate::store::StoreResult<Option<$crate::store::Claimed>> {
                let request = request.clone();
                self.write(move |txn, ctx| $crate::store::engine::claim_next(txn, ctx, &request))
                    .await
            }

            async fn renew(
                &self,
                lease: &$crate::store::Lease,
                lease_ms: u64,
            ) -> $crate::store::StoreResult<$crate::store::Lease> {
                let lease = lease.clone();
                self.write(move |txn, ctx| $crate::store::engine::renew(txn, ctx, &lease, lease_ms))
                    .await
            }

            async fn release(
                &self,
                lease: &$crate::store::Lease,
            ) -> $crate::store::StoreResult<()> {
                let lease = lease.clone();
                self.write(move |txn, ctx| $crate::store::engine::release(txn, ctx, &lease))
                    .await
            }

            async fn worker_snapshot(
                &self,
                lease: &$crate::store::Lease,
            ) -> $crate::store::StoreResult<($crate::model::Task, $crate::model::Work)> {
                let lease = lease.clone();
                self.read(move |view, ctx| {
                    $crate::store::engine::worker_snapshot(view, ctx, &lease)
                })
                .await
            }

            async fn reap(
                &self,
                limit: usize,
            ) -> $crate::store::StoreResult<Vec<$crate::store::Reaped>> {
                self.write(move |txn, ctx| $crate::store::engine::reap(txn, ctx, limit))
                    .await
            }

            async fn server_key(&self) -> $crate::store::StoreResult<[u8; 32]> {
                Ok(self.key)
            }

            async fn inspect(
                &self,
                task_id: &$crate::model::TaskId,
            ) -> $crate::store::StoreResult<Option<($crate::model::Task, $crate::model::Work)>>
            {
                let id = *task_id;
                self.read(move |view, _| $crate::store::engine::inspect(view, &id))
                    .await
            }
        }
    };
}

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

impl FileBoot {
    /// The context one operation runs in: the clock read now, and this process's identity.
    pub(crate) fn ctx(&self) -> super::engine::Ctx {
        super::engine::Ctx {
            now: self.clock.now(),
            epoch: self.epoch,
            issuer: self.issuer,
        }
    }
}

/// The inherent accessors and `Debug` of an embedded store kept in one file, for a type
/// with a `boot: FileBoot` field.
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
