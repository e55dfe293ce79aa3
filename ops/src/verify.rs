//! `settle verify`: every invariant of ARCHITECTURE.md, Invariants, on the configured store.

use anyhow::bail;
use ledger::Store;

pub async fn run(store: &Store, json: bool) -> anyhow::Result<()> {
    let checks = store.verify().await?;
    store.close().await;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.violations > 0)
        .map(|c| c.name)
        .collect();
    if json {
        let report = serde_json::json!({"ok": failed.is_empty(), "checks": checks});
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{:<36} {:>10} {:>9}  ASSERTS", "CHECK", "VIOLATIONS", "MS");
        for check in &checks {
            println!(
                "{:<36} {:>10} {:>9}  {}",
                check.name, check.violations, check.took_ms, check.description
            );
            for sample in &check.samples {
                println!("{:<36} {:>10} {:>9}  - {sample}", "", "", "");
            }
        }
        println!();
        let took_ms: u64 = checks.iter().map(|c| c.took_ms).sum();
        if failed.is_empty() {
            println!("all {} invariants hold ({took_ms} ms)", checks.len());
        }
    }
    if !failed.is_empty() {
        bail!("invariants violated: {}", failed.join(", "));
    }
    Ok(())
}
