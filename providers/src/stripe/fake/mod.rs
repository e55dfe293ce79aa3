//! A fake of Stripe's API, for tests, benchmarks and `settle demo` (which must run offline): a
//! small HTTP server on a real socket serving the read endpoints settle calls, in the shapes
//! Stripe publishes (`fixtures/stripe`, each file naming its source). It is not Stripe: it holds
//! only the objects it is given, and can be told to answer slowly, to fail (429 with
//! `Retry-After`, 500, a stall, 401), to fail at random at a given rate (429 with and without
//! `Retry-After`, 500, a stall, a connection reset mid-body: [`FakeStripe::inject`]), to refuse
//! the key it accepted ([`FakeStripe::revoke_key`]), or to make up a charge's balance
//! transaction for any id of the form `txn_<suffix>` (for load runs, see
//! [`synthetic_charge_amount`]).

mod admit;
mod routes;

use routes::*;

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
        "balance_transaction" => include_str!("../../../../fixtures/stripe/balance_transaction.json"),
        "charge" => include_str!("../../../../fixtures/stripe/charge.json"),
        "refund" => include_str!("../../../../fixtures/stripe/refund.json"),
        "dispute" => include_str!("../../../../fixtures/stripe/dispute.json"),
        "payout" => include_str!("../../../../fixtures/stripe/payout.json"),
        "event" => include_str!("../../../../fixtures/stripe/event.json"),
        "list" => include_str!("../../../../fixtures/stripe/list.json"),
        "balance" => include_str!("../../../../fixtures/stripe/balance.json"),
        "error" => include_str!("../../../../fixtures/stripe/error.json"),
        "account" => include_str!("../../../../fixtures/stripe/account.json"),
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
