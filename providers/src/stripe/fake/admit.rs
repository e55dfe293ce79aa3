//! What every request to the fake goes through before it is answered: the key, the latency, a
//! scripted or injected fault, the enforced rate limits; and the errors it answers with, in
//! Stripe's shape.

use super::*;

/// What every request goes through: the key, the latency, a scripted fault.
pub(super) async fn admit(fake: &Fake, headers: &HeaderMap, path: &str, query: &str) -> Option<Response> {
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
pub(super) fn draw(fake: &Fake) -> Option<(Injected, Duration)> {
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
pub(super) fn reset_mid_body() -> Response {
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
pub(super) fn unix_second() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(super) fn over_limits(fake: &Fake, path: &str) -> bool {
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
pub(super) fn rate_limited(retry_after_secs: Option<u64>) -> Response {
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

pub(super) fn server_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        error_body("api_error", "Something went wrong on Stripe's end."),
    )
        .into_response()
}

pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        error_body(
            "invalid_request_error",
            "Invalid API Key provided: rk_test_****",
        ),
    )
        .into_response()
}

pub(super) fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        error_body("invalid_request_error", &format!("No such {what}")),
    )
        .into_response()
}

/// Stripe's error body (`fixtures/stripe/error.json`).
pub(super) fn error_body(kind: &str, message: &str) -> axum::Json<Value> {
    let mut body = fixture("error");
    body["error"]["type"] = json!(kind);
    body["error"]["message"] = json!(message);
    if kind != "invalid_request_error" {
        body["error"]["code"] = Value::Null;
    }
    axum::Json(body)
}
