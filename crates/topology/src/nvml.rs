//! NVML enrichment: each GPU's name and UUID, matched to its sysfs PCI
//! function by NVML's own PCI bus id. NVML sits behind [`GpuLibrary`] so
//! that tests pass a fake; [`Nvml`] is the real one, built on `nvml-wrapper`,
//! which loads `libnvidia-ml.so.1` at run time: on a host without the NVIDIA
//! driver, initialisation fails cleanly and the state is
//! [`NvmlState::Absent`], never an error per sample. NVML's topology calls
//! are GPU↔GPU only, so placement always comes from sysfs.

use std::time::{Duration, Instant};

use crate::pci::PciAddress;

/// One GPU as NVML describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlGpu {
    /// NVML's PCI bus id, normalised (NVML prints `00000000:17:00.0`).
    pub address: PciAddress,
    pub name: Option<String>,
    pub uuid: Option<String>,
}

/// What NVML said in one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NvmlState {
    /// Not asked (NVML turned off, or no NVIDIA GPU in the PCI tree).
    #[default]
    NotUsed,
    /// The library or the driver is not there (the reason from NVML).
    Absent(String),
    /// NVML answered for this many GPUs.
    Present(usize),
    /// NVML is there but a query failed.
    Failed(String),
}

impl NvmlState {
    pub fn as_str(&self) -> &'static str {
        match self {
            NvmlState::NotUsed => "not_used",
            NvmlState::Absent(_) => "absent",
            NvmlState::Present(_) => "present",
            NvmlState::Failed(_) => "failed",
        }
    }
}

/// Why a [`GpuLibrary`] gave no GPUs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlError {
    /// No library, no driver, or no permission: a host property.
    #[error("NVML absent: {0}")]
    Absent(String),
    /// NVML loaded but a query failed.
    #[error("NVML query failed: {0}")]
    Query(String),
}

/// A source of GPU names and UUIDs.
pub trait GpuLibrary: Send {
    fn gpus(&mut self) -> Result<Vec<NvmlGpu>, NvmlError>;

    /// False when NVML is deliberately not asked ([`NoNvml`]): the state is
    /// then [`NvmlState::NotUsed`], not "absent".
    fn in_use(&self) -> bool {
        true
    }
}

/// No NVML at all (turned off by configuration, or for fixture trees that
/// describe another host than this one).
#[derive(Debug, Default)]
pub struct NoNvml;

impl GpuLibrary for NoNvml {
    fn gpus(&mut self) -> Result<Vec<NvmlGpu>, NvmlError> {
        Err(NvmlError::Absent("NVML not used".into()))
    }

    fn in_use(&self) -> bool {
        false
    }
}

/// A fixed answer, for tests.
#[derive(Debug, Clone)]
pub struct FakeNvml(pub Result<Vec<NvmlGpu>, NvmlError>);

impl GpuLibrary for FakeNvml {
    fn gpus(&mut self) -> Result<Vec<NvmlGpu>, NvmlError> {
        self.0.clone()
    }
}

/// The real NVML, initialised on first use. A failed initialisation is
/// retried at most every [`Nvml::RETRY`], so that a driver loaded after the
/// exporter started is picked up without a restart, and a host without one
/// pays one failed `dlopen` per retry period, not per sample.
pub struct Nvml {
    nvml: Option<nvml_wrapper::Nvml>,
    last_attempt: Option<Instant>,
    last_error: Option<NvmlError>,
}

impl Default for Nvml {
    fn default() -> Self {
        Nvml::new()
    }
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml")
            .field("initialised", &self.nvml.is_some())
            .field("last_error", &self.last_error)
            .finish()
    }
}

impl Nvml {
    pub const RETRY: Duration = Duration::from_secs(300);

    pub fn new() -> Nvml {
        Nvml {
            nvml: None,
            last_attempt: None,
            last_error: None,
        }
    }

    fn init(&mut self) -> Result<&nvml_wrapper::Nvml, NvmlError> {
        if self.nvml.is_none() {
            let due = self.last_attempt.is_none_or(|t| t.elapsed() >= Nvml::RETRY);
            if !due {
                return Err(self
                    .last_error
                    .clone()
                    .unwrap_or_else(|| NvmlError::Absent("not initialised".into())));
            }
            self.last_attempt = Some(Instant::now());
            match nvml_wrapper::Nvml::init() {
                Ok(n) => {
                    self.nvml = Some(n);
                    self.last_error = None;
                }
                Err(e) => {
                    let err = NvmlError::Absent(e.to_string());
                    self.last_error = Some(err.clone());
                    return Err(err);
                }
            }
        }
        self.nvml
            .as_ref()
            .ok_or_else(|| NvmlError::Absent("not initialised".into()))
    }
}

impl GpuLibrary for Nvml {
    fn gpus(&mut self) -> Result<Vec<NvmlGpu>, NvmlError> {
        let nvml = self.init()?;
        let count = nvml
            .device_count()
            .map_err(|e| NvmlError::Query(format!("device count: {e}")))?;
        let mut out = Vec::new();
        for i in 0..count {
            // A GPU NVML cannot open (fallen off the bus, no permission) is
            // skipped: sysfs still reports it, without name and UUID.
            let Ok(device) = nvml.device_by_index(i) else {
                continue;
            };
            let Some(address) = device
                .pci_info()
                .ok()
                .and_then(|p| PciAddress::parse(&p.bus_id))
            else {
                continue;
            };
            out.push(NvmlGpu {
                address,
                name: device.name().ok(),
                uuid: device.uuid().ok(),
            });
        }
        Ok(out)
    }
}
