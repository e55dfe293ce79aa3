//! A provider's part of `settle demo`: its source, the deliveries it sends (signed the
//! provider's way, to a fake of its API where it needs one, in this process), and what the
//! scenario must end with because of them. `settle demo` runs every registered provider's part.

use futures::future::BoxFuture;
use serde_json::Value;

use crate::seam::Sample;

/// Why a demo part could not run.
pub type DemoError = Box<dyn std::error::Error + Send + Sync>;

/// Sends one delivery to `POST /webhooks/{source}` of the demo's settle; answers the status and
/// the body.
pub trait Deliver: Send + Sync {
    fn deliver<'a>(
        &'a self,
        source: &'a str,
        headers: Vec<(String, String)>,
        body: String,
    ) -> BoxFuture<'a, Result<(u16, String), DemoError>>;
}

/// One provider's part of the demo, started.
pub trait DemoPart: Send + Sync {
    /// Its `[[sources]]` table (with `name` and `provider`).
    fn source_toml(&self) -> String;

    /// What it runs in this process (a fake of the provider's API), said before it starts.
    fn banner(&self) -> Option<String> {
        None
    }

    /// Sends its deliveries in order, each counted in `tally`.
    fn send<'a>(
        &'a self,
        deliver: &'a dyn Deliver,
        tally: &'a mut Tally,
    ) -> BoxFuture<'a, Result<(), DemoError>>;

    /// What its deliveries add to the scenario's outcome.
    fn expected(&self) -> Expected;

    /// The payouts the demo reconciles for it, each of which must match.
    fn payouts(&self) -> Vec<DemoPayout> {
        Vec::new()
    }

    /// Receivable accounts that must be left with nothing open.
    fn receivable_accounts(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What a part (or the whole scenario) ends with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// Deliveries answered as recorded (or accepted, for a provider answering one way).
    pub recorded: usize,
    pub duplicates: usize,
    pub conflicts: usize,
    pub ignored: usize,
    /// Journal entries.
    pub posted: usize,
    pub dead_letters: usize,
}

impl std::ops::Add for Expected {
    type Output = Expected;

    fn add(self, other: Expected) -> Expected {
        Expected {
            recorded: self.recorded + other.recorded,
            duplicates: self.duplicates + other.duplicates,
            conflicts: self.conflicts + other.conflicts,
            ignored: self.ignored + other.ignored,
            posted: self.posted + other.posted,
            dead_letters: self.dead_letters + other.dead_letters,
        }
    }
}

/// A payout the demo reconciles: its id, and how the report names it and its items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoPayout {
    /// The heading printed above it (`reconciliation of ...`).
    pub title: String,
    pub payout_id: String,
    /// What its items are called (`items`, `lines`).
    pub items: &'static str,
}

/// The deliveries' outcomes as their senders saw them.
#[derive(Debug, Default)]
pub struct Tally {
    pub recorded: usize,
    pub duplicates: usize,
    pub conflicts: usize,
    pub ignored: usize,
    /// Answers no delivery should have had.
    pub other: Vec<String>,
}

impl Tally {
    /// Counts a per-event answer (`{"status": ...}`, or a 409 conflict) and prints it.
    pub fn count(&mut self, label: &str, status: u16, body: &str) {
        let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        match (status, json["status"].as_str(), json["error"].as_str()) {
            (200, Some("recorded"), _) => self.recorded += 1,
            (200, Some("duplicate"), _) => self.duplicates += 1,
            (200, Some("ignored"), _) => self.ignored += 1,
            (409, _, Some("event_conflict")) => self.conflicts += 1,
            _ => self.other.push(format!("{label}: {status} {body}")),
        }
        let shown = json["status"]
            .as_str()
            .or(json["error"].as_str())
            .unwrap_or(body);
        println!("  {label:<52} {status} {shown}");
    }

    /// Counts a delivery answered the same way whatever it recorded (`accepted`, the body
    /// expected) as one recorded event, and prints it.
    pub fn accepted(&mut self, label: &str, status: u16, body: &str, accepted: &str) {
        println!("  {label:<52} {status} {body}");
        if (status, body) == (200, accepted) {
            self.recorded += 1;
        } else {
            self.other.push(format!("{label}: {status} {body}"));
        }
    }
}

/// Sends `deliveries` to `source` in order, each counted by its per-event answer.
pub async fn send_each(
    deliver: &dyn Deliver,
    tally: &mut Tally,
    source: &str,
    deliveries: Vec<(&str, Sample)>,
) -> Result<(), DemoError> {
    for (label, sample) in deliveries {
        let (status, answer) = deliver.deliver(source, sample.headers, sample.body).await?;
        tally.count(label, status, &answer);
    }
    Ok(())
}

/// Random bytes for a demo's secrets and keys.
pub fn random_bytes() -> Vec<u8> {
    [ulid::Ulid::generate(), ulid::Ulid::generate()]
        .iter()
        .flat_map(|u| u.to_bytes())
        .collect()
}
