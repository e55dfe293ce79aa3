//! Finance: the journal paged and filtered, balances, payout reconciliation, and exports that
//! hledger and beancount themselves check.

use std::collections::{BTreeMap, HashSet};

use ledger::finance::BalanceQuery;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tests::TestApp;
use tests::app::{AppOptions, Backend, FINANCE_TOKEN, canonical, config_toml, spawn, spawn_app};
use tests::process::{Scratch, run_settle};

const CURRENCIES: [(&str, u32); 4] = [("USD", 2), ("EUR", 2), ("JPY", 0), ("KWD", 3)];

/// One generated event: its webhook id, kind, day of November, payout and signed amounts in
/// minor units (gross, fee, net for charges; amount, fee otherwise).
#[derive(Clone, Debug)]
struct Generated {
    id: String,
    kind: &'static str,
    day: u32,
    currency: &'static str,
    exponent: u32,
    payout: Option<String>,
    amounts: Vec<(&'static str, i64)>,
}

impl Generated {
    fn major(&self, minor: i64) -> Decimal {
        Decimal::new(minor, self.exponent)
    }

    fn body(&self) -> String {
        let mut data = json!({"movement_id": format!("mv_{}", self.id), "currency": self.currency,
                              "occurred_at": format!("2026-11-{:02}T10:00:00Z", self.day)});
        for (field, minor) in &self.amounts {
            data[*field] = json!(self.major(*minor).to_string());
        }
        if let Some(payout) = &self.payout {
            data["payout_id"] = json!(payout);
        }
        if self.kind.starts_with("payout") {
            data["movement_id"] = json!(self.payout.clone());
        }
        canonical(self.kind, data)
    }

    /// `(account, signed amount)` as README.md, From event to journal entry, posts it, written here independently of settle.
    fn lines(&self) -> Vec<(String, Decimal)> {
        let a = |field: &str| {
            self.major(
                self.amounts
                    .iter()
                    .find(|(f, _)| *f == field)
                    .map(|(_, m)| *m)
                    .unwrap_or(0),
            )
        };
        let lines = match self.kind {
            "charge_settled" => vec![
                ("std:balance", a("net")),
                ("fees:std", a("fee")),
                ("sales", -a("gross")),
            ],
            "refund_settled" => vec![
                ("refunds", a("amount")),
                ("fees:std", a("fee")),
                ("std:balance", -(a("amount") + a("fee"))),
            ],
            "fee" => vec![("fees:std", a("amount")), ("std:balance", -a("amount"))],
            "adjustment" => vec![("std:balance", a("amount")), ("adjustments", -a("amount"))],
            "payout_paid" => vec![("bank", a("amount")), ("std:balance", -a("amount"))],
            "payout_failed" => vec![("bank", -a("amount")), ("std:balance", a("amount"))],
            other => panic!("unexpected {other}"),
        };
        lines
            .into_iter()
            .filter(|(_, amount)| !amount.is_zero())
            .map(|(acc, amount)| (acc.to_owned(), amount))
            .collect()
    }

    /// What the event does to the provider balance (for payout sums).
    fn balance_effect(&self) -> Decimal {
        self.lines()
            .into_iter()
            .filter(|(account, _)| account == "std:balance")
            .map(|(_, a)| a)
            .sum()
    }
}

/// The generated run: per currency, charges over six days tied to two payouts, a refund, a
/// fee, an adjustment, both payouts, and (EUR) a failed payout. One USD item of payout B is
/// never delivered, so that payout does not reconcile.
fn generate() -> (Vec<Generated>, Option<Generated>) {
    let mut events = Vec::new();
    let mut withheld = None;
    for (currency, exponent) in CURRENCIES {
        let mut items = Vec::new();
        let new = |id: String, kind, day, payout: Option<&str>, amounts| Generated {
            id,
            kind,
            day,
            currency,
            exponent,
            payout: payout.map(str::to_owned),
            amounts,
        };
        for day in 1..=6u32 {
            let gross = 1_000 + 37 * i64::from(day);
            let fee = gross * 3 / 100;
            let payout = if day <= 3 {
                format!("po_{currency}_A")
            } else {
                format!("po_{currency}_B")
            };
            items.push(new(
                format!("{currency}_ch{day}"),
                "charge_settled",
                day,
                Some(&payout),
                vec![("gross", gross), ("fee", fee), ("net", gross - fee)],
            ));
        }
        let payout_b = format!("po_{currency}_B");
        items.push(new(
            format!("{currency}_re"),
            "refund_settled",
            4,
            Some(&payout_b),
            vec![("amount", 200), ("fee", 0)],
        ));
        items.push(new(
            format!("{currency}_fee"),
            "fee",
            5,
            Some(&payout_b),
            vec![("amount", 50)],
        ));
        let adjustment = new(
            format!("{currency}_adj"),
            "adjustment",
            6,
            None,
            vec![("amount", -30)],
        );
        for label in ["A", "B"] {
            let payout_id = format!("po_{currency}_{label}");
            let total: Decimal = items
                .iter()
                .filter(|i| i.payout.as_deref() == Some(payout_id.as_str()))
                .map(Generated::balance_effect)
                .sum();
            let minor = (total * Decimal::from(10i64.pow(exponent)))
                .trunc()
                .to_string()
                .parse::<i64>()
                .expect("minor");
            let day = if label == "A" { 7 } else { 8 };
            events.push(new(
                format!("{currency}_pay{label}"),
                "payout_paid",
                day,
                Some(&payout_id),
                vec![("amount", minor)],
            ));
            if currency == "EUR" && label == "A" {
                events.push(new(
                    format!("{currency}_fail{label}"),
                    "payout_failed",
                    9,
                    Some(&payout_id),
                    vec![("amount", minor)],
                ));
            }
        }
        if currency == "USD" {
            withheld = Some(items.remove(4));
        }
        events.extend(items);
        events.push(adjustment);
    }
    (events, withheld)
}

async fn deliver(app: &TestApp, events: &[Generated]) {
    for event in events {
        let response = app.post_standard(&event.id, &event.body()).await;
        assert_eq!(response.status().as_u16(), 200, "{}", event.id);
    }
    app.wait_settled(60).await;
    let dead = app.count("dead_letters").await;
    assert_eq!(dead, 0, "every generated event posts");
}

/// Expected balances as of `day` (inclusive), computed from the generated events alone.
fn expected_balances(events: &[Generated], day: u32) -> BTreeMap<(String, String), Decimal> {
    let mut totals: BTreeMap<(String, String), Decimal> = BTreeMap::new();
    for event in events.iter().filter(|e| e.day <= day) {
        for (account, amount) in event.lines() {
            *totals
                .entry((account, event.currency.to_owned()))
                .or_default() += amount;
        }
    }
    totals.retain(|_, total| !total.is_zero());
    totals
}

fn balances_of(json: &Value) -> BTreeMap<(String, String), Decimal> {
    json.as_array()
        .expect("balances")
        .iter()
        .map(|row| {
            let key = (
                row["account"].as_str().expect("account").to_owned(),
                row["currency"].as_str().expect("currency").to_owned(),
            );
            (
                key,
                row["balance"]
                    .as_str()
                    .expect("balance")
                    .parse()
                    .expect("decimal"),
            )
        })
        .collect()
}

tests::on_both_backends!(
    balances_read_from_the_days_kept_equal_the_journals_lines,
    verify_names_each_entry_that_does_not_balance,
    the_payouts_listing_keeps_each_summary_until_its_payout_changes,
    balances_as_recorded_at_any_moment_count_the_lines_recorded_by_then
);

/// The payouts listing keeps each payout's summary as computed, beside the counts of the rows it
/// was computed from: listed again, the kept summary answers; once an item arrives or the payout
/// fails, the payout's summary is computed again. Every summary listed equals its payout's own
/// reconciliation.
async fn the_payouts_listing_keeps_each_summary_until_its_payout_changes(backend: Backend) {
    use ledger::finance::ReconciliationStatus as Status;
    let app = spawn(AppOptions::on(backend)).await;
    let (events, withheld) = generate();
    deliver(&app, &events).await;
    let listed = || {
        let store = app.store.clone();
        async move {
            store
                .payouts(None, 100)
                .await
                .expect("payouts")
                .into_iter()
                .map(|p| (p.payout_id.clone(), p))
                .collect::<BTreeMap<_, _>>()
        }
    };
    let reconciled = |payout_id: String| {
        let store = app.store.clone();
        async move {
            ledger::finance::PayoutSummary::from(
                &store
                    .reconciliation(&payout_id)
                    .await
                    .expect("reconciliation")
                    .expect("a payout"),
            )
        }
    };
    let first = listed().await;
    assert_eq!(first.len(), 8);
    for (payout_id, summary) in &first {
        assert_eq!(summary, &reconciled(payout_id.clone()).await);
    }
    assert_eq!(app.count("payout_summaries").await, 8, "each summary kept");
    assert_eq!(listed().await, first, "listed again, the same");
    // The listing answers from what it kept while the payout's rows are as they were (a kept
    // summary altered here shows through) ...
    app.exec(
        "UPDATE payout_summaries SET summary = replace(summary, '\"matched\"', '\"unmatched\"')
         WHERE payout_id = 'po_KWD_A'",
    )
    .await
    .expect("altered");
    assert_eq!(listed().await["po_KWD_A"].status, Status::Unmatched);
    // `settle verify` names a kept summary that differs from its payout's reconciliation.
    let checks = app.store.verify().await.expect("verify");
    let check = checks
        .iter()
        .find(|c| c.name == "payout_summaries_equal_their_reconciliation")
        .expect("the check");
    assert_eq!(check.violations, 1);
    assert!(check.samples[0].contains("po_KWD_A"), "{:?}", check.samples);
    // ... and computes a payout again once an entry carrying its id arrives, or its payout fails.
    let withheld = withheld.expect("one USD item is withheld");
    assert_eq!(first["po_USD_B"].status, Status::Unmatched);
    let paid_b = events
        .iter()
        .find(|e| e.id == "EUR_payB")
        .expect("EUR payout B");
    let failed_b = Generated {
        id: "EUR_failB".into(),
        kind: "payout_failed",
        day: 9,
        ..paid_b.clone()
    };
    deliver(&app, &[withheld, failed_b]).await;
    let after = listed().await;
    assert_eq!(after["po_USD_B"].status, Status::Matched);
    assert_eq!(after["po_EUR_B"].status, Status::Reversed);
    for (payout_id, summary) in &after {
        if payout_id != "po_KWD_A" {
            assert_eq!(summary, &reconciled(payout_id.clone()).await, "{payout_id}");
        }
    }
    // A summary kept by another version of the reconciliation is computed again.
    app.exec("UPDATE payout_summaries SET version = version + 1 WHERE payout_id = 'po_KWD_A'")
        .await
        .expect("an older version");
    assert_eq!(listed().await["po_KWD_A"].status, Status::Matched);
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// Balances are read from the balances kept by day, which the journal's own insert writes (as
/// recorded at a moment: less the entries recorded after it): equal, date by date, to the
/// independent sums, before and after a late entry, as posted and once the days are folded
/// (which leaves a row per account, currency and day); `settle verify` names a day whose kept
/// balance is off.
async fn balances_read_from_the_days_kept_equal_the_journals_lines(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let (mut events, _) = generate();
    deliver(&app, &events).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let before_late = chrono::Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let late = Generated {
        id: "late_fee".into(),
        kind: "fee",
        day: 2,
        currency: "USD",
        exponent: 2,
        payout: None,
        amounts: vec![("amount", 999)],
    };
    deliver(&app, std::slice::from_ref(&late)).await;
    let read = |as_of: Option<chrono::NaiveDate>, recorded_at| {
        let store = app.store.clone();
        async move {
            store
                .balances(BalanceQuery { as_of, recorded_at })
                .await
                .expect("balances")
                .into_iter()
                .map(|row| {
                    let balance: Decimal = row.balance.parse().expect("decimal");
                    ((row.account, row.currency), balance)
                })
                .collect::<BTreeMap<_, _>>()
        }
    };
    let without_late = events.clone();
    events.push(late);
    let check = |when: &'static str| {
        let (events, without_late, read) = (&events, &without_late, &read);
        async move {
            for day in [1, 2, 3, 6, 8, 30] {
                let date = chrono::NaiveDate::from_ymd_opt(2026, 11, day).expect("date");
                let now = read(Some(date), None).await;
                assert_eq!(
                    now,
                    expected_balances(events, day),
                    "{when}: as of day {day}"
                );
                let then = read(Some(date), Some(before_late)).await;
                let expected = expected_balances(without_late, day);
                assert_eq!(
                    then, expected,
                    "{when}: as of day {day}, recorded before the late fee"
                );
            }
            assert_eq!(
                read(None, None).await,
                expected_balances(events, 30),
                "{when}"
            );
        }
    };
    check("as posted").await;
    app.store.compact_balances().await.expect("fold");
    check("folded").await;
    let rows = app.scalar("SELECT count(*) FROM balance_deltas").await;
    let days = app
        .scalar(
            "SELECT count(*) FROM (SELECT DISTINCT account, currency, effective_date
                                   FROM balance_deltas) AS days",
        )
        .await;
    assert_eq!(
        rows, days,
        "a row per account, currency and day once folded"
    );
    assert!(app.failed_invariants().await.is_empty());

    let amount = match backend {
        Backend::Postgres => "amount = amount + 0.01",
        Backend::Sqlite => "amount_minor = amount_minor + 1",
    };
    let day = "account || ' ' || currency || ' on ' || effective_date";
    let changed = app
        .texts(&format!(
            "SELECT {day} FROM balance_deltas ORDER BY 1 LIMIT 1"
        ))
        .await
        .remove(0);
    app.exec(&format!(
        "UPDATE balance_deltas SET {amount} WHERE {day} = '{changed}'"
    ))
    .await
    .expect("a kept balance changed behind the journal's back");
    let failed = app.failed_invariants().await;
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("balances_kept_equal_the_journal") && f.contains(&changed)),
        "{changed}: {failed:?}"
    );
}

/// Balances as recorded at a moment count exactly the lines recorded by then: entries written
/// with their recording times spread over five hours (several in an hour, one on the hour), read
/// at each entry's time, a microsecond either side of it and of each hour's start, as of each
/// effective date and none, equal the sums of the entries recorded by then, as written and once
/// the hours are folded (a row per account, currency, day and hour); `settle verify` names an
/// hour whose kept balance is off.
async fn balances_as_recorded_at_any_moment_count_the_lines_recorded_by_then(backend: Backend) {
    use chrono::{DateTime, Duration, NaiveDate, SecondsFormat, Utc};
    let app = spawn(AppOptions::on(backend)).await;
    let fee = json!({"movement_id": "mv_fee", "currency": "USD",
                     "occurred_at": "2026-11-30T10:00:00Z", "amount": "1.00"});
    let event = app.post_standard("evt_1", &canonical("fee", fee)).await;
    assert_eq!(event.status().as_u16(), 200);
    app.wait_settled(30).await;
    // Five whole hours before the current one, so every planted time is in the past.
    let now = Utc::now();
    let base = DateTime::from_timestamp(now.timestamp() / 3_600 * 3_600, 0).expect("hour")
        - Duration::hours(5);
    let days: Vec<NaiveDate> = (1..=3)
        .map(|d| NaiveDate::from_ymd_opt(2026, 11, d).expect("date"))
        .collect();
    // (seconds after the base, effective day, currency, amount in cents) of each entry.
    let planted: Vec<(i64, usize, &str, i64)> = [
        (300, 0, "USD", 101),
        (1_800, 1, "USD", 202),
        (1_800, 1, "EUR", 404),
        (3_599, 2, "USD", 808),
        (3_600, 0, "USD", 1_616),
        (3_601, 0, "EUR", 3_232),
        (7_500, 2, "EUR", 6_464),
        (10_800, 1, "USD", 12_928),
        (14_340, 0, "USD", 25_856),
        (14_400, 2, "USD", 51_712),
        (15_000, 1, "EUR", 103_424),
        (17_999, 0, "USD", 206_848),
    ]
    .to_vec();
    let at = |seconds: i64| base + Duration::seconds(seconds);
    let stamp = |time: DateTime<Utc>| match backend {
        // As the SQLite store binds a time.
        Backend::Sqlite => time.to_rfc3339_opts(SecondsFormat::AutoSi, false),
        Backend::Postgres => time.to_rfc3339(),
    };
    for (i, (seconds, day, currency, cents)) in planted.iter().enumerate() {
        let (recorded, day) = (stamp(at(*seconds)), days[*day]);
        let entry = format!(
            "INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id,
                 request_fingerprint, effective_date, description, recorded_at, details)
             SELECT 'planted/{i}', min(id), 'std', 'fee', 'planted_{i}', '{}', '{day}', 'planted',
                 '{recorded}', '{{}}' FROM settlement_events",
            "0".repeat(64)
        );
        let sql = match backend {
            Backend::Postgres => format!(
                "WITH entry AS ({entry} RETURNING id)
                 INSERT INTO journal_lines (entry_id, line_no, account, currency, amount)
                 SELECT id, n, account, '{currency}', amount FROM entry,
                     (VALUES (1, 'planted:a', {cents} / 100.0), (2, 'planted:b', -{cents} / 100.0))
                     AS line(n, account, amount)"
            ),
            Backend::Sqlite => {
                let id = app.scalar("SELECT max(id) + 1 FROM journal_entries").await;
                let major = Decimal::new(*cents, 2);
                format!(
                    "BEGIN;
                     INSERT INTO journal_lines (entry_id, line_no, account, currency, amount, amount_minor)
                     VALUES ({id}, 1, 'planted:a', '{currency}', '{major}', {cents}),
                            ({id}, 2, 'planted:b', '{currency}', '-{major}', -{cents});
                     {};
                     COMMIT;",
                    entry.replacen("(source_key", "(id, source_key", 1)
                        .replacen("SELECT 'planted", &format!("SELECT {id}, 'planted"), 1)
                )
            }
        };
        app.exec(&sql).await.expect("a planted entry");
    }
    let expected = |recorded_at: DateTime<Utc>, as_of: Option<NaiveDate>| {
        let mut sums = BTreeMap::new();
        for (seconds, day, currency, cents) in &planted {
            if at(*seconds) <= recorded_at && as_of.is_none_or(|d| days[*day] <= d) {
                let amount = Decimal::new(*cents, 2);
                *sums
                    .entry(("planted:a".to_owned(), currency.to_string()))
                    .or_default() += amount;
                *sums
                    .entry(("planted:b".to_owned(), currency.to_string()))
                    .or_default() -= amount;
            }
        }
        sums.retain(|_, sum: &mut Decimal| !sum.is_zero());
        sums
    };
    let mut moments: Vec<DateTime<Utc>> = vec![base - Duration::hours(1), now];
    for seconds in planted
        .iter()
        .map(|p| p.0)
        .chain((0..=5).map(|h| h * 3_600))
    {
        for micros in [-1, 0, 1] {
            moments.push(at(seconds) + Duration::microseconds(micros));
        }
    }
    let check = |when: &'static str| {
        let (app, moments, days, expected) = (&app, &moments, &days, &expected);
        async move {
            for &moment in moments {
                for as_of in days.iter().copied().map(Some).chain([None]) {
                    let read: BTreeMap<(String, String), Decimal> = app
                        .store
                        .balances(BalanceQuery {
                            as_of,
                            recorded_at: Some(moment),
                        })
                        .await
                        .expect("balances")
                        .into_iter()
                        .filter(|row| row.account.starts_with("planted:"))
                        .map(|row| {
                            let balance: Decimal = row.balance.parse().expect("decimal");
                            ((row.account, row.currency), balance)
                        })
                        .collect();
                    assert_eq!(
                        read,
                        expected(moment, as_of),
                        "{when}: as recorded at {moment}, as of {as_of:?}"
                    );
                }
            }
        }
    };
    check("as written").await;
    app.store.compact_balances().await.expect("fold");
    check("folded").await;
    let rows = app
        .scalar("SELECT count(*) FROM recorded_balance_deltas")
        .await;
    let hours = app
        .scalar(
            "SELECT count(*) FROM (SELECT DISTINCT recorded_hour, account, currency, effective_date
                                   FROM recorded_balance_deltas) AS hours",
        )
        .await;
    assert_eq!(
        rows, hours,
        "a row per account, currency, day and hour once folded"
    );
    assert!(app.failed_invariants().await.is_empty());

    // One row of the day's hours changed (a row is named by its system column).
    let (amount, row) = match backend {
        Backend::Postgres => ("amount = amount + 0.01", "ctid"),
        Backend::Sqlite => ("amount_minor = amount_minor + 1", "rowid"),
    };
    let hour = "account || ' ' || currency || ' on ' || effective_date";
    let changed = app
        .texts(&format!(
            "SELECT {hour} FROM recorded_balance_deltas WHERE account = 'planted:a' ORDER BY 1 LIMIT 1"
        ))
        .await
        .remove(0);
    app.exec(&format!(
        "UPDATE recorded_balance_deltas SET {amount}
         WHERE {row} IN (SELECT {row} FROM recorded_balance_deltas WHERE {hour} = '{changed}' LIMIT 1)"
    ))
    .await
    .expect("a kept balance changed behind the journal's back");
    let failed = app.failed_invariants().await;
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("balances_kept_equal_the_journal")
                && f.contains(&format!("{changed} recorded in hour"))),
        "{changed}: {failed:?}"
    );
}

#[tokio::test]
async fn balances_as_of_several_dates_match_independent_sums_and_reconciliation_flags_a_missing_item()
 {
    let app = spawn_app().await;
    let (events, withheld) = generate();
    deliver(&app, &events).await;

    for day in [1, 3, 6, 8, 30] {
        let (status, body) = app
            .api_get(
                &format!("/api/balances?as_of=2026-11-{day:02}"),
                Some(FINANCE_TOKEN),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(
            balances_of(&body["balances"]),
            expected_balances(&events, day),
            "as of day {day}"
        );
    }
    // Exact in every currency, including 0 and 3 decimals.
    let (_, body) = app.api_get("/api/balances", Some(FINANCE_TOKEN)).await;
    let text = body.to_string();
    assert!(text.contains("\"currency\":\"JPY\"") && !text.contains("JPY\",\"balance\":\"-0"));
    let kwd_sales = body["balances"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["account"] == "sales" && r["currency"] == "KWD")
        .expect("KWD sales");
    assert_eq!(
        kwd_sales["balance"]
            .as_str()
            .map(|b| b.split('.').nth(1).map(str::len)),
        Some(Some(3))
    );

    // "As recorded at" reproduces a report after more entries arrive.
    let before = app.api_get("/api/balances", Some(FINANCE_TOKEN)).await.1["balances"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let stamp = chrono::Utc::now().to_rfc3339();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let late = canonical(
        "fee",
        json!({"movement_id": "late", "occurred_at": "2026-11-02T00:00:00Z", "currency": "USD", "amount": "9.99"}),
    );
    app.post_standard("late_fee", &late).await;
    app.wait_settled(30).await;
    let (_, reproduced) = app
        .api_get(
            &format!("/api/balances?recorded_at={}", urlencode(&stamp)),
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(reproduced["balances"], before);
    let (_, now) = app.api_get("/api/balances", Some(FINANCE_TOKEN)).await;
    assert_ne!(now["balances"], before);

    let (status, matched) = app
        .api_get("/api/payouts/po_JPY_B/reconciliation", Some(FINANCE_TOKEN))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (matched["status"].as_str(), matched["difference"].as_str()),
        (Some("matched"), Some("0"))
    );
    assert_eq!(matched["items"].as_array().map(Vec::len), Some(5));
    let (_, missing) = app
        .api_get("/api/payouts/po_USD_B/reconciliation", Some(FINANCE_TOKEN))
        .await;
    let withheld_event = withheld.expect("one USD item is withheld");
    assert_eq!(missing["status"], "unmatched");
    assert_eq!(
        missing["difference"]
            .as_str()
            .map(|d| d.parse::<Decimal>().expect("decimal")),
        Some(withheld_event.balance_effect())
    );
    let (_, reversed) = app
        .api_get("/api/payouts/po_EUR_A/reconciliation", Some(FINANCE_TOKEN))
        .await;
    assert_eq!(reversed["status"], "reversed");
    assert_eq!(
        app.api_get("/api/payouts/po_nope/reconciliation", Some(FINANCE_TOKEN))
            .await
            .0,
        404
    );
    let (_, payouts) = app
        .api_get("/api/payouts?limit=100", Some(FINANCE_TOKEN))
        .await;
    let statuses: BTreeMap<String, String> = payouts["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| {
            (
                p["payout_id"].as_str().unwrap_or_default().to_owned(),
                p["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(statuses.len(), 8);
    assert_eq!(statuses["po_USD_B"], "unmatched");
    assert_eq!(statuses["po_KWD_A"], "matched");
}

fn urlencode(text: &str) -> String {
    text.replace('+', "%2B").replace(':', "%3A")
}

#[tokio::test]
async fn paging_returns_every_entry_exactly_once_while_entries_are_written() {
    let app = spawn_app().await;
    let (events, _) = generate();
    deliver(&app, &events).await;
    let existing: HashSet<i64> = sqlx::query_scalar("SELECT id FROM journal_entries")
        .fetch_all(app.pg())
        .await
        .expect("ids")
        .into_iter()
        .collect();

    // Writers keep posting entries (some dated inside the range being paged) while we page.
    let writer = {
        let http = app.http.clone();
        let url = app.url("/webhooks/std");
        tokio::spawn(async move {
            for i in 0..40 {
                let body = canonical(
                    "fee",
                    json!({"movement_id": format!("w{i}"), "currency": "USD", "amount": "0.01",
                                                   "occurred_at": format!("2026-11-{:02}T12:00:00Z", 1 + i % 9)}),
                );
                let headers = tests::sign::standard_headers(
                    tests::app::STANDARD_SECRET,
                    &format!("w{i}"),
                    tests::sign::now(),
                    body.as_bytes(),
                );
                let mut request = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body);
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                let _ = request.send().await;
            }
        })
    };
    let mut seen: Vec<i64> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/journal?limit=7&cursor={c}"),
            None => "/api/journal?limit=7".to_owned(),
        };
        let (status, page) = app.api_get(&path, Some(FINANCE_TOKEN)).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["items"]
                .as_array()
                .expect("items")
                .iter()
                .filter_map(|e| e["id"].as_i64()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    writer.await.expect("writer");
    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no entry twice");
    assert!(
        existing.is_subset(&unique),
        "every entry that existed when paging began was returned"
    );

    // Filters.
    let (_, jpy) = app
        .api_get("/api/journal?currency=JPY&limit=500", Some(FINANCE_TOKEN))
        .await;
    let jpy_items = jpy["items"].as_array().expect("items");
    assert!(!jpy_items.is_empty() && jpy_items.iter().all(|e| e["lines"][0]["currency"] == "JPY"));
    let (_, fees) = app
        .api_get(
            "/api/journal?account=fees:std&from=2026-11-04&to=2026-11-05&limit=500",
            Some(FINANCE_TOKEN),
        )
        .await;
    for entry in fees["items"].as_array().expect("items") {
        assert!(
            entry["lines"]
                .as_array()
                .expect("lines")
                .iter()
                .any(|l| l["account"] == "fees:std")
        );
        let date = entry["effective_date"].as_str().expect("date");
        assert!(("2026-11-04"..="2026-11-05").contains(&date), "{date}");
    }
    let (_, payout) = app
        .api_get(
            "/api/journal?payout_id=po_KWD_A&kind=charge_settled",
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(payout["items"].as_array().map(Vec::len), Some(3));
    let (_, reversals) = app
        .api_get("/api/journal?kind=payout_failed", Some(FINANCE_TOKEN))
        .await;
    let reversal = &reversals["items"][0];
    assert!(reversal["reverses_entry_id"].as_i64().is_some());
    let (_, paid) = app
        .api_get(
            "/api/journal?kind=payout_paid&payout_id=po_EUR_A",
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(paid["items"][0]["reversed_by_entry_id"], reversal["id"]);
}

#[tokio::test]
async fn the_csv_export_round_trips_and_sums_to_zero_per_entry() {
    let app = spawn_app().await;
    let (events, _) = generate();
    deliver(&app, &events).await;
    let response = app
        .http
        .get(app.url("/api/journal.csv"))
        .bearer_auth(FINANCE_TOKEN)
        .send()
        .await
        .expect("csv");
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/csv")
    );
    let text = response.text().await.expect("body");
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().expect("headers").clone();
    assert_eq!(
        headers.iter().collect::<Vec<_>>(),
        [
            "entry_id",
            "line_no",
            "effective_date",
            "recorded_at",
            "account",
            "currency",
            "debit",
            "credit",
            "source",
            "kind",
            "movement_id",
            "payout_id",
            "reverses_entry_id",
            "description"
        ]
    );
    let mut per_entry: BTreeMap<(i64, String), Decimal> = BTreeMap::new();
    let mut per_account: BTreeMap<(String, String), Decimal> = BTreeMap::new();
    let mut read_back: Vec<(i64, i32, String, String, Decimal, String, String)> = Vec::new();
    for record in reader.records() {
        let record = record.expect("record");
        let line = |i: usize| record[i].to_owned();
        let debit_or_credit = |i: usize| -> Decimal { record[i].parse().unwrap_or(Decimal::ZERO) };
        read_back.push((
            record[0].parse().expect("entry id"),
            record[1].parse().expect("line no"),
            line(4),
            line(5),
            debit_or_credit(6) - debit_or_credit(7),
            line(9),
            line(10),
        ));
        let amount = |i: usize| -> Decimal {
            if record[i].is_empty() {
                Decimal::ZERO
            } else {
                record[i].parse().expect("exact decimal")
            }
        };
        let signed = amount(6) - amount(7);
        let currency = record[5].to_owned();
        if currency == "JPY" {
            assert!(
                !record[6].contains('.') && !record[7].contains('.'),
                "JPY has no decimals"
            );
        }
        *per_entry
            .entry((record[0].parse().expect("id"), currency.clone()))
            .or_default() += signed;
        *per_account
            .entry((record[4].to_owned(), currency))
            .or_default() += signed;
    }
    assert!(
        per_entry.values().all(Decimal::is_zero),
        "every entry sums to zero per currency"
    );
    let entries: HashSet<i64> = per_entry.keys().map(|(id, _)| *id).collect();
    assert_eq!(entries.len() as i64, app.count("journal_entries").await);
    per_account.retain(|_, total| !total.is_zero());
    assert_eq!(per_account, expected_balances(&events, 30));
    // Line for line, the CSV is the journal: same entries, lines, accounts, amounts, kinds.
    let stored: Vec<(i64, i32, String, String, Decimal, String, String)> = sqlx::query_as(
        "SELECT l.entry_id, l.line_no, l.account, l.currency, l.amount, e.kind, e.movement_id
         FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
         ORDER BY l.entry_id, l.line_no",
    )
    .fetch_all(app.pg())
    .await
    .expect("journal lines");
    read_back.sort_by_key(|line| (line.0, line.1));
    assert_eq!(read_back, stored);
}

#[tokio::test]
async fn hledger_and_beancount_accept_the_exports_and_agree_with_settle_and_reject_a_corrupted_one()
{
    let app = spawn_app().await;
    let (events, _) = generate();
    deliver(&app, &events).await;
    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &config_toml(&app.database_url(), &AppOptions::default()),
    );
    let url = &app.database_url();
    let hledger_file = scratch.dir.join("settle.journal");
    let beancount_file = scratch.dir.join("settle.beancount");
    for (format, file) in [("hledger", &hledger_file), ("beancount", &beancount_file)] {
        let path = file.to_str().expect("path");
        let (ok, out) = run_settle(&config, url, &["export", "--format", format, "-o", path]).await;
        assert!(ok, "{format}: {out}");
    }

    // The same reads from the command line.
    let (ok, out) = run_settle(&config, url, &["balances", "--json"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        balances_of(&serde_json::from_str(&out).expect("json")),
        expected_balances(&events, 30)
    );
    // An unmatched payout is printed, and the command exits non-zero (a script can tell);
    // a matched one exits 0.
    let (ok, out) = run_settle(&config, url, &["reconcile", "payout", "po_USD_B", "--json"]).await;
    assert!(!ok && out.contains("\"unmatched\""), "{out}");
    let (ok, out) = run_settle(&config, url, &["reconcile", "payout", "po_KWD_A", "--json"]).await;
    assert!(ok && out.contains("\"matched\""), "{out}");
    // As a table: each currency's payout, items and difference.
    let (ok, out) = run_settle(&config, url, &["reconcile", "payout", "po_USD_B"]).await;
    let row = out
        .lines()
        .find(|l| l.starts_with("USD"))
        .unwrap_or_default();
    assert!(
        !ok && out.contains("DIFFERENCE") && row.contains("Unmatched"),
        "{out}"
    );
    let (ok, out) = run_settle(&config, url, &["journal", "list", "--limit", "5", "--json"]).await;
    let page: Value = serde_json::from_str(&out).expect("json");
    assert!(
        ok && page["next_cursor"].is_string() && page["items"].as_array().map(Vec::len) == Some(5)
    );
    let (ok, out) = run_settle(&config, url, &["journal", "list", "--currency", "KWD"]).await;
    assert!(ok && out.contains("KWD") && out.contains("DEBIT"), "{out}");

    let hledger = |file: &std::path::Path, args: &[&str]| {
        std::process::Command::new("hledger")
            .arg("-f")
            .arg(file)
            .args(args)
            .output()
            .expect("hledger is installed (.ci/run)")
    };
    let check = hledger(&hledger_file, &["check"]);
    assert!(
        check.status.success(),
        "hledger check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let balances = hledger(&hledger_file, &["bal", "-N", "--flat", "-O", "csv"]);
    assert!(balances.status.success());
    let from_hledger = hledger_balances(&String::from_utf8_lossy(&balances.stdout));
    assert_eq!(
        from_hledger,
        expected_balances(&events, 30),
        "hledger's balances are settle's"
    );

    let bean_check = |file: &std::path::Path| {
        std::process::Command::new("bean-check")
            .arg(file)
            .output()
            .expect("bean-check is installed (.ci/run)")
    };
    let checked = bean_check(&beancount_file);
    assert!(
        checked.status.success(),
        "bean-check: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let beancount_sums = std::process::Command::new("python3")
        .arg("-c")
        .arg(BEANCOUNT_SUMS)
        .arg(&beancount_file)
        .output()
        .expect("python3");
    assert!(
        beancount_sums.status.success(),
        "{}",
        String::from_utf8_lossy(&beancount_sums.stderr)
    );
    let sums: BTreeMap<String, String> =
        serde_json::from_slice(&beancount_sums.stdout).expect("json");
    let expected_sales_usd =
        expected_balances(&events, 30)[&("sales".to_owned(), "USD".to_owned())];
    assert_eq!(
        sums["Income:Sales USD"]
            .parse::<Decimal>()
            .expect("decimal"),
        expected_sales_usd
    );
    assert_eq!(
        sums.len(),
        expected_balances(&events, 30).len(),
        "one beancount balance per settle balance"
    );

    // One amount changed: both tools refuse the file.
    for file in [&hledger_file, &beancount_file] {
        let text = std::fs::read_to_string(file).expect("read");
        let corrupted = text.replacen("10.37 USD", "10.38 USD", 1);
        assert_ne!(corrupted, text, "the corruption applies");
        let bad = scratch.write("corrupted", &corrupted);
        let refused = if file == &hledger_file {
            hledger(&bad, &["check"]).status.success()
        } else {
            bean_check(&bad).status.success()
        };
        assert!(!refused, "{} accepted a corrupted export", file.display());
    }
}

/// `hledger bal -O csv` rows `"account","1.00 USD, 2 JPY"` into (account, currency) -> amount.
fn hledger_balances(csv_text: &str) -> BTreeMap<(String, String), Decimal> {
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let mut totals = BTreeMap::new();
    for record in reader.records() {
        let record = record.expect("record");
        if record[0] == *"total" {
            continue;
        }
        for amount in record[1].split(", ") {
            let Some((value, currency)) = amount.trim().split_once(' ') else {
                continue;
            };
            let value: Decimal = value.replace(',', "").parse().expect("decimal");
            if !value.is_zero() {
                totals.insert((record[0].to_owned(), currency.to_owned()), value);
            }
        }
    }
    totals
}

/// Sums every posting per beancount account and currency, with beancount's own loader.
const BEANCOUNT_SUMS: &str = r#"
import json, sys, collections
from beancount import loader
from beancount.core import data
entries, errors, _ = loader.load_file(sys.argv[1])
assert not errors, errors
sums = collections.defaultdict(lambda: 0)
for entry in entries:
    if isinstance(entry, data.Transaction):
        for posting in entry.postings:
            sums[posting.account + " " + posting.units.currency] += posting.units.number
print(json.dumps({k: str(v) for k, v in sums.items() if v != 0}))
"#;

#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let app = spawn_app().await;
    let (status, document) = app.api_get("/api/openapi.json", None).await;
    assert_eq!(status, 200, "no token needed");
    let paths = document["paths"].as_object().expect("paths");
    let mut operations = 0;
    for (path, item) in paths {
        for method in ["get", "post"] {
            if item.get(method).is_none() {
                continue;
            }
            operations += 1;
            let concrete = path.replace("{id}", "1");
            let request = match method {
                "get" => app.http.get(app.url(&concrete)),
                _ => app
                    .http
                    .post(app.url(&concrete))
                    .json(&json!({"reason": "openapi probe", "dry_run": true})),
            };
            let response = request
                .bearer_auth(FINANCE_TOKEN)
                .send()
                .await
                .expect("sent");
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            assert_ne!(status, 405, "{method} {path} is documented but not routed");
            assert!(
                status != 404 || body.contains("not_found"),
                "{method} {path} is documented but not routed"
            );
            assert!(
                item[method]["responses"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty()),
                "{method} {path} documents its responses"
            );
        }
    }
    assert_eq!(operations, 29, "every API route is documented");
    assert!(document["components"]["securitySchemes"]["bearer"].is_object());
    // A route that does not exist is refused by the router, not by a handler.
    let response = app
        .http
        .get(app.url("/api/nope"))
        .bearer_auth(FINANCE_TOKEN)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 404);
}

/// `settle verify` names each entry with fewer than two lines, or whose lines do not balance in
/// one of its currencies (an entry in two currencies summed currency by currency, not as one
/// total), written past the database's own checks; an entry balanced in each of its two
/// currencies is not named.
async fn verify_names_each_entry_that_does_not_balance(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let fee = json!({"movement_id": "mv_fee", "currency": "USD",
                     "occurred_at": "2026-11-30T10:00:00Z", "amount": "1.00"});
    let event = app.post_standard("evt_1", &canonical("fee", fee)).await;
    assert_eq!(event.status().as_u16(), 200);
    app.wait_settled(30).await;
    let (amount, past_the_checks) = match backend {
        Backend::Postgres => ("amount", "SET session_replication_role = replica;"),
        Backend::Sqlite => ("amount_minor", "DROP TRIGGER journal_entries_balanced;"),
    };
    let (extra, overriding) = match backend {
        Backend::Postgres => ("", "OVERRIDING SYSTEM VALUE"),
        Backend::Sqlite => (", amount", ""),
    };
    // (movement, lines as (currency, minor units)), one entry each.
    let planted: [(&str, &[(&str, i64)]); 5] = [
        ("one_line", &[("USD", 100)]),
        ("off", &[("USD", 100), ("USD", -99)]),
        ("two_currencies_off", &[("USD", 100), ("EUR", -100)]),
        (
            "two_currencies_balanced",
            &[("USD", 100), ("USD", -100), ("EUR", 5), ("EUR", -5)],
        ),
        ("balanced", &[("USD", 100), ("USD", -100)]),
    ];
    let mut sql = format!("BEGIN; {past_the_checks}");
    let first = app.scalar("SELECT max(id) FROM journal_entries").await + 1;
    for (i, (movement, lines)) in planted.iter().enumerate() {
        let id = first + i as i64;
        for (n, (currency, minor)) in lines.iter().enumerate() {
            let value = match backend {
                Backend::Postgres => format!("{minor}"),
                Backend::Sqlite => format!("{minor}, '{minor}'"),
            };
            sql.push_str(&format!(
                "INSERT INTO journal_lines (entry_id, line_no, account, currency, {amount}{extra})
                 VALUES ({id}, {}, 'planted', '{currency}', {value});",
                n + 1
            ));
        }
        sql.push_str(&format!(
            "INSERT INTO journal_entries (id, source_key, event_id, source, kind, movement_id,
                 request_fingerprint, effective_date, description, recorded_at, details)
             {overriding} SELECT {id}, 'planted/{movement}', min(id), 'std', 'fee', '{movement}',
                 '{}', '2026-11-30', 'planted', '2026-11-30T00:00:00Z', '{{}}'
             FROM settlement_events;",
            "0".repeat(64)
        ));
    }
    sql.push_str("COMMIT;");
    app.exec(&sql).await.expect("planted past the checks");
    let checks = app.store.verify().await.expect("verify");
    let balanced = checks
        .iter()
        .find(|c| c.name == "entry_balanced")
        .expect("the check");
    let named: Vec<String> = (0..3).map(|i| format!("entry {}", first + i)).collect();
    assert_eq!(balanced.samples, named, "{balanced:?}");
    assert_eq!(balanced.violations, 3);
}
