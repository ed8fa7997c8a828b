//! Contract group `terminal_races`: terminal states never change; completion racing cancellation leaves exactly one.

#[allow(unused_imports)]
use super::*;

/// Terminal states never change; completion racing cancellation leaves exactly one.
pub async fn terminal_races(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;

    // Cancelled first: the late result is refused and cannot resurrect the task.
    let (id, lease) = claimed(&*store, "acme").await;
    cancel(&*store, "acme", &id).await.expect("cancel");
    let err = refusal(&*store, Authority::Worker(&lease), completed("late")).await;
    assert_eq!(err, terminal(TaskStatus::Cancelled));
    let t = read(&*store, "acme", &id).await;
    assert_eq!(t.status, TaskStatus::Cancelled);
    assert_eq!(t.outcome, None);
    // The worker learns from renew that it should stop.
    assert_eq!(
        store.renew(&lease, LEASE).await.err(),
        terminal(TaskStatus::Cancelled)
    );

    // Completed first: cancel is refused, the result stays.
    let (id, lease) = claimed(&*store, "acme").await;
    as_worker(&*store, &lease, completed("first")).await;
    assert_eq!(
        cancel(&*store, "acme", &id).await.err(),
        terminal(TaskStatus::Completed)
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
        let (id, lease) = claimed(&*store, "acme").await;
        let access = access(&*store, "acme", Action::Cancel, &id).await;
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
