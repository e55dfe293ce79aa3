//! Requests signed the way each provider signs them (each provider module's `sign`, written from
//! the provider's documentation, independently of its verification code).

pub use providers::adyen::sign::{
    item as adyen_item, notification as adyen_notification, signature as adyen_signature,
};
pub use providers::standard::sign::{
    headers as standard_headers, now, signature as standard_signature,
};
pub use providers::stripe::sign::header as stripe_header;
