//! The fake's endpoints: balance transactions by id and listed (by payout, by creation time),
//! the balance, connected accounts and refunds, paged as Stripe pages them.

use super::admit::*;
use super::*;

pub(super) fn account(headers: &HeaderMap) -> Option<String> {
    headers
        .get("stripe-account")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

pub(super) async fn transaction(
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

pub(super) fn lookup(fake: &Fake, account: Option<String>, id: &str) -> Option<Value> {
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
pub(super) fn pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

pub(super) fn decode(text: &str) -> String {
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

pub(super) fn param<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// One page of `items` (each with an `id`) after `starting_after`, Stripe's way.
pub(super) fn page(url: &str, items: Vec<Value>, pairs: &[(String, String)]) -> Response {
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

pub(super) async fn list_transactions(
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
pub(super) fn created_page(fake: &Fake, account: Option<String>, pairs: &[(String, String)]) -> Response {
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

pub(super) async fn balance(State(fake): State<Arc<Fake>>, headers: HeaderMap) -> Response {
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
pub(super) fn computed_balance(fake: &Fake, account: &Option<String>) -> Value {
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
pub(super) async fn list_accounts(
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

pub(super) async fn list_refunds(
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
