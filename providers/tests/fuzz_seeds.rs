//! The fuzz targets' seed corpus (`fuzz/seeds/<target>/`), run through the same checks the
//! fuzzer runs (`providers::fuzzing`, each provider's targets), on stable, in every test run.

use std::path::Path;

#[test]
fn every_seed_passes_its_fuzz_target() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let mut targets = 0;
    for target in providers::fuzzing::targets() {
        targets += 1;
        let dir = seeds.join(target.name);
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("seed entry").path();
            let data = std::fs::read(&path).expect("seed file");
            assert!(
                providers::fuzzing::run(target.name, &data),
                "unknown target {}",
                target.name
            );
            count += 1;
        }
        assert!(
            count >= 3,
            "{} has {count} seeds; keep at least three",
            target.name
        );
    }
    assert!(targets >= 6, "{targets} targets");
}

#[test]
fn every_target_has_a_fuzz_target_file_and_every_file_a_target() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/fuzz_targets");
    for target in providers::fuzzing::targets() {
        let file = dir.join(format!("{}.rs", target.name));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains(&format!("providers::fuzzing::run(\"{}\"", target.name)),
            "{} runs providers::fuzzing::run(\"{}\", ..)",
            file.display(),
            target.name
        );
    }
    for entry in std::fs::read_dir(&dir).expect("fuzz targets") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        assert!(
            providers::fuzzing::targets().any(|t| t.name == name),
            "{} is no provider's fuzz target",
            path.display()
        );
    }
    assert!(!providers::fuzzing::run("no_such_target", b""));
}
