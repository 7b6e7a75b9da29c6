//! Micro-benchmark of the sysfs reader: µs per steady-state sample of a
//! generated tree (`cargo run -p roce-testkit -- bench-tree`), against the floor of a bare `pread`
//! loop over exactly the files that sample read, on kept descriptors.
//!
//! ```sh
//! cargo run -p roce-testkit -- bench-tree --ports 8 --out /dev/shm/roce-8
//! cargo run --release -p roce-rdma --example sample_bench -- /dev/shm/roce-8 2000
//! ```
//!
//! The file list of the floor comes from one sample through a recording file
//! layer; the timed reader runs on the plain `std` layer.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use roce_rdma::{DeviceFilter, RdmaReader, StdFs, SysFile, SysFs, SysfsOnly};

/// Records the path of every `pread` made through it.
struct Recording {
    reads: Arc<Mutex<Vec<PathBuf>>>,
}

struct RecordingFile {
    path: PathBuf,
    inner: Box<dyn SysFile>,
    reads: Arc<Mutex<Vec<PathBuf>>>,
}

impl SysFile for RecordingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Ok(mut r) = self.reads.lock() {
            r.push(self.path.clone());
        }
        self.inner.read_at(buf, offset)
    }
}

impl SysFs for Recording {
    fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>> {
        Ok(Box::new(RecordingFile {
            path: path.to_path_buf(),
            inner: StdFs.open(path)?,
            reads: Arc::clone(&self.reads),
        }))
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        StdFs.read_dir(path)
    }
    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        StdFs.read_link(path)
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        StdFs.canonicalize(path)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(
        args.next()
            .ok_or("usage: sample_bench SYSFS_ROOT [SAMPLES]")?,
    );
    let samples: u32 = args.next().map_or(Ok(1000), |s| s.parse())?;
    // `reader` or `floor` times only that part (for `perf stat`).
    let only = args.next().unwrap_or_default();
    let floor_samples = if only == "reader" { 0 } else { samples };
    let reader_samples = if only == "floor" { 0 } else { samples };

    // The files one steady-state sample reads.
    let reads = Arc::new(Mutex::new(Vec::new()));
    let mut rec = RdmaReader::with_fs(
        root.clone(),
        DeviceFilter::default(),
        Box::new(Recording {
            reads: Arc::clone(&reads),
        }),
    );
    rec.read(&mut SysfsOnly);
    reads.lock().map_err(|_| "poisoned")?.clear();
    let snap = rec.read(&mut SysfsOnly);
    let paths: Vec<PathBuf> = std::mem::take(&mut *reads.lock().map_err(|_| "poisoned")?);
    let ports: usize = snap.devices.iter().map(|d| d.ports.len()).sum();
    drop(rec);

    let files: Vec<File> = paths.iter().map(File::open).collect::<Result<_, _>>()?;
    let mut buf = [0u8; 256];
    for f in &files {
        std::hint::black_box(f.read_at(&mut buf, 0)?);
    }
    let t = Instant::now();
    for _ in 0..floor_samples {
        for f in &files {
            std::hint::black_box(f.read_at(&mut buf, 0)?);
        }
    }
    let floor = t.elapsed().as_secs_f64() * 1e6 / f64::from(floor_samples.max(1));
    // Both sets of handles at once can pass a 20000-file limit at 128 ports.
    drop(files);

    let mut reader = RdmaReader::new(root, DeviceFilter::default());
    let first = reader.read(&mut SysfsOnly);
    if let Some(e) = first.errors.first() {
        eprintln!(
            "{} errors on the first sample, e.g. {e}",
            first.errors.len()
        );
    }
    for _ in 0..samples / 10 + 1 {
        std::hint::black_box(reader.read(&mut SysfsOnly));
    }
    let t = Instant::now();
    for _ in 0..reader_samples {
        std::hint::black_box(reader.read(&mut SysfsOnly));
    }
    let per_sample = t.elapsed().as_secs_f64() * 1e6 / f64::from(reader_samples.max(1));

    println!(
        "ports {ports}  reads/sample {}  reader {per_sample:.1} µs/sample  pread floor {floor:.1} µs  ratio {:.2}",
        reader.reads_last_sample(),
        per_sample / floor
    );
    Ok(())
}
