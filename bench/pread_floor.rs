//! The read floor of a sample: the least a reader can spend to read the
//! files one roce_exporter sample reads. It opens each path of a list once,
//! then, per round, `pread`s each into a 256-byte buffer at offset 0 (what
//! the exporter's reader does, without parsing or building anything), and
//! prints the thread CPU time per round.
//!
//! With an interval it sleeps that long between rounds, as a sampler does:
//! a round then starts with the caches as cold as the exporter's samples
//! find them, and the wake-up is counted as it is for the exporter. Without
//! one it reads back to back (the hot-cache best case).
//!
//! Built by bench/sample_cost.py with plain `rustc -O` (std and libc's
//! clock only, no crates):
//!     pread_floor LIST ROUNDS [INTERVAL_MS]   LIST: one path per line, repeats allowed

use std::fs::File;
use std::io::BufRead;
use std::os::unix::fs::FileExt;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> i64 {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the pointer given.
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 && args.len() != 4 {
        eprintln!("usage: pread_floor LIST ROUNDS [INTERVAL_MS]");
        std::process::exit(2);
    }
    let interval = match args.get(3).map(|a| a.parse::<u64>()) {
        None => None,
        Some(Ok(ms)) => Some(std::time::Duration::from_millis(ms)),
        Some(Err(_)) => {
            eprintln!("INTERVAL_MS: a number");
            std::process::exit(2);
        }
    };
    let rounds: u32 = match args[2].parse() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("ROUNDS: a positive number");
            std::process::exit(2);
        }
    };
    let list = match File::open(&args[1]) {
        Ok(f) => std::io::BufReader::new(f),
        Err(e) => {
            eprintln!("{}: {e}", args[1]);
            std::process::exit(2);
        }
    };
    let mut files = Vec::new();
    for line in list.lines().map_while(Result::ok) {
        if line.is_empty() {
            continue;
        }
        match File::open(&line) {
            Ok(f) => files.push(f),
            Err(e) => eprintln!("skipped {line}: {e}"),
        }
    }
    let mut buf = [0u8; 256];
    let mut bytes = 0usize;
    let start = thread_cpu_ns();
    for _ in 0..rounds {
        if let Some(pause) = interval {
            std::thread::sleep(pause);
        }
        for f in &files {
            bytes += f.read_at(&mut buf, 0).unwrap_or(0);
        }
    }
    let spent = thread_cpu_ns() - start;
    println!(
        "files {} rounds {rounds} ns_per_round {} bytes {bytes}",
        files.len(),
        spent / i64::from(rounds)
    );
}
