//! Providers count money in minor units, each with its own exponent table, which differs from
//! ISO 4217 in places. Amounts are converted with the provider's exponent, then checked against
//! ISO's: a value ISO cannot represent is invalid facts, never rounded.

use crate::money::Currency;

/// Stripe: zero-decimal currencies, three-decimal ones, and ISK, which Stripe still counts in
/// hundredths for backwards compatibility. Everything else has two decimals.
pub fn stripe_exponent(currency: Currency) -> u32 {
    const ZERO: &[&str] = &[
        "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV",
        "XAF", "XOF", "XPF",
    ];
    const THREE: &[&str] = &["BHD", "JOD", "KWD", "OMR", "TND"];
    table(currency, ZERO, THREE)
}

/// Adyen: its own zero- and three-decimal lists (IDR and CVE are zero-decimal at Adyen; CLP and
/// ISK are two-decimal). Everything else has two decimals.
pub fn adyen_exponent(currency: Currency) -> u32 {
    const ZERO: &[&str] = &[
        "CVE", "DJF", "GNF", "IDR", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV", "XAF",
        "XOF", "XPF",
    ];
    const THREE: &[&str] = &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];
    table(currency, ZERO, THREE)
}

fn table(currency: Currency, zero: &[&str], three: &[&str]) -> u32 {
    let code = currency.code();
    if zero.contains(&code) {
        0
    } else if three.contains(&code) {
        3
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use crate::money::Amount;
    use proptest::prelude::*;

    use super::*;

    fn convert(minor: i64, code: &str, exponent: fn(Currency) -> u32) -> Result<String, String> {
        let currency = Currency::parse(code).map_err(|e| e.to_string())?;
        Amount::from_minor(minor, exponent(currency), currency)
            .map(|a| a.to_string())
            .map_err(|e| e.to_string())
    }

    /// Minor units, currency, the provider's table, and the major-unit text (or refusal).
    type Case = (
        i64,
        &'static str,
        fn(Currency) -> u32,
        Result<&'static str, ()>,
    );

    #[test]
    fn provider_tables_convert_exactly() {
        let cases: &[Case] = &[
            (1100, "USD", stripe_exponent, Ok("11.00")),
            (500, "JPY", stripe_exponent, Ok("500")),
            (1230, "KWD", stripe_exponent, Ok("1.230")),
            (500, "ISK", stripe_exponent, Ok("5")),
            (550, "ISK", stripe_exponent, Err(())),
            (150, "MGA", stripe_exponent, Ok("150.00")),
            (10000, "IDR", adyen_exponent, Ok("10000.00")),
            (10000, "IDR", stripe_exponent, Ok("100.00")),
            (1500, "CLP", adyen_exponent, Ok("15")),
            (1550, "CLP", adyen_exponent, Err(())),
            (1500, "CLP", stripe_exponent, Ok("1500")),
            (1234, "KWD", adyen_exponent, Ok("1.234")),
            (77, "CVE", adyen_exponent, Ok("77.00")),
        ];
        for &(minor, code, exponent, expected) in cases {
            let got = convert(minor, code, exponent);
            match expected {
                Ok(want) => assert_eq!(got.as_deref(), Ok(want), "{minor} {code}"),
                Err(()) => assert!(got.is_err(), "{minor} {code}: {got:?}"),
            }
        }
    }

    proptest! {
        /// Converting minor units and printing them back as minor units is the identity, for
        /// every currency whose provider exponent equals ISO's.
        #[test]
        fn minor_units_round_trip(minor in -1_000_000_000_000i64..1_000_000_000_000, code in prop::sample::select(vec!["USD", "EUR", "JPY", "KWD", "BHD", "KRW", "GBP"])) {
            let currency = Currency::parse(code).expect("currency");
            let exponent = stripe_exponent(currency);
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
            let clp = Currency::parse("CLP").expect("CLP");
            let converted = Amount::from_minor(minor, adyen_exponent(clp), clp);
            prop_assert_eq!(converted.is_ok(), minor % 100 == 0);
            if let Ok(amount) = converted {
                prop_assert_eq!(amount.to_string(), (minor / 100).to_string());
            }
        }
    }
}
