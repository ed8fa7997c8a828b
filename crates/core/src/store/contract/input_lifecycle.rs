//! Contract group `input_lifecycle`: input requests park the task; responses land in the inbox; keys are lifetime-unique.

#[allow(unused_imports)]
use super::*;

use crate::store::{Access, Lease};

/// Input requests park the task; responses land in the inbox; keys are lifetime-unique.
pub async fn input_lifecycle(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let s = &*store;
    let (id, lease) = claimed(s, "acme").await;
    let update = access(s, "acme", Action::Update, &id).await;
    questions_open_once_per_key(s, &lease).await;
    answers_land_once_and_the_last_resumes(s, &id, &lease, &update).await;
    a_parked_task_is_due_again_once_answered(s).await;
    a_restart_with_a_question_open_keeps_waiting(s, &clock).await;
}

/// Each key opens one question; the same key and request reattaches, another request under
/// it is refused.
async fn questions_open_once_per_key(s: &dyn Store, lease: &Lease) {
    let a = ask(s, lease, "a", elicit("first?"))
        .await
        .expect("request a");
    assert_eq!(a.effect, Effect::Input(InputReply::Pending));
    assert_eq!(a.task.status, TaskStatus::InputRequired);
    let b_ = ask(s, lease, "b", elicit("second?"))
        .await
        .expect("request b");
    assert_eq!(b_.revision, 2);
    let outstanding: Vec<&str> = b_.task.outstanding_inputs().map(|(k, _)| k).collect();
    assert_eq!(outstanding, vec!["a", "b"]);

    // Same key, identical request: reattach, no new event.
    let again = ask(s, lease, "a", elicit("first?"))
        .await
        .expect("reattach");
    assert_eq!(again.effect, Effect::Input(InputReply::Pending));
    assert_eq!(again.revision, 2);
    // Same key, different request: refused.
    let err = ask(s, lease, "a", elicit("changed?")).await.err();
    assert_eq!(err, Some(StoreError::InputConflict { key: "a".into() }));
}

/// Answers land in the inbox once (unknown keys and second answers are ignored), the last
/// one resumes the task, and a replayed question gets the stored answer.
async fn answers_land_once_and_the_last_resumes(
    s: &dyn Store,
    id: &TaskId,
    lease: &Lease,
    update: &Access,
) {
    // Partial fulfilment; unknown keys ignored whatever they hold.
    let c = answer(
        s,
        update,
        &[
            ("a", json!({"action": "accept", "content": {"ok": true}})),
            ("zzz", json!({"ignored": true})),
        ],
    )
    .await
    .expect("accept a");
    assert_eq!(c.effect, accepted(&["a"], false));
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let t = read(s, "acme", id).await;
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
    let seen = view(s, "acme", id).await;
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
        s,
        update,
        &[("a", json!({"action": "decline"})), ("nope", json!(1))],
    )
    .await
    .expect("accept nothing");
    assert_eq!(c.effect, accepted(&[], false));
    assert_eq!(c.revision, t.revision);
    assert_eq!(
        read(s, "acme", id)
            .await
            .inputs
            .get("a")
            .and_then(|e| e.response.clone()),
        Some(json!({"action": "accept", "content": {"ok": true}})),
        "the first accepted answer stands"
    );

    // The last answer resumes the task.
    let c = answer(s, update, &[("b", json!({"action": "accept"}))])
        .await
        .expect("accept b");
    assert_eq!(c.effect, accepted(&["b"], true));
    assert_eq!(c.task.status, TaskStatus::Working);

    // A replayed guest asking the same question gets the stored answer, no new event.
    let before = read(s, "acme", id).await.revision;
    let replay = ask(s, lease, "a", elicit("first?"))
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
    let err = ask(s, lease, "a", elicit("other")).await.err();
    assert_eq!(err, Some(StoreError::InputConflict { key: "a".into() }));
    as_worker(s, lease, completed("answered")).await;
}

/// A parked task with no live claim is not due; answering makes it due again.
async fn a_parked_task_is_due_again_once_answered(s: &dyn Store) {
    let (id, lease) = claimed(s, "acme").await;
    ask(s, &lease, "q", elicit("?")).await.expect("request");
    s.release(&lease).await.expect("park: release the guest");
    assert!(nothing_due(s).await);
    // Nor can a late submit of this task claim it by id and start a guest that would only
    // ask again.
    assert_eq!(s.claim(&id, &cr()).await.err(), Some(StoreError::Parked));
    let update = access(s, "acme", Action::Update, &id).await;
    answer(s, &update, &[("q", json!({"action": "accept"}))])
        .await
        .expect("answer");
    let next = next_due(s, "due again").await;
    assert_eq!(next.task.id, id);
    // The replacement guest starts: started keeps no inputs outstanding -> working.
    let c = as_worker(s, &next.lease, EventKind::Started).await;
    assert_eq!(c.task.status, TaskStatus::Working);
    as_worker(s, &next.lease, completed("resumed")).await;
}

/// Started while a question is still outstanding keeps the task input_required, and the
/// question is not asked twice; accepting on a terminal task is refused as terminal.
async fn a_restart_with_a_question_open_keeps_waiting(s: &dyn Store, clock: &ManualClock) {
    let (id, lease) = claimed(s, "acme").await;
    ask(s, &lease, "q", elicit("?")).await.expect("request");
    clock.advance(LEASE);
    let next = next_due(s, "lease expired").await;
    assert_eq!(next.task.id, id);
    let c = as_worker(s, &next.lease, EventKind::Started).await;
    assert_eq!(c.task.status, TaskStatus::InputRequired);
    let reattach = ask(s, &next.lease, "q", elicit("?"))
        .await
        .expect("reattach");
    assert_eq!(reattach.effect, Effect::Input(InputReply::Pending));
    assert_eq!(
        reattach.revision, c.revision,
        "no second question to the user"
    );

    // Accepting on a terminal task is refused as terminal.
    cancel(s, "acme", &id).await.expect("cancel");
    let update = access(s, "acme", Action::Update, &id).await;
    assert_eq!(
        answer(s, &update, &[("q", json!({}))]).await.err(),
        terminal(TaskStatus::Cancelled)
    );
}
