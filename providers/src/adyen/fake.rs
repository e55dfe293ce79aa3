//! A fake Adyen report download server on a real socket, in this process: `/reports/download/
//! MerchantAccount/{account}/{file}` with the basic auth of one report user, as Adyen serves
//! settlement details reports. It serves the files it is given, with faults a caller can ask for
//! (an HTTP status, 429 with `Retry-After`, an answer that stalls, a download cut short). `settle demo` serves its Adyen batch with it, offline;
//! the test suite, its fixtures.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;

/// What the next downloads of a file answer instead of the file.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// This HTTP status, for the next `times` downloads.
    Status { status: u16, times: u32 },
    /// Half the file, then the connection ends, for the next `times` downloads.
    CutShort { times: u32 },
    /// 429 with `Retry-After: retry_after_secs`, for the next `times` downloads.
    RateLimited { retry_after_secs: u64, times: u32 },
    /// The file, once `stall_ms` have passed, for the next `times` downloads.
    Stall { stall_ms: u64, times: u32 },
}

impl Fault {
    /// This fault with one download fewer to answer, `None` once it has answered them all.
    fn spent(self) -> Option<Fault> {
        let (times, less) = match self {
            Fault::Status { status, times } => (times, Fault::Status { status, times: times.saturating_sub(1) }),
            Fault::CutShort { times } => (times, Fault::CutShort { times: times.saturating_sub(1) }),
            Fault::RateLimited { retry_after_secs, times } => (
                times,
                Fault::RateLimited { retry_after_secs, times: times.saturating_sub(1) },
            ),
            Fault::Stall { stall_ms, times } => {
                (times, Fault::Stall { stall_ms, times: times.saturating_sub(1) })
            }
        };
        (times > 1).then_some(less)
    }

    fn times(self) -> u32 {
        match self {
            Fault::Status { times, .. }
            | Fault::CutShort { times }
            | Fault::RateLimited { times, .. }
            | Fault::Stall { times, .. } => times,
        }
    }
}

#[derive(Debug, Default)]
struct Files {
    /// The `Authorization` header a download must carry.
    credentials: String,
    files: HashMap<String, Vec<u8>>,
    faults: HashMap<String, Fault>,
    downloads: Vec<String>,
}

#[derive(Debug)]
pub struct FakeReports {
    addr: SocketAddr,
    files: Arc<Mutex<Files>>,
    _task: tokio::task::JoinHandle<()>,
}

impl FakeReports {
    /// Starts the server on a free port of 127.0.0.1; it serves only the report user `user`
    /// with `password`.
    pub async fn start(user: &str, password: &str) -> std::io::Result<Self> {
        let credentials = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let files = Arc::new(Mutex::new(Files {
            credentials,
            ..Files::default()
        }));
        let app = axum::Router::new()
            .route(
                "/reports/download/MerchantAccount/{account}/{file}",
                axum::routing::get(download),
            )
            .with_state(files.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            files,
            _task: task,
        })
    }

    /// `http://127.0.0.1:<port>`, as a source's `report_hosts` lists it.
    pub fn host(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where a report of `account` is downloaded from.
    pub fn url(&self, account: &str, file: &str) -> String {
        format!(
            "{}/reports/download/MerchantAccount/{account}/{file}",
            self.host()
        )
    }

    /// Serves `file` to every merchant account (unless one has its own, [`Self::put_for`]).
    pub fn put(&self, file: &str, bytes: Vec<u8>) {
        self.files
            .lock()
            .expect("files")
            .files
            .insert(file.to_owned(), bytes);
    }

    /// Serves `file` to `account` only: merchant accounts number their batches each on their
    /// own, so two hold reports of one name.
    pub fn put_for(&self, account: &str, file: &str, bytes: Vec<u8>) {
        self.files
            .lock()
            .expect("files")
            .files
            .insert(format!("{account}/{file}"), bytes);
    }

    pub fn fault(&self, file: &str, fault: Fault) {
        self.files
            .lock()
            .expect("files")
            .faults
            .insert(file.to_owned(), fault);
    }

    /// The files asked for so far that it has (with the right credentials), in order.
    pub fn downloads(&self) -> Vec<String> {
        self.files.lock().expect("files").downloads.clone()
    }
}

async fn download(
    State(files): State<Arc<Mutex<Files>>>,
    Path((account, file)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (bytes, fault) = {
        let mut files = files.lock().expect("files");
        if headers.get("authorization").and_then(|v| v.to_str().ok())
            != Some(files.credentials.as_str())
        {
            return StatusCode::UNAUTHORIZED.into_response();
        }
        let fault = files
            .faults
            .remove(&file)
            .filter(|fault| fault.times() > 0);
        if let Some(less) = fault.and_then(Fault::spent) {
            files.faults.insert(file.clone(), less);
        }
        let own = files.files.get(&format!("{account}/{file}")).cloned();
        let Some(bytes) = own.or_else(|| files.files.get(&file).cloned()) else {
            return StatusCode::NOT_FOUND.into_response();
        };
        files.downloads.push(file);
        (bytes, fault)
    };
    match fault {
        Some(Fault::Status { status, .. }) => StatusCode::from_u16(status)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
        Some(Fault::RateLimited {
            retry_after_secs, ..
        }) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", retry_after_secs.to_string())],
        )
            .into_response(),
        Some(Fault::Stall { stall_ms, .. }) => {
            tokio::time::sleep(std::time::Duration::from_millis(stall_ms)).await;
            ([("content-type", "text/csv")], bytes).into_response()
        }
        Some(Fault::CutShort { .. }) => {
            let half = bytes[..bytes.len() / 2].to_vec();
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                vec![Ok(half), Err(std::io::Error::other("the connection ends"))];
            Response::builder()
                .header("content-type", "text/csv")
                .body(Body::from_stream(futures::stream::iter(chunks)))
                .expect("response")
        }
        _ => ([("content-type", "text/csv")], bytes).into_response(),
    }
}
