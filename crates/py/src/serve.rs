//! `offload._native` bindings of `crates/serve`: the daemon (its arguments parsed by
//! `offload_serve::config::Settings`), CURVE keys, request and reply frames, the echo baseline,
//! the load generator (`offload_serve::loadgen`), the device-time formula and lanes
//! (`offload_serve::benchmark_only::emulated`, for the planner).
//! Conversions only; loops run with the GIL released.

use crate::rules::{extract_columns, OwnedColumn};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use offload_rules::PackedStrings;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::IntoPyObjectExt;
use std::path::PathBuf;
use std::sync::Arc;

/// Serves a rule set over ZeroMQ until SIGINT/SIGTERM (`offload serve ARGS`): `args` are the
/// command line after `offload serve`, parsed by the daemon's one settings type
/// (`offload_serve::config::Settings`, the same as `offload-serve`'s). Returns the counters, or
/// the text `--help`/`--version` asked for; bad arguments are a ValueError of one line.
#[pyfunction]
fn serve(py: Python<'_>, args: Vec<String>) -> PyResult<PyObject> {
    use offload_serve::config::{ArgsError, Settings};
    let settings = match Settings::from_args(std::iter::once("offload serve".to_string()).chain(args)) {
        Ok(s) => s,
        Err(ArgsError::Show(text)) => return text.into_py_any(py),
        Err(ArgsError::Invalid(why)) => return Err(PyValueError::new_err(why)),
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let counters = py
        .allow_threads(|| {
            offload_serve::serve(settings, stop, |s, cfg| {
                eprintln!(
                    "serving {} rules (version {}) on {} with {}w {}k {}e",
                    s.engine.rules().len(),
                    s.version,
                    cfg.endpoints.join(", "),
                    cfg.workers,
                    cfg.kernels,
                    cfg.engine_threads
                )
            })
        })
        .map_err(PyValueError::new_err)?;
    counters.into_py_any(py)
}

/// The daemon's options as `--help` shows them, for `offload serve --help` (usage named `name`).
#[pyfunction]
fn serve_help(name: &str) -> String {
    offload_serve::config::Settings::help(name)
}

/// Checks a value of the daemon's numeric setting `key` against its range (the one table,
/// `offload_serve::config::BOUNDS`): the value, or a ValueError of one line naming the range. For
/// tools that start daemons with settings of their own (`offload serve sweep`).
#[pyfunction]
fn serve_check_setting(key: &str, value: u64) -> PyResult<u64> {
    offload_serve::config::check_setting(key, value).map_err(PyValueError::new_err)
}

/// Makes a CURVE key pair: `DIR/NAME.key` (public) and `DIR/NAME.key_secret` (mode 0600);
/// returns their paths (`offload serve keys`).
#[pyfunction]
#[pyo3(signature = (directory, name, force = false))]
fn curve_key_pair(directory: PathBuf, name: &str, force: bool) -> PyResult<(PathBuf, PathBuf)> {
    offload_serve::auth::write_key_pair(&directory, name, force).map_err(PyValueError::new_err)
}

/// Reads a ZeroMQ key file: (public key, secret key or None), Z85-encoded.
#[pyfunction]
fn read_curve_key(path: PathBuf) -> PyResult<(String, Option<String>)> {
    use offload_serve::auth::{read_key_file, z85};
    let k = read_key_file(&path).map_err(PyValueError::new_err)?;
    Ok((z85(&k.public), k.secret.as_ref().map(z85)))
}

/// The fingerprint requests carry of the criterion names their columns follow, in order
/// (protocol version 2, `offload_serve::protocol::criteria_fingerprint`).
#[pyfunction]
fn criteria_fingerprint(names: Vec<String>) -> u64 {
    offload_serve::protocol::criteria_fingerprint(&names)
}

/// Builds a request frame from raw query columns (one per criterion, in the order whose names'
/// `criteria_fingerprint` is given): each a list of str or `("packed", data uint8, offsets int64)`.
#[pyfunction]
fn encode_request<'py>(
    py: Python<'py>,
    request_id: u64,
    deadline_us: u64,
    stop_after: u32,
    fingerprint: u64,
    columns: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    use offload_serve::protocol::{Payload, RawColumnOwned, Request};
    let owned = extract_columns(columns)?;
    let mut cols = Vec::with_capacity(owned.len());
    let mut n: Option<usize> = None;
    for c in &owned {
        let mut col = RawColumnOwned { offsets: vec![0], data: Vec::new() };
        let mut push = |v: &[u8]| -> PyResult<()> {
            col.data.extend_from_slice(v);
            let end = u32::try_from(col.data.len())
                .map_err(|_| PyValueError::new_err("a column holds more than 4 GiB of text: split the request"))?;
            col.offsets.push(end);
            Ok(())
        };
        match c {
            OwnedColumn::Str(v) => v.iter().try_for_each(|s| push(s.to_str()?.as_bytes()))?,
            OwnedColumn::Int(a) => a.as_array().iter().try_for_each(|x| push(x.to_string().as_bytes()))?,
            OwnedColumn::Packed(d, o) => {
                let p = PackedStrings::new(
                    d.as_slice().map_err(|_| PyValueError::new_err("string data must be contiguous"))?,
                    o.as_slice().map_err(|_| PyValueError::new_err("offsets must be contiguous"))?,
                )
                .map_err(PyValueError::new_err)?;
                (0..p.len()).try_for_each(|i| push(p.get(i).as_bytes()))?
            }
        }
        let len = col.offsets.len() - 1;
        if *n.get_or_insert(len) != len {
            return Err(PyValueError::new_err("query columns have different lengths"));
        }
        cols.push(col);
    }
    let req = Request {
        request_id,
        deadline_us,
        stop_after,
        n_queries: n.unwrap_or(0) as u32,
        criteria_fingerprint: fingerprint,
        payload: Payload::Raw(cols),
    };
    Ok(pyo3::types::PyBytes::new(py, &offload_serve::protocol::encode_request(&req)))
}

/// Builds a request frame from pre-encoded rows (`CompiledRules.encode`, or
/// `DictionaryEncoder.encode`) for rule-set version `encoding_version` of the rule type whose
/// criteria have `fingerprint`: a uint32 array is layout 1, a uint16 one layout 2.
#[pyfunction]
fn encode_request_codes<'py>(
    py: Python<'py>,
    request_id: u64,
    deadline_us: u64,
    stop_after: u32,
    fingerprint: u64,
    encoding_version: u64,
    codes: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    use offload_serve::protocol::{Payload, Request};
    let contiguous = || PyValueError::new_err("codes must be C-contiguous");
    let (n, payload) = if let Ok(a) = codes.extract::<PyReadonlyArray2<'py, u32>>() {
        let (n, w) = (a.shape()[0], a.shape()[1]);
        let codes = a.as_slice().map_err(|_| contiguous())?.to_vec();
        (n, Payload::Encoded { encoding_version, width: width_u16(w)?, codes })
    } else if let Ok(a) = codes.extract::<PyReadonlyArray2<'py, u16>>() {
        let (n, w) = (a.shape()[0], a.shape()[1]);
        let codes = a.as_slice().map_err(|_| contiguous())?.to_vec();
        (n, Payload::Encoded16 { encoding_version, width: width_u16(w)?, codes })
    } else {
        return Err(PyValueError::new_err("codes must be a 2-d uint32 or uint16 array"));
    };
    let n_queries = u32::try_from(n).map_err(|_| PyValueError::new_err("more than 2^32 - 1 queries"))?;
    let req = Request { request_id, deadline_us, stop_after, n_queries, criteria_fingerprint: fingerprint, payload };
    Ok(pyo3::types::PyBytes::new(py, &offload_serve::protocol::encode_request(&req)))
}

fn width_u16(w: usize) -> PyResult<u16> {
    u16::try_from(w).map_err(|_| PyValueError::new_err(format!("rows of {w} codes: at most 65535")))
}

/// A dictionary request frame (`offload_serve::protocol::encode_dictionary_request`).
#[pyfunction]
fn encode_dictionary_request(py: Python<'_>, request_id: u64) -> Bound<'_, pyo3::types::PyBytes> {
    pyo3::types::PyBytes::new(py, &offload_serve::protocol::encode_dictionary_request(request_id))
}

/// Decodes a dictionary reply: (request_id, status, ruleset_version, criteria_fingerprint,
/// code_bits, dictionary bytes (for `DictionaryEncoder`), message).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn decode_dictionary_reply<'py>(
    py: Python<'py>,
    frame: &[u8],
) -> PyResult<(u64, String, u64, u64, u8, Bound<'py, pyo3::types::PyBytes>, String)> {
    let r =
        offload_serve::protocol::decode_dictionary_reply(frame).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((
        r.request_id,
        format!("{:?}", r.status),
        r.ruleset_version,
        r.criteria_fingerprint,
        r.code_bits,
        pyo3::types::PyBytes::new(py, &r.dictionary),
        r.message,
    ))
}

/// Decodes a reply frame: (request_id, status, ruleset_version, rule u32[], content i64[],
/// {stage: ns}, message).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn decode_reply<'py>(
    py: Python<'py>,
    frame: &[u8],
) -> PyResult<(u64, String, u64, Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<i64>>, Vec<(String, u64)>, String)> {
    use offload_serve::protocol::Stage;
    let r = offload_serve::protocol::decode_reply(frame).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let stages = r
        .stages_ns
        .iter()
        .map(|&(s, ns)| {
            let name = Stage::ALL.iter().find(|x| **x as u8 == s).map_or("unknown", |x| x.name());
            (name.to_string(), ns)
        })
        .collect();
    Ok((
        r.request_id,
        format!("{:?}", r.status),
        r.ruleset_version,
        r.rule.into_pyarray(py),
        r.content.into_pyarray(py),
        stages,
        r.message,
    ))
}

/// A bare ZeroMQ echo server on `endpoint` for `seconds` (GIL released): the baseline for the
/// service's round trip. Returns the number of messages echoed.
#[pyfunction]
fn zmq_echo(py: Python<'_>, endpoint: String, seconds: f64) -> PyResult<u64> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds.max(0.0)));
        s2.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let r = py.allow_threads(|| offload_serve::echo(&endpoint, stop));
    let _ = timer.join();
    r.map_err(PyValueError::new_err)
}

/// Runs the load generator (`offload_serve::loadgen`, GIL released) on pre-built request
/// `frames`: `mode` is "open" (`rate` requests/s), "closed" (`in_flight` out per connection) or
/// "knee" (bisection on the rate for the most requests/s with p99 within `sla_p99_us`, `steps`
/// bisections, from `rate`, or from a closed-loop run when `rate` is 0). `curve`: (server public
/// key file, client secret key file). `arrivals` "fixed" or "poisson" (from `seed`); `pacing`
/// "ticks" (at most one wake-up per tick of at most `max_tick_us`; `wake_on_replies`) or
/// "per-request" (the loop before issue 40); `client_socket` "zmtp" (ZMTP spoken by the
/// generator itself) or "libzmq" (libzmq's DEALER, as before issue 40; always with `curve`).
/// `stages`: the server's stage times of each Ok reply kept (`stage_median_us`, `by_size`);
/// `stop_when_gone_s` > 0: the run ends early when the daemon shuts down or answers nothing
/// for that long (`stopped`). Python's signals are checked every 100 ms while it runs: a
/// Ctrl-C cancels the run and is raised (KeyboardInterrupt). Returns the result as a dict; a
/// bad setting, or no reply within `connect_timeout_s`, is a ValueError.
#[pyfunction]
#[pyo3(signature = (endpoint, frames, mode, rate, connections, threads, max_in_flight, in_flight,
                    duration_s, drain_s, connect_timeout_s, sla_p99_us = 5000.0, steps = 6, curve = None,
                    arrivals = "fixed", seed = 1, pacing = "ticks", max_tick_us = 200.0,
                    wake_on_replies = false, client_socket = "zmtp", stages = false,
                    stop_when_gone_s = 0.0))]
#[allow(clippy::too_many_arguments)]
fn serve_bench(
    py: Python<'_>,
    endpoint: String,
    frames: Vec<Vec<u8>>,
    mode: &str,
    rate: f64,
    connections: usize,
    threads: usize,
    max_in_flight: usize,
    in_flight: usize,
    duration_s: f64,
    drain_s: f64,
    connect_timeout_s: f64,
    sla_p99_us: f64,
    steps: u32,
    curve: Option<(PathBuf, PathBuf)>,
    arrivals: &str,
    seed: u64,
    pacing: &str,
    max_tick_us: f64,
    wake_on_replies: bool,
    client_socket: &str,
    stages: bool,
    stop_when_gone_s: f64,
) -> PyResult<PyObject> {
    use offload_serve::loadgen::{self, Arrivals, ClientSocket, Load, Pacing, Spec};
    use std::time::Duration;
    let secs = |what: &str, s: f64| {
        Duration::try_from_secs_f64(s)
            .map_err(|_| PyValueError::new_err(format!("{what} must be seconds >= 0, not {s}")))
    };
    let load = match mode {
        "open" | "knee" => Load::Open { rate: if mode == "knee" && rate == 0.0 { 1.0 } else { rate } },
        "closed" => Load::Closed { in_flight },
        other => return Err(PyValueError::new_err(format!("mode is open, closed or knee, not {other:?}"))),
    };
    let arrivals = match arrivals {
        "fixed" => Arrivals::Fixed,
        "poisson" => Arrivals::Poisson { seed },
        other => return Err(PyValueError::new_err(format!("arrivals are fixed or poisson, not {other:?}"))),
    };
    let pacing = match pacing {
        "ticks" => Pacing::Ticks { max_tick: secs("the longest tick", max_tick_us / 1e6)?, wake_on_replies },
        "per-request" => Pacing::PerRequest,
        other => return Err(PyValueError::new_err(format!("pacing is ticks or per-request, not {other:?}"))),
    };
    let client_socket = match client_socket {
        "zmtp" => ClientSocket::Zmtp,
        "libzmq" => ClientSocket::Libzmq,
        other => return Err(PyValueError::new_err(format!("client_socket is zmtp or libzmq, not {other:?}"))),
    };
    let curve = match curve {
        Some((server, client)) => {
            Some(offload_serve::auth::CurveClient::from_files(&server, &client).map_err(PyValueError::new_err)?)
        }
        None => None,
    };
    let spec = Spec {
        connections,
        threads,
        max_in_flight,
        duration: secs("the duration", duration_s)?,
        drain: secs("the drain", drain_s)?,
        connect_timeout: secs("the connect timeout", connect_timeout_s)?,
        curve,
        arrivals,
        pacing,
        client_socket,
        stages,
        stop_when_gone: (stop_when_gone_s > 0.0).then(|| secs("the quiet time", stop_when_gone_s)).transpose()?,
        ..Spec::new(&endpoint, frames, load)
    };
    let sla = secs("the SLA", sla_p99_us / 1e6)?;
    let knee = mode == "knee";
    let cancel = spec.cancel.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let generator = std::thread::spawn(move || {
        let _ = tx.send(match knee {
            true => loadgen::knee(&spec, sla, steps, (rate > 0.0).then_some(rate)),
            false => loadgen::run(&spec).map(|o| o.json().clone()),
        });
    });
    // (A Receiver is not Sync; the lock lends it to the thread that waits without the GIL.)
    let rx = std::sync::Mutex::new(rx);
    // Bounded: the run ends within its duration, drain and connect timeouts (a cancel sooner).
    let result = loop {
        use std::sync::mpsc::RecvTimeoutError;
        let waited = py.allow_threads(|| rx.lock().map_err(|_| ()).map(|r| r.recv_timeout(Duration::from_millis(100))));
        match waited.unwrap_or(Err(RecvTimeoutError::Disconnected)) {
            Ok(r) => break r,
            Err(RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                    let _ = py.allow_threads(|| generator.join());
                    return Err(e);
                }
            }
            Err(RecvTimeoutError::Disconnected) => break Err("the generator's thread panicked".to_string()),
        }
    };
    let _ = py.allow_threads(|| generator.join());
    let value = result.map_err(PyValueError::new_err)?;
    Ok(pythonize::pythonize(py, &value)?.unbind())
}

/// The device-time formula, the emulated device's (`offload_serve::benchmark_only::emulated::DeviceCosts::batch`,
/// its one home): a batch of `n` queries, the kernel's spread over `engines`, on a device of
/// these `[costs]` (s, B, B/s; `transfer_bps` None or 0: unbounded) → (invoke_s, h2d_s,
/// kernel_s, d2h_s). For the planner (python/offload/plan/simulate.py).
#[pyfunction]
#[pyo3(signature = (n, engines, *, invoke_s, transfer_latency_s, transfer_bps, transfer_bytes_per_query,
                    kernel_query_s, kernel_fixed_s))]
#[allow(clippy::too_many_arguments)]
fn device_batch_time(
    n: usize,
    engines: usize,
    invoke_s: f64,
    transfer_latency_s: f64,
    transfer_bps: Option<f64>,
    transfer_bytes_per_query: f64,
    kernel_query_s: f64,
    kernel_fixed_s: f64,
) -> (f64, f64, f64, f64) {
    let costs = offload_serve::benchmark_only::emulated::DeviceCosts {
        invoke_s,
        transfer_latency_s,
        transfer_bps: transfer_bps.unwrap_or(0.0),
        transfer_bytes_per_query,
        kernel_query_s,
        kernel_fixed_s,
    };
    let t = costs.batch(n, engines);
    (t.invoke_s, t.h2d_s, t.kernel_s, t.d2h_s)
}

/// A device's three one-at-a-time lanes (copy in, kernel, copy out), the emulated device's
/// (`offload_serve::benchmark_only::emulated::Lanes`): `book` a batch handed over at `sent_s` → when it is due.
#[pyclass(module = "offload._native", name = "DeviceLanes")]
#[derive(Default)]
struct DeviceLanes(offload_serve::benchmark_only::emulated::Lanes);

#[pymethods]
impl DeviceLanes {
    #[new]
    fn new() -> Self {
        DeviceLanes::default()
    }
    /// Books a batch of these lane times (device_batch_time's) handed over at `sent_s`.
    fn book(&mut self, sent_s: f64, invoke_s: f64, h2d_s: f64, kernel_s: f64, d2h_s: f64) -> f64 {
        self.0.book(sent_s, &offload_serve::benchmark_only::emulated::BatchTime { invoke_s, h2d_s, kernel_s, d2h_s })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_function(wrap_pyfunction!(serve_help, m)?)?;
    m.add_function(wrap_pyfunction!(serve_check_setting, m)?)?;
    m.add_function(wrap_pyfunction!(curve_key_pair, m)?)?;
    m.add_function(wrap_pyfunction!(read_curve_key, m)?)?;
    m.add_function(wrap_pyfunction!(criteria_fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(encode_request, m)?)?;
    m.add_function(wrap_pyfunction!(encode_request_codes, m)?)?;
    m.add_function(wrap_pyfunction!(decode_reply, m)?)?;
    m.add_function(wrap_pyfunction!(encode_dictionary_request, m)?)?;
    m.add_function(wrap_pyfunction!(decode_dictionary_reply, m)?)?;
    m.add_function(wrap_pyfunction!(zmq_echo, m)?)?;
    m.add_function(wrap_pyfunction!(serve_bench, m)?)?;
    m.add_function(wrap_pyfunction!(device_batch_time, m)?)?;
    m.add_class::<DeviceLanes>()?;
    Ok(())
}
