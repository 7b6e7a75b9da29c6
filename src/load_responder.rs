//! The server's load-test responder (`load_test.responder`): built at
//! start, fed each published sample (which ports exist, their rails, what
//! they carry), reconfigured on reload (running sessions end), counted by
//! the load-test source, and handed the server's `POST` actions, whose
//! answers come back on the session's own thread
//! (`roce_fleet::load::responder`).

use std::sync::{Arc, Mutex};

use roce_fleet::load::responder::LoadResponder;
use roce_fleet::load::LoadTestConfig;
use roce_model::load::ResponderView;
use roce_probe::load::LoadVerbs;
use roce_web::{Action, ActionAnswer, Answer};

use crate::config::Config;
use crate::snapshot::Snapshot;

/// The responder and what it needs of the samples.
pub struct Responder<V: LoadVerbs + 'static> {
    inner: LoadResponder<V>,
    config: Mutex<Config>,
    previous: Mutex<Option<Arc<Snapshot>>>,
}

impl<V: LoadVerbs + 'static> Responder<V> {
    pub fn new(verbs: V, node: String, config: &Config) -> Self {
        Responder {
            inner: LoadResponder::new(verbs, node, config.load_test.clone()),
            config: Mutex::new(config.clone()),
            previous: Mutex::new(None),
        }
    }

    /// A published sample: the ports the responder may load. Nothing is
    /// read while the responder is off.
    pub fn observe(&self, snapshot: &Arc<Snapshot>) {
        let config = self
            .config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut previous = self.previous.lock().unwrap_or_else(|e| e.into_inner());
        if config.load_test.responder {
            let ports = crate::load::local_ports(previous.as_deref(), snapshot, &config);
            self.inner.set_ports(ports);
        }
        *previous = Some(snapshot.clone());
    }

    /// The ports the responder may load, set directly (what `observe`
    /// sets from the samples; the tests' fixtures).
    pub fn set_ports(&self, ports: Vec<roce_fleet::load::LocalLoadPort>) {
        self.inner.set_ports(ports);
    }

    /// A reloaded configuration: running sessions end.
    pub fn reconfigure(&self, config: &Config) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = config.clone();
        self.inner.reconfigure(config.load_test.clone());
    }

    pub fn stop_all(&self) {
        self.inner.stop_all();
    }

    pub fn view(&self) -> ResponderView {
        self.inner.counts()
    }

    /// A `POST` from the server; `None` when the path is no load-test path.
    pub fn action(&self, action: &Action) -> Option<ActionAnswer> {
        let authenticated = action.caller.tls && action.caller.authenticated;
        if let Some(r) = action.refused {
            // The server answers it; only counted here.
            return self
                .inner
                .refused_by_server(action.path, authenticated, r.message())
                .then(|| {
                    ActionAnswer::Ready(Answer {
                        status: r.status(),
                        body: String::new(),
                    })
                });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let reply =
            Box::new(move |status: u16, body: String| tx.send(Answer { status, body }).is_ok());
        self.inner
            .handle(action.path, action.query, authenticated, reply)
            .then_some(ActionAnswer::Pending(rx))
    }

    pub fn load_test_config(&self) -> LoadTestConfig {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .load_test
            .clone()
    }
}

/// The responder on libibverbs, with GPU memory where CUDA's driver
/// library loads and `load_test.gpu` is on.
#[cfg(feature = "probes")]
pub type ServerResponder = Responder<roce_probe::load::rc::IbLoadVerbs>;

#[cfg(feature = "probes")]
pub fn start(config: &Config, node: String) -> Arc<ServerResponder> {
    let gpu = (config.load_test.responder && config.load_test.gpu)
        .then(roce_probe::load::gpu::CudaDriver::load)
        .and_then(|r| match r {
            Ok(d) => Some(Arc::new(d) as Arc<dyn roce_probe::load::gpu::GpuMemory>),
            Err(e) => {
                tracing::info!(reason = %e, "load-test responder: host memory (no GPU memory)");
                None
            }
        });
    Arc::new(Responder::new(
        roce_probe::load::rc::IbLoadVerbs::new(gpu),
        node,
        config,
    ))
}

/// The host's name: the responder's node in its grants.
pub fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Verbs of a build without them: nothing opens.
#[cfg(not(feature = "probes"))]
pub use no_verbs::NoVerbs;

#[cfg(not(feature = "probes"))]
mod no_verbs {
    use roce_probe::load::{
        Completion, Connect, LoadVerbs, MemoryUsed, PortSpec, QpSet, Receiver, Requester, Waker,
        Window,
    };
    use roce_probe::verbs::OpenError;
    use roce_probe::Failure;
    use std::time::Instant;

    pub struct NoVerbs;

    /// No port ever exists.
    pub enum Never {}

    impl LoadVerbs for NoVerbs {
        type Requester = Never;
        type Receiver = Never;
        fn requester(&self, _: &PortSpec) -> Result<Never, OpenError> {
            Err(OpenError::Unavailable(
                "built without verbs (feature `probes`)".into(),
            ))
        }
        fn receiver(&self, _: &PortSpec) -> Result<Never, OpenError> {
            Err(OpenError::Unavailable(
                "built without verbs (feature `probes`)".into(),
            ))
        }
    }

    impl Connect for Never {
        fn local(&self) -> QpSet {
            match *self {}
        }
        fn window(&self) -> Option<Window> {
            match *self {}
        }
        fn connect(&mut self, _: &QpSet, _: Option<Window>) -> Result<(), Failure> {
            match *self {}
        }
        fn memory(&self) -> MemoryUsed {
            match *self {}
        }
    }

    impl Requester for Never {
        fn qps(&self) -> usize {
            match *self {}
        }
        fn post_write(&mut self, _: usize, _: u32, _: u64) -> Result<(), Failure> {
            match *self {}
        }
        fn wait(&mut self, _: Instant, _: &mut Vec<Completion>) -> Result<(), Failure> {
            match *self {}
        }
    }

    impl Receiver for Never {
        fn qps(&self) -> usize {
            match *self {}
        }
        fn post_receives(&mut self, _: usize, _: u32) -> Result<(), Failure> {
            match *self {}
        }
        fn wait(&mut self, _: Instant, _: &mut Vec<Completion>) -> Result<(), Failure> {
            match *self {}
        }
        fn halt(&mut self) {
            match *self {}
        }
        fn waker(&self) -> Waker {
            match *self {}
        }
    }
}
