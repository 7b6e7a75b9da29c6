//! The NCCL source: what NCCL jobs on this host really did, through
//! `roce_nccl::reader` (the directories `nccl.log_dir` and
//! `nccl.inspector_dir`, read on the `nccl.interval` cadence, bounded per
//! read). It runs like every source, on the sampler's reader thread under
//! its deadline. Nothing here runs NCCL or needs a GPU.

pub use roce_model::nccl::{FilesSkipped, NcclSnapshot};
use roce_nccl::reader::{NcclReader, NcclReaderConfig};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::snapshot::SourceState;

pub struct NcclSource {
    enabled: bool,
    reader: NcclReader,
}

impl NcclSource {
    pub fn new(config: &Config) -> Self {
        let c = &config.nccl;
        NcclSource {
            enabled: c.enabled,
            reader: NcclReader::new(&NcclReaderConfig {
                log_dir: c.log_dir.clone(),
                inspector_dir: c.inspector_dir.clone(),
                interval: c.interval,
                window: c.window,
                idle_expiry: c.idle_expiry,
                max_files: c.max_files,
                max_bytes_per_read: c.max_bytes_per_read,
                busbw_min_bytes: c.busbw_min_bytes,
                min_line_rate_fraction: c.min_line_rate_fraction,
                job_labels: c.job_labels,
            }),
        }
    }
}

impl Source for NcclSource {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn disabled(&self) -> Option<String> {
        if !self.enabled {
            return Some("nccl.enabled is false".into());
        }
        if !self.reader.has_dirs() {
            return Some("neither nccl.log_dir nor nccl.inspector_dir is set".into());
        }
        None
    }

    fn sample(&mut self, _input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        if let Some(why) = self.disabled() {
            return Sampled::bare(SourceState::Disabled(why));
        }
        let (part, failed) = self.reader.sample(errors);
        let state = match failed {
            Some(e) => SourceState::Failed(e.to_string()),
            None => SourceState::Ok,
        };
        Sampled::new(state, Part::Nccl(Box::new(part)))
    }
}
