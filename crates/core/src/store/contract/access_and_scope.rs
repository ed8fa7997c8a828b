//! Contract group `access_and_scope`: authorize hides foreign, unknown, malformed and expired tasks identically, and an access

#[allow(unused_imports)]
use super::*;

/// authorize hides foreign, unknown, malformed and expired tasks identically, and an access
/// value works only for its action.
pub async fn access_and_scope(b: &mut dyn Backend) {
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
    let own = view(&*store, "acme", &mine).await;
    assert_eq!((own.id, own.scope.as_str()), (mine, "acme"));
    // Same subject name, other tenant: still foreign.
    let globex_same_subject = Principal::new("globex", "user-1");
    assert_eq!(
        denial(&*store, &globex_same_subject, Action::Read, &mine).await,
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
    let err = refusal(&*store, Authority::Request(&read_access), cancelled()).await;
    assert_eq!(err, wrong_action(Action::Read));
    let cancel_access = store
        .authorize(&acme, Action::Cancel, &mine.to_string())
        .await
        .expect("authorize");
    assert_eq!(
        store.get(&cancel_access).await.err(),
        wrong_action(Action::Cancel)
    );
    let err = answer(&*store, &cancel_access, &[("k", json!({}))])
        .await
        .err();
    assert_eq!(err, wrong_action(Action::Cancel));
    // A request cannot send worker events, whatever its action.
    let update_access = store
        .authorize(&acme, Action::Update, &mine.to_string())
        .await
        .expect("authorize");
    let err = refusal(&*store, Authority::Request(&update_access), completed("x")).await;
    assert_eq!(err, wrong_action(Action::Update));
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
        denial(&*store, &acme, Action::Read, &short).await,
        Some(StoreError::NotFound)
    );
}
