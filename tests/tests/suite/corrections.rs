//! Finance corrections on both backends: a finance user reverses an entry and posts its
//! correction, with a reason, on an effective date; the original is never edited; balances as of
//! a date before the correction show the original and from it on the correction; every refusal
//! is typed and writes nothing; the correction's record refuses every change.

use chrono::NaiveDate;
use ledger::finance::BalanceQuery;
use serde_json::{Value, json};
use tests::TestApp;
use tests::app::{AppOptions, Backend, FINANCE_TOKEN, OPS_TOKEN, charge, spawn};

tests::on_both_backends!(a_finance_user_reverses_and_corrects_an_entry_never_editing_it);

async fn entry_of(app: &TestApp, external_id: &str) -> i64 {
    app.scalar(&format!(
        "SELECT posted_entry_id FROM settlement_events WHERE external_id = '{external_id}'"
    ))
    .await
}

/// Balances as of `date`, as "account currency balance" lines.
async fn balances(app: &TestApp, date: &str) -> Vec<String> {
    let rows = app
        .store
        .balances(BalanceQuery {
            as_of: Some(NaiveDate::parse_from_str(date, "%Y-%m-%d").expect("date")),
            recorded_at: None,
        })
        .await
        .expect("balances");
    rows.iter()
        .map(|r| format!("{} {} {}", r.account, r.currency, r.balance))
        .collect()
}

async fn a_finance_user_reverses_and_corrects_an_entry_never_editing_it(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    for (id, body) in [
        ("msg_1", charge("ch_1", "100.00", "3.20", "96.80")),
        ("msg_2", charge("ch_2", "10.00", "0.30", "9.70")),
    ] {
        assert_eq!(app.post_standard(id, &body).await.status().as_u16(), 200);
    }
    app.wait_settled(30).await;
    let entry = entry_of(&app, "msg_1").await;
    let void = entry_of(&app, "msg_2").await;
    let original = app.store.entry(entry).await.expect("read").expect("entry");
    let before = balances(&app, "2026-12-01").await;
    let reconciled = app
        .store
        .reconciliation("po_9")
        .await
        .expect("reconciliation")
        .expect("po_9");
    let entries_before = app.count("journal_entries").await;

    // The lines the entry should have had: the fee was 3.00, not 3.20.
    let corrected: Vec<Value> = original
        .lines
        .iter()
        .map(|line| {
            let amount = match line.amount.as_str() {
                "96.80" => "97.00",
                "3.20" => "3.00",
                other => other,
            };
            json!({"account": line.account, "currency": line.currency, "amount": amount})
        })
        .collect();
    let path = format!("/api/journal/{entry}/correct");
    let body = |reason: &str, lines: &[Value]| json!({"reason": reason, "effective_date": "2026-12-02", "lines": lines});

    // Refused, typed, nothing written: ops may not correct; a reason and balanced lines are
    // required; an entry that is not there.
    let (status, _) = app
        .api_post(&path, Some(OPS_TOKEN), body("fee was 3.00", &corrected))
        .await;
    assert_eq!(status, 403);
    let (status, _) = app
        .api_post(&path, Some(FINANCE_TOKEN), body(" ", &corrected))
        .await;
    assert_eq!(status, 400);
    let unbalanced: Vec<Value> = corrected[..1].to_vec();
    let (status, refused) = app
        .api_post(
            &path,
            Some(FINANCE_TOKEN),
            body("fee was 3.00", &unbalanced),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    let (status, _) = app
        .api_post(
            "/api/journal/999999/correct",
            Some(FINANCE_TOKEN),
            body("fee was 3.00", &corrected),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(app.count("journal_entries").await, entries_before);
    assert_eq!(app.count("journal_corrections").await, 0);

    let (status, done) = app
        .api_post(&path, Some(FINANCE_TOKEN), body("fee was 3.00", &corrected))
        .await;
    assert_eq!(
        (status, done["changed"].as_bool()),
        (200, Some(true)),
        "{done}"
    );
    let reversal = done["reversal_entry_id"].as_i64().expect("reversal");
    let correction = done["correction_entry_id"].as_i64().expect("correction");
    // A retry of the same request changes nothing; another correction of it is refused.
    let (status, again) = app
        .api_post(&path, Some(FINANCE_TOKEN), body("fee was 3.00", &corrected))
        .await;
    assert_eq!(
        (
            status,
            again["changed"].as_bool(),
            again["correction_entry_id"].as_i64()
        ),
        (200, Some(false), Some(correction))
    );
    let (status, _) = app
        .api_post(&path, Some(FINANCE_TOKEN), body("fee was 2.90", &corrected))
        .await;
    assert_eq!(status, 409);
    let (status, _) = app
        .api_post(
            &format!("/api/journal/{reversal}/reverse"),
            Some(FINANCE_TOKEN),
            json!({"reason": "undo"}),
        )
        .await;
    assert_eq!(
        status, 409,
        "a reversal is not reversed: its original is corrected"
    );

    // The original is as it was; the reversal points at it; both new entries carry the reason.
    let now = app.store.entry(entry).await.expect("read").expect("entry");
    assert_eq!(
        (now.description.as_str(), now.lines.len()),
        (original.description.as_str(), original.lines.len())
    );
    assert_eq!(now.reversed_by_entry_id, Some(reversal));
    let written = app
        .store
        .entry(reversal)
        .await
        .expect("read")
        .expect("entry");
    assert_eq!(written.reverses_entry_id, Some(entry));
    assert_eq!(written.effective_date.to_string(), "2026-12-02");
    assert!(written.description.contains("fee was 3.00"));
    let fixed = app
        .store
        .entry(correction)
        .await
        .expect("read")
        .expect("entry");
    assert!(
        fixed.lines.iter().any(|l| l.amount == "3.00"),
        "{:?}",
        fixed.lines
    );

    // The payout's reconciliation is the provider's: the same items, the same net.
    let after_correction = app
        .store
        .reconciliation("po_9")
        .await
        .expect("reconciliation")
        .expect("po_9");
    assert_eq!(
        (after_correction.items.len(), &after_correction.items_net),
        (reconciled.items.len(), &reconciled.items_net)
    );

    // Balances: before the correction's date, the original; from it, the correction.
    assert_eq!(balances(&app, "2026-12-01").await, before);
    let after = balances(&app, "2026-12-02").await;
    assert!(
        after.iter().any(|b| b.ends_with(" USD 3.30")),
        "fees: 3.00 corrected + 0.30 of the other charge: {after:?}"
    );

    // A void entry, reversed only: its effect is gone from the reversal's date.
    let (status, done) = app
        .api_post(
            &format!("/api/journal/{void}/reverse"),
            Some(FINANCE_TOKEN),
            json!({"reason": "test charge", "effective_date": "2026-12-02"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(done["correction_entry_id"].is_null());
    let only_fixed = balances(&app, "2026-12-02").await;
    assert!(
        only_fixed.iter().any(|b| b.ends_with(" USD 3.00")),
        "{only_fixed:?}"
    );

    assert_eq!(
        app.texts("SELECT actor || ': ' || reason FROM journal_corrections ORDER BY id")
            .await,
        ["fred: fee was 3.00", "fred: test charge"]
    );
    for statement in [
        "UPDATE journal_corrections SET reason = 'edited'",
        "DELETE FROM journal_corrections",
    ] {
        assert!(
            app.try_rolled_back(statement).await.is_err(),
            "{statement} was accepted"
        );
    }
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}
