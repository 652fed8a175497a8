//! ZeroMQ from Rust (so the figures are libzmq's, not Python's), over inproc, ipc and tcp:
//! REQ/REP round trips by message size (like libzmq's `local_lat`/`remote_lat`, which print
//! half of this) and PUSH/PULL streaming throughput by size (like `local_thr`/`remote_thr`).
//!
//! The measuring side binds; the peer ([`peer_main`]) connects from another CPU, with its own
//! context (hence its own I/O thread), either as a thread or — for ipc and tcp, when a peer
//! command is given — as a separate process, exactly like libzmq's two-process perf tools.
//! (In one process, large message buffers are unmapped with TLB shootdowns across both CPUs,
//! which two processes do not pay.) Each message is a freshly allocated buffer nobody writes (as in libzmq's perf tools).

use crate::measure::{cpu_pair, pin_current_thread, sizes, summarise, time_op, Budget, Channel};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long the measuring side waits for the peer before giving up.
const PEER_TIMEOUT: Duration = Duration::from_secs(20);

/// Where the peer runs.
#[derive(Debug, Clone, Default)]
pub enum Peer {
    /// A thread of this process (always for inproc).
    #[default]
    Thread,
    /// A process started with this command, to which `zmq-peer ROLE DATA CONTROL CPU` is
    /// appended; it must call [`peer_main`] with those four arguments.
    Process(Vec<String>),
}

/// An endpoint for `transport` (`inproc`, `ipc`, `tcp`); ipc sockets go to `dir`.
fn endpoint(transport: &str, tag: &str, dir: &std::path::Path) -> String {
    match transport {
        "inproc" => format!("inproc://probe-{tag}"),
        "ipc" => format!("ipc://{}/offload-probe-{}-{tag}.sock", dir.display(), std::process::id()),
        _ => "tcp://127.0.0.1:*".into(),
    }
}

fn zerr(what: &str) -> impl Fn(zmq::Error) -> String + '_ {
    move |e| format!("zeromq {what}: {e}")
}

/// Binds `sock` and returns the address peers connect to (the chosen port for `tcp://…:*`),
/// and the guard that removes an IPC socket file once the measurement is over.
fn bind(sock: &zmq::Socket, ep: &str) -> Result<(String, IpcFile), String> {
    sock.bind(ep).map_err(zerr("bind"))?;
    let file = IpcFile(ep.strip_prefix("ipc://").filter(|p| !p.starts_with('@')).map(Into::into));
    let last = sock.get_last_endpoint().map_err(zerr("last endpoint"))?;
    Ok((last.unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned()), file))
}

/// Removes a bound IPC endpoint's socket file when dropped: libzmq leaves it behind.
struct IpcFile(Option<std::path::PathBuf>);

impl Drop for IpcFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A new message of `n` bytes exactly as libzmq's perf senders make it: `zmq_msg_init_size`,
/// never written. Zeroing it (`vec![0; n]`, `Message::with_size`) would add a memset of n bytes
/// per message to the sender's CPU: at 1 MiB that is a third of the stream's time here, and it
/// measures memory bandwidth, not the channel.
fn fresh_message(n: usize) -> zmq::Message {
    // SAFETY: the bytes are uninitialized, so Rust must never read them: this message is only
    // ever handed to `send`, where libzmq copies them to the socket from C (an indeterminate
    // byte copied by C is not undefined behaviour), and the receiving peer is this probe, which
    // reads only lengths. It is never dereferenced here.
    #[allow(deprecated)] // the only zmq 0.10 constructor that does not zero the buffer
    unsafe {
        zmq::Message::with_capacity_unallocated(n)
    }
}

/// The peer side. `role` is `echo` (REP: return every message, stop at an empty one) or `send`
/// (PUSH: on each control message "n count", send count messages of n bytes; stop at "stop").
/// It pins itself to `cpu` before its first socket, so its I/O thread runs there too.
pub fn peer_main(role: &str, data: &str, control: &str, cpu: Option<usize>) -> Result<(), String> {
    peer_with(&zmq::Context::new(), role, data, control, cpu)
}

fn peer_with(ctx: &zmq::Context, role: &str, data: &str, control: &str, cpu: Option<usize>) -> Result<(), String> {
    pin_current_thread(cpu);
    match role {
        "echo" => {
            let rep = ctx.socket(zmq::REP).map_err(zerr("socket"))?;
            rep.connect(data).map_err(zerr("connect"))?;
            loop {
                let m = rep.recv_msg(0).map_err(zerr("recv"))?;
                let done = m.is_empty();
                rep.send(m, 0).map_err(zerr("send"))?;
                if done {
                    return Ok(());
                }
            }
        }
        "send" => {
            let push = ctx.socket(zmq::PUSH).map_err(zerr("socket"))?;
            push.connect(data).map_err(zerr("connect"))?;
            let ctl = ctx.socket(zmq::PAIR).map_err(zerr("socket"))?;
            ctl.connect(control).map_err(zerr("connect"))?;
            loop {
                let cmd = ctl.recv_string(0).map_err(zerr("recv"))?.unwrap_or_default();
                let mut it = cmd.split_whitespace().map(str::parse::<u64>);
                match (it.next(), it.next()) {
                    (Some(Ok(n)), Some(Ok(count))) => {
                        for _ in 0..count {
                            push.send(fresh_message(n as usize), 0).map_err(zerr("send"))?;
                        }
                    }
                    _ => return Ok(()),
                }
            }
        }
        other => Err(format!("unknown ZeroMQ peer role {other:?} (echo or send)")),
    }
}

/// A running peer: a thread or a child process.
enum Running {
    Thread(std::thread::JoinHandle<Result<(), String>>),
    Process(Child),
}

fn start_peer(
    peer: &Peer,
    transport: &str,
    ctx: &zmq::Context,
    role: &str,
    data: &str,
    control: &str,
) -> Result<Running, String> {
    let cpu = cpu_pair().map(|p| p.1);
    match peer {
        Peer::Process(cmd) if transport != "inproc" && !cmd.is_empty() => {
            let mut c = Command::new(&cmd[0]);
            c.args(&cmd[1..]).args(["zmq-peer", role, data, control, &cpu.map_or("-".into(), |c| c.to_string())]);
            c.spawn().map(Running::Process).map_err(|e| format!("starting the ZeroMQ peer {:?}: {e}", cmd[0]))
        }
        _ => {
            // inproc needs the measuring side's context; ipc/tcp get their own, like a process.
            let peer_ctx = if transport == "inproc" { ctx.clone() } else { zmq::Context::new() };
            let (role, data, control) = (role.to_string(), data.to_string(), control.to_string());
            Ok(Running::Thread(std::thread::spawn(move || peer_with(&peer_ctx, &role, &data, &control, cpu))))
        }
    }
}

impl Running {
    /// After a failure: a peer process is killed (a thread ends with its sockets' timeouts).
    fn abort(self) {
        if let Running::Process(mut c) = self {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn finish(self) -> Result<(), String> {
        match self {
            Running::Thread(t) => t.join().map_err(|_| "the ZeroMQ peer thread panicked".to_string())?,
            Running::Process(mut c) => {
                let status = c.wait().map_err(|e| e.to_string())?;
                if status.success() {
                    Ok(())
                } else {
                    Err(format!("the ZeroMQ peer process exited with {status}"))
                }
            }
        }
    }
}

fn timed_socket(ctx: &zmq::Context, kind: zmq::SocketType) -> Result<zmq::Socket, String> {
    let s = ctx.socket(kind).map_err(zerr("socket"))?;
    s.set_rcvtimeo(PEER_TIMEOUT.as_millis() as i32).map_err(zerr("rcvtimeo"))?;
    s.set_linger(0).map_err(zerr("linger"))?;
    Ok(s)
}

/// REQ/REP: send n bytes, receive n bytes back.
pub fn round_trip(
    transport: &str,
    dir: &std::path::Path,
    peer: &Peer,
    budget: Budget,
    lo: u64,
    hi: u64,
) -> Result<Channel, String> {
    let ctx = zmq::Context::new();
    let req = timed_socket(&ctx, zmq::REQ)?;
    let (addr, _file) = bind(&req, &endpoint(transport, "lat", dir))?;
    let running = start_peer(peer, transport, &ctx, "echo", &addr, "-")?;
    let mut err = None;
    let mut points = Vec::new();
    for n in sizes(lo.max(1), hi) {
        // As remote_lat: each round trip sends on the message the last one received (one
        // allocation, by the receiving I/O thread, per message and direction).
        let mut msg = Some(fresh_message(n as usize));
        points.push(time_op(n, budget, || {
            if let (None, Some(m)) = (&err, msg.take()) {
                match req.send(m, 0).and_then(|_| req.recv_msg(0)) {
                    Ok(back) => msg = Some(back),
                    Err(e) => err = Some(e),
                }
            }
        }));
        if err.is_some() {
            break;
        }
    }
    if let Some(e) = err {
        running.abort();
        return Err(format!("zeromq {transport} round trip: {e} (no answer from the peer)"));
    }
    req.send(&b""[..], 0).map_err(zerr("send"))?;
    let _ = req.recv_msg(0);
    running.finish()?;
    Ok(Channel::new(
        &format!("zmq/{transport}-round-trip"),
        "REQ sends n bytes, REP echoes them (one round trip; libzmq's local_lat reports half)",
        points,
    ))
}

/// PUSH/PULL: a stream of messages of n bytes; time per message at the receiver.
pub fn stream(
    transport: &str,
    dir: &std::path::Path,
    peer: &Peer,
    budget: Budget,
    lo: u64,
    hi: u64,
) -> Result<Channel, String> {
    let ctx = zmq::Context::new();
    let pull = timed_socket(&ctx, zmq::PULL)?;
    let (addr, _file) = bind(&pull, &endpoint(transport, "thr", dir))?;
    let ctl = timed_socket(&ctx, zmq::PAIR)?;
    let (ctl_addr, _ctl_file) = bind(&ctl, &endpoint(transport, "ctl", dir))?;
    let running = start_peer(peer, transport, &ctx, "send", &addr, &ctl_addr)?;
    let mut points = Vec::new();
    let result = (|| {
        for n in sizes(lo.max(1), hi) {
            // Ten times the usual sample length: streams need a steady state (libzmq's
            // local_thr runs ~10^6 messages).
            let target = 10.0 * budget.min_sample.as_secs_f64();
            let count = budget.ops.map_or_else(
                || ((target * 1e9 / n as f64).min(target * 1e6)).clamp(20.0, 200_000.0) as u64,
                |ops| ops.max(2),
            );
            // A warm-up sample first, except in a fixed-count run (local_thr has none).
            let first = u64::from(budget.ops.is_some());
            let mut per_msg = Vec::with_capacity(budget.samples);
            for s in first..=budget.samples as u64 {
                ctl.send(format!("{n} {count}").as_bytes(), 0).map_err(zerr("control"))?;
                // As local_thr: the clock starts at the first message.
                pull.recv_msg(0).map_err(|e| format!("zeromq recv: {e} (no message from the peer)"))?;
                let t = Instant::now();
                for _ in 1..count {
                    pull.recv_msg(0).map_err(zerr("recv"))?;
                }
                if s > 0 {
                    per_msg.push(t.elapsed().as_secs_f64() / (count - 1) as f64);
                    // sample 0 warms up
                }
            }
            points.push(summarise(n, &mut per_msg));
        }
        Ok::<(), String>(())
    })();
    let _ = ctl.send(&b"stop"[..], 0);
    if let Err(e) = result {
        running.abort();
        return Err(format!("zeromq {transport} stream: {e}"));
    }
    running.finish()?;
    Ok(Channel::new(
        &format!("zmq/{transport}-stream"),
        "PUSH streams messages of n bytes; time per message received by PULL",
        points,
    ))
}
