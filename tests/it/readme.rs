//! The README as a newcomer reads it: short, the first runnable block
//! within its first 40 lines and starting from a clone (`git clone` then
//! `cd` into it, where the demo's relative paths resolve), and its sample
//! output produced by the command it shows: the exporter started with the
//! block's own flags, its `/metrics` fetched and filtered by the block's
//! own `grep -E` (Debian's grep), equal to the sample line for line.
//! .ci/bare-debian.sh runs the same block on a bare Debian 12.

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::attack::get;
use crate::signals::{spawn_args, wait_for};
use crate::support::repo;

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// The first ```sh block: its first line's number (1-based) and its lines.
fn first_block(text: &str) -> (usize, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "```sh")
        .expect("README: a ```sh block");
    let body = lines[start + 1..]
        .iter()
        .take_while(|l| l.trim() != "```")
        .map(|l| l.to_string())
        .collect();
    (start + 2, body)
}

/// The code block after the line that starts with `intro`.
fn block_after(text: &str, intro: &str) -> Vec<String> {
    let at = text
        .find(intro)
        .unwrap_or_else(|| panic!("README: {intro:?}"));
    let block = text[at..]
        .split("```")
        .nth(1)
        .expect("a code block after it");
    block.lines().skip(1).map(|l| l.to_string()).collect()
}

#[test]
fn the_readme_starts_with_the_first_command_and_stays_short() {
    let text = readme();
    let count = text.lines().count();
    assert!(
        count <= 160,
        "README.md has {count} lines; keep it about 150"
    );
    let (first, block) = first_block(&text);
    assert!(
        first <= 40,
        "the first command is on line {first}, not within 40"
    );
    let clone = block
        .iter()
        .position(|l| l.starts_with("git clone "))
        .expect("the first block clones the repository");
    // `git clone URL [DIR]`: DIR, else the URL's last segment
    let words: Vec<&str> = block[clone].split_whitespace().collect();
    let url = words.get(2).expect("git clone URL");
    let dir = match words.get(3) {
        Some(d) if *d != "&&" => d.to_string(),
        _ => url
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".git")
            .to_string(),
    };
    assert!(
        block[clone].ends_with(&format!("&& cd {dir}")),
        "the clone line changes into the clone: {}",
        block[clone]
    );
    assert!(
        block[clone + 1..]
            .iter()
            .any(|l| l.starts_with("cargo build --release")),
        "the block builds after the clone"
    );
}

#[test]
fn the_readme_sample_is_what_its_command_prints() {
    let text = readme();
    let (_, block) = first_block(&text);
    // the exporter line, run with the block's flags on a free port
    let run = block
        .iter()
        .find(|l| l.starts_with("target/release/roce_exporter "))
        .expect("the block starts the exporter");
    let mut flags: Vec<String> = run
        .trim_end_matches('&')
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    let config = flags
        .iter()
        .position(|f| f.starts_with("--config.file="))
        .map(|i| flags.remove(i))
        .expect("--config.file");
    let config = repo().join(config.trim_start_matches("--config.file="));
    for f in flags.iter_mut() {
        if let Some((k, path)) = f.split_once('=') {
            if k.starts_with("--path.") {
                *f = format!("{k}={}", repo().join(path).display());
            }
        }
    }
    let (_running, log) = spawn_args(&config, &flags);
    let listening = wait_for(&log, "msg=listening");
    let port = listening.rsplit(':').next().unwrap().trim().to_string();
    let reply = get(&port, "/metrics");
    let (_, body) = reply.split_once("\r\n\r\n").expect("an HTTP answer");
    // the block's curl | grep -E '<re>', with the same grep
    let curl = block.last().expect("the block ends with the curl");
    assert!(curl.starts_with("curl ") && curl.contains("localhost:9879/metrics | grep -E '"));
    let re = curl
        .split("grep -E '")
        .nth(1)
        .and_then(|r| r.strip_suffix('\''))
        .expect("grep -E '<regex>'");
    let mut grep = Command::new("grep")
        .args(["-E", re])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("grep");
    grep.stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = grep.wait_with_output().unwrap();
    let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let sample = block_after(&text, "The last command prints");
    assert!(!printed.is_empty(), "the command prints nothing:\n{body}");
    assert_eq!(
        sample, printed,
        "README's sample is not what its command prints on the demo tree"
    );
}
