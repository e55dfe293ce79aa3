use hmac::{Hmac, KeyInit, Mac};
use ledger::Kind;
use sha2::Sha256;

use super::super::trigger::AdyenTrigger;
use super::*;

const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

fn source() -> Receiver {
    Receiver {
        name: SourceName::parse("adyen").expect("name"),
        keys: vec![signing_key(KEY).expect("a hex key")],
        money_from: MoneyFrom::Notifications,
        merchant_accounts: None,
    }
}

impl Receiver {
    fn with_money_from(mut self, money_from: MoneyFrom) -> Self {
        self.money_from = money_from;
        self
    }
}

/// The trigger an event names.
fn named(content: &Content) -> AdyenTrigger {
    match content {
        Content::Named(named) => AdyenTrigger::from_trigger(&named.trigger).expect("readable"),
        other => panic!("{other:?}"),
    }
}

fn vector_item(signature: &str) -> Value {
    json!({"NotificationRequestItem": {
        "additionalData": {"hmacSignature": signature},
        "amount": {"currency": "EUR", "value": 1130},
        "eventCode": "AUTHORISATION", "eventDate": "2026-11-30T12:00:00+01:00",
        "merchantAccountCode": "TestMerchant", "merchantReference": "TestPayment-1407325143704",
        "pspReference": "7914073381342284", "success": "true"}})
}

#[test]
fn public_test_vector_verifies() {
    let body = json!({"live": "false", "notificationItems": [vector_item("coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=")]});
    let item = items(&body).expect("items");
    assert_eq!(
        item[0].signing_string(),
        "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
    );
    assert!(verify(&source(), body.to_string().as_bytes()).is_ok());
    // AUTHORISATION is not a settlement: authentic, acknowledged, nothing recorded.
    assert!(matches!(
        adapt(&source(), &body),
        Ok(Adapted::Ignored(Ignore::NotSettlement))
    ));
}

#[test]
fn one_bad_item_refuses_the_delivery() {
    let good = vector_item("coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=");
    for bad in [
        vector_item(""),
        vector_item("AAAA"),
        vector_item("coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo1="),
    ] {
        let body = json!({"notificationItems": [good.clone(), bad]});
        assert_eq!(
            verify(&source(), body.to_string().as_bytes()),
            Err(SignatureError::Mismatch)
        );
    }
    let mut unsigned = good.clone();
    unsigned["NotificationRequestItem"]["additionalData"] = json!({});
    let body = json!({"notificationItems": [good, unsigned]});
    assert_eq!(
        verify(&source(), body.to_string().as_bytes()),
        Err(SignatureError::Missing(SIGNATURE_FIELD))
    );
    for unreadable in [&b"not json"[..], b"{}", br#"{"notificationItems": []}"#] {
        assert_eq!(
            verify(&source(), unreadable),
            Err(SignatureError::Missing(SIGNATURE_FIELD))
        );
    }
}

#[test]
fn a_source_booking_reports_records_reports_and_sales_and_not_other_money_codes() {
    let item = |code: &str, psp: &str, value: i64| {
        json!({"NotificationRequestItem": {"amount": {"currency": "EUR", "value": value},
            "eventCode": code, "eventDate": "2026-12-01T04:00:00+01:00",
            "merchantAccountCode": "SettleShop", "merchantReference": "order-1", "pspReference": psp,
            "originalReference": "8816000000000001",
            "reason": "https://ca-live.adyen.com/reports/download/MerchantAccount/SettleShop/x.csv",
            "success": "true"}})
    };
    let body = json!({"notificationItems": [
        item("REPORT_AVAILABLE", "settlement_detail_report_batch_4.csv", 0),
        item("REPORT_AVAILABLE", "payments_accounting_report_2026_12_01.csv", 0),
        item("CAPTURE", "8816000000000101", 10_000),
        item("CAPTURE_FAILED", "8816000000000102", 2_500),
        item("REFUND", "8816000000000201", 2_000),
        item("CHARGEBACK", "8816000000000301", 3_000)]});
    let reports = source().with_money_from(MoneyFrom::Reports);
    let Ok(Adapted::Events(events)) = adapt(&reports, &body) else {
        panic!("adapted")
    };
    let ids: Vec<String> = events.iter().map(|e| e.external_id.to_string()).collect();
    assert_eq!(
        ids,
        [
            "REPORT_AVAILABLE:SettleShop:settlement_detail_report_batch_4.csv",
            "CAPTURE:8816000000000101",
            "CAPTURE_FAILED:8816000000000102"
        ],
        "the settlement report and the sales; the refund's and chargeback's money is the report's"
    );
    let AdyenTrigger::Report(trigger) = named(&events[0].content) else {
        panic!("a report trigger")
    };
    assert_eq!(trigger.merchant_account, "SettleShop");
    assert!(trigger.url.ends_with("/x.csv"));
    let AdyenTrigger::Sale(sale) = named(&events[1].content) else {
        panic!("a sale trigger")
    };
    assert_eq!(
        (
            sale.original_reference.as_str(),
            sale.value,
            sale.currency.as_str()
        ),
        ("8816000000000001", 10_000, "EUR")
    );
    let movement = sale.movement(&reports.name).expect("a sale");
    assert_eq!(movement.source_key(), "adyen/sale/8816000000000101");
    assert_eq!(movement.amount().to_string(), "100.00");
    let AdyenTrigger::Sale(failed) = named(&events[2].content) else {
        panic!("a sale trigger")
    };
    let movement = failed.movement(&reports.name).expect("a failed capture");
    assert_eq!(
        movement.source_key(),
        "adyen/capture_failed/8816000000000102"
    );
    assert_eq!(movement.amount().to_string(), "-25.00");
    // A capture whose facts are bad is recorded invalid, as booking from notifications.
    let mut bad = item("CAPTURE", "8816000000000103", 1);
    bad["NotificationRequestItem"]["amount"]["currency"] = json!("XYZ1");
    let Ok(Adapted::Events(events)) = adapt(&reports, &json!({"notificationItems": [bad]}))
    else {
        panic!("adapted")
    };
    assert!(matches!(events[0].content, Content::Invalid(_)));
    // Booking from notifications, the same delivery records the money codes and no report.
    let Ok(Adapted::Events(events)) = adapt(&source(), &body) else {
        panic!("adapted")
    };
    let ids: Vec<String> = events.iter().map(|e| e.external_id.to_string()).collect();
    assert_eq!(
        ids,
        [
            "CAPTURE:8816000000000101",
            "CAPTURE_FAILED:8816000000000102",
            "REFUND:8816000000000201",
            "CHARGEBACK:8816000000000301"
        ]
    );
    assert!(
        events
            .iter()
            .all(|e| matches!(e.content, Content::Valid(_)))
    );
}

/// Batches are numbered per merchant account: two accounts' batch 8 are two reports, and a
/// source restricted to some accounts records nothing of another's.
#[test]
fn two_merchant_accounts_reports_of_one_batch_number_are_two_events() {
    let report = |merchant: &str| {
        json!({"NotificationRequestItem": {"amount": {"currency": "EUR", "value": 0},
            "eventCode": "REPORT_AVAILABLE", "eventDate": "2026-12-01T04:00:00+01:00",
            "merchantAccountCode": merchant, "merchantReference": "",
            "pspReference": "settlement_detail_report_batch_8.csv",
            "reason": format!("https://ca-live.adyen.com/reports/download/MerchantAccount/{merchant}/settlement_detail_report_batch_8.csv"),
            "success": "true"}})
    };
    let body = json!({"notificationItems": [report("ShopEU"), report("ShopUS")]});
    let reports = source().with_money_from(MoneyFrom::Reports);
    let Ok(Adapted::Events(events)) = adapt(&reports, &body) else {
        panic!("adapted")
    };
    let ids: Vec<String> = events.iter().map(|e| e.external_id.to_string()).collect();
    assert_eq!(
        ids,
        [
            "REPORT_AVAILABLE:ShopEU:settlement_detail_report_batch_8.csv",
            "REPORT_AVAILABLE:ShopUS:settlement_detail_report_batch_8.csv"
        ]
    );
    let merchants: Vec<String> = events
        .iter()
        .map(|e| match named(&e.content) {
            AdyenTrigger::Report(trigger) => trigger.merchant_account,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(merchants, ["ShopEU", "ShopUS"]);
    let only_eu = Receiver {
        merchant_accounts: Some(vec!["ShopEU".to_owned()]),
        ..source().with_money_from(MoneyFrom::Reports)
    };
    let Ok(Adapted::Events(events)) = adapt(&only_eu, &body) else {
        panic!("adapted")
    };
    assert_eq!(events.len(), 1);
    assert!(events[0].external_id.as_str().contains(":ShopEU:"));
    let only_us_items = json!({"notificationItems": [report("ShopUS")]});
    assert!(matches!(
        adapt(&only_eu, &only_us_items),
        Ok(Adapted::Ignored(Ignore::OtherAccount))
    ));
}

#[test]
fn settlement_codes_map_and_others_are_skipped() {
    let key = hex::decode(KEY).expect("hex");
    let signed = |fields: Value| {
        let mut item = json!({"NotificationRequestItem": fields});
        let signing = items(&json!({"notificationItems": [item.clone()]})).expect("item")[0]
            .signing_string();
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).expect("mac");
        mac.update(signing.as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        item["NotificationRequestItem"]["additionalData"] = json!({"hmacSignature": signature});
        item
    };
    let item = |code: &str, success: &str, value: i64, currency: &str| {
        signed(
            json!({"amount": {"currency": currency, "value": value}, "eventCode": code,
                      "eventDate": "2026-11-30T12:00:00Z", "merchantAccountCode": "M",
                      "merchantReference": "order-1", "pspReference": format!("{:0<16}", code.replace('_', "")), "success": success}),
        )
    };
    let body = json!({"notificationItems": [
        item("CAPTURE", "true", 1130, "EUR"), item("REFUND", "true", 500, "JPY"),
        item("CHARGEBACK", "false", 100, "EUR"), item("REPORT_AVAILABLE", "true", 0, "EUR"),
        item("REFUND_FAILED", "true", 1234, "KWD"), item("CAPTURE_FAILED", "true", 1130, "EUR"),
        item("SECOND_CHARGEBACK", "true", 700, "EUR"), item("REFUNDED_REVERSED", "true", 500, "EUR")]});
    let value = verify(&source(), body.to_string().as_bytes()).expect("authentic");
    let Ok(Adapted::Events(events)) = adapt(&source(), &value) else {
        panic!("adapted")
    };
    let got: Vec<(String, Kind, String)> = events
        .iter()
        .map(|e| match &e.content {
            Content::Valid(event) => (
                e.external_id.to_string(),
                event.kind(),
                event.amounts().fields()[0].1.to_string(),
            ),
            Content::Invalid(invalid) => panic!("{:?}", invalid.error),
            Content::Named(trigger) => panic!("{trigger:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "CAPTURE:CAPTURE000000000".to_owned(),
                Kind::ChargeSettled,
                "11.30".to_owned()
            ),
            (
                "REFUND:REFUND0000000000".to_owned(),
                Kind::RefundSettled,
                "500".to_owned()
            ),
            (
                "REFUND_FAILED:REFUNDFAILED0000".to_owned(),
                Kind::Adjustment,
                "1.234".to_owned()
            ),
            (
                "CAPTURE_FAILED:CAPTUREFAILED000".to_owned(),
                Kind::Adjustment,
                "-11.30".to_owned()
            ),
            (
                "SECOND_CHARGEBACK:SECONDCHARGEBACK".to_owned(),
                Kind::Chargeback,
                "7.00".to_owned()
            ),
            (
                "REFUNDED_REVERSED:REFUNDEDREVERSED".to_owned(),
                Kind::Adjustment,
                "5.00".to_owned()
            ),
        ]
    );
}
