//! The shape of the code, held by tests (ARCHITECTURE.md, "Dependency rule" and "Adding a
//! provider"): `ledger`'s modules depend on each other without a cycle; a provider lives in its
//! module of `providers` and nowhere else but the registration line; every provider module is
//! registered and its keys are documented; no provider reaches into the store.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace root")
}

/// Every `.rs` file under `dir`, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A file's code: its lines before its tests, without comment lines.
fn code(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect()
}

/// The identifiers after each `crate::` in `line` (`crate::a::b` gives `a`).
fn crate_paths(line: &str) -> Vec<&str> {
    line.match_indices("crate::")
        .map(|(at, _)| {
            let rest = &line[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// `ledger`'s top-level modules, each with the modules its code names (directly, or through a
/// name the crate root re-exports from one).
fn ledger_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = root().join("ledger/src");
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("ledger/src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a name")
            .to_owned();
        if path.is_dir() {
            modules.insert(name, rust_files(&path));
        } else if name != "lib" {
            modules.entry(name).or_default().push(path);
        }
    }
    // `pub use module::{A, B};` in lib.rs: `crate::A` is a use of `module`.
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for line in read(&src.join("lib.rs")).lines() {
        let Some(rest) = line.strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = rest.trim_end_matches(';').split_once("::") else {
            continue;
        };
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            reexported.insert(name.trim().to_owned(), module.to_owned());
        }
    }
    modules
        .iter()
        .map(|(name, files)| {
            let deps: BTreeSet<String> = files
                .iter()
                .flat_map(|file| {
                    let text = read(file);
                    code(&text)
                        .into_iter()
                        .flat_map(crate_paths)
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .filter_map(|used| match modules.contains_key(&used) {
                    true => Some(used),
                    false => reexported.get(&used).cloned(),
                })
                .filter(|used| used != name)
                .collect();
            (name.clone(), deps)
        })
        .collect()
}

/// A cycle of the graph, if it has one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn ledgers_modules_form_no_cycle() {
    let graph = ledger_graph();
    assert!(graph.len() >= 15, "{graph:?}");
    assert_eq!(cycle(&graph), None, "{graph:#?}");
    // The modules providers build on reach none of recording, the job or the store.
    for module in ["trigger", "movement", "resolved", "posting", "post_error"] {
        let mut reached = BTreeSet::new();
        let mut next = vec![module.to_owned()];
        while let Some(at) = next.pop() {
            for dep in graph.get(&at).into_iter().flatten() {
                if reached.insert(dep.clone()) {
                    next.push(dep.clone());
                }
            }
        }
        for not in ["record", "job", "store"] {
            assert!(
                !reached.contains(not),
                "{module} reaches {not}: {reached:?}"
            );
        }
    }
    // The check finds one where there is one.
    let mut looped = graph.clone();
    looped
        .get_mut("money")
        .expect("money")
        .insert("store".to_owned());
    assert!(cycle(&looped).is_some());
}

/// The provider module folders of `providers/src`.
fn provider_folders() -> BTreeSet<String> {
    std::fs::read_dir(root().join("providers/src"))
        .expect("providers/src")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.is_dir())
        .map(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .expect("a name")
                .to_owned()
        })
        .collect()
}

#[test]
fn every_provider_module_is_registered_and_every_registered_provider_has_its_module() {
    let registered: BTreeSet<String> = providers::names().into_iter().map(str::to_owned).collect();
    assert_eq!(provider_folders(), registered);
    assert!(registered.len() >= 3);
}

/// Outside a provider's own module (and the tests, fixtures, fuzz targets and documents that are
/// about it), no line of settle names a provider, but the registration list.
#[test]
fn provider_names_appear_only_in_their_modules_and_the_registration_line() {
    let root = root();
    let folders = provider_folders();
    let names: Vec<String> = providers::names()
        .into_iter()
        .filter(|name| *name != "standard")
        .map(str::to_owned)
        .collect();
    let mut files = Vec::new();
    for krate in ["ledger", "ingress", "workers", "ops", "providers"] {
        files.extend(rust_files(&root.join(krate).join("src")));
        files.push(root.join(krate).join("Cargo.toml"));
    }
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&root).expect("inside the workspace");
        let in_module = folders
            .iter()
            .any(|folder| relative.starts_with(Path::new("providers/src").join(folder)));
        if in_module {
            continue;
        }
        for (number, line) in read(&file).lines().enumerate() {
            let lower = line.to_lowercase();
            if names.iter().any(|name| lower.contains(name.as_str())) {
                found.push(format!("{}:{}: {line}", relative.display(), number + 1));
            }
        }
    }
    let registration: Vec<&String> = found
        .iter()
        .filter(|line| line.starts_with("providers/src/lib.rs:") && line.contains("register!["))
        .collect();
    assert_eq!(registration.len(), 1, "one registration line: {found:#?}");
    assert_eq!(
        found.len(),
        1,
        "provider names outside their modules: {found:#?}"
    );
}

/// A provider answers values; it never opens, reads or writes the store.
#[test]
fn no_provider_reaches_into_the_store() {
    for file in rust_files(&root().join("providers/src")) {
        let text = read(&file);
        for line in code(&text) {
            assert!(
                !line.contains("ledger::store") && !line.contains("Store"),
                "{}: {line}",
                file.display()
            );
        }
    }
}

/// Every key a provider reads is documented in README.md, and settle.example.toml shows a
/// source of every provider.
#[test]
fn every_providers_keys_are_documented() {
    let readme = read(&root().join("README.md"));
    let example = read(&root().join("settle.example.toml"));
    for provider in providers::PROVIDERS {
        let section = format!("### `{}`", provider.name());
        assert!(readme.contains(&section), "README.md has no {section}");
        for key in provider.keys() {
            assert!(
                readme.contains(&format!("{} =", key.name))
                    || readme.contains(&format!("`{}`", key.name)),
                "README.md does not document {}'s key {}",
                provider.name(),
                key.name
            );
        }
        assert!(
            example.contains(&format!("provider = \"{}\"", provider.name())),
            "settle.example.toml shows no {} source",
            provider.name()
        );
    }
}

/// ARCHITECTURE.md's walk-through for a new provider names the files the tests above hold it to.
#[test]
fn the_walk_through_for_a_new_provider_names_its_files() {
    let architecture = read(&root().join("ARCHITECTURE.md"));
    let start = architecture
        .find("#### Adding a provider")
        .expect("ARCHITECTURE.md, Adding a provider");
    let section = &architecture[start..];
    let section = &section[..section[4..]
        .find("\n#")
        .map_or(section.len(), |end| end + 4)];
    for named in [
        "providers/src/<name>/",
        "register![",
        "fixtures/<name>/",
        "tests/tests/suite/<name>.rs",
        "README.md",
        "settle.example.toml",
        "fuzz/",
    ] {
        assert!(
            section.contains(named),
            "the walk-through does not name {named}"
        );
    }
}
