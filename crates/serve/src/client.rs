//! A Rust client for `offload serve` (the Python one is `offload.serve.Client`).
//!
//! ```no_run
//! use offload_serve::client::{Client, Query};
//! let mut c = Client::connect("tcp://127.0.0.1:5555")?;
//! // one column per criterion, in the order of `criteria` (the server's rule-type order: the
//! // request carries their fingerprint and the server refuses columns in another order)
//! let criteria = ["CTN_TYPE", "APT"];
//! let columns = vec![vec!["II"], vec!["LHR"]];
//! let reply = c.call(Query::raw(&criteria, &columns))?;
//! println!("{:?} {:?} version {}", reply.status, reply.content, reply.ruleset_version);
//! # Ok::<(), offload_serve::client::ClientError>(())
//! ```
//! One request is in flight at a time. The socket is a DEALER: ZeroMQ reconnects by itself, so
//! a client outlives a daemon restart; a reply that does not come within the timeout is an
//! error, and a late one is skipped by its request id.

pub use crate::auth::CurveClient;
use crate::protocol::{self, Payload, RawColumnOwned, Reply, Request};
use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug)]
pub enum ClientError {
    /// ZeroMQ refused (bad endpoint, closed context).
    Zmq(String),
    /// No reply within the timeout.
    Timeout(Duration),
    /// The daemon sent something that is not a reply frame.
    BadReply(String),
    /// The request cannot be expressed (e.g. a column over 4 GiB, ragged columns).
    BadRequest(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Zmq(e) => write!(f, "zeromq: {e}"),
            ClientError::Timeout(d) => write!(f, "no reply within {:.3} s", d.as_secs_f64()),
            ClientError::BadReply(e) => write!(f, "unreadable reply: {e}"),
            ClientError::BadRequest(e) => write!(f, "cannot build the request: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// The queries of one request and how to answer them.
#[derive(Debug, Clone)]
pub struct Query {
    payload: Payload,
    n_queries: usize,
    n_criteria: usize,
    criteria_fingerprint: u64,
    /// Answer once this many queries matched (0 = all): the seed's early stop.
    pub stop_after: u32,
    /// Give up (server side) if not executed within this time from sending.
    pub deadline: Option<Duration>,
}

impl Query {
    /// Raw values: one column per criterion of `criteria` (names, in the server's rule-type
    /// order), all of the same length. The request carries the names' fingerprint
    /// ([`protocol::criteria_fingerprint`]): columns in another order are refused, not misread.
    pub fn raw<N: AsRef<str>, S: AsRef<str>>(criteria: &[N], columns: &[Vec<S>]) -> Query {
        let n = columns.first().map_or(0, Vec::len);
        let cols = columns
            .iter()
            .map(|col| {
                let mut offsets = Vec::with_capacity(col.len() + 1);
                let mut data = Vec::new();
                offsets.push(0u32);
                for v in col {
                    data.extend_from_slice(v.as_ref().as_bytes());
                    offsets.push(data.len() as u32);
                }
                RawColumnOwned { offsets, data }
            })
            .collect();
        Query {
            payload: Payload::Raw(cols),
            n_queries: n,
            n_criteria: criteria.len(),
            criteria_fingerprint: protocol::criteria_fingerprint(criteria),
            stop_after: 0,
            deadline: None,
        }
    }

    /// Rows encoded in process (`Engine::encoder`) against the rule-set version the server
    /// serves; `codes.len()` must be a multiple of `width`. `criteria_fingerprint`: of the rule
    /// type the rows were encoded with ([`protocol::rule_type_fingerprint`]).
    pub fn encoded(criteria_fingerprint: u64, encoding_version: u64, width: u16, codes: Vec<u32>) -> Query {
        let n = if width == 0 { 0 } else { codes.len() / width as usize };
        Query {
            payload: Payload::Encoded { encoding_version, width, codes },
            n_queries: n,
            n_criteria: 0, // not checked here: the server checks the fingerprint and width
            criteria_fingerprint,
            stop_after: 0,
            deadline: None,
        }
    }

    pub fn stop_after(mut self, n: u32) -> Query {
        self.stop_after = n;
        self
    }

    pub fn deadline(mut self, d: Duration) -> Query {
        self.deadline = Some(d);
        self
    }

    fn check(&self) -> Result<(), ClientError> {
        match &self.payload {
            Payload::Raw(cols) => {
                if cols.len() != self.n_criteria {
                    return Err(ClientError::BadRequest(format!(
                        "{} columns for {} criteria",
                        cols.len(),
                        self.n_criteria
                    )));
                }
                if let Some(c) = cols.iter().find(|c| c.offsets.len() != self.n_queries + 1) {
                    return Err(ClientError::BadRequest(format!(
                        "columns differ in length ({} and {} values)",
                        self.n_queries,
                        c.offsets.len() - 1
                    )));
                }
                if cols.iter().any(|c| c.data.len() > u32::MAX as usize) {
                    return Err(ClientError::BadRequest("a column holds more than 4 GiB of text".into()));
                }
            }
            Payload::Encoded { width, codes, .. } => check_rows(*width, codes.len())?,
            Payload::Encoded16 { width, codes, .. } => check_rows(*width, codes.len())?,
        }
        if self.n_queries > u32::MAX as usize {
            return Err(ClientError::BadRequest("more than 2^32 - 1 queries in one request".into()));
        }
        Ok(())
    }
}

/// Encoded codes must be whole rows of `width`.
fn check_rows(width: u16, n_codes: usize) -> Result<(), ClientError> {
    if width == 0 || !n_codes.is_multiple_of(width as usize) {
        return Err(ClientError::BadRequest(format!("{n_codes} codes are not whole rows of width {width}")));
    }
    Ok(())
}

pub struct Client {
    _ctx: zmq::Context,
    sock: zmq::Socket,
    next_id: u64,
    /// How long [`Client::call`] waits for a reply.
    pub timeout: Duration,
}

impl Client {
    /// Connects a DEALER socket to `endpoint` (tcp://, ipc://); the daemon need not be up yet.
    pub fn connect(endpoint: &str) -> Result<Client, ClientError> {
        Client::connect_with(endpoint, None)
    }

    /// Connects with CURVE when the daemon's data endpoints require it (`curve_data_clients`):
    /// `curve` holds the server's public key and this client's key pair
    /// ([`CurveClient::from_files`]). A key the daemon does not admit shows as a timeout.
    pub fn connect_with(endpoint: &str, curve: Option<&CurveClient>) -> Result<Client, ClientError> {
        let (ctx, sock) = socket(zmq::DEALER, endpoint, curve)?;
        Ok(Client { _ctx: ctx, sock, next_id: 1, timeout: Duration::from_secs(10) })
    }

    /// Sends one request and waits for its reply (whatever its status: check `reply.status`).
    pub fn call(&mut self, query: Query) -> Result<Reply, ClientError> {
        query.check()?;
        let id = self.next_id;
        self.next_id += 1;
        let deadline_us = query.deadline.map_or(0, |d| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            (now + d).as_micros() as u64
        });
        let req = Request {
            request_id: id,
            deadline_us,
            stop_after: query.stop_after,
            n_queries: query.n_queries as u32,
            criteria_fingerprint: query.criteria_fingerprint,
            payload: query.payload,
        };
        self.sock.send(protocol::encode_request(&req), 0).map_err(|e| ClientError::Zmq(e.to_string()))?;
        let until = Instant::now() + self.timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let ready =
                self.sock.poll(zmq::POLLIN, left.as_millis() as i64).map_err(|e| ClientError::Zmq(e.to_string()))?;
            if ready == 0 {
                return Err(ClientError::Timeout(self.timeout));
            }
            let frame = self.sock.recv_bytes(0).map_err(|e| ClientError::Zmq(e.to_string()))?;
            let reply = protocol::decode_reply(&frame).map_err(|e| ClientError::BadReply(e.to_string()))?;
            if reply.request_id == id {
                return Ok(reply);
            }
            // A late reply to a request that already timed out: skip it.
        }
    }
}

/// A connected socket of `kind` in a context of its own, with CURVE when given.
fn socket(
    kind: zmq::SocketType,
    endpoint: &str,
    curve: Option<&CurveClient>,
) -> Result<(zmq::Context, zmq::Socket), ClientError> {
    let ctx = zmq::Context::new();
    let sock = ctx.socket(kind).map_err(|e| ClientError::Zmq(e.to_string()))?;
    sock.set_linger(0).map_err(|e| ClientError::Zmq(e.to_string()))?;
    if let Some(c) = curve {
        c.apply(&sock).map_err(ClientError::Zmq)?;
    }
    sock.connect(endpoint).map_err(|e| ClientError::Zmq(format!("connect {endpoint}: {e}")))?;
    Ok((ctx, sock))
}

/// Sends one command to the daemon's control socket and returns its JSON answer: `frames` is
/// the command (`stats`, `set batch_max_queries 4096`, `reload\nT\nR`, or `reload-inline\nT\nR`
/// followed by the two files' bytes). With CURVE, a refused key shows as a timeout.
pub fn control(
    endpoint: &str,
    frames: &[&[u8]],
    curve: Option<&CurveClient>,
    timeout: Duration,
) -> Result<serde_json::Value, ClientError> {
    let (_ctx, sock) = socket(zmq::REQ, endpoint, curve)?;
    sock.send_multipart(frames.iter().copied(), 0).map_err(|e| ClientError::Zmq(e.to_string()))?;
    let ready = sock.poll(zmq::POLLIN, timeout.as_millis() as i64).map_err(|e| ClientError::Zmq(e.to_string()))?;
    if ready == 0 {
        return Err(ClientError::Timeout(timeout));
    }
    let answer = sock.recv_bytes(0).map_err(|e| ClientError::Zmq(e.to_string()))?;
    serde_json::from_slice(&answer).map_err(|e| ClientError::BadReply(e.to_string()))
}
