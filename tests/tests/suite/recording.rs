//! Recording on PostgreSQL: what another transaction's row locks and the database's collation do
//! to the ingress' group commit.

use std::time::Duration;

use ops::Role;
use serde_json::Value;
use tests::TestApp;
use tests::TestDb;
use tests::app::{AppOptions, charge, new_charge, spawn, start};
use tests::db::Database;

async fn deliver(app: &TestApp, id: &str, body: &str) -> (u16, Value) {
    let response = app.post_standard(id, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Another transaction (a peer stalled inside an Adyen batch, say) has inserted a key and not
/// committed. The group waiting on that key gives up after `ingress.lock_timeout_ms` and leaves
/// its deliveries to be recorded one by one, so only the held key's delivery waits for the
/// holder; with one group slot, a group that waited on would hold up every delivery.
#[tokio::test]
async fn a_key_another_transaction_holds_delays_only_its_own_delivery() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        extra: "[ingress]\ngroups_max = 1\nlock_timeout_ms = 200".into(),
        ..AppOptions::default()
    })
    .await;
    let template = charge("ch_template", "10.00", "0.30", "9.70");
    assert_eq!(deliver(&app, "msg_template", &template).await.0, 200);
    let mut holder = app.pg().begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint,
                                        facts, validation_error, payload, job_id)
         SELECT source, 'msg_held', status, kind, movement_id, fingerprint, facts,
                validation_error, payload, job_id
         FROM settlement_events WHERE external_id = 'msg_template'",
    )
    .execute(&mut *holder)
    .await
    .expect("hold the key msg_held");

    let held_body = charge("ch_held", "10.00", "0.30", "9.70");
    let held = deliver(&app, "msg_held", &held_body);
    let ids: Vec<String> = (0..10).map(|i| format!("msg_{i}")).collect();
    let bodies: Vec<String> = (0..10)
        .map(|i| charge(&format!("ch_{i}"), "10.00", "0.30", "9.70"))
        .collect();
    let others_then_release = async {
        // The held key's group goes first and waits on the key.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let others = futures::future::join_all(
            ids.iter()
                .zip(&bodies)
                .map(|(id, body)| deliver(&app, id, body)),
        );
        // Generous: this guards against a hang, it measures nothing.
        let answers = tokio::time::timeout(Duration::from_secs(60), others)
            .await
            .expect("the other deliveries are answered while the key is still held");
        holder.rollback().await.expect("release the key");
        answers
    };
    let (held, answers) = tokio::join!(held, others_then_release);
    for (id, (status, body)) in ids.iter().zip(&answers) {
        assert_eq!(
            (*status, body["status"].as_str()),
            (200, Some("recorded")),
            "{id}"
        );
    }
    assert_eq!(
        (held.0, held.1["status"].as_str()),
        (200, Some("recorded")),
        "the held key's delivery is recorded once the holder lets go"
    );
    assert_eq!(app.count("settlement_events").await, 12);
    assert_eq!(app.jobs().await, 12, "one job per event");
    let held_facts = app
        .texts("SELECT CAST(facts AS TEXT) FROM settlement_events WHERE external_id = 'msg_held'")
        .await;
    assert!(
        held_facts[0].contains("ch_held"),
        "the delivery's own event, not the holder's: {held_facts:?}"
    );
    let gave_up = app
        .metric("settle_ingress_groups_failed_total{then=\"alone\"}")
        .await;
    assert!(
        gave_up >= 1.0,
        "the waiting group gave its deliveries back: {gave_up}"
    );
}

/// Writers of several keys at once (a group; an Adyen batch) take their keys in the byte order
/// of the text, so none waits on another in a cycle, even on a database whose collation orders
/// text otherwise (here ICU's en-US: `a b B REFUND_FAILED:1 REFUND:2 Z`).
#[tokio::test]
async fn keys_are_written_in_byte_order_whatever_the_collation() {
    let db = TestDb::create_with("TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'").await;
    let app = start(
        Database::Postgres(db),
        AppOptions {
            role: Role::Ingress,
            ..AppOptions::default()
        },
    )
    .await;
    assert_eq!(
        app.scalar("SELECT count(*) WHERE 'B' < 'a'").await,
        0,
        "the database's collation is not byte order"
    );
    let in_id_order = |prefix: &'static str| {
        let app = &app;
        async move {
            app.texts(&format!(
                "SELECT external_id FROM settlement_events WHERE movement_id LIKE '{prefix}%'
                 ORDER BY id"
            ))
            .await
        }
    };
    let keys = ["b", "B", "a", "REFUND_FAILED:1", "REFUND:2", "Z"];
    let mut bytewise: Vec<&str> = keys.to_vec();
    bytewise.sort_unstable();

    let group: Vec<ledger::NewEvent> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| new_charge(key, &format!("group_{i}"), "10.00"))
        .collect();
    let refs: Vec<&ledger::NewEvent> = group.iter().collect();
    let inserted = app.store.record_new(&refs, 1000).await.expect("group");
    assert!(inserted.iter().all(Option::is_some), "{inserted:?}");
    assert_eq!(in_id_order("group_").await, bytewise, "a group's keys");

    let batch: Vec<ledger::NewEvent> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| new_charge(&format!("{key}~"), &format!("batch_{i}"), "10.00"))
        .collect();
    app.store.record(&batch).await.expect("batch");
    let batch_bytewise: Vec<String> = bytewise.iter().map(|key| format!("{key}~")).collect();
    assert_eq!(
        in_id_order("batch_").await,
        batch_bytewise,
        "a batch's keys"
    );
}

/// Makes `app`'s database take no writes from new sessions (as a standby does) or take them
/// again, and ends settle's sessions so that its pools reconnect under the setting.
async fn set_read_only(app: &TestApp, read_only: bool) {
    let setting = match read_only {
        true => "SET default_transaction_read_only = on",
        false => "RESET default_transaction_read_only",
    };
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(app.pg())
        .await
        .expect("name");
    // The test's own session may itself have started read-only.
    let mut tx = app.pg().begin().await.expect("begin");
    sqlx::query("SET TRANSACTION READ WRITE")
        .execute(&mut *tx)
        .await
        .expect("read write");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {name} {setting}"
    )))
    .execute(&mut *tx)
    .await
    .expect("alter database");
    tx.commit().await.expect("commit");
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'settle'",
    )
    .execute(app.pg())
    .await
    .expect("end settle's sessions");
}

/// Connected to a database that takes no writes (a standby, before a failover moves the
/// address), settle says so on `/readyz` and answers no delivery 2xx; once writes are taken
/// again, the provider's retry is recorded and posted.
#[tokio::test]
async fn on_a_read_only_database_nothing_is_acknowledged_and_readyz_says_why() {
    let app = spawn(AppOptions::default()).await;
    let (status, _) = deliver(
        &app,
        "msg_before",
        &charge("ch_before", "10.00", "0.30", "9.70"),
    )
    .await;
    assert_eq!(status, 200);
    app.wait_settled(30).await;
    set_read_only(&app, true).await;
    let mut readyz = (0, Value::Null);
    for _ in 0..50 {
        readyz = app.api_get("/readyz", None).await;
        if readyz.0 == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(readyz.0, 503, "{:?}", readyz.1);
    assert_eq!(readyz.1["error"], "database_read_only");
    let body = charge("ch_during", "20.00", "0.60", "19.40");
    for _ in 0..3 {
        let (status, answer) = deliver(&app, "msg_during", &body).await;
        assert_eq!(status, 503, "{answer}");
    }
    assert_eq!(app.count("settlement_events").await, 1, "nothing recorded");

    set_read_only(&app, false).await;
    let mut status = 0;
    for _ in 0..50 {
        (status, _) = deliver(&app, "msg_during", &body).await;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "the provider's retry is recorded");
    // Ready again without a restart, once the workers' own connections are back.
    for _ in 0..100 {
        readyz = app.api_get("/readyz", None).await;
        if readyz.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(readyz.0, 200, "{:?}", readyz.1);
    app.wait_settled(30).await;
    assert_eq!(app.count("journal_entries").await, 2);
    assert!(app.failed_invariants().await.is_empty());
}
