//! `settle demo`: a realistic run on a fresh embedded database. It starts the whole system,
//! sends signed deliveries the way Stripe, Adyen and a Standard Webhooks sender would (normal
//! events, redeliveries, a reformatted redelivery, a conflicting one, a payout that fails after
//! being paid, an invalid event, an event whose job keeps failing, an Adyen capture and the
//! settlement batch that settles it), waits for the workers, and shows what happened. It exits 0 only if the outcome is the one the scenario expects. Its
//! logs go to a file in its directory, so the terminal tells the story only; with
//! `--keep-running` its server stays up afterwards, with a token to open its dashboard.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use ledger::finance::{BalanceQuery, JournalFilter, ReconciliationStatus, open_since};
use ledger::review::{DeadLetterFilter, DeadLetterState, PageRequest};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::table::{self, or_dash};
use crate::app::{App, Role};
use crate::config::{Config, LogFormat};
use crate::fake_adyen::FakeReports;
use crate::fake_stripe::{FakeStripe, fixture};
use crate::sign;

/// What the scenario must end with.
const EXPECTED_RECORDED: usize = 14;
const EXPECTED_DUPLICATES: usize = 3;
const EXPECTED_CONFLICTS: usize = 1;
const EXPECTED_IGNORED: usize = 3;
const EXPECTED_POSTED: i64 = 16;
const EXPECTED_DEAD_LETTERS: usize = 2;
/// The Stripe payout the scenario reconciles.
const STRIPE_PAYOUT: &str = "po_demo_1";
/// The Adyen settlement batch the scenario posts and reconciles, and its report.
const ADYEN_BATCH: &str = "TestMerchant:batch:1";
const ADYEN_REPORT: &str = "settlement_detail_report_batch_1.csv";
/// The report, in the shape of `fixtures/adyen` (see its SOURCES.md): the notified EUR capture
/// settled with its fees, a USD payment (automatic capture, never notified) settled in EUR, a
/// refund, the month's fee and the payout of the rest.
const ADYEN_REPORT_CSV: &str = "\
Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date,TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC),Payment Method Variant,Modification Merchant Reference,Batch Number
DemoCo,TestMerchant,psp_payment_1,order-42,visa,2026-11-30 12:05:00,CET,Settled,psp_capture_1,EUR,,42.00,1,EUR,,40.90,,0.10,0.20,0.80,visaclassic,,1
DemoCo,TestMerchant,psp_payment_2,order-43,mc,2026-11-30 13:10:00,CET,Settled,psp_capture_2,USD,,25.00,0.92,EUR,,22.60,0.40,,,,mccredit,,1
DemoCo,TestMerchant,psp_payment_1,order-42,visa,2026-11-30 15:00:00,CET,Refunded,psp_refund_1,EUR,10.00,,1,EUR,10.00,,,,,,visaclassic,refund-42,1
DemoCo,TestMerchant,,,,2026-11-30 23:00:00,CET,Fee,Transaction Fees November 2026,EUR,,,,EUR,1.50,,,,,,,,1
DemoCo,TestMerchant,,,,2026-12-01 02:00:00,CET,MerchantPayout,\"TX0000000001XT batch 1, TestMerchant\",EUR,,,,EUR,52.00,,,,,,,,1
";

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
    /// Where the fake Adyen report server serves the batch's report.
    adyen_report_url: String,
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

/// A test-mode Stripe webhook event in the shape Stripe sends (`fixtures/stripe`).
fn stripe_event(id: &str, event_type: &str, object: Value, pending_webhooks: i64) -> String {
    let mut event = fixture("event");
    event["id"] = json!(id);
    event["type"] = json!(event_type);
    event["pending_webhooks"] = json!(pending_webhooks);
    event["data"]["object"] = object;
    event.to_string()
}

/// A charge as a webhook carries it: its balance transaction by id, or null (asynchronous
/// capture).
fn stripe_charge(id: &str, amount: i64, transaction: Option<&str>) -> Value {
    let mut charge = fixture("charge");
    charge["id"] = json!(id);
    charge["amount"] = json!(amount);
    charge["amount_captured"] = json!(amount);
    charge["balance_transaction"] = json!(transaction);
    charge
}

/// A balance transaction the fake Stripe API serves.
fn stripe_transaction(id: &str, category: &str, amount: i64, fee: i64, source: &str) -> Value {
    let mut transaction = fixture("balance_transaction");
    transaction["id"] = json!(id);
    transaction["type"] = json!(category);
    transaction["reporting_category"] = json!(category);
    transaction["amount"] = json!(amount);
    transaction["fee"] = json!(fee);
    transaction["net"] = json!(amount - fee);
    transaction["source"] = json!(source);
    transaction["fee_details"] = match fee {
        0 => json!([]),
        fee => json!([{"amount": fee, "application": null, "currency": "usd",
                       "description": "Stripe processing fees", "type": "stripe_fee"}]),
    };
    transaction
}

/// The Stripe account behind the demo, in a fake Stripe API: two charges, a refund, a Stripe
/// fee (which has no webhook of its own) and the automatic payout that paid them out.
fn stock_fake_stripe(fake: &FakeStripe) {
    let items = [
        stripe_transaction("txn_demo_ch1", "charge", 2_000, 88, "ch_demo_1"),
        stripe_transaction("txn_demo_ch2", "charge", 5_000, 175, "ch_demo_2"),
        stripe_transaction("txn_demo_re1", "refund", -500, 0, "re_demo_1"),
        stripe_transaction("txn_demo_fee", "fee", -200, 0, "fee_demo_radar"),
        stripe_transaction("txn_demo_po1", "payout", -6_037, 0, STRIPE_PAYOUT),
    ];
    let ids: Vec<String> = items
        .iter()
        .map(|t| t["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    for item in items {
        fake.add_transaction(None, item);
    }
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    fake.set_payout_listing(None, STRIPE_PAYOUT, &ids);
}

pub async fn run(dir: Option<PathBuf>, keep_running: bool) -> anyhow::Result<()> {
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
    let log = scratch.join("settle.log");
    let _ = std::fs::remove_file(&log);
    crate::telemetry::init_to_file(&log, LogFormat::Text)
        .with_context(|| format!("cannot write the log {}", log.display()))?;
    let (token, token_sha256) = super::fresh_token();
    let standard_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(random_bytes())
    );
    let stripe_secret = format!("whsec_{}", hex::encode(random_bytes()));
    let stripe_api_key = format!("rk_test_{}", hex::encode(random_bytes()));
    let fake_stripe = FakeStripe::start(&stripe_api_key)
        .await
        .context("cannot start the fake Stripe API")?;
    stock_fake_stripe(&fake_stripe);
    let adyen_key = hex::encode(random_bytes()).to_uppercase();
    let report_password = hex::encode(random_bytes());
    let fake_adyen = FakeReports::start("report@Company.DemoCo", &report_password)
        .await
        .context("cannot start the fake Adyen report server")?;
    fake_adyen.put(ADYEN_REPORT, ADYEN_REPORT_CSV.as_bytes().to_vec());
    let config = Config::from_toml(&format!(
        r#"
        listen = "127.0.0.1:0"
        ops_listen = "127.0.0.1:0"
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
        livemode = false
        api_key = "{stripe_api_key}"
        api_base = "{stripe_api}"
        [[sources]]
        name = "adyen"
        provider = "adyen"
        secrets = ["{adyen_key}"]
        money_from = "reports"
        report_user = "report@Company.DemoCo"
        report_password = "{report_password}"
        report_hosts = ["{adyen_host}"]
        [[tokens]]
        name = "demo"
        role = "ops"
        token_sha256 = "{token_sha256}"
        "#,
        db = database.display(),
        stripe_api = fake_stripe.url(),
        adyen_host = fake_adyen.host(),
    ))?;
    println!(
        "settle demo: a fresh embedded database at {}",
        database.display()
    );
    println!("             settle's log goes to {}", log.display());
    println!(
        "             Stripe's API is a fake in this process at {} (the demo runs offline)",
        fake_stripe.url()
    );
    println!(
        "             so is Adyen's report download, at {}",
        fake_adyen.host()
    );
    let app = App::build(&config, Role::Serve).await?;
    let store = app.store().clone();
    let base = format!("http://{}", app.local_addr()?);
    let dashboard = format!("http://{}/dashboard", app.ops_addr()?);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    let sender = Sender {
        http: reqwest::Client::new(),
        base,
        standard_secret,
        stripe_secret,
        adyen_key,
        adyen_report_url: fake_adyen.url("TestMerchant", ADYEN_REPORT),
    };

    let mut tally = Tally::default();
    send_scenario(&sender, &mut tally).await?;
    wait_for_workers(&store).await?;
    let outcome = report(&store, &tally).await;
    if outcome.is_ok() {
        println!(
            "\nthe database and the log stay in {}; to read them again:\n  \
             DATABASE_URL=sqlite://{} settle journal list",
            scratch.display(),
            database.display()
        );
        match keep_running {
            true => {
                println!(
                    "\nthe demo's server keeps running (Ctrl-C stops it):\n  \
                     dashboard  {dashboard}\n  \
                     log in with the token  {token}"
                );
                super::stop_on_signal(shutdown.clone()).await;
            }
            false => println!("\nto look around in the dashboard: settle demo --keep-running"),
        }
    }
    shutdown.cancel();
    running.await.context("settle stopped abnormally")??;
    outcome
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
    let mut payout = fixture("payout");
    payout["id"] = json!(STRIPE_PAYOUT);
    payout["amount"] = json!(6_037);
    payout["balance_transaction"] = json!("txn_demo_po1");
    let mut captured = serde_json::from_str::<Value>(&stripe_event(
        "evt_st_ch2_captured",
        "charge.updated",
        stripe_charge("ch_demo_2", 5_000, Some("txn_demo_ch2")),
        1,
    ))?;
    captured["data"]["previous_attributes"] = json!({"balance_transaction": null});
    let mut refund = fixture("refund");
    refund["id"] = json!("re_demo_1");
    refund["amount"] = json!(500);
    refund["charge"] = json!("ch_demo_1");
    refund["balance_transaction"] = json!("txn_demo_re1");
    let mut connected = serde_json::from_str::<Value>(&stripe_event(
        "evt_st_connect",
        "charge.succeeded",
        stripe_charge("ch_other", 900, Some("txn_other")),
        1,
    ))?;
    connected["account"] = json!("acct_demo_connected");
    let charge_1 = stripe_charge("ch_demo_1", 2_000, Some("txn_demo_ch1"));
    let stripe = [
        (
            "stripe: charge.succeeded 20.00 USD (names txn)",
            stripe_event("evt_st_ch1", "charge.succeeded", charge_1.clone(), 1),
        ),
        (
            "stripe: charge.succeeded redelivered (pending_webhooks 2)",
            stripe_event("evt_st_ch1", "charge.succeeded", charge_1, 2),
        ),
        (
            "stripe: charge.succeeded, async capture (txn null)",
            stripe_event(
                "evt_st_ch2",
                "charge.succeeded",
                stripe_charge("ch_demo_2", 5_000, None),
                1,
            ),
        ),
        (
            "stripe: charge.updated, captured (names txn)",
            captured.to_string(),
        ),
        (
            "stripe: refund.created 5.00 USD",
            stripe_event("evt_st_re1", "refund.created", refund, 1),
        ),
        (
            "stripe: payout.paid 60.37 USD (lists its items)",
            stripe_event("evt_st_paid", "payout.paid", payout.clone(), 1),
        ),
        (
            "stripe: payout.reconciliation_completed",
            stripe_event("evt_st_recon", "payout.reconciliation_completed", payout, 1),
        ),
        (
            "stripe: a connected account's charge (ignored)",
            connected.to_string(),
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
    adyen_delivery(
        s,
        tally,
        &items,
        "adyen: CAPTURE (a receivable), REFUND, AUTHORISATION",
    )
    .await?;
    let mut report = sign::adyen_item("REPORT_AVAILABLE", ADYEN_REPORT, 0, "EUR", "true");
    report["reason"] = json!(s.adyen_report_url);
    adyen_delivery(
        s,
        tally,
        &[report],
        "adyen: REPORT_AVAILABLE settlement batch 1",
    )
    .await
}

/// Sends one Adyen delivery; Adyen's answer says nothing of what was recorded, so each delivery
/// records one event (the REFUND's money is the report's, an AUTHORISATION is no money).
async fn adyen_delivery(
    s: &Sender,
    tally: &mut Tally,
    items: &[Value],
    label: &str,
) -> anyhow::Result<()> {
    let (status, body) = s.adyen(items).await?;
    println!("  {label:<52} {status} {body}");
    if (status, body.as_str()) == (200, "[accepted]") {
        tally.recorded += 1;
    } else {
        tally.other.push(format!("{label}: {status} {body}"));
    }
    Ok(())
}

async fn wait_for_workers(store: &ledger::Store) -> anyhow::Result<()> {
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

/// Prints a payout beside its items (`what` they are called); answers whether they match.
async fn show_reconciliation(
    store: &ledger::Store,
    payout: &str,
    what: &str,
) -> anyhow::Result<bool> {
    let reconciled = store.reconciliation(payout).await?;
    if let Some(r) = &reconciled {
        println!(
            "  {:?}: payout {} {}, {} {what}, net {}, difference {}",
            r.status,
            r.payout_amount.as_deref().unwrap_or("-"),
            r.currency.as_deref().unwrap_or(""),
            r.items.len(),
            r.items_net,
            r.difference
        );
    }
    Ok(reconciled.map(|r| r.status) == Some(ReconciliationStatus::Matched))
}

async fn report(store: &ledger::Store, tally: &Tally) -> anyhow::Result<()> {
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

    println!("\njournal, in entry order");
    let mut entries: Vec<_> = journal.items.iter().collect();
    entries.sort_by_key(|entry| entry.id);
    let mut rows = Vec::new();
    for entry in entries {
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

    println!(
        "\nreconciliation of Stripe payout {STRIPE_PAYOUT} (its balance transactions, listed)"
    );
    let matched = show_reconciliation(store, STRIPE_PAYOUT, "items").await?;

    println!("\nreconciliation of Adyen batch {ADYEN_BATCH} (its settlement details report)");
    let batch_matched = show_reconciliation(store, ADYEN_BATCH, "lines").await?;
    let receivables = store
        .open_receivables(&["receivables:adyen".to_owned()], open_since(0), 50)
        .await?;
    println!(
        "  receivables still open: {}",
        match receivables.len() {
            0 => "none (each sale settled by its report line)".to_owned(),
            n => n.to_string(),
        }
    );

    println!("\ndead letters (a person decides)");
    let rows: Vec<Vec<String>> = dead
        .items
        .iter()
        .map(|d| {
            vec![
                d.id.to_string(),
                d.source.clone(),
                d.external_id.clone(),
                d.error_class.to_string(),
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
    if got != expected
        || !tally.other.is_empty()
        || !failed.is_empty()
        || !matched
        || !batch_matched
        || !receivables.is_empty()
    {
        bail!(
            "the demo did not end as expected: got {got:?}, expected {expected:?}; unexpected answers: {:?}",
            tally.other
        );
    }
    println!("\nthe demo ended as expected");
    Ok(())
}
