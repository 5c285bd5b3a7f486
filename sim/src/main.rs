//! `sim`: the carrier simulator's command line.
//!
//! ```text
//! sim sign telnyx BODY [--keys FILE] [--at UNIX_SECONDS]
//!     prints curl header arguments that sign BODY like Telnyx
//! sim carrier [--listen ADDR] [--worker URL] [--keys FILE] [--twilio-token T] [--plivo-token T]
//!     serves fake Telnyx, Twilio and Plivo REST APIs (point the *_API_BASE variables at it)
//! sim {chaos|sms-inbound|sms-outbound|ring} [options]
//!     runs a scenario against a worker and prints what it made of it
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage:
  sim sign telnyx BODY [--keys FILE] [--at UNIX_SECONDS]
      Prints `-H name:value` arguments for curl that sign BODY with the development key
      (default key file: .dev.keys, written by `make dev`).
  sim carrier [--listen 127.0.0.1:8788] [--worker http://127.0.0.1:8787] [--keys FILE]
              [--twilio-token T] [--plivo-token T]
      Serves fake Telnyx, Twilio and Plivo REST APIs that record and answer sends (see
      sim::carrier); the tokens sign Twilio and Plivo status callbacks.
  sim keygen
      Prints a new Telnyx-style key pair (TELNYX_PUBLIC_KEY=, TELNYX_PRIVATE_SEED=).
  sim load URL KEYS PREFIX REQUESTS CONCURRENCY new|duplicate
      Sends signed deliveries at fixed concurrency; prints p50/p99 and throughput as JSON.
  sim chaos|sms-inbound|sms-outbound|ring [--url http://127.0.0.1:8787] [--facts 500]
      [--duplicates 0.35] [--resigned 0.15] [--reorder 32] [--parallel 16] [--stale 0.05]
      [--seed 7] [--keys .dev.keys] [--vars .dev.vars]
      Sends a stream of carrier facts with duplicates, re-signed retries, reordering, parallel
      bursts and stale timestamps, then reports duplicate effects and missing events (both
      must be 0; the exit status is 1 otherwise). `chaos` also sends from a Twilio and a Plivo
      number and delivers their signed status callbacks when TWILIO_AUTH_TOKEN and
      PLIVO_AUTH_TOKEN are known (the worker's PUBLIC_BASE_URL must be --url), and schedules
      messages and cancels some. ADMIN_TOKEN and the tokens come from the environment when
      ADMIN_TOKEN is set there, else from --vars; customer events are counted on a local
      endpoint, which the worker can reach when ALLOW_PRIVATE_ENDPOINTS=true.";

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
            println!("-H telnyx-timestamp:{} -H telnyx-signature-ed25519:{}", headers.timestamp, headers.signature);
            Ok(())
        }
        [cmd, rest @ ..] if cmd == "carrier" => {
            let mut listen = "127.0.0.1:8788".to_owned();
            let mut worker = "http://127.0.0.1:8787".to_owned();
            let mut keys = PathBuf::from(sim::devkeys::DEFAULT_PATH);
            // The development tokens of .dev.vars.example, which sign Twilio and Plivo callbacks.
            let mut twilio_token = "dev-twilio-auth-token".to_owned();
            let mut plivo_token = "dev-plivo-auth-token".to_owned();
            let mut rest = rest.iter();
            while let Some(flag) = rest.next() {
                let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
                match flag.as_str() {
                    "--listen" => listen = value.clone(),
                    "--worker" => worker = value.clone(),
                    "--keys" => keys = PathBuf::from(value),
                    "--twilio-token" => twilio_token = value.clone(),
                    "--plivo-token" => plivo_token = value.clone(),
                    other => return Err(format!("unknown option {other}")),
                }
            }
            let carrier =
                sim::carrier::FakeCarrier::start_on(&listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
            if let Ok(signer) = sim::devkeys::telnyx_signer(&keys) {
                carrier.set_webhook_target(sim::carrier::WebhookTarget {
                    base: worker,
                    signer,
                    twilio_token: Some(twilio_token),
                    plivo_token: Some(plivo_token),
                });
            }
            println!("sim: fake Telnyx, Twilio and Plivo APIs on {}", carrier.base);
            let mut seen = 0;
            loop {
                std::thread::sleep(std::time::Duration::from_millis(500));
                let requests = carrier.requests("/v2/messages");
                for r in &requests[seen..] {
                    println!(
                        "sim: {} {} key={} to={}",
                        r.method,
                        r.path,
                        r.idempotency_key.as_deref().unwrap_or("-"),
                        r.body["to"]
                    );
                }
                seen = requests.len();
            }
        }
        [cmd] if cmd == "keygen" => {
            let signer = sim::telnyx::Signer::generate();
            println!("TELNYX_PUBLIC_KEY={}", signer.public_key_base64());
            println!("TELNYX_PRIVATE_SEED={}", signer.seed_base64());
            Ok(())
        }
        [cmd, url, keys, prefix, requests, concurrency, mode] if cmd == "load" => {
            let signer = sim::devkeys::telnyx_signer(std::path::Path::new(keys))?;
            let requests = requests.parse().map_err(|_| "requests is a number")?;
            let concurrency = concurrency.parse().map_err(|_| "concurrency is a number")?;
            let measured = sim::load::run(url, &signer, prefix, requests, concurrency, mode == "duplicate");
            println!("{}", serde_json::to_string(&measured).map_err(|e| e.to_string())?);
            Ok(())
        }
        [cmd, rest @ ..] if matches!(cmd.as_str(), "chaos" | "sms-inbound" | "sms-outbound" | "ring") => {
            scenario(cmd, rest)
        }
        _ => Err("unknown command".into()),
    }
}

fn scenario(name: &str, args: &[String]) -> Result<(), String> {
    use sim::chaos::{Config, Mix};
    let mut config = Config { progress: true, ..Config::default() };
    config.mix = match name {
        "sms-inbound" => Mix::Inbound,
        "sms-outbound" => Mix::Outbound,
        "ring" => Mix::Ring,
        _ => Mix::All,
    };
    if config.mix != Mix::All {
        config.facts = 50;
    }
    let mut url = "http://127.0.0.1:8787".to_owned();
    let mut keys = PathBuf::from(sim::devkeys::DEFAULT_PATH);
    let mut vars = PathBuf::from(".dev.vars");
    let mut rest = args.iter();
    let number = |v: &str, flag: &str| v.parse::<f64>().map_err(|_| format!("{flag} takes a number"));
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => url = value.clone(),
            "--facts" => config.facts = number(value, flag)? as usize,
            "--duplicates" => config.duplicate_rate = number(value, flag)?,
            "--resigned" => config.resign_rate = number(value, flag)?,
            "--reorder" => config.reorder_window = number(value, flag)? as usize,
            "--parallel" => config.parallelism = number(value, flag)? as usize,
            "--stale" => config.stale_rate = number(value, flag)?,
            "--seed" => config.seed = number(value, flag)? as u64,
            "--keys" => keys = PathBuf::from(value),
            "--vars" => vars = PathBuf::from(value),
            other => return Err(format!("unknown option {other}")),
        }
    }
    // The worker's settings come from one place: the environment when ADMIN_TOKEN is set there
    // (a deployment's), else the vars file (`make dev`'s), so a run against a deployment never
    // signs with the development tokens of .dev.vars.
    let from_env = std::env::var("ADMIN_TOKEN").is_ok();
    let var = |name: &str| {
        if from_env {
            return std::env::var(name).ok();
        }
        let prefix = format!("{name}=");
        std::fs::read_to_string(&vars)
            .ok()?
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix.as_str()).map(str::to_owned))
    };
    // A carrier's auth token: the first of a rotation's comma-separated list.
    let token = |name: &str| var(name)?.split(',').next().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    let admin_token =
        var("ADMIN_TOKEN").ok_or_else(|| format!("no ADMIN_TOKEN in the environment or in {}", vars.display()))?;
    let signer = sim::devkeys::telnyx_signer(&keys)?;
    let customer = sim::customer::CustomerEndpoint::start().map_err(|e| format!("customer endpoint: {e}"))?;
    let target = sim::chaos::Target {
        api: sim::api::Client::new(&url),
        signer,
        admin_token,
        customer: Some(&customer),
        carrier: None,
        twilio_token: token("TWILIO_AUTH_TOKEN"),
        plivo_token: token("PLIVO_AUTH_TOKEN"),
        cron: false,
        reconcile: false,
    };
    let report = sim::chaos::run(&target, &config)?;
    print!("{}", report.render());
    if report.duplicate_effects > 0 || report.missing > 0 {
        return Err(format!("{} duplicate effects, {} missing", report.duplicate_effects, report.missing));
    }
    Ok(())
}
