//! The roce_exporter(1) man page, rendered from the clap definition in
//! [`crate::cli`] so that flags, defaults and help text cannot drift from
//! the binary; the packages ship `docs/roce_exporter.1`, and a test keeps
//! that committed copy equal to this output (`roce_exporter docs man`).
//! The sections clap knows nothing of (files, signals, privileges, exit
//! status) are written here in roff.

use std::io::Write;

use clap_mangen::Man;

/// Sections after the generated ones. Plain roff; `\-` is a literal minus
/// (a bare `-` may be typeset as a hyphen and break copy-paste of flags).
const EXTRA: &str = r#".SH FILES
.TP
\fI/etc/roce_exporter/roce_exporter.yml\fR
The configuration the packaged service reads (every key optional; the
packaged file documents each key with its default).
.TP
\fI/etc/default/roce_exporter\fR (deb), \fI/etc/sysconfig/roce_exporter\fR (rpm)
Command line flags of the packaged service, in \fBARGS=\fR.
.TP
\fI/usr/share/roce\-exporter/\fR
Prometheus alert and recording rules (\fIalerts/\fR), Grafana dashboards
(\fIdashboards/\fR) and the runbook the alerts link to.
.SH SIGNALS
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Drain open connections (up to 5 s) and stop. The process ends within 10 s of
the signal whatever a source does; past that it exits with status 1.
.TP
\fBSIGHUP\fR
Re\-read \fB\-\-config.file\fR (also when received before the server is ready);
a file that does not parse is refused and the running configuration kept.
Changed \fBweb:\fR limits need a restart and are named in a warning.
\fB\-\-web.config.file\fR is re\-read on change without a signal.
.SH PRIVILEGES
Sysfs reads, RDMA netlink statistics, the ethtool statistics ioctl and DCB
netlink reads need no privilege. The verbs probes need read\-write access to
\fI/dev/infiniband/uverbs*\fR and a locked\-memory limit above a few KiB
(\fBLimitMEMLOCK=\fR in systemd, \fBulimit \-l\fR); their failures say which
is missing (reason \fBdevice_open\fR or \fBmemlock\fR). ACS in PCI config
space beyond the first 64 bytes needs \fBCAP_SYS_ADMIN\fR; without it ACS
reads as unknown. See \fIdocs/security.md\fR in the source.
.SH "EXIT STATUS"
0 on success (for \fBcheck\fR: no critical finding); 1 for \fBcheck\fR when
there are critical findings, or when the server failed; 2 on a configuration
or usage error (for \fBcheck\fR: it could not run).
.SH "SEE ALSO"
\fBprometheus\fR(1), \fBrdma\fR(8), \fBethtool\fR(8), \fBibv_devinfo\fR(1)
"#;

/// The whole man page as roff.
pub fn render() -> Result<String, std::io::Error> {
    // the page names the version only: `--version`'s long text carries the
    // build date and user, which would make the committed page stale
    let cmd = crate::cli::command().long_version(None::<&'static str>);
    let man = Man::new(cmd.clone()).manual("roce_exporter manual");
    let mut out: Vec<u8> = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    render_commands(&cmd, &mut out)?;
    out.write_all(EXTRA.as_bytes())?;
    man.render_version_section(&mut out)?;
    String::from_utf8(out)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}

/// One subsection per visible subcommand with its synopsis, its help and
/// its own options: clap_mangen's subcommand section lists names only, and
/// `once --format` or `check --window` belong in the page too.
fn render_commands(cmd: &clap::Command, out: &mut Vec<u8>) -> Result<(), std::io::Error> {
    let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    if subs.is_empty() {
        return Ok(());
    }
    out.write_all(b".SH COMMANDS\n")?;
    for sub in subs {
        let name = sub.get_name();
        writeln!(out, ".SS \"{} {}\"", cmd.get_name(), name)?;
        let help = sub
            .get_long_about()
            .or_else(|| sub.get_about())
            .map(|s| s.to_string())
            .unwrap_or_default();
        writeln!(out, "{}", escape(&help))?;
        let own: Vec<&clap::Arg> = sub
            .get_arguments()
            .filter(|a| !a.is_global_set() && !a.is_hide_set() && a.get_long().is_some())
            .collect();
        for arg in own {
            let long = arg.get_long().unwrap_or_default();
            let value = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| long.to_ascii_uppercase());
            writeln!(out, ".TP\n\\fB\\-\\-{}\\fR=\\fI{}\\fR", escape(long), value)?;
            let mut text = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(|s| s.to_string())
                .unwrap_or_default();
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|d| d.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() {
                text.push_str(&format!(" [default: {}]", defaults.join(", ")));
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() {
                text.push_str(&format!(" [possible values: {}]", values.join(", ")));
            }
            writeln!(out, "{}", escape(&text))?;
        }
    }
    Ok(())
}

/// Escapes text for a roff body line: backslashes, minus signs, and a
/// leading dot or quote (which roff would read as a request).
fn escape(text: &str) -> String {
    let body = text.replace('\\', "\\\\").replace('-', "\\-");
    if body.starts_with('.') || body.starts_with('\'') {
        format!("\\&{body}")
    } else {
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_has_every_visible_flag_and_command() {
        let page = render().unwrap();
        for flag in [
            "config.file",
            "web.listen\\-address",
            "web.config.file",
            "path.sysfs",
            "path.procfs",
            "log.level",
            "log.format",
        ] {
            assert!(page.contains(flag), "man page lacks --{flag}");
        }
        assert!(page.contains(".SS \"roce_exporter once\""));
        assert!(page.contains(".SS \"roce_exporter check\""));
        assert!(page.contains("\\-\\-window"));
        // the hidden docs subcommand stays out of the page
        assert!(!page.contains("roce_exporter docs"));
    }

    #[test]
    fn escape_neutralises_roff_requests() {
        assert_eq!(escape(".TH x"), "\\&.TH x");
        assert_eq!(escape("a-b\\c"), "a\\-b\\\\c");
    }
}
