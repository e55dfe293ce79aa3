//! A fake Adyen report download server on a real socket, in this process: `/reports/download/
//! MerchantAccount/{account}/{file}` with the basic auth of one report user, as Adyen serves
//! settlement details reports. It serves the files it is given, with faults a caller can ask for
//! (an HTTP status, a download cut short). `settle demo` serves its Adyen batch with it, offline;
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
    let mut files = files.lock().expect("files");
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(files.credentials.as_str())
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let fault = files.faults.get(&file).copied();
    let own = files.files.get(&format!("{account}/{file}")).cloned();
    let Some(bytes) = own.or_else(|| files.files.get(&file).cloned()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    files.downloads.push(file.clone());
    match fault {
        Some(Fault::Status { status, times }) if times > 0 => {
            files.faults.insert(
                file,
                Fault::Status {
                    status,
                    times: times - 1,
                },
            );
            StatusCode::from_u16(status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                .into_response()
        }
        Some(Fault::CutShort { times }) if times > 0 => {
            files
                .faults
                .insert(file, Fault::CutShort { times: times - 1 });
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
