//! The store's calls for the feeds: their cursors and windows, a backfill's opening, what the
//! books hold of a provider's movements.

use super::*;

impl Store {
    /// The newest window of `source`'s own feed (its `seq`), if it has opened one (see
    /// [`crate::feed`]).
    pub async fn feed_cursor(&self, source: &SourceName) -> Result<Option<i64>, StoreError> {
        self.feed_cursor_of(source, None).await
    }

    /// The newest window of the feed of `source`'s `account` at its provider (`None`: the
    /// source's own feed).
    pub async fn feed_cursor_of(
        &self,
        source: &SourceName,
        account: Option<&str>,
    ) -> Result<Option<i64>, StoreError> {
        let account = account.unwrap_or_default();
        on_backend!(self, store => store.feed_cursor(source.as_str(), account).await)
    }

    /// Moves the cursor of `source`'s `account`'s feed (`None`: the source's own) from `from`
    /// (`None`: it has none yet) to `to`, if it is still at `from`: whether it moved.
    pub async fn advance_feed_cursor(
        &self,
        source: &SourceName,
        account: Option<&str>,
        from: Option<i64>,
        to: i64,
    ) -> Result<bool, StoreError> {
        let account = account.unwrap_or_default();
        on_backend!(self, store => store.advance_feed_cursor(source.as_str(), account, from, to).await)
    }

    /// `source`'s first feed window (`feed:1`) and where it stands: where a backfill of the
    /// source ends.
    pub async fn first_feed_window(
        &self,
        source: &SourceName,
    ) -> Result<Option<(crate::feed::Window, crate::EventStatus)>, StoreError> {
        let Some(event) = self
            .event_by_key(source.as_str(), &crate::feed::Window::external_id(1))
            .await?
        else {
            return Ok(None);
        };
        let window = event
            .facts
            .as_ref()
            .and_then(crate::feed::Window::from_facts)
            .transpose()
            .map_err(StoreError::Corrupt)?
            .ok_or_else(|| StoreError::Corrupt(format!("{source}: feed:1 holds no window")))?;
        Ok(Some((window, event.status)))
    }

    /// The end of `source`'s newest posted feed window: what the books have read its
    /// provider's list up to (the newest window, or the one before it while the newest is
    /// still being read).
    pub async fn feed_cut(
        &self,
        source: &SourceName,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        let Some(seq) = self.feed_cursor(source).await? else {
            return Ok(None);
        };
        for seq in [seq, seq - 1] {
            if seq < 1 {
                break;
            }
            let Some(event) = self
                .event_by_key(source.as_str(), &crate::feed::Window::external_id(seq))
                .await?
            else {
                continue;
            };
            if event.status == crate::EventStatus::Posted
                && let Some(Ok(window)) = event
                    .facts
                    .as_ref()
                    .and_then(crate::feed::Window::from_facts)
            {
                return Ok(Some(window.to));
            }
        }
        Ok(None)
    }

    /// Asks for `source`'s opening balance from `since` (its feed must have a cursor): the
    /// day asked for, which is an earlier request's when there was one (a source has one
    /// opening); `None` when the source has no feed cursor.
    pub async fn request_opening(
        &self,
        source: &SourceName,
        since: NaiveDate,
    ) -> Result<Option<NaiveDate>, StoreError> {
        on_backend!(self, store => store.request_opening(source.as_str(), since).await)
    }

    /// The day `source`'s opening balance was asked for from, if it was.
    pub async fn opening_requested(
        &self,
        source: &SourceName,
    ) -> Result<Option<NaiveDate>, StoreError> {
        on_backend!(self, store => store.opening_requested(source.as_str()).await)
    }

    /// Which of the entries keyed `keys` are booked (recorded by `recorded_by`, when given), each
    /// with what it booked to `account` (its lines there summed, as text): for reconciling with
    /// a provider's own list.
    pub async fn booked(
        &self,
        keys: &[String],
        account: &str,
        recorded_by: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut all = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(1_000) {
            let found =
                on_backend!(self, store => store.booked(chunk, account, recorded_by).await)?;
            all.extend(found);
        }
        Ok(all)
    }

    /// The entries of movements `source`'s provider reported (they keep its details) dated from
    /// `from` to `to` (both included) that book to `account`: each key with its movement id.
    pub async fn booked_between(
        &self,
        source: &SourceName,
        account: &str,
        (from, to): (NaiveDate, NaiveDate),
    ) -> Result<Vec<(String, String)>, StoreError> {
        on_backend!(self, store => store.booked_between(source.as_str(), account, from, to).await)
    }

    /// When `source`'s newest delivery recorded after event `after` was received: its newest
    /// event that is not one of its feed's own (a window, the opening). Bounded by `after` so
    /// a source whose feed has opened many windows since its last webhook is not read back to
    /// it.
    pub async fn newest_delivery(
        &self,
        source: &SourceName,
        after: EventId,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        on_backend!(self, store => store.newest_delivery(source.as_str(), after).await)
    }
}
