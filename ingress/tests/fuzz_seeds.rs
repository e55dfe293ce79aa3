//! The fuzz targets' seed corpus (`fuzz/seeds/<target>/`), run through the same checks the
//! fuzzer runs (`ingress::fuzzing`), on stable, in every test run.

use std::path::Path;

#[test]
fn every_seed_passes_its_fuzz_target() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    for target in ingress::fuzzing::TARGETS {
        let dir = seeds.join(target);
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("seed entry").path();
            let data = std::fs::read(&path).expect("seed file");
            assert!(
                ingress::fuzzing::run(target, &data),
                "unknown target {target}"
            );
            count += 1;
        }
        assert!(
            count >= 3,
            "{target} has {count} seeds; keep at least three"
        );
    }
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    let targets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/fuzz_targets");
    for target in ingress::fuzzing::TARGETS {
        let file = targets.join(format!("{target}.rs"));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains(&format!("ingress::fuzzing::{target}(")),
            "{} runs ingress::fuzzing::{target}",
            file.display()
        );
    }
    assert!(!ingress::fuzzing::run("no_such_target", b""));
}
