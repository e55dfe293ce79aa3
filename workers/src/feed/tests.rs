use super::*;

#[test]
fn a_window_reads_anew_what_the_last_ones_pace_lists_in_five_seconds() {
    let at = |s: i64| DateTime::from_timestamp(1_800_000_000 + s, 0).expect("time");
    let overlap = TimeDelta::seconds(30);
    // The last window read 10 s anew (past its 30 s of overlap).
    let last = Window {
        seq: 7,
        from: at(0),
        to: at(40),
        account: None,
        skip: None,
        settled: None,
    };
    let reach = |took_ms: i64| reach(&last, overlap, TimeDelta::milliseconds(took_ms));
    assert_eq!(reach(20_000), TimeDelta::seconds(2), "slow: shorter");
    assert_eq!(reach(5_000), TimeDelta::seconds(10), "on pace: as long");
    assert_eq!(reach(4_000), TimeDelta::seconds(12), "quick: longer");
    assert_eq!(
        reach(1_000),
        TimeDelta::seconds(20),
        "at most twice as long"
    );
    assert_eq!(reach(0), TimeDelta::seconds(20));
    assert_eq!(
        reach(600_000),
        TimeDelta::seconds(1),
        "never under a second"
    );
    // A first window reads only its overlap: it counts as a second read anew.
    let first = Window::first(None, at(100), overlap);
    assert_eq!(
        super::reach(&first, overlap, TimeDelta::milliseconds(500)),
        TimeDelta::seconds(2)
    );
}

#[test]
fn the_accounts_windows_spend_at_most_half_the_sources_budget() {
    let budget = providers::Budget::new("a-source", 100, 25);
    let every = Duration::from_secs(60);
    assert_eq!(account_every(every, 10, Some(&budget)), every);
    // 50 requests a second for the accounts: 3,000 a minute.
    assert_eq!(account_every(every, 3_000, Some(&budget)), every);
    assert_eq!(
        account_every(every, 30_000, Some(&budget)),
        Duration::from_secs(600)
    );
    assert_eq!(account_every(every, 30_000, None), every);
}
