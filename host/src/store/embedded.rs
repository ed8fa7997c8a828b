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
                self.read(|_, ctx| Ok(ctx.now)).await
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
