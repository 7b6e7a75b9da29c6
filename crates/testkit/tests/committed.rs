//! The committed trees are what the builder writes: each is rebuilt into a
//! temp dir and compared file by file (content and symlink targets). When
//! this fails after a change to the builder, regenerate with
//! `cargo run -p roce-testkit -- fixtures` and read the diff.

use std::path::{Path, PathBuf};

use roce_testkit::{compare, COMMITTED};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn committed_trees_are_what_the_builder_writes() {
    let scratch = std::env::temp_dir().join(format!("roce-testkit-{}", std::process::id()));
    let mut failures = Vec::new();
    for (i, (dir, build)) in COMMITTED.iter().enumerate() {
        let out = scratch.join(i.to_string());
        build(&out).unwrap_or_else(|e| panic!("building {dir}: {e}"));
        let committed = repo().join(dir);
        // Only the trees this builder owns: a fixture folder may hold others.
        for entry in std::fs::read_dir(&out).unwrap() {
            let name = entry.unwrap().file_name();
            let diffs = compare::differences(&committed.join(&name), &out.join(&name))
                .unwrap_or_else(|e| vec![format!("{}: {e}", committed.join(&name).display())]);
            failures.extend(diffs.into_iter().take(20).map(|d| format!("{dir}: {d}")));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        failures.is_empty(),
        "committed trees differ from the builder (regenerate: cargo run -p roce-testkit -- fixtures):\n{}",
        failures.join("\n")
    );
}
