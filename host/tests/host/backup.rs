//! Online backups of a serving node's single store file, taken through the server while
//! clients create tasks, then the server killed (SIGKILL) and the backup restored: every
//! task acknowledged before the backup began is in the restored store, a result seen before
//! it is the one kept, and a node started on it finishes every task. A backup the kill cut
//! short leaves no file at its path.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use common::process::{post_mcp, request, run_ok, snodo, spawn_serve, tool_call};

const PATIENCE: Duration = Duration::from_secs(90);

/// Creates `slow_compute` tasks at `addr` until `stop`, noting each acknowledged id.
async fn load(
    addr: SocketAddr,
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let call = tool_call(
            "slow_compute",
            json!({"seconds": n % 2, "label": format!("load-{n}")}),
            true,
        );
        let Ok(Ok(mut c)) = tokio::time::timeout(
            Duration::from_secs(5),
            snodo::client::Connection::open(addr),
        )
        .await
        else {
            return;
        };
        match c.call(&call, None).await {
            Ok((200, reply)) => {
                if let Some(id) = reply["result"]["taskId"].as_str() {
                    acked.lock().push(id.to_owned());
                }
            }
            _ => return,
        }
        // A steady load, not a flood: the node keeps running what it accepted.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `tasks/get` of `id` at `addr` (`None`: unknown).
async fn status(addr: SocketAddr, id: &str) -> Option<Value> {
    let (_, reply) = post_mcp(addr, &request("tasks/get", json!({"taskId": id}), true)).await;
    reply.get("result").cloned()
}

fn config(dir: &std::path::Path, kind: &str) -> std::path::PathBuf {
    let conf = dir.join("node.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1:0\"\n[store]\nkind = \"{kind}\"\npath = \"{}\"\n\n\
             [[components]]\npath = \"{}\"\n",
            dir.join(format!("tasks.{kind}")).display(),
            snodo_test_guests::FIXTURES,
        ),
    )
    .expect("config");
    conf
}

async fn a_backup_under_load_restores_after_a_kill(kind: &str) {
    let dir = tempfile::tempdir().expect("tmp");
    let conf = config(dir.path(), kind);
    let mut server = spawn_serve(&["--config", conf.to_str().expect("utf-8")], &[]);
    let url = format!("http://{}", server.addr);
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|_| tokio::spawn(load(server.addr, acked.clone(), stop.clone())))
        .collect();
    // Some work done and seen done before the backup.
    let deadline = Instant::now() + PATIENCE;
    let mut seen: BTreeMap<String, Value> = BTreeMap::new();
    while seen.len() < 5 {
        if Instant::now() > deadline {
            let first = acked.lock().first().cloned();
            let first = match first {
                Some(id) => status(server.addr, &id).await,
                None => None,
            };
            panic!("tasks complete under load; the first: {first:?}");
        }
        let ids: Vec<String> = acked.lock().clone();
        for id in ids.iter().take(20) {
            if let Some(r) = status(server.addr, id).await
                && r["status"] == "completed"
            {
                seen.insert(id.clone(), r["result"].clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before: Vec<String> = acked.lock().clone();

    let copy = dir.path().join("backup");
    let out = tokio::task::spawn_blocking({
        let (conf, copy, url) = (conf.clone(), copy.clone(), url.clone());
        move || {
            run_ok(
                snodo(&["backup", "--json", "--config"])
                    .arg(&conf)
                    .arg("--to")
                    .arg(&copy)
                    .env("SNODO_URL", &url),
            )
        }
    })
    .await
    .expect("backup");
    let taken: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        taken["tasks"]
            .as_u64()
            .is_some_and(|n| n >= before.len() as u64),
        "{taken}"
    );

    // The server writes backups inside admin.backup_dir (by default the store's directory)
    // and nowhere else.
    let elsewhere = tempfile::tempdir().expect("tmp");
    let outside = elsewhere.path().join("stolen");
    let out = snodo(&["backup", "--config"])
        .arg(&conf)
        .arg("--to")
        .arg(&outside)
        .env("SNODO_URL", &url)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("admin.backup_dir") && !outside.exists(),
        "{err}"
    );

    // A second backup, with the server killed while it may be under way: whole or absent.
    let cut = dir.path().join("cut-short");
    let mut second = snodo(&["backup", "--config"]);
    second
        .arg(&conf)
        .arg("--to")
        .arg(&cut)
        .env("SNODO_URL", &url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut second = second.spawn().expect("second backup");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _ = server.child.kill();
    let _ = server.child.wait();
    let _ = second.wait();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    // Cut short, it left at most its temporary name; done, it reads back whole.
    if cut.exists() {
        snodo::store::backup::verify(&cut).expect("a backup at its path is whole");
    }

    // Restored onto the stopped node: the killed store is kept aside.
    let out = run_ok(snodo(&["restore", "--config"]).arg(&conf).arg(&copy));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("kept at"), "{said}");
    let server = spawn_serve(&["--config", conf.to_str().expect("utf-8")], &[]);
    let deadline = Instant::now() + PATIENCE;
    for id in &before {
        loop {
            let r = status(server.addr, id)
                .await
                .unwrap_or_else(|| panic!("task {id} was acknowledged before the backup"));
            if r["status"] == "completed" {
                if let Some(result) = seen.get(id) {
                    assert_eq!(&r["result"], result, "task {id}'s result");
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} finishes on the restored store: {r}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redb_backup_taken_under_load_restores_after_a_kill() {
    a_backup_under_load_restores_after_a_kill("redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqlite_backup_taken_under_load_restores_after_a_kill() {
    a_backup_under_load_restores_after_a_kill("sqlite").await;
}
