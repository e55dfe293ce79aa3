use super::*;
use ledger::SourceName;

/// Loaded and every source's receiving half built (its secrets read), as `config check`
/// and the roles that verify webhooks do.
fn checked(text: &str) -> anyhow::Result<Config> {
    let config = Config::from_toml(text)?;
    config.sources()?;
    Ok(config)
}

#[test]
fn a_minimal_file_gets_defaults() {
    let config = Config::from_toml(
        r#"
        [[sources]]
        name = "std"
        provider = "standard"
        secrets = ["whsec_hp09L9NNueRHag3OnXaH+c0BE/vNuSrr"]
        "#,
    )
    .expect("config");
    assert_eq!(config.listen.port(), 8080);
    assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
    assert_eq!(config.body_bytes_max, 256 * 1024);
    assert_eq!(config.sources[0].tolerance_secs, 300);
    assert!(!format!("{config:?}").contains("hp09L9NN"));
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    for (text, reason) in [
        (
            "lisen = \"x\"",
            "unknown key `lisen` (did you mean `listen`?)",
        ),
        (
            "[[sources]]\nname = \"Bad Name\"\nprovider = \"standard\"",
            "source name",
        ),
        (
            "[[sources]]\nname = \"s\"\nprovider = \"standard\"",
            "at least one secret",
        ),
        ("database_url = \"mysql://x\"", "database URL"),
        (
            "[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_hp09L9NNueRHag3OnXaH+c0BE/vNuSrr\"]\ntolerance_sec = 5",
            "unknown key: not a setting of a source (did you mean `tolerance_secs`?)",
        ),
        (
            "[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_hp09L9NNueRHag3OnXaH+c0BE/vNuSrr\"]\nexpect_delivery_within_secs = 0",
            "`sources.0.expect_delivery_within_secs`: expect_delivery_within_secs must be positive",
        ),
        (
            "[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_hp09L9NNueRHag3OnXaH+c0BE/vNuSrr\"]\n[sources.accounts]\nreceivables = \"assets:receivable\"",
            "`sources.0.accounts.receivables`: accounts.receivables must begin with `receivables:`",
        ),
    ] {
        let error = format!("{:#}", checked(text).expect_err(text));
        assert!(error.contains(reason), "{text}: {error}");
    }
}

/// An unknown provider is refused with the list of those settle knows.
#[test]
fn an_unknown_provider_is_refused_with_the_known_ones() {
    let error = Config::from_toml("[[sources]]\nname = \"s\"\nprovider = \"paypal\"")
        .expect_err("unknown provider");
    let error = format!("{error:#}");
    assert!(
        error.contains("source s, `sources.0.provider`: unknown provider \"paypal\""),
        "{error}"
    );
    for name in providers::names() {
        assert!(error.contains(name), "{error}");
    }
}

/// A key of one provider set on a source of another names the provider it belongs to.
#[test]
fn another_providers_key_says_whose_it_is() {
    let owner = providers::PROVIDERS
        .iter()
        .find(|p| !p.keys().is_empty())
        .expect("a provider with keys of its own");
    let key = owner.keys()[0].name;
    let text = format!(
        "[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_hp09L9NNueRHag3OnXaH+c0BE/vNuSrr\"]\n{key} = 1"
    );
    let error = format!("{:#}", Config::from_toml(&text).expect_err(&text));
    assert!(
        error.contains(&format!(
            "`sources.0.{key}`: unknown key: a setting of provider = \"{}\" sources only",
            owner.name()
        )),
        "{error}"
    );
}

/// A published example secret and a short one are refused at load, and no error prints the
/// value of a key given with the wrong type (it may be a secret).
#[test]
fn weak_secrets_are_refused_and_no_error_prints_a_value() {
    let source = |secrets: &str| {
        format!("[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = {secrets}\n")
    };
    for (secrets, why) in [
        (
            "[\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]",
            "a published example secret",
        ),
        ("[\"whsec_c2hvcnQ=\"]", "shorter than 16 bytes"),
    ] {
        let error = format!("{:#}", checked(&source(secrets)).expect_err(secrets));
        assert!(error.contains(why), "{error}");
        assert!(!error.contains("whsec_"), "{error}");
    }
    for text in [
        source("\"whsec_aGlkZGVuIHNlY3JldCBvZiB0aGUgdGVzdA==\""),
        "database_url = 7\n[[tokens]]\nname = \"n\"\nrole = \"whsec_aGlkZGVuIHNlY3JldCBvZiB0aGUgdGVzdA==\"\ntoken_sha256 = \"\"\n".into(),
    ] {
        let error = format!("{:#}", checked(&text).expect_err("a wrong type"));
        assert!(!error.contains("aGlkZGVu"), "{error}");
        assert!(error.contains("expected"), "{error}");
    }
}

/// The webhook secrets are read only when the receiving half is built: a configuration
/// whose secrets' variable is not set loads, resolves and gives its notes; its sources do
/// not build.
#[test]
fn webhook_secrets_are_read_only_for_the_receiving_half() {
    let text = "[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets_env = \"SETTLE_TEST_NOT_SET_ANYWHERE\"\n";
    let config = Config::from_toml(text).expect("loads without the secrets");
    config
        .resolvers()
        .expect("resolvers need no webhook secret");
    config.source_notes().expect("notes need no webhook secret");
    let error = format!(
        "{:#}",
        config.sources().expect_err("the receiver needs them")
    );
    assert!(error.contains("SETTLE_TEST_NOT_SET_ANYWHERE"), "{error}");
}

/// A source's key error names the file's line of the key.
#[test]
fn a_source_error_names_its_line() {
    let text = "listen = \"127.0.0.1:1\"\n\n[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_!!!\"]\n";
    let error = checked(text).expect_err("a bad secret");
    let located = errors::locate(
        anyhow::anyhow!(SourceConfigError {
            index: 0,
            source_name: SourceName::parse("s").expect("name"),
            key: Some("secrets".into()),
            message: "m".into(),
        }),
        Some((Path::new("settle.toml"), text)),
    );
    assert!(format!("{error:#}").contains("secret #0 is not a valid standard secret"));
    assert_eq!(
        located.to_string(),
        "invalid configuration: settle.toml line 6: source s, `sources.0.secrets`: m"
    );
}
