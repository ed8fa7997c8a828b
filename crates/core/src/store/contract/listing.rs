//! Contract group `listing`: operators list tasks by filter with keyset paging, count them by status and tool, read each task's history, and retry a waiting task now.

#[allow(unused_imports)]
use super::*;

use crate::model::{HistoryKind, Task};
use crate::store::{Cursor, Lease, TaskFilter, TaskQuery, TaskSummary};

fn call_of(tenant: &str, tool: &str) -> NewTask {
    let mut n = new_task(tenant);
    n.work.input = json!({"tool": tool, "arguments": {}});
    n.work.retry_policy = RetryPolicy::new([1_000u32]).expect("policy");
    n
}

async fn make(store: &dyn Store, clock: &ManualClock, tenant: &str, tool: &str) -> TaskId {
    clock.advance(10);
    store
        .create(call_of(tenant, tool))
        .await
        .expect("create")
        .id
}

/// Every page of `filter`, `limit` at a time, and the number of pages it took.
async fn every_page(store: &dyn Store, filter: &TaskFilter, limit: usize) -> (Vec<TaskId>, usize) {
    let mut q = TaskQuery::new(filter.clone(), limit);
    let mut out = Vec::new();
    let mut pages = 0;
    loop {
        let page = store.list_tasks(&q).await.expect("list");
        pages += 1;
        assert!(page.tasks.len() <= limit);
        out.extend(page.tasks.iter().map(|t| t.id));
        match page.next {
            Some(next) => q.after = Some(next),
            None => return (out, pages),
        }
        assert!(pages < 1_000, "paging ends");
    }
}

/// What the listing of `filter` must hold: every stored, unexpired task it admits, newest
/// first, computed from the tasks themselves.
async fn expected(store: &dyn Store, all: &[TaskId], filter: &TaskFilter) -> Vec<TaskId> {
    let now = store.now().await.expect("now");
    let mut hits: Vec<(Timestamp, TaskId)> = Vec::new();
    for id in all {
        if let Some((task, work)) = store.inspect(id).await.expect("inspect")
            && !task.is_expired(now)
            && filter.admits(&TaskSummary::of(&task, crate::store::tool_of(&work)))
        {
            hits.push((task.created_at, task.id));
        }
    }
    hits.sort();
    hits.reverse();
    hits.into_iter().map(|(_, id)| id).collect()
}

fn kinds(task: &Task) -> Vec<&'static str> {
    task.history.entries.iter().map(|e| e.kind.name()).collect()
}

/// Operators list tasks by filter with keyset paging, count them by status and tool, read
/// each task's history, and retry a waiting task now.
pub async fn listing(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let s = &*store;
    let seeded = seed(s, &clock).await;
    every_filter_lists_what_it_admits(s, &seeded).await;
    a_page_shows_the_summary_an_operator_needs(s).await;
    a_cursor_keeps_its_place_while_tasks_are_created(s, &clock).await;
    bad_queries_are_refused(s).await;
    counts_by_status_and_tool(s).await;
    a_history_through_question_park_answer_and_retry(s, &clock, &seeded).await;
    retry_now_makes_a_waiting_retry_due_at_once(s, seeded.waiting).await;
    // A cancelled task's history ends with why.
    let (task, _) = s
        .inspect(&seeded.cancelled)
        .await
        .expect("inspect")
        .expect("stored");
    assert_eq!(kinds(&task), vec!["created", "cancelled"]);
    expired_tasks_leave_listings_and_counts(s, &clock).await;
    // What a durable store keeps: listings, counts and histories survive a reopen.
    if b.durable() {
        let filter = TaskFilter::default();
        let listed = every_page(s, &filter, 4).await.0;
        let counts = s.count_tasks(None).await.expect("counts");
        let history = s
            .inspect(&seeded.done)
            .await
            .expect("inspect")
            .expect("stored")
            .0
            .history;
        drop(store);
        let store = b.open(&clock).await;
        assert_eq!(every_page(&*store, &filter, 4).await.0, listed);
        assert_eq!(store.count_tasks(None).await.expect("counts"), counts);
        assert_eq!(
            store
                .inspect(&seeded.done)
                .await
                .expect("inspect")
                .expect("stored")
                .0
                .history,
            history
        );
    }
}

/// The tasks every case reads: acme exports in every status and reports, one globex export,
/// and two acme exports created in the same millisecond.
struct Seeded {
    all: Vec<TaskId>,
    done: TaskId,
    waiting: TaskId,
    waiting_lease: Lease,
    cancelled: TaskId,
    other: TaskId,
    twins: (TaskId, TaskId),
}

async fn seed(s: &dyn Store, clock: &ManualClock) -> Seeded {
    let mut all = Vec::new();
    let done = make(s, clock, "acme", "export").await;
    let waiting = make(s, clock, "acme", "export").await;
    let failed = make(s, clock, "acme", "report").await;
    let cancelled_id = make(s, clock, "acme", "export").await;
    let working = make(s, clock, "acme", "report").await;
    let other = make(s, clock, "globex", "export").await;
    all.extend([done, waiting, failed, cancelled_id, working, other]);
    // Two in the same millisecond: the id orders them.
    clock.advance(10);
    let twin_a = s
        .create(call_of("acme", "export"))
        .await
        .expect("create")
        .id;
    let twin_b = s
        .create(call_of("acme", "export"))
        .await
        .expect("create")
        .id;
    all.extend([twin_a, twin_b]);

    let lease = s.claim(&done, &cr()).await.expect("claim").lease;
    as_worker(s, &lease, EventKind::Started).await;
    as_worker(s, &lease, completed("ok")).await;
    let waiting_lease = s.claim(&waiting, &cr()).await.expect("claim").lease;
    as_worker(s, &waiting_lease, EventKind::Started).await;
    ask(s, &waiting_lease, "confirm", elicit("go?"))
        .await
        .expect("ask");
    let lease = s.claim(&failed, &cr()).await.expect("claim").lease;
    as_worker(
        s,
        &lease,
        EventKind::Failed {
            error: JsonRpcError::new(-32603, "boom"),
            status_message: None,
        },
    )
    .await;
    cancel(s, "acme", &cancelled_id).await.expect("cancel");

    Seeded {
        all,
        done,
        waiting,
        waiting_lease,
        cancelled: cancelled_id,
        other,
        twins: (twin_a, twin_b),
    }
}

/// Every filter lists exactly what it admits, newest first, whatever the page size, and
/// the filters mean what they say.
async fn every_filter_lists_what_it_admits(s: &dyn Store, seeded: &Seeded) {
    let filters = [
        TaskFilter::default(),
        TaskFilter {
            tenant: Some("acme".into()),
            ..Default::default()
        },
        TaskFilter {
            tenant: Some("acme".into()),
            status: Some(TaskStatus::InputRequired),
            ..Default::default()
        },
        TaskFilter {
            tenant: Some("acme".into()),
            tool: Some("report".into()),
            ..Default::default()
        },
        TaskFilter {
            tenant: Some("acme".into()),
            status: Some(TaskStatus::Working),
            tool: Some("export".into()),
            ..Default::default()
        },
        TaskFilter {
            status: Some(TaskStatus::Working),
            ..Default::default()
        },
        TaskFilter {
            tool: Some("export".into()),
            ..Default::default()
        },
        TaskFilter {
            tenant: Some("acme".into()),
            created_after: Some(Timestamp(T0 + 20)),
            created_before: Some(Timestamp(T0 + 50)),
            ..Default::default()
        },
        TaskFilter {
            updated_after: Some(Timestamp(T0 + 60)),
            ..Default::default()
        },
        TaskFilter {
            tenant: Some("initech".into()),
            ..Default::default()
        },
        TaskFilter {
            tool: Some("nothing-calls-this".into()),
            ..Default::default()
        },
    ];
    for filter in &filters {
        let want = expected(s, &seeded.all, filter).await;
        for limit in [1, 2, 3, 500] {
            let (got, pages) = every_page(s, filter, limit).await;
            assert_eq!(got, want, "{filter:?}, {limit} a page");
            assert!(
                pages <= want.len() / limit + 1,
                "{filter:?}: {pages} pages of {limit} for {} tasks",
                want.len()
            );
        }
    }
    let (input, _) = every_page(
        s,
        &TaskFilter {
            tenant: Some("acme".into()),
            status: Some(TaskStatus::InputRequired),
            ..Default::default()
        },
        10,
    )
    .await;
    assert_eq!(input, vec![seeded.waiting]);
    let (acme, _) = every_page(
        s,
        &TaskFilter {
            tenant: Some("acme".into()),
            ..Default::default()
        },
        10,
    )
    .await;
    assert_eq!(acme.len(), 7);
    assert!(!acme.contains(&seeded.other));
    assert_eq!(acme.first(), Some(&seeded.twins.0.max(seeded.twins.1)));
}

/// A page shows the summary an operator needs.
async fn a_page_shows_the_summary_an_operator_needs(s: &dyn Store) {
    let page = s
        .list_tasks(&TaskQuery::new(
            TaskFilter {
                tenant: Some("acme".into()),
                status: Some(TaskStatus::InputRequired),
                ..Default::default()
            },
            5,
        ))
        .await
        .expect("list");
    let w = &page.tasks[0];
    assert_eq!(
        (w.tenant.as_str(), w.tool.as_str(), w.attempt),
        ("acme", "export", 1)
    );
    assert_eq!(w.waiting_on, vec!["confirm".to_owned()]);
    assert_eq!(w.claimed_by.as_deref(), Some("contract"));
    assert_eq!(page.next, None);
}

/// A cursor keeps its place while tasks are created: a new task is newer than it.
async fn a_cursor_keeps_its_place_while_tasks_are_created(s: &dyn Store, clock: &ManualClock) {
    let q = TaskQuery::new(
        TaskFilter {
            tenant: Some("acme".into()),
            ..Default::default()
        },
        3,
    );
    let first = s.list_tasks(&q).await.expect("page 1");
    let newer = make(s, clock, "acme", "export").await;
    let second = s
        .list_tasks(&TaskQuery {
            after: first.next,
            ..q.clone()
        })
        .await
        .expect("page 2");
    assert!(!second.tasks.iter().any(|t| t.id == newer));
    assert!(
        second
            .tasks
            .iter()
            .all(|t| first.tasks.iter().all(|f| f.id != t.id))
    );
    assert_eq!(first.tasks.len() + second.tasks.len(), 6);
}

/// Bad queries are refused.
async fn bad_queries_are_refused(s: &dyn Store) {
    for limit in [0, crate::store::MAX_LIST_LIMIT + 1] {
        assert!(matches!(
            s.list_tasks(&TaskQuery::new(TaskFilter::default(), limit))
                .await,
            Err(StoreError::Invalid(_))
        ));
    }
    assert!(matches!(
        s.list_tasks(&TaskQuery::new(
            TaskFilter {
                tenant: Some(String::new()),
                ..Default::default()
            },
            5
        ))
        .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(Cursor::parse("not a cursor").is_err());
}

/// Counts by status and by tool, per tenant and overall.
async fn counts_by_status_and_tool(s: &dyn Store) {
    let acme_counts = s.count_tasks(Some("acme")).await.expect("counts");
    let by = |status| acme_counts.by_status[&status];
    assert_eq!(
        (
            by(TaskStatus::Working),
            by(TaskStatus::InputRequired),
            by(TaskStatus::Completed),
            by(TaskStatus::Failed),
            by(TaskStatus::Cancelled)
        ),
        (4, 1, 1, 1, 1)
    );
    assert_eq!(acme_counts.total(), 8);
    assert_eq!(acme_counts.by_tool["report"][&TaskStatus::Failed], 1);
    assert_eq!(acme_counts.by_tool["report"][&TaskStatus::Working], 1);
    assert_eq!(acme_counts.by_tool["export"][&TaskStatus::Working], 3);
    let everyone = s.count_tasks(None).await.expect("counts");
    assert_eq!(everyone.total(), 9);
    assert_eq!(everyone.by_tool["export"][&TaskStatus::Working], 4);
    assert_eq!(
        s.count_tasks(Some("initech"))
            .await
            .expect("counts")
            .total(),
        0
    );
    assert_eq!(
        s.count_tasks(Some("initech"))
            .await
            .expect("counts")
            .by_status
            .len(),
        5,
        "every status is named, with zero for none"
    );
}

/// The history of a task through question, park, answer, retry and completion.
async fn a_history_through_question_park_answer_and_retry(
    s: &dyn Store,
    clock: &ManualClock,
    seeded: &Seeded,
) {
    let waiting = seeded.waiting;
    assert!(matches!(
        s.claim(&waiting, &cr()).await,
        Err(StoreError::Busy { .. })
    ));
    s.release(&seeded.waiting_lease).await.expect("park");
    clock.advance(5);
    let update = access(s, "acme", Action::Update, &waiting).await;
    answer(s, &update, &[("confirm", json!({"action": "accept"}))])
        .await
        .expect("answer");
    clock.advance(7);
    let again = s.claim(&waiting, &cr()).await.expect("claim again").lease;
    as_worker(s, &again, EventKind::Started).await;
    as_worker(
        s,
        &again,
        EventKind::RetryRequested {
            error: JsonRpcError::new(-32603, "flaky"),
            status_message: Some("trying again".into()),
        },
    )
    .await;
    let (task, _) = s.inspect(&waiting).await.expect("inspect").expect("stored");
    assert_eq!(
        kinds(&task),
        vec![
            "created",
            "claimed",
            "started",
            "input_requested",
            "parked",
            "input_answered",
            "claimed",
            "started",
            "retry_scheduled"
        ]
    );
    let h = &task.history.entries;
    assert!(h.windows(2).all(|w| w[0].at <= w[1].at), "in commit order");
    assert_eq!(h.last().map(|e| e.at), Some(task.last_updated_at));
    match &h[6].kind {
        HistoryKind::Claimed {
            waited_ms,
            recovered,
            generation,
            ..
        } => {
            assert_eq!((*waited_ms, *recovered, *generation), (7, false, 2));
        }
        other => panic!("a claim, not {other:?}"),
    }
    let due = match &h[8].kind {
        HistoryKind::RetryScheduled {
            due_at,
            retry,
            code,
            message,
        } => {
            assert_eq!((*retry, *code, message.as_str()), (1, -32603, "flaky"));
            *due_at
        }
        other => panic!("a retry, not {other:?}"),
    };
    assert_eq!(Some(due), task.retry_at);
}

/// Retry now: the waiting retry is due at once, and says so.
async fn retry_now_makes_a_waiting_retry_due_at_once(s: &dyn Store, waiting: TaskId) {
    assert!(matches!(
        s.claim(&waiting, &cr()).await,
        Err(StoreError::NotDue { .. })
    ));
    let read_only = access(s, "acme", Action::Read, &waiting).await;
    assert_eq!(
        s.retry_now(&read_only).await.err(),
        wrong_action(Action::Read)
    );
    let update = access(s, "acme", Action::Update, &waiting).await;
    let now_due = s.retry_now(&update).await.expect("retry now");
    assert_eq!(now_due.retry_at, Some(s.now().await.expect("now")));
    assert_eq!(
        now_due.history.entries.last().map(|e| e.kind.name()),
        Some("retry_now")
    );
    let claimed = s.claim(&waiting, &cr()).await.expect("due at once");
    assert!(matches!(
        s.retry_now(&update).await,
        Err(StoreError::Invalid(_))
    ));
    as_worker(s, &claimed.lease, completed("done")).await;
    assert_eq!(
        s.retry_now(&update).await.err(),
        terminal(TaskStatus::Completed)
    );
    let (task, _) = s.inspect(&waiting).await.expect("inspect").expect("stored");
    assert_eq!(kinds(&task).last(), Some(&"completed"));
}

/// Tasks past their TTL are left out of listings, and leave the counts when reaped.
async fn expired_tasks_leave_listings_and_counts(s: &dyn Store, clock: &ManualClock) {
    let mut short = call_of("acme", "export");
    short.ttl_ms = Some(100);
    let short_id = s.create(short).await.expect("create").id;
    let acme_only = TaskFilter {
        tenant: Some("acme".into()),
        ..Default::default()
    };
    assert!(every_page(s, &acme_only, 50).await.0.contains(&short_id));
    let before = s.count_tasks(Some("acme")).await.expect("counts").total();
    clock.advance(200);
    assert!(!every_page(s, &acme_only, 50).await.0.contains(&short_id));
    let reaped = s.reap(100).await.expect("reap");
    assert!(reaped.iter().any(|r| r.id == short_id));
    assert_eq!(
        s.count_tasks(Some("acme")).await.expect("counts").total(),
        before - 1
    );
}
