//! Fuzz target: the RDMA sysfs reader (`crates/rdma` reader.rs with the
//! parsers of parse.rs) over an in-memory copy of a fixture tree that the
//! input changes between samples: file contents, injected errnos, removed
//! and added entries, retargeted links, a hardware-counter source that
//! answers or not, device filters, a small open-file cap and time steps
//! that trigger (or skip) full GID scans. Everything the reader does with
//! what it reads (listings, links, GID watch lists, handle reuse) runs.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use roce_exporter_fuzz::{repo_root, MemFs, Node, Tree};
use roce_rdma::{Counter, DeviceFilter, HwCounterSource, RdmaReader};

const FIXTURES: [&str; 5] = [
    "sys-mlx5-roce",
    "sys-rxe",
    "sys-bnxt_re",
    "sys-mlx5-ib",
    "sys-broken",
];

/// GID slots kept per table: enough for the populated ones of every fixture
/// and a run of empty ones past them.
const GID_SLOTS: u32 = 12;

struct Base {
    tree: Tree,
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    links: Vec<PathBuf>,
}

fn bases() -> &'static [Base] {
    static BASES: OnceLock<Vec<Base>> = OnceLock::new();
    BASES.get_or_init(|| {
        FIXTURES
            .iter()
            .map(|name| {
                let root = repo_root().join("crates/rdma/tests/fixtures").join(name);
                let tree = Tree::load(&root, Path::new("/sys"), GID_SLOTS)
                    .unwrap_or_else(|e| panic!("fixture {}: {e}", root.display()));
                Base {
                    files: tree.paths(|n| matches!(n, Node::File(_))),
                    dirs: tree.paths(|n| matches!(n, Node::Dir)),
                    links: tree.paths(|n| matches!(n, Node::Link(_))),
                    tree,
                }
            })
            .collect()
    })
}

const ERRNOS: [i32; 9] = [
    libc::EINVAL,
    libc::EIO,
    libc::EACCES,
    libc::ENOENT,
    libc::ENODEV,
    libc::ESTALE,
    libc::EOPNOTSUPP,
    libc::EAGAIN,
    libc::ENOMEM,
];

/// Answers for some ports, from the input (what RDMA netlink would send).
struct FuzzHw {
    answers: Vec<Option<Vec<Counter>>>,
    next: usize,
}

impl HwCounterSource for FuzzHw {
    fn port_counters(&mut self, _device: &str, _port: u32) -> Option<Vec<Counter>> {
        if self.answers.is_empty() {
            return None;
        }
        let a = self.answers[self.next % self.answers.len()].clone();
        self.next = self.next.wrapping_add(1);
        a
    }
}

fn short_string(u: &mut Unstructured<'_>, max: usize) -> Result<String> {
    let len = u.int_in_range(0..=max)?;
    let bytes = u.bytes(len.min(u.len()))?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// A file content: usually text near what the kernel writes, sometimes raw.
fn content(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    const TEMPLATES: [&str; 14] = [
        "4: ACTIVE\n",
        "1: DOWN\n",
        "5: LinkUp\n",
        "400 Gb/sec (4X NDR)\n",
        "2.5 Gb/sec (1X SDR)\n",
        "Ethernet\n",
        "InfiniBand\n",
        "RoCE v2\n",
        "IB/RoCE v1\n",
        "N/A (no PMA)\n",
        "0000:0000:0000:0000:0000:ffff:0a00:000b\n",
        "fe80:0000:0000:0000:ba3f:d2ff:fe00:0001\n",
        "18446744073709551615\n",
        "0x1a\n",
    ];
    Ok(match u.int_in_range(0..=2)? {
        0 => u.choose(&TEMPLATES)?.as_bytes().to_vec(),
        1 => {
            let mut t = u.choose(&TEMPLATES)?.as_bytes().to_vec();
            let at = u.int_in_range(0..=t.len())?;
            t.truncate(at);
            t.extend_from_slice(short_string(u, 8)?.as_bytes());
            t
        }
        _ => {
            let len = u.int_in_range(0..=80)?;
            u.bytes(len.min(u.len()))?.to_vec()
        }
    })
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let base = u.choose(bases())?;
    let fs = MemFs::new(base.tree.clone());

    let mut filter = DeviceFilter::default();
    for _ in 0..u.int_in_range(0..=1)? {
        filter.include.push(short_string(u, 8)?);
    }
    for _ in 0..u.int_in_range(0..=1)? {
        filter.exclude.push(short_string(u, 8)?);
    }
    let mut reader = RdmaReader::with_fs(PathBuf::from("/sys"), filter, Box::new(fs.clone()));
    let max_open = if u.ratio(1, 4)? {
        Some(u.int_in_range(0..=16)?)
    } else {
        None
    };
    if let Some(m) = max_open {
        reader.set_max_open_files(m);
    }
    if u.ratio(1, 4)? {
        reader.set_gid_full_scan_interval(Duration::from_secs(u.int_in_range(0..=120)?));
    }
    let mut hw = FuzzHw {
        answers: Vec::new(),
        next: 0,
    };
    for _ in 0..u.int_in_range(0..=3)? {
        hw.answers.push(if u.ratio(1, 3)? {
            None
        } else {
            let mut counters = Vec::new();
            for _ in 0..u.int_in_range(0..=4)? {
                counters.push(Counter::new(short_string(u, 12)?, u.arbitrary()?));
            }
            Some(counters)
        });
    }

    let start = Instant::now();
    let mut now = start;
    let mut samples = 0;
    let sample = |reader: &mut RdmaReader, hw: &mut FuzzHw, now: Instant| {
        let snapshot = reader.read_at(hw, now);
        // Devices come out in name order, each once.
        assert!(snapshot.devices.windows(2).all(|w| w[0].name < w[1].name));
        if let Some(m) = max_open {
            assert!(
                reader.open_files() <= m,
                "{} handles kept open, cap {m}",
                reader.open_files()
            );
        }
    };
    sample(&mut reader, &mut hw, now);
    while !u.is_empty() && samples < 6 {
        match u.int_in_range(0..=7)? {
            0 | 1 => {
                let path = u.choose(&base.files)?.clone();
                let c = content(u)?;
                fs.tree().insert(path, Node::File(c));
            }
            2 => {
                let path = if u.ratio(1, 2)? {
                    u.choose(&base.files)?
                } else {
                    u.choose(&base.dirs)?
                };
                let errno = if u.ratio(1, 5)? {
                    None
                } else {
                    Some(*u.choose(&ERRNOS)?)
                };
                fs.tree().set_fault(path.clone(), errno);
            }
            3 => {
                let path = match u.int_in_range(0..=2)? {
                    0 => u.choose(&base.files)?,
                    1 => u.choose(&base.dirs)?,
                    _ => u.choose(&base.links)?,
                };
                fs.tree().remove(path);
            }
            4 => {
                let dir = u.choose(&base.dirs)?;
                let name = short_string(u, 12)?;
                if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                    continue;
                }
                let node = match u.int_in_range(0..=2)? {
                    0 => Node::File(content(u)?),
                    1 => Node::Dir,
                    _ => Node::Link(PathBuf::from(short_string(u, 40)?)),
                };
                fs.tree().insert(dir.join(name), node);
            }
            5 => {
                let link = u.choose(&base.links)?.clone();
                let target = if u.ratio(1, 2)? {
                    // Another real place in the tree, as a driver rebind
                    // would leave it.
                    let to = u.choose(&base.dirs)?;
                    PathBuf::from(format!("../../..{}", to.display()))
                } else {
                    PathBuf::from(short_string(u, 40)?)
                };
                fs.tree().insert(link, Node::Link(target));
            }
            _ => {
                now += Duration::from_secs(u.int_in_range(0..=90)?);
                sample(&mut reader, &mut hw, now);
                samples += 1;
            }
        }
    }
    now += Duration::from_secs(61);
    sample(&mut reader, &mut hw, now);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
