//! `scan-test-logs DIR`: fails if any log collected from a test run holds a secret or a token of
//! the test configuration (see `tests::logs`), or a dashboard session id in its cookie.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: scan-test-logs DIR");
        return ExitCode::from(2);
    };
    let secrets = tests::logs::secrets();
    let mut files = 0;
    let mut bytes = 0;
    let mut leaks = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        files += 1;
        bytes += text.len();
        // A dashboard session id, in its cookie.
        if text.match_indices("settle_session=").any(|(at, found)| {
            text[at + found.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_hexdigit())
        }) {
            leaks.push(format!(
                "{}: a dashboard session id",
                entry.path().display()
            ));
        }
        for secret in &secrets {
            if text.contains(secret.as_str()) {
                leaks.push(format!(
                    "{}: a configured secret or token ({} chars)",
                    entry.path().display(),
                    secret.len()
                ));
            }
        }
    }
    println!(
        "scanned {files} log file(s), {bytes} bytes, for {} secret forms",
        secrets.len()
    );
    if files == 0 {
        eprintln!("no logs were collected in {dir}");
        return ExitCode::FAILURE;
    }
    if leaks.is_empty() {
        println!("no secret or token in the logs");
        ExitCode::SUCCESS
    } else {
        for leak in &leaks {
            eprintln!("LEAK {leak}");
        }
        ExitCode::FAILURE
    }
}
