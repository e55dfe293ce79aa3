//! `settle loadgen`: signed deliveries at a given concurrency and rate, with a share of
//! redeliveries (some racing their original) and of conflicts; it reports throughput, latency
//! and answers, and can check afterwards that the store holds exactly the events it should (no
//! acknowledged delivery lost, none recorded twice).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Mutex;

use crate::sign;

/// Which provider's signing and payloads to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadProvider {
    Standard,
    Stripe,
    Adyen,
}

#[derive(Clone, Debug, clap::Args)]
pub struct LoadOptions {
    /// Base URL of a running settle ingress.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The source name (`POST /webhooks/{source}`).
    #[arg(long, default_value = "std")]
    pub source: String,
    #[arg(long, value_enum, default_value = "standard")]
    pub provider: LoadProvider,
    /// The source's signing secret (`whsec_...`, or the Adyen HMAC key in hex).
    #[arg(long, env = "LOADGEN_SECRET")]
    pub secret: String,
    /// Concurrent senders.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Deliveries per second across all senders (0: as fast as they go).
    #[arg(long, default_value_t = 0)]
    pub rate: u32,
    /// Distinct events to deliver.
    #[arg(long, default_value_t = 1000)]
    pub count: usize,
    /// Percent of events delivered again later (same bytes).
    #[arg(long, default_value_t = 0)]
    pub redelivery_percent: u32,
    /// Percent of events delivered twice at once (racing duplicates).
    #[arg(long, default_value_t = 0)]
    pub concurrent_duplicate_percent: u32,
    /// Percent of events delivered again with a different amount (a conflict).
    #[arg(long, default_value_t = 0)]
    pub conflict_percent: u32,
    /// Event ids start with this (defaults to a fresh one per run).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Send again every delivery that got no definite answer (a 503, a network error), until it
    /// does, at most this many rounds.
    #[arg(long, default_value_t = 0)]
    pub resend_rounds: u32,
}

/// One delivery to make.
#[derive(Clone, Debug)]
struct Delivery {
    event: usize,
    variant: Variant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Original,
    Duplicate,
    Conflict,
}

/// What the deliveries got.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadReport {
    pub deliveries: usize,
    pub elapsed_ms: u64,
    /// Answers per second over the whole run.
    pub throughput_per_sec: u64,
    pub latency_us_p50: u64,
    pub latency_us_p95: u64,
    pub latency_us_p99: u64,
    pub latency_us_max: u64,
    /// Answers by status and outcome (`200 recorded`, `409 event_conflict`, `503`...).
    pub answers: BTreeMap<String, usize>,
    /// Events that got at least one 2xx (they must all be in the store).
    pub acknowledged_events: usize,
    /// Deliveries still without a definite answer after the resend rounds.
    pub unanswered: usize,
    pub prefix: String,
}

impl LoadReport {
    pub fn count(&self, key: &str) -> usize {
        self.answers.get(key).copied().unwrap_or(0)
    }
}

struct Shared {
    options: LoadOptions,
    prefix: String,
    http: reqwest::Client,
    latencies_us: Mutex<Vec<u64>>,
    answers: Mutex<BTreeMap<String, usize>>,
    acknowledged: Mutex<Vec<bool>>,
    unanswered: Mutex<Vec<Delivery>>,
}

/// A deterministic pick in 0..100 for `event` and a salt (no randomness: runs repeat).
fn pick(event: usize, salt: u64) -> u32 {
    let mut x = (event as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 33) as u32 % 100
}

pub async fn run(options: LoadOptions) -> anyhow::Result<LoadReport> {
    if options.concurrency == 0 || options.count == 0 {
        bail!("--concurrency and --count must be positive");
    }
    let prefix = options
        .prefix
        .clone()
        .unwrap_or_else(|| format!("lg{}", ulid::Ulid::generate().to_string().to_lowercase()));
    let mut first = Vec::with_capacity(options.count * 2);
    let mut later = Vec::new();
    for event in 0..options.count {
        first.push(Delivery {
            event,
            variant: Variant::Original,
        });
        if pick(event, 1) < options.concurrent_duplicate_percent {
            first.push(Delivery {
                event,
                variant: Variant::Duplicate,
            });
        }
        if pick(event, 2) < options.redelivery_percent {
            later.push(Delivery {
                event,
                variant: Variant::Duplicate,
            });
        }
        if pick(event, 3) < options.conflict_percent {
            later.push(Delivery {
                event,
                variant: Variant::Conflict,
            });
        }
    }
    let shared = Arc::new(Shared {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(options.concurrency)
            .build()?,
        prefix: prefix.clone(),
        latencies_us: Mutex::new(Vec::with_capacity(first.len() + later.len())),
        answers: Mutex::new(BTreeMap::new()),
        acknowledged: Mutex::new(vec![false; options.count]),
        unanswered: Mutex::new(Vec::new()),
        options,
    });
    let started = Instant::now();
    // Originals (and their racing duplicates) first; redeliveries and conflicts once every
    // original was answered, so a conflict never beats its original.
    send_all(&shared, first).await;
    send_all(&shared, later).await;
    for _ in 0..shared.options.resend_rounds {
        let again = std::mem::take(&mut *shared.unanswered.lock().await);
        if again.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        send_all(&shared, again).await;
    }
    let elapsed = started.elapsed();
    let mut latencies = shared.latencies_us.lock().await.clone();
    latencies.sort_unstable();
    let at = |q: usize| {
        latencies
            .get((latencies.len().saturating_sub(1)) * q / 100)
            .copied()
            .unwrap_or(0)
    };
    let deliveries = latencies.len();
    Ok(LoadReport {
        deliveries,
        elapsed_ms: elapsed.as_millis() as u64,
        throughput_per_sec: (deliveries as u128 * 1000 / elapsed.as_millis().max(1)) as u64,
        latency_us_p50: at(50),
        latency_us_p95: at(95),
        latency_us_p99: at(99),
        latency_us_max: at(100),
        answers: shared.answers.lock().await.clone(),
        acknowledged_events: shared
            .acknowledged
            .lock()
            .await
            .iter()
            .filter(|a| **a)
            .count(),
        unanswered: shared.unanswered.lock().await.len(),
        prefix,
    })
}

async fn send_all(shared: &Arc<Shared>, deliveries: Vec<Delivery>) {
    let queue = Arc::new(deliveries);
    let next = Arc::new(AtomicUsize::new(0));
    let pace = shared.options.rate;
    let start = Instant::now();
    let senders = (0..shared.options.concurrency).map(|_| {
        let (shared, queue, next) = (shared.clone(), queue.clone(), next.clone());
        tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(delivery) = queue.get(index) else {
                    return;
                };
                if pace > 0 {
                    // Delivery `index` is due at index / rate seconds after the start.
                    let due =
                        start + Duration::from_micros(index as u64 * 1_000_000 / u64::from(pace));
                    tokio::time::sleep_until(due.into()).await;
                }
                send(&shared, delivery).await;
            }
        })
    });
    for sender in senders.collect::<Vec<_>>() {
        let _ = sender.await;
    }
}

async fn send(shared: &Shared, delivery: &Delivery) {
    let o = &shared.options;
    let id = format!("{}-{}", shared.prefix, delivery.event);
    let cents = 1_000
        + (delivery.event % 9_000) as i64
        + if delivery.variant == Variant::Conflict {
            1
        } else {
            0
        };
    let (path, headers, body) = match o.provider {
        LoadProvider::Standard => {
            let gross = cents;
            let fee = gross * 3 / 100;
            let body = json!({"type": "settlement.charge_settled", "timestamp": "2026-11-30T12:00:00Z",
                "data": {"movement_id": format!("ch_{id}"), "occurred_at": "2026-11-30T11:59:00Z", "currency": "USD",
                         "gross": minor(gross), "fee": minor(fee), "net": minor(gross - fee), "reference": id}})
            .to_string();
            let headers = sign::standard_headers(&o.secret, &id, sign::now(), body.as_bytes());
            (format!("/webhooks/{}", o.source), headers, body)
        }
        LoadProvider::Stripe => {
            let body = json!({"id": id, "object": "event", "type": "payout.paid", "created": 1_764_500_100,
                "pending_webhooks": 1, "data": {"object": {"id": format!("po_{id}"), "object": "payout",
                "amount": cents, "currency": "usd", "arrival_date": 1_764_500_000}}})
            .to_string();
            let header = sign::stripe_header(&o.secret, sign::now(), body.as_bytes());
            (
                format!("/webhooks/{}", o.source),
                vec![("stripe-signature".to_owned(), header)],
                body,
            )
        }
        LoadProvider::Adyen => {
            let item = sign::adyen_item("CAPTURE", &id, cents, "EUR", "true");
            (
                format!("/webhooks/{}", o.source),
                vec![],
                sign::adyen_notification(&o.secret, &[item]),
            )
        }
    };
    let mut request = shared
        .http
        .post(format!("{}{path}", o.url))
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let started = Instant::now();
    let answer = match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let outcome = json["status"]
                .as_str()
                .or(json["error"].as_str())
                .unwrap_or(text.as_str());
            Some((status, format!("{status} {outcome}")))
        }
        Err(_) => None,
    };
    shared
        .latencies_us
        .lock()
        .await
        .push(started.elapsed().as_micros() as u64);
    let key = answer
        .as_ref()
        .map(|(_, k)| k.clone())
        .unwrap_or_else(|| "network error".into());
    *shared.answers.lock().await.entry(key).or_default() += 1;
    match answer {
        Some((200..=299, _)) => {
            if let Some(flag) = shared.acknowledged.lock().await.get_mut(delivery.event) {
                *flag = true;
            }
        }
        Some((409, _)) => {}
        _ => shared.unanswered.lock().await.push(delivery.clone()),
    }
}

fn minor(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// Checks the store holds exactly one event per acknowledged event of the run (and none for the
/// others unless they were eventually acknowledged): nothing acknowledged lost, nothing twice.
pub async fn verify(
    store: &jobs::Store,
    options: &LoadOptions,
    report: &LoadReport,
    expected_events: usize,
) -> anyhow::Result<()> {
    let prefix = match options.provider {
        LoadProvider::Adyen => format!("CAPTURE:{}-", report.prefix),
        _ => format!("{}-", report.prefix),
    };
    let stored = store
        .count_events_with_prefix(&options.source, &prefix)
        .await?;
    if report.acknowledged_events != expected_events {
        bail!(
            "{} of {expected_events} events were acknowledged",
            report.acknowledged_events
        );
    }
    if stored as usize != expected_events {
        bail!("the store holds {stored} events of this run, expected {expected_events}");
    }
    Ok(())
}

pub fn print(report: &LoadReport) {
    let ms = |us: u64| format!("{}.{:01} ms", us / 1000, us % 1000 / 100);
    println!(
        "{} deliveries in {} ms: {}/s; latency p50 {}, p95 {}, p99 {}, max {}",
        report.deliveries,
        report.elapsed_ms,
        report.throughput_per_sec,
        ms(report.latency_us_p50),
        ms(report.latency_us_p95),
        ms(report.latency_us_p99),
        ms(report.latency_us_max)
    );
    for (answer, count) in &report.answers {
        println!("  {count:>8}  {answer}");
    }
    println!(
        "  {} events acknowledged, {} deliveries unanswered",
        report.acknowledged_events, report.unanswered
    );
}

/// Context for the CLI.
pub async fn command(
    options: LoadOptions,
    database_url: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let count = options.count;
    let report = run(options.clone()).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    if let Some(url) = database_url {
        let store = jobs::Store::connect(&url, &jobs::StoreOptions::default())
            .await
            .context("cannot connect to verify")?;
        let result = verify(&store, &options, &report, count).await;
        store.close().await;
        result?;
        println!("verified: the store holds exactly the {count} events of this run");
    }
    Ok(())
}
