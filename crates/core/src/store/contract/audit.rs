//! Contract group `audit`: operators' actions are recorded at the store's time, read newest
//! first in pages whose cursors never repeat or skip a record, kept across a reopen, and
//! swept once past the retention.

#[allow(unused_imports)]
use super::*;

use crate::model::{AUDIT_RETENTION_MS, AuditRecord, MAX_AUDIT_PAGE};

fn record(action: &str, target: &str) -> AuditRecord {
    AuditRecord::new(
        "acme",
        "alice",
        false,
        "api",
        action,
        Some(target.to_owned()),
        "ok",
    )
}

/// Records at the store's time, pages newest first, durable, swept past the retention.
pub async fn audit(b: &mut dyn Backend) {
    let clock = clock();
    let mut store = b.open(&clock).await;
    assert!(
        store
            .audit(None, 10)
            .await
            .expect("empty")
            .records
            .is_empty()
    );
    let mut written = Vec::new();
    for i in 0..7 {
        clock.advance(5);
        let r = store
            .record_audit(record("task.cancel", &format!("t{i}")))
            .await
            .expect("record");
        assert_eq!(
            r.at,
            crate::model::Clock::now(&clock),
            "stamped with the store's time"
        );
        written.push(r);
    }
    // Newest first, in pages of three whose cursors neither repeat nor skip.
    let mut seen = Vec::new();
    let mut from: Option<String> = None;
    loop {
        let page = store.audit(from.as_deref(), 3).await.expect("page");
        assert!(page.records.len() <= 3);
        seen.extend(
            page.records
                .iter()
                .map(|r| r.target.clone().unwrap_or_default()),
        );
        match page.next {
            Some(n) => from = Some(n),
            None => break,
        }
    }
    let newest_first: Vec<String> = (0..7).rev().map(|i| format!("t{i}")).collect();
    assert_eq!(seen, newest_first);
    for bad in [0, MAX_AUDIT_PAGE + 1] {
        assert!(matches!(
            store.audit(None, bad).await,
            Err(StoreError::Invalid(_))
        ));
    }
    assert!(matches!(
        store.audit(Some("not hex"), 3).await,
        Err(StoreError::Invalid(_))
    ));
    if b.durable() {
        drop(store);
        store = b.open(&clock).await;
        let kept = store.audit(None, 10).await.expect("read");
        assert_eq!(kept.records.len(), 7, "records survive a reopen");
        assert_eq!(kept.records[0], written[6]);
    }
    // Past the retention, each record written sweeps the old ones.
    clock.advance(AUDIT_RETENTION_MS + 1);
    store
        .record_audit(record("deployment.rollback", "3"))
        .await
        .expect("record");
    let left = store.audit(None, 10).await.expect("read");
    assert_eq!(
        left.records
            .iter()
            .map(|r| r.action.as_str())
            .collect::<Vec<_>>(),
        ["deployment.rollback"],
        "the records past the retention are swept"
    );
}
