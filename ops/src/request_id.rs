//! Every request gets an id: the caller's `x-request-id` when it is a sane one (1 to 64 of
//! `A-Za-z0-9-_`), else a fresh ULID. tower-http's request-id layers set it and echo it in the
//! response's `x-request-id`; its trace layer puts it on the request's log span (with the method
//! and path), which every log line of the request carries. Only the sanity check is settle's own.

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use tower::ServiceBuilder;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// A fresh ULID for a request that brought no usable id.
#[derive(Clone, Copy, Debug, Default)]
struct Ulids;

impl MakeRequestId for Ulids {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        HeaderValue::from_str(&ulid::Ulid::generate().to_string())
            .ok()
            .map(RequestId::new)
    }
}

fn usable(id: &HeaderValue) -> bool {
    (1..=64).contains(&id.len())
        && id
            .as_bytes()
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

/// A caller's id that is not usable is dropped, so a fresh one is made.
async fn drop_unusable(mut request: Request) -> Request {
    if request.headers().get(&HEADER).is_some_and(|id| !usable(id)) {
        request.headers_mut().remove(&HEADER);
    }
    request
}

/// `router` with request ids on every request, its span and its response.
pub fn layer(router: Router) -> Router {
    router.layer(
        ServiceBuilder::new()
            .layer(axum::middleware::map_request(drop_unusable))
            .layer(SetRequestIdLayer::new(HEADER, Ulids))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(|request: &axum::http::Request<_>| {
                        let id = request
                            .headers()
                            .get(&HEADER)
                            .and_then(|id| id.to_str().ok())
                            .unwrap_or_default();
                        tracing::info_span!("request", request_id = %id, method = %request.method(), path = %request.uri().path())
                    })
                    .on_request(())
                    .on_response(())
                    .on_body_chunk(())
                    .on_eos(())
                    .on_failure(()),
            )
            .layer(PropagateRequestIdLayer::new(HEADER)),
    )
}
