//! Embeds what `roce_exporter --version` and `roce_exporter_build_info`
//! report, as node_exporter does: the git revision and branch, the compiler
//! version, the build date, the build user and the target. Each can be set
//! through the environment (a packager building from a source tarball, which
//! has no git: ROCE_EXPORTER_REVISION, ROCE_EXPORTER_BRANCH,
//! ROCE_EXPORTER_BUILD_USER; SOURCE_DATE_EPOCH for a reproducible date) and
//! falls back to "unknown".

use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn env_or(name: &str, fallback: impl FnOnce() -> Option<String>) -> String {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(fallback)
        .unwrap_or_else(|| "unknown".into())
}

/// Seconds since the epoch as `YYYYMMDD-hh:mm:ss` UTC (node_exporter's
/// build date format), by the civil-from-days algorithm.
fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}:{:02}:{:02}",
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    )
}

fn main() {
    let revision = env_or("ROCE_EXPORTER_REVISION", || {
        output("git", &["rev-parse", "--short=12", "HEAD"])
    });
    let branch = env_or("ROCE_EXPORTER_BRANCH", || {
        output("git", &["rev-parse", "--abbrev-ref", "HEAD"])
    });
    let build_user = env_or("ROCE_EXPORTER_BUILD_USER", || {
        let user = std::env::var("USER").ok()?;
        let host = std::fs::read_to_string("/etc/hostname").ok();
        Some(match host.as_deref().map(str::trim) {
            Some(h) if !h.is_empty() => format!("{user}@{h}"),
            _ => user,
        })
    });
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        });
    let date = epoch.map_or_else(|| "unknown".into(), utc_date);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = output(&rustc, &["--version"])
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=ROCE_EXPORTER_REVISION={revision}");
    println!("cargo:rustc-env=ROCE_EXPORTER_BRANCH={branch}");
    println!("cargo:rustc-env=ROCE_EXPORTER_BUILD_USER={build_user}");
    println!("cargo:rustc-env=ROCE_EXPORTER_BUILD_DATE={date}");
    println!("cargo:rustc-env=ROCE_EXPORTER_RUSTC={rustc_version}");
    println!("cargo:rustc-env=ROCE_EXPORTER_TARGET={target}");
    // A new commit or branch: HEAD and the ref it names (in a worktree the
    // git directory is not .git). Only files that exist: Cargo reruns the
    // script on every build for a missing one (a packed ref).
    let watch = |path: &str| {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    if let Some(head) = output("git", &["rev-parse", "--git-path", "HEAD"]) {
        watch(&head);
        if let Ok(text) = std::fs::read_to_string(&head) {
            if let Some(reference) = text.trim().strip_prefix("ref: ") {
                if let Some(path) = output("git", &["rev-parse", "--git-path", reference]) {
                    watch(&path);
                }
            }
        }
    }
    watch("build.rs");
}
