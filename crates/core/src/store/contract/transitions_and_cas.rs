//! Contract group `transitions_and_cas`: transitions are compare-and-set on the revision and follow the lifecycle.

#[allow(unused_imports)]
use super::*;

/// Transitions are compare-and-set on the revision and follow the lifecycle.
pub async fn transitions_and_cas(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let (id, lease) = claimed(&*store, "acme").await;
    let lease = &lease;

    clock.advance(10);
    let c = store
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
    let err = store
        .transition(Authority::Worker(lease), half_way(), Some(0))
        .await
        .err();
    assert_eq!(err, Some(StoreError::Conflict { current: 1 }));
    assert_eq!(read(&*store, "acme", &id).await.status_message, None);

    let c = store
        .transition(Authority::Worker(lease), half_way(), Some(1))
        .await
        .expect("status message");
    assert_eq!(c.task.status_message.as_deref(), Some("half way"));

    // working -> input_required -> working -> completed
    let c = store
        .request_input(lease, EventId::random(), "confirm", elicit("go?"))
        .await
        .expect("input requested");
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let update = access(&*store, "acme", Action::Update, &id).await;
    let c = answer(
        &*store,
        &update,
        &[("confirm", json!({"action": "accept"}))],
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
    assert_eq!(
        c.task.status_message, None,
        "the running task's last message (\"half way\") is not the finished task's"
    );
    assert_eq!(read(&*store, "acme", &id).await, c.task);
    let seen = view(&*store, "acme", &id).await;
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

    // A failure shows its error (data included) and its message.
    let id3 = create(&*store, "acme").await;
    let l3 = store.claim(&id3, &cr()).await.expect("claim").lease;
    let error = JsonRpcError::new(-32603, "broke").with_data(json!({"kind": "trap"}));
    store
        .transition(
            Authority::Worker(&l3),
            ev(EventKind::Failed {
                error: error.clone(),
                status_message: Some("gave up".into()),
            }),
            None,
        )
        .await
        .expect("failed");
    let seen = view(&*store, "acme", &id3).await;
    assert_eq!(
        (seen.status, seen.status_message.as_deref(), seen.outcome),
        (
            TaskStatus::Failed,
            Some("gave up"),
            Some(ViewOutcome::Error(RawJson::of(&error)))
        )
    );

    // Invalid events are refused before anything is looked at.
    let id2 = create(&*store, "acme").await;
    let l2 = store.claim(&id2, &cr()).await.expect("claim").lease;
    let err = refusal(
        &*store,
        Authority::Worker(&l2),
        EventKind::Completed {
            result: json!("no"),
        },
    )
    .await;
    assert!(matches!(err, Some(StoreError::Invalid(_))), "{err:?}");
    // A worker cannot send request events.
    let err = refusal(&*store, Authority::Worker(&l2), cancelled()).await;
    assert!(matches!(err, Some(StoreError::Invalid(_))), "{err:?}");
    assert_eq!(read(&*store, "acme", &id2).await.revision, 0);
}
