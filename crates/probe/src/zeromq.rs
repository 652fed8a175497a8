//! ZeroMQ from Rust (so the figures are libzmq's, not Python's), over inproc, ipc and tcp:
//! REQ/REP round trips by message size (like libzmq's `local_lat`/`remote_lat`, which print
//! half of this) and PUSH/PULL streaming throughput by size (like `local_thr`/`remote_thr`).

use crate::measure::{cpu_pair, pin_current_thread, sizes, summarise, time_op, Budget, Channel};
use std::time::Instant;

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

/// Binds `sock` and returns the address peers connect to (the chosen port for `tcp://…:*`).
fn bind(sock: &zmq::Socket, ep: &str) -> Result<String, String> {
    sock.bind(ep).map_err(zerr("bind"))?;
    let last = sock.get_last_endpoint().map_err(zerr("last endpoint"))?;
    Ok(last.unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned()))
}

/// The peer's context: its own for ipc/tcp, created and used on the peer's (pinned) thread so
/// its I/O thread runs on the peer's CPU, like libzmq's two-process perf tools; shared for
/// inproc, which needs one context.
fn peer_context(transport: &str, ctx: &zmq::Context) -> zmq::Context {
    if transport == "inproc" {
        ctx.clone()
    } else {
        zmq::Context::new()
    }
}

/// A new message of `n` zero bytes, as libzmq's perf senders make (`zmq_msg_init_size`, never
/// written): `calloc` hands large buffers out as untouched zero pages, and ZeroMQ takes the
/// buffer without copying it.
fn fresh_message(n: usize) -> zmq::Message {
    zmq::Message::from(vec![0u8; n].into_boxed_slice())
}

/// REQ/REP: send n bytes, receive n bytes back.
pub fn round_trip(transport: &str, dir: &std::path::Path, budget: Budget, lo: u64, hi: u64) -> Result<Channel, String> {
    let ctx = zmq::Context::new();
    let peer_ctx = peer_context(transport, &ctx);
    let ep = endpoint(transport, "lat", dir);
    let (tx, rx) = std::sync::mpsc::channel::<Result<String, String>>();
    let echo = std::thread::spawn(move || {
        pin_current_thread(cpu_pair().map(|p| p.1));
        let rep = match peer_ctx.socket(zmq::REP).map_err(zerr("socket")).and_then(|s| bind(&s, &ep).map(|a| (s, a))) {
            Ok((s, addr)) => {
                let _ = tx.send(Ok(addr));
                s
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        // An empty message ends the echo.
        while let Ok(m) = rep.recv_msg(0) {
            let done = m.is_empty();
            if rep.send(m, 0).is_err() || done {
                return;
            }
        }
    });
    let addr = rx.recv().map_err(|_| "the echo thread stopped".to_string())??;
    let req = ctx.socket(zmq::REQ).map_err(zerr("socket"))?;
    req.connect(&addr).map_err(zerr("connect"))?;
    let mut err = None;
    let mut points = Vec::new();
    for n in sizes(lo.max(1), hi) {
        points.push(time_op(n, budget, || {
            let r = req.send(fresh_message(n as usize), 0).and_then(|_| req.recv_msg(0));
            if let Err(e) = r {
                err.get_or_insert(e);
            }
        }));
        if let Some(e) = err {
            return Err(format!("zeromq {transport} round trip: {e}"));
        }
    }
    req.send(&b""[..], 0).map_err(zerr("send"))?;
    let _ = req.recv_msg(0);
    let _ = echo.join();
    Ok(Channel::new(
        &format!("zmq/{transport}-round-trip"),
        "REQ sends n bytes, REP echoes them (one round trip; libzmq's local_lat reports half)",
        points,
    ))
}

/// PUSH/PULL: a stream of messages of n bytes; time per message at the receiver.
pub fn stream(transport: &str, dir: &std::path::Path, budget: Budget, lo: u64, hi: u64) -> Result<Channel, String> {
    let ctx = zmq::Context::new();
    let pull = ctx.socket(zmq::PULL).map_err(zerr("socket"))?;
    let addr = bind(&pull, &endpoint(transport, "thr", dir))?;
    let peer_ctx = peer_context(transport, &ctx);
    let (tx, rx) = std::sync::mpsc::channel::<(u64, u64)>();
    let sender = std::thread::spawn(move || {
        pin_current_thread(cpu_pair().map(|p| p.1));
        let Ok(push) = peer_ctx.socket(zmq::PUSH) else { return };
        if push.connect(&addr).is_err() {
            return;
        }
        for (n, count) in rx {
            for _ in 0..count {
                if push.send(fresh_message(n as usize), 0).is_err() {
                    return;
                }
            }
        }
    });
    let mut points = Vec::new();
    for n in sizes(lo.max(1), hi) {
        // Enough messages for one sample to last about `min_sample` at ~1 GB/s or 1 M msg/s.
        // Ten times the usual sample length: streams need a steady state (libzmq's local_thr
        // runs ~10^6 messages).
        let target = 10.0 * budget.min_sample.as_secs_f64();
        let count = ((target * 1e9 / n as f64).min(target * 1e6)).clamp(20.0, 200_000.0) as u64;
        let mut per_msg = Vec::with_capacity(budget.samples);
        for s in 0..=budget.samples {
            tx.send((n, count)).map_err(|_| "the sender thread stopped".to_string())?;
            let t = Instant::now();
            for _ in 0..count {
                pull.recv_msg(0).map_err(zerr("recv"))?;
            }
            if s > 0 {
                per_msg.push(t.elapsed().as_secs_f64() / count as f64); // sample 0 warms up
            }
        }
        points.push(summarise(n, &mut per_msg));
    }
    drop(tx);
    let _ = sender.join();
    Ok(Channel::new(
        &format!("zmq/{transport}-stream"),
        "PUSH streams messages of n bytes; time per message received by PULL",
        points,
    ))
}
