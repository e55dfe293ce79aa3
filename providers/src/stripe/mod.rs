//! `provider = "stripe"`. A Stripe webhook only names the money; the balance transaction is the
//! movement. The ingress records what each event names (`receive`, into a [`StripeTrigger`]),
//! and the event's job fetches the balance transactions from Stripe's API (`api`, `resolve`) and
//! posts one entry per balance transaction (`balance_transaction`: the one table from reporting
//! category to entry), keyed by its `txn_...` id.

mod api;
pub mod balance_transaction;
mod config;
mod demo;
pub mod fake;
mod fuzzing;
mod receive;
mod resolve;
pub mod sign;
mod trigger;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;

pub use api::{ApiKey, STRIPE_VERSION, StripeApi};
pub use config::{API_BASE, ApiSettings, Connect, StripeRules};
pub use trigger::StripeTrigger;

use crate::config::{Key, Section, SectionError};
use crate::demo::{DemoError, DemoPart};
use crate::seam::{FuzzTarget, Provider, Receive, Resolve, Sample};

/// The `stripe` provider.
#[derive(Debug)]
pub struct Stripe;

pub(crate) static PROVIDER: Stripe = Stripe;

impl Provider for Stripe {
    fn name(&self) -> &'static str {
        "stripe"
    }

    fn keys(&self) -> &'static [Key] {
        config::KEYS
    }

    fn trigger_tags(&self) -> &'static [&'static str] {
        &[trigger::TAG]
    }

    fn receiver(&self, section: &Section<'_>) -> Result<Arc<dyn Receive>, SectionError> {
        let rules = config::rules(section)?;
        Ok(Arc::new(receive::Receiver {
            name: section.source.clone(),
            tolerance_secs: section.tolerance_secs,
            keys: crate::signature::signing_keys(section, self.name(), receive::signing_key)?,
            rules,
        }))
    }

    fn resolver(&self, section: &Section<'_>) -> Result<Option<Arc<dyn Resolve>>, SectionError> {
        let rules = config::rules(section)?;
        let settings = config::api(section, rules.livemode)?;
        let key = section
            .secret_or_variable("api_key", "api_key_env")?
            .ok_or_else(|| SectionError::key("api_key_env", "api_key_env is not set"))?;
        let api = StripeApi::new(section.source.clone(), ApiKey::new(key), &settings)
            .map_err(|message| SectionError::key("api_base", message))?;
        Ok(Some(Arc::new(resolve::Resolver {
            api: Arc::new(api),
            feed: config::feed(section)?,
            connect: rules.connect,
        })))
    }

    /// A test-mode `charge.succeeded` in the shape Stripe sends (`fixtures/stripe`): the charge
    /// names its balance transaction `txn_<id>` by id, which [`fake::FakeStripe`] makes up
    /// ([`fake::synthetic_charge`]); a conflicting one names another under the same event id.
    fn sample(&self, secret: &str, id: &str, _minor: i64, conflicting: bool) -> Sample {
        let transaction = match conflicting {
            false => format!("txn_{id}"),
            true => format!("txn_{id}_other"),
        };
        let amount = fake::synthetic_charge_amount(&transaction);
        let mut charge = fake::fixture("charge");
        charge["id"] = json!(format!("ch_{id}"));
        charge["balance_transaction"] = json!(transaction);
        charge["amount"] = json!(amount);
        charge["amount_captured"] = json!(amount);
        let mut event = fake::fixture("event");
        event["id"] = json!(id);
        event["type"] = json!("charge.succeeded");
        event["data"]["object"] = charge;
        let body = event.to_string();
        let header = sign::header(secret, chrono::Utc::now().timestamp(), body.as_bytes());
        Sample {
            headers: vec![("stripe-signature".to_owned(), header)],
            body,
        }
    }

    fn demo(&self) -> BoxFuture<'static, Result<Box<dyn DemoPart>, DemoError>> {
        Box::pin(async { Ok(Box::new(demo::Part::start().await?) as Box<dyn DemoPart>) })
    }

    fn fuzz_targets(&self) -> &'static [FuzzTarget] {
        fuzzing::TARGETS
    }
}
