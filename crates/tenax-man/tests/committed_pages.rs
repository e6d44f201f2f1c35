//! The man pages committed in deploy/man/ are the ones the command line renders today: a flag,
//! a help text or a command changed without `cargo run -p tenax-man` fails here.

use std::path::PathBuf;

#[test]
fn committed_man_pages_match_the_command_line() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(tenax_man::MAN_DIR);
    let found = tenax_man::differences(&dir).expect("reading deploy/man");
    assert!(
        found.is_empty(),
        "deploy/man is out of date (run `cargo run -p tenax-man` and commit it):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_command_has_a_page_that_names_it() {
    let pages = tenax_man::render().expect("rendering");
    let names: Vec<&str> = pages.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "tenax.1",
        "tenax-serve.1",
        "tenax-jobs-list.1",
        "tenax-repair.1",
    ] {
        assert!(names.contains(&expected), "no {expected} among {names:?}");
    }
    let (_, serve) = pages
        .iter()
        .find(|(name, _)| name == "tenax-serve.1")
        .expect("serve page");
    let serve = String::from_utf8_lossy(serve);
    assert!(
        serve.contains("TENAX_DATA_DIR"),
        "tenax-serve.1 does not name TENAX_DATA_DIR"
    );
    assert!(
        serve.contains(".TH tenax-serve 1"),
        "title: {:?}",
        serve.lines().find(|l| l.starts_with(".TH"))
    );
}

#[test]
fn a_changed_page_and_a_stale_page_are_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    tenax_man::write(dir.path()).expect("writing");
    assert!(
        tenax_man::differences(dir.path())
            .expect("reading")
            .is_empty()
    );
    std::fs::write(dir.path().join("tenax-serve.1"), "changed").expect("change");
    std::fs::write(dir.path().join("tenax-gone.1"), "old").expect("stale");
    let found = tenax_man::differences(dir.path()).expect("reading");
    assert_eq!(
        found,
        [
            "tenax-serve.1: differs from the command line".to_owned(),
            "tenax-gone.1: no such command any more".to_owned()
        ]
    );
    tenax_man::write(dir.path()).expect("writing again");
    assert!(
        tenax_man::differences(dir.path())
            .expect("reading")
            .is_empty()
    );
}
