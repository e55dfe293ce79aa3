//! Configuration errors that name the key and, for a file, its line; URLs with their password
//! redacted for printing.

use std::path::Path;

use figment::error::Kind;
use serde::Serializer;

/// One sentence per error of `error`: where (the file and line, or the variable), which key,
/// and what is wrong, with the closest known key for an unknown one.
pub fn explain(error: figment::Error, file: Option<(&Path, &str)>) -> anyhow::Error {
    let document = file.and_then(|(_, text)| toml_edit::ImDocument::parse(text).ok());
    let sentences: Vec<String> = error
        .into_iter()
        .map(|error| {
            let mut path = error.path.clone();
            if let Kind::UnknownField(field, _) = &error.kind
                && path.last() != Some(field)
            {
                path.push(field.clone());
            }
            let key = path.join(".");
            let source = error.metadata.as_ref().and_then(|m| m.source.as_ref());
            let from_file = source
                .and_then(|source| source.file_path())
                .zip(file)
                .filter(|(path, (file, _))| same_file(path, file));
            let place = match (from_file, &document) {
                (Some((_, (file, text))), Some(document)) => match line_of(document, text, &path) {
                    Some(line) => format!("{} line {line}: ", file.display()),
                    None => format!("{}: ", file.display()),
                },
                _ => match &error.metadata {
                    Some(metadata) if metadata.name.contains("environment") => {
                        let prefixed = metadata.name.contains("SETTLE_");
                        format!("environment variable {}: ", env_name(&path, prefixed))
                    }
                    Some(metadata) => format!("{}: ", metadata.name),
                    None => String::new(),
                },
            };
            let what = match &error.kind {
                Kind::UnknownField(field, expected) => {
                    let mut what = format!("unknown key `{key}`");
                    if let Some(close) = closest(field, expected.iter().copied()) {
                        what.push_str(&format!(" (did you mean `{close}`?)"));
                    } else if !expected.is_empty() {
                        what.push_str(&format!(" (expected one of: {})", expected.join(", ")));
                    }
                    what
                }
                kind if key.is_empty() => without_value(kind),
                kind => format!("`{key}`: {}", without_value(kind)),
            };
            format!("{place}{what}")
        })
        .collect();
    anyhow::anyhow!("invalid configuration: {}", sentences.join("; "))
}

/// What is wrong, never the value given: a key may hold a secret (a signing secret given where
/// a list was expected, a password in a URL of the wrong type), and errors are printed and logged.
fn without_value(kind: &Kind) -> String {
    match kind {
        Kind::InvalidType(actual, expected) => {
            format!("expected {expected}, found {}", what(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!("invalid {}: expected {expected}", what(actual))
        }
        Kind::UnknownVariant(_, expected) => {
            format!("unknown value (expected one of: {})", expected.join(", "))
        }
        Kind::Unsupported(actual) => format!("unsupported {}", what(actual)),
        Kind::UnsupportedKey(actual, _) => format!("unsupported key of type {}", what(actual)),
        kind => kind.to_string(),
    }
}

/// The kind of a value given, without the value.
fn what(actual: &figment::error::Actual) -> &'static str {
    use figment::error::Actual;
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
        Actual::Float(_) => "a float",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Bytes(_) => "bytes",
        Actual::Unit | Actual::Option => "nothing",
        Actual::Seq => "a list",
        Actual::Map | Actual::NewtypeStruct | Actual::StructVariant => "a table",
        Actual::Enum
        | Actual::UnitVariant
        | Actual::NewtypeVariant
        | Actual::TupleVariant
        | Actual::Other(_) => "a value",
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (a.canonicalize(), b.canonicalize()),
            (Ok(a), Ok(b)) if a == b
        )
}

/// The variable a key came from: `SETTLE_` and its path, or (`DATABASE_URL`,
/// `WORKER_DATABASE_URL`) its own name.
fn env_name(path: &[String], prefixed: bool) -> String {
    match prefixed {
        true => format!("SETTLE_{}", path.join("__").to_uppercase()),
        false => path.join("__").to_uppercase(),
    }
}

/// The candidate most like `field`, if one is close enough to be a likely misspelling.
pub(super) fn closest<'a>(
    field: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(field, candidate), candidate))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate.to_owned())
}

/// A validation error with where it is, when it is about a source's key in the file: the file
/// and the key's line (the source table's, for a key it does not set).
pub fn locate(error: anyhow::Error, file: Option<(&Path, &str)>) -> anyhow::Error {
    let Some(refused) = error.downcast_ref::<super::SourceConfigError>() else {
        return error;
    };
    let place = match file {
        None => String::new(),
        Some((path, text)) => {
            let line = toml_edit::ImDocument::parse(text)
                .ok()
                .and_then(|document| {
                    let table = ["sources".to_owned(), refused.index.to_string()];
                    let key = refused.key.iter().cloned();
                    let path: Vec<String> = table.iter().cloned().chain(key).collect();
                    line_of(&document, text, &path).or_else(|| line_of(&document, text, &table))
                });
            match line {
                Some(line) => format!("{} line {line}: ", path.display()),
                None => format!("{}: ", path.display()),
            }
        }
    };
    anyhow::anyhow!("invalid configuration: {place}{refused}")
}

/// The 1-based line of the key at `path` in a parsed TOML document (a table of an array of
/// tables by its index).
fn line_of(document: &toml_edit::ImDocument<&str>, text: &str, path: &[String]) -> Option<usize> {
    let mut table: &dyn toml_edit::TableLike = document.as_table();
    let mut span = None;
    let mut segments = path.iter();
    while let Some(segment) = segments.next() {
        let (key, item) = table.get_key_value(segment)?;
        span = key.span().or(item.span()).or(span);
        match item {
            toml_edit::Item::ArrayOfTables(tables) => {
                let Some(index) = segments.next() else { break };
                let element = tables.get(index.parse().ok()?)?;
                span = element.span().or(span);
                table = element;
            }
            item => match item.as_table_like() {
                Some(next) => table = next,
                None => break,
            },
        }
    }
    let start = span?.start;
    Some(text.get(..start)?.matches('\n').count() + 1)
}

/// Serializes a database URL with its password (in the user part or a `password=` parameter)
/// replaced by `<redacted>`.
pub fn serialize_redacted_url<S: Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redact_url(url))
}

pub fn serialize_redacted_url_option<S: Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_some(&redact_url(url)),
        None => serializer.serialize_none(),
    }
}

pub fn redact_url(url: &str) -> String {
    let mut redacted = url.to_owned();
    // The password runs from the user's `:` to the last `@`: a host holds no `@`, and a password
    // that is not percent-encoded may hold `/`, `?` or `@`.
    if let Some(scheme_end) = url.find("://") {
        let start = scheme_end + 3;
        let rest = &url[start..];
        if let Some(at) = rest.rfind('@')
            && let Some(colon) = rest[..at].find(':')
        {
            redacted.replace_range(start + colon + 1..start + at, "<redacted>");
        }
    }
    if let Some(query) = redacted.find('?') {
        let (base, params) = redacted.split_at(query + 1);
        let params: Vec<String> = params
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if name.to_ascii_lowercase().ends_with("password") => {
                    format!("{name}=<redacted>")
                }
                _ => param.to_owned(),
            })
            .collect();
        redacted = format!("{base}{}", params.join("&"));
    }
    redacted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls() {
        for (url, shown) in [
            (
                "postgres://settle:s3cret@db:5432/settle",
                "postgres://settle:<redacted>@db:5432/settle",
            ),
            (
                "postgres://db/settle?user=settle&password=s3cret&sslmode=require",
                "postgres://db/settle?user=settle&password=<redacted>&sslmode=require",
            ),
            ("postgres://settle@db/settle", "postgres://settle@db/settle"),
            (
                "postgres://settle:ab/c?d@e@db/settle?sslpassword=x",
                "postgres://settle:<redacted>@db/settle?sslpassword=<redacted>",
            ),
            (
                "postgres://[::1]:5432/settle",
                "postgres://[::1]:5432/settle",
            ),
            ("sqlite://settle.db", "sqlite://settle.db"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }
}
