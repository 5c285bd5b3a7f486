//! `sim`: the carrier simulator's command line.
//!
//! ```text
//! sim sign telnyx BODY [--keys FILE] [--at UNIX_SECONDS]
//!     prints curl header arguments that sign BODY like Telnyx
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: sim sign telnyx BODY [--keys FILE] [--at UNIX_SECONDS]
  Prints `-H name:value` arguments for curl that sign BODY with the development key
  (default key file: .dev.keys, written by `make dev`).";

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
        _ => Err("unknown command".into()),
    }
}
