//! Writes the trees of roce-testkit:
//!
//!     testkit fixtures [REPO]                  every committed tree (fixtures, demo)
//!     testkit bench-tree --ports N --out DIR [--seed S]
//!     testkit bench-bump DIR                   advance every counter once

use std::path::PathBuf;
use std::process::ExitCode;

use roce_testkit::{trees, COMMITTED};

fn usage() -> ExitCode {
    eprintln!(
        "usage: testkit fixtures [REPO]\n       testkit bench-tree --ports N --out DIR [--seed S]\n       testkit bench-bump DIR"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("fixtures") => {
            let repo = args
                .get(1)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."));
            COMMITTED
                .iter()
                .try_for_each(|(dir, build)| build(&repo.join(dir)))
        }
        Some("bench-tree") => {
            let (mut ports, mut out, mut seed) = (None, None, 0);
            let mut it = args[1..].iter();
            while let Some(flag) = it.next() {
                let value = it.next();
                match (flag.as_str(), value) {
                    ("--ports", Some(v)) => ports = v.parse::<usize>().ok(),
                    ("--out", Some(v)) => out = Some(PathBuf::from(v)),
                    ("--seed", Some(v)) => match v.parse() {
                        Ok(s) => seed = s,
                        Err(_) => return usage(),
                    },
                    _ => return usage(),
                }
            }
            match (ports, out) {
                (Some(ports), Some(out)) if ports > 0 => trees::bench::write(&out, ports, seed),
                _ => return usage(),
            }
        }
        Some("bench-bump") => match args.get(1) {
            Some(dir) => trees::bench::bump(&PathBuf::from(dir)),
            None => return usage(),
        },
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("testkit: {e}");
            ExitCode::FAILURE
        }
    }
}
