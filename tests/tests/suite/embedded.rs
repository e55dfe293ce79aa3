//! The embedded default: `settle serve` with nothing but sources runs on SQLite, and `settle
//! demo` shows the whole system on a fresh one.

use std::time::Duration;

use tests::app::{STANDARD_SECRET, charge};
use tests::process::{Scratch, free_port, settle_command, spawn_settle_in};
use tests::sign::{now, standard_headers};

#[tokio::test]
async fn settle_demo_ends_as_expected_and_starts_clean_each_time() {
    for run in 1..=2 {
        let output = settle_command()
            .arg("demo")
            .env_remove("DATABASE_URL")
            .output()
            .await
            .expect("run settle demo");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "run {run}:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("recorded 14   duplicates 3   conflicts 1"),
            "run {run}:\n{stdout}"
        );
        assert!(
            stdout.contains("journal entries 11   dead letters 2"),
            "run {run}:\n{stdout}"
        );
        assert!(
            stdout.contains("invariants: all hold")
                && stdout.contains("the demo ended as expected")
        );
        assert!(stdout.contains("dependency_not_ready") && stdout.contains("invalid_facts"));
        assert!(
            stdout.contains("Matched: payout 60.37 USD, 4 items"),
            "the Stripe payout reconciles from its listing: {stdout}"
        );
    }
}

#[tokio::test]
async fn serve_with_only_sources_runs_on_sqlite_and_a_kill_9_loses_nothing_acknowledged() {
    let scratch = Scratch::new();
    scratch.write(
        "settle.toml",
        &format!("[[sources]]\nname = \"std\"\nprovider = \"standard\"\nsecrets = [\"{STANDARD_SECRET}\"]\n"),
    );
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let base = format!("http://{listen}");
    let wait_ready = || async {
        for _ in 0..600 {
            if http
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("settle did not become ready");
    };
    let mut serve = spawn_settle_in(&scratch, "first", &["serve", "--listen", &listen], &[]);
    wait_ready().await;
    let mut acknowledged = Vec::new();
    for i in 0..40 {
        let body = charge(&format!("ch_{i}"), "10.00", "0.30", "9.70");
        let id = format!("msg_{i}");
        let mut request = http
            .post(format!("{base}/webhooks/std"))
            .header("content-type", "application/json")
            .body(body.clone());
        for (name, value) in standard_headers(STANDARD_SECRET, &id, now(), body.as_bytes()) {
            request = request.header(name, value);
        }
        if request
            .send()
            .await
            .is_ok_and(|r| r.status().as_u16() == 200)
        {
            acknowledged.push(id);
        }
    }
    assert_eq!(acknowledged.len(), 40);
    serve.start_kill().expect("SIGKILL");
    serve.wait().await.expect("reaped");
    assert!(
        scratch.dir.join("settle.db").exists(),
        "the embedded default is ./settle.db"
    );

    let _again = spawn_settle_in(&scratch, "second", &["serve", "--listen", &listen], &[]);
    wait_ready().await;
    let store = jobs::Store::connect(
        &format!("sqlite://{}", scratch.dir.join("settle.db").display()),
        &jobs::StoreOptions::default(),
    )
    .await
    .expect("open the file");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let posted = store
            .journal(&jobs::finance::JournalFilter::default(), None, 500)
            .await
            .expect("journal")
            .items
            .len();
        if posted == 40 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {posted} of 40 posted after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in &acknowledged {
        let event = store
            .event_by_key("std", id)
            .await
            .expect("read")
            .expect("every acknowledged delivery is kept");
        assert_eq!(event.status, "posted");
    }
    let failed: Vec<_> = store
        .verify()
        .await
        .expect("verify")
        .into_iter()
        .filter(|c| c.violations > 0)
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}
