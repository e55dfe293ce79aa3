//! The form of a notification item's signed fields, checked before its signature is believed.
//!
//! Adyen joins the signed fields with `:` and escapes nothing, so a signature covers the joined
//! text, not the fields: given a genuine item whose merchant reference holds a colon (`ord:7`),
//! moving that colon into a neighbouring field gives another item with the same signature. Every
//! signed field but the merchant reference (the merchant's own free text) is held to the form
//! Adyen documents for it, none of which holds a colon, so the signed text splits into fields one
//! way only and a signature vouches for exactly one item:
//!
//! - `pspReference`: Adyen's 16-character reference (letters and digits); for `REPORT_AVAILABLE`,
//!   the report's file name;
//! - `originalReference`: empty, or a 16-character reference;
//! - `merchantAccountCode`: a merchant account's name (letters, digits, `_ . -`);
//! - `amount.value`: an integer (a JSON number); `amount.currency`: three capital letters;
//! - `eventCode`: capital letters and `_` (an event code this source does not map is
//!   acknowledged and not recorded, as Adyen adds codes);
//! - `success`: `true` or `false`.

use serde_json::Value;

use crate::signature::SignatureError;

/// Why an item is refused before its signature is checked: the first field out of form.
pub(crate) fn check(fields: &serde_json::Map<String, Value>) -> Result<(), SignatureError> {
    let text = |key: &str| fields.get(key).and_then(Value::as_str);
    let refuse = |field: &'static str| Err(SignatureError::FieldForm(field));
    let event_code = text("eventCode").unwrap_or_default();
    if event_code.is_empty() || !event_code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
        return refuse("eventCode");
    }
    let psp = text("pspReference").unwrap_or_default();
    let psp_ok = match event_code {
        "REPORT_AVAILABLE" => is_file_name(psp),
        _ => is_reference(psp),
    };
    if !psp_ok {
        return refuse("pspReference");
    }
    match fields.get("originalReference") {
        None => {}
        Some(Value::String(text)) if text.is_empty() || is_reference(text) => {}
        Some(_) => return refuse("originalReference"),
    }
    if !text("merchantAccountCode").is_some_and(is_account) {
        return refuse("merchantAccountCode");
    }
    match fields.get("merchantReference") {
        None | Some(Value::String(_)) => {}
        Some(_) => return refuse("merchantReference"),
    }
    if let Some(amount) = fields.get("amount") {
        let Some(amount) = amount.as_object() else {
            return refuse("amount");
        };
        match amount.get("value") {
            None => {}
            Some(Value::Number(number)) if number.is_i64() => {}
            Some(_) => return refuse("amount.value"),
        }
        match amount.get("currency") {
            None => {}
            Some(Value::String(code))
                if code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()) => {}
            Some(_) => return refuse("amount.currency"),
        }
    }
    if !matches!(text("success"), Some("true" | "false")) {
        return refuse("success");
    }
    Ok(())
}

/// Adyen's PSP reference: 16 letters and digits.
fn is_reference(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A report's file name, as a `REPORT_AVAILABLE` item's `pspReference` carries it.
fn is_file_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 200
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A merchant account's name.
fn is_account(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 200
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item() -> Value {
        json!({
            "amount": {"currency": "EUR", "value": 1000}, "eventCode": "CAPTURE",
            "merchantAccountCode": "Settle_Shop-EU.1", "merchantReference": "ord:7",
            "originalReference": "8816000000000001", "pspReference": "QFQTPCQ8HXSKGK82",
            "success": "true",
        })
    }

    /// A change made to a documented item.
    type Change = fn(&mut Value);

    fn checked(mut item: Value, change: impl FnOnce(&mut Value)) -> Result<(), SignatureError> {
        change(&mut item);
        check(item.as_object().expect("an object"))
    }

    #[test]
    fn a_documented_item_passes_and_the_merchant_reference_may_hold_colons() {
        assert_eq!(checked(item(), |_| {}), Ok(()));
        assert_eq!(checked(item(), |i| i["originalReference"] = json!("")), Ok(()));
        let report = json!({
            "amount": {"currency": "EUR", "value": 0}, "eventCode": "REPORT_AVAILABLE",
            "merchantAccountCode": "SettleShop", "merchantReference": "",
            "pspReference": "settlement_detail_report_batch_8.csv", "success": "true",
        });
        assert_eq!(checked(report, |_| {}), Ok(()));
    }

    #[test]
    fn every_field_a_colon_could_move_into_is_refused_out_of_form() {
        let cases: [(&str, Change); 10] = [
            ("pspReference", |i| i["pspReference"] = json!("QFQTPCQ8HXSKGK82:ord")),
            ("pspReference", |i| i["pspReference"] = json!("psp_capture")),
            ("originalReference", |i| i["originalReference"] = json!("8816000000000001:")),
            ("merchantAccountCode", |i| i["merchantAccountCode"] = json!("Shop:ord")),
            ("merchantAccountCode", |i| {
                i.as_object_mut().expect("object").remove("merchantAccountCode");
            }),
            ("amount.value", |i| i["amount"]["value"] = json!("7:1000")),
            ("amount.value", |i| i["amount"]["value"] = json!(10.5)),
            ("amount.currency", |i| i["amount"]["currency"] = json!("7:EUR")),
            ("eventCode", |i| i["eventCode"] = json!("EUR:CAPTURE")),
            ("success", |i| i["success"] = json!("CAPTURE:true")),
        ];
        for (field, change) in cases {
            assert_eq!(
                checked(item(), change),
                Err(SignatureError::FieldForm(field)),
                "{field}"
            );
        }
    }

    #[test]
    fn a_report_name_is_a_file_name_and_only_a_report_carries_one() {
        let report = |name: &str| {
            checked(item(), |i| {
                i["eventCode"] = json!("REPORT_AVAILABLE");
                i["pspReference"] = json!(name);
            })
        };
        assert_eq!(report("settlement_detail_report_batch_8.csv"), Ok(()));
        assert_eq!(
            report("batch_8.csv:x"),
            Err(SignatureError::FieldForm("pspReference"))
        );
        assert_eq!(
            checked(item(), |i| i["pspReference"] = json!("settlement_detail_report_batch_8.csv")),
            Err(SignatureError::FieldForm("pspReference"))
        );
    }
}
