//! Contract group `deployments`: components stored once by digest, deployments committed in order, and components collected only when retired, unpinned and past their retention.

#[allow(unused_imports)]
use super::*;

use crate::model::Deployment;

fn pinned_to(tenant: &str, digest: &str) -> NewTask {
    let mut n = new_task(tenant);
    n.work.component_digest = Some(digest.to_owned());
    n
}

/// The bytes of the components the group deploys.
const ONE: &[u8] = b"component one";
const TWO: &[u8] = b"component two";

/// The digests of the three components stored: `a` and `b` are deployed in turn, `c` never.
struct Digests {
    a: String,
    b: String,
    c: String,
}

fn stored(bytes: &[u8], signature: Option<&[u8]>) -> crate::model::StoredComponent {
    crate::model::StoredComponent {
        bytes: bytes.to_vec(),
        signature: signature.map(<[u8]>::to_vec),
    }
}

fn info(list: &[crate::model::ComponentInfo], digest: &str) -> crate::model::ComponentInfo {
    list.iter()
        .find(|c| c.digest == digest)
        .cloned()
        .unwrap_or_else(|| panic!("component {digest} is listed"))
}

/// Components are stored once by digest, deployments are committed in order (one at a
/// time, against the revision the deployer saw), and a component is collected only once
/// it is retired, no live task is pinned to it and its retention has passed.
pub async fn deployments(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    assert_eq!(store.deployment(None).await.expect("current"), None);
    let d = components_are_stored_once_by_digest(&*store).await;
    let second = deployments_name_stored_components_in_order(&*store, &clock, &d).await;
    let kept = pins_follow_live_tasks(&*store, &clock, &d).await;
    let retention = 1_000;
    collected_when_retired_unpinned_and_past_retention(&*store, &clock, &d, kept, retention).await;
    let store = if b.durable() {
        drop(store);
        b.open(&clock).await
    } else {
        store
    };
    what_a_reopen_keeps_and_a_rollback(&*store, &d, &second, retention).await;
}

/// Stored once by digest; an unsigned one gains a signature, a signed one keeps its own;
/// bad signatures, digests and sizes are refused.
async fn components_are_stored_once_by_digest(s: &dyn Store) -> Digests {
    let (one, two, never) = (ONE.to_vec(), TWO.to_vec(), b"never".to_vec());
    let a = s.store_component(&one, None).await.expect("store");
    assert_eq!(a, crate::model::component_digest(&one));
    assert_eq!(
        s.store_component(&one, None).await.expect("again"),
        a,
        "stored once"
    );
    let b = s.store_component(&two, None).await.expect("store");
    let c = s.store_component(&never, None).await.expect("store");
    assert_eq!(
        s.component(&a).await.expect("read"),
        Some(stored(&one, None))
    );
    // Stored unsigned, it gains a signature; signed, it keeps its own.
    let sig = [7u8; 64];
    assert_eq!(
        s.store_component(&one, Some(&sig)).await.expect("signed"),
        a
    );
    s.store_component(&one, Some(&[9u8; 64]))
        .await
        .expect("signed again");
    assert_eq!(
        s.component(&a).await.expect("read"),
        Some(stored(&one, Some(&sig)))
    );
    assert!(matches!(
        s.store_component(&one, Some(&[1u8; 1025])).await,
        Err(StoreError::Invalid(_))
    ));
    let absent = crate::model::component_digest(b"absent");
    assert_eq!(s.component(&absent).await.expect("read"), None);
    assert!(matches!(
        s.component("not-a-digest").await,
        Err(StoreError::Invalid(_))
    ));
    let big = vec![0u8; crate::model::MAX_COMPONENT_BYTES + 1];
    assert!(matches!(
        s.store_component(&big, None).await,
        Err(StoreError::Invalid(_))
    ));

    Digests { a, b, c }
}

/// Deploying names stored components only, and against the revision seen. Returns the
/// current deployment.
async fn deployments_name_stored_components_in_order(
    s: &dyn Store,
    clock: &ManualClock,
    d: &Digests,
) -> Deployment {
    let absent = crate::model::component_digest(b"absent");
    assert!(matches!(
        s.deploy(std::slice::from_ref(&absent), "x", None).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.deploy(&[d.a.clone(), d.a.clone()], "x", None).await,
        Err(StoreError::Invalid(_))
    ));
    let first = s
        .deploy(std::slice::from_ref(&d.a), "first", Some(0))
        .await
        .expect("deploy");
    assert_eq!((first.revision, first.deployed_at), (1, Timestamp(T0)));
    assert_eq!(
        s.deployment(None).await.expect("current"),
        Some(first.clone())
    );
    clock.advance(1_000);
    assert_eq!(
        s.deploy(std::slice::from_ref(&d.b), "stale", Some(0))
            .await
            .err(),
        Some(StoreError::Conflict { current: 1 })
    );
    let second = s
        .deploy(std::slice::from_ref(&d.b), "second", Some(1))
        .await
        .expect("deploy");
    assert_eq!(second.revision, 2);
    assert_eq!(
        s.deployments(10).await.expect("list"),
        vec![second.clone(), first.clone()]
    );
    assert_eq!(s.deployments(1).await.expect("list"), vec![second.clone()]);
    assert_eq!(
        s.deployment(Some(1)).await.expect("by revision"),
        Some(first.clone())
    );
    assert_eq!(s.deployment(Some(9)).await.expect("by revision"), None);

    second
}

/// Pins follow live tasks: creation, finishing and reaping. Returns the task still pinned
/// to `a`.
async fn pins_follow_live_tasks(s: &dyn Store, clock: &ManualClock, d: &Digests) -> TaskId {
    let kept = s.create(pinned_to("pins", &d.a)).await.expect("create").id;
    let mut short = pinned_to("pins", &d.a);
    short.ttl_ms = Some(500);
    let short = s.create(short).await.expect("create").id;
    // Another scope's task is listed too: an operator read.
    let elsewhere = s.create(pinned_to("other", &d.b)).await.expect("create").id;
    let mut both = vec![kept, short];
    both.sort();
    assert_eq!(s.pinned_tasks(&d.a, 10).await.expect("pinned"), both);
    assert_eq!(s.pinned_tasks(&d.a, 1).await.expect("pinned").len(), 1);
    assert_eq!(
        s.pinned_tasks(&d.b, 10).await.expect("pinned"),
        vec![elsewhere]
    );
    assert!(s.pinned_tasks(&d.c, 10).await.expect("pinned").is_empty());
    let listed = s.components().await.expect("list");
    assert_eq!(listed.len(), 3);
    let ia = info(&listed, &d.a);
    assert_eq!(
        (ia.pinned, ia.retired_at, ia.size),
        (2, Some(Timestamp(T0 + 1_000)), ONE.len() as u64),
        "retired by the second deployment, pinned by two live tasks"
    );
    assert_eq!(info(&listed, &d.b).retired_at, None, "deployed");
    assert!(ia.signed && !info(&listed, &d.b).signed);
    assert_eq!(
        info(&listed, &d.c).retired_at,
        Some(Timestamp(T0)),
        "never deployed: retired from when it was stored"
    );
    clock.advance(500);
    assert_eq!(s.reap(10).await.expect("reap").len(), 1);
    assert_eq!(info(&s.components().await.expect("list"), &d.a).pinned, 1);
    assert_eq!(s.pinned_tasks(&d.a, 10).await.expect("pinned"), vec![kept]);

    kept
}

/// Collected: past retention, retired, unpinned. The current one never; the pinned one
/// (past its retention too) not while a live task is pinned to it.
async fn collected_when_retired_unpinned_and_past_retention(
    s: &dyn Store,
    clock: &ManualClock,
    d: &Digests,
    kept: TaskId,
    retention: u64,
) {
    clock.advance(1_000);
    assert_eq!(
        s.collect_components(retention).await.expect("collect"),
        vec![d.c.clone()]
    );
    assert_eq!(s.component(&d.c).await.expect("read"), None);
    let lease = s.claim(&kept, &cr()).await.expect("claim").lease;
    as_worker(s, &lease, completed("done")).await;
    assert_eq!(info(&s.components().await.expect("list"), &d.a).pinned, 0);
    assert!(s.pinned_tasks(&d.a, 10).await.expect("pinned").is_empty());
}

/// Deployments and components survive a reopen; a rollback to a collected component needs
/// it stored again; an empty deployment retires everything.
async fn what_a_reopen_keeps_and_a_rollback(
    s: &dyn Store,
    d: &Digests,
    second: &Deployment,
    retention: u64,
) {
    assert_eq!(
        s.deployment(None).await.expect("current"),
        Some(second.clone()),
        "deployments survive a reopen"
    );
    assert_eq!(
        s.component(&d.b).await.expect("read"),
        Some(stored(TWO, None))
    );
    assert!(
        s.collect_components(u64::MAX)
            .await
            .expect("collect")
            .is_empty()
    );
    assert_eq!(
        s.collect_components(retention).await.expect("collect"),
        vec![d.a.clone()]
    );
    // A rollback to a collected component needs it stored again.
    assert!(matches!(
        s.deploy(std::slice::from_ref(&d.a), "back", Some(2)).await,
        Err(StoreError::Invalid(_))
    ));
    s.store_component(ONE, None).await.expect("store again");
    let back = s
        .deploy(std::slice::from_ref(&d.a), "back", Some(2))
        .await
        .expect("rollback");
    assert_eq!(back.revision, 3);
    let listed = s.components().await.expect("list");
    assert_eq!(info(&listed, &d.a).retired_at, None);
    assert_eq!(info(&listed, &d.b).retired_at, Some(Timestamp(T0 + 2_500)));
    // An empty deployment retires everything.
    let empty = s.deploy(&[], "none", None).await.expect("empty");
    assert!(empty.components.is_empty());
    assert!(
        info(&s.components().await.expect("list"), &d.a)
            .retired_at
            .is_some()
    );
}
