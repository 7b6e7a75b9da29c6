//! Support for the fuzz targets: an in-memory sysfs tree behind the RDMA
//! reader's file layer (loaded from the repository's fixture trees, changed
//! by the fuzzer between samples), and small helpers shared by targets.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use roce_rdma::{SysFile, SysFs};

/// The repository root (the fuzz crate lives in `<root>/fuzz`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One entry of an in-memory tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File(Vec<u8>),
    Dir,
    /// A symlink, target as written (relative to the link's folder, or
    /// absolute).
    Link(PathBuf),
}

/// A whole tree: nodes by absolute path, the children of every folder, and
/// the errnos injected per (resolved) path. Keyed by the path's bytes:
/// comparing `Path`s component by component was most of a sample's time.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    nodes: HashMap<Vec<u8>, Node>,
    children: HashMap<Vec<u8>, BTreeSet<OsString>>,
    /// EACCES and ENOENT fail at open (a permission check, a vanished
    /// file), every other errno at read, as a sysfs `show` callback does;
    /// a folder with a fault fails to list.
    faults: HashMap<Vec<u8>, i32>,
}

fn key(path: &Path) -> &[u8] {
    path.as_os_str().as_bytes()
}

/// Hops before a path resolution gives ELOOP (the kernel's MAXSYMLINKS).
const MAX_HOPS: usize = 40;

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

impl Tree {
    /// Loads a real fixture tree (symlinks kept as links) under `mount`,
    /// e.g. `/sys`. GID slots from `gid_slot_limit` on are left out, so
    /// that a sample reads a few dozen slots instead of hundreds; the
    /// tree's `faults.txt` ("<relative path> <ERRNO>") becomes faults.
    pub fn load(fixture: &Path, mount: &Path, gid_slot_limit: u32) -> io::Result<Tree> {
        let mut tree = Tree::default();
        tree.insert(mount.to_path_buf(), Node::Dir);
        tree.load_dir(fixture, mount, gid_slot_limit)?;
        tree.remove(&mount.join("faults.txt"));
        if let Ok(text) = std::fs::read_to_string(fixture.join("faults.txt")) {
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let mut parts = line.split_whitespace();
                let (Some(path), Some(name)) = (parts.next(), parts.next()) else {
                    continue;
                };
                let errno = match name {
                    "EINVAL" => libc::EINVAL,
                    "EIO" => libc::EIO,
                    "EACCES" => libc::EACCES,
                    "EOPNOTSUPP" => libc::EOPNOTSUPP,
                    "ENOENT" => libc::ENOENT,
                    "ENODEV" => libc::ENODEV,
                    _ => continue,
                };
                if let Ok(real) = tree.resolve(&mount.join(path)) {
                    tree.faults.insert(key(&real).to_vec(), errno);
                }
            }
        }
        Ok(tree)
    }

    fn load_dir(&mut self, real: &Path, at: &Path, gid_slot_limit: u32) -> io::Result<()> {
        for entry in std::fs::read_dir(real)? {
            let entry = entry?;
            let name = entry.file_name();
            let path = at.join(&name);
            if is_pruned_gid_slot(&path, gid_slot_limit) {
                continue;
            }
            let ty = entry.file_type()?;
            if ty.is_symlink() {
                self.insert(path, Node::Link(std::fs::read_link(entry.path())?));
            } else if ty.is_dir() {
                self.insert(path.clone(), Node::Dir);
                self.load_dir(&entry.path(), &path, gid_slot_limit)?;
            } else {
                self.insert(path, Node::File(std::fs::read(entry.path())?));
            }
        }
        Ok(())
    }

    /// Adds or replaces a node (its folder must be listed to be found).
    pub fn insert(&mut self, path: PathBuf, node: Node) {
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            self.children
                .entry(key(parent).to_vec())
                .or_default()
                .insert(name.to_os_string());
        }
        self.nodes.insert(key(&path).to_vec(), node);
    }

    /// Removes a node; what was below a removed folder becomes unreachable.
    pub fn remove(&mut self, path: &Path) {
        self.nodes.remove(key(path));
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            if let Some(c) = self.children.get_mut(key(parent)) {
                c.remove(name);
            }
        }
    }

    pub fn set_fault(&mut self, path: PathBuf, errno: Option<i32>) {
        match errno {
            Some(e) => self.faults.insert(key(&path).to_vec(), e),
            None => self.faults.remove(key(&path)),
        };
    }

    pub fn node(&self, path: &Path) -> Option<&Node> {
        self.nodes.get(key(path))
    }

    /// Every path of one kind, sorted (for the fuzzer to pick from).
    pub fn paths(&self, want: impl Fn(&Node) -> bool) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .nodes
            .iter()
            .filter(|(_, n)| want(n))
            .map(|(p, _)| PathBuf::from(OsStr::from_bytes(p)))
            .collect();
        out.sort();
        out
    }

    /// `realpath`: every component must exist; links are followed.
    pub fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        let mut hops = 0;
        self.resolve_from(PathBuf::from("/"), path, &mut hops)
    }

    fn resolve_from(&self, mut cur: PathBuf, path: &Path, hops: &mut usize) -> io::Result<PathBuf> {
        for c in path.components() {
            match c {
                Component::RootDir => cur = PathBuf::from("/"),
                Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    cur.pop();
                }
                Component::Normal(name) => {
                    if !matches!(self.nodes.get(key(&cur)), Some(Node::Dir))
                        && cur != Path::new("/")
                    {
                        return Err(err(libc::ENOTDIR));
                    }
                    cur.push(name);
                    match self.nodes.get(key(&cur)) {
                        None => return Err(err(libc::ENOENT)),
                        Some(Node::Link(target)) => {
                            *hops += 1;
                            if *hops > MAX_HOPS {
                                return Err(err(libc::ELOOP));
                            }
                            let target = target.clone();
                            cur.pop();
                            cur = self.resolve_from(cur, &target, hops)?;
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(cur)
    }

    /// The folder part resolved, the last component not followed (what
    /// `readlink` looks at).
    fn resolve_parent(&self, path: &Path) -> io::Result<PathBuf> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(err(libc::EINVAL));
        };
        Ok(self.resolve(parent)?.join(name))
    }
}

/// `.../gids/N`, `.../gid_attrs/{types,ndevs}/N` with N at or above `limit`.
fn is_pruned_gid_slot(path: &Path, limit: u32) -> bool {
    let Some(n) = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse::<u32>().ok())
    else {
        return false;
    };
    let parent = path.parent().and_then(|p| p.file_name());
    let grand = path
        .parent()
        .and_then(|p| p.parent())
        .and_then(|p| p.file_name());
    let slot = parent.is_some_and(|p| p == "gids")
        || (grand.is_some_and(|g| g == "gid_attrs")
            && parent.is_some_and(|p| p == "types" || p == "ndevs"));
    slot && n >= limit
}

/// A [`SysFs`] over a shared [`Tree`]: the fuzz target keeps a handle and
/// changes the tree between samples, handles the reader keeps open see the
/// change (a removed file reads ENODEV, as a removed sysfs node does).
#[derive(Clone)]
pub struct MemFs {
    tree: Arc<Mutex<Tree>>,
}

impl MemFs {
    pub fn new(tree: Tree) -> MemFs {
        MemFs {
            tree: Arc::new(Mutex::new(tree)),
        }
    }

    pub fn tree(&self) -> MutexGuard<'_, Tree> {
        // A poisoned lock only means an earlier panic, which already ended
        // the fuzz run.
        self.tree.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct MemFile {
    tree: Arc<Mutex<Tree>>,
    path: PathBuf,
}

impl SysFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&e) = tree.faults.get(key(&self.path)) {
            if e != libc::EACCES {
                return Err(err(e));
            }
        }
        match tree.nodes.get(key(&self.path)) {
            None => Err(err(libc::ENODEV)),
            Some(Node::Dir) => Err(err(libc::EISDIR)),
            Some(Node::Link(_)) => Err(err(libc::ENODEV)),
            Some(Node::File(content)) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                let rest = content.get(start..).unwrap_or_default();
                let n = rest.len().min(buf.len());
                buf[..n].copy_from_slice(&rest[..n]);
                Ok(n)
            }
        }
    }
}

impl SysFs for MemFs {
    fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>> {
        let tree = self.tree();
        let real = tree.resolve(path)?;
        if let Some(&e @ (libc::EACCES | libc::ENOENT)) = tree.faults.get(key(&real)) {
            return Err(err(e));
        }
        Ok(Box::new(MemFile {
            tree: self.tree.clone(),
            path: real,
        }))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        let tree = self.tree();
        let real = tree.resolve(path)?;
        if let Some(&e) = tree.faults.get(key(&real)) {
            return Err(err(e));
        }
        match tree.nodes.get(key(&real)) {
            Some(Node::Dir) => Ok(tree
                .children
                .get(key(&real))
                .map(|c| c.iter().cloned().collect())
                .unwrap_or_default()),
            _ => Err(err(libc::ENOTDIR)),
        }
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        let tree = self.tree();
        let at = tree.resolve_parent(path)?;
        match tree.nodes.get(key(&at)) {
            Some(Node::Link(target)) => Ok(target.clone()),
            Some(_) => Err(err(libc::EINVAL)),
            None => Err(err(libc::ENOENT)),
        }
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.tree().resolve(path)
    }
}

/// Bytes as native-endian u64 words, the last one zero-padded (the ethtool
/// ioctl's reply buffers are `u64` arrays).
pub fn words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_ne_bytes(w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_resolve_like_the_kernel_tree() {
        let root = repo_root().join("crates/rdma/tests/fixtures/sys-mlx5-roce");
        let tree = Tree::load(&root, Path::new("/sys"), 16).unwrap();
        let fs = MemFs::new(tree);
        let real = fs
            .canonicalize(Path::new("/sys/class/infiniband/mlx5_0/ports/1/state"))
            .unwrap();
        assert!(real.starts_with("/sys/devices/"), "{real:?}");
        let names = fs
            .read_dir(Path::new("/sys/class/infiniband/mlx5_0/ports/1/gids"))
            .unwrap();
        assert_eq!(names.len(), 16);
    }
}
