//! The financial fingerprint: SHA-256 over canonical facts, never over the raw bytes a provider
//! sent, so a redelivery that differs only in formatting, key order or volatile fields replays.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// A SHA-256 digest of canonical facts.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

/// Why a stored fingerprint could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fingerprint must be 64 lower-case hex digits")]
pub struct FingerprintError;

impl Fingerprint {
    pub fn parse_hex(text: &str) -> Result<Self, FingerprintError> {
        if text.len() != 64 || text.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(FingerprintError);
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).map_err(|_| FingerprintError)?;
        Ok(Self(bytes))
    }

    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }

    /// The fingerprint of a delivery whose facts could not be validated: its settlement-relevant
    /// JSON in canonical form (sorted keys, no insignificant whitespace), under its own domain so
    /// it can never equal the fingerprint of valid facts.
    pub fn of_unvalidated(label: &str, value: &serde_json::Value) -> Self {
        let mut canonical = Vec::with_capacity(256);
        write_canonical_json(value, &mut canonical);
        let mut facts = FieldHasher::new("settle.unvalidated.v1");
        facts.field("label", label);
        facts.field_bytes("json", &canonical);
        facts.finish()
    }
}

impl Fingerprint {
    /// The fingerprint of what a webhook names when it only names the money (a
    /// [`crate::trigger::Trigger`]): its canonical JSON, under its own domain.
    pub fn of_trigger(label: &str, value: &serde_json::Value) -> Self {
        let mut canonical = Vec::with_capacity(256);
        write_canonical_json(value, &mut canonical);
        let mut facts = FieldHasher::new("settle.trigger.v1");
        facts.field("label", label);
        facts.field_bytes("json", &canonical);
        facts.finish()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", &self.to_hex()[..12])
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Fingerprint::parse_hex(&text).map_err(serde::de::Error::custom)
    }
}

/// Builds a fingerprint from named fields. Every field is written as
/// `name ':' length ':' bytes '\n'`, so no value can imitate another field.
#[derive(Debug)]
pub(crate) struct FieldHasher {
    hasher: Sha256,
}

impl FieldHasher {
    pub(crate) fn new(domain: &str) -> Self {
        let mut facts = Self {
            hasher: Sha256::new(),
        };
        facts.field("domain", domain);
        facts
    }

    pub(crate) fn field(&mut self, name: &str, value: &str) {
        self.field_bytes(name, value.as_bytes());
    }

    pub(crate) fn optional(&mut self, name: &str, value: Option<&str>) {
        match value {
            Some(value) => self.field(name, value),
            None => self.field_bytes(&format!("{name}?"), b""),
        }
    }

    fn field_bytes(&mut self, name: &str, value: &[u8]) {
        self.hasher.update(name.as_bytes());
        self.hasher.update(format!(":{}:", value.len()).as_bytes());
        self.hasher.update(value);
        self.hasher.update(b"\n");
    }

    pub(crate) fn finish(self) -> Fingerprint {
        Fingerprint(self.hasher.finalize().into())
    }
}

/// JSON with object keys sorted and no whitespace; numbers and strings as serde_json prints them.
fn write_canonical_json(value: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical_json(&Value::String(key.clone()), out);
                out.push(b':');
                write_canonical_json(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical_json(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend_from_slice(scalar.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unvalidated_fingerprints_ignore_key_order_and_whitespace() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1}], "a": "s"}"#).expect("a");
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#).expect("b");
        let c: serde_json::Value =
            serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":3}]}"#).expect("c");
        assert_eq!(
            Fingerprint::of_unvalidated("t", &a),
            Fingerprint::of_unvalidated("t", &b)
        );
        assert_ne!(
            Fingerprint::of_unvalidated("t", &a),
            Fingerprint::of_unvalidated("t", &c)
        );
        assert_ne!(
            Fingerprint::of_unvalidated("t", &a),
            Fingerprint::of_unvalidated("u", &a)
        );
    }

    #[test]
    fn fields_cannot_imitate_each_other() {
        let mut one = FieldHasher::new("d");
        one.field("a", "x\nb:1:y");
        let mut two = FieldHasher::new("d");
        two.field("a", "x");
        two.field("b", "y");
        assert_ne!(one.finish(), two.finish());
    }

    #[test]
    fn hex_round_trips() {
        let fp = Fingerprint::of_unvalidated("t", &serde_json::Value::Null);
        assert_eq!(Fingerprint::parse_hex(&fp.to_hex()), Ok(fp));
        assert!(Fingerprint::parse_hex(&fp.to_hex().to_uppercase()).is_err());
        assert!(Fingerprint::parse_hex("00").is_err());
    }
}
