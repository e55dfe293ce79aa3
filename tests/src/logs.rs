//! Test-run logs that can be checked afterwards. With `SETTLE_TEST_LOG_DIR` set, in-process apps
//! log to a file there (one per test process) and the logs of every `settle` process a test
//! started are copied there when the test ends; `scan-test-logs DIR` then checks that no secret
//! or token of the test configuration appears in any of them.

use std::path::PathBuf;

use ops::config::LogFormat;

/// Where this run's logs are collected, if anywhere.
pub fn dir() -> Option<PathBuf> {
    std::env::var_os("SETTLE_TEST_LOG_DIR")
        .map(PathBuf::from)
        .filter(|dir| std::fs::create_dir_all(dir).is_ok())
}

/// Initialises logging for an in-process app: the collection directory when set, else stderr.
pub fn init() {
    match dir() {
        Some(dir) => {
            let file = dir.join(format!("in-process-{}.log", std::process::id()));
            if ops::telemetry::init_to_file(&file, LogFormat::Json).is_err() {
                ops::telemetry::init(LogFormat::Auto);
            }
        }
        None => ops::telemetry::init(LogFormat::Auto),
    }
}

/// Every secret and token the test configuration holds, in each form it could leak in.
pub fn secrets() -> Vec<String> {
    use crate::app::*;
    let mut secrets: Vec<String> = [
        STANDARD_SECRET,
        STANDARD_SECRET_OLD,
        STANDARD_SECRET_UNKNOWN,
        STRIPE_SECRET,
        STRIPE_SECRET_OLD,
        ADYEN_KEY,
        ADYEN_KEY_OLD,
        OPS_TOKEN,
        FINANCE_TOKEN,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The Standard Webhooks keys without their prefix, and the Adyen keys in lower case.
    for s in [
        STANDARD_SECRET,
        STANDARD_SECRET_OLD,
        STANDARD_SECRET_UNKNOWN,
    ] {
        secrets.push(s.trim_start_matches("whsec_").to_owned());
    }
    for s in [ADYEN_KEY, ADYEN_KEY_OLD] {
        secrets.push(s.to_lowercase());
    }
    secrets
}
