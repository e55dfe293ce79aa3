//! Adyen for the tests: the fake report download server (`providers::adyen::fake`) with the report user
//! the test sources are configured with, the settlement details reports of `fixtures/adyen` (see
//! its SOURCES.md) or a test's own, and `REPORT_AVAILABLE` notifications in Adyen's published
//! shape.

use serde_json::{Value, json};

pub use providers::adyen::fake::{FakeReports, Fault};

/// The report user and password the test sources download with.
pub const REPORT_USER: &str = "report@Company.SettleCo";
pub const REPORT_PASSWORD: &str = "report-password-for-tests";

/// The fake report server, serving [`REPORT_USER`].
pub async fn fake_reports() -> FakeReports {
    FakeReports::start(REPORT_USER, REPORT_PASSWORD)
        .await
        .expect("start the fake report server")
}

/// A fixture of `fixtures/adyen`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/adyen")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
    payments_of("SettleShop", 0, lines, batch)
}

/// [`report_of`] of merchant account `merchant`, its payments numbered from `first` (each batch
/// its own payments).
pub fn payments_of(merchant: &str, first: usize, lines: usize, batch: u32) -> Vec<u8> {
    let header = report_header();
    let mut out = String::with_capacity(lines * 200);
    out.push_str(&header);
    out.push('\n');
    for i in first..first + lines {
        out.push_str(&format!(
            "SettleCo,{merchant},88{i:014},order-{i},visa,2026-11-30 09:15:02,CET,Settled,89{i:014},EUR,,10.00,1,EUR,,9.75,0.25,,,,visaclassic,,{batch},,,,,,,\n"
        ));
    }
    let payout = rust_decimal::Decimal::new(975, 2) * rust_decimal::Decimal::from(lines as u64);
    out.push_str(&format!(
        "SettleCo,{merchant},,,,2026-12-01 02:00:00,CET,MerchantPayout,\"batch {batch}, {merchant}\",EUR,,,,EUR,{payout},,,,,,,,{batch},,,,,,,\n"
    ));
    out.into_bytes()
}

/// The merchant accounts of [`mixed_report`].
pub const MIXED_ACCOUNTS: [&str; 3] = ["SettleShop", "SettleShopUS", "SettleShopUK"];
/// The record type [`mixed_report`] sprinkles in: one settle has no account for (it appears in
/// third-party code only; fixtures/adyen/record_types.json).
pub const UNKNOWN_TYPE: &str = "BPPaidOut";

/// A settlement details report of batch `batch` over the three [`MIXED_ACCOUNTS`] in two
/// settlement currencies, as a company-level report holds them: `lines` lines, in turn each
/// account's settled payment (10.00 gross, 0.25 commission; `SettleShop` in EUR, `SettleShopUS`
/// in USD, `SettleShopUK` in EUR and USD by turns), every 997th instead a line of
/// [`UNKNOWN_TYPE`] (1.00 debited), then each account's payout per currency of its net. With how
/// many entries it books: a settled payment's sale and settlement, one for each other line.
pub fn mixed_report(lines: usize, batch: u32) -> (Vec<u8>, usize) {
    use rust_decimal::Decimal;
    use std::collections::BTreeMap;
    let header = report_header();
    let mut out = String::with_capacity(lines * 200);
    out.push_str(&header);
    out.push('\n');
    let mut nets: BTreeMap<(&str, &str), Decimal> = BTreeMap::new();
    let mut entries = 0;
    for i in 0..lines {
        let merchant = MIXED_ACCOUNTS[i % 3];
        let currency = match (i % 3, (i / 3) % 2) {
            (0, _) | (2, 0) => "EUR",
            _ => "USD",
        };
        if i % 997 == 996 {
            out.push_str(&format!(
                "SettleCo,{merchant},,,,2026-11-30 12:00:00,CET,{UNKNOWN_TYPE},bp-{i},{currency},,,,{currency},1.00,,,,,,,,{batch},,,,,,,\n"
            ));
            *nets.entry((merchant, currency)).or_default() -= Decimal::ONE;
            entries += 1;
        } else {
            out.push_str(&format!(
                "SettleCo,{merchant},88{i:014},order-{i},visa,2026-11-30 09:15:02,CET,Settled,89{i:014},{currency},,10.00,1,{currency},,9.75,0.25,,,,visaclassic,,{batch},,,,,,,\n"
            ));
            *nets.entry((merchant, currency)).or_default() += Decimal::new(975, 2);
            entries += 2;
        }
    }
    for ((merchant, currency), net) in nets {
        out.push_str(&format!(
            "SettleCo,{merchant},,,,2026-12-01 02:00:00,CET,MerchantPayout,\"batch {batch}, {merchant}, {currency}\",{currency},,,,{currency},{net},,,,,,,,{batch},,,,,,,\n"
        ));
        entries += 1;
    }
    (out.into_bytes(), entries)
}

/// The header line of `fixtures/adyen/settlement_detail_report_batch_7.csv`.
fn report_header() -> String {
    let fixture =
        String::from_utf8(fixture("settlement_detail_report_batch_7.csv")).expect("utf-8");
    fixture.lines().next().expect("header").to_owned()
}
