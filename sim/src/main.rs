//! `sim`: the carrier simulator's command line. `sim --help`, and `--help` on every command,
//! say what each does.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The carrier simulator: signs webhooks like Telnyx, Twilio and Plivo, plays their REST APIs,
/// and sends streams of misbehaving carrier facts at a worker, counting what it made of them.
#[derive(Parser)]
#[command(name = "sim", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Creates an account and keeps it, with its API key, in the profile file.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Gives the profile's account a phone number.
    #[command(subcommand)]
    Number(NumberCommand),
    /// A local receiver for the account's webhooks: registers itself as an endpoint, verifies
    /// and prints every delivery, removes the endpoint on Ctrl-C.
    Listen(ListenArgs),
    /// Sends a message from the account.
    Send(SendArgs),
    /// Makes the fake carrier deliver an inbound SMS or call, signed as Telnyx signs.
    #[command(subcommand)]
    Inbound(InboundCommand),
    /// Prints the account's events, oldest first (`--follow`: then each new one); `events
    /// replay` delivers one again.
    Events(EventsArgs),
    /// The account's webhook endpoints.
    #[command(subcommand)]
    Endpoints(EndpointsCommand),
    /// Prints `-H name:value` arguments for curl that sign BODY as the carrier would.
    Sign(Sign),
    /// Serves fake Telnyx, Twilio and Plivo REST APIs that record and answer sends, and signs
    /// their receipts back to the worker.
    Carrier(CarrierArgs),
    /// Prints a new Telnyx-style key pair (TELNYX_PUBLIC_KEY=, TELNYX_PRIVATE_SEED=).
    Keygen,
    /// Sends signed Telnyx deliveries at fixed concurrency; prints p50/p99 and throughput as JSON.
    Load(Load),
    /// Every kind of carrier fact, misdelivered; reports duplicate effects and missing events.
    Chaos(Scenario),
    /// Inbound messages only, misdelivered.
    SmsInbound(Scenario),
    /// Outbound messages' receipts only, misdelivered.
    SmsOutbound(Scenario),
    /// Sequential-ring calls only, misdelivered.
    Ring(Scenario),
}

/// Where the worker is, and which account is asking.
#[derive(Args)]
struct Conn {
    /// The worker's base URL; unset, the worker the profile's account was created on, else the
    /// PUBLIC_BASE_URL of the vars file (make dev's PORT), else http://127.0.0.1:8787.
    #[arg(long, env = "EXACTLY_URL")]
    url: Option<String>,
    /// The profile file: `account create` writes the account and its API key there, the other
    /// commands read them (`EXACTLY_API_KEY` overrides the key).
    #[arg(long, env = "EXACTLY_PROFILE", default_value = ".dev.account.json")]
    profile: PathBuf,
    /// Where the admin token comes from unless ADMIN_TOKEN is in the environment.
    #[arg(long, env = "EXACTLY_VARS", default_value = ".dev.vars")]
    vars: PathBuf,
}

impl Conn {
    fn target(&self) -> sim::dev::Target {
        sim::dev::Target::resolve(self.url.clone(), self.profile.clone(), self.vars.clone())
    }
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Creates an account named NAME and saves it as the profile (a profile for the same worker
    /// whose key still works is kept, unless --new).
    Create {
        name: String,
        /// Create another account even if the profile's still works (its file is overwritten).
        #[arg(long)]
        new: bool,
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Subcommand)]
enum NumberCommand {
    /// Gives the account the number PHONE (E.164).
    Add {
        phone: String,
        /// The carrier messages from the number go through (default: the worker's).
        #[arg(long)]
        carrier: Option<Carrier>,
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Args)]
struct ListenArgs {
    /// The loopback port to receive on (0: any free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// An event type to subscribe to; repeat for more (default: every type).
    #[arg(long = "event-type")]
    event_types: Vec<String>,
    /// Serve this existing endpoint instead of creating one (with --secret); it is not removed.
    #[arg(long, requires = "secret")]
    endpoint: Option<String>,
    /// The existing endpoint's signing secret (`whsec_...`); better in the environment than on
    /// the command line, where other users' `ps` shows it.
    #[arg(long, env = "EXACTLY_ENDPOINT_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// Prints each delivery as a JSON object per line on stdout (what listen says of itself goes
    /// to stderr).
    #[arg(long)]
    json: bool,
    /// Forwards each verified delivery to this URL and answers with its status.
    #[arg(long)]
    forward_to: Option<String>,
    /// Prints the endpoint's signing secret (to stderr), for a verifying receiver behind
    /// --forward-to (e.g. `WEBHOOK_SECRET=whsec_... python3 docs/receivers/receiver.py`).
    #[arg(long)]
    print_secret: bool,
    /// Prints each delivery's headers and body under its line.
    #[arg(long)]
    verbose: bool,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Args)]
struct SendArgs {
    /// One of the account's numbers.
    #[arg(long)]
    from: String,
    #[arg(long)]
    to: String,
    /// The text; `[fail]` makes the fake carrier fail it, `[no-receipt]` keeps its receipts back.
    #[arg(long)]
    text: String,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Subcommand)]
enum InboundCommand {
    /// An SMS from FROM to one of the account's numbers.
    Sms {
        #[arg(long, default_value = sim::facts::CUSTOMER_PHONE)]
        from: String,
        #[arg(long)]
        to: String,
        #[arg(long, default_value = "hi")]
        text: String,
        /// The Telnyx key file to sign with (written by `make dev`).
        #[arg(long, env = "EXACTLY_TELNYX_KEYS", default_value = sim::devkeys::DEFAULT_PATH)]
        keys: PathBuf,
        #[command(flatten)]
        conn: Conn,
    },
    /// A call from FROM to one of the account's numbers (rung through its ring targets).
    Call {
        #[arg(long, default_value = sim::facts::CUSTOMER_PHONE)]
        from: String,
        #[arg(long)]
        to: String,
        /// The Telnyx key file to sign with (written by `make dev`).
        #[arg(long, env = "EXACTLY_TELNYX_KEYS", default_value = sim::devkeys::DEFAULT_PATH)]
        keys: PathBuf,
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct EventsArgs {
    #[command(subcommand)]
    action: Option<EventsAction>,
    /// Keeps printing new events as they are written.
    #[arg(long)]
    follow: bool,
    /// Prints each event as a JSON object per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Subcommand)]
enum EventsAction {
    /// Delivers event EVENT_ID again: to every endpoint subscribed to its type, or to one.
    Replay {
        event_id: String,
        /// Only this endpoint (`ep_...`).
        #[arg(long)]
        endpoint: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Subcommand)]
enum EndpointsCommand {
    /// Lists the account's webhook endpoints: id, state, URL, event types.
    Ls {
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Carrier {
    Telnyx,
    Twilio,
    Plivo,
}

#[derive(Args)]
struct Sign {
    /// The carrier whose signature to make.
    carrier: Carrier,
    /// The request body: Telnyx's JSON, or Twilio's and Plivo's form (`a=1&b=2`).
    body: String,
    /// Telnyx: the key file (written by `make dev`).
    #[arg(long, env = "EXACTLY_TELNYX_KEYS", default_value = sim::devkeys::DEFAULT_PATH)]
    keys: PathBuf,
    /// Telnyx: sign as sent at these Unix seconds (default: now).
    #[arg(long)]
    at: Option<i64>,
    /// Twilio and Plivo: the URL the carrier posts to, which both sign (default: the carrier's
    /// route on `make dev`'s worker, http://127.0.0.1:8787/webhooks/twilio or /plivo).
    #[arg(long)]
    url: Option<String>,
    /// Twilio and Plivo: the auth token (the worker's TWILIO_AUTH_TOKEN or PLIVO_AUTH_TOKEN).
    #[arg(long, env = "CARRIER_AUTH_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Args)]
struct CarrierArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8788")]
    listen: String,
    /// The worker the receipts go to.
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    worker: String,
    /// The Telnyx key file that signs receipts.
    #[arg(long, env = "EXACTLY_TELNYX_KEYS", default_value = sim::devkeys::DEFAULT_PATH)]
    keys: PathBuf,
    /// Signs Twilio status callbacks (the development token of .dev.vars.example).
    #[arg(long, default_value = "dev-twilio-auth-token")]
    twilio_token: String,
    /// Signs Plivo status callbacks (the development token of .dev.vars.example).
    #[arg(long, default_value = "dev-plivo-auth-token")]
    plivo_token: String,
    /// Send receipts only for messages marked `[deliver]` or `[fail]` (by default every message
    /// without a marker is delivered, and `[no-receipt]` keeps its receipts back).
    #[arg(long)]
    no_receipts: bool,
}

#[derive(Args)]
struct Load {
    /// The worker's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    url: String,
    /// The Telnyx key file to sign with.
    #[arg(long, env = "EXACTLY_TELNYX_KEYS", default_value = sim::devkeys::DEFAULT_PATH)]
    keys: PathBuf,
    /// Event ids start with this.
    #[arg(long, default_value = "load")]
    prefix: String,
    /// Deliveries in all.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Deliveries in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Send one event again and again (the duplicate path) instead of new ones.
    #[arg(long)]
    duplicate: bool,
}

#[derive(Args)]
struct Scenario {
    /// The worker's base URL; its PUBLIC_BASE_URL, which Twilio and Plivo callbacks are signed for
    /// (unset: the vars file's, else http://127.0.0.1:8787).
    #[arg(long, env = "EXACTLY_URL")]
    url: Option<String>,
    /// Facts in all (default 500 for chaos, 50 for one kind).
    #[arg(long)]
    facts: Option<usize>,
    /// Share of facts delivered again under the same event id.
    #[arg(long, default_value_t = 0.35)]
    duplicates: f64,
    /// Share of facts delivered again re-signed under a new event id.
    #[arg(long, default_value_t = 0.15)]
    resigned: f64,
    /// Deliveries are shuffled within windows of this many.
    #[arg(long, default_value_t = 32)]
    reorder: usize,
    /// Deliveries sent at once.
    #[arg(long, default_value_t = 16)]
    parallel: usize,
    /// Share of Telnyx facts also sent with a stale signature (must be refused).
    #[arg(long, default_value_t = 0.05)]
    stale: f64,
    /// Seed of the deterministic choices.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The Telnyx key file to sign with.
    #[arg(long, env = "EXACTLY_TELNYX_KEYS", default_value = sim::devkeys::DEFAULT_PATH)]
    keys: PathBuf,
    /// Where ADMIN_TOKEN and the carriers' tokens come from unless ADMIN_TOKEN is in the
    /// environment.
    #[arg(long, env = "EXACTLY_VARS", default_value = ".dev.vars")]
    vars: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match cli.command {
        Command::Account(AccountCommand::Create { name, new, conn }) => {
            against(&conn, |t| sim::dev::create_account(t, &name, new)).and_then(print)
        }
        Command::Number(NumberCommand::Add { phone, carrier, conn }) => {
            against(&conn, |t| sim::dev::add_number(t, &phone, carrier.map(Carrier::name))).and_then(print)
        }
        Command::Listen(args) => listen(args),
        Command::Send(a) => against(&a.conn, |t| sim::dev::send(t, &a.from, &a.to, &a.text)).and_then(print),
        Command::Inbound(InboundCommand::Sms { from, to, text, keys, conn }) => {
            against(&conn, |t| sim::dev::inbound_sms(t, &keys, &from, &to, &text)).and_then(print)
        }
        Command::Inbound(InboundCommand::Call { from, to, keys, conn }) => {
            against(&conn, |t| sim::dev::inbound_call(t, &keys, &from, &to)).and_then(print)
        }
        Command::Events(EventsArgs { action: Some(EventsAction::Replay { event_id, endpoint, conn }), .. }) => {
            against(&conn, |t| sim::dev::replay(t, &event_id, endpoint.as_deref())).and_then(print)
        }
        Command::Events(a) => against(&a.conn, |t| sim::dev::events(t, a.follow, a.json)),
        Command::Endpoints(EndpointsCommand::Ls { conn }) => against(&conn, sim::dev::endpoints).and_then(print),
        Command::Sign(sign) => sign_body(&sign),
        Command::Carrier(args) => serve_carrier(args),
        Command::Keygen => {
            let signer = sim::telnyx::Signer::generate();
            println!("TELNYX_PUBLIC_KEY={}", signer.public_key_base64());
            println!("TELNYX_PRIVATE_SEED={}", signer.seed_base64());
            Ok(())
        }
        Command::Load(load) => run_load(&load),
        Command::Chaos(s) => scenario(sim::chaos::Mix::All, &s),
        Command::SmsInbound(s) => scenario(sim::chaos::Mix::Inbound, &s),
        Command::SmsOutbound(s) => scenario(sim::chaos::Mix::Outbound, &s),
        Command::Ring(s) => scenario(sim::chaos::Mix::Ring, &s),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sim: {message}");
            ExitCode::FAILURE
        }
    }
}

impl Carrier {
    fn name(self) -> &'static str {
        match self {
            Carrier::Telnyx => "telnyx",
            Carrier::Twilio => "twilio",
            Carrier::Plivo => "plivo",
        }
    }
}

/// Prints what a command did.
fn print(line: String) -> Result<(), String> {
    println!("sim: {line}");
    Ok(())
}

/// Runs a command against the worker `conn` names; its error says which worker and key it met.
fn against<T>(conn: &Conn, command: impl FnOnce(&sim::dev::Target) -> Result<T, String>) -> Result<T, String> {
    let target = conn.target();
    command(&target).map_err(|e| target.explain(&e))
}

fn listen(args: ListenArgs) -> Result<(), String> {
    against(&args.conn, |target| {
        sim::listen::run(sim::listen::Options {
            target: target.clone(),
            port: args.port,
            event_types: args.event_types,
            existing: args.endpoint.zip(args.secret),
            json: args.json,
            forward_to: args.forward_to,
            print_secret: args.print_secret,
            verbose: args.verbose,
        })
    })
}

fn sign_body(sign: &Sign) -> Result<(), String> {
    let pairs = || -> Vec<(String, String)> { form_urlencoded::parse(sign.body.as_bytes()).into_owned().collect() };
    let token = || sign.token.clone().ok_or("--token (or CARRIER_AUTH_TOKEN) is needed to sign for this carrier");
    let url = |route: &str| sign.url.clone().unwrap_or_else(|| format!("http://127.0.0.1:8787/webhooks/{route}"));
    let headers: Vec<(&str, String)> = match sign.carrier {
        Carrier::Telnyx => {
            let signer = sim::devkeys::telnyx_signer(&sign.keys)?;
            let h = signer.sign(sign.body.as_bytes(), sign.at.unwrap_or_else(sim::unix_now));
            vec![("telnyx-timestamp", h.timestamp), ("telnyx-signature-ed25519", h.signature)]
        }
        Carrier::Twilio => {
            let pairs = pairs();
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            vec![("x-twilio-signature", sim::twilio::sign(&token()?, &url("twilio"), &pairs).1)]
        }
        Carrier::Plivo => {
            let pairs = pairs();
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let nonce = sim::random_hex();
            let signature = sim::plivo::sign_v3(&token()?, &url("plivo"), &nonce, &pairs).1;
            vec![("x-plivo-signature-v3", signature), ("x-plivo-signature-v3-nonce", nonce)]
        }
    };
    let args: Vec<String> = headers.iter().map(|(name, value)| format!("-H {name}:{value}")).collect();
    println!("{}", args.join(" "));
    Ok(())
}

fn serve_carrier(args: CarrierArgs) -> Result<(), String> {
    let listen = &args.listen;
    let carrier = sim::carrier::FakeCarrier::start_on(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    if let Ok(signer) = sim::devkeys::telnyx_signer(&args.keys) {
        carrier.set_webhook_target(sim::carrier::WebhookTarget {
            base: args.worker,
            signer,
            twilio_token: Some(args.twilio_token),
            plivo_token: Some(args.plivo_token),
        });
    }
    if !args.no_receipts {
        carrier.deliver_by_default();
    }
    println!("sim: fake Telnyx, Twilio and Plivo APIs on {}", carrier.base);
    let mut seen = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let requests = carrier.requests("/v2/messages");
        for r in &requests[seen..] {
            let key = r.idempotency_key.as_deref().unwrap_or("-");
            println!("sim: {} {} key={key} to={}", r.method, r.path, r.body["to"]);
        }
        seen = requests.len();
    }
}

fn run_load(load: &Load) -> Result<(), String> {
    let signer = sim::devkeys::telnyx_signer(&load.keys)?;
    let measured = sim::load::run(&load.url, &signer, &load.prefix, load.requests, load.concurrency, load.duplicate);
    println!("{}", serde_json::to_string(&measured).map_err(|e| e.to_string())?);
    Ok(())
}

fn scenario(mix: sim::chaos::Mix, s: &Scenario) -> Result<(), String> {
    use sim::chaos::{Config, Mix};
    let config = Config {
        facts: s.facts.unwrap_or(if mix == Mix::All { 500 } else { 50 }),
        duplicate_rate: s.duplicates,
        resign_rate: s.resigned,
        reorder_window: s.reorder,
        parallelism: s.parallel,
        stale_rate: s.stale,
        seed: s.seed,
        progress: true,
        mix,
        ..Config::default()
    };
    // The worker's settings come from one place: the environment when ADMIN_TOKEN is set there
    // (a deployment's), else the vars file (`make dev`'s), so a run against a deployment never
    // signs with the development tokens of .dev.vars.
    let from_env = std::env::var("ADMIN_TOKEN").is_ok();
    let var = |name: &str| {
        if from_env {
            return std::env::var(name).ok();
        }
        let prefix = format!("{name}=");
        std::fs::read_to_string(&s.vars)
            .ok()?
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix.as_str()).map(str::to_owned))
    };
    // A carrier's auth token: the first of a rotation's comma-separated list.
    let token = |name: &str| var(name)?.split(',').next().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    let admin_token =
        var("ADMIN_TOKEN").ok_or_else(|| format!("no ADMIN_TOKEN in the environment or in {}", s.vars.display()))?;
    let signer = sim::devkeys::telnyx_signer(&s.keys)?;
    let url = match s.url.clone().filter(|u| !u.trim().is_empty()) {
        Some(url) => url,
        None => sim::dev::dev_worker(&s.vars).0,
    };
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
