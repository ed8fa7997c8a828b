//! Contract group `input_lifecycle`: input requests park the task; responses land in the inbox; keys are lifetime-unique.

#[allow(unused_imports)]
use super::*;

/// Input requests park the task; responses land in the inbox; keys are lifetime-unique.
pub async fn input_lifecycle(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let (id, lease) = claimed(&*store, "acme").await;
    let update = access(&*store, "acme", Action::Update, &id).await;

    let a = ask(&*store, &lease, "a", elicit("first?"))
        .await
        .expect("request a");
    assert_eq!(a.effect, Effect::Input(InputReply::Pending));
    assert_eq!(a.task.status, TaskStatus::InputRequired);
    let b_ = ask(&*store, &lease, "b", elicit("second?"))
        .await
        .expect("request b");
    assert_eq!(b_.revision, 2);
    let outstanding: Vec<&str> = b_.task.outstanding_inputs().map(|(k, _)| k).collect();
    assert_eq!(outstanding, vec!["a", "b"]);

    // Same key, identical request: reattach, no new event.
    let again = ask(&*store, &lease, "a", elicit("first?"))
        .await
        .expect("reattach");
    assert_eq!(again.effect, Effect::Input(InputReply::Pending));
    assert_eq!(again.revision, 2);
    // Same key, different request: refused.
    let err = ask(&*store, &lease, "a", elicit("changed?")).await.err();
    assert_eq!(err, Some(StoreError::InputConflict { key: "a".into() }));

    // Partial fulfilment; unknown keys ignored whatever they hold.
    let c = answer(
        &*store,
        &update,
        &[
            ("a", json!({"action": "accept", "content": {"ok": true}})),
            ("zzz", json!({"ignored": true})),
        ],
    )
    .await
    .expect("accept a");
    assert_eq!(c.effect, accepted(&["a"], false));
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
    let seen = view(&*store, "acme", &id).await;
    assert_eq!(
        (seen.status, seen.input_requests),
        (
            TaskStatus::InputRequired,
            vec![("b".to_owned(), RawJson::of(&elicit("second?")))]
        ),
        "a lookup shows the question still open, not the answered one"
    );

    // Answering again, or only unknown keys: ignored, nothing commits.
    let c = answer(
        &*store,
        &update,
        &[("a", json!({"action": "decline"})), ("nope", json!(1))],
    )
    .await
    .expect("accept nothing");
    assert_eq!(c.effect, accepted(&[], false));
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
    let c = answer(&*store, &update, &[("b", json!({"action": "accept"}))])
        .await
        .expect("accept b");
    assert_eq!(c.effect, accepted(&["b"], true));
    assert_eq!(c.task.status, TaskStatus::Working);

    // A replayed guest asking the same question gets the stored answer, no new event.
    let before = read(&*store, "acme", &id).await.revision;
    let replay = ask(&*store, &lease, "a", elicit("first?"))
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
    let err = ask(&*store, &lease, "a", elicit("other")).await.err();
    assert_eq!(err, Some(StoreError::InputConflict { key: "a".into() }));
    as_worker(&*store, &lease, completed("answered")).await;

    // A parked task with no live claim is not due; answering makes it due again.
    let (id, lease) = claimed(&*store, "acme").await;
    ask(&*store, &lease, "q", elicit("?"))
        .await
        .expect("request");
    store
        .release(&lease)
        .await
        .expect("park: release the guest");
    assert!(nothing_due(&*store).await);
    let update = access(&*store, "acme", Action::Update, &id).await;
    answer(&*store, &update, &[("q", json!({"action": "accept"}))])
        .await
        .expect("answer");
    let next = next_due(&*store, "due again").await;
    assert_eq!(next.task.id, id);
    // The replacement guest starts: started keeps no inputs outstanding -> working.
    let c = as_worker(&*store, &next.lease, EventKind::Started).await;
    assert_eq!(c.task.status, TaskStatus::Working);
    as_worker(&*store, &next.lease, completed("resumed")).await;

    // Started while a question is still outstanding keeps the task input_required.
    let (id, lease) = claimed(&*store, "acme").await;
    ask(&*store, &lease, "q", elicit("?"))
        .await
        .expect("request");
    clock.advance(LEASE);
    let next = next_due(&*store, "lease expired").await;
    assert_eq!(next.task.id, id);
    let c = as_worker(&*store, &next.lease, EventKind::Started).await;
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let reattach = ask(&*store, &next.lease, "q", elicit("?"))
        .await
        .expect("reattach");
    assert_eq!(reattach.effect, Effect::Input(InputReply::Pending));
    assert_eq!(
        reattach.revision, c.revision,
        "no second question to the user"
    );

    // Accepting on a terminal task is refused as terminal.
    cancel(&*store, "acme", &id).await.expect("cancel");
    let update = access(&*store, "acme", Action::Update, &id).await;
    assert_eq!(
        answer(&*store, &update, &[("q", json!({}))]).await.err(),
        terminal(TaskStatus::Cancelled)
    );
}
