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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use crate::model::{EventId, EventKind, Principal, Scope, TaskEvent, TaskId, TaskStatus, Work};
use crate::store::{Action, Authority, ClaimRequest, Lease, NewTask, Store, StoreError};

/// The shape of one run.
#[derive(Debug, Clone)]
pub struct StressOptions {
    /// Concurrent writers per shared task.
    pub writers: usize,
    /// Shared tasks per round.
    pub tasks: usize,
    /// Compare-and-set attempts each writer makes on each task.
    pub ops: usize,
    /// Rounds (fresh tasks each).
    pub rounds: usize,
    /// The seed: the same seed makes the same workload.
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
        for i in &self.invariants {
            out.push_str(&format!(
                "{:<4} {:<34} {:>8} checked {:>6} violations  {}\n",
                i.verdict, i.name, i.checked, i.violations, i.meaning
            ));
            for e in &i.examples {
                out.push_str(&format!("       e.g. {e}\n"));
            }
        }
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

fn check(o: &Shared, name: &'static str, ok: bool, what: impl FnOnce() -> String) {
    let mut o = o.lock().unwrap_or_else(|p| p.into_inner());
    o.tallies.entry(name).or_default().check(ok, what);
}

fn timed(o: &Shared, op: &'static str, since: Instant) {
    let us = since.elapsed().as_micros() as u64;
    let mut o = o.lock().unwrap_or_else(|p| p.into_inner());
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
    let mut o = Arc::try_unwrap(o)
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .unwrap_or_default();
    let invariants = INVARIANTS
        .iter()
        .map(|(name, meaning)| {
            let t = o.tallies.remove(name).unwrap_or_default();
            // An invariant nothing exercised proves nothing: it fails.
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
        .collect();
    let timings = o
        .timings
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
        .collect();
    StressReport {
        store: name.to_owned(),
        mode: "contention",
        seed: opts.seed,
        invariants,
        timings,
        elapsed_ms: began.elapsed().as_millis() as u64,
    }
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

    // 1. Compare-and-set race: every writer reads the revision and tries to move it on.
    let wins: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let mut joins = Vec::new();
    for w in 0..opts.writers.max(1) {
        let (store, o, wins, lease) = (store.clone(), o.clone(), wins.clone(), lease.clone());
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
                        let mut w = wins.lock().unwrap_or_else(|p| p.into_inner());
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
    let wins = std::mem::take(&mut *wins.lock().unwrap_or_else(|p| p.into_inner()));
    for (rev, n) in &wins {
        check(&o, "one_winner_per_revision", *n == 1, || {
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
    check(&o, "revisions_dense_and_ordered", dense, || {
        format!("{label}: committed revisions {revs:?} after {base}")
    });
    let read = store.worker_snapshot(&lease).await.map(|(t, _)| t.revision);
    check(
        &o,
        "acknowledged_writes_present",
        read.as_ref().ok() == Some(&(base + committed)),
        || {
            format!(
                "{label}: {committed} acknowledged commits after revision {base}, store reads {read:?}"
            )
        },
    );

    // 2. Event ids: the same id again replays; the same id with other content is refused.
    let mut rng = Rng(seed.rotate_left(17));
    for k in 0..opts.writers.max(1) {
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
                Authority::Worker(&lease),
                TaskEvent::new(event_id.clone(), kind.clone()),
                None,
            )
            .await;
        let Ok(first) = first else {
            check(&o, "acknowledged_writes_present", false, || {
                format!("{label}: an input request failed: {first:?}")
            });
            continue;
        };
        let again = store
            .transition(
                Authority::Worker(&lease),
                TaskEvent::new(event_id.clone(), kind),
                None,
            )
            .await;
        check(
            &o,
            "event_id_replays_its_revision",
            matches!(&again, Ok(c) if c.replayed && c.revision == first.revision),
            || format!("{label}: replay of {} gave {again:?}", event_id.as_str()),
        );
        let reused = store
            .transition(
                Authority::Worker(&lease),
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
            &o,
            "event_id_reuse_refused",
            matches!(reused, Err(StoreError::EventIdReused { .. })),
            || format!("{label}: reuse of {} gave {reused:?}", event_id.as_str()),
        );
    }

    // 3. Fencing: release, claim again; the old lease must commit nothing.
    if store.release(&lease).await.is_ok() {
        match store.claim(&id, &req).await {
            Ok(newer) => {
                let stale = store
                    .transition(
                        Authority::Worker(&lease),
                        TaskEvent::random(EventKind::StatusMessage {
                            message: "from a stale lease".into(),
                        }),
                        None,
                    )
                    .await;
                check(
                    &o,
                    "stale_lease_never_commits",
                    matches!(stale, Err(StoreError::LeaseLost)),
                    || format!("{label}: a stale lease's commit gave {stale:?}"),
                );
                let renewed = store.renew(&lease, 60_000).await;
                check(
                    &o,
                    "stale_lease_never_commits",
                    matches!(renewed, Err(StoreError::LeaseLost)),
                    || format!("{label}: a stale lease's renewal gave {renewed:?}"),
                );
                terminal_race(&store, &o, &id, &newer.lease, &label).await;
            }
            Err(e) => check(&o, "acknowledged_writes_present", false, || {
                format!("{label}: the second claim failed: {e}")
            }),
        }
    }
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
    let complete = {
        let (store, lease) = (store.clone(), lease.clone());
        tokio::spawn(async move {
            store
                .transition(
                    Authority::Worker(&lease),
                    TaskEvent::random(EventKind::Completed {
                        result: json!({"content": [{"type": "text", "text": "done"}]}),
                    }),
                    None,
                )
                .await
                .map(|c| (TaskStatus::Completed, c.revision))
        })
    };
    let fail = {
        let (store, lease) = (store.clone(), lease.clone());
        tokio::spawn(async move {
            store
                .transition(
                    Authority::Worker(&lease),
                    TaskEvent::random(EventKind::Failed {
                        error: crate::model::JsonRpcError::new(-32603, "stress"),
                        status_message: None,
                    }),
                    None,
                )
                .await
                .map(|c| (TaskStatus::Failed, c.revision))
        })
    };
    let cancel = {
        let (store, access) = (store.clone(), access.clone());
        tokio::spawn(async move {
            store
                .transition(
                    Authority::Request(&access),
                    TaskEvent::random(EventKind::Cancelled {
                        status_message: None,
                    }),
                    None,
                )
                .await
                .map(|c| (TaskStatus::Cancelled, c.revision))
        })
    };
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
    let late = store
        .transition(
            Authority::Request(&access),
            TaskEvent::random(EventKind::Cancelled {
                status_message: None,
            }),
            None,
        )
        .await;
    let read = store
        .authorize_read(&tenant(), &id.to_string())
        .await
        .map(|(_, t)| (t.status, t.revision));
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
