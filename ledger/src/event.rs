//! The canonical settlement event every provider's payload is adapted into.

use std::fmt;

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::fingerprint::{FieldHasher, Fingerprint};
use crate::ids::{IdError, MovementId, PayoutId, Reference};
use crate::money::{Amount, Currency, MoneyError};

/// What kind of money movement an event describes (README.md, From event to journal entry).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Kind {
    ChargeSettled,
    RefundSettled,
    Chargeback,
    ChargebackReversed,
    Fee,
    PayoutPaid,
    PayoutFailed,
    Adjustment,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::ChargeSettled,
        Kind::RefundSettled,
        Kind::Chargeback,
        Kind::ChargebackReversed,
        Kind::Fee,
        Kind::PayoutPaid,
        Kind::PayoutFailed,
        Kind::Adjustment,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ChargeSettled => "charge_settled",
            Kind::RefundSettled => "refund_settled",
            Kind::Chargeback => "chargeback",
            Kind::ChargebackReversed => "chargeback_reversed",
            Kind::Fee => "fee",
            Kind::PayoutPaid => "payout_paid",
            Kind::PayoutFailed => "payout_failed",
            Kind::Adjustment => "adjustment",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// The canonical amount fields of this kind, in the order they are fingerprinted.
    pub fn amount_fields(self) -> &'static [&'static str] {
        match self {
            Kind::ChargeSettled => &["gross", "fee", "net"],
            Kind::RefundSettled | Kind::Chargeback => &["amount", "fee"],
            _ => &["amount"],
        }
    }

    fn requires_payout_id(self) -> bool {
        matches!(self, Kind::PayoutPaid | Kind::PayoutFailed)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The amounts of an event, by kind. All are in the event's currency.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Amounts {
    ChargeSettled {
        gross: Amount,
        fee: Amount,
        net: Amount,
    },
    RefundSettled {
        amount: Amount,
        fee: Amount,
    },
    Chargeback {
        amount: Amount,
        fee: Amount,
    },
    ChargebackReversed {
        amount: Amount,
    },
    Fee {
        amount: Amount,
    },
    PayoutPaid {
        amount: Amount,
    },
    PayoutFailed {
        amount: Amount,
    },
    Adjustment {
        amount: Amount,
    },
}

impl Amounts {
    pub fn kind(&self) -> Kind {
        match self {
            Amounts::ChargeSettled { .. } => Kind::ChargeSettled,
            Amounts::RefundSettled { .. } => Kind::RefundSettled,
            Amounts::Chargeback { .. } => Kind::Chargeback,
            Amounts::ChargebackReversed { .. } => Kind::ChargebackReversed,
            Amounts::Fee { .. } => Kind::Fee,
            Amounts::PayoutPaid { .. } => Kind::PayoutPaid,
            Amounts::PayoutFailed { .. } => Kind::PayoutFailed,
            Amounts::Adjustment { .. } => Kind::Adjustment,
        }
    }

    /// Builds the amounts of `kind` from its fields in [`Kind::amount_fields`] order.
    pub fn from_fields(kind: Kind, fields: &[Amount]) -> Option<Amounts> {
        Some(match (kind, fields) {
            (Kind::ChargeSettled, &[gross, fee, net]) => Amounts::ChargeSettled { gross, fee, net },
            (Kind::RefundSettled, &[amount, fee]) => Amounts::RefundSettled { amount, fee },
            (Kind::Chargeback, &[amount, fee]) => Amounts::Chargeback { amount, fee },
            (Kind::ChargebackReversed, &[amount]) => Amounts::ChargebackReversed { amount },
            (Kind::Fee, &[amount]) => Amounts::Fee { amount },
            (Kind::PayoutPaid, &[amount]) => Amounts::PayoutPaid { amount },
            (Kind::PayoutFailed, &[amount]) => Amounts::PayoutFailed { amount },
            (Kind::Adjustment, &[amount]) => Amounts::Adjustment { amount },
            _ => return None,
        })
    }

    /// `(field name, amount)` in [`Kind::amount_fields`] order.
    pub fn fields(&self) -> Vec<(&'static str, Amount)> {
        let names = self.kind().amount_fields();
        let values = match *self {
            Amounts::ChargeSettled { gross, fee, net } => vec![gross, fee, net],
            Amounts::RefundSettled { amount, fee } | Amounts::Chargeback { amount, fee } => {
                vec![amount, fee]
            }
            Amounts::ChargebackReversed { amount }
            | Amounts::Fee { amount }
            | Amounts::PayoutPaid { amount }
            | Amounts::PayoutFailed { amount }
            | Amounts::Adjustment { amount } => vec![amount],
        };
        names.iter().copied().zip(values).collect()
    }
}

/// Why an authentic, keyable delivery is not a valid settlement. The event is still recorded as
/// received, and its job dead-letters it for a person to decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FactsError {
    #[error("unknown settlement kind {0:?}")]
    UnknownKind(String),
    #[error("missing field `{0}`")]
    Missing(&'static str),
    #[error("field `{field}` must be {expected}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("field `{field}`: {source}")]
    Money {
        field: &'static str,
        source: MoneyError,
    },
    #[error("field `{field}`: {source}")]
    Id {
        field: &'static str,
        source: IdError,
    },
    #[error("field `{0}` must be an RFC 3339 date-time such as 2026-11-30T12:00:00Z")]
    Time(&'static str),
    #[error("`{0}` must be a positive amount")]
    NotPositive(&'static str),
    #[error("`{0}` must not be negative")]
    Negative(&'static str),
    #[error("`{0}` must not be zero")]
    Zero(&'static str),
    #[error("net {net} is not gross {gross} minus fee {fee}")]
    NetMismatch {
        gross: Amount,
        fee: Amount,
        net: Amount,
    },
    #[error("amount `{0}` does not have the currency's number of decimals")]
    Scale(&'static str),
    #[error("{0}")]
    Provider(String),
}

/// Everything needed to make a [`SettlementEvent`]; [`SettlementEvent::new`] checks it.
#[derive(Clone, Debug)]
pub struct EventParts {
    pub movement_id: MovementId,
    pub occurred_at: DateTime<Utc>,
    pub currency: Currency,
    pub amounts: Amounts,
    pub payout_id: Option<PayoutId>,
    pub reference: Option<Reference>,
}

/// A valid settlement event: its facts are consistent, its amounts exact in its currency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementEvent {
    movement_id: MovementId,
    occurred_at: DateTime<Utc>,
    currency: Currency,
    amounts: Amounts,
    payout_id: Option<PayoutId>,
    reference: Option<Reference>,
}

impl SettlementEvent {
    pub fn new(parts: EventParts) -> Result<Self, FactsError> {
        let kind = parts.amounts.kind();
        for (field, amount) in parts.amounts.fields() {
            if amount.decimal().scale() != parts.currency.exponent() {
                return Err(FactsError::Scale(field));
            }
            match (kind, field) {
                (Kind::Adjustment, _) if amount.is_zero() => return Err(FactsError::Zero(field)),
                (Kind::Adjustment, _) => {}
                (_, "fee") if amount.is_negative() => return Err(FactsError::Negative(field)),
                (_, "fee") => {}
                // net is checked against gross - fee below; its sign follows from them.
                (_, "net") => {}
                _ if !amount.is_positive() => return Err(FactsError::NotPositive(field)),
                _ => {}
            }
        }
        if let Amounts::ChargeSettled { gross, fee, net } = parts.amounts
            && gross.checked_sub(fee) != Some(net)
        {
            return Err(FactsError::NetMismatch { gross, fee, net });
        }
        if kind.requires_payout_id() && parts.payout_id.is_none() {
            return Err(FactsError::Missing("payout_id"));
        }
        // The canonical form writes RFC 3339, whose years have four digits: an instant outside
        // them (a provider's epoch in milliseconds read as seconds, say) could be recorded but
        // never read back.
        if !(0..=9999).contains(&parts.occurred_at.year()) {
            return Err(FactsError::Time("occurred_at"));
        }
        Ok(Self {
            movement_id: parts.movement_id,
            occurred_at: parts.occurred_at,
            currency: parts.currency,
            amounts: parts.amounts,
            payout_id: parts.payout_id,
            reference: parts.reference,
        })
    }

    /// Reads the canonical schema's `data` object (README.md, `standard`) for `kind`. Amounts must be
    /// decimal strings: a JSON number is refused, so no float ever comes near money.
    pub fn from_canonical(kind: Kind, data: &Map<String, Value>) -> Result<Self, FactsError> {
        let currency_text = required_text(data, "currency")?;
        let currency = Currency::parse(currency_text).map_err(|source| FactsError::Money {
            field: "currency",
            source,
        })?;
        let mut amounts = Vec::with_capacity(3);
        for &field in kind.amount_fields() {
            let text = required_text(data, field)?;
            let amount = Amount::parse(text, currency)
                .map_err(|source| FactsError::Money { field, source })?;
            amounts.push(amount);
        }
        let amounts = Amounts::from_fields(kind, &amounts)
            .ok_or(FactsError::UnknownKind(kind.as_str().to_owned()))?;
        let occurred_text = required_text(data, "occurred_at")?;
        let occurred_at = DateTime::parse_from_rfc3339(occurred_text)
            .map_err(|_| FactsError::Time("occurred_at"))?
            .with_timezone(&Utc);
        SettlementEvent::new(EventParts {
            movement_id: parse_id(data, "movement_id", MovementId::parse)?
                .ok_or(FactsError::Missing("movement_id"))?,
            occurred_at,
            currency,
            amounts,
            payout_id: parse_id(data, "payout_id", PayoutId::parse)?,
            reference: parse_id(data, "reference", Reference::parse)?,
        })
    }

    /// The canonical JSON form: `kind` plus the canonical schema's `data` fields. This is what
    /// the store keeps as an event's facts, and [`SettlementEvent::from_stored`] reads back.
    pub fn to_canonical(&self) -> Value {
        let mut data = Map::new();
        data.insert("kind".into(), json!(self.kind().as_str()));
        data.insert("movement_id".into(), json!(self.movement_id.as_str()));
        data.insert(
            "occurred_at".into(),
            json!(canonical_time(self.occurred_at)),
        );
        data.insert("currency".into(), json!(self.currency.code()));
        for (field, amount) in self.amounts.fields() {
            data.insert(field.into(), json!(amount.to_string()));
        }
        if let Some(payout_id) = &self.payout_id {
            data.insert("payout_id".into(), json!(payout_id.as_str()));
        }
        if let Some(reference) = &self.reference {
            data.insert("reference".into(), json!(reference.as_str()));
        }
        Value::Object(data)
    }

    /// Reads facts written by [`SettlementEvent::to_canonical`].
    pub fn from_stored(value: &Value) -> Result<Self, FactsError> {
        let data = value.as_object().ok_or(FactsError::WrongType {
            field: "facts",
            expected: "an object",
        })?;
        let kind_text = required_text(data, "kind")?;
        let kind =
            Kind::parse(kind_text).ok_or_else(|| FactsError::UnknownKind(kind_text.into()))?;
        Self::from_canonical(kind, data)
    }

    /// SHA-256 over the financial facts only: kind, movement, currency, amounts at the
    /// currency's scale, the instant, payout and reference.
    pub fn fingerprint(&self) -> Fingerprint {
        let mut hasher = FieldHasher::new("settle.facts.v1");
        hasher.field("kind", self.kind().as_str());
        hasher.field("movement_id", self.movement_id.as_str());
        hasher.field("currency", self.currency.code());
        for (field, amount) in self.amounts.fields() {
            hasher.field(field, &amount.to_string());
        }
        hasher.field("occurred_at", &canonical_time(self.occurred_at));
        hasher.optional("payout_id", self.payout_id.as_ref().map(PayoutId::as_str));
        hasher.optional("reference", self.reference.as_ref().map(Reference::as_str));
        hasher.finish()
    }

    pub fn kind(&self) -> Kind {
        self.amounts.kind()
    }

    pub fn movement_id(&self) -> &MovementId {
        &self.movement_id
    }

    pub fn occurred_at(&self) -> DateTime<Utc> {
        self.occurred_at
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }

    pub fn amounts(&self) -> &Amounts {
        &self.amounts
    }

    pub fn payout_id(&self) -> Option<&PayoutId> {
        self.payout_id.as_ref()
    }

    pub fn reference(&self) -> Option<&Reference> {
        self.reference.as_ref()
    }
}

/// One instant, one text: UTC, `Z`, fractional seconds only when present.
fn canonical_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn text<'a>(
    data: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'a str>, FactsError> {
    match data.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(FactsError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

fn required_text<'a>(
    data: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, FactsError> {
    text(data, field)?.ok_or(FactsError::Missing(field))
}

fn parse_id<T>(
    data: &Map<String, Value>,
    field: &'static str,
    parse: fn(&str) -> Result<T, IdError>,
) -> Result<Option<T>, FactsError> {
    text(data, field)?
        .map(|text| parse(text).map_err(|source| FactsError::Id { field, source }))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(text: &str) -> Map<String, Value> {
        match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            other => panic!("not an object: {other:?}"),
        }
    }

    const CHARGE: &str = r#"{"movement_id": "ch_123", "occurred_at": "2026-11-30T11:59:00Z",
        "currency": "USD", "gross": "100.00", "fee": "3.20", "net": "96.80",
        "payout_id": "po_9", "reference": "order-42"}"#;

    #[test]
    fn an_instant_beyond_four_digit_years_is_invalid_facts() {
        let event =
            SettlementEvent::from_canonical(Kind::ChargeSettled, &data(CHARGE)).expect("valid");
        let far = DateTime::from_timestamp(1_999_999_999_900, 0).expect("representable");
        let parts = EventParts {
            movement_id: event.movement_id.clone(),
            occurred_at: far,
            currency: event.currency,
            amounts: event.amounts,
            payout_id: event.payout_id.clone(),
            reference: event.reference.clone(),
        };
        assert!(matches!(
            SettlementEvent::new(parts),
            Err(FactsError::Time("occurred_at"))
        ));
    }

    fn check(kind: Kind, json: &str, expected: Result<(), &str>) {
        let got = SettlementEvent::from_canonical(kind, &data(json));
        match (got, expected) {
            (Ok(_), Ok(())) => {}
            (Err(error), Err(want)) => assert!(
                error.to_string().contains(want),
                "{json}: `{error}` does not mention `{want}`"
            ),
            (got, want) => panic!("{json}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn canonical_events_validate() {
        let ok = Ok(());
        check(Kind::ChargeSettled, CHARGE, ok);
        check(
            Kind::ChargeSettled,
            &CHARGE.replace("2026-11-30T11:59:00Z", "9999-12-31T23:59:59Z"),
            ok,
        );
        check(
            Kind::ChargeSettled,
            &CHARGE.replace("96.80", "96.81"),
            Err("net 96.81"),
        );
        check(
            Kind::ChargeSettled,
            &CHARGE.replace("\"USD\"", "\"USX\""),
            Err("unknown currency"),
        );
        check(
            Kind::ChargeSettled,
            &CHARGE.replace("3.20", "3.201"),
            Err("more decimals"),
        );
        check(
            Kind::ChargeSettled,
            &CHARGE.replace("\"100.00\"", "100.00"),
            Err("must be a string"),
        );
        check(
            Kind::ChargeSettled,
            &CHARGE.replace("\"gross\"", "\"grosz\""),
            Err("missing field `gross`"),
        );
        check(
            Kind::ChargeSettled,
            &CHARGE.replace("2026-11-30T11:59:00Z", "yesterday"),
            Err("RFC 3339"),
        );
        check(
            Kind::ChargeSettled,
            &CHARGE
                .replace("\"3.20\"", "\"-3.20\"")
                .replace("96.80", "103.20"),
            Err("`fee` must not be negative"),
        );
        let payout = r#"{"movement_id": "po_1", "occurred_at": "2026-11-30T12:00:00+01:00",
            "currency": "JPY", "amount": "1500", "payout_id": "po_1"}"#;
        check(Kind::PayoutPaid, payout, ok);
        check(
            Kind::PayoutPaid,
            &payout.replace(r#", "payout_id": "po_1""#, ""),
            Err("missing field `payout_id`"),
        );
        check(
            Kind::PayoutPaid,
            &payout.replace("\"1500\"", "\"-1500\""),
            Err("positive"),
        );
        let adjustment = r#"{"movement_id": "adj_1", "occurred_at": "2026-11-30T12:00:00Z",
            "currency": "KWD", "amount": "-1.234"}"#;
        check(Kind::Adjustment, adjustment, ok);
        check(
            Kind::Adjustment,
            &adjustment.replace("-1.234", "0"),
            Err("must not be zero"),
        );
    }

    #[test]
    fn fingerprint_ignores_formatting_but_not_money() {
        let base =
            SettlementEvent::from_canonical(Kind::ChargeSettled, &data(CHARGE)).expect("base");
        let reformatted = CHARGE
            .replace("\"100.00\"", "\"100.0\"")
            .replace("\"3.20\"", "\"3.2\"")
            .replace("2026-11-30T11:59:00Z", "2026-11-30T12:59:00+01:00");
        let same = SettlementEvent::from_canonical(Kind::ChargeSettled, &data(&reformatted))
            .expect("same");
        assert_eq!(base.fingerprint(), same.fingerprint());
        let changed = CHARGE
            .replace("\"100.00\"", "\"100.01\"")
            .replace("96.80", "96.81");
        let other =
            SettlementEvent::from_canonical(Kind::ChargeSettled, &data(&changed)).expect("other");
        assert_ne!(base.fingerprint(), other.fingerprint());
        let no_reference = CHARGE.replace(r#", "reference": "order-42""#, "");
        let other = SettlementEvent::from_canonical(Kind::ChargeSettled, &data(&no_reference))
            .expect("other");
        assert_ne!(base.fingerprint(), other.fingerprint());
    }

    #[test]
    fn stored_form_round_trips() {
        for (kind, json) in [
            (Kind::ChargeSettled, CHARGE),
            (
                Kind::Adjustment,
                r#"{"movement_id": "a", "occurred_at": "2026-11-30T12:00:00.250Z", "currency": "KWD", "amount": "-1.2"}"#,
            ),
        ] {
            let event = SettlementEvent::from_canonical(kind, &data(json)).expect("event");
            let stored = event.to_canonical();
            let back = SettlementEvent::from_stored(&stored).expect("back");
            assert_eq!(back, event);
            assert_eq!(back.fingerprint(), event.fingerprint());
        }
    }
}
