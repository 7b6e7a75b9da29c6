//! Findings: what a rule says is wrong, about what, the evidence, the fix
//! and how to verify it. Rules produce them; the exposition, `/findings`
//! and `check` show them.

use serde::Serialize;

use crate::rule_table::RuleId;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// What a finding is about. Fields that do not apply are `None` (and empty
/// labels on `roce_finding`).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Subject {
    pub device: Option<String>,
    pub port: Option<u32>,
    pub netdev: Option<String>,
    pub gpu: Option<u32>,
}

impl Subject {
    pub fn port(device: &str, port: u32, netdev: Option<&str>) -> Subject {
        Subject {
            device: Some(device.into()),
            port: Some(port),
            netdev: netdev.map(Into::into),
            gpu: None,
        }
    }

    /// `mlx5_0 port 1 (ens1f0np0)`, for finding texts.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(g) = self.gpu {
            parts.push(format!("GPU {g}"));
        }
        match (&self.device, self.port) {
            (Some(d), Some(p)) => parts.push(format!("{d} port {p}")),
            (Some(d), None) => parts.push(d.clone()),
            _ => {}
        }
        if let Some(n) = &self.netdev {
            if parts.is_empty() {
                parts.push(n.clone());
            } else {
                parts.push(format!("({n})"));
            }
        }
        if parts.is_empty() {
            "this host".into()
        } else {
            parts.join(" ")
        }
    }
}

/// One finding. The JSON form is the `/findings` schema (docs/findings.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable rule id (`port_down`, `pfc_storm`, ...; serialised as that
    /// string).
    pub rule: RuleId,
    pub severity: Severity,
    pub subject: Subject,
    /// One line: what is wrong.
    pub finding: String,
    /// Measured values and what was expected.
    pub evidence: String,
    /// What to change.
    pub fix: String,
    /// A command that shows whether it is fixed.
    pub verify: String,
}
