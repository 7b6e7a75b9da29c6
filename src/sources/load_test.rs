//! The load-test source: the last results `check --load` wrote
//! (`load_test.results_file`; read again only when the file's modification
//! time or size changes, through `roce_host::named`: a regular file, 1 MiB
//! at most, within 5 s) and, in the server, the responder's counts. Off
//! (no I/O at all) when neither is configured.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use roce_model::load::{LoadTestResults, LoadTestSnapshot, ResponderView, RESULTS_VERSION};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::snapshot::SourceState;

/// What the server's responder did, asked once per sample.
pub type ResponderHandle = Arc<dyn Fn() -> ResponderView + Send + Sync>;

pub struct LoadTestSource {
    results_file: Option<PathBuf>,
    responder: Option<ResponderHandle>,
    /// The file's (modification time, size) when last read, and what it
    /// gave.
    seen: Option<(SystemTime, u64)>,
    results: Option<Arc<LoadTestResults>>,
    error: Option<String>,
}

impl LoadTestSource {
    pub fn new(config: &Config, responder: Option<ResponderHandle>) -> Self {
        LoadTestSource {
            results_file: config.load_test.results_file.clone(),
            responder,
            seen: None,
            results: None,
            error: None,
        }
    }

    fn read(&mut self, path: &std::path::Path) {
        let stamp = std::fs::metadata(path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        if stamp.is_some() && stamp == self.seen {
            return;
        }
        self.seen = stamp;
        match roce_host::named::read_bytes(path, roce_host::named::Limits::LIST) {
            Ok(bytes) => match parse(&bytes) {
                Ok(r) => {
                    self.results = Some(Arc::new(r));
                    self.error = None;
                }
                Err(e) => {
                    self.results = None;
                    self.error = Some(format!("{}: {e}", path.display()));
                }
            },
            Err(e) if e.is_absent() => {
                self.results = None;
                self.error = None;
            }
            Err(e) => {
                self.results = None;
                self.error = Some(e.to_string());
            }
        }
    }
}

/// Results as `check --load` writes them; other versions are refused.
pub fn parse(bytes: &[u8]) -> Result<LoadTestResults, String> {
    let r: LoadTestResults = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if r.version != RESULTS_VERSION {
        return Err(format!(
            "results version {} (this exporter reads {RESULTS_VERSION})",
            r.version
        ));
    }
    if r.runs.len() > 1024 || r.runs.iter().any(|x| x.ports.len() > 256) {
        return Err("more runs or ports than a node has".into());
    }
    Ok(r)
}

impl Source for LoadTestSource {
    fn name(&self) -> &'static str {
        "load_test"
    }

    fn disabled(&self) -> Option<String> {
        (self.results_file.is_none() && self.responder.is_none())
            .then(|| "no load_test.results_file and no responder".to_string())
    }

    fn sample(&mut self, _input: &Input, _errors: &mut Vec<HostError>) -> Sampled {
        if let Some(path) = self.results_file.clone() {
            self.read(&path);
        }
        let part = LoadTestSnapshot {
            results: self.results.clone(),
            results_error: self.error.clone(),
            responder: self.responder.as_ref().map(|r| r()),
        };
        let state = match &self.error {
            Some(e) => SourceState::Failed(e.clone()),
            None => SourceState::Ok,
        };
        Sampled::new(state, Part::LoadTest(Box::new(part)))
    }
}
