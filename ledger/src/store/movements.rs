//! The decisions of posting resolved movements, shared by both backends (no SQL here): which
//! jobs find their event settled already, which are refused for their own reason (a movement
//! already posted with other facts, an entry paid out by another payout), and which entries a
//! group writes. Each job is decided as if it were posted alone, in the group's order.

use std::collections::HashMap;

use serde_json::Value;

use crate::job::{JobRef, Posted};
use crate::post_error::PostError;
use crate::resolved::{MovementEntry, Resolved};
use crate::state::EventStatus;
use crate::trigger::Trigger;

/// One job's resolved movements to post.
#[derive(Clone, Copy, Debug)]
pub struct ResolvedPost<'a> {
    pub job: &'a JobRef,
    pub attempt: u32,
    pub resolved: &'a Resolved,
}

/// An entry already posted under a source key.
#[derive(Clone, Debug)]
pub(crate) struct Existing {
    pub entry_id: i64,
    pub fingerprint: String,
    /// The payout it is tied to, if any.
    pub payout: Option<String>,
}

/// The source keys to look up for a group's movements.
pub(crate) fn lookup_keys<'a>(posts: &[ResolvedPost<'a>]) -> Vec<&'a str> {
    posts
        .iter()
        .flat_map(|p| p.resolved.entries.iter())
        .map(|e| e.movement.source_key())
        .collect()
}

/// What a group does, decided before anything is written.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    /// Answers already decided (settled, refused), by position.
    pub results: Vec<Option<Result<Posted, PostError>>>,
    /// Jobs whose event no longer waits for them: their attempt ends `settled`.
    pub settled: Vec<usize>,
    /// Jobs to post, in order.
    pub ready: Vec<usize>,
    /// The entries to write: `(event id, entry)`, each source key once.
    pub to_write: Vec<(i64, &'a MovementEntry)>,
    /// For each ready job: entries it writes, entries that were there (or written by an earlier
    /// job of the group).
    pub counts: Vec<(u32, u32)>,
}

/// `statuses[i]`: job `i`'s event as locked (status, current job, facts), `None` when missing.
pub(crate) fn plan<'a>(
    posts: &[ResolvedPost<'a>],
    statuses: &[Option<(&str, &str, Option<&Value>)>],
    existing: &HashMap<String, Existing>,
) -> Plan<'a> {
    let mut plan = Plan {
        results: (0..posts.len()).map(|_| None).collect(),
        settled: Vec::new(),
        ready: Vec::new(),
        to_write: Vec::new(),
        counts: Vec::new(),
    };
    // Source key -> (fingerprint, payout) of what the group writes or ties so far.
    let mut planned: HashMap<&str, (String, Option<&str>)> = HashMap::new();
    for (i, post) in posts.iter().enumerate() {
        let Some((status, job_id, facts)) = statuses[i] else {
            plan.results[i] = Some(Err(PostError::CorruptEvent(format!(
                "event {} does not exist",
                post.job.event_id
            ))));
            continue;
        };
        if status != EventStatus::Recorded.as_str() || job_id != post.job.job_id {
            plan.settled.push(i);
            plan.results[i] = Some(Ok(Posted::AlreadySettled));
            continue;
        }
        if facts.is_none_or(|f| Trigger::from_stored(f).is_none()) {
            plan.results[i] = Some(Err(PostError::CorruptEvent(format!(
                "event {} carries its own facts; it has no movements to resolve",
                post.job.event_id
            ))));
            continue;
        }
        match check(post, existing, &planned) {
            Err(error) => plan.results[i] = Some(Err(error)),
            Ok(()) => {
                let (mut written, mut found) = (0, 0);
                for entry in &post.resolved.entries {
                    let payout = paid_out_by(post, entry);
                    let key = entry.movement.source_key();
                    let fingerprint = entry.movement.fingerprint().to_hex();
                    if existing.contains_key(key) || planned.contains_key(key) {
                        found += 1;
                        if let Some(tie) = payout {
                            planned.entry(key).or_insert((fingerprint, None)).1 = Some(tie);
                        }
                    } else {
                        written += 1;
                        planned.insert(key, (fingerprint, payout));
                        plan.to_write.push((post.job.event_id.get(), entry));
                    }
                }
                plan.ready.push(i);
                plan.counts.push((written, found));
            }
        }
    }
    plan
}

/// The payout that pays `entry` out, if one does: its own, else its resolution's.
pub(crate) fn paid_out_by<'a>(
    post: &ResolvedPost<'a>,
    entry: &'a MovementEntry,
) -> Option<&'a str> {
    match &entry.payout {
        Some(own) => Some(own.as_str()),
        None => post
            .resolved
            .payout
            .as_ref()
            .filter(|_| entry.paid_out)
            .map(|p| p.as_str()),
    }
}

/// Whether the job's movements agree with what is posted (or planned) under their keys.
fn check(
    post: &ResolvedPost<'_>,
    existing: &HashMap<String, Existing>,
    planned: &HashMap<&str, (String, Option<&str>)>,
) -> Result<(), PostError> {
    let mut seen = std::collections::HashSet::new();
    for entry in &post.resolved.entries {
        let payout = paid_out_by(post, entry);
        let key = entry.movement.source_key();
        if !seen.insert(key) {
            return Err(PostError::CorruptEvent(format!(
                "movement {key} resolved twice for one event"
            )));
        }
        let fingerprint = entry.movement.fingerprint().to_hex();
        let (stored, tied) = match (existing.get(key), planned.get(key)) {
            (_, Some((fingerprint, tie))) => (fingerprint.as_str(), tie.map(str::to_owned)),
            (Some(found), None) => (found.fingerprint.as_str(), found.payout.clone()),
            (None, None) => continue,
        };
        if stored != fingerprint {
            return Err(PostError::SourceReplayConflict {
                source_key: key.to_owned(),
            });
        }
        if let (Some(payout), Some(tied)) = (payout, tied)
            && payout != tied
        {
            return Err(PostError::PayoutMismatch {
                source_key: key.to_owned(),
                payout: payout.to_owned(),
                tied,
            });
        }
    }
    Ok(())
}
