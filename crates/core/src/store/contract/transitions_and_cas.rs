//! Contract group `transitions_and_cas`: transitions are compare-and-set on the revision and follow the lifecycle.

#[allow(unused_imports)]
use super::*;

use crate::store::Lease;

/// Transitions are compare-and-set on the revision and follow the lifecycle.
pub async fn transitions_and_cas(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let s = &*store;
    let (id, lease) = claimed(s, "acme").await;
    an_expected_revision_is_compared_and_set(s, &clock, &id, &lease).await;
    a_task_asks_is_answered_and_completes(s, &clock, &id, &lease).await;
    a_failure_shows_its_error_and_message(s).await;
    invalid_events_are_refused_first(s).await;
}

/// A transition moves the revision by one; a stale expected revision is refused with the
/// current one and changes nothing.
async fn an_expected_revision_is_compared_and_set(
    s: &dyn Store,
    clock: &ManualClock,
    id: &TaskId,
    lease: &Lease,
) {
    clock.advance(10);
    let c = s
        .transition(Authority::Worker(lease), ev(EventKind::Started), Some(0))
        .await
        .expect("started");
    assert_eq!((c.revision, c.task.revision, c.task.attempt), (1, 1, 1));
    assert_eq!(c.task.last_updated_at, Timestamp(T0 + 10));
    assert!(!c.replayed);

    // A stale expected revision is refused with the current one and changes nothing.
    let half_way = || {
        ev(EventKind::StatusMessage {
            message: "half way".into(),
        })
    };
    let err = s
        .transition(Authority::Worker(lease), half_way(), Some(0))
        .await
        .err();
    assert_eq!(err, Some(StoreError::Conflict { current: 1 }));
    assert_eq!(read(s, "acme", id).await.status_message, None);

    let c = s
        .transition(Authority::Worker(lease), half_way(), Some(1))
        .await
        .expect("status message");
    assert_eq!(c.task.status_message.as_deref(), Some("half way"));
}

/// working -> input_required -> working -> completed, and what a lookup then shows.
async fn a_task_asks_is_answered_and_completes(
    s: &dyn Store,
    clock: &ManualClock,
    id: &TaskId,
    lease: &Lease,
) {
    let c = s
        .request_input(lease, EventId::random(), "confirm", elicit("go?"))
        .await
        .expect("input requested");
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let update = access(s, "acme", Action::Update, id).await;
    let c = answer(s, &update, &[("confirm", json!({"action": "accept"}))])
        .await
        .expect("accept");
    assert_eq!(c.task.status, TaskStatus::Working);
    clock.advance(5);
    let c = s
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
    assert_eq!(
        c.task.status_message, None,
        "the running task's last message (\"half way\") is not the finished task's"
    );
    assert_eq!(read(s, "acme", id).await, c.task);
    let seen = view(s, "acme", id).await;
    assert_eq!(
        (seen.status, &seen.outcome, seen.input_requests.len()),
        (
            TaskStatus::Completed,
            &Some(ViewOutcome::Result(RawJson::of(
                &json!({"content": [{"type": "text", "text": "done"}]})
            ))),
            0
        ),
        "a lookup shows the result, and no answered question"
    );
}

/// A failure shows its error (data included) and its message.
async fn a_failure_shows_its_error_and_message(s: &dyn Store) {
    let id3 = create(s, "acme").await;
    let l3 = s.claim(&id3, &cr()).await.expect("claim").lease;
    let error = JsonRpcError::new(-32603, "broke").with_data(json!({"kind": "trap"}));
    s.transition(
        Authority::Worker(&l3),
        ev(EventKind::Failed {
            error: error.clone(),
            status_message: Some("gave up".into()),
        }),
        None,
    )
    .await
    .expect("failed");
    let seen = view(s, "acme", &id3).await;
    assert_eq!(
        (seen.status, seen.status_message.as_deref(), seen.outcome),
        (
            TaskStatus::Failed,
            Some("gave up"),
            Some(ViewOutcome::Error(RawJson::of(&error)))
        )
    );
}

/// Invalid events are refused before anything is looked at; a worker cannot send request
/// events.
async fn invalid_events_are_refused_first(s: &dyn Store) {
    let id2 = create(s, "acme").await;
    let l2 = s.claim(&id2, &cr()).await.expect("claim").lease;
    let err = refusal(
        s,
        Authority::Worker(&l2),
        EventKind::Completed {
            result: json!("no"),
        },
    )
    .await;
    assert!(matches!(err, Some(StoreError::Invalid(_))), "{err:?}");
    // A worker cannot send request events.
    let err = refusal(s, Authority::Worker(&l2), cancelled()).await;
    assert!(matches!(err, Some(StoreError::Invalid(_))), "{err:?}");
    assert_eq!(read(s, "acme", &id2).await.revision, 0);
}
