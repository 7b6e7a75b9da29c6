//! The topology source (skeleton: lands with its issue).

use super::Source;
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::{Snapshot, SourceState};

pub struct TopologySource {}

impl TopologySource {
    pub fn new(_config: &Config, _paths: &HostPaths) -> Self {
        TopologySource {}
    }
}

impl Source for TopologySource {
    fn name(&self) -> &'static str {
        "topology"
    }

    fn sample(&mut self, _snapshot: &mut Snapshot, _errors: &mut Vec<String>) -> SourceState {
        SourceState::Disabled("not implemented yet".into())
    }
}
