//! The LLDP source: the neighbour of each netdev behind an RDMA port and
//! what that switch port advertises, through `roce_lldp::reader` (see there
//! for `lldp.mode` and its backends). It hands the reader the netdevs
//! behind the RDMA ports and reports how the read went.

use std::path::PathBuf;

use roce_lldp::reader::{LldpError, LldpReader};

pub use roce_lldp::reader::{CaptureOpener, LldpConfig, LldpMode};
pub use roce_model::lldp::{LldpPort, LldpSnapshot};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::SourceState;

pub struct LldpSource {
    reader: LldpReader,
}

impl LldpSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        LldpSource {
            reader: LldpReader::new(&config.lldp, paths.is_live()),
        }
    }

    /// A capture source over frames from `opener` (tests).
    pub fn with_capture(opener: CaptureOpener) -> Self {
        LldpSource {
            reader: LldpReader::with_capture(opener),
        }
    }

    /// An lldpd source reading lldpcli's JSON from `file` (tests).
    pub fn with_json_file(file: PathBuf) -> Self {
        LldpSource {
            reader: LldpReader::with_json_file(file),
        }
    }
}

impl Source for LldpSource {
    fn name(&self) -> &'static str {
        "lldp"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn disabled(&self) -> Option<String> {
        self.reader.off().map(|why| why.to_string())
    }

    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        if let Some(why) = self.reader.off() {
            return Sampled::bare(SourceState::Disabled(why.to_string()));
        }
        let targets = super::netdev::targets(input.rdma.as_deref(), &[])
            .into_iter()
            .map(|t| (t.name, t.rdma.map(|r| (r.device, r.port))))
            .collect();
        match self
            .reader
            .read(targets, crate::snapshot::monotonic_now(), errors)
        {
            Ok(part) => Sampled::new(SourceState::Ok, Part::Lldp(Box::new(part))),
            Err(e) => Sampled::bare(match e {
                LldpError::Denied(_) => SourceState::Disabled(e.to_string()),
                LldpError::NoNetdev | LldpError::NotAnswering(_) => {
                    SourceState::Unavailable(e.to_string())
                }
                _ => SourceState::Failed(e.to_string()),
            }),
        }
    }
}
