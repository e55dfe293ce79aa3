//! Adyen's settlement details reports: downloaded from the URL a `REPORT_AVAILABLE` notification
//! names, only from the source's allowed hosts (the URL is outside the notification's HMAC), with
//! a report user's basic auth or an API key, streamed to a temporary file under a size and a time
//! limit, then read twice from it: once to check every line, once to post it in chunks.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use ledger::{ProviderError, SourceName};
use reqwest::Url;

use crate::http::{classify, retry_after_ms, without_url};

/// How a report download authenticates.
#[derive(Clone)]
pub enum ReportAuth {
    /// A report user (`report@Company.<account>`) and its password.
    Basic { user: String, password: String },
    /// `X-API-Key`.
    ApiKey(String),
}

impl fmt::Debug for ReportAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportAuth::Basic { user, .. } => write!(f, "Basic({user}, ****)"),
            ReportAuth::ApiKey(_) => f.write_str("ApiKey(****)"),
        }
    }
}

/// A host reports may be downloaded from: `https://host[:port]` (or `http://` where listed so).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportHost {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl ReportHost {
    /// `host[:port]` (https) or `scheme://host[:port]`.
    pub fn parse(text: &str) -> Option<Self> {
        let with_scheme = if text.contains("://") {
            text.to_owned()
        } else {
            format!("https://{text}")
        };
        let url = Url::parse(&with_scheme).ok()?;
        let bare = url.path() == "/" && url.query().is_none() && url.username().is_empty();
        if !(matches!(url.scheme(), "http" | "https") && bare) {
            return None;
        }
        Some(Self {
            scheme: url.scheme().to_owned(),
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default(),
        })
    }

    fn allows(&self, url: &Url) -> bool {
        url.scheme() == self.scheme
            && url.host_str().map(str::to_ascii_lowercase).as_deref() == Some(self.host.as_str())
            && url.port_or_known_default() == self.port
    }
}

/// One Adyen source's report downloads.
#[derive(Clone, Debug)]
pub struct ReportSettings {
    pub source: SourceName,
    pub auth: ReportAuth,
    pub hosts: Vec<ReportHost>,
    pub bytes_max: u64,
    pub timeout_ms: u64,
}

#[derive(Debug)]
pub struct AdyenReports {
    http: reqwest::Client,
    settings: ReportSettings,
}

impl AdyenReports {
    pub fn new(settings: ReportSettings) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(settings.timeout_ms.min(10_000)))
            .timeout(Duration::from_millis(settings.timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("settle/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { http, settings })
    }

    /// Downloads the report at `url` into a temporary file (removed when dropped). A host not
    /// allowed is refused before any request; an answer over the size limit, cut short, or not
    /// finished in time fails without keeping anything.
    pub async fn download(&self, url: &str) -> Result<tempfile::NamedTempFile, ProviderError> {
        let request = self.request(url)?;
        match self.fetch(request).await {
            Ok(file) => {
                self.count("report", "200", None);
                Ok(file)
            }
            Err((status, error)) => {
                self.count("report", &status, Some(&error));
                Err(error)
            }
        }
    }

    /// Whether Adyen serves the report at `url` now (a host not allowed is refused before any
    /// request): a success is yes and 404 no; the body is not read.
    pub async fn exists(&self, url: &str) -> Result<bool, ProviderError> {
        let request = self.request(url)?;
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                let (status, error) = network(error);
                self.count("report_lookup", &status, Some(&error));
                return Err(error);
            }
        };
        let status = response.status();
        self.count("report_lookup", status.as_str(), None);
        match status {
            status if status.is_success() => Ok(true),
            reqwest::StatusCode::NOT_FOUND => Ok(false),
            status => {
                let retry_after = retry_after_ms(response.headers());
                let error = classify(status, "report", "report lookup refused".into(), retry_after);
                self.count_auth(&error);
                Err(error)
            }
        }
    }

    /// `settle_provider_requests_total` for one request, and an authentication refused.
    fn count(&self, endpoint: &'static str, status: &str, error: Option<&ProviderError>) {
        metrics::counter!("settle_provider_requests_total", "provider" => "adyen",
            "source" => self.settings.source.to_string(), "endpoint" => endpoint,
            "status" => status.to_owned())
        .increment(1);
        if let Some(error) = error {
            self.count_auth(error);
        }
    }

    fn count_auth(&self, error: &ProviderError) {
        if matches!(error, ProviderError::Auth { .. }) {
            metrics::counter!("settle_provider_auth_failures_total",
                "source" => self.settings.source.to_string())
            .increment(1);
        }
    }

    /// The request for `url`, authenticated, if its host is allowed.
    fn request(&self, url: &str) -> Result<reqwest::RequestBuilder, ProviderError> {
        let url = Url::parse(url)
            .map_err(|_| ProviderError::Response("the report URL cannot be read".into()))?;
        if !self.settings.hosts.iter().any(|host| host.allows(&url)) {
            return Err(ProviderError::Facts(format!(
                "the report URL's host {} is not one of source {}'s report_hosts",
                url.host_str().unwrap_or("(none)"),
                self.settings.source
            )));
        }
        Ok(match &self.settings.auth {
            ReportAuth::Basic { user, password } => {
                self.http.get(url).basic_auth(user, Some(password))
            }
            ReportAuth::ApiKey(key) => self.http.get(url).header("X-API-Key", key),
        })
    }
    async fn fetch(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<tempfile::NamedTempFile, (String, ProviderError)> {
        let mut response = request.send().await.map_err(network)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after_ms(response.headers());
            return Err((
                status.as_u16().to_string(),
                classify(
                    status,
                    "report",
                    "report download refused".into(),
                    retry_after,
                ),
            ));
        }
        let bytes_max = self.settings.bytes_max;
        if response.content_length().is_some_and(|n| n > bytes_max) {
            return Err(too_large(status, bytes_max));
        }
        let local = |error: std::io::Error| {
            (
                "local".to_owned(),
                ProviderError::Unavailable {
                    detail: format!("report: cannot write the temporary file: {error}"),
                    retry_after_ms: None,
                },
            )
        };
        let mut file = tempfile::NamedTempFile::new().map_err(local)?;
        let mut written = 0u64;
        while let Some(chunk) = response.chunk().await.map_err(network)? {
            written += chunk.len() as u64;
            if written > bytes_max {
                return Err(too_large(status, bytes_max));
            }
            file.write_all(&chunk).map_err(local)?;
        }
        file.flush().map_err(local)?;
        Ok(file)
    }
}

/// A request that failed on the way: a timeout or the network.
fn network(error: reqwest::Error) -> (String, ProviderError) {
    let label = if error.is_timeout() {
        "timeout"
    } else {
        "network"
    };
    (
        label.to_owned(),
        ProviderError::Unavailable {
            detail: format!("report: {label}: {}", without_url(error)),
            retry_after_ms: None,
        },
    )
}

fn too_large(status: reqwest::StatusCode, bytes_max: u64) -> (String, ProviderError) {
    (
        status.as_u16().to_string(),
        ProviderError::Response(format!(
            "the report is over report_bytes_max ({bytes_max} bytes)"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_hosts_schemes_and_ports_are_allowed() {
        let adyen = ReportHost::parse("ca-live.adyen.com").expect("host");
        let local = ReportHost::parse("http://127.0.0.1:8099").expect("host");
        let url = |text: &str| Url::parse(text).expect("url");
        assert!(adyen.allows(&url(
            "https://ca-live.adyen.com/reports/download/MerchantAccount/M/settlement_detail_report_batch_4.csv"
        )));
        assert!(!adyen.allows(&url("http://ca-live.adyen.com/r.csv")));
        assert!(!adyen.allows(&url("https://ca-live.adyen.com.evil.example/r.csv")));
        assert!(!adyen.allows(&url("https://ca-live.adyen.com:8443/r.csv")));
        assert!(local.allows(&url("http://127.0.0.1:8099/r.csv")));
        assert!(!local.allows(&url("http://127.0.0.1:8098/r.csv")));
        assert_eq!(ReportHost::parse("https://ca-live.adyen.com/path"), None);
        assert_eq!(ReportHost::parse("ftp://ca-live.adyen.com"), None);
    }

    /// An allowed host that answers with a redirect elsewhere: the download (and the lookup)
    /// fail, and the report user's credentials go nowhere else.
    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let elsewhere_addr = elsewhere.local_addr().expect("addr");
        let redirecting = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let allowed = format!("http://{}", redirecting.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = redirecting.accept().await {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head).await;
                let answer = format!(
                    "HTTP/1.1 302 Found\r\nLocation: http://{elsewhere_addr}/r.csv\r\n\
                     Content-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        let reports = AdyenReports::new(ReportSettings {
            source: SourceName::parse("adyen").expect("name"),
            auth: ReportAuth::Basic {
                user: "report@Company.Shop".into(),
                password: "hunter2-hunter2".into(),
            },
            hosts: vec![ReportHost::parse(&allowed).expect("host")],
            bytes_max: 1 << 20,
            timeout_ms: 2_000,
        })
        .expect("client");
        let url = format!("{allowed}/reports/download/MerchantAccount/Shop/r.csv");
        let error = reports.download(&url).await.expect_err("a redirect is an error");
        assert!(format!("{error:?}").contains("302"), "{error:?}");
        assert!(reports.exists(&url).await.is_err(), "a redirect is not a report found");
        let followed =
            tokio::time::timeout(Duration::from_millis(300), elsewhere.accept()).await;
        assert!(followed.is_err(), "nothing reached the redirect's target");
    }
}
