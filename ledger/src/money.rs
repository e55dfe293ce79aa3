//! Currencies and amounts. Money is a `Decimal` in major units, checked against the currency's
//! ISO 4217 exponent; it never touches a float.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most integer digits an amount may have: far beyond any real settlement, far inside
/// `Decimal`'s 28 significant digits, so sums of many amounts cannot overflow.
const INTEGER_DIGITS_MAX: usize = 15;

/// Why a currency code or an amount was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("unknown currency {0:?} (expected an ISO 4217 code such as USD)")]
    UnknownCurrency(String),
    #[error("amount {0:?} is not a plain decimal string such as \"12.30\"")]
    NotDecimal(String),
    #[error("amount {amount:?} has more decimals than {currency} allows ({exponent})")]
    TooPrecise {
        amount: String,
        currency: Currency,
        exponent: u32,
    },
    #[error("amount {0:?} is too large")]
    TooLarge(String),
    #[error("minor-unit amount {minor} cannot be expressed in {currency}")]
    MinorUnits { minor: i64, currency: Currency },
}

/// An ISO 4217 currency that has a minor-unit exponent (so not gold, not a test code).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency(iso_currency::Currency);

impl Currency {
    /// Parses an upper-case ISO 4217 code. Lower case is refused here; a provider whose API
    /// sends lower case upper-cases it first, deliberately.
    pub fn parse(code: &str) -> Result<Self, MoneyError> {
        let unknown = || MoneyError::UnknownCurrency(code.chars().take(16).collect());
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(unknown());
        }
        let iso = iso_currency::Currency::from_code(code).ok_or_else(unknown)?;
        if iso.is_special() || iso.exponent().is_none() {
            return Err(unknown());
        }
        Ok(Self(iso))
    }

    /// The three-letter code, e.g. `USD`.
    pub fn code(self) -> &'static str {
        self.0.code()
    }

    /// Digits after the decimal point in the major unit: JPY 0, USD 2, KWD 3.
    pub fn exponent(self) -> u32 {
        // `parse` admits only currencies with an exponent.
        u32::from(self.0.exponent().unwrap_or(0))
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({})", self.code())
    }
}

impl Serialize for Currency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.code())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = String::deserialize(deserializer)?;
        Currency::parse(&code).map_err(serde::de::Error::custom)
    }
}

/// An amount in a currency's major units, carrying exactly the currency's exponent of decimals,
/// so `400`, `400.0` and `400.00` USD are one value with one text, `400.00`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Amount(Decimal);

impl Amount {
    /// Parses a decimal string (`-12.30`, `7`, `0.125`): digits, an optional leading `-`, an
    /// optional `.` followed by digits. No exponent, no `+`, no spaces, no thousands separators.
    pub fn parse(text: &str, currency: Currency) -> Result<Self, MoneyError> {
        let shown = || text.chars().take(40).collect::<String>();
        let unsigned = text.strip_prefix('-').unwrap_or(text);
        let (int_part, frac_part) = match unsigned.split_once('.') {
            Some((int_part, frac_part)) => (int_part, Some(frac_part)),
            None => (unsigned, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(int_part) || frac_part.is_some_and(|f| !digits(f)) {
            return Err(MoneyError::NotDecimal(shown()));
        }
        if int_part.trim_start_matches('0').len() > INTEGER_DIGITS_MAX
            || frac_part.is_some_and(|f| f.len() > 28)
        {
            return Err(MoneyError::TooLarge(shown()));
        }
        let value = Decimal::from_str(text).map_err(|_| MoneyError::NotDecimal(shown()))?;
        Self::from_decimal(value, currency).map_err(|error| match error {
            MoneyError::TooPrecise {
                currency, exponent, ..
            } => MoneyError::TooPrecise {
                amount: shown(),
                currency,
                exponent,
            },
            other => other,
        })
    }

    /// Checks a decimal against the currency's exponent and fixes its scale to it.
    pub fn from_decimal(value: Decimal, currency: Currency) -> Result<Self, MoneyError> {
        let exponent = currency.exponent();
        if value.normalize().scale() > exponent {
            return Err(MoneyError::TooPrecise {
                amount: value.to_string(),
                currency,
                exponent,
            });
        }
        if value.abs().trunc().to_string().len() > INTEGER_DIGITS_MAX {
            return Err(MoneyError::TooLarge(value.to_string()));
        }
        let mut value = value;
        value.rescale(exponent);
        Ok(Self(value))
    }

    /// Converts a provider's integer minor units with the provider's own exponent for the
    /// currency (which may differ from ISO's), exactly.
    pub fn from_minor(
        minor: i64,
        minor_exponent: u32,
        currency: Currency,
    ) -> Result<Self, MoneyError> {
        let value = Decimal::try_from_i128_with_scale(i128::from(minor), minor_exponent)
            .map_err(|_| MoneyError::MinorUnits { minor, currency })?;
        Self::from_decimal(value, currency).map_err(|_| MoneyError::MinorUnits { minor, currency })
    }

    pub fn zero(currency: Currency) -> Self {
        let mut value = Decimal::ZERO;
        value.rescale(currency.exponent());
        Self(value)
    }

    pub fn decimal(self) -> Decimal {
        self.0
    }

    pub fn is_negative(self) -> bool {
        self.0.is_sign_negative() && !self.0.is_zero()
    }

    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    pub fn is_positive(self) -> bool {
        !self.is_negative() && !self.is_zero()
    }

    /// `self - other`; both share the currency (and so the scale) by construction of the caller.
    pub fn checked_sub(self, other: Self) -> Option<Self> {
        self.0.checked_sub(other.0).map(Self)
    }

    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.0.checked_add(other.0).map(Self)
    }

    pub fn negated(self) -> Self {
        let mut value = -self.0;
        value.rescale(self.0.scale());
        Self(value)
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Amount({})", self.0)
    }
}

impl Serialize for Amount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd() -> Currency {
        Currency::parse("USD").expect("USD")
    }

    fn check(currency: &str, text: &str, expected: Result<&str, &str>) {
        let currency = Currency::parse(currency).expect("currency");
        let got = Amount::parse(text, currency);
        match (got, expected) {
            (Ok(amount), Ok(want)) => assert_eq!(amount.to_string(), want, "{text}"),
            (Err(error), Err(kind)) => {
                let name = format!("{error:?}");
                assert!(name.starts_with(kind), "{text}: {name} is not {kind}");
            }
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn amounts_parse_to_the_currency_exponent() {
        check("USD", "400", Ok("400.00"));
        check("USD", "400.0", Ok("400.00"));
        check("USD", "400.00", Ok("400.00"));
        check("USD", "400.000", Ok("400.00"));
        check("USD", "-3.5", Ok("-3.50"));
        check("USD", "0", Ok("0.00"));
        check("JPY", "1500", Ok("1500"));
        check("JPY", "1500.0", Ok("1500"));
        check("KWD", "1.234", Ok("1.234"));
        check("KWD", "1.2", Ok("1.200"));
    }

    #[test]
    fn amounts_that_are_not_plain_decimals_or_too_precise_are_refused() {
        check("USD", "400.001", Err("TooPrecise"));
        check("JPY", "1500.5", Err("TooPrecise"));
        check("KWD", "1.2345", Err("TooPrecise"));
        for bad in [
            "", "-", "1e3", "+1", " 1", "1 ", "1,000.00", ".5", "5.", "0x10", "NaN", "--1",
        ] {
            check("USD", bad, Err("NotDecimal"));
        }
        check("USD", "1234567890123456", Err("TooLarge"));
        check("USD", "123456789012345", Ok("123456789012345.00"));
    }

    #[test]
    fn equal_amounts_have_equal_values_and_texts() {
        let a = Amount::parse("400", usd()).expect("a");
        let b = Amount::parse("400.00", usd()).expect("b");
        assert_eq!(a, b);
        assert_eq!(a.to_string(), b.to_string());
    }

    #[test]
    fn currencies_are_iso_codes_with_an_exponent() {
        assert_eq!(Currency::parse("JPY").map(Currency::exponent), Ok(0));
        assert_eq!(Currency::parse("USD").map(Currency::exponent), Ok(2));
        assert_eq!(Currency::parse("KWD").map(Currency::exponent), Ok(3));
        for bad in ["usd", "XAU", "XXX", "ABC", "US", "USDD", ""] {
            assert!(Currency::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn minor_units_convert_exactly() {
        let jpy = Currency::parse("JPY").expect("JPY");
        let kwd = Currency::parse("KWD").expect("KWD");
        assert_eq!(
            Amount::from_minor(1100, 2, usd()).map(|a| a.to_string()),
            Ok("11.00".into())
        );
        assert_eq!(
            Amount::from_minor(-5, 2, usd()).map(|a| a.to_string()),
            Ok("-0.05".into())
        );
        assert_eq!(
            Amount::from_minor(1500, 0, jpy).map(|a| a.to_string()),
            Ok("1500".into())
        );
        assert_eq!(
            Amount::from_minor(1234, 3, kwd).map(|a| a.to_string()),
            Ok("1.234".into())
        );
        // A provider exponent finer than ISO's must still land on a representable amount.
        assert_eq!(
            Amount::from_minor(1500, 2, jpy).map(|a| a.to_string()),
            Ok("15".into())
        );
        assert!(Amount::from_minor(1550, 2, jpy).is_err());
    }
}
