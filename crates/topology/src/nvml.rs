//! NVML enrichment: each GPU's name and UUID, matched to its sysfs PCI
//! function by NVML's own PCI bus id. NVML sits behind [`GpuLibrary`] so
//! that tests pass a fake; [`Nvml`] is the real one, built on `nvml-wrapper`,
//! which loads `libnvidia-ml.so.1` at run time: on a host without the NVIDIA
//! driver, initialisation fails cleanly and the state is
//! [`NvmlState::Absent`], never an error per sample. It is loaded for one
//! question and unloaded after it (names and UUIDs do not change while a
//! GPU is there; the reader asks again when the GPU set changes), so the
//! library's mappings and its driver handles are not held between walks.
//! NVML's topology calls are GPU↔GPU only, so placement always comes from
//! sysfs.

use std::ffi::OsString;
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

/// The real NVML, loaded only for the length of one question: [`Nvml::gpus`]
/// loads the library, initialises it, reads every GPU's bus id, name and
/// UUID, then shuts NVML down and unloads the library before it returns,
/// so its mappings and the driver state it opens are not held between
/// questions (the reader asks only when the GPU set in the PCI tree
/// changed). A failed initialisation is retried at most every
/// [`Nvml::RETRY`], so that a driver loaded after the exporter started is
/// picked up without a restart, and a host without one pays one failed
/// `dlopen` per retry period, not per question.
pub struct Nvml {
    library: OsString,
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
            .field("library", &self.library)
            .field("last_error", &self.last_error)
            .finish()
    }
}

impl Nvml {
    pub const RETRY: Duration = Duration::from_secs(300);

    /// The library the NVIDIA driver installs (`libnvidia-ml.so.1`, found
    /// through the dynamic loader's search path).
    pub const LIBRARY: &'static str = "libnvidia-ml.so.1";

    pub fn new() -> Nvml {
        Nvml::with_library(Nvml::LIBRARY)
    }

    /// NVML from another file (a path, or a name for the loader's search).
    pub fn with_library(library: impl Into<OsString>) -> Nvml {
        Nvml {
            library: library.into(),
            last_attempt: None,
            last_error: None,
        }
    }

    /// Loads and initialises NVML, unless the last failure is more recent
    /// than [`Nvml::RETRY`].
    fn load(&mut self) -> Result<nvml_wrapper::Nvml, NvmlError> {
        if let (Some(at), Some(err)) = (self.last_attempt, &self.last_error) {
            if at.elapsed() < Nvml::RETRY {
                return Err(err.clone());
            }
        }
        self.last_attempt = Some(Instant::now());
        match nvml_wrapper::Nvml::builder().lib_path(&self.library).init() {
            Ok(nvml) => {
                self.last_error = None;
                Ok(nvml)
            }
            Err(e) => {
                let err = NvmlError::Absent(e.to_string());
                self.last_error = Some(err.clone());
                Err(err)
            }
        }
    }
}

impl GpuLibrary for Nvml {
    fn gpus(&mut self) -> Result<Vec<NvmlGpu>, NvmlError> {
        let nvml = self.load()?;
        let gpus = list(&nvml);
        // nvml-wrapper's drop calls nvmlShutdown, then closes the library.
        drop(nvml);
        gpus
    }
}

fn list(nvml: &nvml_wrapper::Nvml) -> Result<Vec<NvmlGpu>, NvmlError> {
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
