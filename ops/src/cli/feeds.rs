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
use crate::feeds::{self, BalanceCheck, Coverage, SequenceCoverage};

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

/// `settle reconcile coverage SOURCE [--from D --to D]`: exits 1 when the books miss a
/// movement the provider lists or hold one for another amount, or miss a numbered document.
pub async fn coverage(
    config: &Config,
    store: &Store,
    source: &str,
    days: (Option<NaiveDate>, Option<NaiveDate>),
    json: bool,
) -> anyhow::Result<()> {
    let name = source_name(config, source)?;
    let resolvers = config.resolvers()?;
    let (ledger, sequence) = (resolvers.ledger_of(&name), resolvers.sequence_of(&name));
    if ledger.is_none() && sequence.is_none() {
        bail!("source {source}'s provider has no list settle can read");
    }
    let mut complete = true;
    if let Some(ledger) = ledger {
        let (Some(from), Some(to)) = days else {
            bail!("--from and --to name the days to compare for source {source}");
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
        complete &= coverage.complete();
    }
    if let Some(sequence) = sequence {
        let coverage = feeds::sequence_coverage(store, &name, sequence).await?;
        print_sequence(&coverage, json)?;
        complete &= coverage.complete();
    }
    if !complete {
        std::process::exit(1);
    }
    Ok(())
}

/// Each series on a line, its numbers as ranges.
fn print_sequence(coverage: &SequenceCoverage, json: bool) -> anyhow::Result<()> {
    if json {
        return table::json(coverage);
    }
    println!("{}: numbered documents by series", coverage.source);
    let rows: Vec<Vec<String>> = coverage
        .series
        .iter()
        .map(|s| {
            vec![
                s.series.clone(),
                match (s.first, s.last) {
                    (Some(first), Some(last)) => format!("{first}-{last}"),
                    _ => String::new(),
                },
                s.booked.to_string(),
                ranges(&s.fetching),
                ranges(&s.dead_letter),
                ranges(&s.closed),
                ranges(&s.missing),
                s.gap_since.map(|t| t.to_rfc3339()).unwrap_or_default(),
            ]
        })
        .collect();
    table::print(
        &[
            "SERIES",
            "RECORDED",
            "BOOKED",
            "FETCHING",
            "DEAD LETTER",
            "CLOSED",
            "MISSING",
            "MISSING SINCE",
        ],
        &rows,
    );
    println!("{}", verdict(coverage.complete()));
    Ok(())
}

fn verdict(complete: bool) -> &'static str {
    match complete {
        true => "complete",
        false => "INCOMPLETE",
    }
}

/// `1-3,7,9-10` for `[1, 2, 3, 7, 9, 10]`.
fn ranges(numbers: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    for &n in numbers {
        run = match run {
            Some((start, end)) if n == end + 1 => Some((start, n)),
            Some(done) => {
                out.push(range(done));
                Some((n, n))
            }
            None => Some((n, n)),
        };
    }
    out.extend(run.map(range));
    out.join(",")
}

fn range((start, end): (u64, u64)) -> String {
    match start == end {
        true => start.to_string(),
        false => format!("{start}-{end}"),
    }
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
    println!("{}", verdict(coverage.complete()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_ranges() {
        assert_eq!(ranges(&[1, 2, 3, 7, 9, 10]), "1-3,7,9-10");
        assert_eq!(ranges(&[4]), "4");
        assert_eq!(ranges(&[]), "");
    }
}
