use super::super::chart::CHART;
use super::super::trigger::{AdyenSaleTrigger, notified_capture};
use super::*;

const HEADER: &str = "Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date,TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC),Payment Method Variant,Modification Merchant Reference,Batch Number,Reserved4,Reserved5,Reserved6,Reserved7,Reserved8,Reserved9,Reserved10";

fn movements(csv: &str) -> Result<Vec<Movement>, ReportError> {
    let source = SourceName::parse("adyen").expect("source");
    let mut report = Report::new(csv.as_bytes())?;
    let mut movements = Vec::new();
    while let Some(line) = report.next_line() {
        let line = line?;
        let batch = line.batch("settlement_detail_report_batch_3.csv");
        let payout = batch_payout("TestMerchant", &batch).expect("payout");
        movements.push(line.movement(&source, &batch, &payout)?);
    }
    Ok(movements)
}

/// Adyen's own sample lines (docs.adyen.com, "Settlement details report", sample data).
#[test]
fn adyens_sample_lines_add_up() {
    let csv = format!(
        "{HEADER}\nTestCompany,TestMerchant,1813702551707653,3vpzf7,visa,2013-06-03 11:26:49,CET,Settled,1713702551795048,GBP,,5.00,1,GBP,,4.88,,0.04,0.01,0.07,visaclassic,,,,,,,,,\nTestCompany,TestMerchant,1313642467023511,324959451,visa,2013-03-26 22:37:26,CET,Chargeback,2313642467170922,EUR,349.99,,1,EUR,357.49,,7.5,,,,visaclassic,,,,,,,,,\n"
    );
    let got = movements(&csv).expect("valid");
    assert_eq!(got[0].net().to_string(), "4.88");
    assert_eq!(got[0].amount().to_string(), "5.00");
    assert_eq!(got[0].fee().to_string(), "0.12");
    assert_eq!(got[0].kind(), Kind::ChargeSettled);
    assert_eq!(got[1].net().to_string(), "-357.49");
    assert_eq!(got[1].amount().to_string(), "-349.99");
    assert_eq!(got[1].kind(), Kind::Chargeback);
    assert_eq!(
        got[0].source_key(),
        "adyen/settlement/TestMerchant/3/Settled/1813702551707653/1713702551795048"
    );
    // 11:26:49 CET is 10:26:49 UTC.
    assert_eq!(
        got[0].occurred_at().to_rfc3339(),
        "2013-06-03T10:26:49+00:00"
    );
}

#[test]
fn a_line_that_does_not_add_up_or_of_a_type_settle_cannot_place_books_its_net_to_suspense() {
    let line = |rest: &str| format!("{HEADER}\nC,M,1,r,visa,2026-11-30 10:00:00,CET,{rest}");
    let suspense = |csv: &str, says: &str| {
        let got = movements(csv).expect("booked");
        assert_eq!(got[0].counter(), Counter::Chart(SUSPENSE), "{csv}");
        assert_eq!(got[0].kind(), Kind::Adjustment);
        assert!(got[0].fees().is_empty());
        assert!(
            got[0].details()["review"]
                .as_str()
                .is_some_and(|r| r.contains(says)),
            "{}",
            got[0].details()
        );
        got
    };
    // Net 9.00 with 0.50 of fees is not the gross 10.00: its 9.00 is kept, for a person.
    let bad_net = line("Settled,2,EUR,,10.00,1,EUR,,9.00,0.50,,,,v,,7,,,,,,,");
    let got = suspense(&bad_net, "does not add up");
    assert_eq!(got[0].net().to_string(), "9.00");
    assert_eq!(
        got[0].source_key(),
        "adyen/settlement/M/7/Settled/1/2",
        "the key the line would have had"
    );
    let unknown = line("Mystery,2,EUR,,10.00,1,EUR,,10.00,,,,,v,,7,,,,,,,");
    let got = suspense(&unknown, "\"Mystery\" has no account");
    assert_eq!(got[0].net().to_string(), "10.00");
    // A net that cannot be read cannot be booked anywhere: the report is refused.
    let currency = line("Settled,2,EUR,,10.00,1,XXQ,,10.00,,,,,v,,7,,,,,,,");
    assert!(matches!(
        movements(&currency),
        Err(ReportError::Line { .. })
    ));
    let no_net = line("Mystery,2,EUR,,10.00,1,EUR,,,,,,,v,,7,,,,,,,");
    assert!(matches!(movements(&no_net), Err(ReportError::Line { .. })));
    let header = "Company Account,Merchant Account\nC,M\n";
    assert_eq!(
        movements(header).err(),
        Some(ReportError::MissingColumn("Psp Reference"))
    );
}

/// Every record type Adyen publishes has its own place in the chart (none is left to
/// suspense), and the chart holds no type the list does not.
#[test]
fn every_published_record_type_is_in_the_chart() {
    let list: Value = serde_json::from_str(include_str!(
        "../../../../fixtures/adyen/record_types.json"
    ))
    .expect("the list is JSON");
    let types: Vec<&str> = list["types"]
        .as_array()
        .expect("types")
        .iter()
        .map(|t| t["type"].as_str().expect("a type"))
        .collect();
    assert!(types.len() >= 25, "the list is Adyen's whole list");
    let source = SourceName::parse("adyen").expect("source");
    let accounts = ledger::posting::Accounts::defaults(&source);
    for record_type in &types {
        let posting = posting_of(record_type)
            .unwrap_or_else(|| panic!("{record_type} has no row in the chart"));
        let counter = match posting {
            Posting::Gross(_, counter) | Posting::Net(_, counter) => counter,
            Posting::Cost(_) => Counter::Fees,
            Posting::Payout => Counter::Bank,
            Posting::Suspense => panic!("{record_type} is in suspense"),
        };
        let account = accounts.counter_account(&format!("adyen:{record_type}"), counter);
        assert!(!account.starts_with("suspense"), "{record_type}: {account}");
    }
    for (listed, _) in CHART {
        assert!(types.contains(listed), "{listed} is not in Adyen's list");
    }
    // A type settle has no row for still posts, to suspense.
    assert_eq!(posting_of("SettledInstallment"), None);
}

/// Deposits, wires and reserve lines post to their own accounts (not `adjustments`), and a
/// batch's balance carried to the next batch and received from the last one clear each
/// other.
#[test]
fn deposits_wires_reserves_and_carried_balances_have_their_own_accounts() {
    let source = SourceName::parse("adyen").expect("source");
    let accounts = ledger::posting::Accounts::defaults(&source);
    let line = |record_type: &str, debit: &str, credit: &str| {
        format!(
            "C,M,,,,2026-11-30 10:00:00,UTC,{record_type},{record_type} ref,,,,,EUR,{debit},{credit},,,,,,,7,,,,,,,"
        )
    };
    let csv = [
        HEADER.to_owned(),
        line("DepositCorrection", "78.93", ""),
        line("MatchedStatement", "", "500.00"),
        line("ReserveAdjustment", "10.00", ""),
        line("Balancetransfer", "4.19", ""),
        line("Balancetransfer", "", "4.19"),
    ]
    .join("\n");
    let got = movements(&csv).expect("valid");
    let counters: Vec<(String, String)> = got
        .iter()
        .map(|m| {
            (
                accounts.counter_account(m.provider_category(), m.counter()),
                m.net().to_string(),
            )
        })
        .collect();
    assert_eq!(
        counters,
        [
            ("adyen:deposit".to_owned(), "-78.93".to_owned()),
            ("wires:adyen".to_owned(), "500.00".to_owned()),
            ("adyen:reserve".to_owned(), "-10.00".to_owned()),
            ("carry_over:adyen".to_owned(), "-4.19".to_owned()),
            ("carry_over:adyen".to_owned(), "4.19".to_owned()),
        ]
    );
    assert!(got.iter().all(|m| m.details().get("review").is_none()));
}

#[test]
fn another_gross_currency_converts_within_a_minor_unit() {
    // EUR 5.35 at 1.0656568 is USD 5.70; less 0.27 commission, 5.43 net.
    let csv = format!(
        "{HEADER}\nC,M,9,r,ideal,2026-11-30 10:00:00,PST,Settled,8,EUR,,5.35,1.0656568,USD,,5.43,0.27,,,,ideal,,4,,,,,,,\n"
    );
    let got = movements(&csv).expect("valid");
    assert_eq!(got[0].currency().code(), "USD");
    assert_eq!(got[0].amount().to_string(), "5.70");
    // Off by more than a minor unit: it does not add up, and waits in suspense.
    let off = csv.replace(",5.43,", ",5.33,");
    assert_eq!(
        movements(&off).expect("booked")[0].counter(),
        Counter::Chart(SUSPENSE)
    );
}

#[test]
fn net_only_lines_fees_and_the_payout() {
    let csv = format!(
        "{HEADER}\nW,M,,,,2016-02-15 21:29:37,PST,Fee,Transaction Fees February  2016,EUR,,,,USD,1.80,,,,,,,,3,,,,,,,\nW,M,,,,2016-02-15 21:29:37,PST,MerchantPayout,\"TX3488899933XT batch 3, M batch 3, M\",EUR,,,,USD,4.03,,,,,,,,3,,,,,,,\n"
    );
    let got = movements(&csv).expect("valid");
    assert_eq!(
        (got[0].kind(), got[0].net().to_string()),
        (Kind::Fee, "-1.80".to_owned())
    );
    assert_eq!(got[0].fees()[0].fee_type.as_str(), "transaction_fees");
    assert_eq!(got[1].kind(), Kind::PayoutPaid);
    assert_eq!(
        got[1].payout_id().map(PayoutId::as_str),
        Some("TestMerchant:batch:3")
    );
    // Lines of two batches are each their own batch's.
    let mixed = csv.replace(",3,,,,,,,\nW", ",4,,,,,,,\nW");
    let got = movements(&mixed).expect("valid");
    assert!(got[0].source_key().starts_with("adyen/settlement/M/4/"));
    assert!(got[1].source_key().starts_with("adyen/settlement/M/3/"));
}

#[test]
fn a_byte_order_mark_before_the_header_is_not_part_of_a_column_name() {
    let csv = format!(
        "\u{feff}{HEADER}\nC,M,9,r,visa,2026-11-30 10:00:00,CET,Settled,8,EUR,,10.00,1,EUR,,9.75,0.25,,,,v,,5,,,,,,,\n"
    );
    assert_eq!(movements(&csv).expect("valid")[0].net().to_string(), "9.75");
    let moved = format!(
        "\u{feff}Merchant Account,{}",
        HEADER.replace(",Merchant Account,", ",")
    );
    assert!(Report::new(moved.as_bytes()).is_ok());
}

#[test]
fn repeated_identities_are_numbered_and_columns_are_found_by_name() {
    let reordered = "Type,Net Currency,Net Debit (NC),Net Credit (NC),Merchant Account,Psp Reference,Merchant Reference,Creation Date,TimeZone,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC)\nMiscCosts,EUR,1.00,,M,,,2026-11-30 10:00:00,UTC,Cost,,,,,,,,\nMiscCosts,EUR,1.00,,M,,,2026-11-30 10:00:00,UTC,Cost,,,,,,,,\n";
    let got = movements(reordered).expect("valid");
    assert_ne!(got[0].source_key(), got[1].source_key());
    assert!(got[1].source_key().ends_with("#2"));
}

fn lines(draft: &ledger::posting::EntryDraft) -> Vec<(String, String, String)> {
    draft
        .lines
        .iter()
        .map(|l| {
            (
                l.account.clone(),
                l.currency.code().to_owned(),
                l.amount.to_string(),
            )
        })
        .collect()
}

/// A USD sale settled in EUR: the sale is a USD receivable; the settlement clears it in USD
/// and puts the EUR net on the balance, the conversion through `fx:adyen` in each currency.
#[test]
fn a_settled_line_clears_its_sales_receivable_through_fx() {
    let source = SourceName::parse("adyen").expect("source");
    let accounts = ledger::posting::Accounts::defaults(&source);
    let csv = format!(
        "{HEADER}\nC,M,8816000000000002,order-1002,mc,2026-11-30 10:02:44,CET,Settled,8816000000000102,USD,,50.00,0.92,EUR,,45.00,1.00,,,,mc,,7,,,,,,,\n"
    );
    let mut report = Report::new(csv.as_bytes()).expect("header");
    let line = report.next_line().expect("a line").expect("valid");
    let payout = batch_payout("M", "7").expect("payout");
    let settlement = line.movement(&source, "7", &payout).expect("valid");
    assert_eq!(
        settlement.fingerprint().to_hex(),
        "235c39ac0935487ffdf7913948e4ea71691181c394e22dd0678a0815678c4895",
        "the fingerprint settle has always stored for this line"
    );
    let draft = ledger::posting::draft_movement(&settlement, &accounts);
    assert!(draft.is_balanced());
    assert_eq!(
        lines(&draft),
        [
            ("adyen:balance".into(), "EUR".into(), "45.00".into()),
            ("fees:adyen:commission".into(), "EUR".into(), "1.00".into()),
            ("fx:adyen".into(), "EUR".into(), "-46.00".into()),
            ("fx:adyen".into(), "USD".into(), "50.00".into()),
            ("receivables:adyen".into(), "USD".into(), "-50.00".into()),
        ]
    );
    let sale = line
        .sale(&source)
        .expect("valid")
        .expect("a Settled line's sale");
    assert_eq!(sale.source_key(), "adyen/sale/8816000000000102");
    assert_eq!(
        lines(&ledger::posting::draft_receivable(&sale, &accounts)),
        [
            ("receivables:adyen".into(), "USD".into(), "50.00".into()),
            ("sales".into(), "USD".into(), "-50.00".into()),
        ]
    );
    // Its CAPTURE notification names the same sale: same key, same fingerprint, though the
    // notification has its own time and the line its own.
    let notified = notified_capture();
    let from_notification = notified.movement(&source).expect("a sale");
    assert_eq!(from_notification.source_key(), sale.source_key());
    assert_eq!(from_notification.fingerprint(), sale.fingerprint());
    // Another amount is another sale's facts: a conflict, not a replay.
    let other = AdyenSaleTrigger {
        value: 5_001,
        ..notified.clone()
    };
    assert_ne!(
        other.movement(&source).expect("a sale").fingerprint(),
        sale.fingerprint()
    );
    // A refund line has no sale, and its gross stays in the net currency.
    let refund = csv
        .replace(",Settled,", ",Refunded,")
        .replace(",,50.00,0.92,EUR,,45.00,1.00,", ",50.00,,0.92,EUR,46.00,,,");
    let mut report = Report::new(refund.as_bytes()).expect("header");
    let line = report.next_line().expect("a line").expect("valid");
    assert!(line.sale(&source).expect("valid").is_none());
    let movement = line.movement(&source, "7", &payout).expect("valid");
    assert!(movement.converted_counter().is_none());
}

#[test]
fn a_failed_capture_takes_its_receivable_back() {
    let source = SourceName::parse("adyen").expect("source");
    let failed = AdyenSaleTrigger {
        event_code: "CAPTURE_FAILED".into(),
        psp_reference: "8816000000000103".into(),
        original_reference: "8816000000000003".into(),
        merchant_account: "M".into(),
        merchant_reference: String::new(),
        currency: "JPY".into(),
        value: 1_500,
        event_date: "2026-11-29T18:00:00Z".into(),
    };
    let movement = failed.movement(&source).expect("a failure");
    assert_eq!(
        movement.source_key(),
        "adyen/capture_failed/8816000000000103"
    );
    let accounts = ledger::posting::Accounts::defaults(&source);
    assert_eq!(
        lines(&ledger::posting::draft_receivable(&movement, &accounts)),
        [
            ("receivables:adyen".into(), "JPY".into(), "-1500".into()),
            ("sales".into(), "JPY".into(), "1500".into()),
        ]
    );
    let refund = AdyenSaleTrigger {
        event_code: "REFUND".into(),
        ..failed
    };
    assert!(refund.movement(&source).is_err());
}
