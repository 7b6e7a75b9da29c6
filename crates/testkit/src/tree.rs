//! A directory tree written like sysfs: files, directories, relative
//! symlinks, and the errnos a kernel returns where a plain file cannot fail
//! (recorded in `faults.txt`, which the tests' file layer applies).

use std::io;
use std::path::{Component, Path, PathBuf};

/// A tree under `root`; every path handed to its methods is relative to
/// the root and written with `/` separators.
pub struct Tree {
    root: PathBuf,
    faults: Vec<(String, String)>,
}

impl Tree {
    /// Starts an empty tree at `root`, replacing whatever was there.
    pub fn create(root: &Path) -> io::Result<Tree> {
        if std::fs::symlink_metadata(root).is_ok() {
            std::fs::remove_dir_all(root)?;
        }
        std::fs::create_dir_all(root)?;
        Ok(Tree {
            root: root.to_path_buf(),
            faults: Vec::new(),
        })
    }

    /// Opens an existing tree (to change it).
    pub fn open(root: &Path) -> Tree {
        Tree {
            root: root.to_path_buf(),
            faults: Vec::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Writes a file, creating its parent directories.
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> io::Result<()> {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)
    }

    /// Writes `value` and a newline, as sysfs `show` callbacks print.
    pub fn attr(&self, rel: &str, value: impl std::fmt::Display) -> io::Result<()> {
        self.write(rel, format!("{value}\n"))
    }

    pub fn mkdir(&self, rel: &str) -> io::Result<()> {
        std::fs::create_dir_all(self.path(rel))
    }

    /// A symlink at `rel` to the tree path `target_rel`, relative as the
    /// kernel makes them (`../../devices/...`).
    pub fn link(&self, rel: &str, target_rel: &str) -> io::Result<()> {
        let from_dir = Path::new(rel).parent().unwrap_or(Path::new(""));
        self.link_raw(rel, &relative(from_dir, Path::new(target_rel)))
    }

    /// A symlink at `rel` with exactly the text `target`.
    pub fn link_raw(&self, rel: &str, target: &str) -> io::Result<()> {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink(target, path)
    }

    /// Records that reading `rel` fails with `errno` (a name like "EINVAL").
    pub fn fault(&mut self, rel: &str, errno: &str) {
        self.faults.push((rel.to_string(), errno.to_string()));
    }

    /// Writes `faults.txt` with the recorded faults; `note` says which
    /// cases this tree holds.
    pub fn finish(&self, note: &str) -> io::Result<()> {
        let mut text = String::from(
            "# Paths (relative to this tree) that the tests' file layer makes fail\n\
             # with the errno the kernel returns; plain files cannot. ",
        );
        text.push_str(note);
        text.push('\n');
        for (path, errno) in &self.faults {
            text.push_str(&format!("{path} {errno}\n"));
        }
        self.write("faults.txt", text)
    }
}

/// `to` relative to the directory `from` (both relative to one root and
/// free of `..`), as Python's `os.path.relpath` gives it.
pub fn relative(from: &Path, to: &Path) -> String {
    let parts = |p: &Path| -> Vec<String> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    };
    let (from, to) = (parts(from), parts(to));
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out: Vec<String> = vec!["..".to_string(); from.len() - common];
    out.extend(to[common..].iter().cloned());
    if out.is_empty() {
        ".".to_string()
    } else {
        out.join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::relative;
    use std::path::Path;

    #[test]
    fn relative_paths_as_relpath() {
        let r = |a: &str, b: &str| relative(Path::new(a), Path::new(b));
        assert_eq!(
            r("class/infiniband", "devices/pci0000:16/x/infiniband/mlx5_0"),
            "../../devices/pci0000:16/x/infiniband/mlx5_0"
        );
        assert_eq!(r("devices/a/infiniband/mlx5_0", "devices/a"), "../..");
        assert_eq!(
            r("devices/a/infiniband/mlx5_0", "class/infiniband"),
            "../../../../class/infiniband"
        );
        assert_eq!(r("", "a/b"), "a/b");
    }
}
