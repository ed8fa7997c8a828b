//! `snodo stress`: a seeded correctness workload that gives a store a verdict.
//!
//! Contention mode: many writers race compare-and-set transitions, duplicate event ids,
//! terminal events and stale leases on shared tasks, and every acknowledged reply is kept in
//! a model. Each invariant is counted exactly and reported PASS or FAIL; latencies are
//! reported beside them, never judged. The same seed gives the same workload (the same
//! operations on the same tasks); the interleaving is whatever the store and the scheduler
//! make of it, which is the point.
//!
//! The workload speaks only the [`Store`] contract, so it runs against any adapter, and a
//! store that lies (acknowledges a write it lost, commits under a stale lease) fails the
//! matching invariant.

mod chaos;
mod crash;

pub use chaos::{
    ChaosOptions, PgInstance, PhaseFigure, SCENARIOS, ScenarioReport, TableFigure, chaos,
};
pub use crash::{
    CRASH_LEASE_MS, CrashStore, Node, RECOVERY_BOUND_MS, crash, rpc, start as start_node,
};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use crate::model::{EventId, EventKind, Principal, Scope, TaskEvent, TaskId, TaskStatus, Work};
use crate::store::{
    Action, Authority, ClaimRequest, Committed, Layer, Layered, Lease, NewTask, Store, StoreError,
    StoreResult, Transition,
};

/// A completed task's result as the store keeps it, from what `tasks/get` showed: the wire
/// marks an inlined result `"resultType": "complete"` on 2026-07-28, as `tools/call` would
/// return it, while the store keeps exactly what the tool returned.
pub(crate) fn as_kept(shown: &serde_json::Value) -> serde_json::Value {
    let mut kept = shown.clone();
    if let Some(fields) = kept.as_object_mut() {
        fields.remove("resultType");
    }
    kept
}

/// The shape of one run (the options of `snodo stress`, and their defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct StressOptions {
    /// Concurrent writers per shared task (crash mode: concurrent clients).
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Shared tasks per round (runner mode: tasks per batch, at least one of each kind;
    /// crash mode: tasks each client creates per round at most).
    #[arg(long, default_value_t = 16)]
    pub tasks: usize,
    /// Compare-and-set attempts each writer makes on each task.
    #[arg(long, default_value_t = 8)]
    pub ops: usize,
    /// Rounds, fresh tasks each (runner mode: batches; crash mode: kills).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The seed: the same seed makes the same workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Default for StressOptions {
    fn default() -> Self {
        Self {
            writers: 8,
            tasks: 16,
            ops: 8,
            rounds: 3,
            seed: 1,
        }
    }
}

/// One invariant's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Invariant {
    /// Its name.
    pub name: &'static str,
    /// What it asserts.
    pub meaning: &'static str,
    /// How many cases were checked.
    pub checked: u64,
    /// How many broke it.
    pub violations: u64,
    /// `PASS` or `FAIL`.
    pub verdict: &'static str,
    /// The first violations, for the report.
    pub examples: Vec<String>,
}

/// One latency series, descriptive only.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// The operation.
    pub op: &'static str,
    /// How many were timed.
    pub n: usize,
    /// Median, in microseconds.
    pub p50_us: u64,
    /// 99th percentile, in microseconds.
    pub p99_us: u64,
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct StressReport {
    /// The store's name, as given.
    pub store: String,
    /// The mode.
    pub mode: &'static str,
    /// The seed used.
    pub seed: u64,
    /// Every invariant with its exact counts.
    pub invariants: Vec<Invariant>,
    /// Latencies (descriptive).
    pub timings: Vec<Timing>,
    /// Wall time of the run.
    pub elapsed_ms: u64,
}

impl StressReport {
    /// The report of a `mode` run on `name` begun at `began`: `invariants` judged against
    /// what it observed, and its timings.
    fn judged(
        name: &str,
        mode: &'static str,
        seed: u64,
        mut o: Observed,
        invariants: &[(&'static str, &'static str)],
        began: Instant,
    ) -> Self {
        Self {
            store: name.to_owned(),
            mode,
            seed,
            invariants: verdicts(&mut o, invariants),
            timings: timings(&mut o),
            elapsed_ms: began.elapsed().as_millis() as u64,
        }
    }

    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.invariants.iter().all(|i| i.violations == 0)
    }

    /// The report as a table.
    pub fn render(&self) -> String {
        let mut out = format!(
            "snodo stress: {} mode, store {}, seed {}, {} ms\n\n",
            self.mode, self.store, self.seed, self.elapsed_ms
        );
        out.push_str(&render_invariants(&self.invariants, ""));
        out.push_str("\ntimings (descriptive, not judged):\n");
        for t in &self.timings {
            out.push_str(&format!(
                "  {:<22} n={:<7} p50 {:>7} µs  p99 {:>7} µs\n",
                t.op, t.n, t.p50_us, t.p99_us
            ));
        }
        out
    }
}

/// Invariants as text, one line each with their first violations under them, each line
/// after `indent`.
pub fn render_invariants(invariants: &[Invariant], indent: &str) -> String {
    let mut out = String::new();
    for i in invariants {
        out.push_str(&format!(
            "{indent}{:<4} {:<34} {:>8} checked {:>6} violations  {}\n",
            i.verdict, i.name, i.checked, i.violations, i.meaning
        ));
        for e in &i.examples {
            out.push_str(&format!("{indent}       e.g. {e}\n"));
        }
    }
    out
}

/// A small deterministic generator (SplitMix64): the workload's every choice comes from it.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Default)]
struct Tally {
    checked: u64,
    violations: u64,
    examples: Vec<String>,
}

impl Tally {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.violations += 1;
            if self.examples.len() < 3 {
                self.examples.push(what());
            }
        }
    }
}

/// Everything the workload observed, shared by its writers.
#[derive(Default)]
struct Observed {
    tallies: BTreeMap<&'static str, Tally>,
    timings: BTreeMap<&'static str, Vec<u64>>,
}

type Shared = Arc<Mutex<Observed>>;

/// What the workload observed, once its writers are done with it.
fn observed(o: Shared) -> Observed {
    Arc::try_unwrap(o)
        .map(|m| m.into_inner())
        .unwrap_or_default()
}

fn check(o: &Shared, name: &'static str, ok: bool, what: impl FnOnce() -> String) {
    let mut o = o.lock();
    o.tallies.entry(name).or_default().check(ok, what);
}

fn timed(o: &Shared, op: &'static str, since: Instant) {
    let us = since.elapsed().as_micros() as u64;
    let mut o = o.lock();
    o.timings.entry(op).or_default().push(us);
}

const INVARIANTS: &[(&str, &str)] = &[
    (
        "one_winner_per_revision",
        "of writers racing one expected_revision, exactly one commits",
    ),
    (
        "revisions_dense_and_ordered",
        "committed revisions are 1, 2, 3, ... with no gap or repeat",
    ),
    (
        "event_id_replays_its_revision",
        "a repeated event id returns its original revision and changes nothing",
    ),
    (
        "event_id_reuse_refused",
        "the same event id with other content is refused",
    ),
    (
        "one_terminal_state",
        "of racing terminal events exactly one commits",
    ),
    (
        "terminal_never_changes",
        "a terminal task refuses every later event and reads the same",
    ),
    (
        "stale_lease_never_commits",
        "a lease older than the task's newest claim commits nothing",
    ),
    (
        "acknowledged_writes_present",
        "every acknowledged commit is in the store when read back",
    ),
];

fn tenant() -> Principal {
    Principal::new("stress", "writer")
}

fn new_task(rng: &mut Rng) -> NewTask {
    let id = TaskId::from_bytes(
        [rng.next().to_le_bytes(), rng.next().to_le_bytes()]
            .concat()
            .try_into()
            .unwrap_or([0; 16]),
    );
    NewTask::new(
        id,
        Scope::new("stress"),
        Work::new(
            "snodo/tool-call",
            json!({"tool": "stress", "arguments": {}}),
            id.to_string(),
        ),
    )
}

/// Runs the contention workload against `store` (named `name` in the report).
pub async fn contention(store: Arc<dyn Store>, name: &str, opts: &StressOptions) -> StressReport {
    let began = Instant::now();
    let o: Shared = Arc::default();
    let mut rng = Rng(opts.seed);
    for round in 0..opts.rounds.max(1) {
        let mut tasks = Vec::new();
        for _ in 0..opts.tasks.max(1) {
            let t0 = Instant::now();
            match store.create(new_task(&mut rng)).await {
                Ok(t) => {
                    timed(&o, "create", t0);
                    tasks.push(t.id);
                }
                Err(e) => check(&o, "acknowledged_writes_present", false, || {
                    format!("round {round}: create failed: {e}")
                }),
            }
        }
        let mut joins = Vec::new();
        for (i, id) in tasks.iter().enumerate() {
            let store = store.clone();
            let o = o.clone();
            let seed = rng.next();
            let opts = opts.clone();
            let id = *id;
            joins.push(tokio::spawn(async move {
                one_task(store, o, id, seed, &opts, format!("r{round}t{i}")).await;
            }));
        }
        for j in joins {
            if let Err(e) = j.await {
                check(&o, "acknowledged_writes_present", false, || {
                    format!("a writer panicked: {e}")
                });
            }
        }
    }
    StressReport::judged(
        name,
        "contention",
        opts.seed,
        observed(o),
        INVARIANTS,
        began,
    )
}

/// Each named invariant's verdict from what was observed. An invariant nothing exercised
/// proves nothing: it fails.
fn verdicts(o: &mut Observed, names: &[(&'static str, &'static str)]) -> Vec<Invariant> {
    names
        .iter()
        .map(|(name, meaning)| {
            let t = o.tallies.remove(name).unwrap_or_default();
            let unchecked = t.checked == 0;
            Invariant {
                name,
                meaning,
                checked: t.checked,
                violations: if unchecked { 1 } else { t.violations },
                verdict: if t.violations == 0 && !unchecked {
                    "PASS"
                } else {
                    "FAIL"
                },
                examples: if unchecked {
                    vec!["nothing was checked".into()]
                } else {
                    t.examples
                },
            }
        })
        .collect()
}

/// The latency series, as medians and 99th percentiles.
fn timings(o: &mut Observed) -> Vec<Timing> {
    o.timings
        .iter_mut()
        .map(|(op, v)| {
            v.sort_unstable();
            let pct = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
            Timing {
                op,
                n: v.len(),
                p50_us: pct(0.5),
                p99_us: pct(0.99),
            }
        })
        .collect()
}

/// Every phase on one shared task; `label` names it in examples.
async fn one_task(
    store: Arc<dyn Store>,
    o: Shared,
    id: TaskId,
    seed: u64,
    opts: &StressOptions,
    label: String,
) {
    let req = ClaimRequest::new(60_000, "stress");
    let t0 = Instant::now();
    let claimed = match store.claim(&id, &req).await {
        Ok(c) => c,
        Err(e) => {
            check(&o, "acknowledged_writes_present", false, || {
                format!("{label}: claim failed: {e}")
            });
            return;
        }
    };
    timed(&o, "claim", t0);
    let lease = claimed.lease;
    let base = claimed.task.revision;
    let task = OnTask {
        store: &store,
        o: &o,
        label: &label,
        lease: &lease,
    };
    let wins = task.cas_race(seed, opts).await;
    task.judge_cas(&wins, base).await;
    task.event_ids(seed, opts.writers).await;
    task.fencing(&id, &req).await;
}

/// One shared task under test, as its phases see it: the store, the observations, the
/// task's label in examples and the lease it was claimed under.
struct OnTask<'a> {
    store: &'a Arc<dyn Store>,
    o: &'a Shared,
    label: &'a str,
    lease: &'a Lease,
}

impl OnTask<'_> {
    /// Phase 1, the compare-and-set race: runs the writers and returns how many of them
    /// were told each revision committed.
    async fn cas_race(&self, seed: u64, opts: &StressOptions) -> HashMap<u64, u32> {
        // 1. Compare-and-set race: every writer reads the revision and tries to move it on.
        let wins: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
        let mut joins = Vec::new();
        for w in 0..opts.writers.max(1) {
            let (store, o, wins, lease) = (
                self.store.clone(),
                self.o.clone(),
                wins.clone(),
                self.lease.clone(),
            );
            let mut rng = Rng(seed ^ (w as u64).wrapping_mul(0x9E37));
            let ops = opts.ops;
            joins.push(tokio::spawn(async move {
                for n in 0..ops {
                    let Ok((t, _)) = store.worker_snapshot(&lease).await else {
                        continue;
                    };
                    let message = format!("w{w} op{n} {}", rng.below(1_000_000));
                    let t0 = Instant::now();
                    let r = store
                        .transition(
                            Authority::Worker(&lease),
                            TaskEvent::random(EventKind::StatusMessage { message }),
                            Some(t.revision),
                        )
                        .await;
                    timed(&o, "cas transition", t0);
                    match r {
                        Ok(c) => {
                            let mut w = wins.lock();
                            *w.entry(c.revision).or_default() += 1;
                        }
                        Err(StoreError::Conflict { .. }) => {}
                        Err(e) => check(&o, "acknowledged_writes_present", false, || {
                            format!("a CAS attempt failed unexpectedly: {e}")
                        }),
                    }
                }
            }));
        }
        for j in joins {
            let _ = j.await;
        }
        std::mem::take(&mut *wins.lock())
    }

    /// Judges the race from `wins` (commits told, by revision) against the revision
    /// `base` it started from and what the store reads back.
    async fn judge_cas(&self, wins: &HashMap<u64, u32>, base: u64) {
        let (o, label) = (self.o, self.label);
        for (rev, n) in wins {
            check(o, "one_winner_per_revision", *n == 1, || {
                format!("{label}: revision {rev} was committed {n} times")
            });
        }
        // Every acknowledgement counts: a store that told two writers it committed one
        // revision acknowledged two commits.
        let committed: u64 = wins.values().map(|n| u64::from(*n)).sum();
        let mut revs: Vec<u64> = wins.keys().copied().collect();
        revs.sort_unstable();
        let dense = revs
            .iter()
            .enumerate()
            .all(|(i, r)| *r == base + 1 + i as u64);
        check(o, "revisions_dense_and_ordered", dense, || {
            format!("{label}: committed revisions {revs:?} after {base}")
        });
        let read = self
            .store
            .worker_snapshot(self.lease)
            .await
            .map(|(t, _)| t.revision);
        check(
            o,
            "acknowledged_writes_present",
            read.as_ref().ok() == Some(&(base + committed)),
            || {
                format!(
                    "{label}: {committed} acknowledged commits after revision {base}, store reads {read:?}"
                )
            },
        );
    }

    /// Phase 2, event ids: `writers` questions, each sent again (a replay) and its id
    /// reused with other content (refused).
    async fn event_ids(&self, seed: u64, writers: usize) {
        let (store, o, label, lease) = (self.store, self.o, self.label, self.lease);
        // 2. Event ids: the same id again replays; the same id with other content is refused.
        let mut rng = Rng(seed.rotate_left(17));
        for k in 0..writers.max(1) {
            let event_id = format!("stress-{label}-{k}-{}", rng.next());
            let Ok(event_id) = EventId::new(event_id) else {
                continue;
            };
            let kind = EventKind::InputRequested {
                key: format!("q{k}"),
                request: json!({"method": "elicitation/create", "params": {"mode": "form",
                    "message": format!("question {k}"),
                    "requestedSchema": {"type": "object", "properties": {}}}}),
            };
            let first = store
                .transition(
                    Authority::Worker(lease),
                    TaskEvent::new(event_id.clone(), kind.clone()),
                    None,
                )
                .await;
            let Ok(first) = first else {
                check(o, "acknowledged_writes_present", false, || {
                    format!("{label}: an input request failed: {first:?}")
                });
                continue;
            };
            let again = store
                .transition(
                    Authority::Worker(lease),
                    TaskEvent::new(event_id.clone(), kind),
                    None,
                )
                .await;
            check(
                o,
                "event_id_replays_its_revision",
                matches!(&again, Ok(c) if c.replayed && c.revision == first.revision),
                || format!("{label}: replay of {} gave {again:?}", event_id.as_str()),
            );
            let reused = store
                .transition(
                    Authority::Worker(lease),
                    TaskEvent::new(
                        event_id.clone(),
                        EventKind::StatusMessage {
                            message: "different content".into(),
                        },
                    ),
                    None,
                )
                .await;
            check(
                o,
                "event_id_reuse_refused",
                matches!(reused, Err(StoreError::EventIdReused { .. })),
                || format!("{label}: reuse of {} gave {reused:?}", event_id.as_str()),
            );
        }
    }

    /// Answers every question of task `id` still open, as its requester.
    async fn answer_open(&self, id: &TaskId) {
        let (store, o, label) = (self.store, self.o, self.label);
        let open: serde_json::Map<String, serde_json::Value> = match store.inspect(id).await {
            Ok(Some((t, _))) => t
                .inputs
                .iter()
                .filter(|(_, entry)| entry.response.is_none())
                .map(|(key, _)| (key.clone(), json!({"action": "accept", "content": {}})))
                .collect(),
            _ => return,
        };
        if open.is_empty() {
            return;
        }
        let answered = match store
            .authorize(&tenant(), Action::Update, &id.to_string())
            .await
        {
            Ok(access) => store.accept_input(&access, EventId::random(), open).await,
            Err(e) => Err(e),
        };
        if let Err(e) = answered {
            check(o, "acknowledged_writes_present", false, || {
                format!("{label}: answering the open questions failed: {e}")
            });
        }
    }

    /// Phase 3, fencing: releases the task and claims it again; the old lease must commit
    /// and renew nothing. Then the terminal race, under the newer lease.
    async fn fencing(&self, id: &TaskId, req: &ClaimRequest) {
        let (store, o, label, lease) = (self.store, self.o, self.label, self.lease);
        // A released task with questions open is parked, and no claim takes it until they
        // are answered: answer what phase 2 asked, so the release leaves it due.
        self.answer_open(id).await;
        // 3. Fencing: release, claim again; the old lease must commit nothing.
        if store.release(lease).await.is_ok() {
            match store.claim(id, req).await {
                Ok(newer) => {
                    let stale = store
                        .transition(
                            Authority::Worker(lease),
                            TaskEvent::random(EventKind::StatusMessage {
                                message: "from a stale lease".into(),
                            }),
                            None,
                        )
                        .await;
                    check(
                        o,
                        "stale_lease_never_commits",
                        matches!(stale, Err(StoreError::LeaseLost)),
                        || format!("{label}: a stale lease's commit gave {stale:?}"),
                    );
                    let renewed = store.renew(lease, 60_000).await;
                    check(
                        o,
                        "stale_lease_never_commits",
                        matches!(renewed, Err(StoreError::LeaseLost)),
                        || format!("{label}: a stale lease's renewal gave {renewed:?}"),
                    );
                    terminal_race(store, o, id, &newer.lease, label).await;
                }
                Err(e) => check(o, "acknowledged_writes_present", false, || {
                    format!("{label}: the second claim failed: {e}")
                }),
            }
        }
    }
}

/// An owned authority, for a writer on a task of its own.
enum Holder {
    Worker(Lease),
    Request(crate::store::Access),
}

/// Commits `kind` from a task of its own; reports `status` and the revision on success.
fn race(
    store: &Arc<dyn Store>,
    who: Holder,
    kind: EventKind,
    status: TaskStatus,
) -> tokio::task::JoinHandle<Result<(TaskStatus, u64), StoreError>> {
    let store = store.clone();
    tokio::spawn(async move {
        let by = match &who {
            Holder::Worker(l) => Authority::Worker(l),
            Holder::Request(a) => Authority::Request(a),
        };
        store
            .transition(by, TaskEvent::random(kind), None)
            .await
            .map(|c| (status, c.revision))
    })
}

/// Racing terminal events: a completion and a failure under the lease, a cancel from a
/// request; exactly one commits and the task never changes after.
async fn terminal_race(
    store: &Arc<dyn Store>,
    o: &Shared,
    id: &TaskId,
    lease: &Lease,
    label: &str,
) {
    let access = match store
        .authorize(&tenant(), Action::Cancel, &id.to_string())
        .await
    {
        Ok(a) => a,
        Err(e) => {
            check(o, "acknowledged_writes_present", false, || {
                format!("{label}: authorize failed: {e}")
            });
            return;
        }
    };
    let complete = race(
        store,
        Holder::Worker(lease.clone()),
        EventKind::Completed {
            result: json!({"content": [{"type": "text", "text": "done"}]}),
        },
        TaskStatus::Completed,
    );
    let fail = race(
        store,
        Holder::Worker(lease.clone()),
        EventKind::Failed {
            error: crate::model::JsonRpcError::new(-32603, "stress"),
            status_message: None,
        },
        TaskStatus::Failed,
    );
    let cancel = race(
        store,
        Holder::Request(access.clone()),
        EventKind::Cancelled {
            status_message: None,
        },
        TaskStatus::Cancelled,
    );
    let mut winners = Vec::new();
    for j in [complete, fail, cancel] {
        match j.await {
            Ok(Ok(w)) => winners.push(w),
            Ok(Err(StoreError::Terminal { .. })) => {}
            // The cancel may be refused for lease reasons only under a worker authority.
            Ok(Err(e)) => check(o, "acknowledged_writes_present", false, || {
                format!("{label}: a terminal event failed unexpectedly: {e}")
            }),
            Err(e) => check(o, "acknowledged_writes_present", false, || {
                format!("{label}: a terminal writer panicked: {e}")
            }),
        }
    }
    check(o, "one_terminal_state", winners.len() == 1, || {
        format!(
            "{label}: {} terminal events committed: {winners:?}",
            winners.len()
        )
    });
    let Some((status, revision)) = winners.first().copied() else {
        return;
    };
    let late = store.cancel(&access, None).await;
    let read = match store
        .authorize(&tenant(), Action::Read, &id.to_string())
        .await
    {
        Ok(access) => store.get(&access).await.map(|t| (t.status, t.revision)),
        Err(e) => Err(e),
    };
    check(
        o,
        "terminal_never_changes",
        matches!(late, Err(StoreError::Terminal { .. }))
            && read.as_ref().ok() == Some(&(status, revision)),
        || format!("{label}: after {status:?} at {revision}: late cancel {late:?}, read {read:?}"),
    );
    check(
        o,
        "acknowledged_writes_present",
        read.as_ref().ok() == Some(&(status, revision)),
        || format!("{label}: acknowledged {status:?} at {revision}, store reads {read:?}"),
    );
}

/// The kinds of task a runner batch mixes, chosen by the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Runs and completes.
    Complete,
    /// Fails with a protocol error.
    Fail,
    /// Asks for two retries (delays 20 and 40 ms), then completes.
    Retry,
    /// Asks a question that is answered while its guest waits.
    AnsweredLive,
    /// Asks a question, is parked (guest released), then answered and replayed.
    AnsweredParked,
    /// Cancelled while its guest runs.
    CancelRunning,
    /// Cancelled while parked on a question.
    CancelParked,
    /// Sleeps past the runner's threshold: parked with no guest, woken at its time.
    Sleep,
}

const KINDS: [Kind; 8] = [
    Kind::Complete,
    Kind::Fail,
    Kind::Retry,
    Kind::AnsweredLive,
    Kind::AnsweredParked,
    Kind::CancelRunning,
    Kind::CancelParked,
    Kind::Sleep,
];

const RETRY_DELAYS_MS: [u64; 2] = [20, 40];
/// How long a [`Kind::Sleep`] task sleeps, and the runner's threshold it is past.
const SLEEP_MS: u64 = 60;
const SLEEP_PARK_AFTER_MS: u64 = 20;
const LEASE_MS: u64 = 5_000;

impl Kind {
    fn work(self, id: &TaskId) -> Work {
        use crate::runner::tool_call_work;
        let mut work = match self {
            Kind::Complete => tool_call_work(id, "slow_compute", json!({"seconds": 0.01})),
            Kind::Fail => tool_call_work(id, "protocol_error_job", json!({})),
            Kind::Retry => tool_call_work(id, "flaky", json!({"succeed_on_attempt": 3})),
            Kind::AnsweredLive | Kind::AnsweredParked | Kind::CancelParked => {
                tool_call_work(id, "confirm_delete", json!({"filename": "f"}))
            }
            Kind::CancelRunning => tool_call_work(id, "slow_compute", json!({"seconds": 600})),
            Kind::Sleep => tool_call_work(id, "test_sleep", json!({"ms": SLEEP_MS})),
        };
        if self == Kind::Retry
            && let Ok(p) = crate::model::RetryPolicy::new(RETRY_DELAYS_MS)
        {
            work.retry_policy = p;
        }
        work
    }

    fn expected(self) -> TaskStatus {
        match self {
            Kind::Fail => TaskStatus::Failed,
            Kind::CancelRunning | Kind::CancelParked => TaskStatus::Cancelled,
            _ => TaskStatus::Completed,
        }
    }
}

/// What the recorder saw the store say, in store time.
#[derive(Default)]
struct StoreLog {
    /// `retry_at` of each scheduled retry, by task, in order.
    retry_at: HashMap<TaskId, Vec<u64>>,
    /// Claim times (lease expiry minus lease length), by task, in order.
    claimed_at: HashMap<TaskId, Vec<u64>>,
    /// Wake times of each committed sleep, by task, in order.
    wake_at: HashMap<TaskId, Vec<u64>>,
}

/// Passes every call through and writes down retries and claims.
struct Recorder {
    log: Arc<Mutex<StoreLog>>,
}

impl Recorder {
    fn claimed(&self, c: &crate::store::Claimed) {
        let at = c.lease.expires_at().as_millis().saturating_sub(LEASE_MS);
        let mut log = self.log.lock();
        log.claimed_at.entry(c.task.id).or_default().push(at);
    }
}

#[async_trait::async_trait]
impl Layer for Recorder {
    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        let sleep = match &t.event.kind {
            EventKind::Sleeping { until } => Some(until.as_millis()),
            _ => None,
        };
        let c = t.apply(inner).await?;
        if let crate::store::Effect::RetryScheduled { retry_at, .. } = c.effect {
            let mut log = self.log.lock();
            log.retry_at
                .entry(c.task.id)
                .or_default()
                .push(retry_at.as_millis());
        }
        if let Some(until) = sleep {
            let mut log = self.log.lock();
            log.wake_at.entry(c.task.id).or_default().push(until);
        }
        Ok(c)
    }

    async fn claim(
        &self,
        inner: &dyn Store,
        id: &TaskId,
        r: &ClaimRequest,
    ) -> crate::store::StoreResult<crate::store::Claimed> {
        let c = inner.claim(id, r).await?;
        self.claimed(&c);
        Ok(c)
    }

    async fn create_claimed(
        &self,
        inner: &dyn Store,
        new: NewTask,
        r: &ClaimRequest,
    ) -> crate::store::StoreResult<crate::store::Claimed> {
        let c = inner.create_claimed(new, r).await?;
        self.claimed(&c);
        Ok(c)
    }

    async fn claim_next(
        &self,
        inner: &dyn Store,
        r: &ClaimRequest,
    ) -> crate::store::StoreResult<crate::store::NextClaim> {
        let next = inner.claim_next(r).await?;
        for c in next.claimed.iter().chain(&next.more) {
            self.claimed(c);
        }
        Ok(next)
    }
}

/// Job starts and stops the runner reported, by task and claim generation.
#[derive(Default)]
struct Jobs {
    started: HashMap<(TaskId, u64), u32>,
    stopped: HashMap<(TaskId, u64), u32>,
}

impl Jobs {
    /// Counts `e`; for a start or a stop, the task and (for a stop) how it ended.
    fn count(
        &mut self,
        e: &crate::runner::RunnerEvent,
    ) -> Option<(TaskId, Option<crate::runner::JobOutcome>)> {
        use crate::runner::RunnerEvent;
        match e {
            RunnerEvent::JobStarted {
                task, generation, ..
            } => {
                *self.started.entry((*task, *generation)).or_default() += 1;
                Some((*task, None))
            }
            RunnerEvent::JobStopped {
                task,
                generation,
                outcome,
                ..
            } => {
                *self.stopped.entry((*task, *generation)).or_default() += 1;
                Some((*task, Some(*outcome)))
            }
            _ => None,
        }
    }
}

const RUNNER_INVARIANTS: &[(&str, &str)] = &[
    (
        "every_task_terminal",
        "every task ends in the state its kind leads to",
    ),
    (
        "retries_never_early",
        "a retry is claimed no earlier than the retry_at its commit scheduled",
    ),
    (
        "retries_within_policy",
        "a task runs at most once more than its policy has retries",
    ),
    (
        "jobs_balanced",
        "every job start has exactly one stop, and no stop lacks a start",
    ),
    (
        "runner_drains",
        "after a batch no attempt runs and no guest waits",
    ),
    ("no_claim_left", "after a batch no task holds a claim"),
    (
        "sleeps_never_early",
        "a sleeping task is claimed no earlier than the wake time its sleep committed",
    ),
    (
        "sleeps_wake_once",
        "a sleeping task is claimed once to sleep and once to wake, and its replay returns \
         from the journaled sleep",
    ),
    (
        "no_question_twice",
        "a question is stored once, however often its task is replayed",
    ),
];

/// Runs `batches` mixed batches of tasks through a real runner with the example guests
/// (`components`: the fixtures and examples components) on `store`.
pub async fn runner_batches(
    store: Arc<dyn Store>,
    name: &str,
    components: &[std::path::PathBuf],
    opts: &StressOptions,
) -> Result<StressReport, String> {
    let began = Instant::now();
    let mut rig = RunnerRig::start(store, components).await?;
    let mut rng = Rng(opts.seed);
    for batch in 0..opts.rounds.max(1) {
        let tasks = rig.submit_batch(&mut rng, opts).await?;
        let mut jobs = rig.drive(&tasks).await;
        rig.drain(&mut jobs).await;
        rig.judge_runner(batch, &jobs);
        rig.judge_tasks(batch, &tasks).await;
    }
    rig.runner.shutdown().await;
    let o = observed(rig.o);
    Ok(StressReport::judged(
        name,
        "runner",
        opts.seed,
        o,
        RUNNER_INVARIANTS,
        began,
    ))
}

/// A runner over a recording layer of the store under test, with what the batches it runs
/// share: its events, the recorder's log and the observations.
struct RunnerRig {
    store: Arc<dyn Store>,
    runner: crate::runner::Runner,
    rx: tokio::sync::mpsc::UnboundedReceiver<crate::runner::RunnerEvent>,
    log: Arc<Mutex<StoreLog>>,
    o: Shared,
    principal: Principal,
}

/// One batch's tasks: each one's kind and creation time, and the order they were created.
struct Batch {
    kinds: HashMap<TaskId, Kind>,
    created: HashMap<TaskId, Instant>,
    order: Vec<TaskId>,
}

impl RunnerRig {
    /// Loads `components` and starts a runner over `store` behind a [`Recorder`].
    async fn start(
        store: Arc<dyn Store>,
        components: &[std::path::PathBuf],
    ) -> Result<Self, String> {
        use crate::runner::{Catalog, Runner, RunnerOptions};
        use crate::wasm::{ComponentLoader, EngineConfig, WasmEngine};
        use std::time::Duration;

        let engine = WasmEngine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
        let loader = ComponentLoader::new(engine, None).map_err(|e| e.to_string())?;
        let mut catalog = Catalog::new();
        for path in components {
            let c = loader.load(path).await.map_err(|e| e.to_string())?;
            catalog = catalog.with_component(&c).map_err(|e| e.to_string())?;
        }
        let log: Arc<Mutex<StoreLog>> = Arc::default();
        let recorder: Arc<dyn Store> =
            Arc::new(Layered::over(store.clone(), Recorder { log: log.clone() }));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let runner = Runner::start(
            recorder.clone(),
            Arc::new(catalog),
            RunnerOptions {
                owner: "stress".into(),
                lease: Duration::from_millis(LEASE_MS),
                heartbeat: Duration::from_millis(1_000),
                park_after: Duration::from_millis(100),
                sleep_park_after: Duration::from_millis(SLEEP_PARK_AFTER_MS),
                cancel_grace: Duration::from_millis(200),
                poll_interval: Duration::from_millis(10),
                reap_interval: None,
                ..RunnerOptions::default()
            },
            Arc::new(crate::runner::EventChannel(tx)),
        );
        Ok(Self {
            store,
            runner,
            rx,
            log,
            o: Arc::default(),
            principal: tenant(),
        })
    }

    /// Creates a batch of at least `opts.tasks` tasks, every kind at least once, and
    /// submits them to the runner.
    async fn submit_batch(&self, rng: &mut Rng, opts: &StressOptions) -> Result<Batch, String> {
        let mut kinds: HashMap<TaskId, Kind> = HashMap::new();
        let mut created: HashMap<TaskId, Instant> = HashMap::new();
        let mut order = Vec::new();
        for i in 0..opts.tasks.max(KINDS.len()) {
            // Every kind at least once a batch, the rest by the seed.
            let kind = match KINDS.get(i) {
                Some(k) => *k,
                None => KINDS[rng.below(KINDS.len() as u64) as usize],
            };
            let mut new = new_task(rng);
            new.work = kind.work(&new.id);
            new.client_capabilities = json!({"elicitation": {}});
            let id = self.store.create(new).await.map_err(|e| e.to_string())?;
            created.insert(id.id, Instant::now());
            kinds.insert(id.id, kind);
            order.push(id.id);
        }
        for id in &order {
            self.runner.submit(id).await.map_err(|e| e.to_string())?;
        }
        Ok(Batch {
            kinds,
            created,
            order,
        })
    }

    /// Drives `batch` until every task is terminal or the patience runs out, and returns
    /// the job starts and stops seen on the way.
    async fn drive(&mut self, batch: &Batch) -> Jobs {
        use std::time::Duration;

        // Drive the batch: answer and cancel at the moments each kind wants, until every
        // task is terminal or the patience runs out.
        let mut jobs = Jobs::default();
        let mut done: HashMap<TaskId, TaskStatus> = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut acted: std::collections::HashSet<TaskId> = Default::default();
        let mut last_sweep = Instant::now();
        while done.len() < batch.order.len() && Instant::now() < deadline {
            let event = tokio::time::timeout(Duration::from_millis(50), self.rx.recv()).await;
            let mut touched = Vec::new();
            match event {
                Ok(Some(e)) => {
                    if let Some(t) = jobs.count(&e) {
                        touched.push(t);
                    }
                }
                Err(_) => {}
                Ok(None) => break,
            }
            // Every 50 ms, look at every unfinished task too: some changes (an answer, a
            // cancel) reach a task without a job event.
            if last_sweep.elapsed() >= Duration::from_millis(50) {
                last_sweep = Instant::now();
                touched.extend(
                    batch
                        .order
                        .iter()
                        .filter(|t| !done.contains_key(t))
                        .map(|t| (*t, None)),
                );
            }
            for (task, outcome) in touched {
                self.visit(batch, &mut done, &mut acted, task, outcome)
                    .await;
            }
        }
        jobs
    }

    /// Looks at `task` after a job event (its `outcome`, for a stop) or a sweep: records
    /// it in `done` once terminal, else acts on it once (in `acted`) when its kind's
    /// moment has come.
    async fn visit(
        &self,
        batch: &Batch,
        done: &mut HashMap<TaskId, TaskStatus>,
        acted: &mut std::collections::HashSet<TaskId>,
        task: TaskId,
        outcome: Option<crate::runner::JobOutcome>,
    ) {
        use crate::runner::JobOutcome;

        let Some(kind) = batch.kinds.get(&task).copied() else {
            return;
        };
        let Ok(Some((t, _))) = self.store.inspect(&task).await else {
            return;
        };
        if t.status.is_terminal() {
            if done.insert(task, t.status).is_none()
                && let Some(at) = batch.created.get(&task)
            {
                timed(&self.o, "created to terminal", *at);
            }
            return;
        }
        let parked = outcome == Some(JobOutcome::Parked);
        let act = match kind {
            Kind::AnsweredLive => t.status == TaskStatus::InputRequired,
            Kind::AnsweredParked | Kind::CancelParked => parked,
            Kind::CancelRunning => t.attempt >= 1 && t.claim.is_some() && outcome.is_none(),
            _ => false,
        };
        if !act || !acted.insert(task) {
            return;
        }
        self.act(kind, task).await;
    }

    /// Does what `kind` wants done to `task` while it runs or waits: answers its question
    /// or cancels it, and tells the runner.
    async fn act(&self, kind: Kind, task: TaskId) {
        let (store, runner, principal) = (&self.store, &self.runner, &self.principal);
        let id = task.to_string();
        match kind {
            Kind::AnsweredLive | Kind::AnsweredParked => {
                if let Ok(access) = store.authorize(principal, Action::Update, &id).await {
                    let answer: serde_json::Map<String, serde_json::Value> = [(
                        "confirm".to_owned(),
                        json!({"action": "accept", "content": {"confirm": true}}),
                    )]
                    .into_iter()
                    .collect();
                    if let Ok(c) = store.accept_input(&access, EventId::random(), answer).await
                        && let crate::store::Effect::Accepted { complete, .. } = c.effect
                    {
                        runner.input_accepted(&task, complete).await;
                    }
                }
            }
            Kind::CancelRunning | Kind::CancelParked => {
                if let Ok(access) = store.authorize(principal, Action::Cancel, &id).await
                    && store.cancel(&access, None).await.is_ok()
                {
                    runner.cancel(&task);
                }
            }
            _ => {}
        }
    }

    /// Waits (with patience) for the runner to hold no attempt and no waiter, counting the
    /// job events that arrive meanwhile and those already queued.
    async fn drain(&mut self, jobs: &mut Jobs) {
        use std::time::Duration;

        let runner = &self.runner;
        // The runner drains: no attempt, no waiter (the last stops may still be on their
        // way; give them the patience, then judge).
        let drain_deadline = Instant::now() + Duration::from_secs(30);
        while (runner.active() > 0 || !runner.waiters().is_empty())
            && Instant::now() < drain_deadline
        {
            if let Ok(Some(e)) =
                tokio::time::timeout(Duration::from_millis(50), self.rx.recv()).await
            {
                jobs.count(&e);
            }
        }
        while let Ok(e) = self.rx.try_recv() {
            jobs.count(&e);
        }
    }

    /// Judges the runner after batch `batch`: drained, and every job start matched by
    /// exactly one stop in `jobs`.
    fn judge_runner(&self, batch: usize, jobs: &Jobs) {
        let (o, runner) = (&self.o, &self.runner);
        check(
            o,
            "runner_drains",
            runner.active() == 0 && runner.waiters().is_empty(),
            || {
                format!(
                    "batch {batch}: {} attempts and {} waiters left",
                    runner.active(),
                    runner.waiters().len()
                )
            },
        );
        let keys: std::collections::BTreeSet<(TaskId, u64)> = jobs
            .started
            .keys()
            .chain(jobs.stopped.keys())
            .copied()
            .collect();
        for key in &keys {
            let (s, p) = (
                jobs.started.get(key).copied().unwrap_or(0),
                jobs.stopped.get(key).copied().unwrap_or(0),
            );
            check(o, "jobs_balanced", s == 1 && p == 1, || {
                format!("task {} generation {}: {s} starts, {p} stops", key.0, key.1)
            });
        }
    }

    /// Judges every task of batch `batch` as the store reads it now, against its kind and
    /// the retries and claims the recorder logged.
    async fn judge_tasks(&self, batch: usize, tasks: &Batch) {
        let log = std::mem::take(&mut *self.log.lock());
        for id in &tasks.order {
            let kind = tasks.kinds[id];
            let t = self.store.inspect(id).await.ok().flatten().map(|(t, _)| t);
            judge_task(&self.o, batch, id, kind, t, &log);
        }
    }
}

/// Judges one task `id` of kind `kind` from batch `batch`, as read (`t`), against the
/// retries and claims in `log`.
fn judge_task(
    o: &Shared,
    batch: usize,
    id: &TaskId,
    kind: Kind,
    t: Option<crate::model::Task>,
    log: &StoreLog,
) {
    let status = t.as_ref().map(|t| t.status);
    check(
        o,
        "every_task_terminal",
        status == Some(kind.expected()),
        || format!("batch {batch}: {kind:?} task {id} ended {status:?}"),
    );
    let Some(t) = t else { return };
    check(o, "no_claim_left", t.claim.is_none(), || {
        format!("batch {batch}: task {id} still claimed by {:?}", t.claim)
    });
    if kind == Kind::Retry {
        let retries = log.retry_at.get(id).cloned().unwrap_or_default();
        let claims = log.claimed_at.get(id).cloned().unwrap_or_default();
        check(
            o,
            "retries_within_policy",
            t.attempt as usize <= RETRY_DELAYS_MS.len() + 1
                && retries.len() <= RETRY_DELAYS_MS.len(),
            || {
                format!(
                    "task {id}: {} attempts, {} retries",
                    t.attempt,
                    retries.len()
                )
            },
        );
        // The claim after the n-th retry commit is claim n + 1.
        for (n, at) in retries.iter().enumerate() {
            let claim = claims.get(n + 1).copied();
            check(
                o,
                "retries_never_early",
                claim.is_some_and(|c| c >= *at),
                || format!("task {id}: retry {n} due at {at}, claimed at {claim:?}"),
            );
        }
    }
    if kind == Kind::Sleep {
        let wakes = log.wake_at.get(id).cloned().unwrap_or_default();
        let claims = log.claimed_at.get(id).cloned().unwrap_or_default();
        // The claim after the n-th sleep commit is claim n + 1.
        for (n, at) in wakes.iter().enumerate() {
            let claim = claims.get(n + 1).copied();
            check(
                o,
                "sleeps_never_early",
                claim.is_some_and(|c| c >= *at),
                || format!("task {id}: sleep {n} wakes at {at}, claimed at {claim:?}"),
            );
        }
        let woke_on = t.outcome.as_ref().and_then(|o| match o {
            crate::model::Outcome::Result(r) => r["structuredContent"]["attempt"].as_u64(),
            crate::model::Outcome::Error(_) => None,
        });
        check(
            o,
            "sleeps_wake_once",
            wakes.len() == 1 && claims.len() == 2 && t.attempt == 2 && woke_on == Some(2),
            || {
                format!(
                    "task {id}: {} sleeps, {} claims, {} attempts, woke on {woke_on:?}",
                    wakes.len(),
                    claims.len(),
                    t.attempt
                )
            },
        );
    }
    if matches!(
        kind,
        Kind::AnsweredLive | Kind::AnsweredParked | Kind::CancelParked
    ) {
        check(o, "no_question_twice", t.inputs.len() == 1, || {
            format!("task {id}: {} questions stored", t.inputs.len())
        });
    }
    if kind == Kind::AnsweredParked {
        let answered = t
            .outcome
            .as_ref()
            .is_some_and(|o| serde_json::to_string(o).is_ok_and(|s| s.contains("Deleted f")));
        check(o, "no_question_twice", answered && t.attempt == 2, || {
            format!(
                "task {id}: replayed with the stored answer? attempts {}, outcome {:?}",
                t.attempt, t.outcome
            )
        });
    }
}
