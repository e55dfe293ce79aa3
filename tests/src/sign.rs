//! Requests signed the way each provider signs them (`ops::sign`, written from the providers'
//! documentation, independently of the ingress' verification code).

pub use ops::sign::*;
