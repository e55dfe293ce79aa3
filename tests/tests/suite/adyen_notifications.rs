//! Adyen end to end: signed Adyen's way, through a real socket, posted by real workers on real
//! PostgreSQL. (Stripe has its own module.)

use tests::TestApp;
use tests::app::spawn_app;
use tests::sign::adyen_item;

async fn lines(app: &TestApp, external_id: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT l.account || ' ' || l.currency || ' ' || trim_scale(l.amount)::text FROM settlement_events e
         JOIN journal_lines l ON l.entry_id = e.posted_entry_id WHERE e.external_id = $1 ORDER BY l.line_no",
    )
    .bind(external_id)
    .fetch_all(app.pg())
    .await
    .expect("lines")
}

#[tokio::test]
async fn adyen_records_each_item_accepts_replays_and_conflicts_and_posts_exactly() {
    let app = spawn_app().await;
    let items = [
        adyen_item("CAPTURE", "PSPCAPTURE000000", 1130, "EUR", "true"),
        adyen_item("REFUND", "PSPREFUND0000000", 1500, "JPY", "true"),
        adyen_item("CHARGEBACK", "PSPCHARGEBACK000", 1234, "KWD", "true"),
        adyen_item("CHARGEBACK", "PSPLOST000000000", 100, "EUR", "false"),
        adyen_item("AUTHORISATION", "PSPAUTH000000000", 1130, "EUR", "true"),
    ];
    let response = app.post_adyen(&items).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.expect("body"), "[accepted]");
    assert_eq!(
        app.count("settlement_events").await,
        3,
        "one event per settlement item; others acknowledged"
    );

    // Redelivered as is: accepted, nothing new.
    assert_eq!(
        app.post_adyen(&items).await.text().await.expect("body"),
        "[accepted]"
    );
    assert_eq!(app.count("settlement_events").await, 3);
    // The same key with a different amount: still accepted (Adyen must not block), kept as a
    // conflict for ops.
    let changed = [adyen_item(
        "CAPTURE",
        "PSPCAPTURE000000",
        1131,
        "EUR",
        "true",
    )];
    let response = app.post_adyen(&changed).await;
    assert_eq!(
        (
            response.status().as_u16(),
            response.text().await.expect("body").as_str()
        ),
        (200, "[accepted]")
    );
    assert_eq!(app.count("event_conflicts").await, 1);
    assert_eq!(app.count("settlement_events").await, 3);

    // The payload is kept without its signature (an event's page shows the payload).
    let payloads: Vec<String> = sqlx::query_scalar("SELECT payload FROM settlement_events")
        .fetch_all(app.pg())
        .await
        .expect("payloads");
    assert_eq!(payloads.len(), 3);
    for payload in payloads {
        assert!(payload.contains("\"pspReference\""), "{payload}");
        assert!(!payload.contains("hmacSignature"), "{payload}");
    }

    app.wait_settled(30).await;
    assert_eq!(
        lines(&app, "CAPTURE:PSPCAPTURE000000").await,
        ["adyen:balance EUR 11.3", "sales EUR -11.3"]
    );
    assert_eq!(
        lines(&app, "REFUND:PSPREFUND0000000").await,
        ["refunds JPY 1500", "adyen:balance JPY -1500"]
    );
    assert_eq!(
        lines(&app, "CHARGEBACK:PSPCHARGEBACK000").await,
        ["disputes:adyen KWD 1.234", "adyen:balance KWD -1.234"]
    );
    assert!(app.failed_invariants().await.is_empty());
}

/// Booked from notifications, a failed capture takes its amount back, a lost defence (second
/// chargeback) debits again, and a refund returned by the bank credits it back: the balance ends
/// where the money is.
#[tokio::test]
async fn adyen_failed_captures_second_chargebacks_and_returned_refunds_move_the_balance() {
    let app = spawn_app().await;
    let items = [
        adyen_item("CAPTURE", "PSPCAP0000000000", 5000, "EUR", "true"),
        adyen_item("CAPTURE_FAILED", "PSPCAP0000000000", 5000, "EUR", "true"),
        adyen_item("CHARGEBACK", "PSPDISPUTE000000", 2000, "EUR", "true"),
        adyen_item(
            "CHARGEBACK_REVERSED",
            "PSPDISPUTE000000",
            2000,
            "EUR",
            "true",
        ),
        adyen_item("SECOND_CHARGEBACK", "PSPDISPUTE000000", 2000, "EUR", "true"),
        adyen_item("REFUND", "PSPREFUND0000000", 700, "EUR", "true"),
        adyen_item("REFUNDED_REVERSED", "PSPREFUND0000000", 700, "EUR", "true"),
    ];
    assert_eq!(app.post_adyen(&items).await.status().as_u16(), 200);
    app.wait_settled(30).await;
    assert_eq!(app.count("settlement_events").await, 7);
    assert_eq!(
        lines(&app, "CAPTURE_FAILED:PSPCAP0000000000").await,
        ["adyen:balance EUR -50", "adjustments EUR 50"]
    );
    assert_eq!(
        lines(&app, "SECOND_CHARGEBACK:PSPDISPUTE000000").await,
        ["disputes:adyen EUR 20", "adyen:balance EUR -20"]
    );
    let balance: String = app
        .texts(
            "SELECT CAST(sum(amount) AS TEXT) FROM journal_lines WHERE account = 'adyen:balance'",
        )
        .await
        .remove(0);
    let balance: rust_decimal::Decimal = balance.parse().expect("decimal");
    // +50 -50 (capture failed), -20 +20 -20 (the dispute lost), -7 +7 (the refund returned).
    assert_eq!(balance.normalize().to_string(), "-20");
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn an_adyen_batch_is_recorded_atomically() {
    let app = spawn_app().await;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_refunds() RETURNS trigger AS $$
         BEGIN IF NEW.external_id LIKE 'REFUND:%' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NULL; END;
         $$ LANGUAGE plpgsql;
         CREATE CONSTRAINT TRIGGER refuse_refunds AFTER INSERT ON settlement_events
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_refunds();",
    )
    .execute(app.pg())
    .await
    .expect("trigger");
    let items = [
        adyen_item("CAPTURE", "PSP1000000000000", 1000, "EUR", "true"),
        adyen_item("REFUND", "PSP2000000000000", 500, "EUR", "true"),
    ];
    let response = app.post_adyen(&items).await;
    assert_eq!(
        response.status().as_u16(),
        503,
        "not [accepted]: Adyen will redeliver"
    );
    assert_eq!(
        app.count("settlement_events").await,
        0,
        "the capture was not kept without the refund"
    );
    sqlx::query("DROP TRIGGER refuse_refunds ON settlement_events")
        .execute(app.pg())
        .await
        .expect("drop");
    assert_eq!(
        app.post_adyen(&items).await.text().await.expect("body"),
        "[accepted]"
    );
    assert_eq!(app.count("settlement_events").await, 2);
}
