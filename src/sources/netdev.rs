//! The netdev source (skeleton: lands with its issue).

use super::Source;
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::{Snapshot, SourceState};

pub struct NetdevSource {}

impl NetdevSource {
    pub fn new(_config: &Config, _paths: &HostPaths) -> Self {
        NetdevSource {}
    }
}

impl Source for NetdevSource {
    fn name(&self) -> &'static str {
        "netdev"
    }

    fn sample(&mut self, _snapshot: &mut Snapshot, _errors: &mut Vec<String>) -> SourceState {
        SourceState::Disabled("not implemented yet".into())
    }
}
