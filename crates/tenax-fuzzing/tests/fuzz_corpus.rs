//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the same
//! `tenax_fuzzing` functions the fuzz targets call, so that a change that makes any input
//! panic, or break an invariant those functions check, fails the ordinary test suite on stable.
//! See `fuzz/README.md`.

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// Every file of a target's corpus; fails when the directory is missing or empty, so a
/// replay that checks nothing cannot pass.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_dir(target);
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "cannot read the corpus of {target} at {}: {e}",
            dir.display()
        )
    });
    let mut files: Vec<PathBuf> = entries
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
                .path()
        })
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the corpus of {target} at {} is empty",
        dir.display()
    );
    files
        .into_iter()
        .map(|path| {
            let bytes =
                fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (path, bytes)
        })
        .collect()
}

fn replay(target: &str) {
    let (_, run) = tenax_fuzzing::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzzing function for {target}"));
    let inputs = inputs(target);
    let failed: Vec<String> = inputs
        .iter()
        .filter(|(_, bytes)| catch_unwind(AssertUnwindSafe(|| run(bytes))).is_err())
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} inputs of {target} fail (the panics are printed above):\n{}",
        failed.len(),
        inputs.len(),
        failed.join("\n")
    );
}

#[test]
fn policy_corpus() {
    replay("policy");
}

#[test]
fn duration_corpus() {
    replay("duration");
}

#[test]
fn native_body_corpus() {
    replay("native_body");
}

#[test]
fn zaqar_patch_corpus() {
    replay("zaqar_patch");
}

#[test]
fn zaqar_post_corpus() {
    replay("zaqar_post");
}

/// Every target the fuzz crate has is replayed here, and every replayed target has a corpus.
#[test]
fn every_target_is_replayed() {
    let names: Vec<&str> = tenax_fuzzing::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "policy",
            "duration",
            "native_body",
            "zaqar_patch",
            "zaqar_post"
        ]
    );
    let fuzz_targets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    for name in names {
        let source = fuzz_targets.join(format!("{name}.rs"));
        let text = fs::read_to_string(&source)
            .unwrap_or_else(|e| panic!("no fuzz target {}: {e}", source.display()));
        assert!(
            text.contains("tenax_fuzzing::"),
            "{} must call tenax_fuzzing",
            source.display()
        );
    }
}
