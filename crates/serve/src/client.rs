//! The client of `offload serve`, in Rust; Python's `offload.serve.Client` and `AsyncClient` wrap
//! it (`crates/py/src/serve_client.rs`), so there is one request path.
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
//! error, and a late one is skipped by its request id. Tools that build frames themselves use
//! [`Client::next_id`], [`Client::send_frame`] and [`Client::receive_frame`]; many requests in
//! flight on one connection (an event loop's client) go through [`Multiplexed`].
//!
//! [`EncodingClient`] encodes queries itself, with the server's dictionary (fetched once per
//! rule-set version, [`Client::fetch_dictionary`]), and sends codes instead of text:
//!
//! ```no_run
//! use offload_serve::client::{Client, EncodingClient};
//! let mut c = EncodingClient::new(Client::connect("tcp://127.0.0.1:5555")?);
//! let columns = vec![vec!["II"], vec!["LHR"]]; // in the order of c.criteria()?
//! let reply = c.call(&columns)?;
//! # Ok::<(), offload_serve::client::ClientError>(())
//! ```

pub use crate::auth::CurveClient;
use crate::protocol::{self, DictionaryReply, Payload, RawColumnOwned, Reply, Request, Status};
use offload_rules::{Encoder, EncoderDictionary, RawColumn};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
pub enum ClientError {
    /// ZeroMQ refused (bad endpoint, closed context).
    Zmq(String),
    /// No reply within the timeout.
    Timeout(Duration),
    /// The daemon sent something that is not a reply frame.
    BadReply(String),
    /// The request cannot be expressed (e.g. a column over 4 GiB, ragged columns).
    BadRequest(String),
    /// The shared-memory transport (`shm://`) failed: no daemon there, no permission, the
    /// daemon closed the connection, a frame too large for the ring.
    Shm(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Zmq(e) => write!(f, "zeromq: {e}"),
            ClientError::Timeout(d) => write!(f, "no reply within {:.3} s", d.as_secs_f64()),
            ClientError::BadReply(e) => write!(f, "unreadable reply: {e}"),
            ClientError::BadRequest(e) => write!(f, "cannot build the request: {e}"),
            ClientError::Shm(e) => write!(f, "shared memory: {e}"),
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
    transport: Transport,
    next_id: u64,
    /// How long [`Client::call`] waits for a reply.
    pub timeout: Duration,
}

/// How a client reaches the daemon: a DEALER socket, or shared memory (`shm://`).
enum Transport {
    Zmq { _ctx: zmq::Context, sock: zmq::Socket },
    Shm(crate::shm::Connection),
}

impl Client {
    /// Connects to `endpoint`: tcp:// or ipc:// (a DEALER socket; the daemon need not be up
    /// yet), or shm://NAME (shared memory with a daemon on this host; it must be serving).
    pub fn connect(endpoint: &str) -> Result<Client, ClientError> {
        Client::connect_with(endpoint, None)
    }

    /// Connects with CURVE when the daemon's data endpoints require it (`curve_data_clients`):
    /// `curve` holds the server's public key and this client's key pair
    /// ([`CurveClient::from_files`]). A key the daemon does not admit shows as a timeout.
    /// (`shm://` takes no keys: the socket file's mode decides who may connect.)
    pub fn connect_with(endpoint: &str, curve: Option<&CurveClient>) -> Result<Client, ClientError> {
        let timeout = Duration::from_secs(10);
        let transport = if endpoint.starts_with("shm://") {
            let c = crate::shm::Connection::connect(endpoint, timeout).map_err(|e| shm_error(e, timeout))?;
            Transport::Shm(c)
        } else {
            let (ctx, sock) = socket(zmq::DEALER, endpoint, curve)?;
            Transport::Zmq { _ctx: ctx, sock }
        };
        Ok(Client { transport, next_id: 1, timeout })
    }

    /// Sends one frame by `until`.
    fn send(&mut self, frame: &[u8], until: Instant) -> Result<(), ClientError> {
        match &mut self.transport {
            Transport::Zmq { sock, .. } => send_within(sock, &[frame], until, self.timeout),
            Transport::Shm(c) => c.send(frame, until).map_err(|e| shm_error(e, self.timeout)),
        }
    }

    /// Asks the daemon for the encoding dictionary of the rule-set version it serves now
    /// (`reply.dictionary`: [`EncoderDictionary::to_bytes`]; `reply.code_bits`: 16 when
    /// 16-bit codes will do). [`EncodingClient`] does this for you.
    pub fn fetch_dictionary(&mut self) -> Result<DictionaryReply, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let until = Instant::now() + self.timeout;
        self.send(&protocol::encode_dictionary_request(id), until)?;
        self.receive(until, |frame| {
            // A late reply to an earlier query is skipped, as any late reply.
            if frame.starts_with(protocol::REPLY_MAGIC) {
                return Ok(None);
            }
            let r = protocol::decode_dictionary_reply(frame).map_err(|e| ClientError::BadReply(e.to_string()))?;
            Ok((r.request_id == id).then_some(r))
        })
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
        let until = Instant::now() + self.timeout;
        self.send(&protocol::encode_request(&req), until)?;
        self.receive(until, |frame| {
            if frame.starts_with(protocol::DICTIONARY_REPLY_MAGIC) {
                return Ok(None); // a late dictionary reply
            }
            let reply = protocol::decode_reply(frame).map_err(|e| ClientError::BadReply(e.to_string()))?;
            Ok((reply.request_id == id).then_some(reply))
        })
    }

    /// A fresh request id: tools that build frames themselves take theirs here, so that the
    /// client still tells a late reply from the one awaited.
    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Sends a prebuilt frame (a request or a dictionary request, its id at bytes 4..12, e.g.
    /// from [`Client::next_id`]) within the timeout; read the answer with [`Client::receive_frame`].
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), ClientError> {
        self.send(frame, Instant::now() + self.timeout)
    }

    /// Waits until `until` for the next reply frame of `kind` with request id `id` (any id when
    /// `None`) and returns its bytes, skipping the others (late replies to requests that timed
    /// out, the other kind's replies).
    pub fn receive_frame(&mut self, kind: ReplyKind, id: Option<u64>, until: Instant) -> Result<Vec<u8>, ClientError> {
        self.receive(until, |frame| Ok(kind.takes(frame, id).then(|| frame.to_vec())))
    }

    /// Drops the connection to `endpoint` (ZeroMQ only): the DEALER then has nowhere to send,
    /// the state a connection closed mid-handshake leaves; for tests of the send deadline.
    pub fn disconnect(&mut self, endpoint: &str) -> Result<(), ClientError> {
        match &self.transport {
            Transport::Zmq { sock, .. } => sock.disconnect(endpoint).map_err(|e| ClientError::Zmq(e.to_string())),
            Transport::Shm(_) => Err(ClientError::Shm("a shm:// connection has no endpoint to drop".into())),
        }
    }

    /// Waits until `until` (the request's deadline, sending included) for the frame `read` takes
    /// (`Some`), skipping the others: late replies to requests that already timed out.
    fn receive<T>(
        &mut self,
        until: Instant,
        mut read: impl FnMut(&[u8]) -> Result<Option<T>, ClientError>,
    ) -> Result<T, ClientError> {
        loop {
            let frame = match &mut self.transport {
                Transport::Shm(c) => {
                    // Read in place in the reply ring.
                    let t = c.recv(until, &mut read).map_err(|e| shm_error(e, self.timeout))?;
                    match t? {
                        Some(t) => return Ok(t),
                        None => continue,
                    }
                }
                Transport::Zmq { sock, .. } => {
                    let left = until.saturating_duration_since(Instant::now());
                    let ready =
                        sock.poll(zmq::POLLIN, left.as_millis() as i64).map_err(|e| ClientError::Zmq(e.to_string()))?;
                    if ready == 0 {
                        return Err(ClientError::Timeout(self.timeout));
                    }
                    sock.recv_bytes(0).map_err(|e| ClientError::Zmq(e.to_string()))?
                }
            };
            if let Some(t) = read(&frame)? {
                return Ok(t);
            }
        }
    }
}

/// Which reply frames [`Client::receive_frame`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// Replies to requests (`OFR1`).
    Reply,
    /// Replies to dictionary requests (`OFDR`).
    Dictionary,
}

impl ReplyKind {
    /// Whether `frame` is of this kind and, when `id` is given, answers that request.
    fn takes(self, frame: &[u8], id: Option<u64>) -> bool {
        let magic = match self {
            ReplyKind::Reply => protocol::REPLY_MAGIC,
            ReplyKind::Dictionary => protocol::DICTIONARY_REPLY_MAGIC,
        };
        frame.starts_with(magic) && id.is_none_or(|id| frame_id(frame) == Some(id))
    }
}

/// The request id a reply frame carries (bytes 4..12), if it is long enough to carry one.
fn frame_id(frame: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(frame.get(4..12)?.try_into().ok()?))
}

/// A shared-memory failure as a client error (a timeout is a timeout, as with ZeroMQ).
fn shm_error(e: crate::shm::ShmError, timeout: Duration) -> ClientError {
    match e {
        crate::shm::ShmError::Timeout => ClientError::Timeout(timeout),
        e => ClientError::Shm(e.to_string()),
    }
}

/// The dictionary of one rule-set version, ready to encode with.
struct Cached {
    version: u64,
    fingerprint: u64,
    code_bits: u8,
    criteria: Vec<String>,
    encoder: Encoder,
}

/// A client that encodes queries itself: it fetches the server's encoding dictionary
/// ([`Client::fetch_dictionary`]), keeps it with its rule-set version, encodes raw columns
/// locally ([`Encoder::from_dictionary`]: the server's codes) and sends 16-bit codes where every
/// code fits (layout 2), else 32-bit ones. When the server has reloaded meanwhile, it answers
/// the old version's codes `BadRequest` (never with an answer from another version's codes):
/// the client then fetches the new dictionary once and sends again.
pub struct EncodingClient {
    client: Client,
    cache: Option<Cached>,
    /// Codes on the wire: `Some(32)` forces 32-bit codes; `None` (default) uses 16 where the
    /// dictionary allows.
    pub code_bits: Option<u8>,
    /// How many dictionaries were fetched (the first, then one per version change seen).
    pub fetches: u64,
}

impl EncodingClient {
    pub fn new(client: Client) -> EncodingClient {
        EncodingClient { client, cache: None, code_bits: None, fetches: 0 }
    }

    /// The plain client underneath (raw queries, its timeout).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The rule-set version of the dictionary held, if any.
    pub fn version(&self) -> Option<u64> {
        self.cache.as_ref().map(|c| c.version)
    }

    /// The criterion codes the columns of [`EncodingClient::call`] follow, in order (fetched
    /// with the dictionary when none is held).
    pub fn criteria(&mut self) -> Result<Vec<String>, ClientError> {
        Ok(self.cached()?.criteria.clone())
    }

    /// Fetches the dictionary of the version served now, replacing the one held.
    pub fn refresh(&mut self) -> Result<(), ClientError> {
        let r = self.client.fetch_dictionary()?;
        if r.status != Status::Ok {
            return Err(ClientError::BadReply(format!("dictionary request answered {:?}: {}", r.status, r.message)));
        }
        let d = EncoderDictionary::from_bytes(&r.dictionary).map_err(|e| ClientError::BadReply(e.to_string()))?;
        let criteria: Vec<String> = d.criterion_codes().into_iter().map(String::from).collect();
        if protocol::criteria_fingerprint(&criteria) != r.criteria_fingerprint {
            return Err(ClientError::BadReply("the dictionary's criteria do not have the reply's fingerprint".into()));
        }
        let code_bits = d.max_code_bits().max(r.code_bits);
        let encoder = Encoder::from_dictionary(d).map_err(ClientError::BadReply)?;
        self.fetches += 1;
        self.cache = Some(Cached {
            version: r.ruleset_version,
            fingerprint: r.criteria_fingerprint,
            code_bits,
            criteria,
            encoder,
        });
        Ok(())
    }

    fn cached(&mut self) -> Result<&Cached, ClientError> {
        if self.cache.is_none() {
            self.refresh()?;
        }
        Ok(self.cache.as_ref().expect("fetched"))
    }

    /// Encodes raw columns (one per criterion of [`EncodingClient::criteria`], in order) with
    /// the dictionary held (fetched if none): a query for its version. A value the encoder
    /// refuses (a bad date, say) is `BadRequest`, saying which.
    pub fn encode<S: AsRef<str>>(&mut self, columns: &[Vec<S>]) -> Result<Query, ClientError> {
        let force = self.code_bits;
        let c = self.cached()?;
        let strs: Vec<Vec<&str>> = columns.iter().map(|col| col.iter().map(|v| v.as_ref()).collect()).collect();
        let raw: Vec<RawColumn> = strs.into_iter().map(RawColumn::Str).collect();
        let codes = c.encoder.encode_columns(&raw).map_err(|e| ClientError::BadRequest(e.to_string()))?;
        let width = u16::try_from(c.encoder.width()).map_err(|_| ClientError::BadRequest("rows too wide".into()))?;
        let n = codes.len() / width as usize;
        let payload = if c.code_bits == 16 && force != Some(32) {
            Payload::Encoded16 { encoding_version: c.version, width, codes: codes.iter().map(|&x| x as u16).collect() }
        } else {
            Payload::Encoded { encoding_version: c.version, width, codes }
        };
        Ok(Query {
            payload,
            n_queries: n,
            n_criteria: columns.len(),
            criteria_fingerprint: c.fingerprint,
            stop_after: 0,
            deadline: None,
        })
    }

    /// Encodes and sends raw columns; see [`EncodingClient::call_with`].
    pub fn call<S: AsRef<str>>(&mut self, columns: &[Vec<S>]) -> Result<Reply, ClientError> {
        self.call_with(columns, |q| q)
    }

    /// Encodes `columns`, lets `tune` set the query's options (`|q| q.stop_after(10)`), sends
    /// it and returns the reply. A `BadRequest` because the server's version moved on (a hot
    /// reload) makes it fetch the new dictionary and send once more; an `Ok` reply is always
    /// from the version the codes were encoded for.
    pub fn call_with<S: AsRef<str>>(
        &mut self,
        columns: &[Vec<S>],
        tune: impl Fn(Query) -> Query,
    ) -> Result<Reply, ClientError> {
        let mut refreshed = false;
        loop {
            let query = tune(self.encode(columns)?);
            let version = self.cache.as_ref().map_or(0, |c| c.version);
            let reply = self.client.call(query)?;
            match reply.status {
                Status::Ok if reply.ruleset_version != version => {
                    return Err(ClientError::BadReply(format!(
                        "codes of version {version} answered by version {}",
                        reply.ruleset_version
                    )));
                }
                Status::BadRequest if reply.ruleset_version != version && !refreshed => {
                    self.refresh()?;
                    refreshed = true;
                }
                _ => return Ok(reply),
            }
        }
    }
}

/// One request's outcome from [`Multiplexed::take_done`]: its id, and its reply frame or why
/// none came (a timeout, a failed send, a closed connection).
pub type Done = (u64, Result<Vec<u8>, ClientError>);

/// How long the thread of a [`Multiplexed`] over `shm://` parks on the reply futex before it
/// looks at its queue again (shared memory has no fd to poll together with the queue's).
const SHM_POLL: Duration = Duration::from_micros(200);
/// How long that thread sleeps at most with nothing to do (it wakes at once on a submission).
const IDLE: Duration = Duration::from_millis(100);

/// Many requests in flight on one connection, for an event loop (Python's `AsyncClient`).
/// Submit frames, poll [`Multiplexed::ready_fd`], take the outcomes: each reply by request id,
/// or [`ClientError::Timeout`] once the request's deadline (the client's timeout from its
/// submission) passed; a reply after that is dropped.
///
/// ```text
///   ZeroMQ:  submit ──send (non-blocking)──▶ DEALER ──▶ daemon
///            take_done ◀── recv (non-blocking) ◀── ZMQ_FD readable (the event loop polls it)
///   shm://:  submit ──▶ queue ──▶ [thread: Client] ──▶ rings ──▶ daemon
///            take_done ◀── done + socket pair readable ◀── [thread] ◀── reply futex
/// ```
///
/// Over ZeroMQ the caller's thread sends and receives itself (no thread hop): the ready fd is
/// the socket's `ZMQ_FD`, which signals only changes, so [`Multiplexed::submit`] says when
/// replies may already wait (call `take_done` then, the fd may stay quiet); a frame the socket
/// has no room for waits in order and goes at the next call. Deadlines are checked at every
/// call ([`Multiplexed::wait_done`] wakes for the nearest; an event loop keeps its own timer).
/// Over `shm://`, which has no fd, a thread of its own owns the client: it waits on the reply
/// futex at most `SHM_POLL` (200 µs) between looks at its queue, files outcomes and deadlines
/// itself, and a socket pair turns readable when something is filed. Dropping it stops the
/// thread (at most one send's deadline later).
pub struct Multiplexed {
    mode: Mode,
    next_id: AtomicU64,
}

enum Mode {
    Direct(Mutex<Direct>),
    Threaded(Threaded),
}

impl Multiplexed {
    /// Drives `client` (its timeout is every request's deadline): directly over ZeroMQ, from a
    /// thread of its own over `shm://`.
    pub fn new(client: Client) -> Result<Multiplexed, ClientError> {
        let mode = match &client.transport {
            Transport::Zmq { sock, .. } => {
                let fd = sock.get_fd().map_err(|e| ClientError::Zmq(e.to_string()))?;
                let direct = Direct { client, fd, waiting: HashMap::new(), unsent: VecDeque::new(), done: Vec::new() };
                Mode::Direct(Mutex::new(direct))
            }
            Transport::Shm(_) => Mode::Threaded(Threaded::new(client)?),
        };
        Ok(Multiplexed { mode, next_id: AtomicU64::new(1) })
    }

    /// A fresh request id for a frame to submit.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `frame` (its id `id` at bytes 4..12), or queues it; its outcome comes back through
    /// [`Multiplexed::take_done`] within the timeout. `Ok(true)`: outcomes may wait already
    /// (take them now: the ready fd need not say so).
    pub fn submit(&self, id: u64, frame: &[u8]) -> Result<bool, ClientError> {
        match &self.mode {
            Mode::Direct(d) => Ok(lock(d).submit(id, frame)),
            Mode::Threaded(t) => t.submit(id, frame.to_vec()).map(|()| false),
        }
    }

    /// An fd that polls readable when outcomes may wait in [`Multiplexed::take_done`].
    pub fn ready_fd(&self) -> RawFd {
        match &self.mode {
            Mode::Direct(d) => lock(d).fd,
            Mode::Threaded(t) => t.ready_fd(),
        }
    }

    /// The outcomes there are now (replies, deadlines passed, failed sends), without waiting.
    pub fn take_done(&self) -> Vec<Done> {
        match &self.mode {
            Mode::Direct(d) => lock(d).take(),
            Mode::Threaded(t) => t.take_done(),
        }
    }

    /// Waits until an outcome is there or `until` passes, then [`Multiplexed::take_done`].
    pub fn wait_done(&self, until: Instant) -> Vec<Done> {
        let done = self.take_done();
        if !done.is_empty() {
            return done;
        }
        let until = match &self.mode {
            Mode::Direct(d) => {
                let d = lock(d); // the nearest deadline: wake to file it
                d.waiting.values().chain(d.unsent.iter().map(|s| &s.until)).fold(until, |a, &b| a.min(b))
            }
            Mode::Threaded(_) => until,
        };
        let mut item = [zmq::PollItem::from_fd(self.ready_fd(), zmq::POLLIN)];
        let _ = zmq::poll(&mut item, poll_ms(until));
        self.take_done()
    }
}

/// The ZeroMQ side of a [`Multiplexed`]: the client, its socket's `ZMQ_FD`, the requests sent
/// and not answered (their deadlines), those the socket had no room for yet, and the outcomes.
struct Direct {
    client: Client,
    fd: RawFd,
    waiting: HashMap<u64, Instant>,
    unsent: VecDeque<Submitted>,
    done: Vec<Done>,
}

impl Direct {
    fn sock(&self) -> &zmq::Socket {
        match &self.client.transport {
            Transport::Zmq { sock, .. } => sock,
            Transport::Shm(_) => unreachable!("a direct multiplexer is made over ZeroMQ only"),
        }
    }

    /// Sends `frame` now when nothing waits before it and the socket takes it (no copy), else
    /// queues a copy.
    fn submit(&mut self, id: u64, frame: &[u8]) -> bool {
        let until = Instant::now() + self.client.timeout;
        self.send_unsent();
        let sent =
            if self.unsent.is_empty() { self.sock().send(frame, zmq::DONTWAIT) } else { Err(zmq::Error::EAGAIN) };
        match sent {
            Ok(()) => {
                self.waiting.insert(id, until);
            }
            Err(zmq::Error::EAGAIN) => self.unsent.push_back(Submitted { id, frame: frame.to_vec(), until }),
            Err(e) => self.done.push((id, Err(ClientError::Zmq(e.to_string())))),
        }
        // A send may have taken the fd's signal of a reply that came meanwhile.
        let readable = self.sock().get_events().is_ok_and(|e| e.contains(zmq::POLLIN));
        readable || !self.done.is_empty()
    }

    /// Sends what waits, in order, while the socket takes it (without blocking).
    fn send_unsent(&mut self) {
        while let Some(s) = self.unsent.front() {
            match self.sock().send(&s.frame[..], zmq::DONTWAIT) {
                Err(zmq::Error::EAGAIN) => return,
                sent => {
                    let s = self.unsent.pop_front().expect("front");
                    match sent {
                        Ok(()) => {
                            self.waiting.insert(s.id, s.until);
                        }
                        Err(e) => self.done.push((s.id, Err(ClientError::Zmq(e.to_string())))),
                    }
                }
            }
        }
    }

    /// Sends what waits, takes every reply there is (until the socket says none, which re-arms
    /// its fd), files the deadlines passed, and hands over the outcomes.
    fn take(&mut self) -> Vec<Done> {
        self.send_unsent();
        loop {
            match self.sock().recv_bytes(zmq::DONTWAIT) {
                Ok(f) => {
                    if let Some(id) = frame_id(&f).filter(|id| self.waiting.remove(id).is_some()) {
                        self.done.push((id, Ok(f)));
                    }
                }
                Err(zmq::Error::EAGAIN) => break,
                Err(e) => {
                    let e = ClientError::Zmq(e.to_string());
                    self.done.extend(self.waiting.drain().map(|(id, _)| (id, Err(e.clone()))));
                    break;
                }
            }
        }
        let now = Instant::now();
        let timeout = self.client.timeout;
        let late: Vec<u64> = self.waiting.iter().filter(|(_, &u)| u <= now).map(|(&id, _)| id).collect();
        for id in late {
            self.waiting.remove(&id);
            self.done.push((id, Err(ClientError::Timeout(timeout))));
        }
        while self.unsent.front().is_some_and(|s| s.until <= now) {
            let s = self.unsent.pop_front().expect("front");
            self.done.push((s.id, Err(ClientError::Timeout(timeout))));
        }
        std::mem::take(&mut self.done)
    }
}

/// The `shm://` side of a [`Multiplexed`]: a thread that owns the client.
struct Threaded {
    queue: Option<mpsc::Sender<Submitted>>,
    shared: Arc<Shared>,
    /// Written to wake the thread (a submission, the stop).
    wake: UnixStream,
    /// Readable while something is filed.
    ready: UnixStream,
    timeout: Duration,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Submitted {
    id: u64,
    frame: Vec<u8>,
    until: Instant,
}

struct Shared {
    done: Mutex<Vec<Done>>,
    stop: AtomicBool,
    /// Submissions since the thread last looked at its queue: only the first rings its wake-up.
    queued: AtomicUsize,
}

impl Threaded {
    /// Starts the thread that drives `client` (its timeout is every request's deadline).
    fn new(client: Client) -> Result<Threaded, ClientError> {
        let io = |e: std::io::Error| ClientError::Zmq(format!("the client's thread: {e}"));
        let (wake, wake_rx) = UnixStream::pair().map_err(io)?;
        let (ready_tx, ready) = UnixStream::pair().map_err(io)?;
        for s in [&wake, &wake_rx, &ready_tx, &ready] {
            s.set_nonblocking(true).map_err(io)?;
        }
        let (queue, submitted) = mpsc::channel();
        let shared = Arc::new(Shared {
            done: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
        });
        let timeout = client.timeout;
        let worker = Worker {
            client,
            submitted,
            shared: Arc::clone(&shared),
            wake: wake_rx,
            ready: ready_tx,
            waiting: HashMap::new(),
        };
        let thread = std::thread::Builder::new().name("serve-client".into()).spawn(move || worker.run()).map_err(io)?;
        Ok(Threaded { queue: Some(queue), shared, wake, ready, timeout, thread: Some(thread) })
    }

    fn submit(&self, id: u64, frame: Vec<u8>) -> Result<(), ClientError> {
        let until = Instant::now() + self.timeout;
        let stopped = || ClientError::Zmq("the client's thread has stopped".into());
        self.queue.as_ref().ok_or_else(stopped)?.send(Submitted { id, frame, until }).map_err(|_| stopped())?;
        if self.shared.queued.fetch_add(1, Ordering::AcqRel) == 0 {
            ring(&self.wake); // after the send: the thread, woken, finds the frame
        }
        Ok(())
    }

    fn ready_fd(&self) -> RawFd {
        self.ready.as_raw_fd()
    }

    fn take_done(&self) -> Vec<Done> {
        drain(&self.ready); // first: an outcome filed after this rings again
        std::mem::take(&mut *lock(&self.shared.done))
    }
}

impl Drop for Threaded {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.queue = None;
        ring(&self.wake);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread of a [`Multiplexed`]: the client, the queue it sends from, and the requests sent
/// and not yet answered (their deadlines).
struct Worker {
    client: Client,
    submitted: mpsc::Receiver<Submitted>,
    shared: Arc<Shared>,
    wake: UnixStream,
    ready: UnixStream,
    waiting: HashMap<u64, Instant>,
}

impl Worker {
    fn run(mut self) {
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                return;
            }
            self.shared.queued.swap(0, Ordering::AcqRel); // before the queue: a later one rings
            drain(&self.wake);
            loop {
                match self.submitted.try_recv() {
                    Ok(s) => self.send(s),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            self.expire(Instant::now());
            let frames = self.wait_for_replies();
            let done = frames
                .into_iter()
                .filter_map(|f| {
                    let id = frame_id(&f)?;
                    self.waiting.remove(&id)?;
                    Some((id, Ok(f)))
                })
                .collect();
            self.file(done);
        }
    }

    fn send(&mut self, s: Submitted) {
        match self.client.send(&s.frame, s.until) {
            Ok(()) => {
                self.waiting.insert(s.id, s.until);
            }
            Err(e) => self.file(vec![(s.id, Err(e))]),
        }
    }

    /// Files a timeout for every request whose deadline passed.
    fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self.waiting.iter().filter(|(_, &until)| until <= now).map(|(&id, _)| id).collect();
        let timeout = self.client.timeout;
        let done = late
            .into_iter()
            .map(|id| {
                self.waiting.remove(&id);
                (id, Err(ClientError::Timeout(timeout)))
            })
            .collect();
        self.file(done);
    }

    /// Waits for replies (or a submission) until the nearest deadline, at most [`IDLE`], and
    /// takes every reply frame there is. A broken connection fails every request waiting.
    fn wait_for_replies(&mut self) -> Vec<Vec<u8>> {
        let now = Instant::now();
        let until = self.waiting.values().min().copied().unwrap_or(now + IDLE).min(now + IDLE);
        let wake = zmq::PollItem::from_fd(self.wake.as_raw_fd(), zmq::POLLIN);
        let mut frames = Vec::new();
        let failed = match &mut self.client.transport {
            Transport::Zmq { sock, .. } => {
                let mut items = [sock.as_poll_item(zmq::POLLIN), wake];
                match zmq::poll(&mut items, poll_ms(until)) {
                    Err(e) => Some(ClientError::Zmq(e.to_string())),
                    Ok(_) => loop {
                        match sock.recv_bytes(zmq::DONTWAIT) {
                            Ok(f) => frames.push(f),
                            Err(zmq::Error::EAGAIN) => break None,
                            Err(e) => break Some(ClientError::Zmq(e.to_string())),
                        }
                    },
                }
            }
            Transport::Shm(_) if self.waiting.is_empty() => {
                let _ = zmq::poll(&mut [wake], poll_ms(until));
                None
            }
            Transport::Shm(c) => match c.wait(until.min(now + SHM_POLL)) {
                Ok(()) | Err(crate::shm::ShmError::Timeout) => loop {
                    match c.try_recv(|b| b.to_vec()) {
                        Ok(Some(f)) => frames.push(f),
                        Ok(None) => break None,
                        Err(e) => break Some(shm_error(e, self.client.timeout)),
                    }
                },
                Err(e) => Some(shm_error(e, self.client.timeout)),
            },
        };
        if let Some(e) = failed {
            let done = self.waiting.drain().map(|(id, _)| (id, Err(e.clone()))).collect();
            self.file(done);
        }
        frames
    }

    /// Files outcomes; only filing into an empty list rings (until `take_done` empties it, the
    /// ready fd stays readable).
    fn file(&self, done: Vec<Done>) {
        if done.is_empty() {
            return;
        }
        let mut list = lock(&self.shared.done);
        let was_empty = list.is_empty();
        list.extend(done);
        drop(list);
        if was_empty {
            ring(&self.ready);
        }
    }
}

/// The milliseconds from now to `until`, rounded up (zmq::poll's unit).
fn poll_ms(until: Instant) -> i64 {
    until.saturating_duration_since(Instant::now()).as_micros().div_ceil(1000) as i64
}

/// Makes the other end of a non-blocking socket pair readable (a full buffer already is).
fn ring(s: &UnixStream) {
    let _ = (&*s).write(&[1]);
}

/// Reads a non-blocking socket pair's end until it is empty.
fn drain(s: &UnixStream) {
    let mut buf = [0u8; 64];
    while matches!((&*s).read(&mut buf), Ok(n) if n > 0) {}
}

/// The list behind a mutex, even if a thread panicked holding it (a list stays a list).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

/// Sends one message by `until` (else a timeout of `timeout`). A connection the daemon closed
/// mid-handshake (a refused key) can leave the socket with nowhere to send until it reconnects,
/// and a blocking send would then wait for ever.
pub(crate) fn send_within(
    sock: &zmq::Socket,
    frames: &[&[u8]],
    until: Instant,
    timeout: Duration,
) -> Result<(), ClientError> {
    loop {
        // Try first: there is room nearly always, and a poll before every send costs a call.
        match sock.send_multipart(frames.iter().copied(), zmq::DONTWAIT) {
            Err(zmq::Error::EAGAIN) => {} // no room, or no connection yet: wait for one
            sent => return sent.map_err(|e| ClientError::Zmq(e.to_string())),
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::Timeout(timeout));
        }
        sock.poll(zmq::POLLOUT, left.as_millis().max(1) as i64).map_err(|e| ClientError::Zmq(e.to_string()))?;
    }
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
    let until = Instant::now() + timeout;
    send_within(&sock, frames, until, timeout)?;
    let left = until.saturating_duration_since(Instant::now());
    let ready = sock.poll(zmq::POLLIN, left.as_millis() as i64).map_err(|e| ClientError::Zmq(e.to_string()))?;
    if ready == 0 {
        return Err(ClientError::Timeout(timeout));
    }
    let answer = sock.recv_bytes(0).map_err(|e| ClientError::Zmq(e.to_string()))?;
    serde_json::from_slice(&answer).map_err(|e| ClientError::BadReply(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_with_nowhere_to_go_times_out() {
        // IMMEDIATE: no pipe before a connection, and nothing listens: the state a connection
        // closed mid-handshake leaves, for certain.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let ctx = zmq::Context::new();
        let sock = ctx.socket(zmq::DEALER).unwrap();
        sock.set_linger(0).unwrap();
        sock.set_immediate(true).unwrap();
        sock.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();
        let t0 = Instant::now();
        let timeout = Duration::from_millis(200);
        let r = send_within(&sock, &[b"x"], t0 + timeout, timeout);
        assert!(matches!(r, Err(ClientError::Timeout(t)) if t == timeout), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
