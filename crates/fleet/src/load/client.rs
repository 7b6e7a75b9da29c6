//! The requester's side of `check --load`: for each local port, open its
//! queue pairs, ask the peers in turn for a session on the port's rail
//! until one grants it, connect; then run every prepared port's stream at
//! once (threads started together behind a barrier, so that "all rails at
//! once" loads them together), and end each session with the responder's
//! own count beside the requester's.
//!
//! The three steps are apart so that the caller reads the port counters
//! between them: after [`prepare`] (nothing written yet) and after
//! [`run`] (everything written).

use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use roce_probe::load::stream::{self, StreamPlan, StreamReport, DEFAULT_STALL};
use roce_probe::load::{Connect, LoadVerbs, MemoryUsed, MemoryWanted, PortSpec};

use super::wire::{
    session_query, EndReport, Grant, Refused, SessionRequest, END_PATH, MAX_ANSWER_BYTES,
    SESSION_PATH,
};
use super::LocalLoadPort;
use crate::peer_endpoints::DocumentFetcher;
use crate::peer_http::{ClientError, HttpClient, Request};
use crate::peer_list::PeerAddress;

/// What `check --load` runs per port.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadPlan {
    pub sizes: Vec<u64>,
    pub per_size: Duration,
    pub qps: u32,
    pub depth: u32,
    /// Ask responders to load a port that carries traffic.
    pub force: bool,
    /// Use GPU memory where a port has a GPU beside it.
    pub gpu: bool,
}

impl LoadPlan {
    /// Seconds asked of a responder: every size, a stall's time after
    /// each, and room for the counters read before the first.
    pub fn seconds(&self) -> u32 {
        let per = self.per_size + DEFAULT_STALL;
        let total = per * self.sizes.len() as u32 + Duration::from_secs(10);
        u32::try_from(total.as_secs()).unwrap_or(u32::MAX)
    }

    /// Bytes asked of a responder: 10 % above what the line rate carries
    /// in the streams' time; 1 TB when the rate is not known.
    pub fn bytes(&self, rate_bytes_per_second: Option<f64>) -> u64 {
        let t = self.per_size.as_secs_f64() * self.sizes.len() as f64;
        match rate_bytes_per_second {
            Some(r) if r > 0.0 => (r * t * 1.1).min(u64::MAX as f64) as u64,
            _ => 1_000_000_000_000,
        }
    }
}

/// Why a responder did not grant a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{peer}: {message}")]
pub struct ControlError {
    pub peer: String,
    /// The responder's refusal reason, when it answered one.
    pub refused: Option<String>,
    pub message: String,
}

/// How the requester reaches responders: HTTP ([`HttpControl`]), or the
/// responder in process in the tests.
pub trait Control: Send + Sync {
    fn start(&self, peer: &str, request: &SessionRequest) -> Result<Grant, ControlError>;
    fn end(&self, peer: &str, session: &str) -> Result<EndReport, ControlError>;
}

/// The control exchange over the peers' HTTP servers, with the peer
/// probes' TLS and credentials (never over plain http).
#[derive(Debug, Clone)]
pub struct HttpControl {
    client: HttpClient,
    scheme: &'static str,
}

impl HttpControl {
    pub fn new(config: &crate::config::PeerProbeConfig) -> Result<Self, ClientError> {
        let fetcher = DocumentFetcher::new(config)?;
        let scheme = if fetcher.default_tls() {
            "https"
        } else {
            "http"
        };
        Ok(HttpControl {
            client: fetcher.client,
            scheme,
        })
    }

    fn post(&self, peer: &str, path: &str) -> Result<(u16, Vec<u8>), ControlError> {
        let fail = |message: String| ControlError {
            peer: peer.to_string(),
            refused: None,
            message,
        };
        let url = PeerAddress::parse(peer, self.scheme)
            .and_then(|a| a.url())
            .ok_or_else(|| fail("not a host:port or http(s) address".into()))?;
        self.client
            .post(
                &url,
                &Request {
                    path,
                    accept: "application/json",
                    max_body: MAX_ANSWER_BYTES,
                    gzip: false,
                },
            )
            .map_err(|e| fail(e.to_string()))
    }

    /// A 200 answer as `T`, or the refusal it is.
    fn answer<T: serde::de::DeserializeOwned>(
        peer: &str,
        (status, body): (u16, Vec<u8>),
    ) -> Result<T, ControlError> {
        if status == 200 {
            return serde_json::from_slice(&body).map_err(|e| ControlError {
                peer: peer.to_string(),
                refused: None,
                message: format!("unreadable answer: {e}"),
            });
        }
        let refused: Option<Refused> = serde_json::from_slice(&body).ok();
        Err(ControlError {
            peer: peer.to_string(),
            message: match &refused {
                Some(r) => format!("refused ({}): {}", r.refused, r.message),
                None => format!("HTTP {status} (no load-test responder there?)"),
            },
            refused: refused.map(|r| r.refused),
        })
    }
}

impl Control for HttpControl {
    fn start(&self, peer: &str, request: &SessionRequest) -> Result<Grant, ControlError> {
        let path = format!("{SESSION_PATH}?{}", session_query(request));
        HttpControl::answer(peer, self.post(peer, &path)?)
    }

    fn end(&self, peer: &str, session: &str) -> Result<EndReport, ControlError> {
        let path = format!("{END_PATH}?session={session}");
        HttpControl::answer(peer, self.post(peer, &path)?)
    }
}

/// A port ready to stream: its queue pairs connected to a granted session.
pub struct Prepared<R> {
    pub port: LocalLoadPort,
    pub peer: String,
    pub grant: Grant,
    pub memory: MemoryUsed,
    requester: R,
}

/// A port that could not be prepared, and why (each peer's answer).
#[derive(Debug, Clone, PartialEq)]
pub struct NotPrepared {
    pub port: Box<LocalLoadPort>,
    pub why: String,
}

/// Opens `port`'s queue pairs and asks `peers` in turn for a session.
pub fn prepare<V: LoadVerbs, C: Control + ?Sized>(
    verbs: &V,
    control: &C,
    port: &LocalLoadPort,
    peers: &[String],
    plan: &LoadPlan,
) -> Result<Prepared<V::Requester>, NotPrepared> {
    let not = |why: String| NotPrepared {
        port: Box::new(port.clone()),
        why,
    };
    let largest = plan.sizes.iter().copied().max().unwrap_or(1 << 20);
    let spec = PortSpec {
        device: port.device.clone(),
        port: port.port,
        gid_index: port.gid_index,
        traffic_class: port.traffic_class,
        qps: plan.qps,
        depth: plan.depth,
        buffer_bytes: largest,
        memory: match (&port.gpu, plan.gpu) {
            (Some(pci), true) => MemoryWanted::Gpu {
                pci_address: pci.clone(),
            },
            _ => MemoryWanted::Host,
        },
    };
    let mut requester = verbs.requester(&spec).map_err(|e| {
        not(match e {
            roce_probe::verbs::OpenError::Unavailable(w) => w,
            roce_probe::verbs::OpenError::Failed(f) => f.to_string(),
        })
    })?;
    let request = SessionRequest {
        qps: requester.local(),
        seconds: plan.seconds(),
        bytes: plan.bytes(port.rate_bytes_per_second),
        message: largest,
        force: plan.force,
    };
    if peers.is_empty() {
        return Err(not(
            "no peer to ask (peer_probes peers, or --peer HOST[:PORT])".into(),
        ));
    }
    let mut answers = Vec::new();
    for peer in peers {
        let grant = match control.start(peer, &request) {
            Ok(g) => g,
            Err(e) => {
                answers.push(e.to_string());
                continue;
            }
        };
        if let Err(f) = requester.connect(&grant.qps, Some(grant.window)) {
            let _ = control.end(peer, &grant.session);
            answers.push(format!("{peer}: connecting the queue pairs: {f}"));
            continue;
        }
        return Ok(Prepared {
            port: port.clone(),
            peer: peer.clone(),
            memory: requester.memory(),
            grant,
            requester,
        });
    }
    Err(not(answers.join("; ")))
}

/// The stream plan of a prepared port: the plan, within its grant.
pub fn stream_plan(plan: &LoadPlan, grant: &Grant) -> StreamPlan {
    StreamPlan {
        sizes: plan.sizes.clone(),
        per_size: plan.per_size,
        depth: plan.depth,
        max_bytes: grant.bytes,
        stall: DEFAULT_STALL,
    }
}

/// Runs every prepared port's stream at once; the reports in order.
pub fn run<R: roce_probe::load::Requester>(
    prepared: &mut [Prepared<R>],
    plan: &LoadPlan,
    stop: &AtomicBool,
) -> Vec<StreamReport> {
    // Opened once every thread is started (or failed to start), so that
    // the streams begin together and a thread that did not start holds
    // nobody back.
    let gate = (Mutex::new(false), Condvar::new());
    std::thread::scope(|scope| {
        let handles: Vec<_> = prepared
            .iter_mut()
            .map(|p| {
                let gate = &gate;
                let plan = stream_plan(plan, &p.grant);
                let requester = &mut p.requester;
                std::thread::Builder::new()
                    .name(format!("roce-load-{}", p.port.device))
                    .spawn_scoped(scope, move || {
                        let (open, cv) = gate;
                        let mut g = open.lock().unwrap_or_else(|e| e.into_inner());
                        while !*g {
                            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
                        }
                        drop(g);
                        stream::run(requester, &plan, stop)
                    })
            })
            .collect();
        *gate.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        gate.1.notify_all();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| failed("the stream thread panicked")),
                Err(e) => failed(&format!("cannot start the stream thread: {e}")),
            })
            .collect()
    })
}

fn failed(why: &str) -> StreamReport {
    StreamReport {
        sizes: Vec::new(),
        bytes: 0,
        failure: Some(roce_probe::Failure::new(roce_probe::Reason::Internal, why)),
        elapsed: Duration::ZERO,
    }
}

/// Ends each session (the responder's count, or why not) and releases
/// the local queue pairs.
pub fn finish<R, C: Control + ?Sized>(
    prepared: Vec<Prepared<R>>,
    control: &C,
) -> Vec<Result<EndReport, ControlError>> {
    prepared
        .into_iter()
        .map(|p| {
            let end = control.end(&p.peer, &p.grant.session);
            drop(p.requester);
            end
        })
        .collect()
}
