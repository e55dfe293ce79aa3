//! What every provider's API client shares: an unsuccessful answer classified once, where it is
//! born (retry later, or a person decides), the provider's `Retry-After`, and network errors
//! told without the request's URL.

use ledger::ProviderError;
use reqwest::StatusCode;

/// What an unsuccessful status means for the job.
pub(crate) fn classify(
    status: StatusCode,
    endpoint: &str,
    message: String,
    retry_after_ms: Option<u64>,
) -> ProviderError {
    match status {
        StatusCode::TOO_MANY_REQUESTS => ProviderError::RateLimited { retry_after_ms },
        // A conflict with a concurrent request on the provider's side (worth another try).
        StatusCode::CONFLICT => ProviderError::Unavailable {
            detail: format!("{endpoint}: HTTP 409: {message}"),
            retry_after_ms,
        },
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ProviderError::Auth {
            status: status.as_u16(),
        },
        StatusCode::NOT_FOUND => ProviderError::NotFound {
            what: format!("{endpoint} ({message})"),
        },
        status if status.is_server_error() => ProviderError::Unavailable {
            detail: format!("{endpoint}: HTTP {}: {message}", status.as_u16()),
            retry_after_ms,
        },
        status => {
            ProviderError::Response(format!("{endpoint}: HTTP {}: {message}", status.as_u16()))
        }
    }
}

/// `Retry-After` in whole seconds, capped at five minutes.
pub(crate) fn retry_after_ms(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let secs: u64 = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(secs.min(300) * 1_000)
}

/// A network error's text without its URL (which carries ids, and never the key, but keeps the
/// logs short).
pub(crate) fn without_url(error: reqwest::Error) -> String {
    let mut text = error.without_url().to_string();
    text.truncate(200);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        let check = |status: u16, want: &str| {
            let error = classify(
                StatusCode::from_u16(status).expect("status"),
                "an_endpoint",
                "m".into(),
                Some(2_000),
            );
            assert_eq!(error.code(), want, "{status}");
        };
        check(429, "provider_rate_limited");
        check(500, "provider_unavailable");
        check(503, "provider_unavailable");
        check(401, "provider_auth");
        check(403, "provider_auth");
        check(404, "provider_not_found");
        check(400, "provider_response");
        check(409, "provider_unavailable");
        let limited = classify(StatusCode::TOO_MANY_REQUESTS, "x", "m".into(), Some(2_000));
        assert_eq!(limited.retry_after_ms(), Some(2_000));
        assert!(limited.is_transient());
    }
}
