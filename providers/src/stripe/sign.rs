//! Deliveries signed the way Stripe signs them, written from Stripe's documentation
//! (docs.stripe.com/webhooks, "Verify signatures manually"), independently of the verification
//! in `receive`. Used by `settle demo`, the load generator and the tests.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(UTF-8 bytes of the whole secret, "{t}.{body}")>`.
pub fn header(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}
