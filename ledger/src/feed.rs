//! A source's feed: the provider's own list of its movements, read window after window so that
//! money reaches the books whether or not a webhook named it (ARCHITECTURE.md, Feeds). Each
//! window is an event of the source, recorded under the natural key `feed:{seq}` with a
//! [`Window`] trigger, so a sweep has a job, attempts, retries, a dead letter and the source's
//! pause like any event, and two processes that open the same window record it once.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::SourceName;
use crate::event::Kind;
use crate::ids::MovementId;
use crate::money::{Amount, Currency};
use crate::movement::{Compared, Counter, Movement, MovementError, MovementParts};
use crate::trigger::{Named, Trigger};

/// The tag a window is stored under (`{"feed_window": {...}}`); no provider's tag.
pub const WINDOW_TAG: &str = "feed_window";
/// The kind a window event is stored with.
pub const WINDOW_KIND: &str = "feed.window";
/// What every window's external id starts with; no provider's event id does.
pub const EXTERNAL_ID_PREFIX: &str = "feed:";

/// What every backfill window's external id starts with.
pub const BACKFILL_PREFIX: &str = "backfill:";
/// The external id of a source's opening balance (one per source).
pub const OPENING_EXTERNAL_ID: &str = "opening";
/// The tag an opening balance is stored under (`{"feed_opening": {...}}`).
pub const OPENING_TAG: &str = "feed_opening";
/// The kind an opening event is stored with.
pub const OPENING_KIND: &str = "feed.opening";
/// The account an opening balance is booked against.
pub const OPENING_ACCOUNT: &str = "equity:opening";
/// How much of a backfill one window (one event, one job) lists.
pub const BACKFILL_SPAN: TimeDelta = TimeDelta::days(1);

/// `[from, to)`: what a window lists at once.
pub type Span = (DateTime<Utc>, DateTime<Utc>);

/// The movements created in `[from, to)`: the `seq`-th window of its source's feed, or (`seq`
/// 0) a window of a backfill. A window of one of the source's accounts at the provider (a
/// platform's connected account) names it: such an account has a feed of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    pub seq: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// A span inside `[from, to)` this window does not list ([`Window::after`]): the window
    /// before listed it a moment ago, and the next one lists it again once the overlap has
    /// passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Where its listing begins, when after `from`: every second before it had already been
    /// listed by a listing opened at least the overlap after it ([`Window::settled`]), so it is
    /// not listed again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<DateTime<Utc>>,
}

impl Window {
    /// The natural key of the source's own window `seq` (zero-padded, so keys sort as windows
    /// do).
    pub fn external_id(seq: i64) -> String {
        Self::external_id_of(None, seq)
    }

    /// The natural key of window `seq` of `account`'s feed (`None`: the source's own):
    /// `feed:{seq}`, or `feed:{account}:{seq}`.
    pub fn external_id_of(account: Option<&str>, seq: i64) -> String {
        match account {
            None => format!("{EXTERNAL_ID_PREFIX}{seq:012}"),
            Some(account) => format!("{EXTERNAL_ID_PREFIX}{account}:{seq:012}"),
        }
    }

    /// A backfill's window (`seq` 0).
    pub fn backfill(from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        Self {
            seq: 0,
            from,
            to,
            account: None,
            skip: None,
            settled: None,
        }
    }

    /// A feed's first window: the `overlap` before `now`.
    pub fn first(account: Option<&str>, now: DateTime<Utc>, overlap: TimeDelta) -> Self {
        Self {
            seq: 1,
            from: now - overlap,
            to: now,
            account: account.map(str::to_owned),
            skip: None,
            settled: None,
        }
    }

    /// The window after this one, opened at `now` and reading to `to` (`now`, or short of it
    /// when the feed is behind), this one having been opened at `opened`: `[self.to - overlap,
    /// to)`, so a movement the provider lists late (created before `self.to`, visible after it)
    /// is read again. Every second is listed once soon after it and once by a listing opened at
    /// least `overlap` after it; a second that has had both is not listed again:
    ///
    /// - what lies before this one's [`settled`](Window::settled) point is not listed (a feed
    ///   catching up lists seconds long past: their first listing was already the late one);
    /// - what lies between `now - overlap` and `self.to - fresh` was listed by this window (or
    ///   the one before it) moments ago and is listed again by a later window once the overlap
    ///   has passed: it is skipped (at least `fresh` before `self.to` is read again now, for what
    ///   a provider lists a moment after its webhook).
    ///
    /// So a feed woken every second lists each movement about twice, not once per second of the
    /// overlap, and a feed catching up on an outage longer than the overlap lists most of it once.
    pub fn after(
        &self,
        opened: DateTime<Utc>,
        now: DateTime<Utc>,
        to: DateTime<Utc>,
        overlap: TimeDelta,
        fresh: TimeDelta,
    ) -> Self {
        let from = self.to - overlap;
        let settled = self.settled(opened, overlap).max(from);
        let (late, unread) = (now - overlap, self.to - fresh.min(overlap));
        let skip_from = settled.max(late);
        Self {
            seq: self.seq + 1,
            from,
            to,
            account: self.account.clone(),
            skip: (skip_from < unread).then_some((skip_from, unread)),
            settled: (from < settled).then_some(settled),
        }
    }

    /// Where its listing begins: `from`, or later when what lies before was listed late enough
    /// already.
    pub fn listed_from(&self) -> DateTime<Utc> {
        self.settled
            .map_or(self.from, |settled| settled.max(self.from))
    }

    /// How far every second has been listed by a listing opened at least `overlap` after it,
    /// once this window, opened at `opened`, has posted: from where it lists, each second it
    /// lists before `opened - overlap` (a window lists after it is opened), up to what it skips.
    pub fn settled(&self, opened: DateTime<Utc>, overlap: TimeDelta) -> DateTime<Utc> {
        let opened = DateTime::from_timestamp(opened.timestamp(), 0).unwrap_or(opened);
        let mut late = (opened - overlap).min(self.to);
        if let Some((start, _)) = self.skip {
            late = late.min(start);
        }
        self.listed_from().max(late)
    }

    /// Its spans ([`Window::spans`]) cut where it reads anew (the last window's end, `from +
    /// overlap`), each with whether it lists again what an earlier window listed (a second
    /// listing, which can wait behind what nobody has listed yet). A feed's first window and a
    /// backfill's read everything anew.
    pub fn spans_listed_before(&self, overlap: TimeDelta) -> Vec<(Span, bool)> {
        let anew = match self.seq {
            0 | 1 => self.from,
            _ => self.from + overlap,
        };
        let mut spans = Vec::new();
        for (a, b) in self.spans() {
            if a < anew {
                spans.push(((a, b.min(anew)), true));
            }
            if anew < b {
                spans.push(((a.max(anew), b), false));
            }
        }
        spans
    }

    /// The spans it lists: `[listed_from, to)` less what it skips.
    pub fn spans(&self) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let from = self.listed_from();
        match self.skip {
            Some((start, end)) => [(from, start), (end.max(from), self.to)]
                .into_iter()
                .filter(|(a, b)| a < b)
                .collect(),
            None => [(from, self.to)]
                .into_iter()
                .filter(|(a, b)| a < b)
                .collect(),
        }
    }

    /// Its natural key: `feed:{seq}` (`feed:{account}:{seq}` for an account's), or
    /// `backfill:{from}-{to}` (Unix seconds) for a backfill's, so a backfill run again over the
    /// same days records nothing new.
    pub fn key(&self) -> String {
        match self.seq {
            0 => format!(
                "{BACKFILL_PREFIX}{}-{}",
                self.from.timestamp(),
                self.to.timestamp()
            ),
            seq => Self::external_id_of(self.account.as_deref(), seq),
        }
    }

    pub fn named(&self) -> Named {
        Named {
            trigger: Trigger::new(
                WINDOW_TAG,
                serde_json::to_value(self).unwrap_or(Value::Null),
            ),
            kind: WINDOW_KIND.to_owned(),
            object: self.key(),
        }
    }

    /// `[from, to)` cut into windows of at most `span` (a backfill's, so its windows post in
    /// parallel and a failure repeats one of them).
    pub fn backfill_windows(
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        span: chrono::TimeDelta,
    ) -> Vec<Window> {
        let mut windows = Vec::new();
        let mut start = from;
        while start < to && span > chrono::TimeDelta::zero() {
            let end = (start + span).min(to);
            windows.push(Window::backfill(start, end));
            start = end;
        }
        windows
    }

    /// The window a trigger holds; `None` for any other trigger, an error for a window trigger
    /// that does not read.
    pub fn from_trigger(trigger: &Trigger) -> Option<Result<Window, String>> {
        (trigger.tag() == WINDOW_TAG).then(|| {
            serde_json::from_value(trigger.document().clone())
                .map_err(|e| format!("stored feed window: {e}"))
        })
    }

    /// The window stored as an event's facts.
    pub fn from_facts(facts: &Value) -> Option<Result<Window, String>> {
        match Trigger::from_stored(facts)? {
            Ok(trigger) => Self::from_trigger(&trigger),
            Err(error) => Some(Err(error)),
        }
    }
}

/// A source's opening balance: what the provider held at `since`, booked once per currency
/// against [`OPENING_ACCOUNT`] and dated `since`, so the books' balance at `since` is the
/// provider's. Recorded once every window of the source's backfill has posted, and computed when
/// its job runs from the provider's balance and the books.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Opening {
    pub since: DateTime<Utc>,
}

impl Opening {
    /// The opening of a backfill from the start of `day` (UTC).
    pub fn of_day(day: NaiveDate) -> Self {
        Self {
            since: day.and_time(chrono::NaiveTime::MIN).and_utc(),
        }
    }

    /// The windows of the backfill this opens: from `since`, a day each, up to `until` (where
    /// the source's feed begins).
    pub fn backfill_windows(&self, until: DateTime<Utc>) -> Vec<Window> {
        Window::backfill_windows(self.since, until, BACKFILL_SPAN)
    }

    /// The entry of its balance in one currency: `net` on the source's balance account against
    /// [`OPENING_ACCOUNT`], dated `since`, keyed `{source}/opening/{currency}`.
    pub fn movement(
        &self,
        source: &SourceName,
        net: Amount,
        currency: Currency,
    ) -> Result<Movement, MovementError> {
        let code = currency.code().to_ascii_lowercase();
        Movement::new(MovementParts {
            source_key: format!("{source}/opening/{code}"),
            id: MovementId::parse(&format!("opening_{code}")).map_err(|e| {
                MovementError::Field {
                    field: "currency",
                    detail: e.to_string(),
                }
            })?,
            kind: Kind::Adjustment,
            counter: Counter::Chart(OPENING_ACCOUNT),
            currency,
            amount: net,
            fee: Amount::zero(currency),
            fees: Vec::new(),
            net,
            occurred_at: self.since,
            payout_id: None,
            reference: None,
            details: json!({"opening_balance_at": self.since.to_rfc3339(),
                            "currency": currency.code(), "net": net.to_string()}),
            provider_category: "opening_balance".to_owned(),
            counter_amount: None,
            compared: Compared::Everything,
        })
    }

    pub fn named(&self) -> Named {
        Named {
            trigger: Trigger::new(
                OPENING_TAG,
                serde_json::to_value(self).unwrap_or(Value::Null),
            ),
            kind: OPENING_KIND.to_owned(),
            object: OPENING_EXTERNAL_ID.to_owned(),
        }
    }

    pub fn from_trigger(trigger: &Trigger) -> Option<Result<Opening, String>> {
        (trigger.tag() == OPENING_TAG).then(|| {
            serde_json::from_value(trigger.document().clone())
                .map_err(|e| format!("stored opening: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_round_trips_through_its_stored_facts() {
        let from = DateTime::from_timestamp(1_764_000_000, 0).expect("time");
        let to = DateTime::from_timestamp(1_764_000_060, 0).expect("time");
        let window = Window {
            seq: 7,
            from,
            to,
            account: None,
            skip: None,
            settled: None,
        };
        let named = window.named();
        assert_eq!(named.object, "feed:000000000007");
        // A window of the source's own feed is stored as it always was.
        assert_eq!(named.trigger.document().get("account"), None);
        assert_eq!(
            Window::from_facts(&named.trigger.to_stored()),
            Some(Ok(window.clone()))
        );
        let connected = Window {
            account: Some("acct_1Abc".into()),
            ..window
        };
        let named = connected.named();
        assert_eq!(named.object, "feed:acct_1Abc:000000000007");
        assert_eq!(
            Window::from_facts(&named.trigger.to_stored()),
            Some(Ok(connected))
        );
        let other = Trigger::new("toy", serde_json::json!({"object": "o_1"}));
        assert_eq!(Window::from_trigger(&other), None);
        assert!(Window::external_id(9) < Window::external_id(10));
    }

    #[test]
    fn a_backfill_is_cut_into_windows_that_cover_it_exactly() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).expect("time");
        let windows = Window::backfill_windows(at(0), at(250), chrono::TimeDelta::seconds(100));
        let bounds: Vec<(i64, i64)> = windows
            .iter()
            .map(|w| (w.from.timestamp(), w.to.timestamp()))
            .collect();
        assert_eq!(bounds, [(0, 100), (100, 200), (200, 250)]);
        assert_eq!(windows[2].key(), "backfill:200-250");
        assert!(Window::backfill_windows(at(5), at(5), chrono::TimeDelta::seconds(1)).is_empty());
    }

    #[test]
    fn a_feed_woken_often_lists_each_second_soon_and_once_more_after_the_overlap() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).expect("time");
        let (overlap, fresh) = (TimeDelta::seconds(30), TimeDelta::seconds(2));
        // Windows opened 1 to 7 s apart (a feed woken by webhooks), one after a quiet minute,
        // one after an hour's outage.
        let gaps = [
            1, 1, 2, 7, 1, 3, 60, 1, 1, 3_600, 2, 1, 1, 5, 1, 1, 1, 1, 1, 1, 1, 1,
        ];
        let mut windows = vec![Window::first(None, at(100_000), overlap)];
        for gap in gaps {
            let last = windows.last().expect("a window");
            let now = last.to + TimeDelta::seconds(gap);
            windows.push(last.after(last.to, now, now, overlap, fresh));
        }
        // Opened at its `to`, each window lists its spans.
        let listed_at = |second: i64| -> Vec<i64> {
            windows
                .iter()
                .filter(|w| {
                    w.spans()
                        .iter()
                        .any(|(a, b)| a.timestamp() <= second && second < b.timestamp())
                })
                .map(|w| w.to.timestamp())
                .collect()
        };
        let last_to = windows.last().expect("a window").to.timestamp();
        let mut listings = 0;
        for second in 100_000..last_to - overlap.num_seconds() {
            let times = listed_at(second);
            // Listed by the first window opened after it ...
            let next = windows
                .iter()
                .map(|w| w.to.timestamp())
                .find(|to| *to > second)
                .expect("a window after it");
            assert_eq!(times.first(), Some(&next), "second {second}");
            // ... and by one opened at least the overlap after it.
            assert!(
                times.iter().any(|t| *t >= second + overlap.num_seconds()),
                "second {second}: listed at {times:?}"
            );
            listings += times.len();
        }
        // Each second about twice: not once per window of the overlap (30 here).
        let seconds = (last_to - overlap.num_seconds() - 100_000) as usize;
        assert!(
            listings < seconds * 3,
            "{listings} listings of {seconds} seconds"
        );
        // What a window skips was listed by the window before it and is listed by the next.
        for pair in windows.windows(2) {
            if let Some((start, end)) = pair[1].skip {
                assert_eq!(pair[1].from, pair[0].to - overlap);
                assert!(pair[0].from <= start && end <= pair[0].to);
                assert!(end <= pair[0].to - fresh);
            }
        }
        // A long window (a catch-up) skips nothing.
        assert!(windows.iter().any(|w| w.skip.is_none() && w.seq > 1));
        assert!(windows.iter().any(|w| w.skip.is_some()));
    }

    #[test]
    fn a_feed_catching_up_lists_once_what_it_first_lists_the_overlap_after() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).expect("time");
        let (overlap, fresh) = (TimeDelta::seconds(30), TimeDelta::seconds(2));
        // A feed woken every second, then down for 200 s; started again, each window reads at
        // most 5 s anew and the next opens a second later, until it has caught up.
        let mut windows = vec![(Window::first(None, at(100_000), overlap), at(100_000))];
        let mut now = 100_000;
        while now < 100_400 {
            now += if now == 100_020 { 200 } else { 1 };
            let (last, opened) = windows.last().expect("a window");
            let to = (last.to + TimeDelta::seconds(5)).min(at(now));
            windows.push((last.after(*opened, at(now), to, overlap, fresh), at(now)));
        }
        let listings = |second: i64| -> Vec<i64> {
            windows
                .iter()
                .filter(|(w, _)| {
                    w.spans()
                        .iter()
                        .any(|(a, b)| a.timestamp() <= second && second < b.timestamp())
                })
                .map(|(_, opened)| opened.timestamp())
                .collect()
        };
        let (last, opened) = windows.last().expect("a window");
        let settled = last.settled(*opened, overlap).timestamp();
        assert!(
            settled >= now - overlap.num_seconds() - 1,
            "settled to {settled}"
        );
        for second in 100_000..last.to.timestamp() {
            let times = listings(second);
            // Listed first by the first window that reads past it ...
            let first = windows
                .iter()
                .find(|(w, _)| w.to.timestamp() > second)
                .map(|(_, opened)| opened.timestamp());
            assert_eq!(times.first().copied(), first, "second {second}");
            if second < settled {
                // ... and, once settled, by one opened at least the overlap after it ...
                assert!(
                    times
                        .iter()
                        .any(|t| *t >= second + 1 + overlap.num_seconds()),
                    "second {second}: listed at {times:?}"
                );
                // ... once only, when the first listing was that late.
                if times[0] >= second + 1 + overlap.num_seconds() {
                    assert_eq!(times.len(), 1, "second {second}: listed at {times:?}");
                }
            }
        }
        // Most of the outage was listed once: its first listing came the overlap after it.
        let once = (100_021..100_220)
            .filter(|s| listings(*s).len() == 1)
            .count();
        assert!(once > 150, "{once} of the outage's 199 seconds listed once");
        // A window that lists from a settled point still reads anew past the last one's end
        // (the pace a catch-up is cut by is read from `from`); what it lists again of what an
        // earlier window listed lies before that end, what it reads anew after it.
        for pair in windows.windows(2) {
            let (before, this) = (&pair[0].0, &pair[1].0);
            assert_eq!(this.from, before.to - overlap);
            assert!(this.listed_from() <= before.to.max(this.from));
            let spans = this.spans_listed_before(overlap);
            let listed: Vec<_> = spans.iter().map(|(span, _)| *span).collect();
            let mut merged = this.spans();
            merged.retain(|(a, b)| a < b);
            assert_eq!(
                listed
                    .iter()
                    .map(|(a, b)| (*b - *a).num_seconds())
                    .sum::<i64>(),
                merged
                    .iter()
                    .map(|(a, b)| (*b - *a).num_seconds())
                    .sum::<i64>()
            );
            for ((a, b), again) in spans {
                match again {
                    true => assert!(b <= before.to, "{a} {b}"),
                    false => assert!(a >= before.to, "{a} {b}"),
                }
            }
        }
    }
}
