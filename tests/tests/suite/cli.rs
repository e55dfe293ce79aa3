//! The command line as a person meets it: `config check`, tokens, the health check, the root
//! redirect, completions and the man page, read commands on a store that is not there, and
//! `SETTLE_*` variables that name no setting. Each runs the real binary.

use std::path::Path;
use std::time::Duration;

use tests::app::{ADYEN_KEY, STANDARD_SECRET};
use tests::process::{Listen, Scratch, free_port, settle_command, spawn_settle_in};

/// What a finished `settle` command said.
struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `settle <args>` in `dir` with no `DATABASE_URL` but the environment given.
async fn settle(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut command = settle_command();
    command
        .args(args)
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("SETTLE_CONFIG");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("settle finished within 60 s")
        .expect("run settle");
    Ran {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

const STRIPE_KEY: &str = "rk_test_cli_check_0123456789abcdef";
const DATABASE_PASSWORD: &str = "pw-never-printed";

fn good_file() -> String {
    format!(
        r#"listen = "0.0.0.0:9090"

[workers]
concurrency = 32

[[sources]]
name = "std"
provider = "standard"
secrets = ["{STANDARD_SECRET}"]

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_cli_check_stripe_signing_secret"]
livemode = false
api_key_env = "CLI_CHECK_STRIPE_KEY"

[log]
format = "json"
"#
    )
}

#[tokio::test]
async fn config_check_prints_the_resolved_configuration_with_every_secret_redacted() {
    let scratch = Scratch::new();
    let file = scratch.write("settle.toml", &good_file());
    let url = format!("postgres://settle:{DATABASE_PASSWORD}@db.internal:5432/settle");
    let ran = settle(
        &scratch.dir,
        &["config", "check", "--config", file.to_str().expect("path")],
        &[
            ("DATABASE_URL", &url),
            ("CLI_CHECK_STRIPE_KEY", STRIPE_KEY),
            ("SETTLE_WORKERS__BATCH_SIZE", "64"),
        ],
    )
    .await;
    assert!(ran.success, "{}\n{}", ran.stdout, ran.stderr);
    let resolved: toml::Value = toml::from_str(&ran.stdout).expect("the output is TOML");
    let at = |key: &str| value_at(&resolved, key);
    assert_eq!(at("listen").as_deref(), Some("0.0.0.0:9090"));
    assert_eq!(
        at("database_url").as_deref(),
        Some("postgres://settle:<redacted>@db.internal:5432/settle")
    );
    assert_eq!(at("workers.concurrency").as_deref(), Some("32"), "the file");
    assert_eq!(at("workers.batch_size").as_deref(), Some("64"), "the env");
    assert_eq!(
        at("workers.attempts_max").as_deref(),
        Some("8"),
        "a default"
    );
    assert_eq!(at("log.format").as_deref(), Some("json"));
    let stripe = &resolved["sources"][1];
    assert_eq!(stripe["api_key_env"].as_str(), Some("CLI_CHECK_STRIPE_KEY"));
    for secret in [
        STANDARD_SECRET,
        "whsec_cli_check_stripe_signing_secret",
        STRIPE_KEY,
        DATABASE_PASSWORD,
    ] {
        assert!(
            !ran.stdout.contains(secret) && !ran.stderr.contains(secret),
            "{secret} printed:\n{}",
            ran.stdout
        );
    }
    assert!(ran.stdout.contains("secrets = [\"<redacted>\"]"));
    assert!(ran.stderr.contains("configuration valid"), "{}", ran.stderr);

    // The Stripe key's variable missing is a configuration error too.
    let ran = settle(
        &scratch.dir,
        &["config", "check", "--config", file.to_str().expect("path")],
        &[],
    )
    .await;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains("CLI_CHECK_STRIPE_KEY"),
        "{}",
        ran.stderr
    );
}

/// `settle config check` on ./settle.toml made of `good_file()` with `from` replaced by `to`:
/// what it said, and the line of the replaced key in the file.
async fn check_edited(scratch: &Scratch, from: &str, to: &str) -> (Ran, usize) {
    let text = good_file().replace(from, to);
    let key = to.split(' ').next().expect("a key");
    let line = text
        .lines()
        .position(|l| l.starts_with(key))
        .expect("the line")
        + 1;
    scratch.write("settle.toml", &text);
    // ./settle.toml is found without --config.
    let ran = settle(
        &scratch.dir,
        &["config", "check"],
        &[("CLI_CHECK_STRIPE_KEY", STRIPE_KEY)],
    )
    .await;
    (ran, line)
}

/// An Adyen source without report credentials books gross amounts only: settle refuses it
/// unless it says so (`money_from = "notifications"`), and then `config check` says what its
/// books lack.
#[tokio::test]
async fn an_adyen_source_booking_gross_amounts_only_must_say_so_and_is_told_what_it_lacks() {
    let scratch = Scratch::new();
    let check = |adyen_keys: &str| {
        let text = good_file().replace(
            "[log]",
            &format!(
                "[[sources]]\nname = \"shop\"\nprovider = \"adyen\"\nsecrets = [\"{ADYEN_KEY}\"]\n{adyen_keys}\n[log]"
            ),
        );
        scratch.write("settle.toml", &text);
        settle(
            &scratch.dir,
            &["config", "check"],
            &[("CLI_CHECK_STRIPE_KEY", STRIPE_KEY)],
        )
    };
    let ran = check("").await;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains("source shop")
            && ran.stderr.contains("sources.2.money_from")
            && ran.stderr.contains("say money_from = \"notifications\""),
        "{}",
        ran.stderr
    );
    let ran = check("money_from = \"notifications\"\n").await;
    assert!(ran.success, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("settle: source shop: money_from = \"notifications\"")
            && ran
                .stderr
                .contains("no fees, no settlement currency, no payouts"),
        "{}",
        ran.stderr
    );
    // With a report user it books from the reports, no money_from needed, nothing to say.
    let ran = check("report_user = \"report@Company.Settle\"\nreport_password = \"pw\"\n").await;
    assert!(ran.success, "{}", ran.stderr);
    assert!(!ran.stderr.contains("source shop"), "{}", ran.stderr);
}

#[tokio::test]
async fn a_bad_key_is_named_with_its_line_and_the_key_it_resembles() {
    let scratch = Scratch::new();
    let (ran, line) = check_edited(&scratch, "concurrency = 32", "concurency = 32").await;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains(&format!("settle.toml line {line}"))
            && ran.stderr.contains("unknown key `workers.concurency`")
            && ran.stderr.contains("did you mean `concurrency`"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        ran.stderr.trim().lines().count(),
        1,
        "one sentence: {}",
        ran.stderr
    );

    // A value of the wrong type in a source, by the line of its key in the array of tables.
    let (ran, line) = check_edited(&scratch, "livemode = false", "livemode = \"no\"").await;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains(&format!("settle.toml line {line}"))
            && ran.stderr.contains("sources.1.livemode"),
        "{}",
        ran.stderr
    );

    // Another provider's key, named with whose it is, by its line.
    let (ran, line) = check_edited(
        &scratch,
        "livemode = false",
        "money_from = \"reports\"\nlivemode = false",
    )
    .await;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains(&format!("settle.toml line {line}: source stripe"))
            && ran.stderr.contains("`sources.1.money_from`: unknown key: a setting of provider = \"adyen\" sources only"),
        "{}",
        ran.stderr
    );

    // A key the provider requires and the table lacks: the source's table's line.
    let (ran, _) = check_edited(&scratch, "livemode = false", "connect = \"post\"").await;
    let table = good_file()
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "[[sources]]")
        .map(|(n, _)| n + 1)
        .nth(1)
        .expect("the stripe source's table");
    assert!(!ran.success);
    assert!(
        ran.stderr
            .contains(&format!("settle.toml line {table}: source stripe"))
            && ran
                .stderr
                .contains("`sources.1.livemode`: livemode is required"),
        "{}",
        ran.stderr
    );

    // A provider settle does not know, with the ones it does.
    let (ran, _) = check_edited(&scratch, "provider = \"stripe\"", "provider = \"paypal\"").await;
    let line = good_file()
        .lines()
        .position(|l| l == "provider = \"stripe\"")
        .expect("the stripe source's provider")
        + 1;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains(&format!("settle.toml line {line}"))
            && ran
                .stderr
                .contains("unknown provider \"paypal\"; settle knows: standard, stripe, adyen"),
        "{}",
        ran.stderr
    );
}

#[tokio::test]
async fn unknown_settle_variables_are_named_with_a_suggestion_and_refused_only_where_they_matter() {
    let scratch = Scratch::new();
    scratch.write(
        "settle.toml",
        &format!("[[sources]]\nname = \"std\"\nprovider = \"standard\"\nsecrets = [\"{STANDARD_SECRET}\"]\n"),
    );
    let typo = [("SETTLE_WORKERS__CONCURENCY", "8")];
    let ran = settle(&scratch.dir, &["config", "check"], &typo).await;
    assert!(!ran.success);
    assert!(
        ran.stderr
            .contains("SETTLE_WORKERS__CONCURENCY is not a setting of settle")
            && ran
                .stderr
                .contains("did you mean SETTLE_WORKERS__CONCURRENCY"),
        "{}",
        ran.stderr
    );

    // A long-running role refuses to start with it.
    let listen = Listen::new();
    let ran = settle(&scratch.dir, &listen.args("serve"), &typo).await;
    assert!(!ran.success);
    assert!(ran.stderr.contains("SETTLE_WORKERS__CONCURENCY"));
    assert!(
        !scratch.dir.join("settle.db").exists(),
        "refused before touching the store"
    );

    // A variable the configuration itself names (`secrets_env`) is not a stray one.
    scratch.write(
        "settle.toml",
        "[[sources]]\nname = \"std\"\nprovider = \"standard\"\nsecrets_env = \"SETTLE_STD_SECRETS\"\n",
    );
    let ran = settle(
        &scratch.dir,
        &["config", "check"],
        &[("SETTLE_STD_SECRETS", STANDARD_SECRET)],
    )
    .await;
    assert!(ran.success, "{}", ran.stderr);

    // Commands that need no configuration run whatever the environment holds, even beside a
    // broken ./settle.toml.
    scratch.write("settle.toml", "this is not toml");
    let ran = settle(
        &scratch.dir,
        &["token", "new", "--role", "ops", "--name", "alice"],
        &typo,
    )
    .await;
    assert!(ran.success, "{}", ran.stderr);
    assert!(ran.stdout.contains("stl_") && ran.stdout.contains("token_sha256 = \""));
    assert!(ran.stderr.is_empty(), "{}", ran.stderr);
}

#[tokio::test]
async fn a_read_command_on_a_store_that_is_not_there_says_so_once_and_creates_nothing() {
    let scratch = Scratch::new();
    let missing = scratch.dir.join("missing.db");
    let url = format!("sqlite://{}", missing.display());
    let ran = settle(
        &scratch.dir,
        &["balances"],
        &[
            ("DATABASE_URL", &url),
            // Only warned about by a read command.
            ("SETTLE_NOT_A_SETTING", "1"),
        ],
    )
    .await;
    assert!(!ran.success);
    assert!(!missing.exists(), "nothing created");
    let errors: Vec<&str> = ran
        .stderr
        .lines()
        .filter(|l| l.starts_with("settle: ") && !l.starts_with("settle: warning"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", ran.stderr);
    assert!(
        errors[0].contains("no settle store") && errors[0].matches("does not exist").count() == 1,
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr
            .contains("warning: environment variable SETTLE_NOT_A_SETTING is not a setting")
    );

    // A file that exists but was never migrated.
    std::fs::write(&missing, b"").expect("empty file");
    let ran = settle(
        &scratch.dir,
        &["journal", "list"],
        &[("DATABASE_URL", &url)],
    )
    .await;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains("not ready for settle") && ran.stderr.contains("settle migrate"),
        "{}",
        ran.stderr
    );

    // Once migrated, the same command answers.
    let ran = settle(&scratch.dir, &["migrate"], &[("DATABASE_URL", &url)]).await;
    assert!(ran.success, "{}", ran.stderr);
    let ran = settle(&scratch.dir, &["balances"], &[("DATABASE_URL", &url)]).await;
    assert!(ran.success, "{}", ran.stderr);
}

#[tokio::test]
async fn the_health_check_the_root_redirect_and_the_start_up_lines() {
    let scratch = Scratch::new();
    let port = free_port();
    let ops_port = free_port();
    scratch.write(
        "settle.toml",
        &format!(
            "listen = \"0.0.0.0:{port}\"\nops_listen = \"127.0.0.1:{ops_port}\"\n[log]\nformat = \"text\"\n[[sources]]\nname = \"std\"\nprovider = \"standard\"\nsecrets = [\"{STANDARD_SECRET}\"]\n"
        ),
    );
    // Nothing listens yet: the health check fails.
    let ran = settle(&scratch.dir, &["healthcheck", "--timeout-secs", "2"], &[]).await;
    assert!(!ran.success);
    assert!(ran.stderr.contains("/healthz"), "{}", ran.stderr);

    let _serve = spawn_settle_in(&scratch, "serve", &["serve"], &[]);
    let mut healthy = false;
    for _ in 0..600 {
        let ran = settle(&scratch.dir, &["healthcheck"], &[]).await;
        if ran.success {
            assert!(
                ran.stdout
                    .contains(&format!("http://127.0.0.1:{port}/healthz: 200")),
                "{}",
                ran.stdout
            );
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healthy, "never healthy:\n{}", scratch.logs());

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let root = http
        .get(format!("http://127.0.0.1:{ops_port}/"))
        .send()
        .await
        .expect("GET /");
    assert_eq!(root.status().as_u16(), 303);
    assert_eq!(
        root.headers().get("location").and_then(|v| v.to_str().ok()),
        Some("/dashboard")
    );

    let logs = scratch.logs();
    for line in [
        format!("webhooks  http://0.0.0.0:{port}/webhooks/<source>  (sources: std)"),
        format!("health    http://0.0.0.0:{port}/healthz"),
        format!("API       http://127.0.0.1:{ops_port}/api"),
        format!("dashboard http://127.0.0.1:{ops_port}/dashboard"),
        format!("metrics   http://127.0.0.1:{ops_port}/metrics"),
        format!("readiness http://127.0.0.1:{ops_port}/readyz"),
    ] {
        assert!(logs.contains(&line), "{line} in:\n{logs}");
    }
    assert!(!logs.contains("\"timestamp\""), "log.format = text: {logs}");
}

#[tokio::test]
async fn completions_and_the_man_page_come_from_the_same_definitions() {
    let scratch = Scratch::new();
    for shell in ["bash", "zsh", "fish"] {
        let ran = settle(&scratch.dir, &["completions", shell], &[]).await;
        assert!(ran.success, "{shell}: {}", ran.stderr);
        for word in ["dead-letters", "healthcheck", "keep-running", "error-code"] {
            assert!(ran.stdout.contains(word), "{shell} completes {word}");
        }
        if shell == "bash" {
            let script = scratch.write("settle.bash", &ran.stdout);
            let status = std::process::Command::new("bash")
                .arg("-n")
                .arg(&script)
                .status()
                .expect("bash -n");
            assert!(status.success(), "the bash script parses");
        }
    }
    let ran = settle(&scratch.dir, &["man"], &[]).await;
    assert!(ran.success);
    assert!(ran.stdout.starts_with(".ie") || ran.stdout.contains(".TH settle"));
    assert!(ran.stdout.contains("healthcheck"));
    // Every page a page names is written beside it.
    let pages = scratch.dir.join("man1");
    std::fs::create_dir_all(&pages).expect("dir");
    let ran = settle(
        &scratch.dir,
        &["man", "--dir", pages.to_str().expect("path")],
        &[],
    )
    .await;
    assert!(ran.success, "{}", ran.stderr);
    let mut named = vec![ran_page_references(
        &std::fs::read_to_string(pages.join("settle.1")).expect("settle.1"),
    )];
    for entry in std::fs::read_dir(&pages).expect("pages") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("page");
        named.push(ran_page_references(&text));
    }
    let named: Vec<String> = named.into_iter().flatten().collect();
    assert!(named.iter().any(|page| page == "settle-serve"), "{named:?}");
    for page in named {
        assert!(
            pages.join(format!("{page}.1")).exists(),
            "{page}(1) is named but not written"
        );
    }
    // The page printed names the same pages.
    let printed = settle(&scratch.dir, &["man"], &[]).await;
    for page in ran_page_references(&printed.stdout) {
        assert!(
            pages.join(format!("{page}.1")).exists(),
            "{page}(1) is named but not written"
        );
    }
}

/// The pages a roff page names (`\fBsettle\-serve(1)\fR` -> `settle-serve`).
fn ran_page_references(roff: &str) -> Vec<String> {
    let text = roff
        .replace("\\-", "-")
        .replace("\\fB", "")
        .replace("\\fR", "")
        .replace("\\fI", "");
    text.match_indices("(1)")
        .filter_map(|(at, _)| {
            let mut name: Vec<char> = text[..at]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            name.reverse();
            let name: String = name.into_iter().collect();
            name.starts_with("settle").then_some(name)
        })
        .collect()
}

/// The text of the value at a dotted key of a TOML document.
fn value_at(document: &toml::Value, key: &str) -> Option<String> {
    let mut value = document;
    for segment in key.split('.') {
        value = value.get(segment)?;
    }
    Some(match value {
        toml::Value::String(text) => text.clone(),
        other => other.to_string(),
    })
}

/// A command whose reader leaves (`settle ... | head`) ends as any Unix tool does, on SIGPIPE,
/// never with a panic.
#[tokio::test]
async fn a_command_whose_reader_leaves_ends_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let scratch = Scratch::new();
    let mut child = settle_command()
        .args(["token", "new", "--role", "ops", "--name", "pipe"])
        .current_dir(&scratch.dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start settle");
    // The reader is gone before anything is written.
    drop(child.stdout.take());
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("settle finished")
        .expect("settle ran");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        output.status.success() || output.status.signal() == Some(13),
        "{:?}: {stderr}",
        output.status
    );
}

/// `settle serve 2>&1 | head`: once the reader of its logs is gone, SIGTERM still stops it
/// (a log that cannot be written is dropped, not reported on that same closed stderr).
#[tokio::test]
async fn serve_stops_on_sigterm_after_the_reader_of_its_logs_is_gone() {
    let scratch = Scratch::new();
    scratch.write(
        "settle.toml",
        &format!(
            "[[sources]]\nname = \"std\"\nprovider = \"standard\"\nsecrets = [\"{STANDARD_SECRET}\"]\n"
        ),
    );
    let listen = Listen::new();
    let mut child = settle_command()
        .args(listen.args("serve"))
        .current_dir(&scratch.dir)
        .env("DATABASE_URL", "sqlite://settle.db")
        .env("RUST_LOG", "debug")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start settle");
    drop(child.stdout.take());
    drop(child.stderr.take());
    let http = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..300 {
        ready = http
            .get(format!("{}/readyz", listen.ops_base()))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "serve became ready with nobody reading its logs");
    tests::process::sigterm(&child);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("stopped after SIGTERM")
        .expect("status");
    assert!(status.success(), "{status:?}");
}
