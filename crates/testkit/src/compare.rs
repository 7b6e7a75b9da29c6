//! Compares two trees as git keeps them: regular files by content,
//! symlinks by their target text; directories only through what they hold
//! (git keeps no empty directories).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// One entry of a tree.
#[derive(PartialEq, Eq, Debug)]
pub enum Entry {
    File(Vec<u8>),
    Link(String),
}

/// Every file and symlink under `root`, by path relative to it. Symlinks
/// are not followed.
pub fn entries(root: &Path) -> io::Result<BTreeMap<String, Entry>> {
    let mut out = BTreeMap::new();
    walk(root, "", &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Entry>) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let ty = e.file_type()?;
        if ty.is_symlink() {
            out.insert(
                r,
                Entry::Link(std::fs::read_link(&path)?.to_string_lossy().into_owned()),
            );
        } else if ty.is_dir() {
            walk(&path, &r, out)?;
        } else {
            out.insert(r, Entry::File(std::fs::read(&path)?));
        }
    }
    Ok(())
}

/// The differences between `want` and `got`, one line each (empty: same).
pub fn differences(want: &Path, got: &Path) -> io::Result<Vec<String>> {
    let (a, b) = (entries(want)?, entries(got)?);
    let mut out = Vec::new();
    for (k, v) in &a {
        match b.get(k) {
            None => out.push(format!("only in {}: {k}", want.display())),
            Some(w) if w != v => out.push(format!("differs: {k}")),
            Some(_) => {}
        }
    }
    for k in b.keys().filter(|k| !a.contains_key(*k)) {
        out.push(format!("only in {}: {k}", got.display()));
    }
    Ok(out)
}
