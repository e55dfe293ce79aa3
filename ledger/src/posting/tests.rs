use serde_json::json;

use super::*;

fn event(kind: Kind, currency: &str, amounts: serde_json::Value) -> SettlementEvent {
    let mut data = json!({"movement_id": "m_1", "occurred_at": "2026-11-30T23:59:59Z",
                          "currency": currency, "payout_id": "po_1"});
    for (key, value) in amounts.as_object().expect("amounts") {
        data[key] = value.clone();
    }
    SettlementEvent::from_canonical(kind, data.as_object().expect("object")).expect("valid event")
}

/// Posts `event` with the default accounts of source `s` and compares the lines as
/// `(account, "signed amount")`.
fn check(event: SettlementEvent, expected: &[(&str, &str)]) {
    let source = SourceName::parse("s").expect("source");
    let entry = draft(&source, &event, &Accounts::defaults(&source));
    let got: Vec<(String, String)> = entry
        .lines
        .iter()
        .map(|l| (l.account.clone(), l.amount.to_string()))
        .collect();
    let want: Vec<(String, String)> = expected
        .iter()
        .map(|(a, m)| (a.to_string(), m.to_string()))
        .collect();
    assert_eq!(got, want, "{}", event.kind());
    assert!(entry.is_balanced(), "{} balances", event.kind());
    assert!(entry.lines.iter().all(|l| l.currency == event.currency()));
    assert_eq!(entry.effective_date.to_string(), "2026-11-30");
    assert_eq!(entry.source_key, format!("s/{}/m_1", event.kind()));
}

#[test]
fn every_kind_posts_its_documented_entry() {
    check(
        event(
            Kind::ChargeSettled,
            "USD",
            json!({"gross": "100.00", "fee": "3.20", "net": "96.80"}),
        ),
        &[
            ("s:balance", "96.80"),
            ("fees:s", "3.20"),
            ("sales", "-100.00"),
        ],
    );
    check(
        event(
            Kind::RefundSettled,
            "USD",
            json!({"amount": "40.00", "fee": "0.50"}),
        ),
        &[
            ("refunds", "40.00"),
            ("fees:s", "0.50"),
            ("s:balance", "-40.50"),
        ],
    );
    check(
        event(
            Kind::Chargeback,
            "EUR",
            json!({"amount": "25.00", "fee": "15.00"}),
        ),
        &[
            ("disputes:s", "25.00"),
            ("fees:s", "15.00"),
            ("s:balance", "-40.00"),
        ],
    );
    check(
        event(Kind::ChargebackReversed, "EUR", json!({"amount": "25.00"})),
        &[("s:balance", "25.00"), ("disputes:s", "-25.00")],
    );
    check(
        event(Kind::Fee, "USD", json!({"amount": "1.99"})),
        &[("fees:s", "1.99"), ("s:balance", "-1.99")],
    );
    check(
        event(Kind::PayoutPaid, "USD", json!({"amount": "500.00"})),
        &[("bank", "500.00"), ("s:balance", "-500.00")],
    );
    check(
        event(Kind::PayoutFailed, "USD", json!({"amount": "500.00"})),
        &[("s:balance", "500.00"), ("bank", "-500.00")],
    );
    check(
        event(Kind::Adjustment, "USD", json!({"amount": "-2.50"})),
        &[("s:balance", "-2.50"), ("adjustments", "2.50")],
    );
}

#[test]
fn zero_and_three_decimal_currencies_post_exactly() {
    check(
        event(
            Kind::ChargeSettled,
            "JPY",
            json!({"gross": "1000", "fee": "36", "net": "964"}),
        ),
        &[("s:balance", "964"), ("fees:s", "36"), ("sales", "-1000")],
    );
    check(
        event(
            Kind::ChargeSettled,
            "KWD",
            json!({"gross": "10.125", "fee": "0.301", "net": "9.824"}),
        ),
        &[
            ("s:balance", "9.824"),
            ("fees:s", "0.301"),
            ("sales", "-10.125"),
        ],
    );
    check(
        event(
            Kind::RefundSettled,
            "KWD",
            json!({"amount": "1.001", "fee": "0.002"}),
        ),
        &[
            ("refunds", "1.001"),
            ("fees:s", "0.002"),
            ("s:balance", "-1.003"),
        ],
    );
}

#[test]
fn a_zero_fee_has_no_line() {
    check(
        event(
            Kind::ChargeSettled,
            "USD",
            json!({"gross": "10.00", "fee": "0.00", "net": "10.00"}),
        ),
        &[("s:balance", "10.00"), ("sales", "-10.00")],
    );
}

#[test]
fn configured_accounts_replace_the_defaults() {
    let source = SourceName::parse("cards").expect("source");
    let overrides = AccountOverrides {
        balance: Some("assets:cards".into()),
        sales: Some("income:sales".into()),
        ..AccountOverrides::default()
    };
    let accounts = Accounts::with_overrides(&source, &overrides);
    assert_eq!(accounts.fees, "fees:cards");
    let event = event(
        Kind::ChargeSettled,
        "USD",
        json!({"gross": "1.00", "fee": "0.10", "net": "0.90"}),
    );
    let entry = draft(&source, &event, &accounts);
    let accounts: Vec<&str> = entry.lines.iter().map(|l| l.account.as_str()).collect();
    assert_eq!(accounts, ["assets:cards", "fees:cards", "income:sales"]);
}

#[test]
fn a_reversal_negates_every_line() {
    let source = SourceName::parse("s").expect("source");
    let paid = draft(
        &source,
        &event(Kind::PayoutPaid, "USD", json!({"amount": "5.00"})),
        &Accounts::defaults(&source),
    );
    let reversed = reversal_lines(&paid.lines);
    assert_eq!(reversed[0].amount.to_string(), "-5.00");
    assert_eq!(reversed[1].amount.to_string(), "5.00");
    let both: Vec<Line> = paid.lines.iter().cloned().chain(reversed).collect();
    let sum: Decimal = both.iter().map(|l| l.amount).sum();
    assert!(sum.is_zero());
}

#[test]
fn unbalanced_drafts_are_detected() {
    let usd = Currency::parse("USD").expect("USD");
    let line = |amount: i64| Line {
        account: "a".into(),
        currency: usd,
        amount: Decimal::from(amount),
    };
    let entry = |lines| EntryDraft {
        source_key: "k".into(),
        effective_date: NaiveDate::default(),
        description: String::new(),
        lines,
    };
    assert!(entry(vec![line(1), line(-1)]).is_balanced());
    assert!(!entry(vec![line(1), line(-2)]).is_balanced());
    assert!(!entry(vec![line(0)]).is_balanced());
}

fn usd(account: &str, amount: &str) -> Line {
    Line {
        account: account.into(),
        currency: Currency::parse("USD").expect("USD"),
        amount: amount.parse().expect("amount"),
    }
}

#[test]
fn a_payout_failure_reverses_its_payout_line_for_line_or_is_refused() {
    let paid = [usd("bank", "96.80"), usd("std:balance", "-96.80")];
    let failure = |amount: &str| EntryDraft {
        source_key: "std/payout_failed/po_1".into(),
        effective_date: NaiveDate::from_ymd_opt(2026, 12, 1).expect("date"),
        description: "payout_failed po_1".into(),
        lines: vec![
            usd("std:balance", amount),
            usd("bank", &format!("-{amount}")),
        ],
    };
    let usd_code = Currency::parse("USD").expect("USD");
    let reversal = reverse_payout("po_1", &paid, &failure("96.80"), usd_code).expect("reversal");
    assert_eq!(
        reversal,
        vec![usd("bank", "-96.80"), usd("std:balance", "96.80")]
    );
    match reverse_payout("po_1", &paid, &failure("90.00"), usd_code) {
        Err(PostError::ReversalMismatch { payout_id, detail }) => {
            assert_eq!(payout_id, "po_1");
            assert_eq!(detail, "the failure is for USD 90.00");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_same_facts_replay_and_different_ones_conflict() {
    assert!(replay_or_conflict("ab", "ab", "std/charge_settled/ch_1").is_ok());
    assert!(matches!(
        replay_or_conflict("ab", "cd", "std/charge_settled/ch_1"),
        Err(PostError::SourceReplayConflict { source_key }) if source_key == "std/charge_settled/ch_1"
    ));
}
