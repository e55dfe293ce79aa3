//! Providers count money in minor units, each with its own exponent table, which differs from
//! ISO 4217 in places. Amounts are converted with the provider's exponent, then checked against
//! ISO's: a value ISO cannot represent is invalid facts, never rounded.

use crate::money::{Amount, Currency, MoneyError};

/// A provider's exponent table: the currencies it counts in whole units and in thousandths;
/// every other currency has two decimals at that provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exponents {
    pub zero: &'static [&'static str],
    pub three: &'static [&'static str],
}

impl Exponents {
    /// The number of decimals the provider counts `currency` in.
    pub fn of(&self, currency: Currency) -> u32 {
        let code = currency.code();
        if self.zero.contains(&code) {
            0
        } else if self.three.contains(&code) {
            3
        } else {
            2
        }
    }

    /// `minor` units of `currency` as the provider counts them, exactly (a value the currency
    /// cannot hold at ISO's exponent is refused, never rounded).
    pub fn amount(&self, minor: i64, currency: Currency) -> Result<Amount, MoneyError> {
        Amount::from_minor(minor, self.of(currency), currency)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const TABLE: Exponents = Exponents {
        zero: &["JPY", "CLP", "IDR"],
        three: &["KWD"],
    };

    fn convert(minor: i64, code: &str) -> Result<String, String> {
        let currency = Currency::parse(code).map_err(|e| e.to_string())?;
        TABLE
            .amount(minor, currency)
            .map(|a| a.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_table_converts_exactly() {
        assert_eq!(convert(1100, "USD").as_deref(), Ok("11.00"));
        assert_eq!(convert(500, "JPY").as_deref(), Ok("500"));
        assert_eq!(convert(1230, "KWD").as_deref(), Ok("1.230"));
        // IDR in whole units here, in hundredths at ISO: any whole value fits.
        assert_eq!(convert(10000, "IDR").as_deref(), Ok("10000.00"));
    }

    proptest! {
        /// Converting minor units and printing them back as minor units is the identity, for
        /// every currency whose provider exponent equals ISO's.
        #[test]
        fn minor_units_round_trip(minor in -1_000_000_000_000i64..1_000_000_000_000, code in prop::sample::select(vec!["USD", "EUR", "JPY", "KWD", "GBP"])) {
            let currency = Currency::parse(code).expect("currency");
            let exponent = TABLE.of(currency);
            prop_assert_eq!(exponent, currency.exponent());
            let amount = Amount::from_minor(minor, exponent, currency).expect("representable");
            let text = amount.to_string();
            let digits: String = text.chars().filter(|c| *c != '.').collect();
            prop_assert_eq!(digits.parse::<i64>().expect("integer"), minor);
            prop_assert_eq!(Amount::parse(&text, currency).expect("parses"), amount);
        }

        /// A provider exponent finer than ISO's converts only values ISO can represent.
        #[test]
        fn finer_provider_exponents_never_round(minor in -1_000_000i64..1_000_000) {
            let finer = Exponents { zero: &[], three: &[] };
            let clp = Currency::parse("CLP").expect("CLP");
            let converted = Amount::from_minor(minor, finer.of(clp), clp);
            prop_assert_eq!(converted.is_ok(), minor % 100 == 0);
            if let Ok(amount) = converted {
                prop_assert_eq!(amount.to_string(), (minor / 100).to_string());
            }
        }
    }
}
