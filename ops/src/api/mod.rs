//! The ops/finance HTTP API under `/api/`: bearer tokens, two roles (finance reads, ops reads and
//! acts), cursor pagination, typed JSON errors. Routes and the OpenAPI document are built
//! together from the handlers' annotations (`utoipa-axum`), so they cannot drift apart.

mod corrections;
mod dead_letters;
mod error;
mod feeds;
mod finance;
mod reads;
mod sources;

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::routing::get;
use axum::{Json, Router};
use ledger::{PostingRules, Store};
use serde::Serialize;
use utoipa::openapi::OpenApi as OpenApiDocument;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use error::ApiError;
pub use sources::SourceNames;

use crate::abuse::AuthGuard;
use crate::auth::{Caller, Tokens};
use crate::server::ClientAddress;

/// What every API handler gets.
#[derive(Clone, Debug)]
pub struct ApiState {
    pub store: Store,
    pub tokens: Arc<Tokens>,
    pub rules: PostingRules,
    /// Failed tokens, limited per client address.
    pub guard: Arc<AuthGuard>,
    /// The configured sources (the ones that may be paused).
    pub sources: SourceNames,
    /// The sources' providers: their feeds and their own ledgers.
    pub resolvers: workers::Resolvers,
}

impl FromRef<ApiState> for Store {
    fn from_ref(state: &ApiState) -> Store {
        state.store.clone()
    }
}

/// Every error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: unauthorized, forbidden, not_found, bad_request, already_decided,
    /// too_many_failed_attempts, request_timeout, unavailable, internal, provider.
    pub error: String,
    pub message: String,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "settle", description = "Ops and finance API of settle."),
    modifiers(&BearerAuth),
    tags((name = "dead letters"), (name = "events"), (name = "conflicts"), (name = "sources"), (name = "finance"))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut OpenApiDocument) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The routes and the document describing them.
fn documented(state: ApiState) -> (Router, OpenApiDocument) {
    let (router, document) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(dead_letters::list))
        .routes(routes!(dead_letters::show))
        .routes(routes!(dead_letters::requeue))
        .routes(routes!(dead_letters::discard))
        .routes(routes!(dead_letters::bulk_requeue))
        .routes(routes!(dead_letters::bulk_discard))
        .routes(routes!(reads::event))
        .routes(routes!(reads::event_detail))
        .routes(routes!(reads::erase_payload))
        .routes(routes!(reads::find_event))
        .routes(routes!(reads::search_events))
        .routes(routes!(reads::conflicts))
        .routes(routes!(reads::conflict))
        .routes(routes!(reads::resolve_conflict))
        .routes(routes!(sources::list))
        .routes(routes!(sources::pause))
        .routes(routes!(sources::resume))
        .routes(routes!(feeds::feed))
        .routes(routes!(feeds::balance))
        .routes(routes!(feeds::coverage))
        .routes(routes!(feeds::sequence))
        .routes(routes!(corrections::reverse))
        .routes(routes!(corrections::correct))
        .routes(routes!(finance::journal))
        .routes(routes!(finance::journal_csv))
        .routes(routes!(finance::balances))
        .routes(routes!(finance::payouts))
        .routes(routes!(finance::reconciliation))
        .routes(routes!(finance::receivables))
        .with_state(state)
        .split_for_parts();
    (router, document)
}

/// `/api/...` plus `GET /api/openapi.json` (no token needed).
pub fn router(state: ApiState) -> Router {
    let (router, document) = documented(state);
    let document = Arc::new(document);
    router.route(
        "/api/openapi.json",
        get(move || async move { Json(document.as_ref().clone()) }),
    )
}

/// A caller with a valid token (any role).
#[derive(Debug)]
pub struct Reader(pub Caller);

/// A caller whose role may act.
#[derive(Debug)]
pub struct Actor(pub Caller);

/// A caller whose role keeps the books (finance): the only one that may correct the journal.
#[derive(Debug)]
pub struct Accountant(pub Caller);

impl FromRequestParts<ApiState> for Accountant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState,
    ) -> Result<Self, Self::Rejection> {
        let Reader(caller) = Reader::from_request_parts(parts, state).await?;
        if caller.role.may_correct() {
            Ok(Accountant(caller))
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

impl FromRequestParts<ApiState> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState,
    ) -> Result<Self, Self::Rejection> {
        let client = parts
            .extensions
            .get::<ClientAddress>()
            .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0);
        // No credential is not a failed one: it costs the address nothing.
        let Some(token) = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|token| !token.is_empty())
        else {
            return Err(ApiError::Unauthorized);
        };
        // A valid token passes whatever others at the same address have tried.
        if let Some(caller) = state.tokens.caller(token) {
            return Ok(Reader(caller));
        }
        state
            .guard
            .admit(client, "api")
            .map_err(ApiError::Throttled)?;
        match state.guard.failed(client, "api") {
            Ok(()) => Err(ApiError::Unauthorized),
            Err(throttled) => Err(ApiError::Throttled(throttled)),
        }
    }
}

impl FromRequestParts<ApiState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState,
    ) -> Result<Self, Self::Rejection> {
        let Reader(caller) = Reader::from_request_parts(parts, state).await?;
        if caller.role.may_act() {
            Ok(Actor(caller))
        } else {
            Err(ApiError::Forbidden)
        }
    }
}
