//! The human-readable form of the report.

use roce_rules::{self as rules, Severity};

use crate::Report;

/// The human-readable checklist.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "roce_exporter check: two samples {}s apart\n",
        rules::ports::fmt_num(report.window_seconds)
    ));
    let mut section = "";
    for item in &report.checklist {
        if item.section != section {
            section = item.section;
            out.push_str(&format!("\n{section}\n"));
        }
        out.push_str(&format!("  {} {}\n", item.status.mark(), item.text));
    }
    let critical = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Critical)
        .count();
    let warning = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    out.push_str(&format!(
        "\nFindings: {critical} critical, {warning} warning, {} info\n",
        report.findings.len() - critical - warning
    ));
    for f in &report.findings {
        out.push_str(&format!(
            "  [{}] {}: {}\n",
            f.severity.as_str(),
            f.rule,
            f.finding
        ));
        out.push_str(&format!("      Measured: {}\n", f.evidence));
        out.push_str(&format!("      Fix:      {}\n", f.fix));
        out.push_str(&format!("      Verify:   {}\n", f.verify));
    }
    out.push_str("\nNCCL settings (only where NCCL's default is wrong on this host)\n");
    if report.nccl.is_empty() {
        out.push_str("  none that the data read here can judge (NCCL's defaults apply)\n");
    }
    for n in &report.nccl {
        let line = match n.action {
            "export" => format!("export {}={}", n.name, n.value),
            "choose" => format!("{}={} (choose)", n.name, n.value),
            "unset" => format!("unset {}", n.name),
            _ => format!("{}: {}", n.name, n.value),
        };
        out.push_str(&format!("  {line}    # {}\n", n.reason));
    }
    out
}
