//! What a job resolved its event to: each provider movement with the entry the posting rules
//! drafted for it, and the payout that paid them out. A provider builds it; the store posts it.

use crate::ids::PayoutId;
use crate::movement::Movement;
use crate::posting::EntryDraft;

/// A movement with the entry the posting rules drafted for it.
#[derive(Clone, Debug)]
pub struct MovementEntry {
    pub movement: Movement,
    pub draft: EntryDraft,
    /// Whether [`Resolved::payout`] paid it out. A sale whose receivable a settlement line
    /// clears is not (it moves nothing on the provider balance; the line is).
    pub paid_out: bool,
    /// The payout that pays it out when it is its own, not [`Resolved::payout`] (a report
    /// whose lines belong to several batches).
    pub payout: Option<PayoutId>,
}

impl MovementEntry {
    /// A movement's entry, paid out by its resolution's payout if it has one.
    pub fn new(movement: Movement, draft: EntryDraft) -> Self {
        Self {
            movement,
            draft,
            paid_out: true,
            payout: None,
        }
    }

    /// A movement's entry, paid out by `payout` whatever its resolution's.
    pub fn paid_by(movement: Movement, draft: EntryDraft, payout: PayoutId) -> Self {
        Self {
            payout: Some(payout),
            ..Self::new(movement, draft)
        }
    }

    /// A movement's entry that no payout pays out.
    pub fn unpaid(movement: Movement, draft: EntryDraft) -> Self {
        Self {
            paid_out: false,
            ..Self::new(movement, draft)
        }
    }
}

/// What a job resolved its event to: the entries to post (none when the event names no
/// movement yet) and, for a payout's listing, the payout every one of them is tied to.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub entries: Vec<MovementEntry>,
    pub payout: Option<PayoutId>,
    /// More of the event's movements follow in later postings (a report posted in chunks): these
    /// are written and tied, and the event keeps waiting for its job.
    pub partial: bool,
}
