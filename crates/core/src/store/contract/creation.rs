//! Contract group `creation`: create commits Task + Work together, visible at once, with store-assigned fields.

#[allow(unused_imports)]
use super::*;

/// create commits Task + Work together, visible at once, with store-assigned fields.
pub async fn creation(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let mut new = new_task("acme");
    new.ttl_ms = Some(60_000);
    new.status_message = Some("queued".into());
    new.client_capabilities = json!({"elicitation": {}});
    // The caller's trace context is kept with the work, byte for byte.
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = IncomingTrace::from_values(Some(traceparent), Some("rojo=1"), Some("k=v"))
        .expect("valid")
        .for_task();
    new.work = new.work.clone().with_trace(trace);
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
    // The task names its span (the ids its spans need) on its own record and its view.
    let span = task.span.clone().expect("a traced task names its span");
    assert_eq!(
        crate::ids::hex(&span.trace_id),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(
        span.parent.map(|p| crate::ids::hex(&p)).as_deref(),
        Some("00f067aa0ba902b7")
    );
    assert_eq!(
        crate::ids::hex(&span.span_id),
        expected_work.trace.as_ref().expect("trace").task_span_id
    );
    assert!(span.sampled);
    assert_eq!(view(&*store, "acme", &id).await.span, Some(span));

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
    bad.work.trace = Some(TraceContext {
        trace_id: "0".repeat(32),
        ..TraceContext::root(true)
    });
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
