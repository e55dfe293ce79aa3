//! The shape of the code, held by tests (ARCHITECTURE.md, "Dependency rule" and "Adding a
//! provider"): `ledger`'s modules depend on each other without a cycle; a provider lives in its
//! module of `providers` and nowhere else but the registration line; every provider module is
//! registered and its keys are documented; no provider reaches into the store; every file and
//! code path ARCHITECTURE.md and README.md name exists.

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

/// The workspace's crates: a Rust path in the documents that starts with one of them is
/// resolved in its sources.
const CRATES: [&str; 6] = ["ledger", "ingress", "ops", "providers", "workers", "tests"];

/// Every `.rs` file of the workspace's crates (sources, tests, benches, examples), with its text.
fn workspace_sources() -> Vec<(PathBuf, String)> {
    CRATES
        .iter()
        .flat_map(|krate| rust_files(&root().join(krate)))
        .map(|path| {
            let text = read(&path);
            (path, text)
        })
        .collect()
}

/// Whether `word` occurs in `text` as a whole identifier.
fn names(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(ident)
            && !text[at + word.len()..].chars().next().is_some_and(ident)
    })
}

/// Whether some source defines `name` (a function, type, trait, constant, static, module or
/// macro).
fn defined(sources: &[(PathBuf, String)], name: &str) -> bool {
    let kinds = [
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "type ",
        "const ",
        "static ",
        "mod ",
        "macro_rules! ",
    ];
    sources.iter().any(|(_, text)| {
        kinds.iter().any(|kind| {
            text.match_indices(&format!("{kind}{name}")).any(|(at, _)| {
                let after = &text[at + kind.len() + name.len()..];
                !after
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
    })
}

/// The module file `segments` lead to from the module directory `dir` (its `lib.rs` or
/// `main.rs` first), as far as they name modules, and the segments left.
fn module_of<'a>(dir: &Path, segments: &'a [&'a str]) -> Option<(PathBuf, PathBuf, &'a [&'a str])> {
    let mut file = ["lib.rs", "main.rs"]
        .iter()
        .map(|root| dir.join(root))
        .find(|path| path.exists());
    let mut dir = dir.to_owned();
    let mut rest = segments;
    while let Some((first, more)) = rest.split_first() {
        let Some(next) = [
            dir.join(format!("{first}.rs")),
            dir.join(first).join("mod.rs"),
        ]
        .into_iter()
        .find(|path| path.exists()) else {
            break;
        };
        file = Some(next);
        dir = dir.join(first);
        rest = more;
    }
    Some((file?, dir, rest))
}

/// Whether the module file `file` (or a file of its directory `dir`) names `item`.
fn module_names(file: &Path, dir: &Path, item: &str) -> bool {
    let siblings = match dir.is_dir() {
        true => rust_files(dir),
        false => Vec::new(),
    };
    std::iter::once(file.to_owned())
        .chain(siblings)
        .any(|path| names(&read(&path), item))
}

/// Every directory of the workspace's crates that may hold a module.
fn module_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for krate in CRATES {
        let mut stack = vec![root().join(krate)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("a directory") {
                let path = entry.expect("an entry").path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if path.is_dir() && name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            }
            dirs.push(dir);
        }
    }
    dirs
}

/// What is wrong with the Rust path `path` (`a::b::c`), if it names something: a workspace
/// crate's path must lead through its modules to one whose file names what is left; a module
/// path (its first segment a module of some crate) likewise from some directory holding that
/// module; `Type::item` needs the type defined and the item defined (or, capitalized, a variant
/// named). A path of another crate (a dependency) is not checked.
fn rust_path_problem(
    path: &str,
    sources: &[(PathBuf, String)],
    dirs: &[PathBuf],
) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    let first = segments[0];
    if ["crate", "self", "super"].contains(&first) {
        return None;
    }
    if first.starts_with(|c: char| c.is_uppercase()) {
        let item = segments[1];
        let known = match item.starts_with(|c: char| c.is_uppercase()) {
            true => sources.iter().any(|(_, text)| names(text, item)),
            false => defined(sources, item),
        };
        return match (defined(sources, first), known) {
            (false, _) => Some(format!("`{path}`: no type {first}")),
            (true, false) => Some(format!("`{path}`: {item} is defined nowhere")),
            (true, true) => None,
        };
    }
    let starts: Vec<(PathBuf, &[&str])> = match CRATES.contains(&first) {
        true => vec![(root().join(first).join("src"), &segments[1..])],
        false => dirs
            .iter()
            .filter(|dir| {
                dir.join(format!("{first}.rs")).exists() || dir.join(first).join("mod.rs").exists()
            })
            .map(|dir| (dir.clone(), &segments[..]))
            .collect(),
    };
    if starts.is_empty() {
        return None;
    }
    let found = starts.iter().any(|(dir, segments)| {
        module_of(dir, segments).is_some_and(|(file, dir, rest)| {
            rest.first()
                .is_none_or(|item| module_names(&file, &dir, item))
        })
    });
    (!found).then(|| format!("`{path}`: not found in the workspace's modules"))
}

/// What is wrong with the file path `path`, if its first part is a file or directory of the
/// repository: it must exist up to its first placeholder (`<name>`, `{a,b}`, `*`).
fn file_path_problem(path: &str) -> Option<String> {
    let first = path.split('/').next().unwrap_or_default();
    if first.is_empty() || first == "." || !root().join(first).exists() {
        return None;
    }
    let fixed = path
        .split(['<', '{', '*'])
        .next()
        .unwrap_or_default()
        .trim_end_matches('/');
    (!root().join(fixed).exists()).then(|| format!("`{path}`: no such file or directory"))
}

/// The text between each pair of backticks on a line of `text`.
fn quoted(text: &str) -> BTreeSet<&str> {
    text.lines()
        .flat_map(|line| line.split('`').skip(1).step_by(2))
        .map(str::trim)
        .collect()
}

#[test]
fn every_path_the_documents_name_exists() {
    let sources = workspace_sources();
    let dirs = module_dirs();
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    let mut problems = Vec::new();
    let mut checked = 0;
    for document in ["ARCHITECTURE.md", "README.md"] {
        let text = read(&root().join(document));
        for quote in quoted(&text) {
            let quote = quote.split_once('(').map_or(quote, |(name, _)| name);
            let problem = if quote.contains("::") && quote.split("::").all(ident) {
                checked += 1;
                rust_path_problem(quote, &sources, &dirs)
            } else if quote.contains('/') && !quote.contains(char::is_whitespace) {
                checked += 1;
                file_path_problem(quote)
            } else {
                None
            };
            problems.extend(problem.map(|p| format!("{document}: {p}")));
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths were read from the documents"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
