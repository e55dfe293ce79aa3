//! A fake of Stripe's API, for tests, benchmarks and `settle demo` (which must run offline): a
//! small HTTP server on a real socket serving the read endpoints settle calls, in the shapes
//! Stripe publishes (`fixtures/stripe`, each file naming its source). It is not Stripe: it holds
//! only the objects it is given, and can be told to answer slowly, to fail (429 with
//! `Retry-After`, 500, a stall, 401), to fail at random at a given rate (429 with and without
//! `Retry-After`, 500, a stall, a connection reset mid-body: [`FakeStripe::inject`]), to refuse
//! the key it accepted ([`FakeStripe::revoke_key`]), or to make up a charge's balance
//! transaction for any id of the form `txn_<suffix>` (for load runs, see
//! [`synthetic_charge_amount`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A fixture from `fixtures/stripe`, without its `_source` note.
pub fn fixture(name: &str) -> Value {
    let text = match name {
        "balance_transaction" => include_str!("../../../fixtures/stripe/balance_transaction.json"),
        "charge" => include_str!("../../../fixtures/stripe/charge.json"),
        "refund" => include_str!("../../../fixtures/stripe/refund.json"),
        "dispute" => include_str!("../../../fixtures/stripe/dispute.json"),
        "payout" => include_str!("../../../fixtures/stripe/payout.json"),
        "event" => include_str!("../../../fixtures/stripe/event.json"),
        "list" => include_str!("../../../fixtures/stripe/list.json"),
        "balance" => include_str!("../../../fixtures/stripe/balance.json"),
        "error" => include_str!("../../../fixtures/stripe/error.json"),
        "account" => include_str!("../../../fixtures/stripe/account.json"),
        other => panic!("no Stripe fixture {other:?}"),
    };
    let mut value: Value = serde_json::from_str(text).expect("fixtures are JSON");
    if let Some(object) = value.as_object_mut() {
        object.remove("_source");
    }
    value
}

/// What the fake answers instead of the object, once per matching request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// 429 with `Retry-After: secs`.
    RateLimited { retry_after_secs: u64 },
    /// 500 with Stripe's error body.
    ServerError,
    /// No answer for this long (then the object).
    Stall(Duration),
    /// 401, as for a revoked key.
    Unauthorized,
    /// The usual answer (so a later request of the queue is the one that fails).
    Pass,
}

/// What the fake answers at random once told to ([`FakeStripe::inject`]): the ways Stripe's API,
/// or the way to it, fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Injected {
    /// 429 with `Retry-After: 1`.
    RateLimited,
    /// 429 with no `Retry-After`.
    RateLimitedBare,
    /// 500 with Stripe's error body.
    ServerError,
    /// No answer for [`Injection::stall`] (then the object, to a client that may have gone).
    Stall,
    /// 200 and the first bytes of the object, then the connection is dropped.
    Reset,
}

impl Injected {
    pub const ALL: [Injected; 5] = [
        Injected::RateLimited,
        Injected::RateLimitedBare,
        Injected::ServerError,
        Injected::Stall,
        Injected::Reset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Injected::RateLimited => "rate_limited",
            Injected::RateLimitedBare => "rate_limited_without_retry_after",
            Injected::ServerError => "server_error",
            Injected::Stall => "stall",
            Injected::Reset => "reset_mid_body",
        }
    }
}

/// Random faults: `per_mille` of the requests the rate limits let through fail, each with one
/// of `kinds` drawn evenly, from a generator seeded with `seed` (one seed, one sequence).
#[derive(Clone, Debug)]
pub struct Injection {
    pub per_mille: u32,
    pub kinds: Vec<Injected>,
    pub stall: Duration,
    pub seed: u64,
}

/// A request the fake received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// When it arrived, in Unix seconds.
    pub at: i64,
    pub path: String,
    pub query: String,
    pub account: Option<String>,
    pub version: Option<String>,
}

#[derive(Debug, Default)]
struct Objects {
    /// Balance transactions by (connected account, id).
    transactions: HashMap<(Option<String>, String), Value>,
    /// Refunds by (account, charge), in creation order.
    refunds: HashMap<(Option<String>, String), Vec<Value>>,
    /// The balance transaction ids of each (account, payout), in listing order.
    payouts: HashMap<(Option<String>, String), Vec<String>>,
    /// Every balance transaction by (account, created, id): Stripe's listing order, newest
    /// first, is this one backwards.
    by_created: BTreeSet<(Option<String>, i64, String)>,
    /// The platform's connected accounts (`GET /v1/accounts`), in the order added.
    accounts: Vec<String>,
}

/// Stripe's published rate limits (docs.stripe.com/rate-limits), as the fake enforces them when
/// told to: requests a second in all, and to any one endpoint (a retrieval by id is one endpoint
/// whatever the id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    pub per_sec: u32,
    pub endpoint_per_sec: u32,
}

impl RateLimits {
    /// Live mode: 100 requests a second, 25 to any one endpoint.
    pub const LIVE: RateLimits = RateLimits {
        per_sec: 100,
        endpoint_per_sec: 25,
    };
}

/// Requests counted in the current second, in all and by endpoint.
#[derive(Debug, Default)]
struct Counted {
    second: u64,
    total: u32,
    endpoints: HashMap<String, u32>,
}

#[derive(Debug)]
struct Fake {
    key: Mutex<String>,
    /// Random faults, with their generator, while injecting.
    injection: Mutex<Option<(Injection, StdRng)>>,
    /// Random faults answered, by kind.
    injected: Mutex<BTreeMap<Injected, u64>>,
    objects: Mutex<Objects>,
    /// Faults to answer, by a fragment of the path they apply to, in order.
    faults: Mutex<Vec<(String, VecDeque<Fault>)>>,
    latency: Mutex<Duration>,
    synthesize: std::sync::atomic::AtomicBool,
    seen: Mutex<Vec<Seen>>,
    requests: std::sync::atomic::AtomicU64,
    /// Requests received, by the Unix second they arrived in.
    by_second: Mutex<std::collections::BTreeMap<u64, u32>>,
    limits: Mutex<Option<RateLimits>>,
    counted: Mutex<Counted>,
    rate_limited: std::sync::atomic::AtomicU64,
    balance: Mutex<HashMap<Option<String>, Value>>,
}

/// A running fake; it stops when dropped.
#[derive(Debug)]
pub struct FakeStripe {
    addr: SocketAddr,
    fake: Arc<Fake>,
    stop: CancellationToken,
}

/// How many requests the fake keeps for [`FakeStripe::seen`].
const SEEN_MAX: usize = 10_000;

impl FakeStripe {
    /// Starts on 127.0.0.1, on a free port, accepting `key` as the API key.
    pub async fn start(key: &str) -> std::io::Result<FakeStripe> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let fake = Arc::new(Fake {
            key: Mutex::new(key.to_owned()),
            injection: Mutex::default(),
            injected: Mutex::default(),
            objects: Mutex::default(),
            faults: Mutex::default(),
            latency: Mutex::new(Duration::ZERO),
            synthesize: false.into(),
            seen: Mutex::default(),
            requests: 0.into(),
            by_second: Mutex::default(),
            limits: Mutex::default(),
            counted: Mutex::default(),
            rate_limited: 0.into(),
            balance: Mutex::default(),
        });
        let router = Router::new()
            .route("/v1/balance_transactions", get(list_transactions))
            .route("/v1/balance_transactions/{id}", get(transaction))
            .route("/v1/refunds", get(list_refunds))
            .route("/v1/balance", get(balance))
            .route("/v1/accounts", get(list_accounts))
            .with_state(fake.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await;
        });
        Ok(FakeStripe { addr, fake, stop })
    }

    /// The base URL to configure as a source's `api_base`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves `transaction` (a balance transaction object) to the platform (`account: None`)
    /// or to a connected account.
    pub fn add_transaction(&self, account: Option<&str>, transaction: Value) {
        let id = id_of(&transaction);
        let created = transaction["created"].as_i64().unwrap_or_default();
        let account = account.map(str::to_owned);
        let mut objects = self.objects();
        if let Some(old) = objects.transactions.get(&(account.clone(), id.clone())) {
            let old_created = old["created"].as_i64().unwrap_or_default();
            objects
                .by_created
                .remove(&(account.clone(), old_created, id.clone()));
        }
        objects
            .by_created
            .insert((account.clone(), created, id.clone()));
        objects.transactions.insert((account, id), transaction);
    }

    /// Makes `account` one of the platform's connected accounts (`GET /v1/accounts` lists it);
    /// its balance transactions are those added for it.
    pub fn add_account(&self, account: &str) {
        let mut objects = self.objects();
        if !objects.accounts.iter().any(|a| a == account) {
            objects.accounts.push(account.to_owned());
        }
    }

    /// Stripe no longer knows the balance transaction `id`: it is neither listed nor answered.
    pub fn remove_transaction(&self, account: Option<&str>, id: &str) {
        let key = (account.map(str::to_owned), id.to_owned());
        let mut objects = self.objects();
        if let Some(old) = objects.transactions.remove(&key) {
            let created = old["created"].as_i64().unwrap_or_default();
            objects.by_created.remove(&(key.0, created, key.1));
        }
    }

    /// Answers `GET /v1/balance` for the platform (`account: None`) or a connected account
    /// with this balance object (by default, the balance its transactions add up to).
    pub fn set_balance(&self, account: Option<&str>, balance: Value) {
        if let Ok(mut all) = self.fake.balance.lock() {
            all.insert(account.map(str::to_owned), balance);
        }
    }

    /// Enforces Stripe's rate limits from now on: a request over them is answered 429 with
    /// `Retry-After`, as Stripe answers it.
    pub fn enforce(&self, limits: RateLimits) {
        if let Ok(mut current) = self.fake.limits.lock() {
            *current = Some(limits);
        }
    }

    /// How many requests were answered 429 for being over the enforced limits.
    pub fn rate_limited(&self) -> u64 {
        self.fake
            .rate_limited
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Lists `refund` among `charge`'s refunds; its `balance_transaction` (an id) must be added
    /// with [`Self::add_transaction`].
    pub fn add_refund(&self, account: Option<&str>, charge: &str, refund: Value) {
        self.objects()
            .refunds
            .entry((account.map(str::to_owned), charge.to_owned()))
            .or_default()
            .push(refund);
    }

    /// Lists these balance transactions (already added) as `payout`'s, in this order.
    pub fn set_payout_listing(&self, account: Option<&str>, payout: &str, transactions: &[&str]) {
        self.objects().payouts.insert(
            (account.map(str::to_owned), payout.to_owned()),
            transactions.iter().map(|t| (*t).to_owned()).collect(),
        );
    }

    /// Answers the next requests whose path contains `path_fragment` with these faults, one
    /// each, before serving normally again.
    pub fn fail_next(&self, path_fragment: &str, faults: Vec<Fault>) {
        if let Ok(mut all) = self.fake.faults.lock() {
            all.push((path_fragment.to_owned(), faults.into()));
        }
    }

    /// Fails requests at random from now on, as `injection` says (`None`: no more).
    pub fn inject(&self, injection: Option<Injection>) {
        if let Ok(mut current) = self.fake.injection.lock() {
            *current = injection.map(|injection| {
                let rng = StdRng::seed_from_u64(injection.seed);
                (injection, rng)
            });
        }
    }

    /// Random faults answered so far, by kind (every kind, zero included).
    pub fn injected(&self) -> BTreeMap<&'static str, u64> {
        let counted = self.fake.injected.lock().map(|c| c.clone()).unwrap_or_default();
        Injected::ALL
            .iter()
            .map(|kind| (kind.name(), counted.get(kind).copied().unwrap_or(0)))
            .collect()
    }

    /// Refuses the key accepted so far (401 for every request), as when it is revoked; `key`
    /// is accepted instead (the key settle will be given once it is fixed).
    pub fn revoke_key(&self, key: &str) {
        if let Ok(mut accepted) = self.fake.key.lock() {
            *accepted = key.to_owned();
        }
    }

    /// Every answer waits this long first.
    pub fn set_latency(&self, latency: Duration) {
        if let Ok(mut current) = self.fake.latency.lock() {
            *current = latency;
        }
    }

    /// Answers an unknown `txn_<suffix>` with a made-up charge of `ch_<suffix>`
    /// ([`synthetic_charge_amount`]), for load runs.
    pub fn synthesize_charges(&self, on: bool) {
        self.fake
            .synthesize
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The requests received so far (the first [`SEEN_MAX`]).
    pub fn seen(&self) -> Vec<Seen> {
        self.fake.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// How many requests were received in all.
    pub fn requests(&self) -> u64 {
        self.fake
            .requests
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many requests arrived in each Unix second from `since` on (seconds with none
    /// included as 0), oldest first.
    pub fn requests_by_second(&self, since: u64) -> Vec<u32> {
        let Ok(by_second) = self.fake.by_second.lock() else {
            return Vec::new();
        };
        let last = by_second.keys().next_back().copied().unwrap_or(since);
        (since..=last)
            .map(|second| by_second.get(&second).copied().unwrap_or(0))
            .collect()
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.fake
            .objects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for FakeStripe {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The amount (in cents) of the made-up charge behind `txn_<suffix>`: from 5.00 to 504.99 USD,
/// the same for the same id every time.
pub fn synthetic_charge_amount(transaction_id: &str) -> i64 {
    let hash = transaction_id
        .bytes()
        .fold(1_469_598_103_934_665_603u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(1_099_511_628_211)
        });
    500 + i64::try_from(hash % 50_000).unwrap_or(0)
}

/// The made-up charge balance transaction for `txn_<suffix>`: USD, Stripe's 2.9 % + 30 cents.
pub fn synthetic_charge(transaction_id: &str) -> Option<Value> {
    let suffix = transaction_id.strip_prefix("txn_")?;
    let amount = synthetic_charge_amount(transaction_id);
    let fee = (amount * 29 + 500) / 1000 + 30;
    let mut transaction = fixture("balance_transaction");
    let fields = [
        ("id", json!(transaction_id)),
        ("amount", json!(amount)),
        ("fee", json!(fee)),
        ("net", json!(amount - fee)),
        ("currency", json!("usd")),
        ("exchange_rate", Value::Null),
        ("reporting_category", json!("charge")),
        ("type", json!("charge")),
        ("source", json!(format!("ch_{suffix}"))),
        ("created", json!(1_764_500_000)),
        ("available_on", json!(1_764_700_000)),
        (
            "fee_details",
            json!([{"amount": fee, "application": null, "currency": "usd",
                    "description": "Stripe processing fees", "type": "stripe_fee"}]),
        ),
    ];
    for (key, value) in fields {
        transaction[key] = value;
    }
    Some(transaction)
}

fn id_of(object: &Value) -> String {
    object["id"].as_str().unwrap_or_default().to_owned()
}

/// What every request goes through: the key, the latency, a scripted fault.
async fn admit(fake: &Fake, headers: &HeaderMap, path: &str, query: &str) -> Option<Response> {
    fake.requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut by_second) = fake.by_second.lock() {
        *by_second.entry(unix_second()).or_default() += 1;
    }
    let header_text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Ok(mut seen) = fake.seen.lock()
        && seen.len() < SEEN_MAX
    {
        seen.push(Seen {
            at: chrono::Utc::now().timestamp(),
            path: path.to_owned(),
            query: query.to_owned(),
            account: header_text("stripe-account"),
            version: header_text("stripe-version"),
        });
    }
    if over_limits(fake, path) {
        fake.rate_limited
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Some(rate_limited(Some(1)));
    }
    let latency = fake.latency.lock().map(|l| *l).unwrap_or_default();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some((kind, stall)) = draw(fake) {
        if let Ok(mut injected) = fake.injected.lock() {
            *injected.entry(kind).or_default() += 1;
        }
        match kind {
            Injected::RateLimited => return Some(rate_limited(Some(1))),
            Injected::RateLimitedBare => return Some(rate_limited(None)),
            Injected::ServerError => return Some(server_error()),
            Injected::Stall => tokio::time::sleep(stall).await,
            Injected::Reset => return Some(reset_mid_body()),
        }
    }
    let fault = fake.faults.lock().ok().and_then(|mut faults| {
        faults
            .iter_mut()
            .find(|(fragment, queue)| path.contains(fragment.as_str()) && !queue.is_empty())
            .and_then(|(_, queue)| queue.pop_front())
    });
    match fault {
        Some(Fault::RateLimited { retry_after_secs }) => {
            return Some(rate_limited(Some(retry_after_secs)));
        }
        Some(Fault::ServerError) => return Some(server_error()),
        Some(Fault::Stall(pause)) => tokio::time::sleep(pause).await,
        Some(Fault::Unauthorized) => return Some(unauthorized()),
        Some(Fault::Pass) | None => {}
    }
    let accepted = fake.key.lock().map(|k| k.clone()).unwrap_or_default();
    let authorised = header_text("authorization")
        .and_then(|value| value.strip_prefix("Bearer ").map(str::to_owned))
        .is_some_and(|key| key == accepted);
    (!authorised).then(unauthorized)
}

/// A random fault for this request, if one is drawn, with how long a stall lasts.
fn draw(fake: &Fake) -> Option<(Injected, Duration)> {
    let mut injection = fake.injection.lock().ok()?;
    let (injection, rng) = injection.as_mut()?;
    if injection.kinds.is_empty() || rng.random_range(0..1_000) >= injection.per_mille {
        return None;
    }
    let kind = injection.kinds[rng.random_range(0..injection.kinds.len())];
    Some((kind, injection.stall))
}

/// A 200 whose body stops after its first bytes: the connection is dropped mid-body, as when a
/// proxy or the network resets it.
fn reset_mid_body() -> Response {
    let cut = futures::stream::iter([
        Ok(Bytes::from_static(b"{\n  \"id\": \"txn_")),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset mid-body",
        )),
    ]);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(cut),
    )
        .into_response()
}

/// Counts a request against the enforced limits (in whole seconds of the wall clock): whether
/// it is over them. A request over them is not counted.
fn unix_second() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn over_limits(fake: &Fake, path: &str) -> bool {
    let Some(limits) = fake.limits.lock().ok().and_then(|l| *l) else {
        return false;
    };
    // `/v1/balance_transactions/txn_1` and `/v1/balance_transactions/txn_2` are one endpoint.
    let endpoint = match path.match_indices('/').nth(3) {
        Some((at, _)) => format!("{}/:id", &path[..at]),
        None => path.to_owned(),
    };
    let second = unix_second();
    let Ok(mut counted) = fake.counted.lock() else {
        return false;
    };
    if counted.second != second {
        *counted = Counted {
            second,
            ..Counted::default()
        };
    }
    let on_endpoint = counted.endpoints.get(&endpoint).copied().unwrap_or(0);
    if counted.total >= limits.per_sec || on_endpoint >= limits.endpoint_per_sec {
        return true;
    }
    counted.total += 1;
    counted.endpoints.insert(endpoint, on_endpoint + 1);
    false
}

/// 429, with `Retry-After: secs` when given.
fn rate_limited(retry_after_secs: Option<u64>) -> Response {
    let body = error_body("rate_limit", "Too many requests hit the API too quickly.");
    match retry_after_secs {
        Some(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, secs.to_string())],
            body,
        )
            .into_response(),
        None => (StatusCode::TOO_MANY_REQUESTS, body).into_response(),
    }
}

fn server_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        error_body("api_error", "Something went wrong on Stripe's end."),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        error_body(
            "invalid_request_error",
            "Invalid API Key provided: rk_test_****",
        ),
    )
        .into_response()
}

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        error_body("invalid_request_error", &format!("No such {what}")),
    )
        .into_response()
}

/// Stripe's error body (`fixtures/stripe/error.json`).
fn error_body(kind: &str, message: &str) -> axum::Json<Value> {
    let mut body = fixture("error");
    body["error"]["type"] = json!(kind);
    body["error"]["message"] = json!(message);
    if kind != "invalid_request_error" {
        body["error"]["code"] = Value::Null;
    }
    axum::Json(body)
}

fn account(headers: &HeaderMap) -> Option<String> {
    headers
        .get("stripe-account")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn transaction(
    State(fake): State<Arc<Fake>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/v1/balance_transactions/{id}");
    if let Some(refused) = admit(&fake, &headers, &path, "").await {
        return refused;
    }
    match lookup(&fake, account(&headers), &id) {
        Some(transaction) => axum::Json(transaction).into_response(),
        None => not_found(&format!("balance transaction: '{id}'")),
    }
}

fn lookup(fake: &Fake, account: Option<String>, id: &str) -> Option<Value> {
    let found = fake
        .objects
        .lock()
        .ok()?
        .transactions
        .get(&(account.clone(), id.to_owned()))
        .cloned();
    let synthesize = fake.synthesize.load(std::sync::atomic::Ordering::Relaxed);
    found.or_else(|| {
        (synthesize && account.is_none())
            .then(|| synthetic_charge(id))
            .flatten()
    })
}

/// The pairs of a query string (`expand[]` may repeat).
fn pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(text.get(i + 1..i + 3).unwrap_or("zz"), 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn param<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// One page of `items` (each with an `id`) after `starting_after`, Stripe's way.
fn page(url: &str, items: Vec<Value>, pairs: &[(String, String)]) -> Response {
    let limit: usize = param(pairs, "limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let start = match param(pairs, "starting_after") {
        Some(after) => match items.iter().position(|i| id_of(i) == after) {
            Some(position) => position + 1,
            None => return not_found(&format!("object: '{after}'")),
        },
        None => 0,
    };
    let rest: Vec<Value> = items.into_iter().skip(start).collect();
    let has_more = rest.len() > limit;
    let mut list = fixture("list");
    list["url"] = json!(url);
    list["has_more"] = json!(has_more);
    list["data"] = Value::Array(rest.into_iter().take(limit).collect());
    axum::Json(list).into_response()
}

async fn list_transactions(
    State(fake): State<Arc<Fake>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.unwrap_or_default();
    if let Some(refused) = admit(&fake, &headers, "/v1/balance_transactions", &query).await {
        return refused;
    }
    let pairs = pairs(&query);
    let account = account(&headers);
    let Some(payout) = param(&pairs, "payout") else {
        return created_page(&fake, account, &pairs);
    };
    let ids = fake.objects.lock().ok().and_then(|o| {
        o.payouts
            .get(&(account.clone(), payout.to_owned()))
            .cloned()
    });
    let Some(ids) = ids else {
        return not_found(&format!("payout: '{payout}'"));
    };
    let items: Vec<Value> = ids
        .iter()
        .filter_map(|id| lookup(&fake, account.clone(), id))
        .collect();
    page("/v1/balance_transactions", items, &pairs)
}

/// One page of the balance transactions created in `[created[gte], created[lt])`, newest first
/// (Stripe's order), after `starting_after`.
fn created_page(fake: &Fake, account: Option<String>, pairs: &[(String, String)]) -> Response {
    let bound = |key: &str, default: i64| {
        param(pairs, key)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(default)
    };
    let (from, to) = (bound("created[gte]", i64::MIN), bound("created[lt]", i64::MAX));
    let limit: usize = param(pairs, "limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let Ok(objects) = fake.objects.lock() else {
        return not_found("object");
    };
    let upper = match param(pairs, "starting_after") {
        Some(after) => match objects.transactions.get(&(account.clone(), after.to_owned())) {
            Some(found) => {
                let created = found["created"].as_i64().unwrap_or_default();
                std::ops::Bound::Excluded((account.clone(), created, after.to_owned()))
            }
            None => return not_found(&format!("object: '{after}'")),
        },
        None => std::ops::Bound::Excluded((account.clone(), to, String::new())),
    };
    let lowest = (account.clone(), from, String::new());
    let empty = match &upper {
        std::ops::Bound::Excluded(upper) => *upper <= lowest,
        _ => false,
    };
    let mut items = Vec::with_capacity(limit);
    let mut has_more = false;
    let listed = match empty {
        true => None,
        false => Some(
            objects
                .by_created
                .range((std::ops::Bound::Included(lowest), upper))
                .rev(),
        ),
    };
    for (_, created, id) in listed.into_iter().flatten() {
        if *created >= to {
            continue;
        }
        if items.len() == limit {
            has_more = true;
            break;
        }
        if let Some(transaction) = objects.transactions.get(&(account.clone(), id.clone())) {
            items.push(transaction.clone());
        }
    }
    let mut list = fixture("list");
    list["url"] = json!("/v1/balance_transactions");
    list["has_more"] = json!(has_more);
    list["data"] = Value::Array(items);
    axum::Json(list).into_response()
}

async fn balance(State(fake): State<Arc<Fake>>, headers: HeaderMap) -> Response {
    if let Some(refused) = admit(&fake, &headers, "/v1/balance", "").await {
        return refused;
    }
    let account = account(&headers);
    let set = fake
        .balance
        .lock()
        .ok()
        .and_then(|all| all.get(&account).cloned());
    axum::Json(set.unwrap_or_else(|| computed_balance(fake.as_ref(), &account))).into_response()
}

/// The balance Stripe would hold after the transactions the fake was given: each one's net, in
/// `pending` until its `available_on` and in `available` from then.
fn computed_balance(fake: &Fake, account: &Option<String>) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .try_into()
        .unwrap_or(i64::MAX);
    let mut available: std::collections::BTreeMap<String, i64> = Default::default();
    let mut pending: std::collections::BTreeMap<String, i64> = Default::default();
    if let Ok(objects) = fake.objects.lock() {
        for ((owner, _), transaction) in &objects.transactions {
            if owner != account {
                continue;
            }
            let currency = transaction["currency"].as_str().unwrap_or("usd").to_owned();
            let net = transaction["net"].as_i64().unwrap_or_default();
            let bucket = match transaction["available_on"].as_i64() {
                Some(on) if on > now => &mut pending,
                _ => &mut available,
            };
            *bucket.entry(currency).or_default() += net;
        }
    }
    let funds = |bucket: std::collections::BTreeMap<String, i64>| {
        Value::Array(
            bucket
                .into_iter()
                .map(|(currency, amount)| json!({"amount": amount, "currency": currency, "source_types": {"card": amount}}))
                .collect(),
        )
    };
    let mut balance = fixture("balance");
    balance["available"] = funds(available);
    balance["pending"] = funds(pending);
    balance["connect_reserved"] = json!([]);
    balance
}

/// The platform's connected accounts, newest first (the last added first), as Stripe lists
/// them. A connected account has none.
async fn list_accounts(
    State(fake): State<Arc<Fake>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.unwrap_or_default();
    if let Some(refused) = admit(&fake, &headers, "/v1/accounts", &query).await {
        return refused;
    }
    let pairs = pairs(&query);
    let ids = match account(&headers) {
        Some(_) => Vec::new(),
        None => fake
            .objects
            .lock()
            .map(|o| o.accounts.clone())
            .unwrap_or_default(),
    };
    let items = ids
        .iter()
        .rev()
        .map(|id| {
            let mut account = fixture("account");
            account["id"] = json!(id);
            account
        })
        .collect();
    page("/v1/accounts", items, &pairs)
}

async fn list_refunds(
    State(fake): State<Arc<Fake>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.unwrap_or_default();
    if let Some(refused) = admit(&fake, &headers, "/v1/refunds", &query).await {
        return refused;
    }
    let pairs = pairs(&query);
    let account = account(&headers);
    let charge = param(&pairs, "charge").unwrap_or_default().to_owned();
    let refunds = fake
        .objects
        .lock()
        .ok()
        .and_then(|o| o.refunds.get(&(account.clone(), charge)).cloned())
        .unwrap_or_default();
    let expanded: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "expand[]")
        .filter_map(|(_, v)| v.strip_prefix("data."))
        .collect();
    let items = refunds
        .into_iter()
        .map(|mut refund| {
            for field in &expanded {
                if let Some(id) = refund[*field].as_str().map(str::to_owned)
                    && let Some(transaction) = lookup(&fake, account.clone(), &id)
                {
                    refund[*field] = transaction;
                }
            }
            refund
        })
        .collect();
    page("/v1/refunds", items, &pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode() {
        let got = pairs("charge=ch_1&expand%5B%5D=data.balance_transaction&limit=100");
        assert_eq!(
            got,
            [
                ("charge".into(), "ch_1".into()),
                ("expand[]".into(), "data.balance_transaction".into()),
                ("limit".into(), "100".into())
            ]
        );
    }

    #[test]
    fn synthetic_charges_add_up_and_are_stable() {
        let a = synthetic_charge("txn_load_1").expect("charge");
        let b = synthetic_charge("txn_load_1").expect("charge");
        assert_eq!(a, b);
        let (amount, fee, net) = (
            a["amount"].as_i64().unwrap_or_default(),
            a["fee"].as_i64().unwrap_or_default(),
            a["net"].as_i64().unwrap_or_default(),
        );
        assert_eq!(amount - fee, net);
        assert_eq!(a["source"], "ch_load_1");
        assert!(synthetic_charge("ch_1").is_none());
    }
}
