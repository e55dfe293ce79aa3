//! Every request gets an id (the caller's `x-request-id` when it is a sane one, else a fresh
//! ULID): it is on the request's log span and echoed in the response's `x-request-id`.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

const HEADER: &str = "x-request-id";

pub async fn propagate(request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| {
            (1..=64).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_owned)
        .unwrap_or_else(|| ulid::Ulid::generate().to_string());
    let span = tracing::info_span!("request", request_id = %id, method = %request.method(), path = %request.uri().path());
    let mut response = next.run(request).instrument(span).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}
