//! This node's load-test responder: at most one session per local port,
//! started only by a request the HTTP server authenticated over TLS, from
//! a requester admitted on the port's rail ([`super::admit`]), within the
//! caps (`max_seconds`, `max_bytes`, the largest message), and only while
//! the port carries no more than `max_busy_share` of its line rate unless
//! the request is forced. Every refusal is counted by reason.
//!
//! A session runs on a thread of its own (set-up, then
//! `roce_probe::load::serve::serve`): the HTTP server's task only waits for
//! the answer (the [`Reply`] is called from that thread), so nothing on the
//! server's path blocks on verbs. The thread drops the session's queue
//! pairs, memory region and buffer when the session ends: on its end
//! request, its deadline, its byte cap, a silent requester (one that died),
//! a reload ([`LoadResponder::reconfigure`]) or shutdown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use roce_probe::load::serve::{serve, ServeLimits, ServeReport};
use roce_probe::load::{Connect, LoadVerbs, MemoryUsed, MemoryWanted, PortSpec, Waker, MAX_DEPTH};

use super::wire::{
    parse_end, parse_session, EndReport, Grant, Refused, SessionRequest, END_PATH, SESSION_PATH,
    VERSION,
};
use super::{admit, LoadRefusal, LoadTestConfig, LocalLoadPort};

/// Sends an action's answer (status, JSON body) back to the HTTP server;
/// called once, from whichever thread has the answer. `false`: nobody
/// waits for it any more (the client went, or the server stopped waiting).
pub type Reply = Box<dyn FnOnce(u16, String) -> bool + Send>;

/// The first message must come this soon after the grant: the requester
/// connects its queue pairs and samples its counters first.
pub const FIRST_MESSAGE: Duration = Duration::from_secs(20);
/// A session with no message for this long ends (the requester stopped or
/// died); longer than a requester's stall time.
pub const IDLE: Duration = Duration::from_secs(5);

/// What the responder did since it started, for the snapshot.
pub use roce_model::load::ResponderView as ResponderCounts;

struct Session {
    id: String,
    stop: Arc<AtomicBool>,
    waker: Option<Waker>,
    /// End requests waiting for the session's count.
    enders: Vec<Reply>,
}

struct State {
    config: LoadTestConfig,
    ports: Vec<LocalLoadPort>,
    sessions: BTreeMap<(String, u8), Session>,
    counts: ResponderCounts,
}

/// The responder (see the module doc).
pub struct LoadResponder<V: LoadVerbs + 'static> {
    verbs: Arc<V>,
    node: String,
    state: Arc<Mutex<State>>,
    /// [`FIRST_MESSAGE`] and [`IDLE`] (shorter in the tests).
    silence: (Duration, Duration),
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// 128 random bits, hex: the session's name in its end request.
fn random_id() -> String {
    let mut b = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    if read.is_err() {
        // No entropy source: a unique but guessable id, which still needs
        // the server's authentication to be used.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b = t.to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl<V: LoadVerbs + 'static> LoadResponder<V> {
    pub fn new(verbs: V, node: String, config: LoadTestConfig) -> Self {
        let enabled = config.responder;
        LoadResponder {
            verbs: Arc::new(verbs),
            silence: (FIRST_MESSAGE, IDLE),
            node,
            state: Arc::new(Mutex::new(State {
                config,
                ports: Vec::new(),
                sessions: BTreeMap::new(),
                counts: ResponderCounts {
                    enabled,
                    ..ResponderCounts::default()
                },
            })),
        }
    }

    /// How long a session waits for its first message and between
    /// messages (tests shorten them).
    pub fn with_silence(mut self, first_message: Duration, idle: Duration) -> Self {
        self.silence = (first_message, idle);
        self
    }

    /// The local ports as the latest sample saw them.
    pub fn set_ports(&self, ports: Vec<LocalLoadPort>) {
        lock(&self.state).ports = ports;
    }

    /// A reloaded configuration: every running session ends (its
    /// resources released) and the new limits apply to the next request.
    pub fn reconfigure(&self, config: LoadTestConfig) {
        let mut s = lock(&self.state);
        s.counts.enabled = config.responder;
        s.config = config;
        stop_all(&mut s);
    }

    /// Ends every running session (shutdown).
    pub fn stop_all(&self) {
        stop_all(&mut lock(&self.state));
    }

    pub fn counts(&self) -> ResponderCounts {
        let s = lock(&self.state);
        let mut c = s.counts.clone();
        c.active = s.sessions.keys().cloned().collect();
        c
    }

    /// Answers a `POST` to `path` (`None`: not a load-test path).
    /// `authenticated`: the server authenticated the caller over TLS.
    pub fn handle(&self, path: &str, query: &str, authenticated: bool, reply: Reply) -> bool {
        self.answer(path, Ok(query), authenticated, reply)
    }

    /// A `POST` to `path` that the server refuses itself (`why`: a body, an
    /// overlong query): counted as the responder's own refusals are
    /// (`malformed` once the responder is on and the caller authenticated),
    /// nothing started. `None`: not a load-test path.
    pub fn refused_by_server(&self, path: &str, authenticated: bool, why: &str) -> bool {
        self.answer(path, Err(why), authenticated, Box::new(|_, _| false))
    }

    fn answer(
        &self,
        path: &str,
        query: Result<&str, &str>,
        authenticated: bool,
        reply: Reply,
    ) -> bool {
        let is_session = path == SESSION_PATH;
        if !is_session && path != END_PATH {
            return false;
        }
        let mut s = lock(&self.state);
        let refuse = |s: &mut State, why: LoadRefusal, message: String, reply: Reply| {
            *s.counts.refused.entry(why).or_insert(0) += 1;
            let _ = reply(why.status(), Refused::json(why, message));
        };
        if !s.config.responder {
            refuse(
                &mut s,
                LoadRefusal::Disabled,
                "load_test.responder is off".into(),
                reply,
            );
            return true;
        }
        if !authenticated {
            refuse(
                &mut s,
                LoadRefusal::Unauthenticated,
                "load tests are started only over TLS with authentication (--web.config.file: basic_auth_users or a verified client certificate)".into(),
                reply,
            );
            return true;
        }
        let query = match query {
            Ok(q) => q,
            Err(why) => {
                refuse(&mut s, LoadRefusal::Malformed, why.into(), reply);
                return true;
            }
        };
        if !is_session {
            match parse_end(query) {
                Err(e) => refuse(&mut s, LoadRefusal::Malformed, e, reply),
                Ok(id) => match s.sessions.values_mut().find(|x| x.id == id) {
                    None => refuse(
                        &mut s,
                        LoadRefusal::UnknownSession,
                        "no session with that id runs".into(),
                        reply,
                    ),
                    Some(x) => {
                        x.stop.store(true, Ordering::SeqCst);
                        if let Some(w) = &x.waker {
                            w.wake();
                        }
                        x.enders.push(reply);
                    }
                },
            }
            return true;
        }
        let request = match parse_session(query) {
            Ok(r) => r,
            Err(e) => {
                refuse(&mut s, LoadRefusal::Malformed, e, reply);
                return true;
            }
        };
        let index = match admit(&request.qps.gid, &s.ports, s.config.allow_link_local) {
            Ok(i) => i,
            Err(why) => {
                let m = format!("requester GID {} is not admitted", request.qps.gid);
                refuse(&mut s, why, m, reply);
                return true;
            }
        };
        let port = s.ports[index].clone();
        let cap_seconds = s.config.max_seconds.as_secs();
        if u64::from(request.seconds) > cap_seconds || request.bytes > s.config.max_bytes {
            let m = format!(
                "asked for {} s and {} bytes; at most {cap_seconds} s and {} bytes (load_test.max_seconds, max_bytes)",
                request.seconds, request.bytes, s.config.max_bytes
            );
            refuse(&mut s, LoadRefusal::OverCap, m, reply);
            return true;
        }
        let key = (port.device.clone(), port.port);
        if s.sessions.contains_key(&key) {
            let m = format!("a load test already runs on {} port {}", key.0, key.1);
            refuse(&mut s, LoadRefusal::Busy, m, reply);
            return true;
        }
        if !request.force {
            if let Some(m) = loaded(&port, s.config.max_busy_share) {
                refuse(&mut s, LoadRefusal::PortLoaded, m, reply);
                return true;
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let id = random_id();
        s.sessions.insert(
            key.clone(),
            Session {
                id: id.clone(),
                stop: stop.clone(),
                waker: None,
                enders: Vec::new(),
            },
        );
        let memory = match (&port.gpu, s.config.gpu) {
            (Some(pci), true) => MemoryWanted::Gpu {
                pci_address: pci.clone(),
            },
            _ => MemoryWanted::Host,
        };
        let job = Job {
            verbs: self.verbs.clone(),
            state: self.state.clone(),
            node: self.node.clone(),
            spec: PortSpec {
                device: port.device.clone(),
                port: port.port,
                gid_index: port.gid_index,
                traffic_class: port.traffic_class,
                qps: request.qps.qpns.len() as u32,
                depth: MAX_DEPTH,
                buffer_bytes: request.message,
                memory,
            },
            request,
            key,
            id,
            stop,
            silence: self.silence,
        };
        drop(s);
        let spawned = std::thread::Builder::new()
            .name(format!("roce-load-{}-{}", port.device, port.port))
            .spawn(move || job.run(reply));
        if let Err(e) = spawned {
            // The reply went with the closure: the server answers 503.
            let mut s = lock(&self.state);
            s.sessions.remove(&(port.device.clone(), port.port));
            *s.counts
                .refused
                .entry(LoadRefusal::SetupFailed)
                .or_insert(0) += 1;
            tracing::warn!(error = %e, "cannot start a load-test session thread");
        }
        true
    }
}

impl<V: LoadVerbs + 'static> Drop for LoadResponder<V> {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn stop_all(s: &mut State) {
    for x in s.sessions.values() {
        x.stop.store(true, Ordering::SeqCst);
        if let Some(w) = &x.waker {
            w.wake();
        }
    }
}

/// Why the port is too busy to load, if it is.
fn loaded(port: &LocalLoadPort, share: f64) -> Option<String> {
    match (port.carried_bytes_per_second, port.rate_bytes_per_second) {
        (Some(c), Some(r)) if r > 0.0 && c > share * r => Some(format!(
            "{} port {} carries {:.1}% of its line rate (above load_test.max_busy_share {:.0}%); a running job is not disturbed unless the request is forced",
            port.device,
            port.port,
            100.0 * c / r,
            100.0 * share
        )),
        (Some(_), Some(_)) => None,
        _ => Some(format!(
            "{} port {}: what it carries is not measured yet, so a running job cannot be ruled out; force the request to load it anyway",
            port.device, port.port
        )),
    }
}

/// One session's thread.
struct Job<V: LoadVerbs> {
    verbs: Arc<V>,
    state: Arc<Mutex<State>>,
    node: String,
    spec: PortSpec,
    request: SessionRequest,
    key: (String, u8),
    id: String,
    stop: Arc<AtomicBool>,
    silence: (Duration, Duration),
}

impl<V: LoadVerbs> Job<V> {
    fn run(self, reply: Reply) {
        let report = match self.start() {
            Ok((mut port, grant)) => {
                {
                    let mut s = lock(&self.state);
                    if let Some(x) = s.sessions.get_mut(&self.key) {
                        x.waker = Some(roce_probe::load::Receiver::waker(&port));
                    }
                }
                let delivered = reply(
                    200,
                    serde_json::to_string(&grant).unwrap_or_default() + "\n",
                );
                if !delivered {
                    // Nobody holds the grant (the requester closed its
                    // connection, or the server stopped waiting): nobody
                    // can use or end the session, so it ends at once.
                    self.stop.store(true, Ordering::SeqCst);
                }
                let limits = ServeLimits {
                    deadline: Duration::from_secs(u64::from(grant.seconds)),
                    max_bytes: grant.bytes,
                    first_message: self.silence.0,
                    idle: self.silence.1,
                };
                let report = serve(&mut port, MAX_DEPTH, &limits, &self.stop);
                drop(port);
                report
            }
            Err(e) => {
                // The port is free again before the requester hears why
                // (nobody knows the session's id: no end request waits).
                let mut s = lock(&self.state);
                s.sessions.remove(&self.key);
                *s.counts
                    .refused
                    .entry(LoadRefusal::SetupFailed)
                    .or_insert(0) += 1;
                drop(s);
                tracing::warn!(device = %self.key.0, port = self.key.1, error = %e, "load-test session set-up failed");
                let _ = reply(
                    LoadRefusal::SetupFailed.status(),
                    Refused::json(LoadRefusal::SetupFailed, e),
                );
                return;
            }
        };
        self.finish(report);
    }

    fn start(&self) -> Result<(V::Receiver, Grant), String> {
        let mut port = self.verbs.receiver(&self.spec).map_err(|e| match e {
            roce_probe::verbs::OpenError::Unavailable(w) => w,
            roce_probe::verbs::OpenError::Failed(f) => f.to_string(),
        })?;
        port.connect(&self.request.qps, None)
            .map_err(|f| f.to_string())?;
        let window = port
            .window()
            .ok_or_else(|| "no registered window".to_string())?;
        let memory = match port.memory() {
            MemoryUsed::Gpu { .. } => "gpu",
            MemoryUsed::Host { .. } => "host",
        };
        let grant = Grant {
            version: VERSION,
            session: self.id.clone(),
            node: self.node.clone(),
            device: self.spec.device.clone(),
            port: self.spec.port,
            qps: port.local(),
            window,
            seconds: self.request.seconds,
            bytes: self.request.bytes,
            memory: memory.into(),
        };
        Ok((port, grant))
    }

    fn finish(self, r: ServeReport) {
        let mut s = lock(&self.state);
        let enders = s
            .sessions
            .remove(&self.key)
            .map(|x| x.enders)
            .unwrap_or_default();
        *s.counts.sessions.entry(r.ended.as_str()).or_insert(0) += 1;
        s.counts.bytes = s.counts.bytes.saturating_add(r.bytes);
        drop(s);
        tracing::info!(device = %self.key.0, port = self.key.1, bytes = r.bytes, ended = r.ended.as_str(), "load-test session ended");
        let body = serde_json::to_string(&EndReport {
            version: VERSION,
            bytes: r.bytes,
            messages: r.messages,
            ended: r.ended.as_str().into(),
            active_seconds: r.active_seconds,
        })
        .unwrap_or_default()
            + "\n";
        for reply in enders {
            let _ = reply(200, body.clone());
        }
    }
}

#[cfg(test)]
mod tests;
