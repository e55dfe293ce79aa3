//! Stripe and Adyen end to end: signed the providers' way, through a real socket, posted by
//! real workers on real PostgreSQL.

use serde_json::{Value, json};
use tests::TestApp;
use tests::app::spawn_app;
use tests::sign::adyen_item;

fn stripe_event(id: &str, event_type: &str, object: Value, pending_webhooks: i64) -> String {
    json!({"id": id, "object": "event", "api_version": "2024-06-20", "created": 1_764_500_100,
           "type": event_type, "livemode": false, "pending_webhooks": pending_webhooks,
           "request": {"id": format!("req_{pending_webhooks}"), "idempotency_key": null},
           "data": {"object": object}})
    .to_string()
}

fn payout(id: &str, amount: i64, currency: &str) -> Value {
    json!({"id": id, "object": "payout", "amount": amount, "currency": currency,
           "arrival_date": 1_764_500_000, "created": 1_764_400_000, "status": "paid"})
}

async fn status_and_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

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
async fn stripe_records_replays_conflicts_and_reverses_a_failed_payout() {
    let app = spawn_app().await;
    let paid = stripe_event("evt_paid", "payout.paid", payout("po_1", 1100, "usd"), 1);
    let (status, json) = status_and_json(app.post_stripe(&paid).await).await;
    assert_eq!((status, json["status"].as_str()), (200, Some("recorded")));

    // Stripe redelivers the same event with another pending_webhooks and request, a new t and
    // signature, and its own key order: a replay, never a conflict.
    let again = stripe_event("evt_paid", "payout.paid", payout("po_1", 1100, "usd"), 3);
    let (status, json) = status_and_json(app.post_stripe(&again).await).await;
    assert_eq!((status, json["status"].as_str()), (200, Some("duplicate")));

    let changed = stripe_event("evt_paid", "payout.paid", payout("po_1", 1200, "usd"), 2);
    let (status, json) = status_and_json(app.post_stripe(&changed).await).await;
    assert_eq!(
        (status, json["error"].as_str()),
        (409, Some("event_conflict"))
    );

    let failed = stripe_event(
        "evt_failed",
        "payout.failed",
        payout("po_1", 1100, "usd"),
        1,
    );
    assert_eq!(app.post_stripe(&failed).await.status().as_u16(), 200);
    let ignored = stripe_event("evt_cust", "customer.created", json!({"id": "cus_1"}), 1);
    let (status, json) = status_and_json(app.post_stripe(&ignored).await).await;
    assert_eq!((status, json["status"].as_str()), (200, Some("ignored")));

    app.wait_settled(30).await;
    assert_eq!(
        lines(&app, "evt_paid").await,
        ["bank USD 11", "stripe:balance USD -11"]
    );
    assert_eq!(
        lines(&app, "evt_failed").await,
        ["bank USD -11", "stripe:balance USD 11"]
    );
    let reverses: bool = sqlx::query_scalar(
        "SELECT f.reverses_entry_id = p.id FROM journal_entries f, journal_entries p
         WHERE f.kind = 'payout_failed' AND p.kind = 'payout_paid'",
    )
    .fetch_one(app.pg())
    .await
    .expect("reversal link");
    assert!(reverses);
    assert_eq!(app.count("settlement_events").await, 2);
    assert_eq!(app.count("event_conflicts").await, 1);
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn stripe_amounts_in_jpy_and_kwd_are_exact_and_one_movement_posts_once() {
    let app = spawn_app().await;
    let charge = |id: &str| {
        json!({"id": "ch_jpy", "object": "charge", "amount": 1000, "currency": "jpy", "created": 1_764_400_000,
               "balance_transaction": {"id": format!("txn_{id}"), "object": "balance_transaction",
                                       "amount": 1000, "currency": "jpy", "fee": 36, "net": 964}})
    };
    app.post_stripe(&stripe_event("evt_jpy", "charge.succeeded", charge("a"), 1))
        .await;
    // A second event about the same charge (same facts): the movement posts once.
    app.post_stripe(&stripe_event(
        "evt_jpy_again",
        "charge.succeeded",
        charge("a"),
        1,
    ))
    .await;
    let refunded = json!({"id": "ch_kwd", "object": "charge", "amount": 5000, "amount_refunded": 1230,
        "currency": "kwd", "created": 1_764_400_000,
        "refunds": {"object": "list", "data": [{"id": "re_1", "object": "refund", "amount": 1230,
                    "currency": "kwd", "created": 1_764_450_000, "charge": "ch_kwd"}]}});
    app.post_stripe(&stripe_event("evt_kwd", "charge.refunded", refunded, 1))
        .await;
    let dispute = json!({"id": "dp_1", "object": "dispute", "amount": 2500, "currency": "usd", "charge": "ch_x",
        "created": 1_764_450_000, "balance_transactions": [{"id": "txn_d", "amount": -2500, "fee": 1500, "net": -4000}]});
    app.post_stripe(&stripe_event(
        "evt_dispute",
        "charge.dispute.funds_withdrawn",
        dispute.clone(),
        1,
    ))
    .await;
    app.post_stripe(&stripe_event(
        "evt_reinstated",
        "charge.dispute.funds_reinstated",
        dispute,
        1,
    ))
    .await;
    app.wait_settled(30).await;

    assert_eq!(
        lines(&app, "evt_jpy").await,
        [
            "stripe:balance JPY 964",
            "fees:stripe JPY 36",
            "sales JPY -1000"
        ]
    );
    assert_eq!(
        app.event_state("evt_jpy_again").await,
        ("posted".into(), None)
    );
    assert_eq!(
        lines(&app, "evt_kwd").await,
        ["refunds KWD 1.23", "stripe:balance KWD -1.23"]
    );
    assert_eq!(
        lines(&app, "evt_dispute").await,
        [
            "disputes:stripe USD 25",
            "fees:stripe USD 15",
            "stripe:balance USD -40"
        ]
    );
    assert_eq!(
        lines(&app, "evt_reinstated").await,
        ["stripe:balance USD 25", "disputes:stripe USD -25"]
    );
    assert_eq!(
        app.count("journal_entries").await,
        4,
        "the JPY charge posted once"
    );
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn adyen_records_each_item_accepts_replays_and_conflicts_and_posts_exactly() {
    let app = spawn_app().await;
    let items = [
        adyen_item("CAPTURE", "psp_capture", 1130, "EUR", "true"),
        adyen_item("REFUND", "psp_refund", 1500, "JPY", "true"),
        adyen_item("CHARGEBACK", "psp_chargeback", 1234, "KWD", "true"),
        adyen_item("CHARGEBACK", "psp_lost", 100, "EUR", "false"),
        adyen_item("AUTHORISATION", "psp_auth", 1130, "EUR", "true"),
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
    let changed = [adyen_item("CAPTURE", "psp_capture", 1131, "EUR", "true")];
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

    app.wait_settled(30).await;
    assert_eq!(
        lines(&app, "CAPTURE:psp_capture").await,
        ["adyen:balance EUR 11.3", "sales EUR -11.3"]
    );
    assert_eq!(
        lines(&app, "REFUND:psp_refund").await,
        ["refunds JPY 1500", "adyen:balance JPY -1500"]
    );
    assert_eq!(
        lines(&app, "CHARGEBACK:psp_chargeback").await,
        ["disputes:adyen KWD 1.234", "adyen:balance KWD -1.234"]
    );
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
        adyen_item("CAPTURE", "psp_1", 1000, "EUR", "true"),
        adyen_item("REFUND", "psp_2", 500, "EUR", "true"),
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
