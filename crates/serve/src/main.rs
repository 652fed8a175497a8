//! `offload-serve`: the daemon without Python. `offload serve` runs the same code, parsing its
//! arguments with the same [`Settings`].

use clap::Parser;
use offload_serve::config::{ArgsError, Settings};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// `offload-serve keys DIR [--name NAME]... [--force]`: make CURVE key pairs.
#[derive(Parser, Debug)]
#[command(name = "offload-serve keys", bin_name = "offload-serve keys")]
struct Keys {
    /// Where to write the key files (created if missing)
    directory: PathBuf,
    /// A key pair to make (repeat) [default: server, client]
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// Replace existing key files
    #[arg(long)]
    force: bool,
}

/// Bad arguments: one line, exit 2.
fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2)
}

/// What `--help` and `--version` asked for, or the one-line error.
fn show_or_fail(e: ArgsError) -> ! {
    match e {
        ArgsError::Show(text) => {
            print!("{text}");
            std::process::exit(0)
        }
        ArgsError::Invalid(why) => fail(&why),
    }
}

fn keys(argv: &[std::ffi::OsString]) {
    let k = Keys::try_parse_from(argv).unwrap_or_else(|e| show_or_fail(e.into()));
    let names = if k.names.is_empty() { vec!["server".into(), "client".into()] } else { k.names };
    for name in names {
        match offload_serve::auth::write_key_pair(&k.directory, &name, k.force) {
            Ok((public, secret)) => {
                println!("{} (share it)  {} (keep it, mode 600)", public.display(), secret.display())
            }
            Err(e) => fail(&e),
        }
    }
}

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "keys") {
        return keys(&argv[1..]);
    }
    let settings = Settings::from_args(&argv).unwrap_or_else(|e| show_or_fail(e));
    let stop = Arc::new(AtomicBool::new(false));
    match offload_serve::serve(settings, stop, |s, cfg| {
        let null =
            if cfg.null_matcher { " with the null matcher (benchmark only: answers are not matches)" } else { "" };
        eprintln!(
            "serving {} rules (version {}) on {}{null}",
            s.engine.rules().len(),
            s.version,
            cfg.endpoints.join(", ")
        )
    }) {
        Ok(counters) => eprintln!("stopped: {counters:?}"),
        Err(e) => fail(&e),
    }
}
