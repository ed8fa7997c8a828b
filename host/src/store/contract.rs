//! The store contract suite: plain async functions over `&dyn Store`, one per named group,
//! that every adapter runs through [`suite!`].
//!
//! Time is driven with a [`ManualClock`] shared with the store; nothing sleeps. A backend
//! that cannot offer a behaviour (the memory store does not survive a reopen) declares it
//! through [`Backend::durable`]; an assertion is never weakened for one backend.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::model::{
    EventId, EventKind, JsonRpcError, ManualClock, Outcome, Principal, RetryPolicy, Scope,
    TaskEvent, TaskId, TaskStatus, Timestamp, Work,
};

use super::{Action, Authority, ClaimRequest, Effect, InputReply, NewTask, Store, StoreError};

/// An adapter under test.
#[async_trait::async_trait]
pub(crate) trait Backend: Send {
    /// Whether a reopened store keeps what was committed.
    fn durable(&self) -> bool;
    /// Opens the store (again, for durable backends: the same data) on `clock`. The caller
    /// drops every handle to the previous instance first.
    async fn open(&mut self, clock: &ManualClock) -> Arc<dyn Store>;
}

const T0: u64 = 1_700_000_000_000;
const LEASE: u64 = 30_000;

/// Generates one test per contract group for a backend factory.
macro_rules! suite {
    ($make:expr) => {
        $crate::store::contract::suite!(@groups $make;
            creation,
            access_and_scope,
            transitions_and_cas,
            event_idempotency,
            terminal_races,
            input_lifecycle,
            claims_and_fencing,
            renewal_and_expiry,
            retry_scheduling,
            reaping,
            durability_across_reopen,
        );
    };
    (@groups $make:expr; $($group:ident),* $(,)?) => {
        mod contract {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $group() {
                    let mut backend = ($make)();
                    $crate::store::contract::$group(&mut backend).await;
                }
            )*
        }
    };
}
pub(crate) use suite;

fn clock() -> ManualClock {
    ManualClock::new(Timestamp(T0))
}

fn tenant(name: &str) -> Principal {
    Principal::new(name, "user-1")
}

fn work() -> Work {
    Work::new(
        "snodo/tool-call",
        json!({"tool": "export", "arguments": {"n": 1}}),
        "k",
    )
}

fn ids(reaped: Vec<super::Reaped>) -> Vec<TaskId> {
    reaped.into_iter().map(|r| r.id).collect()
}

fn new_task(tenant: &str) -> NewTask {
    let id = TaskId::generate();
    let mut t = NewTask::new(
        id,
        Scope::new(tenant),
        Work {
            idempotency_key: id.to_string(),
            ..work()
        },
    );
    t.poll_interval_ms = Some(1_000);
    t
}

fn ev(kind: EventKind) -> TaskEvent {
    TaskEvent::random(kind)
}

fn ev_id(id: &str, kind: EventKind) -> TaskEvent {
    TaskEvent::new(EventId::new(id).expect("valid event id"), kind)
}

fn completed(text: &str) -> EventKind {
    EventKind::Completed {
        result: json!({"content": [{"type": "text", "text": text}]}),
    }
}

fn cancelled() -> EventKind {
    EventKind::Cancelled {
        status_message: Some("cancelled by the user".into()),
    }
}

fn elicit(message: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}})
}

fn responses(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn cr() -> ClaimRequest {
    ClaimRequest::new(LEASE, "contract")
}

async fn create(store: &dyn Store, tenant: &str) -> TaskId {
    store.create(new_task(tenant)).await.expect("create").id
}

async fn read(store: &dyn Store, tenant_name: &str, id: &TaskId) -> crate::model::Task {
    let access = store
        .authorize(&tenant(tenant_name), Action::Read, &id.to_string())
        .await
        .expect("authorize read");
    store.get(&access).await.expect("get")
}

async fn cancel(store: &dyn Store, tenant_name: &str, id: &TaskId) -> Result<u64, StoreError> {
    let access = store
        .authorize(&tenant(tenant_name), Action::Cancel, &id.to_string())
        .await?;
    store
        .transition(Authority::Request(&access), ev(cancelled()), None)
        .await
        .map(|c| c.revision)
}

// ---------------------------------------------------------------------------------------

/// create commits Task + Work together, visible at once, with store-assigned fields.
pub(crate) async fn creation(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let mut new = new_task("acme");
    new.ttl_ms = Some(60_000);
    new.status_message = Some("queued".into());
    new.client_capabilities = json!({"elicitation": {}});
    let id = new.id;
    let expected_work = new.work.clone();
    let task = store.create(new.clone()).await.expect("create");
    assert_eq!(task.id, id);
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.revision, 0);
    assert_eq!(task.generation, 0);
    assert_eq!(task.attempt, 0);
    assert_eq!(task.created_at, Timestamp(T0));
    assert_eq!(task.last_updated_at, Timestamp(T0));
    assert_eq!(task.ttl_ms, Some(60_000));
    assert_eq!(task.poll_interval_ms, Some(1_000));
    assert_eq!(task.status_message.as_deref(), Some("queued"));
    assert_eq!(task.client_capabilities, json!({"elicitation": {}}));

    // Visible to a read the moment create returned, with its work.
    assert_eq!(read(&*store, "acme", &id).await, task);
    let (stored, stored_work) = store.inspect(&id).await.expect("inspect").expect("present");
    assert_eq!(stored, task);
    assert_eq!(stored_work, expected_work);

    // The same id twice is refused and changes nothing.
    assert_eq!(
        store.create(new).await.err(),
        Some(StoreError::AlreadyExists)
    );
    assert_eq!(read(&*store, "acme", &id).await, task);

    // Invalid input is refused with a reason and stores nothing.
    let mut bad = new_task("acme");
    bad.ttl_ms = Some(0);
    let bad_id = bad.id;
    assert!(matches!(
        store.create(bad).await,
        Err(StoreError::Invalid(_))
    ));
    let mut bad = new_task("acme");
    bad.poll_interval_ms = Some(0);
    assert!(matches!(
        store.create(bad).await,
        Err(StoreError::Invalid(_))
    ));
    let mut bad = new_task("acme");
    bad.work.kind = String::new();
    assert!(matches!(
        store.create(bad).await,
        Err(StoreError::Invalid(_))
    ));
    let mut bad = new_task("acme");
    bad.client_capabilities = json!([1, 2]);
    assert!(matches!(
        store.create(bad).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.inspect(&bad_id).await.expect("inspect"), None);

    // Ids are unguessable and distinct.
    let other = create(&*store, "acme").await;
    assert_ne!(other, id);
}

/// authorize hides foreign, unknown, malformed and expired tasks identically, and an access
/// value works only for its action.
pub(crate) async fn access_and_scope(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let mine = create(&*store, "acme").await;
    let theirs = create(&*store, "globex").await;
    let mut short = new_task("acme");
    short.ttl_ms = Some(5_000);
    let short = store.create(short).await.expect("create").id;

    let acme = tenant("acme");
    for action in [Action::Read, Action::Update, Action::Cancel] {
        for id in [
            theirs.to_string(),
            TaskId::generate().to_string(),
            "tasks-conformance-nonexistent-12345".to_owned(),
            String::new(),
        ] {
            assert_eq!(
                store.authorize(&acme, action, &id).await.err(),
                Some(StoreError::NotFound),
                "{action:?} {id}"
            );
        }
    }
    for id in [theirs.to_string(), TaskId::generate().to_string()] {
        assert_eq!(
            store.authorize_read(&acme, &id).await.err(),
            Some(StoreError::NotFound),
            "{id}"
        );
    }
    let (access, task) = store
        .authorize_read(&acme, &mine.to_string())
        .await
        .expect("own task");
    assert_eq!((access.task_id(), access.action()), (&mine, Action::Read));
    assert_eq!(task, read(&*store, "acme", &mine).await);
    // Same subject name, other tenant: still foreign.
    let globex_same_subject = Principal::new("globex", "user-1");
    assert_eq!(
        store
            .authorize(&globex_same_subject, Action::Read, &mine.to_string())
            .await
            .err(),
        Some(StoreError::NotFound)
    );
    // A different subject of the same tenant shares the scope.
    let colleague = Principal::new("acme", "user-2");
    assert!(
        store
            .authorize(&colleague, Action::Read, &mine.to_string())
            .await
            .is_ok()
    );

    // Bound to one action.
    let read_access = store
        .authorize(&acme, Action::Read, &mine.to_string())
        .await
        .expect("authorize");
    assert_eq!(read_access.action(), Action::Read);
    assert_eq!(read_access.task_id(), &mine);
    let err = store
        .transition(Authority::Request(&read_access), ev(cancelled()), None)
        .await
        .err();
    assert_eq!(
        err,
        Some(StoreError::WrongAction {
            granted: Action::Read
        })
    );
    let cancel_access = store
        .authorize(&acme, Action::Cancel, &mine.to_string())
        .await
        .expect("authorize");
    assert_eq!(
        store.get(&cancel_access).await.err(),
        Some(StoreError::WrongAction {
            granted: Action::Cancel
        })
    );
    let err = store
        .accept_input(
            &cancel_access,
            EventId::random(),
            responses(&[("k", json!({}))]),
        )
        .await
        .err();
    assert_eq!(
        err,
        Some(StoreError::WrongAction {
            granted: Action::Cancel
        })
    );
    // A request cannot send worker events, whatever its action.
    let update_access = store
        .authorize(&acme, Action::Update, &mine.to_string())
        .await
        .expect("authorize");
    let err = store
        .transition(Authority::Request(&update_access), ev(completed("x")), None)
        .await
        .err();
    assert_eq!(
        err,
        Some(StoreError::WrongAction {
            granted: Action::Update
        })
    );
    assert_eq!(
        read(&*store, "acme", &mine).await.status,
        TaskStatus::Working
    );

    // Expiry hides a task even before it is reaped, and invalidates access already held.
    let held = store
        .authorize(&acme, Action::Read, &short.to_string())
        .await
        .expect("authorize");
    clock.advance(5_000);
    assert_eq!(store.get(&held).await.err(), Some(StoreError::NotFound));
    assert_eq!(
        store
            .authorize(&acme, Action::Read, &short.to_string())
            .await
            .err(),
        Some(StoreError::NotFound)
    );
}

/// Transitions are compare-and-set on the revision and follow the lifecycle.
pub(crate) async fn transitions_and_cas(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let id = create(&*store, "acme").await;
    let claimed = store.claim(&id, &cr()).await.expect("claim");
    let lease = &claimed.lease;

    clock.advance(10);
    let c = store
        .transition(Authority::Worker(lease), ev(EventKind::Started), Some(0))
        .await
        .expect("started");
    assert_eq!((c.revision, c.task.revision, c.task.attempt), (1, 1, 1));
    assert_eq!(c.task.last_updated_at, Timestamp(T0 + 10));
    assert!(!c.replayed);

    // A stale expected revision is refused with the current one and changes nothing.
    let err = store
        .transition(
            Authority::Worker(lease),
            ev(EventKind::StatusMessage {
                message: "half way".into(),
            }),
            Some(0),
        )
        .await
        .err();
    assert_eq!(err, Some(StoreError::Conflict { current: 1 }));
    assert_eq!(read(&*store, "acme", &id).await.status_message, None);

    let c = store
        .transition(
            Authority::Worker(lease),
            ev(EventKind::StatusMessage {
                message: "half way".into(),
            }),
            Some(1),
        )
        .await
        .expect("status message");
    assert_eq!(c.task.status_message.as_deref(), Some("half way"));

    // working -> input_required -> working -> completed
    let c = store
        .request_input(lease, EventId::random(), "confirm", elicit("go?"))
        .await
        .expect("input requested");
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let update = store
        .authorize(&tenant("acme"), Action::Update, &id.to_string())
        .await
        .expect("authorize");
    let c = store
        .accept_input(
            &update,
            EventId::random(),
            responses(&[("confirm", json!({"action": "accept"}))]),
        )
        .await
        .expect("accept");
    assert_eq!(c.task.status, TaskStatus::Working);
    clock.advance(5);
    let c = store
        .transition(Authority::Worker(lease), ev(completed("done")), None)
        .await
        .expect("completed");
    assert_eq!(c.task.status, TaskStatus::Completed);
    assert_eq!(c.revision, 5);
    assert_eq!(c.task.last_updated_at, Timestamp(T0 + 15));
    assert_eq!(
        c.task.outcome,
        Some(Outcome::Result(
            json!({"content": [{"type": "text", "text": "done"}]})
        ))
    );
    assert!(
        c.task.claim.is_none(),
        "completion releases the claim in the same commit"
    );
    assert_eq!(read(&*store, "acme", &id).await, c.task);

    // Invalid events are refused before anything is looked at.
    let id2 = create(&*store, "acme").await;
    let l2 = store.claim(&id2, &cr()).await.expect("claim").lease;
    let err = store
        .transition(
            Authority::Worker(&l2),
            ev(EventKind::Completed {
                result: json!("no"),
            }),
            None,
        )
        .await
        .err();
    assert!(matches!(err, Some(StoreError::Invalid(_))), "{err:?}");
    // A worker cannot send request events.
    let err = store
        .transition(Authority::Worker(&l2), ev(cancelled()), None)
        .await
        .err();
    assert!(matches!(err, Some(StoreError::Invalid(_))), "{err:?}");
    assert_eq!(read(&*store, "acme", &id2).await.revision, 0);
}

/// A repeated event id returns its first commit; reuse for another event is refused.
pub(crate) async fn event_idempotency(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let id = create(&*store, "acme").await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;

    let first = store
        .transition(
            Authority::Worker(&lease),
            ev_id("start-1", EventKind::Started),
            None,
        )
        .await
        .expect("started");
    clock.advance(100);
    let again = store
        .transition(
            Authority::Worker(&lease),
            ev_id("start-1", EventKind::Started),
            None,
        )
        .await
        .expect("replay");
    assert!(again.replayed);
    assert_eq!(again.revision, first.revision);
    assert_eq!(again.task.attempt, 1, "a replay applies nothing");
    assert_eq!(again.task.last_updated_at, first.task.last_updated_at);

    // Same id, different content: refused.
    let err = store
        .transition(
            Authority::Worker(&lease),
            ev_id(
                "start-1",
                EventKind::StatusMessage {
                    message: "x".into(),
                },
            ),
            None,
        )
        .await
        .err();
    assert_eq!(
        err,
        Some(StoreError::EventIdReused {
            id: "start-1".into()
        })
    );

    // The replay answer survives the claim's end: a worker whose completion was committed
    // but whose reply was lost can ask again and learn it committed.
    let done = store
        .transition(
            Authority::Worker(&lease),
            ev_id("done-1", completed("ok")),
            None,
        )
        .await
        .expect("completed");
    let replay = store
        .transition(
            Authority::Worker(&lease),
            ev_id("done-1", completed("ok")),
            None,
        )
        .await
        .expect("replay after terminal");
    assert!(replay.replayed);
    assert_eq!(replay.revision, done.revision);
    // A replay even ignores a stale expected revision: it reports, it does not apply.
    let replay = store
        .transition(
            Authority::Worker(&lease),
            ev_id("done-1", completed("ok")),
            Some(0),
        )
        .await
        .expect("replay with stale revision");
    assert_eq!(replay.revision, done.revision);

    // Request events replay too.
    let id = create(&*store, "acme").await;
    let access = store
        .authorize(&tenant("acme"), Action::Cancel, &id.to_string())
        .await
        .expect("authorize");
    let a = store
        .transition(
            Authority::Request(&access),
            ev_id("cancel-1", cancelled()),
            None,
        )
        .await
        .expect("cancel");
    let b2 = store
        .transition(
            Authority::Request(&access),
            ev_id("cancel-1", cancelled()),
            None,
        )
        .await
        .expect("cancel replay");
    assert!(b2.replayed);
    assert_eq!(a.revision, b2.revision);

    // Another generation reusing an id that an earlier generation committed is refused.
    let id = create(&*store, "acme").await;
    let l1 = store.claim(&id, &cr()).await.expect("claim").lease;
    store
        .transition(Authority::Worker(&l1), ev_id("s", EventKind::Started), None)
        .await
        .expect("started");
    store.release(&l1).await.expect("release");
    let l2 = store.claim(&id, &cr()).await.expect("reclaim").lease;
    let err = store
        .transition(Authority::Worker(&l2), ev_id("s", EventKind::Started), None)
        .await
        .err();
    assert_eq!(err, Some(StoreError::EventIdReused { id: "s".into() }));
}

/// Terminal states never change; completion racing cancellation leaves exactly one.
pub(crate) async fn terminal_races(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;

    // Cancelled first: the late result is refused and cannot resurrect the task.
    let id = create(&*store, "acme").await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    cancel(&*store, "acme", &id).await.expect("cancel");
    let err = store
        .transition(Authority::Worker(&lease), ev(completed("late")), None)
        .await
        .err();
    assert_eq!(
        err,
        Some(StoreError::Terminal {
            status: TaskStatus::Cancelled
        })
    );
    let t = read(&*store, "acme", &id).await;
    assert_eq!(t.status, TaskStatus::Cancelled);
    assert_eq!(t.outcome, None);
    // The worker learns from renew that it should stop.
    assert_eq!(
        store.renew(&lease, LEASE).await.err(),
        Some(StoreError::Terminal {
            status: TaskStatus::Cancelled
        })
    );

    // Completed first: cancel is refused, the result stays.
    let id = create(&*store, "acme").await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    store
        .transition(Authority::Worker(&lease), ev(completed("first")), None)
        .await
        .expect("complete");
    assert_eq!(
        cancel(&*store, "acme", &id).await.err(),
        Some(StoreError::Terminal {
            status: TaskStatus::Completed
        })
    );
    let t = read(&*store, "acme", &id).await;
    let before_revision = t.revision;
    for kind in [
        EventKind::Started,
        completed("again"),
        EventKind::Failed {
            error: JsonRpcError::new(-32603, "x"),
            status_message: None,
        },
        EventKind::StatusMessage {
            message: "x".into(),
        },
        EventKind::RetryRequested {
            error: JsonRpcError::new(-32603, "x"),
            status_message: None,
        },
    ] {
        assert!(
            store
                .transition(Authority::Worker(&lease), ev(kind), None)
                .await
                .is_err()
        );
    }
    assert!(matches!(
        store.claim(&id, &cr()).await,
        Err(StoreError::Terminal { .. })
    ));
    let after = read(&*store, "acme", &id).await;
    assert_eq!(after.revision, before_revision);
    assert_eq!(after.status, TaskStatus::Completed);

    // Real races: both sides at once, many times; exactly one terminal commit each time.
    let mut handles = Vec::new();
    for _ in 0..32 {
        let id = create(&*store, "acme").await;
        let lease = store.claim(&id, &cr()).await.expect("claim").lease;
        let access = store
            .authorize(&tenant("acme"), Action::Cancel, &id.to_string())
            .await
            .expect("authorize");
        let s1 = store.clone();
        let s2 = store.clone();
        let done = tokio::spawn(async move {
            s1.transition(Authority::Worker(&lease), ev(completed("raced")), None)
                .await
                .is_ok()
        });
        let cancelled_ok = tokio::spawn(async move {
            s2.transition(Authority::Request(&access), ev(cancelled()), None)
                .await
                .is_ok()
        });
        handles.push((id, done, cancelled_ok));
    }
    let mut completions = 0;
    for (id, done, cancelled_ok) in handles {
        let done = done.await.expect("join");
        let cancelled_ok = cancelled_ok.await.expect("join");
        assert!(
            done ^ cancelled_ok,
            "exactly one terminal transition commits"
        );
        let t = read(&*store, "acme", &id).await;
        let expected = if done {
            TaskStatus::Completed
        } else {
            TaskStatus::Cancelled
        };
        assert_eq!(t.status, expected);
        assert_eq!(t.revision, 1);
        completions += usize::from(done);
    }
    let _ = completions;
}

/// Input requests park the task; responses land in the inbox; keys are lifetime-unique.
pub(crate) async fn input_lifecycle(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let id = create(&*store, "acme").await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    let update = store
        .authorize(&tenant("acme"), Action::Update, &id.to_string())
        .await
        .expect("authorize");

    let a = store
        .request_input(&lease, EventId::random(), "a", elicit("first?"))
        .await
        .expect("request a");
    assert_eq!(a.effect, Effect::Input(InputReply::Pending));
    assert_eq!(a.task.status, TaskStatus::InputRequired);
    let b_ = store
        .request_input(&lease, EventId::random(), "b", elicit("second?"))
        .await
        .expect("request b");
    assert_eq!(b_.revision, 2);
    let outstanding: Vec<&str> = b_.task.outstanding_inputs().map(|(k, _)| k).collect();
    assert_eq!(outstanding, vec!["a", "b"]);

    // Same key, identical request: reattach, no new event.
    let again = store
        .request_input(&lease, EventId::random(), "a", elicit("first?"))
        .await
        .expect("reattach");
    assert_eq!(again.effect, Effect::Input(InputReply::Pending));
    assert_eq!(again.revision, 2);
    // Same key, different request: refused.
    let err = store
        .request_input(&lease, EventId::random(), "a", elicit("changed?"))
        .await
        .err();
    assert_eq!(err, Some(StoreError::InputConflict { key: "a".into() }));

    // Partial fulfilment; unknown keys ignored whatever they hold.
    let c = store
        .accept_input(
            &update,
            EventId::random(),
            responses(&[
                ("a", json!({"action": "accept", "content": {"ok": true}})),
                ("zzz", json!({"ignored": true})),
            ]),
        )
        .await
        .expect("accept a");
    assert_eq!(
        c.effect,
        Effect::Accepted {
            keys: vec!["a".into()],
            complete: false
        }
    );
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let t = read(&*store, "acme", &id).await;
    let outstanding: Vec<&str> = t.outstanding_inputs().map(|(k, _)| k).collect();
    assert_eq!(
        outstanding,
        vec!["b"],
        "the answered key leaves inputRequests at once"
    );
    assert_eq!(
        t.inputs.get("a").and_then(|e| e.response.clone()),
        Some(json!({"action": "accept", "content": {"ok": true}}))
    );

    // Answering again, or only unknown keys: ignored, nothing commits.
    let c = store
        .accept_input(
            &update,
            EventId::random(),
            responses(&[("a", json!({"action": "decline"})), ("nope", json!(1))]),
        )
        .await
        .expect("accept nothing");
    assert_eq!(
        c.effect,
        Effect::Accepted {
            keys: vec![],
            complete: false
        }
    );
    assert_eq!(c.revision, t.revision);
    assert_eq!(
        read(&*store, "acme", &id)
            .await
            .inputs
            .get("a")
            .and_then(|e| e.response.clone()),
        Some(json!({"action": "accept", "content": {"ok": true}})),
        "the first accepted answer stands"
    );

    // The last answer resumes the task.
    let c = store
        .accept_input(
            &update,
            EventId::random(),
            responses(&[("b", json!({"action": "accept"}))]),
        )
        .await
        .expect("accept b");
    assert_eq!(
        c.effect,
        Effect::Accepted {
            keys: vec!["b".into()],
            complete: true
        }
    );
    assert_eq!(c.task.status, TaskStatus::Working);

    // A replayed guest asking the same question gets the stored answer, no new event.
    let before = read(&*store, "acme", &id).await.revision;
    let replay = store
        .request_input(&lease, EventId::random(), "a", elicit("first?"))
        .await
        .expect("replay a");
    assert_eq!(
        replay.effect,
        Effect::Input(InputReply::Answered(
            json!({"action": "accept", "content": {"ok": true}})
        ))
    );
    assert_eq!(replay.revision, before);
    assert_eq!(replay.task.status, TaskStatus::Working);
    // ...and the answered key still cannot be reused for another question.
    let err = store
        .request_input(&lease, EventId::random(), "a", elicit("other"))
        .await
        .err();
    assert_eq!(err, Some(StoreError::InputConflict { key: "a".into() }));
    store
        .transition(Authority::Worker(&lease), ev(completed("answered")), None)
        .await
        .expect("complete");

    // A parked task with no live claim is not due; answering makes it due again.
    let id = create(&*store, "acme").await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    store
        .request_input(&lease, EventId::random(), "q", elicit("?"))
        .await
        .expect("request");
    store
        .release(&lease)
        .await
        .expect("park: release the guest");
    assert!(store.claim_next(&cr()).await.expect("claim_next").is_none());
    let update = store
        .authorize(&tenant("acme"), Action::Update, &id.to_string())
        .await
        .expect("authorize");
    store
        .accept_input(
            &update,
            EventId::random(),
            responses(&[("q", json!({"action": "accept"}))]),
        )
        .await
        .expect("answer");
    let next = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("due again");
    assert_eq!(next.task.id, id);
    // The replacement guest starts: started keeps no inputs outstanding -> working.
    let c = store
        .transition(Authority::Worker(&next.lease), ev(EventKind::Started), None)
        .await
        .expect("started");
    assert_eq!(c.task.status, TaskStatus::Working);
    store
        .transition(
            Authority::Worker(&next.lease),
            ev(completed("resumed")),
            None,
        )
        .await
        .expect("complete");

    // Started while a question is still outstanding keeps the task input_required.
    let id = create(&*store, "acme").await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    store
        .request_input(&lease, EventId::random(), "q", elicit("?"))
        .await
        .expect("request");
    clock.advance(LEASE);
    let next = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("lease expired");
    assert_eq!(next.task.id, id);
    let c = store
        .transition(Authority::Worker(&next.lease), ev(EventKind::Started), None)
        .await
        .expect("started");
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let reattach = store
        .request_input(&next.lease, EventId::random(), "q", elicit("?"))
        .await
        .expect("reattach");
    assert_eq!(reattach.effect, Effect::Input(InputReply::Pending));
    assert_eq!(
        reattach.revision, c.revision,
        "no second question to the user"
    );

    // Accepting on a terminal task is refused as terminal.
    cancel(&*store, "acme", &id).await.expect("cancel");
    let update = store
        .authorize(&tenant("acme"), Action::Update, &id.to_string())
        .await
        .expect("authorize");
    assert_eq!(
        store
            .accept_input(&update, EventId::random(), responses(&[("q", json!({}))]))
            .await
            .err(),
        Some(StoreError::Terminal {
            status: TaskStatus::Cancelled
        })
    );
}

/// Claims: exact and next, generations grow, stale generations are fenced.
pub(crate) async fn claims_and_fencing(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    assert!(store.claim_next(&cr()).await.expect("empty").is_none());

    let first = create(&*store, "acme").await;
    clock.advance(1);
    let second = create(&*store, "acme").await;

    let c1 = store.claim(&first, &cr()).await.expect("claim exact");
    assert_eq!(c1.lease.generation(), 1);
    assert_eq!(c1.lease.task_id(), &first);
    assert_eq!(c1.lease.expires_at(), Timestamp(T0 + 1 + LEASE));
    assert_eq!(
        c1.task.claim.as_ref().map(|c| c.owner.as_str()),
        Some("contract")
    );
    assert_eq!(c1.work.kind, "snodo/tool-call");
    assert_eq!(
        store.claim(&first, &cr()).await.err(),
        Some(StoreError::Busy {
            until: c1.lease.expires_at()
        })
    );
    assert_eq!(
        store.claim(&TaskId::generate(), &cr()).await.err(),
        Some(StoreError::NotFound)
    );

    // claim_next skips the live claim and takes the other task.
    let c2 = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("second due");
    assert_eq!(c2.task.id, second);
    assert!(store.claim_next(&cr()).await.expect("claim_next").is_none());

    // Release makes it due at once, with a higher generation next time.
    store.release(&c2.lease).await.expect("release");
    clock.advance(1);
    let c2b = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("released is due");
    assert_eq!(c2b.task.id, second);
    assert_eq!(c2b.lease.generation(), 2);
    // The released lease is dead.
    for res in [
        store
            .transition(Authority::Worker(&c2.lease), ev(completed("stale")), None)
            .await
            .map(|_| ()),
        store.renew(&c2.lease, LEASE).await.map(|_| ()),
        store.release(&c2.lease).await,
        store.worker_snapshot(&c2.lease).await.map(|_| ()),
    ] {
        assert_eq!(res.err(), Some(StoreError::LeaseLost));
    }

    // An expired lease is recoverable work; the old holder is fenced.
    clock.advance(LEASE);
    let c1b = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("expired is due");
    assert_eq!(c1b.task.id, first, "the longest-due task first");
    assert!(c1b.lease.generation() > c1.lease.generation());
    let err = store
        .transition(Authority::Worker(&c1.lease), ev(completed("stale")), None)
        .await
        .err();
    assert_eq!(err, Some(StoreError::LeaseLost));
    let err = store
        .request_input(&c1.lease, EventId::random(), "k", elicit("?"))
        .await
        .err();
    assert_eq!(err, Some(StoreError::LeaseLost));
    // The new holder commits.
    store
        .transition(Authority::Worker(&c1b.lease), ev(completed("fresh")), None)
        .await
        .expect("new generation commits");
    // A forged lease (right generation, wrong secret) is refused.
    let c = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("second again");
    let mut forged = c.lease.clone();
    forged.token ^= 1;
    assert_eq!(
        store
            .transition(Authority::Worker(&forged), ev(completed("forged")), None)
            .await
            .err(),
        Some(StoreError::LeaseLost)
    );
    // Claims have bounds.
    assert!(matches!(
        store.claim_next(&ClaimRequest::new(0, "x")).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store
            .claim_next(&ClaimRequest::new(super::MAX_LEASE_MS + 1, "x"))
            .await,
        Err(StoreError::Invalid(_))
    ));
}

/// Renewal extends a live lease on the store's clock; expiry ends it.
pub(crate) async fn renewal_and_expiry(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let id = create(&*store, "acme").await;
    let claimed = store.claim(&id, &cr()).await.expect("claim");

    clock.advance(LEASE - 1);
    let renewed = store.renew(&claimed.lease, LEASE).await.expect("renew");
    assert_eq!(renewed.expires_at(), Timestamp(T0 + LEASE - 1 + LEASE));
    assert_eq!(renewed.generation(), claimed.lease.generation());
    // Past the original expiry, the renewed lease holds.
    clock.advance(LEASE - 1);
    assert!(store.claim_next(&cr()).await.expect("claim_next").is_none());
    let (task, work) = store.worker_snapshot(&renewed).await.expect("snapshot");
    assert_eq!(task.id, id);
    assert_eq!(work, claimed.work);
    // The old copy of the lease still names the same claim.
    store
        .renew(&claimed.lease, 1_000)
        .await
        .expect("same claim");

    // Once expired, renewal is refused.
    clock.advance(1_000);
    assert_eq!(
        store.renew(&renewed, LEASE).await.err(),
        Some(StoreError::LeaseLost)
    );
    assert_eq!(
        store.worker_snapshot(&renewed).await.err(),
        Some(StoreError::LeaseLost)
    );
    assert!(matches!(
        store.renew(&renewed, 0).await,
        Err(StoreError::Invalid(_))
    ));
}

/// retry_requested uses the exact delay list, anchored to the commit time.
pub(crate) async fn retry_scheduling(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let mut new = new_task("acme");
    new.work.retry_policy = RetryPolicy::new([100u32, 500]).expect("policy");
    let id = store.create(new).await.expect("create").id;
    let retry = |msg: &str| EventKind::RetryRequested {
        error: JsonRpcError::new(-32000, "backend unavailable").with_data(json!({"try": msg})),
        status_message: Some(format!("retrying: {msg}")),
    };

    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    clock.advance(7);
    let c = store
        .transition(Authority::Worker(&lease), ev(retry("1")), None)
        .await
        .expect("retry 1");
    assert_eq!(
        c.effect,
        Effect::RetryScheduled {
            retry_at: Timestamp(T0 + 7 + 100),
            retry_count: 1
        }
    );
    assert_eq!(c.task.status, TaskStatus::Working);
    assert_eq!(c.task.status_message.as_deref(), Some("retrying: 1"));
    assert!(
        c.task.claim.is_none(),
        "backoff releases the claim in the same commit"
    );
    assert_eq!(
        store.renew(&lease, LEASE).await.err(),
        Some(StoreError::LeaseLost)
    );

    // Never early: neither claim nor claim_next before retry_at.
    clock.advance(99);
    assert_eq!(
        store.claim(&id, &cr()).await.err(),
        Some(StoreError::NotDue {
            retry_at: Timestamp(T0 + 107)
        })
    );
    assert!(store.claim_next(&cr()).await.expect("claim_next").is_none());
    clock.advance(1);
    let second = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("due");
    assert_eq!(second.task.id, id);
    assert_eq!(second.task.retry_count, 1);
    assert_eq!(second.task.retry_at, None);

    let c = store
        .transition(Authority::Worker(&second.lease), ev(retry("2")), None)
        .await
        .expect("retry 2");
    assert_eq!(
        c.effect,
        Effect::RetryScheduled {
            retry_at: Timestamp(T0 + 107 + 500),
            retry_count: 2
        }
    );
    clock.advance(500);
    let third = store
        .claim(&id, &cr())
        .await
        .expect("due exactly at retry_at");

    // Exhausted: the same transition fails the task with the executor's error.
    let c = store
        .transition(Authority::Worker(&third.lease), ev(retry("3")), None)
        .await
        .expect("retry 3");
    assert_eq!(c.effect, Effect::RetryExhausted);
    assert_eq!(c.task.status, TaskStatus::Failed);
    assert_eq!(c.task.retry_count, 2);
    assert_eq!(
        c.task.outcome,
        Some(Outcome::Error(
            JsonRpcError::new(-32000, "backend unavailable").with_data(json!({"try": "3"}))
        ))
    );
    assert!(store.claim_next(&cr()).await.expect("claim_next").is_none());

    // The default policy retries nothing.
    let id = create(&*store, "acme").await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    let c = store
        .transition(Authority::Worker(&lease), ev(retry("x")), None)
        .await
        .expect("retry");
    assert_eq!(c.effect, Effect::RetryExhausted);
}

/// Reaping removes whole aggregates at createdAt + ttlMs, active ones included.
pub(crate) async fn reaping(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let forever = create(&*store, "acme").await;
    let mut n = new_task("acme");
    n.ttl_ms = Some(1_000);
    let short = store.create(n).await.expect("create").id;
    let mut n = new_task("acme");
    n.ttl_ms = Some(2_000);
    let active = store.create(n).await.expect("create").id;
    let lease = store.claim(&active, &cr()).await.expect("claim").lease;

    clock.advance(999);
    assert_eq!(store.reap(100).await.expect("reap"), vec![]);
    clock.advance(1);
    assert_eq!(ids(store.reap(100).await.expect("reap")), vec![short]);
    assert_eq!(store.inspect(&short).await.expect("inspect"), None);
    assert_eq!(store.reap(100).await.expect("reap"), vec![]);

    // The active one goes at its own TTL even while claimed; its worker is cut off.
    clock.advance(1_000);
    assert_eq!(
        store.renew(&lease, LEASE).await.err(),
        Some(StoreError::NotFound),
        "past TTL the task is gone for its worker too, before the reap"
    );
    let reaped = store.reap(100).await.expect("reap");
    assert_eq!(ids(reaped.clone()), vec![active]);
    assert_eq!(reaped[0].status, TaskStatus::Working, "reported as cut off");
    assert_eq!(store.inspect(&active).await.expect("inspect"), None);

    // No TTL: never reaped.
    clock.advance(10 * 365 * 24 * 3_600_000);
    assert_eq!(store.reap(100).await.expect("reap"), vec![]);
    assert_eq!(read(&*store, "acme", &forever).await.id, forever);

    // The limit bounds one call.
    for _ in 0..5 {
        let mut n = new_task("acme");
        n.ttl_ms = Some(10);
        store.create(n).await.expect("create");
    }
    clock.advance(10);
    assert_eq!(store.reap(3).await.expect("reap").len(), 3);
    assert_eq!(store.reap(3).await.expect("reap").len(), 2);

    // An expired task never reaches a runner even before the reaper runs.
    let mut n = new_task("acme");
    n.ttl_ms = Some(10);
    let doomed = store.create(n).await.expect("create").id;
    clock.advance(10);
    let next = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("forever is due");
    assert_eq!(next.task.id, forever, "the expired task is skipped");
    assert!(store.claim_next(&cr()).await.expect("claim_next").is_none());
    assert_eq!(store.inspect(&doomed).await.expect("inspect"), None);
}

/// What a durable store acknowledged is there after a reopen; old claims are fenced.
pub(crate) async fn durability_across_reopen(b: &mut dyn Backend) {
    if !b.durable() {
        eprintln!("durability_across_reopen: skipped, this backend is volatile by design");
        return;
    }
    let clock = clock();
    let store = b.open(&clock).await;
    let done = create(&*store, "acme").await;
    let done_lease = store.claim(&done, &cr()).await.expect("claim").lease;
    store
        .transition(
            Authority::Worker(&done_lease),
            ev_id("fin", completed("persisted")),
            None,
        )
        .await
        .expect("complete");
    let parked = create(&*store, "acme").await;
    let l = store.claim(&parked, &cr()).await.expect("claim").lease;
    store
        .request_input(&l, EventId::random(), "q", elicit("?"))
        .await
        .expect("request");
    let running = create(&*store, "acme").await;
    let old = store.claim(&running, &cr()).await.expect("claim");
    let before_done = read(&*store, "acme", &done).await;
    let before_parked = read(&*store, "acme", &parked).await;
    drop(store);

    let store = b.open(&clock).await;
    assert_eq!(read(&*store, "acme", &done).await, before_done);
    let replay = store
        .transition(
            Authority::Worker(&done_lease),
            ev_id("fin", completed("persisted")),
            None,
        )
        .await;
    assert!(replay.is_ok(), "event ids survive a reopen: {replay:?}");
    // Leases of the previous process are fenced at once, without waiting for expiry.
    let p = read(&*store, "acme", &parked).await;
    assert_eq!(p.status, TaskStatus::InputRequired);
    assert_eq!(p.claim, None);
    assert_eq!(p.inputs, before_parked.inputs);
    assert_eq!(
        store.renew(&old.lease, LEASE).await.err(),
        Some(StoreError::LeaseLost)
    );
    let next = store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .expect("running is due");
    assert_eq!(next.task.id, running);
    assert!(next.lease.generation() > old.lease.generation());
    assert!(
        store.claim_next(&cr()).await.expect("claim_next").is_none(),
        "the parked task waits for its answer"
    );
}
