//! `provider = "standard"`: settle's canonical settlement schema (README.md, `standard`), signed
//! with Standard Webhooks. The webhook carries the facts, so nothing is fetched: its events post
//! what they carry.

mod demo;
mod fuzzing;
mod receive;
pub mod sign;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;

use crate::config::{Key, Section, SectionError};
use crate::demo::{DemoError, DemoPart};
use crate::seam::{FuzzTarget, Provider, Receive, Resolve, Sample};

/// The `standard` provider.
#[derive(Debug)]
pub struct Standard;

pub(crate) static PROVIDER: Standard = Standard;

impl Provider for Standard {
    fn name(&self) -> &'static str {
        "standard"
    }

    fn keys(&self) -> &'static [Key] {
        &[]
    }

    fn trigger_tags(&self) -> &'static [&'static str] {
        &[]
    }

    fn receiver(&self, section: &Section<'_>) -> Result<Arc<dyn Receive>, SectionError> {
        Ok(Arc::new(receive::Receiver {
            name: section.source.clone(),
            tolerance_secs: section.tolerance_secs,
            keys: crate::signature::signing_keys(section, self.name(), receive::signing_key)?,
        }))
    }

    fn resolver(&self, _: &Section<'_>) -> Result<Option<Arc<dyn Resolve>>, SectionError> {
        Ok(None)
    }

    fn sample(&self, secret: &str, id: &str, minor: i64, _conflicting: bool) -> Sample {
        let fee = minor * 3 / 100;
        let body = json!({"type": "settlement.charge_settled", "timestamp": "2026-11-30T12:00:00Z",
            "data": {"movement_id": format!("ch_{id}"), "occurred_at": "2026-11-30T11:59:00Z",
                     "currency": "USD", "gross": major(minor), "fee": major(fee),
                     "net": major(minor - fee), "reference": id}})
        .to_string();
        Sample {
            headers: sign::headers(secret, id, sign::now(), body.as_bytes()),
            body,
        }
    }

    fn demo(&self) -> BoxFuture<'static, Result<Box<dyn DemoPart>, DemoError>> {
        Box::pin(async { Ok(Box::new(demo::Part::new()) as Box<dyn DemoPart>) })
    }

    fn fuzz_targets(&self) -> &'static [FuzzTarget] {
        fuzzing::TARGETS
    }
}

/// Cents as a decimal string of two places.
fn major(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}
