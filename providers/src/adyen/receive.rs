//! Receiving Adyen's classic notifications,
//! `{"live": "...", "notificationItems": [{"NotificationRequestItem": {...}}]}`. Every item
//! carries `additionalData.hmacSignature`: base64 HMAC-SHA256, keyed with the hex-decoded HMAC
//! key, over `pspReference:originalReference:merchantAccountCode:merchantReference:value:
//! currency:eventCode:success` (a missing field is empty; nothing is escaped, so every signed
//! field but the merchant reference must be of its documented form first: `form`). Every item
//! must verify, or the whole delivery is refused; the signature is not kept with the payload. The signature lives inside the JSON, so the body is
//! parsed to find it; a body that is not a readable notification cannot be authenticated (401).
//!
//! Each item is its own event, `external_id` = `eventCode:pspReference` (a report's
//! `REPORT_AVAILABLE:merchantAccountCode:pspReference`: its batch is numbered per merchant
//! account), all recorded in one transaction. An item of a merchant account the source does
//! not book (`merchant_accounts`) is acknowledged, counted and not recorded. Mapped when `success` is `"true"`: CAPTURE (a settled charge, gross = net),
//! CAPTURE_FAILED (an adjustment taking the captured amount back from the balance), REFUND,
//! REFUND_FAILED and REFUNDED_REVERSED (adjustments returning the amount to the balance),
//! CHARGEBACK and SECOND_CHARGEBACK (each debits the disputed amount), CHARGEBACK_REVERSED.
//!
//! A source whose money comes from its settlement details reports (`MoneyFrom::Reports`)
//! records `REPORT_AVAILABLE` for such a report (its `pspReference` the file name, `reason` the
//! download URL) as what it names (an `AdyenReportTrigger`; the job downloads the report and
//! posts it line by line). Of the codes above it records CAPTURE and CAPTURE_FAILED only, as the
//! sale they name (an `AdyenSaleTrigger`: a receivable in the shopper's currency, which the report's
//! `Settled` line for the capture clears, booked once whichever of the two comes first); the
//! others' money is the report's. Other codes, other reports, and any `success` other than
//! `"true"`, are acknowledged and not recorded.

use base64::Engine;
use chrono::{DateTime, Utc};
use http::HeaderMap;
use ledger::{
    Amount, Amounts, Content, Currency, EventParts, ExternalId, FactsError, Fingerprint,
    InvalidFacts, MovementId, NewEvent, Reference, SettlementEvent, SourceName,
};
use serde_json::{Map, Value, json};

use super::EXPONENTS;
use super::config::MoneyFrom;
use super::form;
use super::trigger::{AdyenReportTrigger, AdyenSaleTrigger};
use crate::seam::{Acknowledgement, Adapted, Ignore, Receive, Rejection, Unparseable};
use crate::signature::{SignatureError, SigningKey, any_matches};

/// One Adyen source's receiving half.
#[derive(Debug)]
pub(crate) struct Receiver {
    pub(crate) name: SourceName,
    pub(crate) keys: Vec<SigningKey>,
    pub(crate) money_from: MoneyFrom,
    /// The merchant accounts booked (`None`: every one); an item of another is acknowledged,
    /// counted and not recorded.
    pub(crate) merchant_accounts: Option<Vec<String>>,
}

impl Receive for Receiver {
    // Adyen signs each item inside the body: nothing to check before it is read.

    fn receive(&self, _: &HeaderMap, body: &[u8], _: i64) -> Result<Adapted, Rejection> {
        let notification = verify(self, body)?;
        Ok(adapt(self, &notification)?)
    }

    /// Adyen's retry queue holds back every later notification behind one it keeps failing:
    /// once the delivery is durably kept (events or conflict rows), it is accepted, and a
    /// conflict surfaces on the ops side.
    fn acknowledgement(&self) -> Acknowledgement {
        Acknowledgement::Fixed {
            content_type: "text/plain",
            body: "[accepted]",
        }
    }
}

/// The key an Adyen HMAC key signs with: the key as hex (from the Customer Area), decoded.
pub(crate) fn signing_key(secret: &str) -> Result<SigningKey, &'static str> {
    let key = hex::decode(secret).map_err(|_| "expected the HMAC key as hex")?;
    if key.is_empty() {
        return Err("empty key");
    }
    Ok(SigningKey::new(key))
}

const SIGNATURE_FIELD: &str = "additionalData.hmacSignature";

/// One notification item's fields, as read from the body.
#[derive(Debug)]
struct Item<'a> {
    fields: &'a Map<String, Value>,
}

impl<'a> Item<'a> {
    fn text(&self, key: &str) -> &'a str {
        self.fields.get(key).and_then(Value::as_str).unwrap_or("")
    }

    fn amount(&self, key: &str) -> Option<&'a Value> {
        self.fields.get("amount").and_then(|amount| amount.get(key))
    }

    /// The amount's value as signed: its integer text, or empty when absent.
    fn value_text(&self) -> String {
        match self.amount("value") {
            Some(Value::Number(number)) => number.to_string(),
            Some(Value::String(text)) => text.clone(),
            _ => String::new(),
        }
    }

    /// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
    fn signing_string(&self) -> String {
        let currency = self
            .amount("currency")
            .and_then(Value::as_str)
            .unwrap_or("");
        [
            self.text("pspReference"),
            self.text("originalReference"),
            self.text("merchantAccountCode"),
            self.text("merchantReference"),
            &self.value_text(),
            currency,
            self.text("eventCode"),
            self.text("success"),
        ]
        .join(":")
    }

    /// The item as kept: its fields without the signature, which would let anyone who reads
    /// the payload (an event's page) sign other items' text.
    fn stored(&self) -> String {
        let mut fields = self.fields.clone();
        if let Some(Value::Object(additional)) = fields.get_mut("additionalData") {
            additional.remove("hmacSignature");
        }
        Value::Object(fields).to_string()
    }

    fn signature(&self) -> Option<&'a str> {
        self.fields
            .get("additionalData")?
            .get("hmacSignature")?
            .as_str()
    }
}

/// Parses the body far enough to find every item; verifies each one.
pub(crate) fn verify(source: &Receiver, body: &[u8]) -> Result<Value, SignatureError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| SignatureError::Missing(SIGNATURE_FIELD))?;
    let items = items(&value).ok_or(SignatureError::Missing(SIGNATURE_FIELD))?;
    for item in &items {
        form::check(item.fields)?;
        let signature = item
            .signature()
            .ok_or(SignatureError::Missing(SIGNATURE_FIELD))?;
        let candidate = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .unwrap_or_default();
        if !any_matches(
            &source.keys,
            &[item.signing_string().as_bytes()],
            &[candidate],
        ) {
            return Err(SignatureError::Mismatch);
        }
    }
    Ok(value)
}

/// The items of a notification, or `None` when it has none (or is not a notification).
fn items(value: &Value) -> Option<Vec<Item<'_>>> {
    let list = value.get("notificationItems")?.as_array()?;
    let items: Option<Vec<Item<'_>>> = list
        .iter()
        .map(|entry| {
            entry
                .get("NotificationRequestItem")?
                .as_object()
                .map(|fields| Item { fields })
        })
        .collect();
    items.filter(|items| !items.is_empty())
}

pub(crate) fn adapt(source: &Receiver, value: &Value) -> Result<Adapted, Unparseable> {
    let items = items(value).ok_or(Unparseable("no notification items"))?;
    let mut events = Vec::with_capacity(items.len());
    let mut other_accounts = false;
    for item in items {
        let event_code = item.text("eventCode");
        let psp_reference = item.text("pspReference");
        let merchant_account = item.text("merchantAccountCode");
        if event_code.is_empty() || psp_reference.is_empty() {
            return Err(Unparseable(
                "a notification item has no eventCode or pspReference",
            ));
        }
        // A report's file name is its batch's, and batches are numbered per merchant account:
        // its key names the account. A PSP reference is Adyen's own, unique across accounts.
        let key = match event_code {
            "REPORT_AVAILABLE" => format!("{event_code}:{merchant_account}:{psp_reference}"),
            _ => format!("{event_code}:{psp_reference}"),
        };
        let external_id = ExternalId::parse(&key)
            .map_err(|_| Unparseable("eventCode:pspReference is not a usable id"))?;
        if item.text("success") != "true" {
            continue;
        }
        if let Some(booked) = &source.merchant_accounts
            && !booked.iter().any(|a| a == merchant_account)
        {
            metrics::counter!("settle_adyen_items_of_other_merchant_accounts_total",
                "source" => source.name.to_string())
            .increment(1);
            other_accounts = true;
            continue;
        }
        let reports = source.money_from == MoneyFrom::Reports;
        if event_code == "REPORT_AVAILABLE" {
            if reports && AdyenReportTrigger::is_settlement_details(psp_reference) {
                events.push(NewEvent {
                    source: source.name.clone(),
                    external_id,
                    payload: item.stored(),
                    content: Content::Named(
                        AdyenReportTrigger {
                            file: psp_reference.to_owned(),
                            url: item.text("reason").to_owned(),
                            merchant_account: merchant_account.to_owned(),
                        }
                        .named(),
                    ),
                });
            }
            continue;
        }
        let Some(kind) = mapped(event_code) else {
            continue;
        };
        let sale = matches!(kind, Mapped::Capture | Mapped::CaptureFailed);
        if reports && !sale {
            continue;
        }
        let content = match facts(&item, kind, &key) {
            Ok(_) if reports => Content::Named(sale_trigger(&item).named()),
            Ok(event) => Content::Valid(event),
            Err(error) => Content::Invalid(InvalidFacts {
                kind: Some(event_code.to_owned()),
                error,
                fingerprint: Fingerprint::of_unvalidated(
                    "adyen",
                    &json!({"signed": item.signing_string(), "eventDate": item.text("eventDate")}),
                ),
            }),
        };
        events.push(NewEvent {
            source: source.name.clone(),
            external_id,
            payload: item.stored(),
            content,
        });
    }
    Ok(if events.is_empty() && other_accounts {
        Adapted::Ignored(Ignore::OtherAccount)
    } else if events.is_empty() {
        Adapted::Ignored(Ignore::NotSettlement)
    } else {
        Adapted::Events(events)
    })
}

/// A `CAPTURE` or `CAPTURE_FAILED` whose facts [`facts`] accepted, as the sale it names.
fn sale_trigger(item: &Item<'_>) -> AdyenSaleTrigger {
    AdyenSaleTrigger {
        event_code: item.text("eventCode").to_owned(),
        psp_reference: item.text("pspReference").to_owned(),
        original_reference: item.text("originalReference").to_owned(),
        merchant_account: item.text("merchantAccountCode").to_owned(),
        merchant_reference: item.text("merchantReference").to_owned(),
        currency: item
            .amount("currency")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        value: item
            .amount("value")
            .and_then(Value::as_i64)
            .unwrap_or_default(),
        event_date: item.text("eventDate").to_owned(),
    }
}

/// The settlement kinds Adyen's event codes map to.
#[derive(Clone, Copy, Debug)]
enum Mapped {
    Capture,
    CaptureFailed,
    Refund,
    /// REFUND_FAILED, REFUNDED_REVERSED: the refunded amount is back on the balance.
    RefundReturned,
    /// CHARGEBACK, SECOND_CHARGEBACK: the disputed amount is taken (again, after a defence
    /// that failed: the second chargeback follows a CHARGEBACK_REVERSED that returned it).
    Chargeback,
    ChargebackReversed,
}

fn mapped(event_code: &str) -> Option<Mapped> {
    Some(match event_code {
        "CAPTURE" => Mapped::Capture,
        "CAPTURE_FAILED" => Mapped::CaptureFailed,
        "REFUND" => Mapped::Refund,
        "REFUND_FAILED" | "REFUNDED_REVERSED" => Mapped::RefundReturned,
        "CHARGEBACK" | "SECOND_CHARGEBACK" => Mapped::Chargeback,
        "CHARGEBACK_REVERSED" => Mapped::ChargebackReversed,
        _ => return None,
    })
}

fn facts(item: &Item<'_>, kind: Mapped, movement: &str) -> Result<SettlementEvent, FactsError> {
    let code = item
        .amount("currency")
        .and_then(Value::as_str)
        .ok_or(FactsError::Missing("amount.currency"))?;
    let currency = Currency::parse(code).map_err(|source| FactsError::Money {
        field: "amount.currency",
        source,
    })?;
    let minor = item
        .amount("value")
        .ok_or(FactsError::Missing("amount.value"))?
        .as_i64()
        .ok_or(FactsError::WrongType {
            field: "amount.value",
            expected: "an integer",
        })?;
    let amount =
        EXPONENTS.amount(minor, currency).map_err(|source| {
            FactsError::Money {
                field: "amount.value",
                source,
            }
        })?;
    let zero = Amount::zero(currency);
    let amounts = match kind {
        Mapped::Capture => Amounts::ChargeSettled {
            gross: amount,
            fee: zero,
            net: amount,
        },
        Mapped::CaptureFailed => Amounts::Adjustment {
            amount: amount.negated(),
        },
        Mapped::Refund => Amounts::RefundSettled { amount, fee: zero },
        Mapped::RefundReturned => Amounts::Adjustment { amount },
        Mapped::Chargeback => Amounts::Chargeback { amount, fee: zero },
        Mapped::ChargebackReversed => Amounts::ChargebackReversed { amount },
    };
    let occurred_at = DateTime::parse_from_rfc3339(item.text("eventDate"))
        .map_err(|_| FactsError::Time("eventDate"))?
        .with_timezone(&Utc);
    let reference = Some(item.text("merchantReference"))
        .filter(|r| !r.is_empty())
        .map(Reference::parse)
        .transpose()
        .map_err(|source| FactsError::Id {
            field: "merchantReference",
            source,
        })?;
    SettlementEvent::new(EventParts {
        movement_id: MovementId::parse(movement).map_err(|source| FactsError::Id {
            field: "pspReference",
            source,
        })?,
        occurred_at,
        currency,
        amounts,
        payout_id: None,
        reference,
    })
}

#[cfg(test)]
mod tests;
