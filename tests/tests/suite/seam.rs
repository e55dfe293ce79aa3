//! A provider written outside `providers`, against the seam's traits alone, run end to end: its
//! deliveries verified and recorded by the real ingress through a real socket, its triggers
//! resolved through its own API (a fake on a real socket) by real workers on PostgreSQL, each of
//! its movements posted once and tied to the payout that paid it out. Nothing of settle knows
//! it: a provider is its module (ARCHITECTURE.md, "Adding a provider").

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Path, State};
use futures::future::BoxFuture;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use ledger::finance::{JournalFilter, ReconciliationStatus};
use ledger::movement::{Compared, Counter, Movement, MovementParts};
use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::trigger::{Named, Trigger};
use ledger::{
    Amount, Content, Currency, ExternalId, Kind, MovementId, NewEvent, PayoutId, PostError,
    PostingRules, ProviderError, SourceName, Store, StoreOptions,
};
use providers::demo::{DemoError, DemoPart};
use providers::{
    Adapted, Ignore, Key, Provider, Receive, Rejection, Resolution, Resolve, Sample, Secret,
    Section, SectionError, SignatureError, Unparseable,
};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use tests::db::TestDb;

/// The toy provider: deliveries `{"id", "type", "payout"}` signed with `toy-signature: hex
/// HMAC-SHA256(secret, body)`; a `payout.sent` names a payout whose items its API lists.
struct Toy;

const TAG: &str = "toy_payout";

impl Provider for Toy {
    fn name(&self) -> &'static str {
        "toy"
    }

    fn keys(&self) -> &'static [Key] {
        const KEYS: &[Key] = &[Key::plain("api_base")];
        KEYS
    }

    fn trigger_tags(&self) -> &'static [&'static str] {
        &[TAG]
    }

    fn receiver(&self, section: &Section<'_>) -> Result<Arc<dyn Receive>, SectionError> {
        let secret = section
            .secrets
            .first()
            .ok_or_else(|| SectionError::key("secrets", "at least one secret is required"))?;
        Ok(Arc::new(Receiver {
            source: section.source.clone(),
            secret: secret.expose().as_bytes().to_vec(),
        }))
    }

    fn resolver(&self, section: &Section<'_>) -> Result<Option<Arc<dyn Resolve>>, SectionError> {
        let base = section
            .get::<String>("api_base")?
            .ok_or_else(|| SectionError::key("api_base", "api_base is required"))?;
        Ok(Some(Arc::new(Resolver {
            source: section.source.clone(),
            base,
            http: reqwest::Client::new(),
        })))
    }

    fn sample(&self, secret: &str, id: &str, _minor: i64, _conflicting: bool) -> Sample {
        delivery(secret, id, "payout.sent", &format!("tp_{id}"))
    }

    fn demo(&self) -> BoxFuture<'static, Result<Box<dyn DemoPart>, DemoError>> {
        Box::pin(async { Err("the toy provider has no demo".into()) })
    }
}

/// A delivery of event `id` of type `event_type` about `payout`, signed.
fn delivery(secret: &str, id: &str, event_type: &str, payout: &str) -> Sample {
    let body = json!({"id": id, "type": event_type, "payout": payout}).to_string();
    Sample {
        headers: vec![("toy-signature".into(), signature(secret.as_bytes(), &body))],
        body,
    }
}

fn signature(secret: &[u8], body: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("any key length");
    mac.update(body.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[derive(Debug)]
struct Receiver {
    source: SourceName,
    secret: Vec<u8>,
}

impl Receive for Receiver {
    fn receive(&self, headers: &HeaderMap, body: &[u8], _now: i64) -> Result<Adapted, Rejection> {
        let sent = headers
            .get("toy-signature")
            .and_then(|v| v.to_str().ok())
            .ok_or(SignatureError::Missing("toy-signature"))?;
        let sent = hex::decode(sent).map_err(|_| SignatureError::Mismatch)?;
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret)
            .map_err(|_| SignatureError::Mismatch)?;
        mac.update(body);
        mac.verify_slice(&sent)
            .map_err(|_| SignatureError::Mismatch)?;
        let value: Value =
            serde_json::from_slice(body).map_err(|_| Unparseable("body is not JSON"))?;
        let text = |field: &str| value.get(field).and_then(Value::as_str).unwrap_or("");
        let external_id =
            ExternalId::parse(text("id")).map_err(|_| Unparseable("no usable `id`"))?;
        if text("type") != "payout.sent" {
            return Ok(Adapted::Ignored(Ignore::NotSettlement));
        }
        let named = Named {
            trigger: Trigger::new(TAG, json!({"payout": text("payout")})),
            kind: "payout.sent".into(),
            object: text("payout").into(),
        };
        Ok(Adapted::Events(vec![NewEvent {
            source: self.source.clone(),
            external_id,
            payload: String::from_utf8_lossy(body).into_owned(),
            content: Content::Named(named),
        }]))
    }
}

#[derive(Debug)]
struct Resolver {
    source: SourceName,
    base: String,
    http: reqwest::Client,
}

impl Resolve for Resolver {
    fn resolve<'a>(
        &'a self,
        trigger: &'a Trigger,
        accounts: &'a Accounts,
    ) -> BoxFuture<'a, Result<Resolution, PostError>> {
        Box::pin(async move {
            if trigger.tag() != TAG {
                return Err(PostError::CorruptEvent(format!(
                    "no trigger {}",
                    trigger.tag()
                )));
            }
            let payout = trigger.document()["payout"].as_str().unwrap_or_default();
            let unavailable = |e: reqwest::Error| ProviderError::Unavailable {
                detail: e.to_string(),
                retry_after_ms: None,
            };
            let listing: Value = self
                .http
                .get(format!("{}/payouts/{payout}", self.base))
                .send()
                .await
                .map_err(unavailable)?
                .json()
                .await
                .map_err(unavailable)?;
            let mut entries = Vec::new();
            for item in listing["items"].as_array().into_iter().flatten() {
                let movement = movement(&self.source, payout, item)
                    .map_err(|e| PostError::from(ProviderError::Facts(e)))?;
                let draft = posting::draft_movement(&movement, accounts);
                entries.push(MovementEntry::new(movement, draft));
            }
            Ok(Resolution::Whole(Resolved {
                entries,
                payout: Some(
                    PayoutId::parse(payout).map_err(|e| PostError::CorruptEvent(e.to_string()))?,
                ),
                partial: false,
            }))
        })
    }
}

/// One item of payout `payout`'s listing: `{"id", "kind": "sale" | "payout", "amount", "fee"}`,
/// in EUR; the payout's own item is the payout.
fn movement(source: &SourceName, payout: &str, item: &Value) -> Result<Movement, String> {
    let eur = Currency::parse("EUR").map_err(|e| e.to_string())?;
    let text = |field: &str| item[field].as_str().unwrap_or_default().to_owned();
    let amount = Amount::parse(&text("amount"), eur).map_err(|e| e.to_string())?;
    let fee = Amount::parse(&text("fee"), eur).map_err(|e| e.to_string())?;
    let net = amount.checked_sub(fee).ok_or("overflow")?;
    let (kind, counter) = match text("kind").as_str() {
        "sale" => (Kind::ChargeSettled, Counter::Sales),
        "payout" => (Kind::PayoutPaid, Counter::Bank),
        other => return Err(format!("unknown kind {other}")),
    };
    Movement::new(MovementParts {
        source_key: format!("{source}/toy_item/{}", text("id")),
        id: MovementId::parse(&text("id")).map_err(|e| e.to_string())?,
        kind,
        counter,
        currency: eur,
        amount,
        fee,
        fees: Vec::new(),
        net,
        occurred_at: chrono::DateTime::from_timestamp(1_764_547_200, 0).ok_or("time")?,
        payout_id: match kind {
            Kind::PayoutPaid => Some(PayoutId::parse(payout).map_err(|e| e.to_string())?),
            _ => None,
        },
        reference: None,
        details: json!({"net": net.to_string(), "currency": "EUR"}),
        provider_category: text("kind"),
        counter_amount: None,
        compared: Compared::Everything,
    })
    .map_err(|e| e.to_string())
}

/// The toy API's state: each payout's listing, and the requests it answered.
type Api = (Arc<HashMap<String, Value>>, Arc<AtomicUsize>);

async fn listing(
    State((payouts, requests)): State<Api>,
    Path(id): Path<String>,
) -> axum::Json<Value> {
    requests.fetch_add(1, Ordering::SeqCst);
    axum::Json(payouts.get(&id).cloned().unwrap_or(json!({"items": []})))
}

/// The toy's API on a real socket: each payout's items; counts the requests.
async fn fake_api(payouts: HashMap<String, Value>) -> (String, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let router = axum::Router::new()
        .route("/payouts/{id}", axum::routing::get(listing))
        .with_state((Arc::new(payouts), requests.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{addr}"), requests)
}

#[tokio::test]
async fn a_provider_outside_the_registry_records_and_posts_through_the_seam_alone() {
    let db = TestDb::create().await;
    let store = Store::connect(&db.url, &StoreOptions::default())
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    let (api, requests) = fake_api(HashMap::from([
        (
            "tp_1".to_owned(),
            json!({"items": [
                {"id": "i_1", "kind": "sale", "amount": "10.00", "fee": "0.30"},
                {"id": "i_2", "kind": "sale", "amount": "5.00", "fee": "0.15"},
                {"id": "p_1", "kind": "payout", "amount": "-14.55", "fee": "0.00"}]}),
        ),
        (
            "tp_2".to_owned(),
            json!({"items": [{"id": "i_3", "kind": "sale", "amount": "1.00", "fee": "0.00"}]}),
        ),
    ]))
    .await;

    // The provider builds its halves from its section, as the configuration would.
    let source = SourceName::parse("toys").expect("name");
    let keys = json!({"api_base": api}).as_object().cloned().expect("keys");
    let secrets = [Secret::new("toy-secret")];
    let section = Section {
        source: &source,
        secrets: &secrets,
        tolerance_secs: 300,
        keys: &keys,
    };
    let receiver = Toy.receiver(&section).expect("a receiver");
    let resolver = Toy.resolver(&section).expect("valid").expect("a resolver");
    let no_api = json!({}).as_object().cloned().expect("keys");
    let refused = Toy
        .resolver(&Section {
            keys: &no_api,
            ..section
        })
        .expect_err("api_base is required");
    assert_eq!(refused.key, Some("api_base"));

    let sources = ingress::Sources::new(vec![ingress::Source::new(source.clone(), receiver)])
        .expect("sources");
    let router = ingress::Ingress::new(
        store.clone(),
        sources,
        ingress::BODY_BYTES_MAX_DEFAULT,
        &ingress::IngressSettings::default(),
    )
    .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let settings: workers::WorkerSettings =
        toml::from_str(tests::app::FAST_WORKERS).expect("worker settings");
    let workers = workers::Workers::new(
        store.clone(),
        PostingRules::default(),
        workers::Resolvers::new(HashMap::from([(source.clone(), resolver)])),
        settings,
    )
    .expect("workers");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(workers.run(shutdown.clone()));

    let http = reqwest::Client::new();
    let send = |sample: Sample| {
        let mut request = http
            .post(format!("{base}/webhooks/toys"))
            .header("content-type", "application/json")
            .body(sample.body);
        for (name, value) in sample.headers {
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.expect("an answer");
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, answer) = send(Toy.sample("toy-secret", "1", 0, false)).await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("recorded")),
        "{answer}"
    );
    let (status, answer) = send(Toy.sample("toy-secret", "1", 0, false)).await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("duplicate")),
        "{answer}"
    );
    let (status, answer) = send(Toy.sample("another-secret", "1", 0, false)).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (401, Some("invalid_signature"))
    );
    let (status, answer) = send(delivery("toy-secret", "9", "hello", "tp_1")).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("ignored")));
    // Another event about the same payout (its movements are reached twice) and another payout.
    let (status, _) = send(delivery("toy-secret", "1b", "payout.sent", "tp_1")).await;
    assert_eq!(status, 200);
    let (status, _) = send(Toy.sample("toy-secret", "2", 0, false)).await;
    assert_eq!(status, 200);

    // The workers resolve the three events; every item posts once, the second listing of tp_1
    // finding its items posted.
    let pool = db.pool().await;
    for _ in 0..200 {
        let posted: i64 =
            sqlx::query_scalar("SELECT count(*) FROM settlement_events WHERE status = 'posted'")
                .fetch_one(&pool)
                .await
                .expect("count");
        if posted == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Read after the last event posted: its entries committed with it.
    let entries = store
        .journal(&JournalFilter::default(), None, 100)
        .await
        .expect("journal")
        .items;
    let mut movements: Vec<String> = entries.iter().map(|e| e.movement_id.clone()).collect();
    movements.sort();
    assert_eq!(movements, ["i_1", "i_2", "i_3", "p_1"], "each item once");
    assert!(requests.load(Ordering::SeqCst) >= 3);
    let reconciled = store
        .reconciliation("tp_1")
        .await
        .expect("read")
        .expect("the payout's items are tied to it");
    assert_eq!(
        (reconciled.status, reconciled.difference.as_str()),
        (ReconciliationStatus::Matched, "0.00"),
        "{reconciled:?}"
    );
    let checks = store.verify().await.expect("verify");
    assert!(
        checks.iter().all(|c| c.violations == 0),
        "{:?}",
        checks
            .iter()
            .filter(|c| c.violations > 0)
            .collect::<Vec<_>>()
    );
    shutdown.cancel();
    running
        .await
        .expect("workers stop")
        .expect("workers stop cleanly");
    store.close().await;
}
