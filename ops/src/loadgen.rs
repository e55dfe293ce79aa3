//! `settle loadgen`: signed deliveries at a given concurrency and rate, for a count of events or
//! a duration, with a share of redeliveries (some racing their original) and of conflicts; it
//! reports throughput, latency and answers, and can check afterwards that the store holds
//! exactly the events it should (no acknowledged delivery lost, none recorded twice, every
//! conflict kept).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

/// The most events one run may create (a duration run at full speed stops here).
const EVENTS_MAX: usize = 10_000_000;
/// A delivery without an answer by then counts as unanswered (and is sent again if asked).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, clap::Args)]
pub struct LoadOptions {
    /// Base URL of a running settle ingress.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The source name (`POST /webhooks/{source}`).
    #[arg(long, default_value = "std")]
    pub source: String,
    /// How deliveries are shaped and signed: the source's provider.
    #[arg(long, default_value = "standard", value_parser = clap::builder::PossibleValuesParser::new(providers::names()))]
    pub provider: String,
    /// The source's signing secret, as the provider gives it (a `whsec_...`, an HMAC key in
    /// hex).
    #[arg(long, env = "LOADGEN_SECRET")]
    pub secret: String,
    /// Concurrent senders.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Deliveries per second across all senders (0: as fast as they go).
    #[arg(long, default_value_t = 0)]
    pub rate: u32,
    /// Distinct events to deliver (unless `--duration-secs` is given).
    #[arg(long, default_value_t = 1000)]
    pub count: usize,
    /// Deliver new events for this many seconds instead of a fixed count; the redeliveries and
    /// conflicts of the last ones follow them.
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// Percent of events delivered again later (same bytes, signed afresh).
    #[arg(long, default_value_t = 0)]
    pub redelivery_percent: u32,
    /// Percent of events delivered twice at once (racing duplicates, on two connections).
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
#[derive(Clone, Copy, Debug)]
struct Delivery {
    event: usize,
    variant: Variant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The event's first delivery; its redelivery and conflict wait until it is acknowledged.
    Original,
    /// The same facts again (a redelivery or a racing duplicate).
    Duplicate,
    /// The same event id with a different amount.
    Conflict,
}

/// What the deliveries got.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadReport {
    pub deliveries: usize,
    /// Distinct events delivered (the count, or what the duration allowed).
    pub events: usize,
    pub elapsed_ms: u64,
    /// Answers per second over the whole run.
    pub throughput_per_sec: u64,
    /// Latency of a delivery: from its send, or with `--rate` from when it was due (a stalled
    /// server is not hidden by senders waiting on it).
    pub latency_us_p50: u64,
    pub latency_us_p95: u64,
    pub latency_us_p99: u64,
    pub latency_us_max: u64,
    /// Answers by status and outcome (`200 recorded`, `409 event_conflict`, `503`...).
    pub answers: BTreeMap<String, usize>,
    /// Events that got at least one 2xx (they must all be in the store).
    pub acknowledged_events: usize,
    /// Events whose conflicting delivery got a definite answer (it must be kept for a person).
    pub conflicted_events: usize,
    /// Events whose conflicting delivery got no answer at all (it may have been kept or not).
    pub conflicts_unanswered: usize,
    /// Deliveries still without a definite answer after the resend rounds.
    pub unanswered: usize,
    pub prefix: String,
    /// When each event got its first 2xx, by event number.
    #[serde(skip)]
    pub acknowledged_at: Vec<Option<Instant>>,
}

impl LoadReport {
    pub fn count(&self, key: &str) -> usize {
        self.answers.get(key).copied().unwrap_or(0)
    }

    /// The event number of an external id of this run (`{prefix}-{n}`, within whatever the
    /// provider makes of it).
    pub fn event_number(&self, external_id: &str) -> Option<usize> {
        let marker = format!("{}-", self.prefix);
        let at = external_id.rfind(&marker)?;
        external_id[at + marker.len()..].parse().ok()
    }
}

/// What the senders tallied; each section under the lock is a few pushes.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    answers: BTreeMap<String, usize>,
    acknowledged_at: Vec<Option<Instant>>,
    conflicted: BTreeSet<usize>,
    unanswered: Vec<Delivery>,
}

struct Shared {
    options: LoadOptions,
    /// The provider whose deliveries are sent.
    provider: &'static dyn providers::Provider,
    prefix: String,
    http: reqwest::Client,
    started: Instant,
    /// New events stop at this instant (a duration run), else at `options.count`.
    deadline: Option<Instant>,
    next_event: AtomicUsize,
    /// Pacing: the next free send slot (slot n is due at n / rate seconds after the start).
    next_slot: AtomicU64,
    /// Originals sent and not yet answered: their follow-ups may still come.
    originals_in_flight: AtomicUsize,
    /// Deliveries to make before any new event: follow-ups and resends.
    queue: Mutex<VecDeque<Delivery>>,
    tally: Mutex<Tally>,
}

impl Shared {
    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Delivery>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn events_max(&self) -> usize {
        if self.deadline.is_some() {
            EVENTS_MAX
        } else {
            self.options.count.min(EVENTS_MAX)
        }
    }
}

/// What a sender does next.
enum Next {
    /// A new event's first delivery.
    New(Delivery),
    /// A queued follow-up or resend.
    Send(Delivery),
    /// Nothing to send yet, but an original in flight may still bring follow-ups.
    Wait,
    Done,
}

/// A deterministic pick in 0..100 for `event` and a salt (no randomness: runs repeat).
fn pick(event: usize, salt: u64) -> u32 {
    let mut x = (event as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 33) as u32 % 100
}

pub async fn run(options: LoadOptions) -> anyhow::Result<LoadReport> {
    if options.concurrency == 0 || (options.count == 0 && options.duration_secs.is_none()) {
        bail!("--concurrency and --count must be positive");
    }
    if options.duration_secs == Some(0) {
        bail!("--duration-secs must be positive");
    }
    let prefix = options
        .prefix
        .clone()
        .unwrap_or_else(|| format!("lg{}", ulid::Ulid::generate().to_string().to_lowercase()));
    let provider = provider_of(&options)?;
    let started = Instant::now();
    let shared = Arc::new(Shared {
        provider,
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(options.concurrency * 2)
            .timeout(REQUEST_TIMEOUT)
            .build()?,
        prefix: prefix.clone(),
        started,
        deadline: options
            .duration_secs
            .map(|secs| started + Duration::from_secs(secs)),
        next_event: AtomicUsize::new(0),
        next_slot: AtomicU64::new(0),
        originals_in_flight: AtomicUsize::new(0),
        queue: Mutex::new(VecDeque::new()),
        tally: Mutex::new(Tally::default()),
        options,
    });
    send_all(&shared).await;
    for _ in 0..shared.options.resend_rounds {
        let again = std::mem::take(&mut shared.tally().unanswered);
        if again.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        shared.queue().extend(again);
        send_all(&shared).await;
    }
    let elapsed = started.elapsed();
    let events = shared
        .next_event
        .load(Ordering::SeqCst)
        .min(shared.events_max());
    let mut tally = std::mem::take(&mut *shared.tally());
    tally.latencies_us.sort_unstable();
    let at = |q: usize| {
        tally
            .latencies_us
            .get((tally.latencies_us.len().saturating_sub(1)) * q / 100)
            .copied()
            .unwrap_or(0)
    };
    let deliveries = tally.latencies_us.len();
    Ok(LoadReport {
        deliveries,
        events,
        elapsed_ms: elapsed.as_millis() as u64,
        throughput_per_sec: (deliveries as u128 * 1000 / elapsed.as_millis().max(1)) as u64,
        latency_us_p50: at(50),
        latency_us_p95: at(95),
        latency_us_p99: at(99),
        latency_us_max: at(100),
        acknowledged_events: tally.acknowledged_at.iter().flatten().count(),
        conflicts_unanswered: tally
            .unanswered
            .iter()
            .filter(|d| d.variant == Variant::Conflict && !tally.conflicted.contains(&d.event))
            .map(|d| d.event)
            .collect::<BTreeSet<_>>()
            .len(),
        conflicted_events: tally.conflicted.len(),
        unanswered: tally.unanswered.len(),
        answers: tally.answers,
        acknowledged_at: tally.acknowledged_at,
        prefix,
    })
}

/// Runs the senders until no new event is due and the queue of follow-ups is empty.
async fn send_all(shared: &Arc<Shared>) {
    let senders: Vec<_> = (0..shared.options.concurrency)
        .map(|_| tokio::spawn(sender(shared.clone())))
        .collect();
    for sender in senders {
        let _ = sender.await;
    }
}

async fn sender(shared: Arc<Shared>) {
    let rate = u64::from(shared.options.rate);
    loop {
        let due = (rate > 0).then(|| {
            let slot = shared.next_slot.fetch_add(1, Ordering::SeqCst);
            shared.started + Duration::from_micros(slot * 1_000_000 / rate)
        });
        if let Some(due) = due {
            tokio::time::sleep_until(due.into()).await;
        }
        let (delivery, new) = loop {
            match next(&shared) {
                Next::New(delivery) => break (delivery, true),
                Next::Send(delivery) => break (delivery, false),
                Next::Wait => tokio::time::sleep(Duration::from_millis(2)).await,
                Next::Done => return,
            }
        };
        let racing = new && pick(delivery.event, 1) < shared.options.concurrent_duplicate_percent;
        if racing {
            let duplicate = Delivery {
                variant: Variant::Duplicate,
                ..delivery
            };
            tokio::join!(send(&shared, delivery, due), send(&shared, duplicate, due));
        } else {
            send(&shared, delivery, due).await;
        }
        if delivery.variant == Variant::Original {
            shared.originals_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn next(shared: &Shared) -> Next {
    if let Some(delivery) = pop(shared) {
        return Next::Send(delivery);
    }
    let new_events = shared
        .deadline
        .is_none_or(|deadline| Instant::now() < deadline);
    if new_events {
        // Counted in flight before it is claimed, so no sender sees "nothing in flight" while
        // an original is about to go out.
        shared.originals_in_flight.fetch_add(1, Ordering::SeqCst);
        let event = shared.next_event.fetch_add(1, Ordering::SeqCst);
        if event < shared.events_max() {
            return Next::New(Delivery {
                event,
                variant: Variant::Original,
            });
        }
        shared.originals_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
    if shared.originals_in_flight.load(Ordering::SeqCst) > 0 {
        return Next::Wait;
    }
    // Follow-ups are queued before their original leaves the count: look once more.
    pop(shared).map_or(Next::Done, Next::Send)
}

/// The next queued delivery; an original taken from the queue (a resend) counts as in flight.
fn pop(shared: &Shared) -> Option<Delivery> {
    let delivery = shared.queue().pop_front()?;
    if delivery.variant == Variant::Original {
        shared.originals_in_flight.fetch_add(1, Ordering::SeqCst);
    }
    Some(delivery)
}

/// A delivery's headers and body, signed now by its provider's way.
fn signed(shared: &Shared, delivery: Delivery) -> providers::Sample {
    let o = &shared.options;
    let id = format!("{}-{}", shared.prefix, delivery.event);
    let cents =
        1_000 + (delivery.event % 9_000) as i64 + i64::from(delivery.variant == Variant::Conflict);
    shared
        .provider
        .sample(&o.secret, &id, cents, delivery.variant == Variant::Conflict)
}

async fn send(shared: &Shared, delivery: Delivery, due: Option<Instant>) {
    let o = &shared.options;
    let providers::Sample { headers, body } = signed(shared, delivery);
    let mut request = shared
        .http
        .post(format!("{}/webhooks/{}", o.url, o.source))
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let clock = due.unwrap_or_else(Instant::now);
    let (status, key) = match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let outcome = json["status"]
                .as_str()
                .or(json["error"].as_str())
                .unwrap_or(text.as_str());
            (Some(status), format!("{status} {outcome}"))
        }
        Err(error) if error.is_timeout() => (None, "no answer (timed out)".into()),
        Err(_) => (None, "network error".into()),
    };
    let answered = Instant::now();
    let mut tally = shared.tally();
    tally
        .latencies_us
        .push(answered.duration_since(clock).as_micros() as u64);
    *tally.answers.entry(key).or_default() += 1;
    match status {
        Some(200..=299) => {
            if tally.acknowledged_at.len() <= delivery.event {
                tally.acknowledged_at.resize(delivery.event + 1, None);
            }
            let first = tally.acknowledged_at[delivery.event].is_none();
            if first {
                tally.acknowledged_at[delivery.event] = Some(answered);
            }
            if delivery.variant == Variant::Conflict {
                // A provider answering every kept delivery the same way answers a kept
                // conflict 2xx.
                tally.conflicted.insert(delivery.event);
            }
            drop(tally);
            if delivery.variant == Variant::Original {
                follow_up(shared, delivery.event);
            }
        }
        Some(409) => {
            tally.conflicted.insert(delivery.event);
        }
        _ => tally.unanswered.push(delivery),
    }
}

/// Queues an acknowledged event's redelivery and conflict, if it has them.
fn follow_up(shared: &Shared, event: usize) {
    let o = &shared.options;
    let mut queue = shared.queue();
    if pick(event, 2) < o.redelivery_percent {
        queue.push_back(Delivery {
            event,
            variant: Variant::Duplicate,
        });
    }
    if pick(event, 3) < o.conflict_percent {
        queue.push_back(Delivery {
            event,
            variant: Variant::Conflict,
        });
    }
}

/// The provider `--provider` names.
fn provider_of(options: &LoadOptions) -> anyhow::Result<&'static dyn providers::Provider> {
    providers::find(&options.provider).with_context(|| {
        format!(
            "unknown provider {:?}; settle knows: {}",
            options.provider,
            providers::names().join(", ")
        )
    })
}

/// Checks the store against the run: every event of the run acknowledged and stored exactly
/// once, nothing else stored under its prefix, and every conflict that was answered kept.
pub async fn verify(
    store: &ledger::Store,
    options: &LoadOptions,
    report: &LoadReport,
) -> anyhow::Result<()> {
    let prefix = provider_of(options)?.sample_external_id(&format!("{}-", report.prefix));
    let stored = store.load_run_counts(&options.source, &prefix).await?;
    if report.acknowledged_events != report.events {
        bail!(
            "{} of {} events were acknowledged",
            report.acknowledged_events,
            report.events
        );
    }
    if stored.events as usize != report.events {
        bail!(
            "the store holds {} events of this run, expected {}",
            stored.events,
            report.events
        );
    }
    // A conflict that got no answer may or may not have been kept; one answered must be.
    let kept = stored.conflicted_events as usize;
    let answered = report.conflicted_events;
    if !(answered..=answered + report.conflicts_unanswered).contains(&kept) {
        bail!(
            "the store kept conflicts for {kept} events of this run, expected {answered} \
             (and up to {} more that got no answer)",
            report.conflicts_unanswered
        );
    }
    Ok(())
}

pub fn print(report: &LoadReport) {
    let ms = |us: u64| format!("{}.{:01} ms", us / 1000, us % 1000 / 100);
    println!(
        "{} deliveries of {} events in {} ms: {}/s; latency p50 {}, p95 {}, p99 {}, max {}",
        report.deliveries,
        report.events,
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
        "  {} events acknowledged, {} with a conflict answered, {} deliveries unanswered",
        report.acknowledged_events, report.conflicted_events, report.unanswered
    );
}

/// Context for the CLI.
pub async fn command(
    options: LoadOptions,
    database_url: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let report = run(options.clone()).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    if let Some(url) = database_url {
        let store = ledger::Store::connect(&url, &ledger::StoreOptions::default())
            .await
            .context("cannot connect to verify")?;
        let result = verify(&store, &options, &report).await;
        store.close().await;
        result?;
        println!(
            "verified: the store holds exactly the {} events of this run and every conflict answered",
            report.events
        );
    }
    Ok(())
}
