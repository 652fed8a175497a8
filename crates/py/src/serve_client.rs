//! `offload._native` bindings of the Rust client of `offload serve` (`offload_serve::client`):
//! `ServeClient` (one request in flight: `offload.serve.Client`) and `ServeMultiplexed` (many
//! in flight on one connection: `offload.serve.AsyncClient`). The socket, the request ids, the
//! waiting with its deadline and the skipping of late replies are Rust's; Python builds and
//! decodes frames with the protocol's own Rust functions. Every wait releases the GIL.
//!
//! Errors: no reply (or no room to send) in time is a `TimeoutError`, a broken connection or
//! an unreadable reply a `ConnectionError` (both `offload.serve.ServeError` in Python), a bad
//! endpoint or key file a `ValueError`.

use offload_serve::client::{Client, ClientError, CurveClient, Multiplexed, ReplyKind};
use pyo3::exceptions::{PyConnectionError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Seconds as a duration; a negative or non-finite number is a ValueError.
fn seconds(s: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| PyValueError::new_err(format!("{what} must be seconds >= 0, not {s}")))
}

/// A client error as the Python exception `offload.serve` turns into `ServeError`; `timeout`
/// says what a timeout means here.
fn py_error(e: ClientError, timeout: impl FnOnce() -> String) -> PyErr {
    match e {
        ClientError::Timeout(_) => PyTimeoutError::new_err(timeout()),
        ClientError::BadRequest(m) => PyValueError::new_err(m),
        e => PyConnectionError::new_err(e.to_string()),
    }
}

/// Connects a client to `endpoint` with CURVE when both key files are given (GIL released:
/// `shm://` waits for the daemon's answer).
fn connect(
    py: Python<'_>,
    endpoint: &str,
    timeout: Duration,
    server_key: Option<PathBuf>,
    client_key: Option<PathBuf>,
) -> PyResult<Client> {
    let curve = match (server_key, client_key) {
        (Some(s), Some(c)) => Some(CurveClient::from_files(&s, &c).map_err(PyValueError::new_err)?),
        (None, None) => None,
        _ => return Err(PyValueError::new_err("CURVE needs both the server's key and the client's secret key")),
    };
    let mut client = py.allow_threads(|| Client::connect_with(endpoint, curve.as_ref())).map_err(|e| match e {
        ClientError::Zmq(m) => PyValueError::new_err(format!("{endpoint}: {m}")),
        e => py_error(e, || format!("no daemon answered at {endpoint} within {:.3} s", timeout.as_secs_f64())),
    })?;
    client.timeout = timeout;
    Ok(client)
}

/// A client with one request in flight (`offload.serve.Client` wraps it). Its methods run
/// one at a time: a call from a second thread waits for the first (its lock is taken with the
/// GIL released).
#[pyclass(module = "offload._native", name = "ServeClient")]
pub struct ServeClient {
    client: Mutex<Option<Client>>,
    endpoint: String,
}

impl ServeClient {
    /// Runs `f` on the client (the GIL released while it waits for the lock and runs), with
    /// `what` saying what a timeout means.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(&mut Client) -> Result<T, ClientError> + Send,
    ) -> PyResult<T> {
        let endpoint = &self.endpoint;
        let r = py.allow_threads(|| {
            let mut held = self.client.lock().unwrap_or_else(|p| p.into_inner());
            let client =
                held.as_mut().ok_or_else(|| (ClientError::Zmq("the client is closed".into()), Duration::ZERO))?;
            let t = client.timeout;
            f(client).map_err(|e| (e, t))
        });
        r.map_err(|(e, t)| py_error(e, || format!("{what} {endpoint} within {} s", t.as_secs_f64())))
    }
}

#[pymethods]
impl ServeClient {
    /// Connects to `endpoint` (tcp://, ipc://: a DEALER, the daemon need not be up yet;
    /// shm://NAME: the daemon must be serving); `timeout_s` bounds every send and wait.
    #[new]
    #[pyo3(signature = (endpoint, timeout_s, server_key=None, client_key=None))]
    fn new(
        py: Python<'_>,
        endpoint: String,
        timeout_s: f64,
        server_key: Option<PathBuf>,
        client_key: Option<PathBuf>,
    ) -> PyResult<Self> {
        let client = connect(py, &endpoint, seconds(timeout_s, "the timeout")?, server_key, client_key)?;
        Ok(ServeClient { client: Mutex::new(Some(client)), endpoint })
    }

    #[getter]
    fn get_timeout_s(&self, py: Python<'_>) -> PyResult<f64> {
        self.run(py, "", |c| Ok(c.timeout.as_secs_f64()))
    }

    #[setter]
    fn set_timeout_s(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        let t = seconds(timeout_s, "the timeout")?;
        self.run(py, "", |c| {
            c.timeout = t;
            Ok(())
        })
    }

    /// A fresh request id for a frame built in Python.
    fn next_id(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, "", |c| Ok(c.next_id()))
    }

    /// Sends a prebuilt frame within the timeout (GIL released).
    fn send_frame(&self, py: Python<'_>, frame: &[u8]) -> PyResult<()> {
        self.run(py, "could not send to", |c| c.send_frame(frame))
    }

    /// Waits at most `within_s` for the next reply (a dictionary reply with `dictionary`) to
    /// `request_id` (any when None) and returns its frame, skipping the others (GIL released).
    #[pyo3(signature = (request_id, within_s, dictionary=false))]
    fn receive<'py>(
        &self,
        py: Python<'py>,
        request_id: Option<u64>,
        within_s: f64,
        dictionary: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let until = Instant::now() + seconds(within_s.max(0.0), "the wait")?;
        let kind = if dictionary { ReplyKind::Dictionary } else { ReplyKind::Reply };
        let frame = self.run(py, "no reply from", |c| c.receive_frame(kind, request_id, until))?;
        Ok(PyBytes::new(py, &frame))
    }

    /// Drops the DEALER's connection to `endpoint` (for tests of the send deadline).
    fn disconnect(&self, py: Python<'_>, endpoint: &str) -> PyResult<()> {
        self.run(py, "", |c| c.disconnect(endpoint))
    }

    /// Closes the connection (later calls raise ConnectionError).
    fn close(&self, py: Python<'_>) {
        py.allow_threads(|| *self.client.lock().unwrap_or_else(|p| p.into_inner()) = None);
    }
}

/// One request's outcome for Python: (request id, reply frame or None, why not or "").
type Outcome<'py> = (u64, Option<Bound<'py, PyBytes>>, String);

/// Many requests in flight on one connection (`offload.serve.AsyncClient` wraps it): submit
/// frames, poll `ready_fd` (asyncio's `add_reader`), take what is done (`client::Multiplexed`:
/// over ZeroMQ in the caller's thread, without blocking; over `shm://` through a Rust thread).
#[pyclass(module = "offload._native", name = "ServeMultiplexed")]
pub struct ServeMultiplexed {
    inner: Option<Multiplexed>,
    endpoint: String,
    timeout: Duration,
}

impl ServeMultiplexed {
    fn inner(&self) -> PyResult<&Multiplexed> {
        self.inner
            .as_ref()
            .ok_or_else(|| PyConnectionError::new_err(format!("the client of {} is closed", self.endpoint)))
    }
}

#[pymethods]
impl ServeMultiplexed {
    /// Connects as `ServeClient` does and starts the thread that sends and files replies.
    #[new]
    #[pyo3(signature = (endpoint, timeout_s, server_key=None, client_key=None))]
    fn new(
        py: Python<'_>,
        endpoint: String,
        timeout_s: f64,
        server_key: Option<PathBuf>,
        client_key: Option<PathBuf>,
    ) -> PyResult<Self> {
        let timeout = seconds(timeout_s, "the timeout")?;
        let client = connect(py, &endpoint, timeout, server_key, client_key)?;
        let inner = Multiplexed::new(client).map_err(|e| PyConnectionError::new_err(e.to_string()))?;
        Ok(ServeMultiplexed { inner: Some(inner), endpoint, timeout })
    }

    /// A fresh request id for a frame built in Python.
    fn next_id(&self) -> PyResult<u64> {
        Ok(self.inner()?.next_id())
    }

    /// Sends (or queues) a frame with request id `request_id`; its outcome comes from
    /// `take_done`. True: outcomes may wait already (call `take_done` now: over ZeroMQ the
    /// ready fd signals changes only).
    fn submit(&self, request_id: u64, frame: &[u8]) -> PyResult<bool> {
        self.inner()?.submit(request_id, frame).map_err(|e| PyConnectionError::new_err(e.to_string()))
    }

    /// Readable when outcomes may wait in `take_done`.
    #[getter]
    fn ready_fd(&self) -> PyResult<RawFd> {
        Ok(self.inner()?.ready_fd())
    }

    /// The outcomes there are now, without waiting: (request id, reply frame or None, why
    /// not: "" or a timeout's or a failure's one line).
    fn take_done<'py>(&self, py: Python<'py>) -> PyResult<Vec<Outcome<'py>>> {
        let t = self.timeout.as_secs_f64();
        Ok(self
            .inner()?
            .take_done()
            .into_iter()
            .map(|(id, r)| match r {
                Ok(frame) => (id, Some(PyBytes::new(py, &frame)), String::new()),
                Err(ClientError::Timeout(_)) => (id, None, format!("no reply from {} within {t} s", self.endpoint)),
                Err(e) => (id, None, format!("{}: {e}", self.endpoint)),
            })
            .collect())
    }

    /// Stops the thread (GIL released while it joins) and closes the connection.
    fn close(&mut self, py: Python<'_>) {
        if let Some(inner) = self.inner.take() {
            py.allow_threads(|| drop(inner));
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ServeClient>()?;
    m.add_class::<ServeMultiplexed>()?;
    Ok(())
}
