//! Who may talk to the daemon: which endpoints may be bound without authentication, CURVE key
//! files, and the ZAP handler that admits only listed client keys.
//!
//! Authentication and encryption are ZeroMQ's own: CURVE (RFC 26, CurveZMQ) with a server key
//! pair, and the ZAP protocol (RFC 27) through which libzmq asks this process whether a client's
//! public key may connect. Key files are ZeroMQ certificates (the format czmq's `zcert` and
//! pyzmq's `zmq.auth.create_certificates` write): `NAME.key` holds the public key and may be
//! shared, `NAME.key_secret` holds both keys and stays with its owner (mode 0600).
//!
//! What reaches the daemon and what it may do is in docs/serve-protocol.md, "Security".

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A 32-byte CURVE key (binary; files hold it Z85-encoded, 40 characters).
pub type Key = [u8; 32];

/// ZAP domains: libzmq tells the handler which socket a handshake is for.
pub const CONTROL_DOMAIN: &str = "offload-control";
pub const DATA_DOMAIN: &str = "offload-data";

// ---------------------------------------------------------------------------------------------
// Where an endpoint can be reached from

/// Whether an endpoint can be reached only from this machine (IPC, in-process, TCP on a loopback
/// address) or from the network (any other address, a wildcard, an interface, a host name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Local,
    Network,
}

/// The reach of a ZeroMQ bind endpoint, judged from its text alone (nothing is resolved): a name
/// other than `localhost` or the loopback interface `lo` counts as the network, as does an
/// endpoint that cannot be read.
pub fn endpoint_reach(endpoint: &str) -> Reach {
    let Some((transport, rest)) = endpoint.split_once("://") else { return Reach::Network };
    match transport {
        "ipc" | "inproc" | "shm" => Reach::Local,
        "tcp" | "ws" => {
            let host_port = rest.split('/').next().unwrap_or("");
            let host = match host_port.rsplit_once(':') {
                Some((h, _port)) => h,
                None => host_port,
            };
            host_reach(host)
        }
        _ => Reach::Network,
    }
}

/// Transports a daemon may bind (`shm`: shared memory for clients on this host, not ZeroMQ).
const TRANSPORTS: [&str; 5] = ["tcp", "ipc", "inproc", "ws", "shm"];

/// Checks that `endpoint` reads as a ZeroMQ endpoint, `TRANSPORT://ADDRESS` (for TCP and
/// WebSocket `HOST:PORT`), before anything judges its reach: a text that is no endpoint at all
/// is said to be so, not taken for an address on the network.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "{endpoint:?} is not a ZeroMQ endpoint ({why}): give TRANSPORT://ADDRESS, e.g. tcp://127.0.0.1:5555 \
             or ipc:///tmp/offload.sock"
        ))
    };
    let Some((transport, rest)) = endpoint.split_once("://") else { return bad("no `://`") };
    if !TRANSPORTS.contains(&transport) {
        return bad(&format!("transport {transport:?} is not one of {}", TRANSPORTS.join(", ")));
    }
    if rest.is_empty() {
        return bad("no address after `://`");
    }
    if transport == "shm" {
        return crate::shm::parse_endpoint(endpoint).map(|_| ());
    }
    if matches!(transport, "tcp" | "ws") {
        let host_port = rest.split('/').next().unwrap_or("");
        match host_port.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && (p == "*" || p.parse::<u16>().is_ok()) => {}
            _ => return bad("a TCP address is HOST:PORT, the port a number or *"),
        }
    }
    Ok(())
}

fn host_reach(host: &str) -> Reach {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let local = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost") || host == "lo",
    };
    if local {
        Reach::Local
    } else {
        Reach::Network
    }
}

/// The metrics listener's address: `PORT` alone means `127.0.0.1:PORT`; otherwise `HOST:PORT`.
/// Returns the address to bind and its reach.
pub fn metrics_address(spec: &str) -> Result<(String, Reach), String> {
    let spec = spec.trim();
    if let Ok(port) = spec.parse::<u16>() {
        return Ok((format!("127.0.0.1:{port}"), Reach::Local));
    }
    let Some((host, port)) = spec.rsplit_once(':') else {
        return Err(format!("metrics address {spec:?} is not PORT or HOST:PORT (e.g. 127.0.0.1:9464)"));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!("metrics address {spec:?}: {port:?} is not a port number"));
    }
    Ok((spec.to_string(), host_reach(host)))
}

// ---------------------------------------------------------------------------------------------
// Key files

/// A key file's contents: the public key, and the secret key when it is a `.key_secret` file.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyFile {
    pub public: Key,
    pub secret: Option<Key>,
}

impl std::fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret key, even in a debug dump.
        write!(f, "KeyFile {{ public: {}, secret: {} }}", z85(&self.public), self.secret.map_or("none", |_| "<hidden>"))
    }
}

/// A key as the 40 Z85 characters key files and ZeroMQ tools use.
pub fn z85(key: &Key) -> String {
    zmq::z85_encode(key).unwrap_or_default()
}

/// Reads a ZeroMQ certificate (`public-key = "…"`, and `secret-key = "…"` in a secret file).
/// Errors name the file and line; a secret file that others may read is refused, as ssh does.
pub fn read_key_file(path: &Path) -> Result<KeyFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut public, mut secret) = (None, None);
    for (i, line) in text.lines().enumerate() {
        let Some((name, value)) = line.split_once('=') else { continue };
        let slot = match name.trim() {
            "public-key" => &mut public,
            "secret-key" => &mut secret,
            _ => continue,
        };
        let value = value.trim().trim_matches('"');
        let key = zmq::z85_decode(value)
            .ok()
            .and_then(|k| Key::try_from(k.as_slice()).ok())
            .ok_or_else(|| format!("{}:{}: {} is not a 40-character Z85 key", path.display(), i + 1, name.trim()))?;
        *slot = Some(key);
    }
    let Some(public) = public else {
        return Err(format!(
            "{}: no `public-key = \"…\"` line: not a ZeroMQ key file (make them with `offload serve keys`)",
            path.display()
        ));
    };
    if secret.is_some() {
        check_private(path)?;
    }
    Ok(KeyFile { public, secret })
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "{}: a secret key that others can read (mode {:o}) is not used: `chmod 600 {}`",
            path.display(),
            mode & 0o777,
            path.display()
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_: &Path) -> Result<(), String> {
    Ok(())
}

/// Reads a secret key file (`NAME.key_secret`): both keys.
pub fn read_secret_key(path: &Path) -> Result<(Key, Key), String> {
    let k = read_key_file(path)?;
    match k.secret {
        Some(secret) => Ok((k.public, secret)),
        None => Err(format!(
            "{}: holds no secret key: give the NAME.key_secret file here (NAME.key is the public half)",
            path.display()
        )),
    }
}

/// Makes a new key pair and writes `DIR/NAME.key` (public, mode 0644) and `DIR/NAME.key_secret`
/// (both keys, mode 0600), whole or not at all: each to a temporary name, synced, then both
/// renamed (a full disk leaves neither file, and no temporary one). An existing pair (a secret
/// file that reads as one) is kept unless `force`; a half-written or empty file, left by an
/// older version on a full disk, is no pair and is replaced.
pub fn write_key_pair(dir: &Path, name: &str, force: bool) -> Result<(PathBuf, PathBuf), String> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(format!("key name {name:?}: use a plain file name such as `server` or `ops`"));
    }
    if !zmq::has("curve").unwrap_or(false) {
        return Err(no_curve());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (public_path, secret_path) = (dir.join(format!("{name}.key")), dir.join(format!("{name}.key_secret")));
    if !force && read_secret_key(&secret_path).is_ok() {
        return Err(format!("{} already exists: keep it, or pass --force to replace the pair", secret_path.display()));
    }
    let pair = zmq::CurveKeyPair::new().map_err(|e| format!("CURVE key pair: {e}"))?;
    let head = |kind: &str| {
        format!(
            "#   ****  Generated by offload {}  ****\n#   ZeroMQ CURVE {kind} Certificate\n\nmetadata\ncurve\n",
            env!("CARGO_PKG_VERSION")
        )
    };
    let public = format!("{}    public-key = \"{}\"\n", head("Public"), z85(&pair.public_key));
    let secret = format!(
        "{}    public-key = \"{}\"\n    secret-key = \"{}\"\n",
        head("**Secret**"),
        z85(&pair.public_key),
        z85(&pair.secret_key)
    );
    let public_tmp = write_temp(&public_path, &public, 0o644)?;
    let secret_tmp = write_temp(&secret_path, &secret, 0o600).inspect_err(|_| {
        let _ = std::fs::remove_file(&public_tmp);
    })?;
    let renamed = |from: &Path, to: &Path| std::fs::rename(from, to).map_err(|e| format!("{}: {e}", to.display()));
    // The secret first: alone it is a whole pair (it holds the public key too). Should the
    // public file's rename fail, the secret goes again: both files or neither.
    if let Err(e) = renamed(&secret_tmp, &secret_path) {
        let _ = (std::fs::remove_file(&secret_tmp), std::fs::remove_file(&public_tmp));
        return Err(e);
    }
    if let Err(e) = renamed(&public_tmp, &public_path) {
        let _ = (std::fs::remove_file(&public_tmp), std::fs::remove_file(&secret_path));
        return Err(e);
    }
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all(); // the renames themselves; some file systems refuse fsync on a directory
    }
    Ok((public_path, secret_path))
}

/// Writes `text` to a temporary file beside `path` (`.NAME.tmp`) with `mode`, synced to disk;
/// returns its name. On any error the temporary file is removed and the error names `path`.
#[cfg_attr(not(unix), allow(unused_variables))]
fn write_temp(path: &Path, text: &str, mode: u32) -> Result<PathBuf, String> {
    use std::io::Write;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let written = options.open(&tmp).and_then(|mut f| {
        // The mode given at creation is filtered by the umask and ignored for an existing file:
        // set it once more on the open file, before a secret is written into it.
        #[cfg(unix)]
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    });
    written.map(|()| tmp.clone()).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
}

/// A client key admitted by the ZAP handler, with the name the daemon knows it by (the key
/// file's stem: `ops.key` is `ops`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientKey {
    pub name: String,
    pub public: Key,
}

/// Reads the admitted client keys: each path is a public key file or a directory whose `*.key`
/// files are read. An empty list is an error (it would refuse everyone, silently).
pub fn read_client_keys(paths: &[PathBuf]) -> Result<Vec<ClientKey>, String> {
    let mut keys = Vec::new();
    for p in paths {
        let files: Vec<PathBuf> = if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "key"))
                .collect();
            v.sort();
            v
        } else {
            vec![p.clone()]
        };
        for f in files {
            let name = f.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
            keys.push(ClientKey { name, public: read_key_file(&f)?.public });
        }
    }
    if keys.is_empty() {
        let listed: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(format!("no client keys (*.key) in {}: nobody could connect", listed.join(", ")));
    }
    Ok(keys)
}

pub(crate) fn no_curve() -> String {
    "this build's libzmq has no CURVE support (zmq_has(\"curve\") is false): build offload where \
     `make sys-deps` installs Debian's libzmq, or keep every endpoint on loopback or IPC"
        .into()
}

// ---------------------------------------------------------------------------------------------
// Socket roles

/// The daemon's side of CURVE: its key pair.
#[derive(Clone)]
pub struct CurveServer {
    pub public: Key,
    pub secret: Key,
}

impl std::fmt::Debug for CurveServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CurveServer {{ public: {} }}", z85(&self.public))
    }
}

impl CurveServer {
    pub fn from_file(secret_key: &Path) -> Result<CurveServer, String> {
        let (public, secret) = read_secret_key(secret_key)?;
        Ok(CurveServer { public, secret })
    }

    /// Makes `socket` a CURVE server whose handshakes the ZAP handler decides under `domain`.
    /// Call before binding.
    pub fn apply(&self, socket: &zmq::Socket, domain: &str) -> Result<(), String> {
        let e = |what: &str, e: zmq::Error| format!("{what}: {e}");
        socket.set_curve_server(true).map_err(|x| e("CURVE_SERVER", x))?;
        socket.set_curve_secretkey(&self.secret).map_err(|x| e("CURVE_SECRETKEY", x))?;
        socket.set_zap_domain(domain).map_err(|x| e("ZAP_DOMAIN", x))
    }
}

/// A client's side of CURVE: the server's public key and the client's own pair.
#[derive(Clone)]
pub struct CurveClient {
    pub server: Key,
    pub public: Key,
    pub secret: Key,
}

impl std::fmt::Debug for CurveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CurveClient {{ server: {}, public: {} }}", z85(&self.server), z85(&self.public))
    }
}

impl CurveClient {
    /// From the server's public key file (`server.key`) and the client's secret one
    /// (`NAME.key_secret`).
    pub fn from_files(server_key: &Path, client_secret_key: &Path) -> Result<CurveClient, String> {
        let server = read_key_file(server_key)?.public;
        let (public, secret) = read_secret_key(client_secret_key)?;
        Ok(CurveClient { server, public, secret })
    }

    /// Makes `socket` a CURVE client of the server. Call before connecting.
    pub fn apply(&self, socket: &zmq::Socket) -> Result<(), String> {
        if !zmq::has("curve").unwrap_or(false) {
            return Err(no_curve());
        }
        let e = |what: &str, e: zmq::Error| format!("{what}: {e}");
        socket.set_curve_serverkey(&self.server).map_err(|x| e("CURVE_SERVERKEY", x))?;
        socket.set_curve_publickey(&self.public).map_err(|x| e("CURVE_PUBLICKEY", x))?;
        socket.set_curve_secretkey(&self.secret).map_err(|x| e("CURVE_SECRETKEY", x))
    }
}

// ---------------------------------------------------------------------------------------------
// The ZAP handler

/// Handshakes admitted and refused, per socket (ZAP domain).
#[derive(Debug, Default)]
pub struct AuthCounters {
    pub control_ok: AtomicU64,
    pub control_refused: AtomicU64,
    pub data_ok: AtomicU64,
    pub data_refused: AtomicU64,
    /// The address of the last refused peer, for the operator (`stats`).
    pub last_refused: Mutex<String>,
}

impl AuthCounters {
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("control_ok", l(&self.control_ok)),
            ("control_refused", l(&self.control_refused)),
            ("data_ok", l(&self.data_ok)),
            ("data_refused", l(&self.data_refused)),
        ]
    }

    fn count(&self, domain: &str, admitted: bool, address: &str) {
        let c = match (domain, admitted) {
            (CONTROL_DOMAIN, true) => &self.control_ok,
            (CONTROL_DOMAIN, false) => &self.control_refused,
            (_, true) => &self.data_ok,
            (_, false) => &self.data_refused,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if !admitted {
            *self.last_refused.lock().unwrap_or_else(|p| p.into_inner()) = address.to_string();
        }
    }
}

/// The ZAP handler: a REP socket on `inproc://zeromq.zap.01` in the daemon's context, answering
/// libzmq's questions about each CURVE handshake. It must outlive every CURVE socket of the
/// context: without a handler libzmq admits any client that knows the server key.
pub struct Zap {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Zap {
    /// Binds the handler (before any CURVE socket binds) and answers on its own thread:
    /// `allowed` maps a ZAP domain to the client keys it admits.
    pub fn start(
        ctx: &zmq::Context,
        allowed: HashMap<String, Vec<ClientKey>>,
        counters: Arc<AuthCounters>,
    ) -> Result<Zap, String> {
        let sock = ctx.socket(zmq::REP).map_err(|e| format!("ZAP socket: {e}"))?;
        sock.set_linger(0).map_err(|e| format!("ZAP socket: {e}"))?;
        sock.bind("inproc://zeromq.zap.01").map_err(|e| format!("ZAP handler: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("offload-zap".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    if sock.poll(zmq::POLLIN, 50).unwrap_or(0) == 0 {
                        continue;
                    }
                    let Ok(request) = sock.recv_multipart(0) else { continue };
                    let reply = zap_reply(&request, &allowed, &counters);
                    let _ = sock.send_multipart(reply, 0);
                }
            })
            .map_err(|e| format!("spawn ZAP handler: {e}"))?;
        Ok(Zap { stop, thread: Some(thread) })
    }
}

impl Drop for Zap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One ZAP request → its reply (RFC 27): `[version, request id, domain, address, identity,
/// mechanism, credentials…]` → `[version, request id, status code, status text, user id,
/// metadata]`. Only CURVE handshakes with an admitted key for their domain get "200".
fn zap_reply(request: &[Vec<u8>], allowed: &HashMap<String, Vec<ClientKey>>, counters: &AuthCounters) -> Vec<Vec<u8>> {
    let frame = |i: usize| request.get(i).map_or(&[][..], Vec::as_slice);
    let text = |i: usize| String::from_utf8_lossy(frame(i)).into_owned();
    let answer = |code: &str, why: &str, user: &str| {
        vec![b"1.0".to_vec(), frame(1).to_vec(), code.into(), why.into(), user.into(), Vec::new()]
    };
    if frame(0) != b"1.0" || request.len() < 6 {
        return answer("500", "unsupported ZAP request", "");
    }
    let (domain, address, mechanism) = (text(2), text(3), text(5));
    let known = (mechanism == "CURVE")
        .then(|| allowed.get(&domain))
        .flatten()
        .and_then(|keys| keys.iter().find(|k| k.public[..] == *frame(6)));
    counters.count(&domain, known.is_some(), &address);
    match known {
        Some(k) => answer("200", "OK", &k.name),
        None => answer("400", "client key not allowed", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_of_endpoints() {
        for ep in ["ipc:///tmp/x.sock", "inproc://a", "tcp://127.0.0.1:5555", "tcp://127.8.9.1:1", "tcp://[::1]:5"] {
            assert_eq!(endpoint_reach(ep), Reach::Local, "{ep}");
        }
        for ep in ["tcp://localhost:5555", "tcp://lo:5555", "ws://127.0.0.1:80/x"] {
            assert_eq!(endpoint_reach(ep), Reach::Local, "{ep}");
        }
        for ep in [
            "tcp://0.0.0.0:5555",
            "tcp://*:5555",
            "tcp://eth0:5555",
            "tcp://10.1.2.3:5555",
            "tcp://[::]:5555",
            "tcp://example.org:5555",
            "pgm://eth0;239.192.1.1:5555",
            "ws://0.0.0.0:80",
            "garbage",
        ] {
            assert_eq!(endpoint_reach(ep), Reach::Network, "{ep}");
        }
    }

    #[test]
    fn endpoints_that_are_none_are_said_so() {
        for ok in ["tcp://127.0.0.1:5555", "tcp://*:5555", "tcp://[::1]:1", "ipc:///tmp/x.sock", "ipc://@abstract"] {
            assert_eq!(check_endpoint(ok), Ok(()), "{ok}");
        }
        for bad in ["garbage", "tcp://", "tcp://127.0.0.1", "tcp://127.0.0.1:notaport", "udp://1.2.3.4:5", "ipc://"] {
            let e = check_endpoint(bad).unwrap_err();
            assert!(e.contains("is not a ZeroMQ endpoint") && e.contains(bad) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn metrics_addresses() {
        assert_eq!(metrics_address("9464").unwrap(), ("127.0.0.1:9464".into(), Reach::Local));
        assert_eq!(metrics_address("localhost:1").unwrap().1, Reach::Local);
        assert_eq!(metrics_address("[::1]:1").unwrap().1, Reach::Local);
        assert_eq!(metrics_address("0.0.0.0:9464").unwrap().1, Reach::Network);
        assert!(metrics_address("0.0.0.0").unwrap_err().contains("PORT"));
        assert!(metrics_address("h:x").unwrap_err().contains("port"));
    }

    #[test]
    fn key_files_round_trip_and_secrets_stay_private() {
        let dir = std::env::temp_dir().join(format!("offload-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (public, secret) = write_key_pair(&dir, "server", false).unwrap();
        let p = read_key_file(&public).unwrap();
        let s = read_key_file(&secret).unwrap();
        assert_eq!((p.public, p.secret.is_none()), (s.public, true));
        assert!(s.secret.is_some() && !format!("{s:?}").contains(&z85(&s.secret.unwrap())));
        assert!(write_key_pair(&dir, "server", false).unwrap_err().contains("--force"));
        assert!(write_key_pair(&dir, "../x", false).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(read_key_file(&secret).unwrap_err().contains("chmod 600"));
            write_key_pair(&dir, "server", true).unwrap();
            assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert!(read_secret_key(&public).unwrap_err().contains("key_secret"));
        write_key_pair(&dir, "ops", false).unwrap();
        let keys = read_client_keys(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["ops", "server"]);
        std::fs::write(dir.join("bad.key"), "metadata\ncurve\n    public-key = \"short\"\n").unwrap();
        let e = read_client_keys(std::slice::from_ref(&dir)).unwrap_err();
        assert!(e.contains("bad.key:3") && e.contains("Z85"), "{e}");
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(read_client_keys(&[empty]).unwrap_err().contains("nobody"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn zap_admits_listed_keys_for_their_domain_only() {
        let ops = ClientKey { name: "ops".into(), public: [7; 32] };
        let allowed = HashMap::from([(CONTROL_DOMAIN.to_string(), vec![ops])]);
        let c = AuthCounters::default();
        let req = |domain: &str, mech: &str, key: [u8; 32]| {
            vec![b"1.0".to_vec(), b"9".to_vec(), domain.into(), b"10.0.0.9".to_vec(), vec![], mech.into(), key.to_vec()]
        };
        let ok = zap_reply(&req(CONTROL_DOMAIN, "CURVE", [7; 32]), &allowed, &c);
        assert_eq!((&ok[1][..], &ok[2][..], &ok[4][..]), (&b"9"[..], &b"200"[..], &b"ops"[..]));
        assert_eq!(zap_reply(&req(CONTROL_DOMAIN, "CURVE", [8; 32]), &allowed, &c)[2], b"400");
        assert_eq!(zap_reply(&req(DATA_DOMAIN, "CURVE", [7; 32]), &allowed, &c)[2], b"400");
        assert_eq!(zap_reply(&req(CONTROL_DOMAIN, "NULL", [7; 32]), &allowed, &c)[2], b"400");
        assert_eq!(zap_reply(&[b"2.0".to_vec()], &allowed, &c)[2], b"500");
        assert_eq!(c.snapshot(), [("control_ok", 1), ("control_refused", 2), ("data_ok", 0), ("data_refused", 1)]);
        assert_eq!(*c.last_refused.lock().unwrap(), "10.0.0.9");
    }
}
