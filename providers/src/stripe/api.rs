//! Stripe's API, read-only: balance transactions, a charge's refunds, a payout's balance
//! transactions. Every call waits for the source's budget, carries the pinned `Stripe-Version`
//! (and `Stripe-Account` for a connected account), and fails typed: 429 and 5xx, network errors
//! and timeouts are transient (with Stripe's `Retry-After` when it sends one), 401/403
//! `provider_auth`, 404 `provider_not_found`, an answer that does not parse `provider_response`.

use std::fmt;
use std::time::{Duration, Instant};

use ledger::{ProviderError, SourceName};
use reqwest::Url;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::balance_transaction::BalanceTransaction;
use super::config::ApiSettings;
use crate::budget::{Budget, Priority};
use crate::http::{classify, retry_after_ms, without_url};

/// The API version every request pins (`Stripe-Version`), so the shapes settle reads do not
/// change under it when the account's default version moves: the version Stripe's own Node
/// library pins (stripe/stripe-node `src/apiVersion.ts`). Balance transactions, refunds and
/// payouts have kept the fields settle reads across versions.
pub const STRIPE_VERSION: &str = "2026-08-26.dahlia";

/// Stripe's largest page.
const PAGE_LIMIT: &str = "100";
/// Pages read from one listing at most (100,000 items): a listing longer than that is refused
/// rather than read without end.
const PAGES_MAX: usize = 1_000;
/// How many times one page of a feed window, or a balance read, is asked for before its error
/// is the caller's.
const PAGE_TRIES: u32 = 5;
/// The longest a page waits before it is asked again.
const PAGE_RETRY_WAIT_MAX: Duration = Duration::from_secs(30);
/// The largest answer read (a page of 100 balance transactions is about 100 KB).
const RESPONSE_BYTES_MAX: usize = 8 * 1024 * 1024;

/// A restricted API key, never printed.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// One source's client.
#[derive(Debug)]
pub struct StripeApi {
    http: reqwest::Client,
    base: Url,
    key: ApiKey,
    source: SourceName,
    budget: Budget,
}

/// A list page (`{"object": "list", "data": [...], "has_more": ...}`).
#[derive(Deserialize)]
pub(super) struct Page<T> {
    pub(super) data: Vec<T>,
    pub(super) has_more: bool,
}

/// The balance object (`GET /v1/balance`, `fixtures/stripe/balance.json`): funds by currency in
/// each bucket. `available` and `pending` are the account's balance, which `{source}:balance`
/// books; `connect_reserved`, `instant_available` and `issuing` are not part of it.
#[derive(Clone, Debug, Deserialize)]
pub struct Balance {
    pub available: Vec<Funds>,
    pub pending: Vec<Funds>,
}

impl Balance {
    /// `available` + `pending` per currency (lower case), in minor units: what `{source}:balance`
    /// books.
    pub fn held(&self) -> std::collections::BTreeMap<String, i64> {
        let mut held = std::collections::BTreeMap::new();
        for funds in self.available.iter().chain(&self.pending) {
            *held.entry(funds.currency.clone()).or_default() += funds.amount;
        }
        held
    }
}

/// An amount in one currency, in minor units.
#[derive(Clone, Debug, Deserialize)]
pub struct Funds {
    pub amount: i64,
    pub currency: String,
}

/// A refund as listed with its balance transactions expanded.
#[derive(Deserialize)]
struct Refund {
    id: String,
    #[serde(default)]
    balance_transaction: Option<Value>,
    #[serde(default)]
    failure_balance_transaction: Option<Value>,
}

impl StripeApi {
    /// The client of `source`'s API: `api_base` must be an http(s) URL (the error says so, for
    /// the key `api_base`).
    pub fn new(source: SourceName, key: ApiKey, settings: &ApiSettings) -> Result<Self, String> {
        let base = Url::parse(&settings.api_base)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or("api_base is not an http(s) URL")?;
        if !base.username().is_empty() || base.password().is_some() {
            return Err("api_base must not carry a user name or password".into());
        }
        // A redirect is not followed (it would carry the key elsewhere): it is an answer Stripe
        // does not give, and fails as one.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .timeout(Duration::from_millis(settings.request_timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("settle/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
        Ok(Self {
            http,
            base,
            key,
            budget: Budget::new(
                source.as_str(),
                settings.requests_per_sec,
                settings.endpoint_requests_per_sec,
            ),
            source,
        })
    }

    pub fn source(&self) -> &SourceName {
        &self.source
    }

    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// `GET /v1/balance_transactions/{id}`.
    pub async fn balance_transaction(
        &self,
        account: Option<&str>,
        id: &str,
    ) -> Result<BalanceTransaction, ProviderError> {
        let path = format!("/v1/balance_transactions/{}", segment(id)?);
        self.get("balance_transaction", &path, &[], account).await
    }

    /// The balance transactions of a charge's refunds (`GET /v1/refunds?charge=`, every page,
    /// with each refund's `balance_transaction` and `failure_balance_transaction` expanded;
    /// one not expanded is fetched).
    pub async fn refund_transactions(
        &self,
        account: Option<&str>,
        charge: &str,
    ) -> Result<Vec<BalanceTransaction>, ProviderError> {
        let refunds: Vec<Refund> = self
            .list(
                "refunds",
                "/v1/refunds",
                &[
                    ("charge", charge),
                    ("expand[]", "data.balance_transaction"),
                    ("expand[]", "data.failure_balance_transaction"),
                ],
                account,
                |refund: &Refund| refund.id.clone(),
            )
            .await?;
        let mut transactions = Vec::new();
        for refund in refunds {
            for field in [
                refund.balance_transaction,
                refund.failure_balance_transaction,
            ] {
                match field {
                    None | Some(Value::Null) => {}
                    Some(Value::String(id)) => {
                        transactions.push(self.balance_transaction(account, &id).await?)
                    }
                    Some(object) => {
                        transactions.push(serde_json::from_value(object).map_err(|e| {
                            ProviderError::Response(format!("a refund's balance transaction: {e}"))
                        })?)
                    }
                }
            }
        }
        Ok(transactions)
    }

    /// Every balance transaction of an automatic payout (`GET
    /// /v1/balance_transactions?payout=`, to the last page), the payout's own included.
    pub async fn payout_transactions(
        &self,
        account: Option<&str>,
        payout: &str,
    ) -> Result<Vec<BalanceTransaction>, ProviderError> {
        self.list(
            "balance_transactions",
            "/v1/balance_transactions",
            &[("payout", payout)],
            account,
            |transaction: &BalanceTransaction| transaction.id.clone(),
        )
        .await
    }

    /// The ids of the platform's connected accounts (`GET /v1/accounts`, every page).
    pub async fn connected_accounts(&self) -> Result<Vec<String>, ProviderError> {
        #[derive(Deserialize)]
        struct Account {
            id: String,
        }
        let accounts: Vec<Account> = self
            .list("accounts", "/v1/accounts", &[], None, |a: &Account| {
                a.id.clone()
            })
            .await?;
        Ok(accounts.into_iter().map(|a| a.id).collect())
    }

    /// One page of the balance transactions created in `[from, to)` (`GET
    /// /v1/balance_transactions?created[gte]=&created[lt]=`, 100 a page, newest first), after
    /// `after`: the page and whether more follow. A page Stripe turns away for the moment (429,
    /// 5xx, no answer in time) is asked again, waiting its `Retry-After` or a growing pause,
    /// [`PAGE_TRIES`] times in all before the error is the caller's.
    pub async fn window_page(
        &self,
        account: Option<&str>,
        (from, to): (i64, i64),
        after: Option<&str>,
        priority: Priority,
    ) -> Result<(Vec<BalanceTransaction>, bool), ProviderError> {
        let (from, to) = (from.to_string(), to.to_string());
        let mut query = vec![
            ("created[gte]", from.as_str()),
            ("created[lt]", to.as_str()),
            ("limit", PAGE_LIMIT),
        ];
        if let Some(after) = after {
            query.push(("starting_after", after));
        }
        let page: Page<BalanceTransaction> = self
            .get_retrying(
                "balance_transactions",
                "/v1/balance_transactions",
                &query,
                account,
                priority,
            )
            .await?;
        Ok((page.data, page.has_more))
    }

    /// [`Self::get_as`], asked again when Stripe turns the request away for the moment (429,
    /// 5xx, no answer in time), waiting its `Retry-After` or a growing pause, [`PAGE_TRIES`]
    /// times in all before the error is the caller's.
    async fn get_retrying<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        path: &str,
        query: &[(&str, &str)],
        account: Option<&str>,
        priority: Priority,
    ) -> Result<T, ProviderError> {
        let mut pause = Duration::from_millis(250);
        let mut tries = 1;
        loop {
            match self.get_as::<T>(endpoint, path, query, account, priority).await {
                Ok(answer) => return Ok(answer),
                Err(error) if error.is_transient() && tries < PAGE_TRIES => {
                    let wait = match &error {
                        ProviderError::Unavailable { retry_after_ms: Some(ms), .. }
                        | ProviderError::RateLimited { retry_after_ms: Some(ms) } => {
                            Duration::from_millis(*ms)
                        }
                        _ => pause,
                    };
                    tracing::debug!(source = %self.source, endpoint, %error, ?wait, "asked again");
                    tokio::time::sleep(wait.min(PAGE_RETRY_WAIT_MAX)).await;
                    pause = pause.saturating_mul(2);
                    tries += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// `GET /v1/balance`: what Stripe holds for the account now, asked again as a listing page
    /// is when Stripe turns it away for the moment (it is read once, by a command or an
    /// opening, not by a job that retries).
    pub async fn balance(&self, account: Option<&str>) -> Result<Balance, ProviderError> {
        self.get_retrying("balance", "/v1/balance", &[], account, Priority::Now)
            .await
    }

    /// Reads a listing page after page (`starting_after` the last item) until `has_more` is
    /// false.
    async fn list<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        path: &str,
        query: &[(&str, &str)],
        account: Option<&str>,
        id_of: impl Fn(&T) -> String,
    ) -> Result<Vec<T>, ProviderError> {
        let mut items = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..PAGES_MAX {
            let mut page_query: Vec<(&str, &str)> = query.to_vec();
            page_query.push(("limit", PAGE_LIMIT));
            if let Some(after) = &after {
                page_query.push(("starting_after", after));
            }
            let page: Page<T> = self.get(endpoint, path, &page_query, account).await?;
            let last = page.data.last().map(&id_of);
            items.extend(page.data);
            match (page.has_more, last) {
                (true, Some(last)) => after = Some(last),
                (true, None) => {
                    return Err(ProviderError::Response(format!(
                        "{endpoint}: an empty page says it has more"
                    )));
                }
                (false, _) => return Ok(items),
            }
        }
        Err(ProviderError::Response(format!(
            "{endpoint}: more than {PAGES_MAX} pages"
        )))
    }

    async fn get<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        path: &str,
        query: &[(&str, &str)],
        account: Option<&str>,
    ) -> Result<T, ProviderError> {
        self.get_as(endpoint, path, query, account, Priority::Now)
            .await
    }

    /// [`Self::get`], waiting for the budget as a request of `priority`.
    async fn get_as<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        path: &str,
        query: &[(&str, &str)],
        account: Option<&str>,
        priority: Priority,
    ) -> Result<T, ProviderError> {
        self.budget.acquire_as(endpoint, priority).await;
        let mut url = self
            .base
            .join(path)
            .map_err(|e| ProviderError::Response(format!("{endpoint}: {e}")))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut request = self
            .http
            .get(url)
            .bearer_auth(&self.key.0)
            .header("Stripe-Version", STRIPE_VERSION);
        if let Some(account) = account {
            request = request.header("Stripe-Account", account);
        }
        let started = Instant::now();
        let outcome = self.answer(request, endpoint).await;
        let status = match &outcome {
            Ok(_) => "200".to_owned(),
            Err((status, _)) => status.clone(),
        };
        let source = self.source.to_string();
        metrics::counter!("settle_provider_requests_total", "provider" => "stripe", "source" => source.clone(), "endpoint" => endpoint, "status" => status)
            .increment(1);
        metrics::histogram!("settle_provider_request_duration_seconds", "provider" => "stripe", "source" => source.clone(), "endpoint" => endpoint)
            .record(started.elapsed().as_secs_f64());
        let body = outcome.map_err(|(_, error)| {
            if matches!(error, ProviderError::Auth { .. }) {
                metrics::counter!("settle_provider_auth_failures_total", "source" => source)
                    .increment(1);
            }
            error
        })?;
        serde_json::from_slice(&body)
            .map_err(|e| ProviderError::Response(format!("{endpoint}: {e}")))
    }

    /// Sends the request and reads its answer; an error comes with the status label it is
    /// counted under (`timeout`, `network`, or the HTTP status).
    async fn answer(
        &self,
        request: reqwest::RequestBuilder,
        endpoint: &'static str,
    ) -> Result<Vec<u8>, (String, ProviderError)> {
        let network = |error: reqwest::Error| {
            let label = if error.is_timeout() {
                "timeout"
            } else {
                "network"
            };
            let detail = format!("{endpoint}: {label}: {}", without_url(error));
            (
                label.to_owned(),
                ProviderError::Unavailable {
                    detail,
                    retry_after_ms: None,
                },
            )
        };
        let mut response = request.send().await.map_err(network)?;
        let headers = response.headers().clone();
        let status = response.status();
        let retry_after_ms = retry_after_ms(&headers);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(network)? {
            if body.len() + chunk.len() > RESPONSE_BYTES_MAX {
                return Err((
                    status.as_u16().to_string(),
                    ProviderError::Response(format!(
                        "{endpoint}: answer over {RESPONSE_BYTES_MAX} bytes"
                    )),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(body);
        }
        let label = status.as_u16().to_string();
        let message = error_message(&body);
        let mut error = classify(status, endpoint, message, retry_after_ms);
        // Stripe may say outright whether the same request can succeed later.
        if should_retry(&headers) == Some(true) && !error.is_transient() {
            error = ProviderError::Unavailable {
                detail: format!("{endpoint}: HTTP {label}, Stripe-Should-Retry: true"),
                retry_after_ms,
            };
        }
        Err((label, error))
    }
}

/// Stripe's error message (`{"error": {"message": ...}}`), shortened; never the request.
fn error_message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "no error message".into())
        .chars()
        .take(200)
        .collect()
}

/// `Stripe-Should-Retry: true|false`, when sent.
fn should_retry(headers: &reqwest::header::HeaderMap) -> Option<bool> {
    match headers.get("stripe-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// An id as one URL path segment: Stripe's ids are letters, digits and `_` (`-` is let through).
fn segment(id: &str) -> Result<&str, ProviderError> {
    if !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Ok(id)
    } else {
        Err(ProviderError::Facts(format!(
            "{:?} is not a Stripe object id",
            id.chars().take(64).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests;
