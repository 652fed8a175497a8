//! The wire protocol, version 2 — its one definition (docs/serve-protocol.md describes it for
//! people; the Python client calls these functions through `offload._native`).
//!
//! Every message is one ZeroMQ frame (after the ROUTER envelope), little-endian throughout.
//!
//! Request (version 2: version 1 had no `criteria_fingerprint`; its frames, magic "OFQ1", are
//! answered `Malformed` saying so):
//! ```text
//! magic "OFQ2" | request_id u64 | deadline_us u64 (µs since the Unix epoch, 0 = none)
//! | stop_after u32 (valid answers wanted, 0 = all) | n_queries u32 | layout u8
//! | criteria_fingerprint u64 (criteria_fingerprint() of the criterion names the columns follow)
//! | layout 0 (raw):     n_columns u16, then per column: offsets (n_queries + 1) × u32, bytes
//! | layout 1 (encoded): encoding_version u64, width u16, then n_queries × width × u32
//! | layout 2 (encoded, 16-bit): encoding_version u64, width u16, then n_queries × width × u16
//! ```
//! Dictionary request (what a client needs to encode queries itself, [`DictionaryReply`]):
//! ```text
//! magic "OFD1" | request_id u64
//! ```
//! Dictionary reply:
//! ```text
//! magic "OFDR" | request_id u64 | status u8 | ruleset_version u64 | criteria_fingerprint u64
//! | code_bits u8 (16: every code fits in u16, layout 2 may be used; else 32)
//! | dictionary_len u32, dictionary (offload_rules::EncoderDictionary::to_bytes) | message_len u32, message
//! ```
//! Reply:
//! ```text
//! magic "OFR1" | request_id u64 | status u8 | ruleset_version u64 | n u32
//! | rule n × u32 (u32::MAX = no match) | content n × i64 | n_stages u8, (stage u8, ns u64) × n_stages
//! | message_len u32, message (UTF-8; why, when status is not Ok)
//! ```

use std::fmt;

pub const REQUEST_MAGIC: &[u8; 4] = b"OFQ2";
/// Requests of protocol version 1 (no criteria fingerprint): recognised only to refuse them.
pub const REQUEST_MAGIC_V1: &[u8; 4] = b"OFQ1";
/// Replies did not change from version 1, so an old client can read why it was refused.
pub const REPLY_MAGIC: &[u8; 4] = b"OFR1";
/// Asks for the encoding dictionary of the served rule-set version.
pub const DICTIONARY_REQUEST_MAGIC: &[u8; 4] = b"OFD1";
/// Answers a dictionary request.
pub const DICTIONARY_REPLY_MAGIC: &[u8; 4] = b"OFDR";
/// The protocol version requests speak (the `2` of "OFQ2").
pub const PROTOCOL_VERSION: u32 = 2;

/// What identifies the columns of a request: FNV-1a (64-bit) over each criterion name's UTF-8
/// bytes followed by one 0 byte, in rule-type (column) order. Two rule types whose criteria
/// have the same names in the same order have the same fingerprint; swapping two columns,
/// renaming, adding or removing one changes it. `criteria_fingerprint(["A", "B"])` is
/// `0xacb6188cd5c60c36` (the test `fingerprint_is_fnv1a_of_names_each_ended_by_0`).
pub fn criteria_fingerprint<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    for name in names {
        name.as_ref().bytes().for_each(&mut eat);
        eat(0);
    }
    h
}

/// The fingerprint of a rule type's criteria (what the server checks requests against).
pub fn rule_type_fingerprint(rule_type: &offload_rules::RuleType) -> u64 {
    criteria_fingerprint(rule_type.criteria.iter().map(|c| c.code.as_str()))
}

/// How a request's queries are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// One column of raw text per criterion (rule-type order): `offsets[i]..offsets[i + 1]`
    /// of `data` is query `i`'s value.
    Raw(Vec<RawColumnOwned>),
    /// Rows already encoded against the rule set whose encoding version is given.
    Encoded { encoding_version: u64, width: u16, codes: Vec<u32> },
    /// The same with 16-bit codes (layout 2): for rule sets whose every code fits in u16
    /// (the dictionary reply's `code_bits` says so), half the bytes on the wire.
    Encoded16 { encoding_version: u64, width: u16, codes: Vec<u16> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawColumnOwned {
    pub offsets: Vec<u32>,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub request_id: u64,
    pub deadline_us: u64,
    pub stop_after: u32,
    pub n_queries: u32,
    /// [`criteria_fingerprint`] of the criteria the columns (or the encoded rows) follow.
    pub criteria_fingerprint: u64,
    pub payload: Payload,
}

/// The fixed part of a request, before its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub request_id: u64,
    pub deadline_us: u64,
    pub stop_after: u32,
    pub n_queries: u32,
    /// 0 raw, 1 encoded (u32 codes), 2 encoded (u16 codes).
    pub layout: u8,
    pub criteria_fingerprint: u64,
}

/// Layouts of a request's payload.
pub const LAYOUT_RAW: u8 = 0;
pub const LAYOUT_ENCODED: u8 = 1;
pub const LAYOUT_ENCODED16: u8 = 2;

/// An encoded request (layout 1 or 2) read in place: its codes stay in the received frame
/// until [`EncodedView::append_codes`] copies them, once, where they are matched.
#[derive(Debug, Clone, Copy)]
pub struct EncodedView<'a> {
    pub header: Header,
    pub encoding_version: u64,
    pub width: u16,
    /// 32 (layout 1) or 16 (layout 2).
    pub code_bits: u8,
    codes: &'a [u8],
}

impl EncodedView<'_> {
    /// Appends the request's `n_queries × width` codes to `out`, widened to u32.
    pub fn append_codes(&self, out: &mut Vec<u32>) {
        if self.code_bits == 16 {
            out.extend(self.codes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as u32));
        } else {
            out.extend(self.codes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    /// The queue is full: nothing was done; try again or elsewhere.
    Busy = 1,
    /// The deadline passed before the request was executed.
    DeadlineExceeded = 2,
    /// The frame could not be decoded.
    Malformed = 3,
    /// A query value could not be encoded, or another request error.
    BadRequest = 4,
    /// The server is shutting down and did not take the request.
    ShuttingDown = 5,
}

impl Status {
    fn from_u8(v: u8) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::Busy,
            2 => Status::DeadlineExceeded,
            3 => Status::Malformed,
            4 => Status::BadRequest,
            5 => Status::ShuttingDown,
            _ => return None,
        })
    }
}

/// Pipeline stages timed in a reply (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// From the broker receiving the frame to a worker taking it.
    Queue = 0,
    /// Decoding the frame and encoding raw values.
    Encode = 1,
    /// The matcher.
    Match = 2,
    /// Building the reply.
    Reply = 3,
    /// From a worker handing the encoded batch over to a kernel executor taking it.
    KernelQueue = 4,
    /// On a device matcher, within `match`: the batch's device time copying queries in, in
    /// the kernel, and copying answers out (CUDA events; the chunks of a batch overlap them).
    H2d = 5,
    Kernel = 6,
    D2h = 7,
}

impl Stage {
    /// In pipeline order (ids are stable on the wire; this order is for display). The device
    /// stages are parts of `match`, reported by device matchers only.
    pub const ALL: [Stage; 8] = [
        Stage::Queue,
        Stage::Encode,
        Stage::KernelQueue,
        Stage::Match,
        Stage::H2d,
        Stage::Kernel,
        Stage::D2h,
        Stage::Reply,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Stage::Queue => "queue",
            Stage::Encode => "encode",
            Stage::Match => "match",
            Stage::Reply => "reply",
            Stage::KernelQueue => "kernel_queue",
            Stage::H2d => "h2d",
            Stage::Kernel => "kernel",
            Stage::D2h => "d2h",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub request_id: u64,
    pub status: Status,
    pub ruleset_version: u64,
    pub rule: Vec<u32>,
    pub content: Vec<i64>,
    pub stages_ns: Vec<(u8, u64)>,
    pub message: String,
}

impl Reply {
    pub fn status_only(request_id: u64, status: Status, ruleset_version: u64, message: impl Into<String>) -> Reply {
        Reply {
            request_id,
            status,
            ruleset_version,
            rule: Vec::new(),
            content: Vec::new(),
            stages_ns: Vec::new(),
            message: message.into(),
        }
    }
}

/// The answer to a dictionary request: what a client needs to encode queries for the rule-set
/// version the server serves (`dictionary`: `offload_rules::EncoderDictionary::to_bytes`), and
/// whether 16-bit codes (layout 2) will do. Empty with a message when the status is not Ok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DictionaryReply {
    pub request_id: u64,
    pub status: Status,
    pub ruleset_version: u64,
    pub criteria_fingerprint: u64,
    pub code_bits: u8,
    pub dictionary: Vec<u8>,
    pub message: String,
}

/// Why a frame could not be decoded, with the byte offset where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed frame at byte {}: {}", self.offset, self.what)
    }
}
impl std::error::Error for DecodeError {}

/// A bounds-checked little-endian reader: every read either succeeds or says where it failed.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: impl Into<String>) -> DecodeError {
        DecodeError { offset: self.at, what: what.into() }
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| {
            self.err(format!("{what}: needs {n} bytes, {} left", self.b.len().saturating_sub(self.at)))
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    fn u32s(&mut self, n: usize, what: &str) -> Result<Vec<u32>, DecodeError> {
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| self.err(format!("{what}: count overflows")))?, what)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }
    fn u16s(&mut self, n: usize, what: &str) -> Result<Vec<u16>, DecodeError> {
        let bytes = self.take(n.checked_mul(2).ok_or_else(|| self.err(format!("{what}: count overflows")))?, what)?;
        Ok(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
    }
    fn bytes_with_len(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(&format!("{what} length"))? as usize;
        self.take(len, what)
    }
    fn done(&self) -> Result<(), DecodeError> {
        if self.at == self.b.len() {
            Ok(())
        } else {
            Err(self.err(format!("{} trailing bytes", self.b.len() - self.at)))
        }
    }
}

/// The request id of a frame, if it has one: the broker answers even undecodable frames with
/// the id they claim.
/// Version 1 frames too, so an old client matches the refusal to its request.
pub fn peek_request_id(frame: &[u8]) -> u64 {
    let known = |m: &[u8]| m == REQUEST_MAGIC || m == REQUEST_MAGIC_V1 || m == DICTIONARY_REQUEST_MAGIC;
    if frame.len() >= 12 && known(&frame[..4]) {
        u64::from_le_bytes(frame[4..12].try_into().expect("8 bytes"))
    } else {
        0
    }
}

/// The deadline of a frame (0 = none or undecodable), read without decoding the payload.
pub fn peek_deadline_us(frame: &[u8]) -> u64 {
    if frame.len() >= 20 && &frame[..4] == REQUEST_MAGIC {
        u64::from_le_bytes(frame[12..20].try_into().expect("8 bytes"))
    } else {
        0
    }
}

/// The layout byte of a request frame (0 raw, 1 or 2 encoded), read without decoding.
pub fn peek_layout(frame: &[u8]) -> Option<u8> {
    (frame.len() >= 29 && &frame[..4] == REQUEST_MAGIC).then(|| frame[28])
}

/// The number of queries a frame announces (0 when unreadable), read without decoding.
pub fn peek_n_queries(frame: &[u8]) -> u32 {
    if frame.len() >= 28 && &frame[..4] == REQUEST_MAGIC {
        u32::from_le_bytes(frame[24..28].try_into().expect("4 bytes"))
    } else {
        0
    }
}

pub fn encode_request(r: &Request) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(REQUEST_MAGIC);
    b.extend_from_slice(&r.request_id.to_le_bytes());
    b.extend_from_slice(&r.deadline_us.to_le_bytes());
    b.extend_from_slice(&r.stop_after.to_le_bytes());
    b.extend_from_slice(&r.n_queries.to_le_bytes());
    b.push(match r.payload {
        Payload::Raw(_) => LAYOUT_RAW,
        Payload::Encoded { .. } => LAYOUT_ENCODED,
        Payload::Encoded16 { .. } => LAYOUT_ENCODED16,
    });
    b.extend_from_slice(&r.criteria_fingerprint.to_le_bytes());
    match &r.payload {
        Payload::Raw(cols) => {
            b.extend_from_slice(&(cols.len() as u16).to_le_bytes());
            for c in cols {
                c.offsets.iter().for_each(|o| b.extend_from_slice(&o.to_le_bytes()));
                b.extend_from_slice(&c.data);
            }
        }
        Payload::Encoded { encoding_version, width, codes } => {
            b.extend_from_slice(&encoding_version.to_le_bytes());
            b.extend_from_slice(&width.to_le_bytes());
            codes.iter().for_each(|c| b.extend_from_slice(&c.to_le_bytes()));
        }
        Payload::Encoded16 { encoding_version, width, codes } => {
            b.extend_from_slice(&encoding_version.to_le_bytes());
            b.extend_from_slice(&width.to_le_bytes());
            codes.iter().for_each(|c| b.extend_from_slice(&c.to_le_bytes()));
        }
    }
    b
}

/// Reads the magic and the fixed header of a request.
fn read_header(c: &mut Cursor<'_>) -> Result<Header, DecodeError> {
    match c.take(4, "magic")? {
        m if m == REQUEST_MAGIC => {}
        m if m == REQUEST_MAGIC_V1 => {
            return Err(DecodeError {
                offset: 0,
                what: "a request of protocol version 1 (magic OFQ1); this server speaks protocol version 2, whose \
                       requests carry the fingerprint of the criteria their columns follow: update the client \
                       (docs/serve-protocol.md)"
                    .into(),
            })
        }
        _ => return Err(DecodeError { offset: 0, what: "not an offload request (magic is not OFQ2)".into() }),
    }
    Ok(Header {
        request_id: c.u64("request_id")?,
        deadline_us: c.u64("deadline_us")?,
        stop_after: c.u32("stop_after")?,
        n_queries: c.u32("n_queries")?,
        layout: c.u8("layout")?,
        criteria_fingerprint: c.u64("criteria_fingerprint")?,
    })
}

/// Reads an encoded request (layout 1 or 2) without copying its codes; `Ok(None)` for a raw
/// one (layout 0, which [`decode_request`] reads). Checks everything `decode_request` checks.
pub fn encoded_view(frame: &[u8]) -> Result<Option<EncodedView<'_>>, DecodeError> {
    let mut c = Cursor { b: frame, at: 0 };
    let header = read_header(&mut c)?;
    let code_bits = match header.layout {
        LAYOUT_ENCODED => 32,
        LAYOUT_ENCODED16 => 16,
        LAYOUT_RAW => return Ok(None),
        other => return Err(c.err(format!("unknown layout {other}; expected 0 (raw), 1 or 2 (encoded)"))),
    };
    let encoding_version = c.u64("encoding_version")?;
    let width = c.u16("width")?;
    let bytes = (header.n_queries as usize)
        .checked_mul(width as usize)
        .and_then(|n| n.checked_mul(code_bits as usize / 8))
        .ok_or_else(|| c.err("size overflows"))?;
    let codes = c.take(bytes, "codes")?;
    c.done()?;
    Ok(Some(EncodedView { header, encoding_version, width, code_bits, codes }))
}

pub fn decode_request(frame: &[u8]) -> Result<Request, DecodeError> {
    let mut c = Cursor { b: frame, at: 0 };
    let Header { request_id, deadline_us, stop_after, n_queries, layout, criteria_fingerprint } = read_header(&mut c)?;
    let n = n_queries as usize;
    let payload = match layout {
        0 => {
            let n_cols = c.u16("n_columns")? as usize;
            let mut cols = Vec::with_capacity(n_cols);
            for k in 0..n_cols {
                let offsets = c.u32s(n + 1, &format!("offsets of column {k}"))?;
                if offsets[0] != 0 || offsets.windows(2).any(|w| w[1] < w[0]) {
                    return Err(c.err(format!("offsets of column {k} must start at 0 and not decrease")));
                }
                let data = c.take(offsets[n] as usize, &format!("bytes of column {k}"))?.to_vec();
                if std::str::from_utf8(&data).is_err() {
                    return Err(c.err(format!("column {k} is not UTF-8")));
                }
                cols.push(RawColumnOwned { offsets, data });
            }
            Payload::Raw(cols)
        }
        1 => {
            let encoding_version = c.u64("encoding_version")?;
            let width = c.u16("width")?;
            let codes = c.u32s(n.checked_mul(width as usize).ok_or_else(|| c.err("size overflows"))?, "codes")?;
            Payload::Encoded { encoding_version, width, codes }
        }
        2 => {
            let encoding_version = c.u64("encoding_version")?;
            let width = c.u16("width")?;
            let codes = c.u16s(n.checked_mul(width as usize).ok_or_else(|| c.err("size overflows"))?, "codes")?;
            Payload::Encoded16 { encoding_version, width, codes }
        }
        other => return Err(c.err(format!("unknown layout {other}; expected 0 (raw), 1 or 2 (encoded)"))),
    };
    c.done()?;
    Ok(Request { request_id, deadline_us, stop_after, n_queries, criteria_fingerprint, payload })
}

pub fn encode_reply(r: &Reply) -> Vec<u8> {
    let content = r.content.iter().copied();
    let mut b = reply_frame(r.request_id, r.status, r.ruleset_version, &r.rule, content, &r.stages_ns, r.message.len());
    b.extend_from_slice(r.message.as_bytes());
    b
}

/// An Ok reply written straight from the answers (`content` yields one value per rule, in
/// order): what the daemon sends, without building a [`Reply`] first. Same bytes as
/// [`encode_reply`] of the same reply.
pub fn encode_ok_reply(
    request_id: u64,
    ruleset_version: u64,
    rule: &[u32],
    content: impl Iterator<Item = i64>,
    stages_ns: &[(u8, u64)],
) -> Vec<u8> {
    reply_frame(request_id, Status::Ok, ruleset_version, rule, content, stages_ns, 0)
}

/// A reply up to its message's length (the message's bytes follow).
fn reply_frame(
    request_id: u64,
    status: Status,
    ruleset_version: u64,
    rule: &[u32],
    content: impl Iterator<Item = i64>,
    stages_ns: &[(u8, u64)],
    message_len: usize,
) -> Vec<u8> {
    let n = rule.len();
    let mut b = Vec::with_capacity(30 + n * 12 + stages_ns.len() * 9 + message_len);
    b.extend_from_slice(REPLY_MAGIC);
    b.extend_from_slice(&request_id.to_le_bytes());
    b.push(status as u8);
    b.extend_from_slice(&ruleset_version.to_le_bytes());
    b.extend_from_slice(&(n as u32).to_le_bytes());
    rule.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    let mut written = 0;
    for x in content.take(n) {
        b.extend_from_slice(&x.to_le_bytes());
        written += 1;
    }
    debug_assert_eq!(written, n, "one content per rule");
    b.push(stages_ns.len() as u8);
    for &(s, ns) in stages_ns {
        b.push(s);
        b.extend_from_slice(&ns.to_le_bytes());
    }
    b.extend_from_slice(&(message_len as u32).to_le_bytes());
    b
}

/// A reply's id, status and answer count from its fixed header (magic, id u64, status u8,
/// version u64, n u32), without decoding the answers: what the load generator needs per reply.
/// None when the frame is not a reply.
pub fn peek_reply(frame: &[u8]) -> Option<(u64, Status, u32)> {
    if frame.len() < 25 || &frame[..4] != REPLY_MAGIC {
        return None;
    }
    let id = u64::from_le_bytes(frame[4..12].try_into().expect("8 bytes"));
    let status = Status::from_u8(frame[12])?;
    Some((id, status, u32::from_le_bytes(frame[21..25].try_into().expect("4 bytes"))))
}

pub fn decode_reply(frame: &[u8]) -> Result<Reply, DecodeError> {
    let mut c = Cursor { b: frame, at: 0 };
    if c.take(4, "magic")? != REPLY_MAGIC {
        return Err(DecodeError { offset: 0, what: "not an offload reply (magic is not OFR1)".into() });
    }
    let request_id = c.u64("request_id")?;
    let status = Status::from_u8(c.u8("status")?).ok_or_else(|| c.err("unknown status"))?;
    let ruleset_version = c.u64("ruleset_version")?;
    let n = c.u32("n")? as usize;
    let rule = c.u32s(n, "rule")?;
    let content = c
        .take(n.checked_mul(8).ok_or_else(|| c.err("size overflows"))?, "content")?
        .chunks_exact(8)
        .map(|x| i64::from_le_bytes(x.try_into().expect("8 bytes")))
        .collect();
    let n_stages = c.u8("n_stages")? as usize;
    let mut stages_ns = Vec::with_capacity(n_stages);
    for _ in 0..n_stages {
        stages_ns.push((c.u8("stage")?, c.u64("stage ns")?));
    }
    let len = c.u32("message_len")? as usize;
    let message = String::from_utf8(c.take(len, "message")?.to_vec()).map_err(|_| c.err("message is not UTF-8"))?;
    c.done()?;
    Ok(Reply { request_id, status, ruleset_version, rule, content, stages_ns, message })
}

/// A dictionary request (magic "OFD1"): asks for what [`DictionaryReply`] carries.
pub fn encode_dictionary_request(request_id: u64) -> Vec<u8> {
    let mut b = DICTIONARY_REQUEST_MAGIC.to_vec();
    b.extend_from_slice(&request_id.to_le_bytes());
    b
}

/// Whether a frame is a dictionary request (its magic; the rest is the request id).
pub fn is_dictionary_request(frame: &[u8]) -> bool {
    frame.len() >= 4 && &frame[..4] == DICTIONARY_REQUEST_MAGIC
}

pub fn encode_dictionary_reply(r: &DictionaryReply) -> Vec<u8> {
    let mut b = Vec::with_capacity(46 + r.dictionary.len() + r.message.len());
    b.extend_from_slice(DICTIONARY_REPLY_MAGIC);
    b.extend_from_slice(&r.request_id.to_le_bytes());
    b.push(r.status as u8);
    b.extend_from_slice(&r.ruleset_version.to_le_bytes());
    b.extend_from_slice(&r.criteria_fingerprint.to_le_bytes());
    b.push(r.code_bits);
    b.extend_from_slice(&(r.dictionary.len() as u32).to_le_bytes());
    b.extend_from_slice(&r.dictionary);
    b.extend_from_slice(&(r.message.len() as u32).to_le_bytes());
    b.extend_from_slice(r.message.as_bytes());
    b
}

pub fn decode_dictionary_reply(frame: &[u8]) -> Result<DictionaryReply, DecodeError> {
    let mut c = Cursor { b: frame, at: 0 };
    if c.take(4, "magic")? != DICTIONARY_REPLY_MAGIC {
        return Err(DecodeError { offset: 0, what: "not a dictionary reply (magic is not OFDR)".into() });
    }
    let request_id = c.u64("request_id")?;
    let status = Status::from_u8(c.u8("status")?).ok_or_else(|| c.err("unknown status"))?;
    let ruleset_version = c.u64("ruleset_version")?;
    let criteria_fingerprint = c.u64("criteria_fingerprint")?;
    let code_bits = c.u8("code_bits")?;
    let dictionary = c.bytes_with_len("dictionary")?.to_vec();
    let message =
        String::from_utf8(c.bytes_with_len("message")?.to_vec()).map_err(|_| c.err("message is not UTF-8"))?;
    c.done()?;
    Ok(DictionaryReply { request_id, status, ruleset_version, criteria_fingerprint, code_bits, dictionary, message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raw(values: &[&[&str]]) -> Payload {
        Payload::Raw(
            values
                .iter()
                .map(|col| {
                    let mut offsets = vec![0u32];
                    let mut data = Vec::new();
                    for v in col.iter() {
                        data.extend_from_slice(v.as_bytes());
                        offsets.push(data.len() as u32);
                    }
                    RawColumnOwned { offsets, data }
                })
                .collect(),
        )
    }

    #[test]
    fn request_and_reply_round_trip() {
        let r = Request {
            request_id: 7,
            deadline_us: 123,
            stop_after: 2,
            n_queries: 2,
            criteria_fingerprint: criteria_fingerprint(["CTN_TYPE", "APT"]),
            payload: raw(&[&["DD", "II"], &["ZRH", "Zürich"]]),
        };
        assert_eq!(decode_request(&encode_request(&r)).unwrap(), r);
        let e = Request {
            payload: Payload::Encoded { encoding_version: 9, width: 8, codes: (0..16).collect() },
            ..r.clone()
        };
        assert_eq!(decode_request(&encode_request(&e)).unwrap(), e);
        let rep = Reply {
            request_id: 7,
            status: Status::Ok,
            ruleset_version: 3,
            rule: vec![1, u32::MAX],
            content: vec![45, 0],
            stages_ns: vec![(0, 10), (2, 99)],
            message: String::new(),
        };
        assert_eq!(decode_reply(&encode_reply(&rep)).unwrap(), rep);
        let direct = encode_ok_reply(7, 3, &rep.rule, rep.content.iter().copied(), &rep.stages_ns);
        assert_eq!(direct, encode_reply(&rep), "the daemon's direct writer gives the same bytes");
    }

    #[test]
    fn truncated_and_garbage_frames_are_errors_with_offsets() {
        let r = Request {
            request_id: 1,
            deadline_us: 0,
            stop_after: 0,
            n_queries: 1,
            criteria_fingerprint: 5,
            payload: raw(&[&["DD"]]),
        };
        let f = encode_request(&r);
        for cut in 0..f.len() {
            assert!(decode_request(&f[..cut]).is_err(), "prefix of {cut} bytes decoded");
        }
        let mut longer = f.clone();
        longer.push(0);
        assert!(decode_request(&longer).unwrap_err().what.contains("trailing"));
        assert_eq!(decode_request(b"GET / HTTP/1.1").unwrap_err().offset, 0);
    }

    #[test]
    fn dictionary_requests_are_told_apart_and_carry_their_id() {
        let f = encode_dictionary_request(77);
        assert!(is_dictionary_request(&f) && f.len() == 12);
        assert_eq!(peek_request_id(&f), 77);
        assert!(!is_dictionary_request(REQUEST_MAGIC) && !is_dictionary_request(b"OF"));
        assert!(decode_request(&f).is_err(), "not a query request");
    }

    #[test]
    fn fingerprint_is_fnv1a_of_names_each_ended_by_0() {
        assert_eq!(criteria_fingerprint(["A", "B"]), 0xacb6_188c_d5c6_0c36);
        assert_eq!(criteria_fingerprint(["B", "A"]), 0x8ae8_eaa5_d6ed_03ee);
        assert_eq!(criteria_fingerprint(Vec::<&str>::new()), 0xcbf2_9ce4_8422_2325);
        // the 0 byte ends each name: moving a boundary changes the fingerprint
        assert_ne!(criteria_fingerprint(["AB", "C"]), criteria_fingerprint(["A", "BC"]));
    }

    #[test]
    fn version_1_requests_are_refused_saying_so() {
        let r = Request {
            request_id: 42,
            deadline_us: 0,
            stop_after: 0,
            n_queries: 1,
            criteria_fingerprint: 1,
            payload: raw(&[&["DD"]]),
        };
        let mut f = encode_request(&r);
        f[..4].copy_from_slice(REQUEST_MAGIC_V1);
        let e = decode_request(&f).unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(e.what.contains("protocol version 1") && e.what.contains("version 2"), "{}", e.what);
        assert_eq!(peek_request_id(&f), 42, "the refusal goes back to the old client's request");
    }

    proptest! {
        /// The decoder never panics, whatever the bytes (the broker feeds it untrusted frames).
        #[test]
        fn decoder_never_panics_on_old_frames(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut f = REQUEST_MAGIC_V1.to_vec();
            f.extend_from_slice(&bytes);
            prop_assert!(decode_request(&f).is_err());
        }

        /// Whatever a request holds, it decodes to itself; an encoded one reads in place to the
        /// same header and codes.
        #[test]
        fn requests_round_trip(id in any::<u64>(), fp in any::<u64>(), layout in 0u8..3,
                               vals in prop::collection::vec("[a-zA-Z0-9]{0,5}", 0..8)) {
            let n = vals.len() as u32;
            let payload = match layout {
                0 => {
                    let col: Vec<&str> = vals.iter().map(String::as_str).collect();
                    raw(&[&col, &col])
                }
                1 => Payload::Encoded { encoding_version: id, width: 2, codes: (0..2 * n).map(|i| i.wrapping_mul(0x9e37_79b9)).collect() },
                _ => Payload::Encoded16 { encoding_version: id, width: 2, codes: (0..2 * n as u16).map(|i| i.wrapping_mul(40503)).collect() },
            };
            let r = Request { request_id: id, deadline_us: 0, stop_after: 0, n_queries: n, criteria_fingerprint: fp, payload };
            let frame = encode_request(&r);
            let view = encoded_view(&frame).unwrap();
            prop_assert_eq!(view.is_none(), layout == 0);
            if let Some(v) = view {
                let mut codes = vec![7u32]; // appends, keeps what was there
                v.append_codes(&mut codes);
                let want: Vec<u32> = match &r.payload {
                    Payload::Encoded { codes, .. } => codes.clone(),
                    Payload::Encoded16 { codes, .. } => codes.iter().map(|&c| c as u32).collect(),
                    Payload::Raw(_) => unreachable!(),
                };
                prop_assert_eq!(&codes[1..], &want[..]);
                prop_assert_eq!((v.header.request_id, v.header.n_queries, v.header.criteria_fingerprint, v.header.layout),
                                (id, n, fp, layout));
                prop_assert_eq!((v.encoding_version, v.width, v.code_bits), (id, 2, if layout == 1 { 32 } else { 16 }));
            }
            prop_assert_eq!(decode_request(&frame).unwrap(), r);
        }

        /// The in-place reader accepts exactly the encoded frames the decoder accepts.
        #[test]
        fn encoded_view_agrees_with_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..120), layout in 0u8..4,
                                                n in 0u32..4, width in 0u16..3) {
            let mut f = REQUEST_MAGIC.to_vec();
            f.extend_from_slice(&[1u8; 16]);
            f.extend_from_slice(&n.to_le_bytes());
            f.push(layout);
            f.extend_from_slice(&[2u8; 16]);
            f.extend_from_slice(&width.to_le_bytes());
            f.extend_from_slice(&bytes);
            let (view, full) = (encoded_view(&f), decode_request(&f));
            match view {
                Ok(None) => prop_assert!(layout == 0),
                Ok(Some(_)) => prop_assert!(full.is_ok()),
                Err(_) => prop_assert!(full.is_err()),
            }
        }

        #[test]
        fn dictionary_replies_round_trip_and_never_panic(id in any::<u64>(), dict in prop::collection::vec(any::<u8>(), 0..64),
                                                         msg in "[a-zé ]{0,12}", junk in prop::collection::vec(any::<u8>(), 0..80)) {
            let r = DictionaryReply { request_id: id, status: Status::Ok, ruleset_version: id ^ 1, criteria_fingerprint: 3,
                                      code_bits: 16, dictionary: dict, message: msg };
            let f = encode_dictionary_reply(&r);
            prop_assert_eq!(decode_dictionary_reply(&f).unwrap(), r);
            for cut in 0..f.len() {
                prop_assert!(decode_dictionary_reply(&f[..cut]).is_err());
            }
            let mut g = DICTIONARY_REPLY_MAGIC.to_vec();
            g.extend_from_slice(&junk);
            let _ = decode_dictionary_reply(&g);
        }

        #[test]
        fn decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200), prefix in any::<bool>()) {
            let mut f = if prefix { REQUEST_MAGIC.to_vec() } else { Vec::new() };
            f.extend_from_slice(&bytes);
            let _ = decode_request(&f);
            let _ = decode_reply(&f);
        }
    }
}
