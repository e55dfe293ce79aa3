//! The embedded default: `settle serve` with nothing but sources runs on SQLite, and `settle
//! demo` shows the whole system on a fresh one.

use std::time::Duration;

use tests::app::{STANDARD_SECRET, charge};
use tests::process::{Listen, Scratch, settle_command, spawn_settle_in};
use tests::sign::{now, standard_headers};

#[tokio::test]
async fn settle_demo_ends_as_expected_and_starts_clean_each_time() {
    let scratch = Scratch::new();
    for run in 1..=2 {
        let output = settle_command()
            .arg("demo")
            .arg("--dir")
            .arg(scratch.dir.join("demo"))
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
            stdout.contains("journal entries 16   dead letters 2"),
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
        assert!(
            stdout.contains("Matched: payout 52.00 EUR, 4 lines")
                && stdout.contains("receivables still open: none"),
            "the Adyen batch reconciles and settles its sales: {stdout}"
        );
        // The story only: no log line on the terminal, the log in a file whose path is printed.
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stdout.contains("timestamp") && !stdout.contains(" INFO ") && stderr.is_empty(),
            "logs on the terminal:\n{stdout}\n{stderr}"
        );
        let log = stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix("settle's log goes to "))
            .expect("the log's path is printed");
        let log = std::fs::read_to_string(log.trim()).expect("the log file");
        assert!(
            log.contains("INFO") && log.contains("dashboard http://127.0.0.1:"),
            "a human-readable log: {log}"
        );
        // The journal in entry order.
        let journal = stdout
            .split("journal, in entry order")
            .nth(1)
            .and_then(|rest| rest.split("\nbalances").next())
            .expect("the journal");
        let entries: Vec<i64> = journal
            .lines()
            .filter_map(|line| line.split_whitespace().next()?.parse().ok())
            .collect();
        assert_eq!(entries, (1..=16).collect::<Vec<i64>>(), "{journal}");
        assert!(stdout.contains("settle demo --keep-running"));
    }
}

#[tokio::test]
async fn the_demo_kept_running_opens_its_dashboard_with_the_printed_token() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let scratch = Scratch::new();
    let mut demo = settle_command()
        .args(["demo", "--keep-running", "--dir"])
        .arg(scratch.dir.join("demo"))
        .env_remove("DATABASE_URL")
        // Settings the demo does not read cannot stop it.
        .env("SETTLE_NOT_A_SETTING", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("settle demo --keep-running");
    let mut lines = BufReader::new(demo.stdout.take().expect("stdout")).lines();
    let (mut dashboard, mut token) = (None, None);
    let mut seen = String::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(120), lines.next_line()).await
    {
        seen.push_str(&line);
        seen.push('\n');
        let line = line.trim();
        if let Some(url) = line.strip_prefix("dashboard  ") {
            dashboard = Some(url.trim().to_owned());
        }
        if let Some(printed) = line.strip_prefix("log in with the token  ") {
            token = Some(printed.trim().to_owned());
            break;
        }
    }
    let (dashboard, token) = match (dashboard, token) {
        (Some(dashboard), Some(token)) => (dashboard, token),
        _ => panic!("no dashboard and token printed:\n{seen}"),
    };
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let login = http
        .get(format!("{dashboard}/login"))
        .send()
        .await
        .expect("the login page");
    assert_eq!(login.status().as_u16(), 200);
    let base = dashboard.trim_end_matches("/dashboard");
    let journal = http
        .get(format!("{base}/api/journal"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("the API");
    assert_eq!(journal.status().as_u16(), 200, "the printed token opens it");
    let body: serde_json::Value = journal.json().await.expect("json");
    assert_eq!(body["items"].as_array().map(Vec::len), Some(16));

    tests::process::sigterm(&demo);
    let exit = tokio::time::timeout(Duration::from_secs(30), demo.wait())
        .await
        .expect("the demo stops on SIGTERM")
        .expect("exit status");
    assert!(exit.success(), "{exit}");
}

#[tokio::test]
async fn serve_with_only_sources_runs_on_sqlite_and_a_kill_9_loses_nothing_acknowledged() {
    let scratch = Scratch::new();
    scratch.write(
        "settle.toml",
        &format!("[[sources]]\nname = \"std\"\nprovider = \"standard\"\nsecrets = [\"{STANDARD_SECRET}\"]\n"),
    );
    let listen = Listen::new();
    let http = reqwest::Client::new();
    let base = listen.base();
    let ops = listen.ops_base();
    let wait_ready = || async {
        for _ in 0..600 {
            if http
                .get(format!("{ops}/readyz"))
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
    let mut serve = spawn_settle_in(&scratch, "first", &listen.args("serve"), &[]);
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

    let _again = spawn_settle_in(&scratch, "second", &listen.args("serve"), &[]);
    wait_ready().await;
    let store = ledger::Store::connect(
        &format!("sqlite://{}", scratch.dir.join("settle.db").display()),
        &ledger::StoreOptions::default(),
    )
    .await
    .expect("open the file");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let posted = store
            .journal(&ledger::finance::JournalFilter::default(), None, 500)
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
        assert_eq!(event.status, ledger::EventStatus::Posted);
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
