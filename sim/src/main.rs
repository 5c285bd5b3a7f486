//! `sim`: the carrier simulator's command line.
//!
//! ```text
//! sim sign telnyx BODY [--keys FILE] [--at UNIX_SECONDS]
//!     prints curl header arguments that sign BODY like Telnyx
//! sim carrier [--listen ADDR] [--worker URL] [--keys FILE]
//!     serves a fake Telnyx REST API (point TELNYX_API_BASE at it)
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage:
  sim sign telnyx BODY [--keys FILE] [--at UNIX_SECONDS]
      Prints `-H name:value` arguments for curl that sign BODY with the development key
      (default key file: .dev.keys, written by `make dev`).
  sim carrier [--listen 127.0.0.1:8788] [--worker http://127.0.0.1:8787] [--keys FILE]
      Serves a fake Telnyx REST API that records and answers sends (see sim::carrier).";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sim: {message}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    match args {
        [cmd, provider, body, rest @ ..] if cmd == "sign" && provider == "telnyx" => {
            let mut keys = PathBuf::from(sim::devkeys::DEFAULT_PATH);
            let mut at = sim::unix_now();
            let mut rest = rest.iter();
            while let Some(flag) = rest.next() {
                let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
                match flag.as_str() {
                    "--keys" => keys = PathBuf::from(value),
                    "--at" => at = value.parse().map_err(|_| "--at takes Unix seconds".to_owned())?,
                    other => return Err(format!("unknown option {other}")),
                }
            }
            let signer = sim::devkeys::telnyx_signer(&keys)?;
            let headers = signer.sign(body.as_bytes(), at);
            println!(
                "-H telnyx-timestamp:{} -H telnyx-signature-ed25519:{}",
                headers.timestamp, headers.signature
            );
            Ok(())
        }
        [cmd, rest @ ..] if cmd == "carrier" => {
            let mut listen = "127.0.0.1:8788".to_owned();
            let mut worker = "http://127.0.0.1:8787".to_owned();
            let mut keys = PathBuf::from(sim::devkeys::DEFAULT_PATH);
            let mut rest = rest.iter();
            while let Some(flag) = rest.next() {
                let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
                match flag.as_str() {
                    "--listen" => listen = value.clone(),
                    "--worker" => worker = value.clone(),
                    "--keys" => keys = PathBuf::from(value),
                    other => return Err(format!("unknown option {other}")),
                }
            }
            let carrier = sim::carrier::FakeCarrier::start_on(&listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
            if let Ok(signer) = sim::devkeys::telnyx_signer(&keys) {
                carrier.set_webhook_target(sim::carrier::WebhookTarget { base: worker, signer });
            }
            println!("sim: fake Telnyx API on {}", carrier.base);
            let mut seen = 0;
            loop {
                std::thread::sleep(std::time::Duration::from_millis(500));
                let requests = carrier.requests("/v2/messages");
                for r in &requests[seen..] {
                    println!("sim: {} {} key={} to={}", r.method, r.path, r.idempotency_key.as_deref().unwrap_or("-"), r.body["to"]);
                }
                seen = requests.len();
            }
        }
        _ => Err("unknown command".into()),
    }
}
