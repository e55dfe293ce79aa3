//! The deployment files (`Dockerfile`, `deploy/`): what this machine can check without a
//! container runtime. The compose file is validated by Compose itself, the systemd unit by
//! `systemd-analyze verify`, and every `SETTLE_*` variable they set must be a setting settle
//! knows (settle refuses to start with one it does not). The shipped alert rules are checked and
//! unit-tested by `promtool`, and every metric they use is one settle emits.

use std::path::{Path, PathBuf};
use std::process::Command;

use tests::process::{Scratch, settle_binary, settle_command};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_owned()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repository().join(path)).expect(path)
}

/// `docker compose` (v2) or `docker-compose` (v1), whichever answers.
fn compose() -> Command {
    let v2 = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if v2 {
        let mut command = Command::new("docker");
        command.arg("compose");
        return command;
    }
    let v1 = Command::new("docker-compose")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        v1,
        "Docker Compose is needed to validate deploy/compose.yaml (.ci/run installs docker-compose)"
    );
    Command::new("docker-compose")
}

/// The `SETTLE_*` names set in a file (`NAME: value`, `NAME=value`, `ENV NAME=value`).
fn settle_variables(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("SETTLE_"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What the compose file needs from the environment: every password and the webhook secret.
const COMPOSE_VARIABLES: [&str; 6] = [
    "POSTGRES_PASSWORD",
    "OWNER_DB_PASSWORD",
    "INGRESS_DB_PASSWORD",
    "WORKER_DB_PASSWORD",
    "CONSOLE_DB_PASSWORD",
    "STD_WEBHOOK_SECRETS",
];

/// `compose config -q` with every variable of [`COMPOSE_VARIABLES`] but `missing` set.
fn compose_config(missing: Option<&str>) -> std::process::Output {
    let mut command = compose();
    command
        .arg("-f")
        .arg(repository().join("deploy/compose.yaml"))
        .args(["config", "-q"]);
    for name in COMPOSE_VARIABLES {
        match Some(name) == missing {
            true => command.env_remove(name),
            false => command.env(name, "a-value-for-the-test"),
        };
    }
    command.output().expect("compose config")
}

#[test]
fn the_compose_file_is_valid_and_needs_every_password_and_the_webhook_secret() {
    let output = compose_config(None);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for name in COMPOSE_VARIABLES {
        let output = compose_config(Some(name));
        assert!(!output.status.success(), "{name} is required");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(name),
            "{name}"
        );
    }

    let text = read("deploy/compose.yaml");
    for role in [
        "[\"db\", \"grant-roles\"]",
        "[\"ingress\"]",
        "[\"worker\"]",
        "[\"console\"]",
    ] {
        assert!(text.contains(role), "compose runs {role}");
    }
    assert!(text.contains("replicas: 2") && text.contains("ingress-2"));
    assert!(
        !text.contains(":-"),
        "no default for any variable (a password)"
    );
    // Each process connects as its runtime role's login; the owner only migrates and grants.
    for (service, login) in [
        ("migrate", "settle_owner"),
        ("ingress-1", "settle_ingress_login"),
        ("worker", "settle_worker_login"),
        ("console", "settle_console_login"),
    ] {
        let block = text
            .split(&format!("\n  {service}:\n"))
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .unwrap_or_else(|| panic!("service {service}"));
        assert!(
            block.contains(&format!("postgres://{login}:")),
            "{service}: {block}"
        );
        assert_eq!(
            block.contains("STD_WEBHOOK_SECRETS"),
            service.starts_with("ingress"),
            "only the ingress reads the webhook secrets: {service}"
        );
    }
    let roles = read("deploy/postgres-roles.sh");
    for role in tests::db::RUNTIME_ROLES {
        assert!(
            roles.contains(&format!("CREATE ROLE {role} NOLOGIN")),
            "{role}"
        );
    }
    assert!(
        roles
            .lines()
            .filter(|line| line.starts_with("CREATE ROLE"))
            .all(|line| !line.contains("SUPERUSER") && !line.contains("CREATEROLE")),
        "no role made is a superuser or makes roles"
    );
}

#[tokio::test]
async fn the_fleet_configuration_and_every_settle_variable_of_the_deployment_files_check() {
    let mut variables = Vec::new();
    for file in [
        "deploy/compose.yaml",
        "Dockerfile",
        "deploy/settle.service",
        "deploy/settle@.service",
    ] {
        variables.extend(settle_variables(&read(file)));
    }
    variables.sort();
    variables.dedup();
    assert!(variables.contains(&"SETTLE_MIGRATE_ON_START".to_owned()));
    let mut command = settle_command();
    command
        .arg("config")
        .arg("check")
        .env("SETTLE_CONFIG", repository().join("deploy/settle.toml"))
        .env("DATABASE_URL", "postgres://settle:pw@postgres:5432/settle")
        .env(
            "STD_WEBHOOK_SECRETS",
            "whsec_hp09L9NNueRHag3OnXaH+c0BE/vNuSrr",
        );
    for name in &variables {
        if name != "SETTLE_CONFIG" {
            // Values of the right type for each: every one the files set is a flag, a format,
            // an address or a file.
            let value = match name.as_str() {
                "SETTLE_MIGRATE_ON_START" => "false",
                "SETTLE_LOG__FORMAT" => "json",
                "SETTLE_LISTEN" => "0.0.0.0:8080",
                "SETTLE_OPS_LISTEN" => "0.0.0.0:9090",
                other => panic!("{other}: give the test a value for it"),
            };
            command.env(name, value);
        }
    }
    let output = command.output().await.expect("settle config check");
    assert!(
        output.status.success(),
        "{variables:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let resolved = String::from_utf8_lossy(&output.stdout);
    assert!(resolved.contains("name = \"std\"") && resolved.contains("migrate_on_start = false"));
}

#[test]
fn the_systemd_units_verify() {
    for (file, installed) in [
        ("deploy/settle.service", "settle.service"),
        ("deploy/settle@.service", "settle@worker.service"),
    ] {
        systemd_unit_verifies(file, installed);
    }
    let template = read("deploy/settle@.service");
    assert!(template.contains("ExecStart=/usr/local/bin/settle %i"));
    assert!(template.contains("EnvironmentFile=/etc/settle/%i.env"));
    assert!(
        !template.contains("settle migrate"),
        "a runtime role does not migrate"
    );
}

fn systemd_unit_verifies(file: &str, installed: &str) {
    let scratch = Scratch::new();
    // The unit as installed, with the binary where this build put it.
    let unit = read(file).replace(
        "/usr/local/bin/settle",
        settle_binary().to_str().expect("path"),
    );
    let path = scratch.write(installed, &unit);
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (.ci/run installs systemd when missing)");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert!(
        said.trim().is_empty(),
        "systemd-analyze found something to say: {said}"
    );
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=",
        "SystemCallFilter=@system-service",
        "User=settle",
    ] {
        assert!(unit.contains(hardening), "{hardening}");
    }
}

#[test]
fn the_image_runs_as_a_user_and_checks_its_health_without_a_shell() {
    let dockerfile = read("Dockerfile");
    let stages = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .count();
    assert_eq!(stages, 2, "a build stage and a small runtime stage");
    assert!(dockerfile.contains("CMD [\"/usr/local/bin/settle\", \"healthcheck\"]"));
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    assert!(
        !user.starts_with("root") && !user.starts_with('0'),
        "{user}"
    );
}

#[test]
fn the_alert_rules_check_pass_their_unit_tests_and_use_only_metrics_settle_emits() {
    let dir = repository().join("deploy/prometheus");
    for args in [
        &["check", "rules", "settle.rules.yml"][..],
        &["test", "rules", "settle.rules.test.yml"][..],
    ] {
        let output = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool is installed (.ci/run installs prometheus)");
        assert!(
            output.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Every metric a rule reads is named in settle's sources (a rename breaks this, not the
    // alert, silently).
    let rules = read("deploy/prometheus/settle.rules.yml");
    let mut sources = String::new();
    for crate_dir in [
        "ingress/src",
        "workers/src",
        "ledger/src",
        "ops/src",
        "providers/src",
    ] {
        for entry in walk(&repository().join(crate_dir)) {
            sources.push_str(&std::fs::read_to_string(entry).unwrap_or_default());
        }
    }
    let metrics: std::collections::BTreeSet<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("settle_"))
        .collect();
    assert!(metrics.len() >= 8, "{metrics:?}");
    for metric in metrics {
        assert!(
            sources.contains(&format!("\"{metric}\"")),
            "{metric} is used by an alert but emitted nowhere"
        );
    }
}

/// Every `.rs` file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}
