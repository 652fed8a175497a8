//! Whether the endpoints may be bound as the security settings say ([`check_exposure`]), and the
//! ZAP handler that admits CURVE clients by key (`start_zap`).

use crate::auth;
use crate::config::{Config, Security};
use crate::metrics::Counters;

/// Checks that every endpoint is as reachable as the security settings allow; returns warnings
/// for what the user allowed explicitly, or the error that says how to do it properly.
pub fn check_exposure(cfg: &Config) -> Result<Vec<String>, String> {
    use auth::Reach::Network;
    let sec = &cfg.security;
    let mut warnings = Vec::new();
    if let Some(ep) = cfg.control.as_deref().filter(|ep| auth::endpoint_reach(ep) == Network) {
        if sec.curve.is_none() {
            return Err(format!(
                "refusing to bind the control endpoint {ep} without authentication: anyone who can reach it could \
                 reload rules and change settings. Bind it to loopback or IPC (e.g. -c tcp://127.0.0.1:5556 or \
                 -c ipc:///run/offload/control.sock), or turn on CURVE: `offload serve keys KEYS`, then \
                 --curve-secret-key KEYS/server.key_secret --curve-client KEYS/client.key \
                 (docs/serve-protocol.md, Security)"
            ));
        }
    }
    for ep in cfg.endpoints.iter().filter(|ep| auth::endpoint_reach(ep) == Network) {
        if sec.data_clients.is_none() {
            if !sec.allow_remote_data {
                return Err(format!(
                    "refusing to bind the data endpoint {ep} on the network without authentication: anyone who \
                     can reach it could send queries and read the answers. Bind it to loopback or IPC, require \
                     CURVE on it (--curve-data-client KEYS_OR_DIR, with --curve-secret-key and --curve-client), \
                     or accept the risk explicitly with --allow-remote-data"
                ));
            }
            warnings.push(format!(
                "warning: data endpoint {ep} is open to the network without authentication or encryption \
                 (--allow-remote-data)"
            ));
        }
    }
    if let Some(m) = &cfg.metrics {
        let (addr, reach) = auth::metrics_address(m)?;
        if reach == Network {
            if !sec.allow_remote_metrics {
                return Err(format!(
                    "refusing to serve metrics on {addr}, off loopback: the page is readable by anyone who can \
                     reach it. Use --metrics 127.0.0.1:PORT (or a bare port) behind your scraper's own proxy, \
                     or accept it explicitly with --allow-remote-metrics"
                ));
            }
            warnings.push(format!("warning: metrics at http://{addr}/metrics are readable by anyone who can reach it"));
        }
    }
    if sec.data_clients.is_some() && sec.curve.is_none() {
        return Err("CURVE on the data endpoints needs the daemon's key pair (--curve-secret-key)".into());
    }
    if sec.curve.is_some() && !zmq::has("curve").unwrap_or(false) {
        return Err(auth::no_curve());
    }
    Ok(warnings)
}

/// Starts the ZAP handler when any socket uses CURVE: the control socket admits
/// `control_clients`, the data endpoints `data_clients`.
pub(super) fn start_zap(ctx: &zmq::Context, sec: &Security, counters: &Counters) -> Result<Option<auth::Zap>, String> {
    if sec.curve.is_none() {
        return Ok(None);
    }
    let mut allowed = std::collections::HashMap::new();
    allowed.insert(auth::CONTROL_DOMAIN.to_string(), sec.control_clients.clone());
    if let Some(d) = &sec.data_clients {
        allowed.insert(auth::DATA_DOMAIN.to_string(), d.clone());
    }
    auth::Zap::start(ctx, allowed, counters.auth.clone()).map(Some)
}
