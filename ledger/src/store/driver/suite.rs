//! The driver suite: each part's calls, written once over [`Driver`] and run against every
//! backend on a store of its own (a fresh PostgreSQL database, a fresh SQLite file), each
//! migrated and empty. A new backend runs the same suite by adding its arm to `each_backend!`.
//! The flows over the row primitives (posting, starting, failing, deciding, correcting) have
//! their own suites through `Store` in the `tests` crate (`conformance`, `review`, `finance`).

use chrono::{Duration, NaiveDate, TimeDelta, Utc};

use super::*;
use crate::feed::Opening;
use crate::ids::{ExternalId, SourceName};
use crate::record::Content;
use crate::review::Decision;
use crate::store::postgres::PgStore;
use crate::store::sessions::NewSession;
use crate::store::sqlite::SqliteStore;

/// The PostgreSQL server the suite makes its databases on (`SETTLE_TEST_PG`, as the `tests`
/// crate reads it: its maintenance database).
fn admin_url() -> String {
    std::env::var("SETTLE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database of its own for one test, dropped by [`Scratch::remove`] (one a failed test leaves
/// behind is named as the `tests` crate names its own, which drops such leftovers later).
struct Scratch {
    name: String,
    url: String,
}

impl Scratch {
    async fn postgres() -> Scratch {
        let admin = admin_url();
        let secs = Utc::now().timestamp();
        let name = format!(
            "settle_t_{secs}_{}",
            ulid::Ulid::generate().to_string().to_lowercase()
        );
        let pool = sqlx::PgPool::connect(&admin).await.expect("the server");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&pool)
            .await
            .expect("create the database");
        pool.close().await;
        let base = admin
            .rsplit_once('/')
            .map_or(admin.as_str(), |(base, _)| base);
        let url = format!("{base}/{name}");
        Scratch { name, url }
    }

    fn sqlite() -> Scratch {
        let name = std::env::temp_dir()
            .join(format!("settle-driver-{}.db", ulid::Ulid::generate()))
            .to_string_lossy()
            .into_owned();
        let url = format!("sqlite:{name}?mode=rwc");
        Scratch { name, url }
    }

    async fn remove(self) {
        if self.url.starts_with("sqlite:") {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", self.name));
            }
            return;
        }
        let pool = sqlx::PgPool::connect(&admin_url())
            .await
            .expect("the server");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&pool)
        .await
        .expect("drop the database");
        pool.close().await;
    }
}

/// A migrated, empty store of backend `D` on `scratch`.
async fn opened<D: Driver>(scratch: &Scratch) -> D {
    let driver: D = open(&scratch.url, &StoreOptions::default())
        .await
        .expect("open the backend");
    driver.migrate().await.expect("migrate");
    driver
}

/// Runs each named check (an `async fn(&D)` generic over the driver) on each backend.
macro_rules! each_backend {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $check() {
                    let scratch = super::Scratch::postgres().await;
                    let driver = super::opened::<super::PgStore>(&scratch).await;
                    super::$check(&driver).await;
                    super::Connection::close(&driver).await;
                    scratch.remove().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $check() {
                    let scratch = super::Scratch::sqlite();
                    let driver = super::opened::<super::SqliteStore>(&scratch).await;
                    super::$check(&driver).await;
                    super::Connection::close(&driver).await;
                    scratch.remove().await;
                }
            )*
        }
    };
}

each_backend!(
    a_migrated_store_is_ready_and_every_invariant_holds,
    a_feed_cursor_moves_only_from_where_it_is,
    a_source_has_one_opening_and_only_with_a_cursor,
    an_event_is_recorded_once_by_its_key,
    an_empty_store_has_no_balances_and_nothing_to_fold_or_sweep,
    a_session_is_found_until_it_expires_or_is_closed,
    a_source_is_paused_once_and_resumed_once,
    the_fleet_counts_the_caller_alive,
);

fn day(d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, d).expect("a date")
}

fn decision(reason: &str) -> Decision {
    Decision {
        actor: "driver-suite".into(),
        reason: reason.into(),
    }
}

async fn a_migrated_store_is_ready_and_every_invariant_holds<D: Driver>(driver: &D) {
    driver.ready().await.expect("ready");
    driver
        .check_session_mode(std::time::Duration::from_secs(5))
        .await
        .expect("session state kept");
    let checks = driver.verify().await.expect("verify");
    assert!(!checks.is_empty());
    let failed: Vec<_> = checks.iter().filter(|c| c.violations > 0).collect();
    assert!(failed.is_empty(), "{failed:?}");
}

async fn a_feed_cursor_moves_only_from_where_it_is<D: Driver>(driver: &D) {
    assert_eq!(driver.feed_cursor("src", "").await.expect("read"), None);
    let advance = |from, to| driver.advance_feed_cursor("src", "", from, to);
    assert!(advance(None, 1).await.expect("first"), "from none");
    assert!(!advance(None, 1).await.expect("again"), "no longer at none");
    assert!(advance(Some(1), 2).await.expect("next"), "from 1");
    assert!(!advance(Some(1), 3).await.expect("stale"), "no longer at 1");
    assert_eq!(driver.feed_cursor("src", "").await.expect("read"), Some(2));
    // An account's feed of the same source has its own cursor.
    assert_eq!(
        driver.feed_cursor("src", "acct_1").await.expect("read"),
        None
    );
    assert!(
        driver
            .advance_feed_cursor("src", "acct_1", None, 7)
            .await
            .expect("account")
    );
    assert_eq!(
        driver.feed_cursor("src", "acct_1").await.expect("read"),
        Some(7)
    );
    assert_eq!(driver.feed_cursor("src", "").await.expect("read"), Some(2));
}

async fn a_source_has_one_opening_and_only_with_a_cursor<D: Driver>(driver: &D) {
    assert_eq!(
        driver.request_opening("src", day(1)).await.expect("ask"),
        None
    );
    assert_eq!(driver.opening_requested("src").await.expect("read"), None);
    assert!(
        driver
            .advance_feed_cursor("src", "", None, 1)
            .await
            .expect("a cursor")
    );
    assert_eq!(
        driver.request_opening("src", day(1)).await.expect("ask"),
        Some(day(1))
    );
    assert_eq!(
        driver
            .request_opening("src", day(5))
            .await
            .expect("ask again"),
        Some(day(1)),
        "the first request stands"
    );
    assert_eq!(
        driver.opening_requested("src").await.expect("read"),
        Some(day(1))
    );
}

async fn an_event_is_recorded_once_by_its_key<D: Driver>(driver: &D) {
    let event = |external_id: &str, on: u32| {
        let named = Opening::of_day(day(on)).named();
        NewEvent {
            source: SourceName::parse("src").expect("source"),
            external_id: ExternalId::parse(external_id).expect("id"),
            payload: named.trigger.to_stored().to_string(),
            content: Content::Named(named),
        }
    };
    let (first, same_key, other) = (event("evt_1", 1), event("evt_1", 2), event("evt_2", 1));
    let recorded = driver
        .record_new(&[&first, &same_key, &other], 1_000)
        .await
        .expect("record");
    assert!(
        matches!(recorded.as_slice(), [Some(_), None, Some(_)]),
        "{recorded:?}"
    );
    let id = recorded[0].expect("recorded");
    assert_eq!(
        driver.external_id(id).await.expect("read").as_deref(),
        Some("evt_1")
    );
    let again = driver.record_new(&[&first], 1_000).await.expect("again");
    assert_eq!(again, vec![None], "a taken key is not recorded again");
    let stored = driver
        .event_by_key("src", "evt_1")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.id, id.get());
    let facts = driver.facts_of(&[id]).await.expect("facts");
    assert_eq!(facts.get(&id.get()).map(|(s, _)| s.as_str()), Some("src"));
}

async fn an_empty_store_has_no_balances_and_nothing_to_fold_or_sweep<D: Driver>(driver: &D) {
    let now = BalanceQuery::default();
    assert!(driver.balances(now).await.expect("balances").is_empty());
    let recorded = BalanceQuery {
        as_of: Some(day(30)),
        recorded_at: Some(Utc::now()),
    };
    assert!(
        driver
            .balances(recorded)
            .await
            .expect("balances")
            .is_empty()
    );
    assert_eq!(driver.compact_balances().await.expect("fold"), 0);
    assert_eq!(driver.sweep(0, 100).await.expect("sweep"), 0);
    let gauges = driver.gauges().await.expect("gauges");
    assert_eq!(gauges.queue_depth, 0);
    let (events, entries) = driver.activity(day(1)).await.expect("activity");
    assert!(events.is_empty() && entries.is_empty());
}

async fn a_session_is_found_until_it_expires_or_is_closed<D: Driver>(driver: &D) {
    let now = Utc::now();
    let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
    let csrf = "0".repeat(32);
    let session = |id_sha256, actor| NewSession {
        id_sha256,
        actor,
        role: "ops",
        token_tag: "tag",
        csrf: &csrf,
        now,
        expires_at: now + Duration::hours(1),
    };
    let (a, b, c) = (a.as_str(), b.as_str(), c.as_str());
    for (id, actor) in [(a, "ann"), (b, "ann"), (c, "bob")] {
        driver
            .open_session(&session(id, actor))
            .await
            .expect("open");
    }
    let found = driver.session(a, now).await.expect("read").expect("open");
    assert_eq!((found.actor.as_str(), found.role.as_str()), ("ann", "ops"));
    let later = now + TimeDelta::hours(2);
    assert_eq!(
        driver.session(a, later).await.expect("read"),
        None,
        "expired"
    );
    assert!(driver.close_session(c).await.expect("close"));
    assert!(!driver.close_session(c).await.expect("close again"));
    assert_eq!(driver.close_sessions_of("ann").await.expect("close all"), 2);
    assert_eq!(driver.session(b, now).await.expect("read"), None);
}

async fn a_source_is_paused_once_and_resumed_once<D: Driver>(driver: &D) {
    let paused = driver
        .pause_source("src", &decision("maintenance"))
        .await
        .expect("pause");
    assert!(paused.paused && paused.changed);
    let again = driver
        .pause_source("src", &decision("maintenance"))
        .await
        .expect("pause again");
    assert!(
        again.paused && !again.changed,
        "already paused: nothing written"
    );
    let in_force = driver.source_pauses(true, 10).await.expect("pauses");
    assert_eq!(in_force.len(), 1);
    let resumed = driver
        .resume_source("src", &decision("done"))
        .await
        .expect("resume");
    assert!(!resumed.paused && resumed.changed);
    assert!(
        driver
            .source_pauses(true, 10)
            .await
            .expect("pauses")
            .is_empty()
    );
    assert_eq!(driver.source_pauses(false, 10).await.expect("all").len(), 1);
}

async fn the_fleet_counts_the_caller_alive<D: Driver>(driver: &D) {
    driver
        .keep_worker_alive("driver-suite-worker")
        .await
        .expect("seen");
    let alive = driver
        .live_workers(std::time::Duration::from_secs(10), "driver-suite")
        .await
        .expect("count");
    assert_eq!(alive, 1, "the caller, counted once");
}
