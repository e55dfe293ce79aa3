//! `settle demo`: a realistic run on a fresh embedded database. It starts the whole system,
//! sends signed deliveries the way Stripe, Adyen and a Standard Webhooks sender would (normal
//! events, redeliveries, a reformatted redelivery, a conflicting one, a payout that fails after
//! being paid, an invalid event, an event whose job keeps failing), waits for the workers, and
//! shows what happened. It exits 0 only if the outcome is the one the scenario expects.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use jobs::finance::{BalanceQuery, JournalFilter};
use jobs::review::{DeadLetterFilter, DeadLetterState, PageRequest};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::table::{self, or_dash};
use crate::app::{App, Role};
use crate::config::Config;
use crate::sign;

/// What the scenario must end with.
const EXPECTED_RECORDED: usize = 11;
const EXPECTED_DUPLICATES: usize = 3;
const EXPECTED_CONFLICTS: usize = 1;
const EXPECTED_IGNORED: usize = 2;
const EXPECTED_POSTED: i64 = 9;
const EXPECTED_DEAD_LETTERS: usize = 2;

/// The deliveries' outcomes as their senders saw them.
#[derive(Debug, Default)]
struct Tally {
    recorded: usize,
    duplicates: usize,
    conflicts: usize,
    ignored: usize,
    other: Vec<String>,
}

impl Tally {
    fn count(&mut self, label: &str, status: u16, body: &str) {
        let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        match (status, json["status"].as_str(), json["error"].as_str()) {
            (200, Some("recorded"), _) => self.recorded += 1,
            (200, Some("duplicate"), _) => self.duplicates += 1,
            (200, Some("ignored"), _) => self.ignored += 1,
            (409, _, Some("event_conflict")) => self.conflicts += 1,
            _ => self.other.push(format!("{label}: {status} {body}")),
        }
        let shown = json["status"]
            .as_str()
            .or(json["error"].as_str())
            .unwrap_or(body);
        println!("  {label:<52} {status} {shown}");
    }
}

struct Sender {
    http: reqwest::Client,
    base: String,
    standard_secret: String,
    stripe_secret: String,
    adyen_key: String,
}

impl Sender {
    async fn post(
        &self,
        path: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> anyhow::Result<(u16, String)> {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned());
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.send().await.context("delivery")?;
        Ok((
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        ))
    }

    async fn standard(&self, id: &str, body: &str) -> anyhow::Result<(u16, String)> {
        let headers =
            sign::standard_headers(&self.standard_secret, id, sign::now(), body.as_bytes());
        self.post("/webhooks/std", &headers, body).await
    }

    async fn stripe(&self, body: &str) -> anyhow::Result<(u16, String)> {
        let header = sign::stripe_header(&self.stripe_secret, sign::now(), body.as_bytes());
        self.post(
            "/webhooks/stripe",
            &[("stripe-signature".into(), header)],
            body,
        )
        .await
    }

    async fn adyen(&self, items: &[Value]) -> anyhow::Result<(u16, String)> {
        self.post(
            "/webhooks/adyen",
            &[],
            &sign::adyen_notification(&self.adyen_key, items),
        )
        .await
    }
}

fn random_bytes() -> Vec<u8> {
    [ulid::Ulid::generate(), ulid::Ulid::generate()]
        .iter()
        .flat_map(|u| u.to_bytes())
        .collect()
}

fn settlement(kind: &str, data: Value) -> String {
    json!({"type": format!("settlement.{kind}"), "timestamp": "2026-11-30T12:00:00Z", "data": data})
        .to_string()
}

fn stripe_event(id: &str, event_type: &str, object: Value, pending_webhooks: i64) -> String {
    json!({"id": id, "object": "event", "type": event_type, "created": 1_764_500_100,
           "pending_webhooks": pending_webhooks, "request": {"id": null}, "data": {"object": object}})
    .to_string()
}

pub async fn run(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let scratch = match &dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "settle-demo-{}",
            ulid::Ulid::generate().to_string().to_lowercase()
        )),
    };
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let database = scratch.join("demo.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.display()));
    }
    let standard_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(random_bytes())
    );
    let stripe_secret = format!("whsec_{}", hex::encode(random_bytes()));
    let adyen_key = hex::encode(random_bytes()).to_uppercase();
    let config = Config::from_toml(&format!(
        r#"
        listen = "127.0.0.1:0"
        database_url = "sqlite://{db}"
        [workers]
        attempts_max = 3
        backoff_base_ms = 200
        backoff_max_ms = 1000
        poll_interval_ms = 200
        [[sources]]
        name = "std"
        provider = "standard"
        secrets = ["{standard_secret}"]
        [[sources]]
        name = "stripe"
        provider = "stripe"
        secrets = ["{stripe_secret}"]
        [[sources]]
        name = "adyen"
        provider = "adyen"
        secrets = ["{adyen_key}"]
        "#,
        db = database.display()
    ))?;
    println!(
        "settle demo: a fresh embedded database at {}",
        database.display()
    );
    let app = App::build(&config, Role::Serve).await?;
    let store = app.store().clone();
    let base = format!("http://{}", app.local_addr()?);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    let sender = Sender {
        http: reqwest::Client::new(),
        base,
        standard_secret,
        stripe_secret,
        adyen_key,
    };

    let mut tally = Tally::default();
    send_scenario(&sender, &mut tally).await?;
    wait_for_workers(&store).await?;
    let outcome = report(&store, &tally).await;
    shutdown.cancel();
    running.await.context("settle stopped abnormally")??;
    outcome?;
    if dir.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(())
}

async fn send_scenario(s: &Sender, tally: &mut Tally) -> anyhow::Result<()> {
    println!("\nsending deliveries");
    let at = "2026-11-30T11:59:00Z";
    let charge = |movement: &str, currency: &str, gross: &str, fee: &str, net: &str| {
        settlement(
            "charge_settled",
            json!({"movement_id": movement, "occurred_at": at, "currency": currency,
            "gross": gross, "fee": fee, "net": net, "payout_id": "po_std_1", "reference": "order-42"}),
        )
    };
    let usd = charge("ch_usd_1", "USD", "100.00", "3.20", "96.80");
    let sent = [
        ("std: charge 100.00 USD", "evt_usd_1", usd.clone()),
        (
            "std: charge 1500 JPY",
            "evt_jpy_1",
            charge("ch_jpy_1", "JPY", "1500", "54", "1446"),
        ),
        (
            "std: charge 12.500 KWD",
            "evt_kwd_1",
            charge("ch_kwd_1", "KWD", "12.500", "0.375", "12.125"),
        ),
        (
            "std: redelivery of the USD charge",
            "evt_usd_1",
            usd.clone(),
        ),
        (
            "std: redelivery, reformatted (100.0 for 100.00)",
            "evt_usd_1",
            charge("ch_usd_1", "USD", "100.0", "3.2", "96.8"),
        ),
        (
            "std: same event id, amount changed (a conflict)",
            "evt_usd_1",
            charge("ch_usd_1", "USD", "100.50", "3.20", "97.30"),
        ),
        (
            "std: payout po_std_1 of 96.80 USD",
            "evt_po_1",
            settlement(
                "payout_paid",
                json!({"movement_id": "po_std_1",
            "occurred_at": "2026-12-01T09:00:00Z", "currency": "USD", "amount": "96.80", "payout_id": "po_std_1"}),
            ),
        ),
        (
            "std: invalid (net is not gross - fee)",
            "evt_bad_1",
            charge("ch_bad_1", "USD", "10.00", "1.00", "8.00"),
        ),
        (
            "std: failure of a payout never paid (keeps failing)",
            "evt_po_ghost",
            settlement(
                "payout_failed",
                json!({"movement_id": "po_ghost",
            "occurred_at": "2026-12-01T09:00:00Z", "currency": "USD", "amount": "5.00", "payout_id": "po_ghost"}),
            ),
        ),
        (
            "std: not about settlement (ignored)",
            "evt_inv_1",
            json!({"type": "invoice.paid", "data": {}}).to_string(),
        ),
    ];
    for (label, id, body) in &sent {
        let (status, body) = s.standard(id, body).await?;
        tally.count(label, status, &body);
    }
    let payout = |amount: i64| {
        json!({"id": "po_stripe_1", "object": "payout", "amount": amount, "currency": "usd",
                                      "arrival_date": 1_764_500_000, "created": 1_764_400_000})
    };
    let charge_object = json!({"id": "ch_stripe_1", "object": "charge", "amount": 2000, "currency": "usd", "created": 1_764_400_000,
        "balance_transaction": {"id": "txn_1", "object": "balance_transaction", "amount": 2000, "currency": "usd", "fee": 88, "net": 1912}});
    let stripe = [
        (
            "stripe: charge.succeeded 20.00 USD",
            stripe_event("evt_st_ch", "charge.succeeded", charge_object, 1),
        ),
        (
            "stripe: payout.paid 19.12 USD",
            stripe_event("evt_st_paid", "payout.paid", payout(1912), 1),
        ),
        (
            "stripe: payout.paid redelivered (pending_webhooks 2)",
            stripe_event("evt_st_paid", "payout.paid", payout(1912), 2),
        ),
        (
            "stripe: payout.failed (reverses the payout)",
            stripe_event("evt_st_failed", "payout.failed", payout(1912), 1),
        ),
        (
            "stripe: customer.created (ignored)",
            stripe_event("evt_st_cus", "customer.created", json!({"id": "cus_1"}), 1),
        ),
    ];
    for (label, body) in &stripe {
        let (status, body) = s.stripe(body).await?;
        tally.count(label, status, &body);
    }
    let items = [
        sign::adyen_item("CAPTURE", "psp_capture_1", 4200, "EUR", "true"),
        sign::adyen_item("REFUND", "psp_refund_1", 1000, "EUR", "true"),
        sign::adyen_item("AUTHORISATION", "psp_auth_1", 4200, "EUR", "true"),
    ];
    let (status, body) = s.adyen(&items).await?;
    println!(
        "  {:<52} {status} {body}",
        "adyen: batch of CAPTURE, REFUND, AUTHORISATION"
    );
    if (status, body.as_str()) == (200, "[accepted]") {
        tally.recorded += 2;
    } else {
        tally.other.push(format!("adyen: {status} {body}"));
    }
    Ok(())
}

async fn wait_for_workers(store: &jobs::Store) -> anyhow::Result<()> {
    print!("\nworkers posting");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open = store
            .dead_letters(
                &DeadLetterFilter {
                    state: Some(DeadLetterState::Open),
                    ..DeadLetterFilter::default()
                },
                PageRequest::new(None, Some(50)),
            )
            .await?
            .items
            .len();
        let posted = store
            .journal(&JournalFilter::default(), None, 500)
            .await?
            .items
            .len();
        print!(".");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if open == EXPECTED_DEAD_LETTERS && posted as i64 == EXPECTED_POSTED {
            println!(" done");
            return Ok(());
        }
        if Instant::now() > deadline {
            println!();
            bail!(
                "the workers did not settle every event within 60 s ({posted} entries, {open} dead letters)"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn report(store: &jobs::Store, tally: &Tally) -> anyhow::Result<()> {
    let journal = store.journal(&JournalFilter::default(), None, 500).await?;
    let dead = store
        .dead_letters(
            &DeadLetterFilter {
                state: Some(DeadLetterState::Open),
                ..DeadLetterFilter::default()
            },
            PageRequest::new(None, Some(50)),
        )
        .await?;
    let conflicts = store
        .conflicts(Some("open"), PageRequest::new(None, Some(50)))
        .await?;
    println!("\nwhat happened");
    println!(
        "  recorded {}   duplicates {}   conflicts {} ({} kept for ops)   ignored {}   journal entries {}   dead letters {}",
        tally.recorded,
        tally.duplicates,
        tally.conflicts,
        conflicts.items.len(),
        tally.ignored,
        journal.items.len(),
        dead.items.len()
    );

    println!("\njournal");
    let mut rows = Vec::new();
    for entry in &journal.items {
        for line in &entry.lines {
            let first = line.line_no == 1;
            rows.push(vec![
                if first {
                    entry.id.to_string()
                } else {
                    String::new()
                },
                if first {
                    entry.description.clone()
                } else {
                    String::new()
                },
                line.account.clone(),
                line.amount.clone(),
                line.currency.clone(),
            ]);
        }
    }
    table::print(&["ENTRY", "DESCRIPTION", "ACCOUNT", "AMOUNT", "CUR"], &rows);

    println!("\nbalances");
    let balances = store.balances(BalanceQuery::default()).await?;
    let rows: Vec<Vec<String>> = balances
        .iter()
        .map(|b| vec![b.account.clone(), b.currency.clone(), b.balance.clone()])
        .collect();
    table::print(&["ACCOUNT", "CUR", "BALANCE"], &rows);

    println!("\ndead letters (a person decides)");
    let rows: Vec<Vec<String>> = dead
        .items
        .iter()
        .map(|d| {
            vec![
                d.id.to_string(),
                d.source.clone(),
                d.external_id.clone(),
                d.error_class.clone(),
                d.error_code.clone(),
                or_dash(Some(&d.last_error)),
            ]
        })
        .collect();
    table::print(
        &["ID", "SOURCE", "EXTERNAL ID", "CLASS", "CODE", "LAST ERROR"],
        &rows,
    );
    println!(
        "\n  drain them with:  settle dead-letters show ID | requeue ID --reason R | discard ID --reason R"
    );

    let checks = store.verify().await?;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.violations > 0)
        .map(|c| c.name)
        .collect();
    println!(
        "\ninvariants: {}",
        if failed.is_empty() {
            "all hold".to_owned()
        } else {
            format!("VIOLATED: {}", failed.join(", "))
        }
    );

    let expected = (
        EXPECTED_RECORDED,
        EXPECTED_DUPLICATES,
        EXPECTED_CONFLICTS,
        EXPECTED_IGNORED,
        EXPECTED_POSTED,
        EXPECTED_DEAD_LETTERS,
    );
    let got = (
        tally.recorded,
        tally.duplicates,
        tally.conflicts,
        tally.ignored,
        journal.items.len() as i64,
        dead.items.len(),
    );
    if got != expected || !tally.other.is_empty() || !failed.is_empty() {
        bail!(
            "the demo did not end as expected: got {got:?}, expected {expected:?}; unexpected answers: {:?}",
            tally.other
        );
    }
    println!("\nthe demo ended as expected");
    Ok(())
}
