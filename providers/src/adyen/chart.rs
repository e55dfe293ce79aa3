//! Adyen's chart of accounts: how each record type of a settlement details report posts.

use ledger::Kind;
use ledger::movement::Counter;

/// How a record type is posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Posting {
    /// A payment line: gross in the gross currency, fees, net; the gross against `counter`.
    Gross(Kind, Counter),
    /// A line with only a net amount, against `counter`.
    Net(Kind, Counter),
    /// A line with only a net amount that is a cost (or its refund): a fee of this type.
    Cost(&'static str),
    /// The batch's payout to the merchant's bank.
    Payout,
    /// A line settle cannot place: its net against `suspense:{source}`, for a person.
    Suspense,
}


/// Adyen's chart of accounts: how each record type Adyen publishes
/// (`fixtures/adyen/record_types.json` names the sources; a test walks the list) posts. The net
/// always goes to the Adyen balance (`{source}:balance`), a payment line's fees to
/// `fees:{source}:{type}`; the rest against the counter account below (`{source}` is the
/// source's name), unless the source names another for the type (`[sources.accounts.chart]`,
/// keyed `adyen:{Type}`). A type not listed, or a line that does not add up, books its net to
/// `suspense:{source}` for a person to classify; the rest of the report is booked.
///
/// | record type | kind | counter account |
/// |---|---|---|
/// | `Settled`, `SettledBulk` | charge_settled | receivables:{source} (the sale a `Settled` line clears); sales for `SettledBulk` |
/// | `Refunded`, `RefundedBulk` | refund_settled | refunds |
/// | `RefundedReversed` | adjustment | refunds |
/// | `SettledReversed`, `CaptureFailed` | adjustment | sales (the sale is taken back) |
/// | `Chargeback`, `SecondChargeback` | chargeback | disputes:{source} |
/// | `ChargebackReversed` | chargeback_reversed | disputes:{source} |
/// | `Fee`, `MiscCosts`, `PaymentCost`, `InvoiceDeduction`, `AuthorisationSchemeFee` | fee | fees:{source}:{its fee type} |
/// | `DepositCorrection` | adjustment | {source}:deposit (the security deposit Adyen holds) |
/// | `ReserveAdjustment`, `RefundReserveAdjustment` | adjustment | {source}:reserve |
/// | `MatchedStatement` | adjustment | wires:{source} (a wire from the merchant, cleared against the bank) |
/// | `ManualCorrected` | adjustment | adjustments |
/// | `MerchantPayout` | payout_paid | bank |
/// | `BankInstructionReturned` | adjustment | bank (a payout returned) |
/// | `Balancetransfer` | adjustment | carry_over:{source} (what one batch carries to the next, which clears it) |
/// | `InternalCompanyPayout` | adjustment | transfers:{source} |
/// | `PaidOut`, `PaidOutReversed`, `EpaPaid` | adjustment | payouts_sent:{source} (paid out through Adyen to others) |
/// | anything else | adjustment | suspense:{source} |
pub(super) const CHART: &[(&str, Posting)] = {
    use Counter::*;
    &[
        ("Settled", Posting::Gross(Kind::ChargeSettled, Receivables)),
        ("SettledBulk", Posting::Gross(Kind::ChargeSettled, Sales)),
        ("Refunded", Posting::Gross(Kind::RefundSettled, Refunds)),
        ("RefundedBulk", Posting::Gross(Kind::RefundSettled, Refunds)),
        ("RefundedReversed", Posting::Gross(Kind::Adjustment, Refunds)),
        ("SettledReversed", Posting::Net(Kind::Adjustment, Sales)),
        ("CaptureFailed", Posting::Net(Kind::Adjustment, Sales)),
        ("Chargeback", Posting::Gross(Kind::Chargeback, Disputes)),
        ("SecondChargeback", Posting::Gross(Kind::Chargeback, Disputes)),
        ("ChargebackReversed", Posting::Gross(Kind::ChargebackReversed, Disputes)),
        ("Fee", Posting::Cost("transaction_fees")),
        ("MiscCosts", Posting::Cost("misc_costs")),
        ("PaymentCost", Posting::Cost("payment_cost")),
        ("InvoiceDeduction", Posting::Cost("invoice_deduction")),
        ("AuthorisationSchemeFee", Posting::Cost("authorisation_scheme_fee")),
        ("DepositCorrection", Posting::Net(Kind::Adjustment, Chart("{source}:deposit"))),
        ("ReserveAdjustment", Posting::Net(Kind::Adjustment, Chart("{source}:reserve"))),
        ("RefundReserveAdjustment", Posting::Net(Kind::Adjustment, Chart("{source}:reserve"))),
        ("MatchedStatement", Posting::Net(Kind::Adjustment, Chart("wires:{source}"))),
        ("ManualCorrected", Posting::Net(Kind::Adjustment, Adjustments)),
        ("MerchantPayout", Posting::Payout),
        ("BankInstructionReturned", Posting::Net(Kind::Adjustment, Bank)),
        ("Balancetransfer", Posting::Net(Kind::Adjustment, Chart(CARRY_OVER))),
        ("InternalCompanyPayout", Posting::Net(Kind::Adjustment, Chart("transfers:{source}"))),
        ("PaidOut", Posting::Net(Kind::Adjustment, Chart("payouts_sent:{source}"))),
        ("PaidOutReversed", Posting::Net(Kind::Adjustment, Chart("payouts_sent:{source}"))),
        ("EpaPaid", Posting::Net(Kind::Adjustment, Chart("payouts_sent:{source}"))),
    ]
};

/// The account a batch's balance carried to the next batch waits in until that batch's line
/// clears it.
pub const CARRY_OVER: &str = "carry_over:{source}";

/// How a record type posts: its row of [`CHART`], if it has one.
pub(super) fn posting_of(record_type: &str) -> Option<Posting> {
    CHART
        .iter()
        .find(|(listed, _)| *listed == record_type)
        .map(|&(_, posting)| posting)
}
