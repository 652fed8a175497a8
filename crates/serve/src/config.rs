//! The daemon's settings: a TOML file (`--config serve.toml`) with command-line flags over it.
//!
//! ```toml
//! ruletype = "ruletype.toml"        # relative paths are relative to this file
//! rules = "rules.csv"
//! matcher = "fast"
//! endpoints = ["tcp://127.0.0.1:5555", "ipc:///tmp/offload.sock"]
//! control = "tcp://127.0.0.1:5556"
//! metrics = "127.0.0.1:9464"
//! workers = 2          # w: decode, batch, encode
//! kernels = 1          # k: kernel executors
//! engine_threads = 1   # e: matching threads per executor
//! queue = 64           # requests that may wait before "busy"
//! batch_max_queries = 0
//! batch_timeout_us = 200
//! # security (docs/serve-protocol.md, "Security"); key files come from `offload serve keys`
//! curve_secret_key = "keys/server.key_secret"   # the daemon's key pair: CURVE on the control socket
//! curve_clients = ["keys/ops.key"]              # public keys (files or directories) admitted there
//! curve_data_clients = ["keys/clients"]         # given: the data endpoints require CURVE too
//! reload_dirs = ["."]                           # where `reload` may read (default: the rule files' directories)
//! allow_remote_data = false                     # true: a data endpoint on the network without CURVE
//! allow_remote_metrics = false                  # true: the metrics page on a non-loopback address
//! ```
//! Every key is optional in the file; an unknown key or a wrong type is an error that names the
//! file, line and column.

use crate::auth::{self, CurveServer};
use crate::server::{Config, Security};
use offload_rules::MatcherKind;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Settings as given (file or flags); `None` = not given here.
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub ruletype: Option<PathBuf>,
    pub rules: Option<PathBuf>,
    pub matcher: Option<String>,
    pub endpoints: Option<Vec<String>>,
    pub control: Option<String>,
    pub metrics: Option<String>,
    pub workers: Option<usize>,
    pub kernels: Option<usize>,
    pub engine_threads: Option<usize>,
    pub queue: Option<usize>,
    pub batch_max_queries: Option<u64>,
    pub batch_timeout_us: Option<u64>,
    pub curve_secret_key: Option<PathBuf>,
    pub curve_clients: Option<Vec<PathBuf>>,
    pub curve_data_clients: Option<Vec<PathBuf>>,
    pub reload_dirs: Option<Vec<PathBuf>>,
    pub allow_remote_data: Option<bool>,
    pub allow_remote_metrics: Option<bool>,
}

/// Settings with every default filled in and checked: what the daemon runs.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub ruletype: PathBuf,
    pub rules: PathBuf,
    pub matcher: MatcherKind,
    pub config: Config,
}

impl Settings {
    /// Reads a settings file; paths of rule files are taken relative to the file's directory.
    pub fn from_file(path: &Path) -> Result<Settings, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Settings::from_toml(&text, path.parent().unwrap_or(Path::new("")))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses settings from TOML text, resolving relative rule paths against `base`.
    pub fn from_toml(text: &str, base: &Path) -> Result<Settings, String> {
        let mut s: Settings = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        let lists = [&mut s.curve_clients, &mut s.curve_data_clients, &mut s.reload_dirs];
        let paths = [&mut s.ruletype, &mut s.rules, &mut s.curve_secret_key].into_iter().flatten();
        for p in paths.chain(lists.into_iter().flatten().flatten()) {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(s)
    }

    /// These settings with every value given in `flags` taking precedence.
    pub fn over(self, flags: Settings) -> Settings {
        Settings {
            ruletype: flags.ruletype.or(self.ruletype),
            rules: flags.rules.or(self.rules),
            matcher: flags.matcher.or(self.matcher),
            endpoints: flags.endpoints.filter(|e| !e.is_empty()).or(self.endpoints),
            control: flags.control.or(self.control),
            metrics: flags.metrics.or(self.metrics),
            workers: flags.workers.or(self.workers),
            kernels: flags.kernels.or(self.kernels),
            engine_threads: flags.engine_threads.or(self.engine_threads),
            queue: flags.queue.or(self.queue),
            batch_max_queries: flags.batch_max_queries.or(self.batch_max_queries),
            batch_timeout_us: flags.batch_timeout_us.or(self.batch_timeout_us),
            curve_secret_key: flags.curve_secret_key.or(self.curve_secret_key),
            curve_clients: flags.curve_clients.filter(|v| !v.is_empty()).or(self.curve_clients),
            curve_data_clients: flags.curve_data_clients.filter(|v| !v.is_empty()).or(self.curve_data_clients),
            reload_dirs: flags.reload_dirs.filter(|v| !v.is_empty()).or(self.reload_dirs),
            allow_remote_data: flags.allow_remote_data.or(self.allow_remote_data),
            allow_remote_metrics: flags.allow_remote_metrics.or(self.allow_remote_metrics),
        }
    }

    /// Fills in defaults and checks what a daemon needs.
    pub fn resolve(self) -> Result<Resolved, String> {
        let d = Config::default();
        let (Some(ruletype), Some(rules)) = (self.ruletype.clone(), self.rules.clone()) else {
            return Err(
                "a rule set is needed: give --ruletype and --rules, or `ruletype` and `rules` in --config".into()
            );
        };
        let matcher = self.matcher.as_deref().unwrap_or("fast").parse::<MatcherKind>()?;
        let at_least_one = |v: Option<usize>, default: usize, what: &str| match v {
            Some(0) => Err(format!("{what} must be at least 1")),
            v => Ok(v.unwrap_or(default)),
        };
        let security = self.security(&ruletype, &rules)?;
        let endpoints = self.endpoints.unwrap_or(d.endpoints);
        if endpoints.is_empty() {
            return Err("endpoints must name at least one address, e.g. tcp://127.0.0.1:5555".into());
        }
        let config = Config {
            security,
            endpoints,
            workers: at_least_one(self.workers, d.workers, "workers")?,
            kernels: at_least_one(self.kernels, d.kernels, "kernels")?,
            engine_threads: at_least_one(self.engine_threads, d.engine_threads, "engine_threads")?,
            queue: at_least_one(self.queue, d.queue, "queue")?,
            control: self.control,
            metrics: self.metrics,
            batch_max_queries: self.batch_max_queries.unwrap_or(d.batch_max_queries),
            batch_timeout_us: self.batch_timeout_us.unwrap_or(d.batch_timeout_us),
        };
        Ok(Resolved { ruletype, rules, matcher, config })
    }

    /// Reads the key files and finds the reload directories; `check_exposure` then decides
    /// whether the endpoints may be bound with them.
    fn security(&self, ruletype: &Path, rules: &Path) -> Result<Security, String> {
        let curve = match (&self.curve_secret_key, &self.curve_clients) {
            (Some(key), Some(clients)) => Some((CurveServer::from_file(key)?, auth::read_client_keys(clients)?)),
            (None, None) => None,
            (Some(_), None) => {
                return Err("curve_secret_key needs curve_clients: the public keys of the clients to admit \
                            (--curve-client FILE_OR_DIR)"
                    .into())
            }
            (None, Some(_)) => {
                return Err("curve_clients needs curve_secret_key: the daemon's own key pair \
                            (--curve-secret-key server.key_secret, made by `offload serve keys`)"
                    .into())
            }
        };
        if self.curve_data_clients.is_some() && curve.is_none() {
            return Err("curve_data_clients needs curve_secret_key and curve_clients (the control socket \
                        is never less protected than the data endpoints)"
                .into());
        }
        let data_clients = self.curve_data_clients.as_deref().map(auth::read_client_keys).transpose()?;
        // Given directories must exist; the default ones (the rule files' own) are skipped when
        // missing, as loading the rule files then fails with the better error.
        let given = self.reload_dirs.is_some();
        let dirs = match &self.reload_dirs {
            Some(d) => d.clone(),
            None => [ruletype, rules].iter().map(|p| p.parent().unwrap_or(Path::new("")).to_path_buf()).collect(),
        };
        let mut reload_dirs = Vec::new();
        for d in dirs {
            let d = if d.as_os_str().is_empty() { PathBuf::from(".") } else { d };
            match d.canonicalize() {
                Ok(c) if !reload_dirs.contains(&c) => reload_dirs.push(c),
                Ok(_) => {}
                Err(e) if given => return Err(format!("reload directory {}: {e}", d.display())),
                Err(_) => {}
            }
        }
        let (curve, control_clients) = curve.map_or((None, Vec::new()), |(s, c)| (Some(s), c));
        Ok(Security {
            curve,
            control_clients,
            data_clients,
            reload_dirs,
            allow_remote_data: self.allow_remote_data.unwrap_or(false),
            allow_remote_metrics: self.allow_remote_metrics.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_defaults_fill_the_rest() {
        let file = Settings::from_toml(
            "ruletype = 'rt.toml'\nrules = '/abs/r.csv'\nworkers = 3\nkernels = 2\n",
            Path::new("/cfg"),
        )
        .unwrap();
        assert_eq!(file.ruletype.as_deref(), Some(Path::new("/cfg/rt.toml")));
        assert_eq!(file.rules.as_deref(), Some(Path::new("/abs/r.csv")));
        let flags = Settings { workers: Some(5), endpoints: Some(vec![]), ..Settings::default() };
        let r = file.over(flags).resolve().unwrap();
        assert_eq!((r.config.workers, r.config.kernels, r.config.engine_threads), (5, 2, 1));
        assert_eq!(r.config.endpoints, Config::default().endpoints);
    }

    #[test]
    fn errors_name_the_line_and_column_and_the_problem() {
        let e = Settings::from_toml("rules = 'r.csv'\nworkers = 'two'\n", Path::new("")).unwrap_err();
        assert!(e.contains("line 2, column 11"), "{e}");
        assert!(e.contains("invalid type"), "{e}");
        let e = Settings::from_toml("wrokers = 2\n", Path::new("")).unwrap_err();
        assert!(e.contains("line 1, column 1") && e.contains("unknown field `wrokers`"), "{e}");
        let e = Settings::from_toml("workers = -1\n", Path::new("")).unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn the_example_file_loads_and_names_existing_rule_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini");
        let r = Settings::from_file(&dir.join("serve.toml")).unwrap().resolve().unwrap();
        assert!(r.ruletype.exists() && r.rules.exists());
        assert_eq!((r.config.workers, r.config.kernels, r.config.queue), (2, 1, 64));
        assert_eq!(r.config.control.as_deref(), Some("tcp://127.0.0.1:5556"));
    }

    #[test]
    fn resolve_refuses_what_cannot_run() {
        assert!(Settings::default().resolve().unwrap_err().contains("--ruletype"));
        let base = Settings { ruletype: Some("a".into()), rules: Some("b".into()), ..Settings::default() };
        let e = Settings { kernels: Some(0), ..base.clone() }.resolve().unwrap_err();
        assert_eq!(e, "kernels must be at least 1");
        let e = Settings { matcher: Some("quick".into()), ..base.clone() }.resolve().unwrap_err();
        assert!(e.contains("quick"), "{e}");
        let e = Settings { endpoints: Some(vec![]), ..base }.resolve().unwrap_err();
        assert!(e.contains("at least one"), "{e}");
    }
}
