//! Movements a provider reports (one item of its ledger: a balance transaction, a report line):
//! what a job resolves an event to when the webhook only names the money. Each movement posts one
//! entry, keyed by the movement alone, whichever event (or payout listing) reached it.

use std::fmt;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::event::Kind;
use crate::fingerprint::{FieldHasher, Fingerprint};
use crate::ids::{IdError, MovementId, PayoutId, Reference};
use crate::money::{Amount, Currency};

/// The account (by role) a movement's gross amount is booked against; the provider balance takes
/// its net and the fee accounts its fees.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Counter {
    Sales,
    Refunds,
    Disputes,
    Fees,
    Bank,
    Adjustments,
    /// What the provider owes for a sale it has captured and not yet settled.
    Receivables,
    /// An account of the provider's chart of accounts beyond these (application fees earned,
    /// transfers, reserves, `suspense:{source}` for a category settle does not know...):
    /// `{source}` in the name stands for the source's name.
    Chart(&'static str),
}

impl Counter {
    pub fn as_str(self) -> &'static str {
        match self {
            Counter::Sales => "sales",
            Counter::Refunds => "refunds",
            Counter::Disputes => "disputes",
            Counter::Fees => "fees",
            Counter::Bank => "bank",
            Counter::Adjustments => "adjustments",
            Counter::Receivables => "receivables",
            Counter::Chart(name) => name,
        }
    }
}

/// A provider's fee type (the provider's own name for a part of its fee: a processing fee, an
/// application fee, a tax): lower-case letters, digits and `_`. The provider's own processing fee
/// is booked to the source's fee account itself, every other type to a sub-account named by it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct FeeType {
    name: String,
    own: bool,
}

impl FeeType {
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let ok = (1..=64).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if ok {
            Ok(Self {
                name: text.to_owned(),
                own: false,
            })
        } else {
            Err(IdError::ProviderId { what: "fee type" })
        }
    }

    /// The provider's own processing fee, under its own name: booked to the fee account itself.
    pub fn providers_own(text: &str) -> Result<Self, IdError> {
        Self::parse(text).map(|fee_type| Self {
            own: true,
            ..fee_type
        })
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }

    pub fn is_providers_own(&self) -> bool {
        self.own
    }
}

impl fmt::Display for FeeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// One part of a movement's fee, signed like the fee (a refunded fee is negative).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Fee {
    pub fee_type: FeeType,
    pub amount: Amount,
}

/// Why a provider's movement cannot be posted as reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MovementError {
    #[error("{field}: {detail}")]
    Field { field: &'static str, detail: String },
    #[error("fee_details sum to {details} but fee is {fee}")]
    FeeDetails { details: Amount, fee: Amount },
    #[error("net {net} is not amount {amount} minus fee {fee}")]
    Net {
        amount: Amount,
        fee: Amount,
        net: Amount,
    },
    #[error("fee_details are in {found}, the movement in {expected}")]
    FeeCurrency { expected: Currency, found: Currency },
    #[error("{0}")]
    Mismatch(String),
    #[error(
        "the counter amount {counter} is in the movement's currency but is not its amount {amount}"
    )]
    CounterAmount { counter: Amount, amount: Amount },
}

/// What a movement's fingerprint compares when its key is reached again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compared {
    /// Every fact: the movement is only ever read from one document (one item of the
    /// provider's ledger).
    #[default]
    Everything,
    /// Its key, id, category, currency and amounts, not its date or reference: a movement two
    /// different documents both describe (a sale, from its notification or from the settlement
    /// report's line), each with its own time stamp.
    Money,
}

/// Everything [`Movement::new`] checks.
#[derive(Clone, Debug)]
pub struct MovementParts {
    /// The entry's source key: the provider's movement identity, namespaced by source.
    pub source_key: String,
    pub id: MovementId,
    pub kind: Kind,
    pub counter: Counter,
    pub currency: Currency,
    /// Gross, signed as the provider reports it (a refund is negative).
    pub amount: Amount,
    pub fee: Amount,
    pub fees: Vec<Fee>,
    /// What the movement does to the provider balance: `amount - fee`.
    pub net: Amount,
    pub occurred_at: DateTime<Utc>,
    /// The payout this movement is (a payout or its failure), when it is one.
    pub payout_id: Option<PayoutId>,
    /// The object the movement belongs to (a charge, refund, dispute or payout id).
    pub reference: Option<Reference>,
    /// What the provider reported, kept with the entry. It carries `net` (what the movement did
    /// to the provider balance, in major units, as text) and `currency`: a payout's
    /// reconciliation sums them.
    pub details: Value,
    /// The provider's own name for the movement's category (its reporting category or record type):
    /// fingerprinted instead of the kind and counter settle maps it to, so a change of that
    /// mapping never makes a posted movement look different.
    pub provider_category: String,
    /// What the counter account takes, in its own currency, when the provider converted the
    /// gross (a settlement line's gross in the shopper's currency): the entry goes through the FX
    /// clearing account. `None`: the counter takes `amount`.
    pub counter_amount: Option<(Amount, Currency)>,
    pub compared: Compared,
}

/// A movement whose facts are consistent: the fee parts sum to the fee, the net is the amount
/// minus the fee, everything in one currency at its scale.
#[derive(Clone, Debug)]
pub struct Movement {
    parts: MovementParts,
}

impl Movement {
    pub fn new(parts: MovementParts) -> Result<Self, MovementError> {
        let currency = parts.currency;
        let mut details_sum = Amount::zero(currency);
        for fee in &parts.fees {
            if fee.amount.decimal().scale() != currency.exponent() {
                return Err(field(
                    "fee_details",
                    "a fee part is not at the currency's scale",
                ));
            }
            details_sum = details_sum
                .checked_add(fee.amount)
                .ok_or_else(|| field("fee_details", "the fee parts overflow"))?;
        }
        if !parts.fees.is_empty() && details_sum != parts.fee {
            return Err(MovementError::FeeDetails {
                details: details_sum,
                fee: parts.fee,
            });
        }
        if let Some((counter, counter_currency)) = parts.counter_amount
            && counter_currency == currency
            && counter != parts.amount
        {
            return Err(MovementError::CounterAmount {
                counter,
                amount: parts.amount,
            });
        }
        if parts.amount.checked_sub(parts.fee) != Some(parts.net) {
            return Err(MovementError::Net {
                amount: parts.amount,
                fee: parts.fee,
                net: parts.net,
            });
        }
        Ok(Self { parts })
    }

    pub fn source_key(&self) -> &str {
        &self.parts.source_key
    }

    pub fn id(&self) -> &MovementId {
        &self.parts.id
    }

    pub fn kind(&self) -> Kind {
        self.parts.kind
    }

    pub fn counter(&self) -> Counter {
        self.parts.counter
    }

    /// The provider's own name for the movement's category (its reporting category or record
    /// type).
    pub fn provider_category(&self) -> &str {
        &self.parts.provider_category
    }

    pub fn currency(&self) -> Currency {
        self.parts.currency
    }

    pub fn amount(&self) -> Amount {
        self.parts.amount
    }

    pub fn fee(&self) -> Amount {
        self.parts.fee
    }

    /// The fee by part; a fee reported without parts is one part of the provider's own fee type.
    pub fn fees(&self) -> &[Fee] {
        &self.parts.fees
    }

    pub fn net(&self) -> Amount {
        self.parts.net
    }

    pub fn occurred_at(&self) -> DateTime<Utc> {
        self.parts.occurred_at
    }

    pub fn payout_id(&self) -> Option<&PayoutId> {
        self.parts.payout_id.as_ref()
    }

    pub fn reference(&self) -> Option<&Reference> {
        self.parts.reference.as_ref()
    }

    pub fn details(&self) -> &Value {
        &self.parts.details
    }

    /// The gross in another currency than the movement's, as the counter account takes it.
    pub fn converted_counter(&self) -> Option<(Amount, Currency)> {
        self.parts
            .counter_amount
            .filter(|(_, currency)| *currency != self.parts.currency)
    }

    /// Moves no money at all: nothing to post.
    pub fn is_zero(&self) -> bool {
        self.parts.amount.is_zero() && self.parts.fee.is_zero()
    }

    /// SHA-256 over the money facts (never over `details`, which may carry a status that moves
    /// on): a second fetch of the same movement must give the same fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.parts.fingerprint_of()
    }
}

impl MovementParts {
    fn fingerprint_of(&self) -> Fingerprint {
        let mut hasher = FieldHasher::new("settle.movement.v1");
        hasher.field("source_key", &self.source_key);
        hasher.field("id", self.id.as_str());
        hasher.field("category", &self.provider_category);
        hasher.field("currency", self.currency.code());
        hasher.field("amount", &self.amount.to_string());
        hasher.field("fee", &self.fee.to_string());
        for fee in &self.fees {
            hasher.field("fee_type", fee.fee_type.as_str());
            hasher.field("fee_amount", &fee.amount.to_string());
        }
        hasher.field("net", &self.net.to_string());
        if let Some((counter, currency)) = &self.counter_amount {
            hasher.field("counter_currency", currency.code());
            hasher.field("counter_amount", &counter.to_string());
        }
        if self.compared == Compared::Money {
            hasher.field("compared", "money");
            hasher.optional("payout_id", self.payout_id.as_ref().map(PayoutId::as_str));
            return hasher.finish();
        }
        hasher.field("occurred_at", &self.occurred_at.to_rfc3339());
        hasher.optional("payout_id", self.payout_id.as_ref().map(PayoutId::as_str));
        hasher.optional("reference", self.reference.as_ref().map(Reference::as_str));
        hasher.finish()
    }
}

fn field(field: &'static str, detail: &str) -> MovementError {
    MovementError::Field {
        field,
        detail: detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(text: &str) -> Amount {
        Amount::parse(text, Currency::parse("USD").expect("USD")).expect("amount")
    }

    fn parts(amount: &str, fee: &str, fees: &[(&str, &str)], net: &str) -> MovementParts {
        MovementParts {
            source_key: "psp/movement/m_1".into(),
            id: MovementId::parse("txn_1").expect("id"),
            kind: Kind::ChargeSettled,
            counter: Counter::Sales,
            currency: Currency::parse("USD").expect("USD"),
            amount: usd(amount),
            fee: usd(fee),
            fees: fees
                .iter()
                .map(|(t, a)| Fee {
                    fee_type: FeeType::parse(t).expect("type"),
                    amount: usd(a),
                })
                .collect(),
            net: usd(net),
            occurred_at: DateTime::from_timestamp(1_700_000_000, 0).expect("time"),
            payout_id: None,
            reference: None,
            details: Value::Null,
            provider_category: "charge".into(),
            counter_amount: None,
            compared: Compared::Everything,
        }
    }

    #[test]
    fn facts_must_add_up() {
        let fees = [("processing", "2.90"), ("tax", "0.30")];
        assert!(Movement::new(parts("100.00", "3.20", &fees, "96.80")).is_ok());
        assert!(matches!(
            Movement::new(parts("100.00", "3.20", &fees[..1], "96.80")),
            Err(MovementError::FeeDetails { .. })
        ));
        assert!(matches!(
            Movement::new(parts("100.00", "3.20", &fees, "96.81")),
            Err(MovementError::Net { .. })
        ));
        // A refund: negative amount, a refunded fee part.
        let refund = parts("-10.00", "-0.30", &[("processing", "-0.30")], "-9.70");
        assert!(Movement::new(refund).is_ok());
    }

    #[test]
    fn the_fingerprint_ignores_details_but_not_money() {
        let base = Movement::new(parts("100.00", "3.20", &[], "96.80")).expect("valid");
        let mut with_details = parts("100.00", "3.20", &[], "96.80");
        with_details.details = serde_json::json!({"status": "available"});
        let with_details = Movement::new(with_details).expect("valid");
        assert_eq!(base.fingerprint(), with_details.fingerprint());
        let other = Movement::new(parts("100.00", "3.10", &[], "96.90")).expect("valid");
        assert_ne!(base.fingerprint(), other.fingerprint());
    }
}
