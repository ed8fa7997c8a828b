//! The backend trait: what a store adapter provides, and the one [`Store`] implementation
//! every adapter gets from it.
//!
//! An adapter keeps bytes and runs the engine's rules ([`engine`]) over them atomically:
//! [`Backend::write`] runs a closure over a [`Txn`] inside one write that is durable before
//! it is acknowledged, and [`Backend::read`] runs one over a consistent [`View`]. Every
//! contract method maps onto the rules through those two, here, once; an adapter is a
//! folder implementing [`Backend`] and one arm in `config.rs`.
//!
//! Every operation tells its backend what it [`Touches`]: the embedded adapters hold every
//! record within reach and ignore it, while the PostgreSQL adapter reads (and locks) exactly
//! those rows first. Where an adapter does more than run the rules (a one-statement
//! heartbeat, admission under a live cap that may need a second try, announcing changes
//! to other nodes, clearing expired tasks when nothing is due) it overrides a hook whose
//! default does nothing more.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::model::{
    AuditPage, AuditRecord, ComponentInfo, Deployment, EventKind, JournalEntry, OutboxEvent,
    Principal, Schedule, StoredComponent, Task, TaskEvent, TaskId, TaskView, Timestamp, Webhook,
    Work,
};

use super::engine::{self, Ctx, Touches, Txn, View};
use super::listing::{TaskCounts, TaskPage, TaskQuery};
use super::{
    Access, Action, Authority, ClaimRequest, ClaimStore, Claimed, Committed, DeploymentStore,
    HeldAuthority, InputStore, JournalBounds, JournalStore, Lease, NewTask, NextClaim,
    OperatorStore, OutboxStore, Reaped, RevocationStore, ScheduleStore, Store, StoreError,
    StoreResult, TaskStore,
};

/// The rules one write runs: a closure over the write's [`Txn`] at the write's time.
pub(crate) trait WriteFn<T>:
    FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static
{
}

impl<T, F> WriteFn<T> for F where F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static {}

/// The rules one read runs: a closure over a consistent [`View`] at the read's time.
pub(crate) trait ReadFn<T>:
    FnOnce(&dyn View, &Ctx) -> StoreResult<T> + Send + 'static
{
}

impl<T, F> ReadFn<T> for F where F: FnOnce(&dyn View, &Ctx) -> StoreResult<T> + Send + 'static {}

/// What a store adapter provides. [`Store`] follows from it (the blanket implementation
/// below); this trait is never used as `dyn`.
///
/// The closures are `'static`: an embedded adapter sends a write to its writer thread, so
/// an operation clones the few request values its rules need into the closure (a lease, an
/// access value, a claim request), and a backend that runs the closure in place pays the
/// same.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Runs `f` inside one atomic write, evaluated at the write's time ([`Ctx`]), and
    /// returns its answer only once what it wrote is durable (for a volatile adapter:
    /// visible to every later operation). When `f` fails, nothing it did is written.
    /// `touches` names what `f` will reach.
    fn write<T: Send + 'static>(
        &self,
        touches: Touches<'_>,
        f: impl WriteFn<T>,
    ) -> impl Future<Output = StoreResult<T>> + Send;

    /// Runs `f` over a consistent view of the store, evaluated at the read's time. A pure
    /// read: it writes nothing. `touches` names what `f` will reach ([`Touches::Nothing`],
    /// [`Touches::Task`] or [`Touches::TaskWork`]).
    fn read<T: Send + 'static>(
        &self,
        touches: Touches<'_>,
        f: impl ReadFn<T>,
    ) -> impl Future<Output = StoreResult<T>> + Send;

    /// The store's current time: what [`Store::now`] answers.
    fn time(&self) -> impl Future<Output = StoreResult<Timestamp>> + Send;

    /// The store's server key, made once and kept with the store: what
    /// [`Store::server_key`] answers.
    fn key(&self) -> [u8; 32];

    /// Commits the creation of `new` by the rules `f` (creation alone, or creation and
    /// claim). `f` may run more than once, in separate writes of which at most one commits:
    /// an adapter that admits a creation under its scope's live cap in more than one way
    /// retries with the exact one when the fast one cannot decide.
    ///
    /// Default: one write touching the new task.
    fn create_with<T, F>(&self, new: NewTask, f: F) -> impl Future<Output = StoreResult<T>> + Send
    where
        F: Fn(&mut dyn Txn, &Ctx, NewTask) -> StoreResult<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        let id = new.id;
        self.write(Touches::New(id), move |txn, ctx| f(txn, ctx, new))
    }

    /// Renews `lease` for `lease_ms` in a way cheaper than a write of the rules, if the
    /// adapter has one: `Some` is the renewed lease; `None` (the default) leaves it to the
    /// rules, in a write that also says why a refused renewal was refused.
    fn renew_in_place(
        &self,
        _lease: &Lease,
        _lease_ms: u64,
    ) -> impl Future<Output = StoreResult<Option<Lease>>> + Send {
        std::future::ready(Ok(None))
    }

    /// What [`OperatorStore::record_audit`] does. Default: one write of the rules.
    fn record_audit(
        &self,
        record: AuditRecord,
    ) -> impl Future<Output = StoreResult<AuditRecord>> + Send {
        self.write(Touches::Audit, move |txn, ctx| {
            engine::audit_append(txn, ctx, record)
        })
    }

    /// What [`OperatorStore::audit`] answers. Default: one read.
    fn audit(
        &self,
        from: Option<String>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<AuditPage>> + Send {
        self.read(Touches::Audit, move |view, _| {
            engine::audit_page(view, from.as_deref(), limit)
        })
    }

    /// Copies the store as of one commit into a new file at `to`: what [`Store::backup`]
    /// does. Default: the kind keeps no file of its own to copy.
    fn backup(
        &self,
        _to: std::path::PathBuf,
    ) -> impl Future<Output = StoreResult<super::Backup>> + Send {
        std::future::ready(Err(StoreError::invalid(
            "snodo backs up a redb or SQLite store: back PostgreSQL up with pg_dump \
             (docs/operators.md), and a memory store keeps nothing to copy",
        )))
    }

    /// Stores a component: what [`DeploymentStore::store_component`] does (the digest is computed
    /// before). Default: one write of the rules.
    fn store_component(
        &self,
        digest: String,
        bytes: Vec<u8>,
        signature: Option<Vec<u8>>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        self.write(Touches::Deployments, move |txn, ctx| {
            engine::store_component(txn, ctx, &digest, &bytes, signature.as_deref())
        })
    }

    /// A stored component's bytes and signature. Default: one read.
    fn component(
        &self,
        digest: &str,
    ) -> impl Future<Output = StoreResult<Option<StoredComponent>>> + Send {
        let digest = digest.to_owned();
        self.read(Touches::Deployments, move |view, _| {
            engine::component(view, &digest)
        })
    }

    /// Every stored component. Default: one read.
    fn components(&self) -> impl Future<Output = StoreResult<Vec<ComponentInfo>>> + Send {
        self.read(Touches::Deployments, |view, _| engine::components(view))
    }

    /// What [`DeploymentStore::deploy`] does. Default: one write of the rules.
    fn deploy(
        &self,
        components: Vec<String>,
        note: String,
        expected: Option<u64>,
    ) -> impl Future<Output = StoreResult<Deployment>> + Send {
        self.write(Touches::Deployments, move |txn, ctx| {
            engine::deploy(txn, ctx, &components, &note, expected)
        })
    }

    /// What [`DeploymentStore::deployment`] answers. Default: one read.
    fn deployment(
        &self,
        revision: Option<u64>,
    ) -> impl Future<Output = StoreResult<Option<Deployment>>> + Send {
        self.read(Touches::Deployments, move |view, _| match revision {
            Some(r) => engine::deployment(view, r),
            None => engine::current_deployment(view),
        })
    }

    /// What [`DeploymentStore::deployments`] answers. Default: one read.
    fn deployments(
        &self,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<Deployment>>> + Send {
        self.read(Touches::Deployments, move |view, _| {
            engine::deployments(view, limit)
        })
    }

    /// What [`DeploymentStore::pinned_tasks`] answers. Default: one read.
    fn pinned_tasks(
        &self,
        digest: &str,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<TaskId>>> + Send {
        let digest = digest.to_owned();
        self.read(Touches::Deployments, move |view, _| {
            view.pinned_tasks(&digest, limit)
        })
    }

    /// What [`OperatorStore::list_tasks`] answers. Default: one read.
    fn list_tasks(&self, query: TaskQuery) -> impl Future<Output = StoreResult<TaskPage>> + Send {
        self.read(Touches::Listing, move |view, ctx| {
            engine::list(view, ctx, &query)
        })
    }

    /// What [`OperatorStore::count_tasks`] answers. Default: one read.
    fn count_tasks(
        &self,
        tenant: Option<String>,
    ) -> impl Future<Output = StoreResult<TaskCounts>> + Send {
        self.read(Touches::Listing, move |view, _| {
            engine::counts(view, tenant.as_deref())
        })
    }

    /// What [`DeploymentStore::collect_components`] does. Default: one write of the rules.
    fn collect_components(
        &self,
        retention_ms: u64,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send {
        self.write(Touches::Deployments, move |txn, ctx| {
            engine::collect_components(txn, ctx, retention_ms)
        })
    }

    /// Records a revocation: what [`RevocationStore::revoke`] does. Default: one write of
    /// the rules.
    fn revoke(&self, key: &str, until: Timestamp) -> impl Future<Output = StoreResult<()>> + Send {
        let key = key.to_owned();
        self.write(Touches::Revocations, move |txn, ctx| {
            engine::revoke(txn, ctx, &key, until)
        })
    }

    /// What [`RevocationStore::revoked`] answers. Default: one read.
    fn revoked(&self, key: &str) -> impl Future<Output = StoreResult<bool>> + Send {
        let key = key.to_owned();
        self.read(Touches::Revocations, move |view, _| view.revoked(&key))
    }

    /// Every schedule: what [`ScheduleStore::schedules`] answers. Default: one read.
    fn schedules(&self) -> impl Future<Output = StoreResult<Vec<Schedule>>> + Send {
        self.read(Touches::Schedules, |view, _| engine::rows(view))
    }

    /// One schedule: what [`ScheduleStore::schedule`] answers. Default: one read.
    fn schedule(&self, name: &str) -> impl Future<Output = StoreResult<Option<Schedule>>> + Send {
        let name = name.to_owned();
        self.read(Touches::Schedules, move |view, _| engine::row(view, &name))
    }

    /// What [`ScheduleStore::swap_schedule`] does. Default: one write of the rules.
    fn swap_schedule(
        &self,
        name: String,
        expected: Option<u64>,
        after: Option<Schedule>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        self.write(Touches::Schedules, move |txn, _| {
            engine::swap_schedule(txn, &name, expected, after.as_ref())
        })
    }

    /// Every webhook subscription: what [`OutboxStore::webhooks`] answers.
    fn webhooks(&self) -> impl Future<Output = StoreResult<Vec<Webhook>>> + Send {
        self.read(Touches::Outbox, |view, _| engine::rows(view))
    }

    /// One subscription: what [`OutboxStore::webhook`] answers.
    fn webhook(&self, name: &str) -> impl Future<Output = StoreResult<Option<Webhook>>> + Send {
        let name = name.to_owned();
        self.read(Touches::Outbox, move |view, _| engine::row(view, &name))
    }

    /// What [`OutboxStore::swap_webhook`] does. Default: one write of the rules.
    fn swap_webhook(
        &self,
        name: String,
        expected: Option<u64>,
        after: Option<Webhook>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        self.write(Touches::Outbox, move |txn, _| {
            engine::swap_webhook(txn, &name, expected, after.as_ref())
        })
    }

    /// What [`OutboxStore::events_after`] answers. Default: one read.
    fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<OutboxEvent>>> + Send {
        self.read(Touches::Outbox, move |view, _| {
            engine::events_after(view, after, limit)
        })
    }

    /// What [`OutboxStore::last_event`] answers. Default: one read.
    fn last_event(&self) -> impl Future<Output = StoreResult<u64>> + Send {
        self.read(Touches::Outbox, |view, _| engine::last_seq(view))
    }

    /// What [`OutboxStore::sweep_events`] does. Default: one write.
    fn sweep_events(
        &self,
        below: u64,
        before: Timestamp,
        limit: usize,
    ) -> impl Future<Output = StoreResult<usize>> + Send {
        self.write(Touches::Outbox, move |txn, _| {
            engine::sweep_events(txn, below, before, limit)
        })
    }

    /// Runs a journal append's rules `f` on task `id`; `capped` when they admit the entry
    /// under its scope's stored bytes. Default: one write touching the task's journal (an
    /// adapter whose counts are not serialized by its write lock counts the scope exactly
    /// here).
    fn journal_write(
        &self,
        id: TaskId,
        capped: bool,
        f: impl WriteFn<()>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        let _ = capped;
        self.write(Touches::Journal(id), f)
    }

    /// Told that `claim_next` found nothing due, after its write; returns the tasks it
    /// removed at their TTL, which `claim_next` reports with its own. An error here is
    /// `claim_next`'s. Default: nothing.
    fn nothing_due(&self) -> impl Future<Output = StoreResult<Vec<Reaped>>> + Send {
        std::future::ready(Ok(Vec::new()))
    }

    /// How long until the next task is due, when `claim_next`'s write could not tell (an
    /// adapter whose writes see only the rows they fetched). Default: `None`, for the
    /// adapters whose write answers it.
    fn next_due_in(&self) -> impl Future<Output = StoreResult<Option<u64>>> + Send {
        std::future::ready(Ok(None))
    }

    /// Told, after the commit, that task `id` was created or moved by an event (a replay
    /// commits nothing and is not told). Default: nothing.
    fn announce(&self, _id: TaskId, _kind: ChangeKind) {}
}

/// What kind of change a commit made to a task, as a store announces it to whoever else
/// shares it (the PostgreSQL store: other nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The task was created.
    Created,
    /// Input was accepted.
    InputAccepted,
    /// The task was cancelled.
    Cancelled,
    /// Any other committed event.
    Other,
}

impl ChangeKind {
    /// The change an event of `kind` makes.
    fn of(kind: &EventKind) -> Self {
        match kind {
            EventKind::InputAccepted { .. } => ChangeKind::InputAccepted,
            EventKind::Cancelled { .. } => ChangeKind::Cancelled,
            _ => ChangeKind::Other,
        }
    }
}

#[async_trait]
impl<B: Backend> TaskStore for B {
    async fn create(&self, new: NewTask) -> StoreResult<Task> {
        let task = self
            .create_with(new, |txn, ctx, new| engine::create(txn, ctx, new))
            .await?;
        self.announce(task.id, ChangeKind::Created);
        Ok(task)
    }

    async fn authorize(
        &self,
        principal: &Principal,
        action: Action,
        task_id: &str,
    ) -> StoreResult<Access> {
        // A malformed id names no task, so there is nothing to read (the rules refuse it
        // the same way).
        let id = TaskId::parse(task_id).ok_or(StoreError::NotFound)?;
        let (principal, task_id) = (principal.clone(), task_id.to_owned());
        self.read(Touches::Task(id), move |view, ctx| {
            engine::authorize(view, ctx, &principal, action, &task_id)
        })
        .await
    }

    async fn get(&self, access: &Access) -> StoreResult<Task> {
        let access = access.clone();
        self.read(Touches::Task(access.task_id), move |view, ctx| {
            engine::get(view, ctx, &access)
        })
        .await
    }

    async fn authorize_read(
        &self,
        principal: &Principal,
        task_id: &str,
    ) -> StoreResult<(Access, TaskView)> {
        let id = TaskId::parse(task_id).ok_or(StoreError::NotFound)?;
        let (principal, task_id) = (principal.clone(), task_id.to_owned());
        self.read(Touches::Task(id), move |view, ctx| {
            engine::authorize_read(view, ctx, &principal, &task_id)
        })
        .await
    }

    async fn transition(
        &self,
        by: Authority<'_>,
        event: TaskEvent,
        expected_revision: Option<u64>,
    ) -> StoreResult<Committed> {
        let kind = ChangeKind::of(&event.kind);
        let id = *by.task_id();
        let by = HeldAuthority::of(by);
        let committed = self
            .write(Touches::Task(id), move |txn, ctx| {
                engine::transition(txn, ctx, by.authority(), event, expected_revision)
            })
            .await?;
        // A replay changed nothing. Other successes are announced even when they changed
        // nothing (a reattach): an announcement is a hint to re-read.
        if !committed.replayed {
            self.announce(committed.task.id, kind);
        }
        Ok(committed)
    }
}

#[async_trait]
impl<B: Backend> ClaimStore for B {
    async fn create_claimed(&self, new: NewTask, request: &ClaimRequest) -> StoreResult<Claimed> {
        // A bad request is refused before any write starts (the rules check it again).
        engine::check_claim_request(request)?;
        let request = request.clone();
        let claimed = self
            .create_with(new, move |txn, ctx, new| {
                engine::create_claimed(txn, ctx, new, &request)
            })
            .await?;
        self.announce(claimed.task.id, ChangeKind::Created);
        Ok(claimed)
    }

    async fn claim(&self, task_id: &TaskId, request: &ClaimRequest) -> StoreResult<Claimed> {
        let (id, request) = (*task_id, request.clone());
        self.write(Touches::Task(id), move |txn, ctx| {
            engine::claim(txn, ctx, &id, &request)
        })
        .await
    }

    async fn claim_next(&self, request: &ClaimRequest) -> StoreResult<NextClaim> {
        // A bad request is refused before any write starts (the rules check it again).
        engine::check_claim_request(request)?;
        let touches = Touches::NextDue(&request.skip_scopes, request.batch);
        let owned = request.clone();
        let mut next = self
            .write(touches, move |txn, ctx| {
                engine::claim_next(txn, ctx, &owned)
            })
            .await?;
        if next.claimed.is_none() {
            next.reaped.extend(self.nothing_due().await?);
            if next.next_due_in_ms.is_none() {
                next.next_due_in_ms = self.next_due_in().await?;
            }
        }
        Ok(next)
    }

    async fn renew(&self, lease: &Lease, lease_ms: u64) -> StoreResult<Lease> {
        if let Some(renewed) = self.renew_in_place(lease, lease_ms).await? {
            return Ok(renewed);
        }
        let lease = lease.clone();
        self.write(Touches::Task(lease.task_id), move |txn, ctx| {
            engine::renew(txn, ctx, &lease, lease_ms)
        })
        .await
    }

    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        let lease = lease.clone();
        self.write(Touches::Task(lease.task_id), move |txn, ctx| {
            engine::release(txn, ctx, &lease)
        })
        .await
    }

    async fn worker_snapshot(&self, lease: &Lease) -> StoreResult<(Task, Work)> {
        let lease = lease.clone();
        self.read(Touches::TaskWork(lease.task_id), move |view, ctx| {
            engine::worker_snapshot(view, ctx, &lease)
        })
        .await
    }

    async fn reap(&self, limit: usize) -> StoreResult<Vec<Reaped>> {
        self.write(Touches::Expired(limit), move |txn, ctx| {
            engine::reap(txn, ctx, limit)
        })
        .await
    }

    async fn expired(&self, limit: usize) -> StoreResult<Vec<(Task, Work)>> {
        self.read(Touches::Expired(limit), move |view, ctx| {
            engine::expired(view, ctx, limit)
        })
        .await
    }

    async fn reap_ids(&self, ids: &[TaskId]) -> StoreResult<Vec<Reaped>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Sorted and without repeats: a shared store locks the rows in this order.
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let owned = ids.clone();
        self.write(Touches::Ids(&ids), move |txn, ctx| {
            engine::reap_ids(txn, ctx, &owned)
        })
        .await
    }
}

impl<B: Backend> InputStore for B {}

#[async_trait]
impl<B: Backend> DeploymentStore for B {
    async fn store_component(&self, bytes: &[u8], signature: Option<&[u8]>) -> StoreResult<String> {
        let digest = crate::model::component_digest(bytes);
        engine::check_component(&digest, bytes, signature)?;
        Backend::store_component(
            self,
            digest.clone(),
            bytes.to_vec(),
            signature.map(<[u8]>::to_vec),
        )
        .await?;
        Ok(digest)
    }

    async fn component(&self, digest: &str) -> StoreResult<Option<StoredComponent>> {
        crate::model::check_digest(digest)?;
        Backend::component(self, digest).await
    }

    async fn components(&self) -> StoreResult<Vec<ComponentInfo>> {
        Backend::components(self).await
    }

    async fn deploy(
        &self,
        components: &[String],
        note: &str,
        expected: Option<u64>,
    ) -> StoreResult<Deployment> {
        crate::model::check_deployment(components, note)?;
        Backend::deploy(self, components.to_vec(), note.to_owned(), expected).await
    }

    async fn deployment(&self, revision: Option<u64>) -> StoreResult<Option<Deployment>> {
        Backend::deployment(self, revision).await
    }

    async fn deployments(&self, limit: usize) -> StoreResult<Vec<Deployment>> {
        Backend::deployments(self, limit).await
    }

    async fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>> {
        Backend::pinned_tasks(self, digest, limit).await
    }

    async fn collect_components(&self, retention_ms: u64) -> StoreResult<Vec<String>> {
        Backend::collect_components(self, retention_ms).await
    }
}

#[async_trait]
impl<B: Backend> RevocationStore for B {
    async fn revoke(&self, key: &str, until: Timestamp) -> StoreResult<()> {
        Backend::revoke(self, key, until).await
    }

    async fn revoked(&self, key: &str) -> StoreResult<bool> {
        Backend::revoked(self, key).await
    }
}

#[async_trait]
impl<B: Backend> JournalStore for B {
    async fn journal_append_bounded(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
        bounds: JournalBounds,
    ) -> StoreResult<()> {
        let (lease, entry) = (lease.clone(), entry.clone());
        let id = lease.task_id;
        let capped = bounds.scope_bytes.is_some();
        self.journal_write(id, capped, move |txn, ctx| {
            engine::journal_append(txn, ctx, &lease, &entry, bounds)
        })
        .await
    }

    async fn journal(&self, lease: &Lease) -> StoreResult<Vec<JournalEntry>> {
        let lease = lease.clone();
        self.read(Touches::Journal(lease.task_id), move |view, ctx| {
            engine::journal(view, ctx, &lease)
        })
        .await
    }
}

#[async_trait]
impl<B: Backend> OperatorStore for B {
    async fn inspect(&self, task_id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
        let id = *task_id;
        self.read(Touches::TaskWork(id), move |view, _| {
            engine::inspect(view, &id)
        })
        .await
    }

    async fn list_tasks(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        Backend::list_tasks(self, query.clone()).await
    }

    async fn count_tasks(&self, tenant: Option<&str>) -> StoreResult<TaskCounts> {
        Backend::count_tasks(self, tenant.map(str::to_owned)).await
    }

    async fn retry_now(&self, access: &Access) -> StoreResult<Task> {
        let access = access.clone();
        let task = self
            .write(Touches::Task(access.task_id), move |txn, ctx| {
                engine::retry_now(txn, ctx, &access)
            })
            .await?;
        // Due now: runners waiting for work hear of it like an answered question.
        self.announce(task.id, ChangeKind::InputAccepted);
        Ok(task)
    }

    async fn delete_finished(&self, access: &Access) -> StoreResult<()> {
        let access = access.clone();
        self.write(Touches::Task(access.task_id), move |txn, ctx| {
            engine::delete_finished(txn, ctx, &access)
        })
        .await
    }

    async fn task_journal(&self, task_id: &TaskId) -> StoreResult<Vec<JournalEntry>> {
        let id = *task_id;
        self.read(Touches::Journal(id), move |view, _| {
            engine::journal_of(view, &id)
        })
        .await
    }

    async fn record_audit(&self, record: AuditRecord) -> StoreResult<AuditRecord> {
        Backend::record_audit(self, record).await
    }

    async fn audit(&self, from: Option<&str>, limit: usize) -> StoreResult<AuditPage> {
        Backend::audit(self, from.map(str::to_owned), limit).await
    }
}

#[async_trait]
impl<B: Backend> ScheduleStore for B {
    async fn schedules(&self) -> StoreResult<Vec<Schedule>> {
        Backend::schedules(self).await
    }

    async fn schedule(&self, name: &str) -> StoreResult<Option<Schedule>> {
        Backend::schedule(self, name).await
    }

    async fn swap_schedule(
        &self,
        name: &str,
        expected: Option<u64>,
        after: Option<&Schedule>,
    ) -> StoreResult<()> {
        engine::check_swap(name, expected, after)?;
        Backend::swap_schedule(self, name.to_owned(), expected, after.cloned()).await
    }
}

#[async_trait]
impl<B: Backend> Store for B {
    async fn now(&self) -> StoreResult<Timestamp> {
        self.time().await
    }

    async fn check_writable(&self, within: Duration) -> StoreResult<()> {
        // The probe goes through the write path like every other write.
        match tokio::time::timeout(within, self.write(Touches::Nothing, |_, _| Ok(()))).await {
            Ok(committed) => committed,
            Err(_) => Err(StoreError::unavailable(format!(
                "a probe write did not commit within {} ms",
                within.as_millis()
            ))),
        }
    }

    async fn backup(&self, to: &std::path::Path) -> StoreResult<super::Backup> {
        Backend::backup(self, to.to_owned()).await
    }

    async fn server_key(&self) -> StoreResult<[u8; 32]> {
        Ok(self.key())
    }
}

#[async_trait]
impl<B: Backend> OutboxStore for B {
    async fn webhooks(&self) -> StoreResult<Vec<Webhook>> {
        Backend::webhooks(self).await
    }

    async fn webhook(&self, name: &str) -> StoreResult<Option<Webhook>> {
        Backend::webhook(self, name).await
    }

    async fn swap_webhook(
        &self,
        name: &str,
        expected: Option<u64>,
        after: Option<&Webhook>,
    ) -> StoreResult<()> {
        Backend::swap_webhook(self, name.to_owned(), expected, after.cloned()).await
    }

    async fn events_after(&self, after: u64, limit: usize) -> StoreResult<Vec<OutboxEvent>> {
        Backend::events_after(self, after, limit).await
    }

    async fn last_event(&self) -> StoreResult<u64> {
        Backend::last_event(self).await
    }

    async fn sweep_events(
        &self,
        below: u64,
        before: Timestamp,
        limit: usize,
    ) -> StoreResult<usize> {
        Backend::sweep_events(self, below, before, limit).await
    }
}
