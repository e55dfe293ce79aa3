use super::store::sqlite_file;
use super::*;

#[test]
fn a_new_token_is_printed_once_beside_only_its_hash() {
    let printed = new_token(TokenRole::Finance, "fred").expect("token");
    let token = printed
        .split_whitespace()
        .find(|word| word.starts_with("stl_"))
        .expect("the token");
    assert!(token.len() > 40);
    let config = printed
        .split_once("[[tokens]]")
        .map(|(_, lines)| format!("[[tokens]]{lines}"))
        .expect("configuration lines");
    assert!(!config.contains(token), "the configuration holds no token");
    #[derive(serde::Deserialize)]
    struct File {
        tokens: Vec<crate::auth::TokenConfig>,
    }
    let file: File = toml_from(&config);
    let tokens = crate::auth::Tokens::new(&file.tokens).expect("valid lines");
    let caller = tokens.caller(token).expect("the token opens");
    assert_eq!(
        (caller.name.as_str(), caller.role.as_str()),
        ("fred", "finance")
    );
    assert_ne!(
        new_token(TokenRole::Ops, "alice").expect("token"),
        new_token(TokenRole::Ops, "alice").expect("token"),
        "fresh every time"
    );
    assert!(new_token(TokenRole::Ops, "a\"b").is_err());
}

#[test]
fn every_command_and_flag_says_what_it_is_for_and_the_main_ones_show_an_example() {
    fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path}: {id}"));
            }
        }
        for sub in command.get_subcommands() {
            let name = sub.get_name();
            if name == "help" {
                continue;
            }
            if sub.get_about().is_none() {
                missing.push(format!("{path} {name}"));
            }
            walk(sub, &format!("{path} {name}"), missing);
        }
    }
    let command = Cli::command();
    command.clone().debug_assert();
    let mut missing = Vec::new();
    walk(&command, "settle", &mut missing);
    assert!(missing.is_empty(), "without help: {missing:?}");
    for name in [
        "serve",
        "ingress",
        "worker",
        "demo",
        "loadgen",
        "migrate",
        "dead-letters",
        "journal",
        "balances",
        "reconcile",
        "export",
        "verify",
        "healthcheck",
        "completions",
    ] {
        let sub = command.find_subcommand(name).expect(name);
        let example = sub.get_after_help().map(ToString::to_string);
        assert!(
            example.is_some_and(|text| text.contains(&format!("settle {name}"))
                || text.contains("settle\", \"healthcheck")),
            "{name} shows an example"
        );
    }
}

#[test]
fn sqlite_urls_name_their_file_as_sqlx_reads_them() {
    for (url, file) in [
        ("sqlite://settle.db", Some("settle.db")),
        ("sqlite:settle.db?mode=rwc", Some("settle.db")),
        (
            "sqlite:///var/lib/settle/settle.db",
            Some("/var/lib/settle/settle.db"),
        ),
        ("sqlite://my%20dir/x.db", Some("my dir/x.db")),
        ("sqlite::memory:", None),
        ("sqlite://x.db?mode=memory", None),
        ("postgres://db/settle", None),
    ] {
        assert_eq!(sqlite_file(url), file.map(PathBuf::from), "{url}");
    }
    assert_eq!(
        health_url("0.0.0.0:9000".parse().expect("addr")),
        "http://127.0.0.1:9000/healthz"
    );
    assert_eq!(
        health_url("[::]:9000".parse().expect("addr")),
        "http://[::1]:9000/healthz"
    );
}

fn toml_from<T: serde::de::DeserializeOwned>(text: &str) -> T {
    use figment::providers::Format;
    figment::Figment::from(figment::providers::Toml::string(text))
        .extract()
        .expect("toml")
}
