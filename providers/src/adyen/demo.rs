//! Adyen's part of `settle demo`: a source booking from settlement details reports, a `CAPTURE`
//! booked as a receivable (with a `REFUND` and an `AUTHORISATION` beside it, whose money is not
//! the notification's), and the `REPORT_AVAILABLE` of its batch, whose report a fake report
//! download in this process serves: the capture settled with its fees, a USD payment settled in
//! EUR, a refund, the month's fee and the payout of the rest, which reconciles.

use futures::future::BoxFuture;
use serde_json::json;

use super::fake::FakeReports;
use super::sign;
use crate::demo::{DemoError, DemoPart, DemoPayout, Deliver, Expected, Tally, random_bytes};

const SOURCE: &str = "adyen";
const REPORT_USER: &str = "report@Company.DemoCo";
/// The settlement batch the scenario posts and reconciles, and its report.
const BATCH: &str = "TestMerchant:batch:1";
const REPORT: &str = "settlement_detail_report_batch_1.csv";
/// The report, in the shape of `fixtures/adyen` (see its SOURCES.md): the notified EUR capture
/// settled with its fees, a USD payment (automatic capture, never notified) settled in EUR, a
/// refund, the month's fee and the payout of the rest.
const REPORT_CSV: &str = "\
Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date,TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC),Payment Method Variant,Modification Merchant Reference,Batch Number
DemoCo,TestMerchant,PSPPAYMENT100000,order-42,visa,2026-11-30 12:05:00,CET,Settled,PSPCAPTURE100000,EUR,,42.00,1,EUR,,40.90,,0.10,0.20,0.80,visaclassic,,1
DemoCo,TestMerchant,PSPPAYMENT200000,order-43,mc,2026-11-30 13:10:00,CET,Settled,PSPCAPTURE200000,USD,,25.00,0.92,EUR,,22.60,0.40,,,,mccredit,,1
DemoCo,TestMerchant,PSPPAYMENT100000,order-42,visa,2026-11-30 15:00:00,CET,Refunded,PSPREFUND1000000,EUR,10.00,,1,EUR,10.00,,,,,,visaclassic,refund-42,1
DemoCo,TestMerchant,,,,2026-11-30 23:00:00,CET,Fee,Transaction Fees November 2026,EUR,,,,EUR,1.50,,,,,,,,1
DemoCo,TestMerchant,,,,2026-12-01 02:00:00,CET,MerchantPayout,\"TX0000000001XT batch 1, TestMerchant\",EUR,,,,EUR,52.00,,,,,,,,1
";

pub(super) struct Part {
    key: String,
    password: String,
    fake: FakeReports,
}

impl Part {
    pub(super) async fn start() -> Result<Self, DemoError> {
        let password = hex::encode(random_bytes());
        let fake = FakeReports::start(REPORT_USER, &password)
            .await
            .map_err(|e| format!("cannot start the fake Adyen report server: {e}"))?;
        fake.put(REPORT, REPORT_CSV.as_bytes().to_vec());
        Ok(Self {
            key: hex::encode(random_bytes()).to_uppercase(),
            password,
            fake,
        })
    }

    /// Sends one delivery; Adyen's answer says nothing of what was recorded, so each delivery
    /// records one event (a REFUND's money is the report's, an AUTHORISATION is no money).
    async fn deliver(
        &self,
        deliver: &dyn Deliver,
        tally: &mut Tally,
        items: &[serde_json::Value],
        label: &str,
    ) -> Result<(), DemoError> {
        let body = sign::notification(&self.key, items);
        let (status, answer) = deliver.deliver(SOURCE, Vec::new(), body).await?;
        tally.accepted(label, status, &answer, "[accepted]");
        Ok(())
    }
}

impl DemoPart for Part {
    fn source_toml(&self) -> String {
        format!(
            "[[sources]]\nname = \"{SOURCE}\"\nprovider = \"adyen\"\nsecrets = [\"{}\"]\n\
             money_from = \"reports\"\nreport_user = \"{REPORT_USER}\"\n\
             report_password = \"{}\"\nreport_hosts = [\"{}\"]\n",
            self.key,
            self.password,
            self.fake.host()
        )
    }

    fn banner(&self) -> Option<String> {
        Some(format!(
            "so is Adyen's report download, at {}",
            self.fake.host()
        ))
    }

    fn send<'a>(
        &'a self,
        deliver: &'a dyn Deliver,
        tally: &'a mut Tally,
    ) -> BoxFuture<'a, Result<(), DemoError>> {
        Box::pin(async move {
            let items = [
                sign::item("CAPTURE", "PSPCAPTURE100000", 4200, "EUR", "true"),
                sign::item("REFUND", "PSPREFUND1000000", 1000, "EUR", "true"),
                sign::item("AUTHORISATION", "PSPAUTH100000000", 4200, "EUR", "true"),
            ];
            self.deliver(
                deliver,
                tally,
                &items,
                "adyen: CAPTURE (a receivable), REFUND, AUTHORISATION",
            )
            .await?;
            let mut report = sign::item("REPORT_AVAILABLE", REPORT, 0, "EUR", "true");
            report["reason"] = json!(self.fake.url("TestMerchant", REPORT));
            self.deliver(
                deliver,
                tally,
                &[report],
                "adyen: REPORT_AVAILABLE settlement batch 1",
            )
            .await
        })
    }

    fn expected(&self) -> Expected {
        Expected {
            recorded: 2,
            // Each capture's sale, each Settled line's settlement, the refund, the fee and
            // the payout.
            posted: 7,
            ..Expected::default()
        }
    }

    fn payouts(&self) -> Vec<DemoPayout> {
        vec![DemoPayout {
            title: format!("Adyen batch {BATCH} (its settlement details report)"),
            payout_id: BATCH.to_owned(),
            items: "lines",
        }]
    }

    fn receivable_accounts(&self) -> Vec<String> {
        vec![format!("receivables:{SOURCE}")]
    }
}
