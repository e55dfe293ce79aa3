//! `settle backfill` and `settle reconcile balance|coverage`: a source's feed from the terminal
//! (the work itself is `crate::feeds`'s; the windows are posted by the workers).

use std::time::Duration;

use anyhow::{Context, bail};
use chrono::NaiveDate;
use indicatif::{ProgressBar, ProgressStyle};
use ledger::feed::Opening;
use ledger::{SourceName, Store};

use super::table;
use crate::config::Config;
use crate::feeds::{self, BalanceCheck, Coverage};

/// How often a waiting backfill looks at its progress: each look reads every window's state, so
/// a short backfill is looked at often (its end shown at once) and a long one less.
fn progress_every(windows: usize) -> Duration {
    Duration::from_millis(5 * windows as u64)
        .clamp(Duration::from_millis(200), Duration::from_secs(2))
}

fn source_name(config: &Config, source: &str) -> anyhow::Result<SourceName> {
    config
        .sources
        .iter()
        .find(|s| s.name.as_str() == source)
        .map(|s| s.name.clone())
        .with_context(|| format!("no source {source} in the configuration"))
}

/// Records `source`'s backfill from `since` and, unless `no_wait`, shows its progress until the
/// workers have posted every window and the opening balance.
pub async fn backfill(
    config: &Config,
    store: &Store,
    source: &str,
    since: NaiveDate,
    no_wait: bool,
) -> anyhow::Result<()> {
    let name = source_name(config, source)?;
    let resolvers = config.resolvers()?;
    let feed = resolvers
        .feed_of(&name)
        .with_context(|| format!("source {source} has no feed to backfill from (a provider whose movements settle lists, with its feed on)"))?;
    let lock_timeout_ms = config.workers.lock_timeout_ms;
    let backfill = feeds::backfill(store, &name, &feed, since, lock_timeout_ms).await?;
    eprintln!(
        "backfill of {source} from {since} to {}: {} window(s) of a day ({} new), then the opening balance at {since}; the workers post them",
        backfill.until.format("%Y-%m-%d %H:%M:%S"),
        backfill.keys.len(),
        backfill.new
    );
    if no_wait {
        return Ok(());
    }
    let bar = ProgressBar::new(backfill.keys.len() as u64 + 1);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} windows posted  {per_sec}  ETA {eta}  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    loop {
        let progress = feeds::progress(store, &name, &backfill.keys).await?;
        bar.set_position((progress.posted + usize::from(progress.opening_posted)) as u64);
        if progress.abandoned > 0 {
            bar.set_message(format!("{} in the dead letter", progress.abandoned));
        }
        if progress.done() {
            bar.finish_with_message("done");
            return Ok(());
        }
        tokio::time::sleep(progress_every(backfill.keys.len())).await;
    }
}

/// `settle reconcile balance SOURCE`: exits 1 when the books and the provider differ by more than
/// what was listed after the cut.
pub async fn balance(
    config: &Config,
    store: &Store,
    source: &str,
    json: bool,
) -> anyhow::Result<()> {
    let name = source_name(config, source)?;
    let resolvers = config.resolvers()?;
    let Some(ledger) = resolvers.ledger_of(&name) else {
        bail!("source {source}'s provider has no balance settle can read");
    };
    let rules = config.posting_rules();
    let check = feeds::check_balance(store, &name, ledger, &rules.accounts(&name)).await?;
    print_balance(&check, json)?;
    if !check.equal() {
        std::process::exit(1);
    }
    Ok(())
}

fn print_balance(check: &BalanceCheck, json: bool) -> anyhow::Result<()> {
    if json {
        return table::json(check);
    }
    println!(
        "{} ({}), the feed read up to {}",
        check.source,
        check.account,
        check
            .cut
            .map_or_else(|| "nothing yet".to_owned(), |c| c.to_rfc3339())
    );
    let rows: Vec<Vec<String>> = check
        .currencies
        .iter()
        .map(|c| {
            vec![
                c.currency.clone(),
                c.provider.clone(),
                c.books.clone(),
                format!("{} ({})", c.after_cut, c.after_cut_count),
                c.difference.clone(),
            ]
        })
        .collect();
    table::print(
        &["CUR", "PROVIDER", "BOOKS", "AFTER CUT (N)", "DIFFERENCE"],
        &rows,
    );
    println!("{}", if check.equal() { "equal" } else { "DIFFERENT" });
    Ok(())
}

/// `settle reconcile coverage SOURCE --from D --to D`: exits 1 when the books miss a movement
/// the provider lists or hold one for another amount.
pub async fn coverage(
    config: &Config,
    store: &Store,
    source: &str,
    from: NaiveDate,
    to: NaiveDate,
    json: bool,
) -> anyhow::Result<()> {
    let name = source_name(config, source)?;
    let resolvers = config.resolvers()?;
    let Some(ledger) = resolvers.ledger_of(&name) else {
        bail!("source {source}'s provider has no list settle can read");
    };
    let rules = config.posting_rules();
    let end = Opening::of_day(to).since + chrono::TimeDelta::days(1);
    let coverage = feeds::coverage(
        store,
        &name,
        ledger,
        &rules.accounts(&name),
        Opening::of_day(from).since,
        end,
    )
    .await?;
    print_coverage(&coverage, json)?;
    if !coverage.complete() {
        std::process::exit(1);
    }
    Ok(())
}

fn print_coverage(coverage: &Coverage, json: bool) -> anyhow::Result<()> {
    if json {
        return table::json(coverage);
    }
    println!(
        "{} from {} to {}",
        coverage.source,
        coverage.from.to_rfc3339(),
        coverage.to.to_rfc3339()
    );
    let rows: Vec<Vec<String>> = coverage
        .rows
        .iter()
        .map(|r| {
            vec![
                r.currency.clone(),
                r.category.clone(),
                r.provider_count.to_string(),
                r.provider_net.clone(),
                r.books_count.to_string(),
                r.books_net.clone(),
            ]
        })
        .collect();
    table::print(
        &[
            "CUR",
            "CATEGORY",
            "PROVIDER N",
            "PROVIDER NET",
            "BOOKS N",
            "BOOKS NET",
        ],
        &rows,
    );
    for id in &coverage.missing_in_books {
        println!("missing in the books: {id}");
    }
    for id in &coverage.differing {
        println!("booked for another amount: {id}");
    }
    for id in &coverage.not_listed {
        println!("in the books, not listed by the provider: {id}");
    }
    println!(
        "{}",
        if coverage.complete() {
            "complete"
        } else {
            "INCOMPLETE"
        }
    );
    Ok(())
}
