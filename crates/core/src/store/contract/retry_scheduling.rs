//! Contract group `retry_scheduling`: retry_requested uses the exact delay list, anchored to the commit time.

#[allow(unused_imports)]
use super::*;

/// retry_requested uses the exact delay list, anchored to the commit time.
pub async fn retry_scheduling(b: &mut dyn Backend) {
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
    let c = as_worker(&*store, &lease, retry("1")).await;
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
    assert!(nothing_due(&*store).await);
    clock.advance(1);
    let second = next_due(&*store, "due").await;
    assert_eq!(second.task.id, id);
    assert_eq!(second.task.retry_count, 1);
    assert_eq!(second.task.retry_at, None);

    let c = as_worker(&*store, &second.lease, retry("2")).await;
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
    let c = as_worker(&*store, &third.lease, retry("3")).await;
    assert_eq!(c.effect, Effect::RetryExhausted);
    assert_eq!(c.task.status, TaskStatus::Failed);
    assert_eq!(c.task.retry_count, 2);
    assert_eq!(
        c.task.outcome,
        Some(Outcome::Error(
            JsonRpcError::new(-32000, "backend unavailable").with_data(json!({"try": "3"}))
        ))
    );
    assert!(nothing_due(&*store).await);

    // The default policy retries nothing.
    let (_, lease) = claimed(&*store, "acme").await;
    let c = as_worker(&*store, &lease, retry("x")).await;
    assert_eq!(c.effect, Effect::RetryExhausted);
}
