//! A fake Adyen report download server on a real socket (`/reports/download/MerchantAccount/
//! {account}/{file}`, basic auth of a report user, as Adyen serves reports), serving the
//! settlement details reports of `fixtures/adyen` (see its SOURCES.md) or a test's own, with
//! faults a test can ask for; and `REPORT_AVAILABLE` notifications in Adyen's published shape.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

/// The report user and password the fake server accepts.
pub const REPORT_USER: &str = "report@Company.SettleCo";
pub const REPORT_PASSWORD: &str = "report-password-for-tests";

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

/// A fixture of `fixtures/adyen`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/adyen")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl FakeReports {
    pub async fn start() -> Self {
        let files = Arc::new(Mutex::new(Files::default()));
        let app = axum::Router::new()
            .route(
                "/reports/download/MerchantAccount/{account}/{file}",
                axum::routing::get(download),
            )
            .with_state(files.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake report server");
        let addr = listener.local_addr().expect("address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            files,
            _task: task,
        }
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

    pub fn put(&self, file: &str, bytes: Vec<u8>) {
        self.files
            .lock()
            .expect("files")
            .files
            .insert(file.to_owned(), bytes);
    }

    pub fn fault(&self, file: &str, fault: Fault) {
        self.files
            .lock()
            .expect("files")
            .faults
            .insert(file.to_owned(), fault);
    }

    /// The files downloaded so far (with the right credentials), in order.
    pub fn downloads(&self) -> Vec<String> {
        self.files.lock().expect("files").downloads.clone()
    }
}

async fn download(
    State(files): State<Arc<Mutex<Files>>>,
    Path((_account, file)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD
            .encode(format!("{REPORT_USER}:{REPORT_PASSWORD}"))
    );
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut files = files.lock().expect("files");
    files.downloads.push(file.clone());
    let fault = files.faults.get(&file).copied();
    let Some(bytes) = files.files.get(&file).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
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

/// A `REPORT_AVAILABLE` notification item for `file` at `url` (fixtures/adyen/
/// report_available.json), unsigned: `sign::adyen_notification` signs it.
pub fn report_available(file: &str, url: &str) -> Value {
    let fixture: Value = serde_json::from_slice(&fixture("report_available.json")).expect("json");
    let mut item = fixture["notificationItems"][0]["NotificationRequestItem"].clone();
    item["pspReference"] = json!(file);
    item["reason"] = json!(url);
    if let Some(fields) = item.as_object_mut() {
        fields.remove("additionalData");
    }
    item
}

/// A settlement details report of batch `batch` with `lines` settled payments in EUR (each
/// 10.00 gross, 0.25 commission) and the payout of their net, in the shape of
/// `fixtures/adyen/settlement_detail_report_batch_7.csv`.
pub fn report_of(lines: usize, batch: u32) -> Vec<u8> {
    let fixture =
        String::from_utf8(fixture("settlement_detail_report_batch_7.csv")).expect("utf-8");
    let header = fixture.lines().next().expect("header");
    let mut out = String::with_capacity(lines * 200);
    out.push_str(header);
    out.push('\n');
    for i in 0..lines {
        out.push_str(&format!(
            "SettleCo,SettleShop,88{i:014},order-{i},visa,2026-11-30 09:15:02,CET,Settled,89{i:014},EUR,,10.00,1,EUR,,9.75,0.25,,,,visaclassic,,{batch},,,,,,,\n"
        ));
    }
    let payout = rust_decimal::Decimal::new(975, 2) * rust_decimal::Decimal::from(lines as u64);
    out.push_str(&format!(
        "SettleCo,SettleShop,,,,2026-12-01 02:00:00,CET,MerchantPayout,\"batch {batch}, SettleShop\",EUR,,,,EUR,{payout},,,,,,,,{batch},,,,,,,\n"
    ));
    out.into_bytes()
}
