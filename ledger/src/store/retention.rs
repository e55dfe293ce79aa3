//! Payload retention: a received payload is kept only as long as the policy allows, and a person
//! may erase one event's payload on request. Both go through one path: an append-only
//! `payload_erasures` row (who, why, when, which rule) that the erased rows point at, which is the
//! only change the database's guard on `settlement_events` lets through. Key, fingerprint,
//! canonical facts, entries and audit stay. An event still in flight, in an open dead letter or in
//! an open conflict keeps its payload (the guard refuses that too). The SQL is the same on both
//! backends, expanded into each store by `retention_rows!`.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// How many payloads one statement erases: each batch is its own short transaction, so an
/// expiry of millions never holds a long lock or a huge transaction.
pub const ERASE_BATCH: i64 = 1_000;

/// How long payloads are kept, in days (`None`: for ever): per source, and for every other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub default_days: Option<u32>,
    pub sources: Vec<(String, Option<u32>)>,
}

/// One expiry the policy makes at a given time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiryRule {
    /// The source; `None` is every source not named in `except`.
    pub source: Option<String>,
    pub except: Vec<String>,
    pub days: u32,
    pub received_before: DateTime<Utc>,
}

impl RetentionPolicy {
    /// The expiries due at `now`: one per source with a limit of its own, one for the rest.
    pub fn rules(&self, now: DateTime<Utc>) -> Vec<ExpiryRule> {
        let before = |days: u32| now - Duration::days(i64::from(days));
        let mut rules: Vec<ExpiryRule> = self
            .sources
            .iter()
            .filter_map(|(source, days)| {
                days.map(|days| ExpiryRule {
                    source: Some(source.clone()),
                    except: Vec::new(),
                    days,
                    received_before: before(days),
                })
            })
            .collect();
        if let Some(days) = self.default_days {
            rules.push(ExpiryRule {
                source: None,
                except: self.sources.iter().map(|(s, _)| s.clone()).collect(),
                days,
                received_before: before(days),
            });
        }
        rules
    }
}

/// What one expiry rule found (a dry run) or erased.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PruneLine {
    /// The source; absent for every source without a limit of its own.
    pub source: Option<String>,
    pub days: u32,
    pub received_before: DateTime<Utc>,
    /// Event payloads expired (or, in a dry run, that would be).
    pub events: u64,
    /// Payloads of resolved conflicting deliveries expired (or that would be).
    pub conflicts: u64,
    /// The erasure the expired rows point at (none in a dry run or when nothing expired).
    pub erasure_id: Option<i64>,
}

pub use crate::review::PayloadErasure;

/// Implements `driver::Retention` for `$store` (with `pool` and the backend's writing
/// transaction) over `$db`.
macro_rules! retention_rows {
    ($store:ty, $db:ty) => {
        impl $store {
            /// ` AND` the rule's source(s) on `settlement_events e`.
            fn sources_condition(
                q: &mut sqlx::QueryBuilder<$db>,
                rule: &crate::store::retention::ExpiryRule,
            ) {
                match &rule.source {
                    Some(source) => {
                        q.push(" AND e.source = ").push_bind(source.clone());
                    }
                    None if !rule.except.is_empty() => {
                        q.push(" AND e.source NOT IN (");
                        let mut list = q.separated(", ");
                        for source in &rule.except {
                            list.push_bind(source.clone());
                        }
                        q.push(")");
                    }
                    None => {}
                }
            }

            /// The rule's condition on `settlement_events e`: payloads kept, received before the
            /// rule's time, of its source(s), of settled events with no open conflict.
            fn expiry_condition(
                q: &mut sqlx::QueryBuilder<$db>,
                rule: &crate::store::retention::ExpiryRule,
            ) {
                q.push(
                    " e.payload_erased_by IS NULL AND e.status IN ('posted', 'discarded')
                      AND NOT EXISTS (SELECT 1 FROM event_conflicts oc WHERE oc.event_id = e.id AND oc.state = 'open')
                      AND e.received_at < ",
                )
                .push_bind(rule.received_before);
                Self::sources_condition(q, rule);
            }

            /// Resolved conflicting deliveries of the rule's source(s) last seen before its time.
            fn conflict_expiry_condition(
                q: &mut sqlx::QueryBuilder<$db>,
                rule: &crate::store::retention::ExpiryRule,
            ) {
                q.push(" c.payload_erased_by IS NULL AND c.state = 'resolved' AND c.last_seen_at < ")
                    .push_bind(rule.received_before)
                    .push(" AND c.event_id IN (SELECT e.id FROM settlement_events e WHERE 1 = 1");
                Self::sources_condition(q, rule);
                q.push(")");
            }
        }

        impl crate::store::driver::Retention for $store {
            /// Counts what the rule would expire, or (not a dry run) expires it under one
            /// erasure by `actor`, in batches.
            async fn prune_rule(
                &self,
                rule: &crate::store::retention::ExpiryRule,
                actor: &str,
                dry_run: bool,
            ) -> Result<crate::store::retention::PruneLine, crate::store::StoreError> {
                let mut count = sqlx::QueryBuilder::<$db>::new(
                    "SELECT count(*) FROM settlement_events e WHERE",
                );
                Self::expiry_condition(&mut count, rule);
                let (events,): (i64,) = count.build_query_as().fetch_one(&self.pool).await?;
                let mut count =
                    sqlx::QueryBuilder::<$db>::new("SELECT count(*) FROM event_conflicts c WHERE");
                Self::conflict_expiry_condition(&mut count, rule);
                let (conflicts,): (i64,) = count.build_query_as().fetch_one(&self.pool).await?;
                let mut line = crate::store::retention::PruneLine {
                    source: rule.source.clone(),
                    days: rule.days,
                    received_before: rule.received_before,
                    events: u64::try_from(events).unwrap_or(0),
                    conflicts: u64::try_from(conflicts).unwrap_or(0),
                    erasure_id: None,
                };
                if dry_run || events + conflicts == 0 {
                    return Ok(line);
                }
                let reason = format!(
                    "retention: payloads kept {} day(s) (retention.payload_days)",
                    rule.days
                );
                let erasure: (i64,) = {
                    let mut tx = crate::store::transactions::Transactions::begin_write(self).await?;
                    let erasure = sqlx::query_as(
                        "INSERT INTO payload_erasures (at, actor, reason, scope, source, received_before)
                         VALUES ($1, $2, $3, 'expiry', $4, $5) RETURNING id",
                    )
                    .bind(chrono::Utc::now())
                    .bind(actor)
                    .bind(&reason)
                    .bind(rule.source.as_deref())
                    .bind(rule.received_before)
                    .fetch_one(&mut *tx)
                    .await?;
                    crate::store::transactions::Transactions::commit(self, tx).await?;
                    erasure
                };
                line.erasure_id = Some(erasure.0);
                let (mut events, mut conflicts) = (0_u64, 0_u64);
                loop {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "UPDATE settlement_events SET payload = '', payload_erased_by = ",
                    );
                    q.push_bind(erasure.0).push(
                        " WHERE payload_erased_by IS NULL AND id IN (SELECT e.id FROM settlement_events e WHERE",
                    );
                    Self::expiry_condition(&mut q, rule);
                    q.push(" ORDER BY e.received_at LIMIT ")
                        .push_bind(crate::store::retention::ERASE_BATCH)
                        .push(")");
                    let mut tx = crate::store::transactions::Transactions::begin_write(self).await?;
                    let erased = q.build().execute(&mut *tx).await?.rows_affected();
                    crate::store::transactions::Transactions::commit(self, tx).await?;
                    events += erased;
                    if erased < crate::store::retention::ERASE_BATCH as u64 {
                        break;
                    }
                }
                loop {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "UPDATE event_conflicts SET payload = '', payload_erased_by = ",
                    );
                    q.push_bind(erasure.0).push(
                        " WHERE id IN (SELECT c.id FROM event_conflicts c WHERE",
                    );
                    Self::conflict_expiry_condition(&mut q, rule);
                    q.push(" LIMIT ")
                        .push_bind(crate::store::retention::ERASE_BATCH)
                        .push(")");
                    let mut tx = crate::store::transactions::Transactions::begin_write(self).await?;
                    let erased = q.build().execute(&mut *tx).await?.rows_affected();
                    crate::store::transactions::Transactions::commit(self, tx).await?;
                    conflicts += erased;
                    if erased < crate::store::retention::ERASE_BATCH as u64 {
                        break;
                    }
                }
                line.events = events;
                line.conflicts = conflicts;
                Ok(line)
            }

            /// Erases one event's payload, and its resolved conflicting deliveries', on a
            /// person's request. Already erased: success, nothing written.
            async fn erase_payload(
                &self,
                event_id: i64,
                decision: &crate::review::Decision,
            ) -> Result<crate::review::Decided, crate::review::DecisionError> {
                use crate::review::DecisionError;
                decision.require_reason()?;
                let mut tx = crate::store::transactions::Transactions::begin_write(self).await?;
                // Taking the row's write lock first (a no-op update), so that no status change
                // or conflict of this event commits between the check and the erasure.
                let row: Option<(String, Option<i64>)> = sqlx::query_as(
                    "UPDATE settlement_events SET status = status WHERE id = $1
                     RETURNING status, payload_erased_by",
                )
                .bind(event_id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some((status, erased_by)) = row else {
                    return Err(DecisionError::NotFound("event"));
                };
                let decided = |changed| crate::review::Decided {
                    subject_id: event_id,
                    event_id,
                    changed,
                    state: "erased".into(),
                    job_id: None,
                };
                if erased_by.is_some() {
                    return Ok(decided(false));
                }
                let (open_conflicts,): (i64,) = sqlx::query_as(
                    "SELECT count(*) FROM event_conflicts WHERE event_id = $1 AND state = 'open'",
                )
                .bind(event_id)
                .fetch_one(&mut *tx)
                .await?;
                if !matches!(status.as_str(), "posted" | "discarded") || open_conflicts > 0 {
                    let why = match status.as_str() {
                        "abandoned" => "it is in an open dead letter: discard or requeue it first",
                        "recorded" => "it is still being posted",
                        _ => "it has an open conflict: resolve it first",
                    };
                    return Err(DecisionError::InUse(format!(
                        "event {event_id}'s payload stays: {why}"
                    )));
                }
                let (erasure,): (i64,) = sqlx::query_as(
                    "INSERT INTO payload_erasures (at, actor, reason, scope)
                     VALUES ($1, $2, $3, 'request') RETURNING id",
                )
                .bind(chrono::Utc::now())
                .bind(&decision.actor)
                .bind(&decision.reason)
                .fetch_one(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE settlement_events SET payload = '', payload_erased_by = $1 WHERE id = $2",
                )
                .bind(erasure)
                .bind(event_id)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE event_conflicts SET payload = '', payload_erased_by = $1
                     WHERE event_id = $2 AND payload_erased_by IS NULL",
                )
                .bind(erasure)
                .bind(event_id)
                .execute(&mut *tx)
                .await?;
                crate::store::transactions::Transactions::commit(self, tx).await?;
                Ok(decided(true))
            }

            /// The erasure recorded under `id`.
            async fn payload_erasure(
                &self,
                id: i64,
            ) -> Result<Option<crate::store::retention::PayloadErasure>, crate::store::StoreError>
            {
                #[allow(clippy::type_complexity)]
                let row: Option<(
                    i64,
                    chrono::DateTime<chrono::Utc>,
                    String,
                    String,
                    String,
                    Option<String>,
                    Option<chrono::DateTime<chrono::Utc>>,
                )> = sqlx::query_as(
                    "SELECT id, at, actor, reason, scope, source, received_before
                     FROM payload_erasures WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(|(id, at, actor, reason, scope, source, received_before)| {
                    crate::store::retention::PayloadErasure {
                        id,
                        at,
                        actor,
                        reason,
                        scope,
                        source,
                        received_before,
                    }
                }))
            }
        }
    };
}

pub(crate) use retention_rows;

#[cfg(test)]
mod rules {
    use super::*;

    #[test]
    fn a_source_with_its_own_limit_is_left_out_of_the_rest() {
        let now = DateTime::parse_from_rfc3339("2026-12-04T00:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let policy = RetentionPolicy {
            default_days: Some(90),
            sources: vec![
                ("cards".into(), Some(30)),
                ("bank-eu".into(), None),
                ("standard".into(), Some(90)),
            ],
        };
        let rules = policy.rules(now);
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert_eq!(rules[0].source.as_deref(), Some("cards"));
        assert_eq!(rules[0].received_before, now - Duration::days(30));
        assert_eq!(rules[1].source.as_deref(), Some("standard"));
        assert_eq!(rules[2].source, None);
        assert_eq!(rules[2].except, ["cards", "bank-eu", "standard"]);
        assert_eq!(rules[2].received_before, now - Duration::days(90));
        let forever = RetentionPolicy {
            default_days: None,
            sources: vec![],
        };
        assert!(forever.rules(now).is_empty());
    }
}
