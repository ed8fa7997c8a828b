//! Contract group `deployments`: components stored once by digest, deployments committed in order, and components collected only when retired, unpinned and past their retention.

#[allow(unused_imports)]
use super::*;

fn pinned_to(tenant: &str, digest: &str) -> NewTask {
    let mut n = new_task(tenant);
    n.work.component_digest = Some(digest.to_owned());
    n
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
    let (one, two, never) = (
        b"component one".to_vec(),
        b"component two".to_vec(),
        b"never".to_vec(),
    );
    let a = store.store_component(&one, None).await.expect("store");
    assert_eq!(a, crate::model::component_digest(&one));
    assert_eq!(
        store.store_component(&one, None).await.expect("again"),
        a,
        "stored once"
    );
    let bd = store.store_component(&two, None).await.expect("store");
    let c = store.store_component(&never, None).await.expect("store");
    let stored = |bytes: &[u8], signature: Option<&[u8]>| crate::model::StoredComponent {
        bytes: bytes.to_vec(),
        signature: signature.map(<[u8]>::to_vec),
    };
    assert_eq!(
        store.component(&a).await.expect("read"),
        Some(stored(&one, None))
    );
    // Stored unsigned, it gains a signature; signed, it keeps its own.
    let sig = [7u8; 64];
    assert_eq!(
        store
            .store_component(&one, Some(&sig))
            .await
            .expect("signed"),
        a
    );
    store
        .store_component(&one, Some(&[9u8; 64]))
        .await
        .expect("signed again");
    assert_eq!(
        store.component(&a).await.expect("read"),
        Some(stored(&one, Some(&sig)))
    );
    assert!(matches!(
        store.store_component(&one, Some(&[1u8; 1025])).await,
        Err(StoreError::Invalid(_))
    ));
    let absent = crate::model::component_digest(b"absent");
    assert_eq!(store.component(&absent).await.expect("read"), None);
    assert!(matches!(
        store.component("not-a-digest").await,
        Err(StoreError::Invalid(_))
    ));
    let big = vec![0u8; crate::model::MAX_COMPONENT_BYTES + 1];
    assert!(matches!(
        store.store_component(&big, None).await,
        Err(StoreError::Invalid(_))
    ));

    // Deploying names stored components only, and against the revision seen.
    assert!(matches!(
        store.deploy(std::slice::from_ref(&absent), "x", None).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.deploy(&[a.clone(), a.clone()], "x", None).await,
        Err(StoreError::Invalid(_))
    ));
    let first = store
        .deploy(std::slice::from_ref(&a), "first", Some(0))
        .await
        .expect("deploy");
    assert_eq!((first.revision, first.deployed_at), (1, Timestamp(T0)));
    assert_eq!(
        store.deployment(None).await.expect("current"),
        Some(first.clone())
    );
    clock.advance(1_000);
    assert_eq!(
        store
            .deploy(std::slice::from_ref(&bd), "stale", Some(0))
            .await
            .err(),
        Some(StoreError::Conflict { current: 1 })
    );
    let second = store
        .deploy(std::slice::from_ref(&bd), "second", Some(1))
        .await
        .expect("deploy");
    assert_eq!(second.revision, 2);
    assert_eq!(
        store.deployments(10).await.expect("list"),
        vec![second.clone(), first.clone()]
    );
    assert_eq!(
        store.deployments(1).await.expect("list"),
        vec![second.clone()]
    );
    assert_eq!(
        store.deployment(Some(1)).await.expect("by revision"),
        Some(first.clone())
    );
    assert_eq!(store.deployment(Some(9)).await.expect("by revision"), None);

    // Pins follow live tasks: creation, finishing and reaping.
    let kept = store
        .create(pinned_to("pins", &a))
        .await
        .expect("create")
        .id;
    let mut short = pinned_to("pins", &a);
    short.ttl_ms = Some(500);
    let short = store.create(short).await.expect("create").id;
    // Another scope's task is listed too: an operator read.
    let elsewhere = store
        .create(pinned_to("other", &bd))
        .await
        .expect("create")
        .id;
    let mut both = vec![kept, short];
    both.sort();
    assert_eq!(store.pinned_tasks(&a, 10).await.expect("pinned"), both);
    assert_eq!(store.pinned_tasks(&a, 1).await.expect("pinned").len(), 1);
    assert_eq!(
        store.pinned_tasks(&bd, 10).await.expect("pinned"),
        vec![elsewhere]
    );
    assert!(store.pinned_tasks(&c, 10).await.expect("pinned").is_empty());
    let listed = store.components().await.expect("list");
    assert_eq!(listed.len(), 3);
    let ia = info(&listed, &a);
    assert_eq!(
        (ia.pinned, ia.retired_at, ia.size),
        (2, Some(Timestamp(T0 + 1_000)), one.len() as u64),
        "retired by the second deployment, pinned by two live tasks"
    );
    assert_eq!(info(&listed, &bd).retired_at, None, "deployed");
    assert!(ia.signed && !info(&listed, &bd).signed);
    assert_eq!(
        info(&listed, &c).retired_at,
        Some(Timestamp(T0)),
        "never deployed: retired from when it was stored"
    );
    clock.advance(500);
    assert_eq!(store.reap(10).await.expect("reap").len(), 1);
    assert_eq!(info(&store.components().await.expect("list"), &a).pinned, 1);
    assert_eq!(
        store.pinned_tasks(&a, 10).await.expect("pinned"),
        vec![kept]
    );

    // Collected: past retention, retired, unpinned. The current one never; the pinned one
    // (past its retention too) not while a live task is pinned to it.
    clock.advance(1_000);
    let retention = 1_000;
    assert_eq!(
        store.collect_components(retention).await.expect("collect"),
        vec![c.clone()]
    );
    assert_eq!(store.component(&c).await.expect("read"), None);
    let lease = store.claim(&kept, &cr()).await.expect("claim").lease;
    as_worker(&*store, &lease, completed("done")).await;
    assert_eq!(info(&store.components().await.expect("list"), &a).pinned, 0);
    assert!(store.pinned_tasks(&a, 10).await.expect("pinned").is_empty());

    let store = if b.durable() {
        drop(store);
        b.open(&clock).await
    } else {
        store
    };
    assert_eq!(
        store.deployment(None).await.expect("current"),
        Some(second.clone()),
        "deployments survive a reopen"
    );
    assert_eq!(
        store.component(&bd).await.expect("read"),
        Some(stored(&two, None))
    );
    assert!(
        store
            .collect_components(u64::MAX)
            .await
            .expect("collect")
            .is_empty()
    );
    assert_eq!(
        store.collect_components(retention).await.expect("collect"),
        vec![a.clone()]
    );
    // A rollback to a collected component needs it stored again.
    assert!(matches!(
        store
            .deploy(std::slice::from_ref(&a), "back", Some(2))
            .await,
        Err(StoreError::Invalid(_))
    ));
    store
        .store_component(&one, None)
        .await
        .expect("store again");
    let back = store
        .deploy(std::slice::from_ref(&a), "back", Some(2))
        .await
        .expect("rollback");
    assert_eq!(back.revision, 3);
    let listed = store.components().await.expect("list");
    assert_eq!(info(&listed, &a).retired_at, None);
    assert_eq!(info(&listed, &bd).retired_at, Some(Timestamp(T0 + 2_500)));
    // An empty deployment retires everything.
    let empty = store.deploy(&[], "none", None).await.expect("empty");
    assert!(empty.components.is_empty());
    assert!(
        info(&store.components().await.expect("list"), &a)
            .retired_at
            .is_some()
    );
}
