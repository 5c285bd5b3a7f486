//! The README's quickstart, run as written: its commands are read out of README.md (not copied
//! here) and run in a shell against a worker of their own whose fake carrier sends receipts by
//! default, as `make dev`'s does. `listen` runs beside the others, as in a second terminal.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exactly_tests::{root, Worker, ADMIN_TOKEN};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("quickstart::the_readmes_commands_end_in_a_verified_webhook", the_readmes_commands_end_in_a_verified_webhook),
    ("quickstart::listen_hands_its_secret_to_a_verifying_receiver", listen_hands_its_secret_to_a_verifying_receiver),
    ("quickstart::the_typescript_client_installs_as_a_package", the_typescript_client_installs_as_a_package),
    ("quickstart::the_python_client_installs_as_a_package", the_python_client_installs_as_a_package),
    (
        "quickstart::make_dev_on_other_ports_serves_the_quickstart_and_chaos",
        make_dev_on_other_ports_serves_the_quickstart_and_chaos,
    ),
];

/// The commands of the README's quickstart: the lines of the `sh` blocks under its
/// `## Quickstart` heading (one per terminal), in order, but `make dev`, whose worker the test
/// starts itself.
fn quickstart_commands(readme: &str) -> Vec<String> {
    let section = readme.split("\n## Quickstart").nth(1).expect("the README has a Quickstart section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let blocks: Vec<&str> =
        section.split("```sh\n").skip(1).map(|b| b.split("```").next().unwrap_or_default()).collect();
    assert!(!blocks.is_empty(), "the quickstart has sh blocks");
    let lines = blocks.iter().flat_map(|b| b.lines()).map(str::trim);
    lines.filter(|l| !l.is_empty() && !l.starts_with('#') && *l != "make dev").map(str::to_owned).collect()
}

/// A shell running `command` from the project's root with the quickstart's environment, in a
/// process group of its own (so an interrupt reaches it as Ctrl-C in a terminal would).
fn shell(command: &str, env: &[(&str, String)]) -> Command {
    shell_without(command, env, &[])
}

/// [`shell`], without the variables in `unset` (the test process's own, if it has them).
fn shell_without(command: &str, env: &[(&str, String)], unset: &[&str]) -> Command {
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(command).current_dir(root());
    unset.iter().for_each(|name| {
        sh.env_remove(name);
    });
    sh.envs(env.iter().map(|(k, v)| (k, v)));
    std::os::unix::process::CommandExt::process_group(&mut sh, 0);
    sh
}

/// A command running in the background, in a process group of its own: interrupted as Ctrl-C
/// would, and killed with its group when the test ends however it ends.
struct Background(Child);

impl Background {
    fn interrupt(&self) {
        let _ = Command::new("kill").args(["-INT", "--", &format!("-{}", self.0.id())]).status();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}

/// Runs `command` in the background; returns it and the lines it prints on stdout and stderr,
/// as they come.
fn background(command: &str, env: &[(&str, String)]) -> (Background, Arc<Mutex<Vec<String>>>) {
    background_without(command, env, &[])
}

/// [`background`], without the variables in `unset`.
fn background_without(command: &str, env: &[(&str, String)], unset: &[&str]) -> (Background, Arc<Mutex<Vec<String>>>) {
    let mut child = shell_without(command, env, unset)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start in the background");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let outputs: [Box<dyn std::io::Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("listen's stdout")),
        Box::new(child.stderr.take().expect("listen's stderr")),
    ];
    for output in outputs {
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines().map_while(Result::ok) {
                eprintln!("quickstart: background: {line}");
                sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line);
            }
        });
    }
    (Background(child), lines)
}

/// The README's commands, in order: an account and a number, `listen`, an inbound message and a
/// send. `listen` prints, verified with the endpoint's secret, the inbound message and the sent
/// message reaching `delivered`; each command says what it did; `sim events` lists the same three;
/// Ctrl-C removes the endpoint.
fn the_readmes_commands_end_in_a_verified_webhook(_shared: &Worker) {
    let w = Worker::start();
    w.carrier.deliver_by_default();
    let readme = std::fs::read_to_string(root().join("README.md")).expect("read README.md");
    let commands = quickstart_commands(&readme);
    assert!((1..=5).contains(&commands.len()), "at most five commands: {commands:?}");
    let dir = root().join("target/e2e").join(format!("quickstart-{}", sim::random_hex()));
    std::fs::create_dir_all(&dir).expect("make the quickstart's directory");
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("TELNYX_PRIVATE_SEED={}\n", w.telnyx.seed_base64())).expect("write keys");
    // What `make dev` gives the commands by default: its worker, its admin token, its keys.
    let env = [
        ("EXACTLY_URL", w.base.clone()),
        ("EXACTLY_PROFILE", dir.join("account.json").display().to_string()),
        ("EXACTLY_TELNYX_KEYS", keys.display().to_string()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
    ];
    let (child, lines) = run_quickstart(&w, &commands, &env, &[]);

    // `sim events` lists the same events, oldest first.
    let out = shell("cargo run -q -p sim -- events", &env).output().expect("run sim events");
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    // The inbound message's events and the sent one's may be written in either order.
    let mut kinds: Vec<&str> = listed.lines().filter_map(|l| l.split_whitespace().next()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["message.delivered", "message.received", "message.sent"], "{listed}");

    // Run again on the same state, the first two commands keep what they made.
    for (command, said) in commands.iter().take(2).zip(["sim: keeping account acct_", "(already)"]) {
        let out = shell(command, &env).output().expect("run a quickstart command again");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(said),
            "{command} again: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Ctrl-C: the endpoint listen created is deleted.
    let endpoint = lines
        .lock()
        .unwrap()
        .iter()
        .find_map(|l| l.split(" as endpoint ").nth(1).and_then(|r| r.split(' ').next()).map(str::to_owned));
    let endpoint = endpoint.expect("listen named its endpoint");
    child.interrupt();
    let mut child = child;
    let exited = w.eventually(Duration::from_secs(30), || matches!(child.0.try_wait(), Ok(Some(_))));
    assert!(exited, "listen ended on Ctrl-C");
    let removed = w.eventually(Duration::from_secs(10), || {
        lines.lock().unwrap().iter().any(|l| l == &format!("sim: endpoint {endpoint} removed"))
    });
    assert!(removed, "listen said it removed {endpoint}: {:?}", lines.lock().unwrap());
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("account.json")).expect("the profile")).expect("json");
    let key = profile["api_key"].as_str().expect("the profile's key");
    let gone = w.call("GET", &format!("/v1/webhook_endpoints/{endpoint}"), key, None, &[]);
    assert_eq!(gone.status, 404, "the endpoint is gone: {}", gone.body);
}

/// Runs the quickstart's `commands` in order with `env` (and without the variables in `unset`),
/// `listen` in the background as in a second terminal; asserts each command succeeded and said
/// what it made, then waits for listen to print the three events, verified (and none not).
/// Returns listen and its lines.
type Listen = (Background, Arc<Mutex<Vec<String>>>);
fn run_quickstart(w: &Worker, commands: &[String], env: &[(&str, String)], unset: &[&str]) -> Listen {
    let mut listen: Option<(Background, Arc<Mutex<Vec<String>>>)> = None;
    let mut printed = Vec::new();
    for command in commands {
        if command.contains(" listen") {
            let (child, lines) = background_without(command, env, unset);
            let ready = w.eventually(Duration::from_secs(120), || {
                lines.lock().unwrap().iter().any(|l| l.starts_with("sim: listening on http://127.0.0.1:"))
            });
            assert!(ready, "listen registered its endpoint: {:?}", lines.lock().unwrap());
            listen = Some((child, lines));
            continue;
        }
        let out = shell_without(command, env, unset).output().expect("run a quickstart command");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("quickstart: {command}\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{command} failed: {}", String::from_utf8_lossy(&out.stderr));
        printed.push(stdout);
    }
    let printed = printed.concat();
    for said in ["sim: account acct_", "sim: number +", "sim: carrier event cev_", "sim: message msg_"] {
        assert!(printed.contains(said), "a command printed {said:?}: {printed}");
    }
    let (child, lines) = listen.expect("the quickstart runs listen");
    let seen = |kind: &str| {
        lines.lock().unwrap().iter().any(|l| l.starts_with(&format!("{kind} ")) && l.ends_with("  verified"))
    };
    let all = w.eventually(Duration::from_secs(90), || {
        ["message.received", "message.sent", "message.delivered"].iter().all(|k| seen(k))
    });
    assert!(all, "listen printed the three events, verified: {:?}", lines.lock().unwrap());
    assert!(!lines.lock().unwrap().iter().any(|l| l.contains("NOT VERIFIED")), "every delivery verified");
    (child, lines)
}

/// Waits for a line of `lines` that `wanted` accepts; returns it.
fn line_where(w: &Worker, lines: &Mutex<Vec<String>>, wanted: impl Fn(&str) -> bool) -> Option<String> {
    let mut found = None;
    w.eventually(Duration::from_secs(60), || {
        found = lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().find(|l| wanted(l)).cloned();
        found.is_some()
    });
    found
}

/// `listen --print-secret --verbose --forward-to` in front of the project's own verifying
/// receiver (docs/receivers/receiver.py): the receiver verifies what listen forwards, with the
/// secret listen printed; `endpoints ls` shows listen's endpoint; `events replay` sends the
/// event again under its webhook-id; `inbound sms` to a number no account owns warns. The
/// commands find the worker through the profile alone (no `EXACTLY_URL`).
fn listen_hands_its_secret_to_a_verifying_receiver(w: &Worker) {
    let c = w.new_customer("listen-forward");
    let dir = root().join("target/e2e").join(format!("listen-{}", sim::random_hex()));
    std::fs::create_dir_all(&dir).expect("make the test's directory");
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("TELNYX_PRIVATE_SEED={}\n", w.telnyx.seed_base64())).expect("write keys");
    let profile = dir.join("account.json");
    let kept = sim::dev::Profile { url: w.base.clone(), account_id: c.account.clone(), api_key: c.key.clone() };
    kept.save(&profile).expect("write the profile");
    let env = [
        ("EXACTLY_PROFILE", profile.display().to_string()),
        ("EXACTLY_TELNYX_KEYS", keys.display().to_string()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
    ];
    let port = exactly_tests::free_port();
    let command = format!(
        "bin/sim listen --print-secret --verbose --event-type message.received --forward-to http://127.0.0.1:{port}/"
    );
    let (_listen, lines) = background(&command, &env);
    let said = line_where(w, &lines, |l| l.starts_with("sim: its signing secret: whsec_"));
    let said = said.unwrap_or_else(|| panic!("listen printed its secret: {:?}", lines.lock().unwrap()));
    let secret = said.trim_start_matches("sim: its signing secret: ").split(' ').next().unwrap_or_default().to_owned();
    let endpoint = line_where(w, &lines, |l| l.starts_with("sim: listening on "))
        .and_then(|l| l.split(" as endpoint ").nth(1).and_then(|r| r.split(' ').next()).map(str::to_owned))
        .expect("listen named its endpoint");

    let receiver =
        format!("WEBHOOK_SECRET={secret} PORT={port} PYTHONPATH=.tools/python python3 docs/receivers/receiver.py");
    let (_receiver, received) = background(&receiver, &env);
    assert!(line_where(w, &received, |l| l.starts_with("listening on ")).is_some(), "the receiver listens");

    let run = |command: &str| {
        let out = shell(command, &env).output().expect("run a sim command");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}: {printed}");
        printed
    };
    let inbound = run(&format!("bin/sim inbound sms --to {} --text forwarded", c.number));
    assert!(!inbound.contains("warning"), "{inbound}");
    let arrived = line_where(w, &lines, |l| l.starts_with("message.received ") && l.contains("verified  -> 204"));
    let arrived = arrived.unwrap_or_else(|| panic!("listen forwarded, answered 204: {:?}", lines.lock().unwrap()));
    let webhook_id = arrived.split("webhook-id ").nth(1).and_then(|r| r.split(' ').next()).expect("a webhook-id");
    let verified = format!("verified message.received {webhook_id}");
    assert!(line_where(w, &received, |l| l.starts_with(&verified)).is_some(), "the receiver verified it");
    // --verbose: the headers under the line.
    let header = format!("    webhook-id: {webhook_id}");
    assert!(line_where(w, &lines, |l| l == header).is_some(), "{header:?} in {:?}", lines.lock().unwrap());

    let listed = run("bin/sim endpoints ls");
    assert!(listed.contains(&endpoint) && listed.contains("circuit closed"), "{listed}");
    let replayed = run(&format!("bin/sim events replay {webhook_id} --endpoint {endpoint}"));
    assert!(replayed.contains("1 new deliveries"), "{replayed}");
    let again = line_where(w, &lines, |l| l.contains(&format!("webhook-id {webhook_id} attempt 2  verified  -> 204")));
    assert!(again.is_some(), "the replay arrived as attempt 2: {:?}", lines.lock().unwrap());

    let unowned = run(&format!("bin/sim inbound sms --to {} --text nobody", exactly_tests::fresh_number()));
    assert!(unowned.contains("warning: no account owns"), "{unowned}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A new customer with one message sent, and a scratch directory named after `name`.
fn a_sent_message(w: &Worker, name: &str) -> (exactly_tests::Customer, String, std::path::PathBuf) {
    let c = w.new_customer(name);
    let body = serde_json::json!({"from": c.number, "to": "+15559990000", "text": format!("from the {name} test")});
    let sent = w.call("POST", "/v1/messages", &c.key, Some(&body), &[]);
    assert_eq!(sent.status, 201, "{}", sent.body);
    let id = sent.json()["id"].as_str().expect("an id").to_owned();
    let scratch = root().join("target/e2e").join(format!("{name}-{}", sim::random_hex()));
    std::fs::create_dir_all(&scratch).expect("make the scratch directory");
    (c, id, scratch)
}

/// clients/typescript built as its README says, packed, and installed from the tarball into a
/// scratch Node project (so only what the package ships is there), where its example lists the
/// account's messages from the profile, on the Node that runs the tests.
fn the_typescript_client_installs_as_a_package(w: &Worker) {
    let (c, id, scratch) = a_sent_message(w, "ts-client");
    let run = |command: &str, dir: &std::path::Path| {
        let out = Command::new("sh").arg("-c").arg(command).current_dir(dir).output().expect("run");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}: {printed}");
        printed
    };
    // The build `npm run build` runs, with the project's own TypeScript.
    let client = root().join("clients/typescript");
    run("../../node_modules/.bin/tsc -p tsconfig.json && cp schema.d.ts dist/schema.d.ts", &client);
    let packed = run(&format!("npm pack --silent --pack-destination {}", scratch.display()), &client);
    let tarball = packed.lines().last().expect("npm pack names its tarball").trim().to_owned();
    std::fs::write(scratch.join("package.json"), r#"{"name": "scratch", "private": true, "type": "module"}"#)
        .expect("write the scratch package.json");
    run(&format!("npm install --no-audit --no-fund --prefer-offline --loglevel=error ./{tarball}"), &scratch);
    std::fs::copy(client.join("examples/list-messages.mjs"), scratch.join("list-messages.mjs")).expect("copy");
    let profile = sim::dev::Profile { url: w.base.clone(), account_id: c.account.clone(), api_key: c.key.clone() };
    profile.save(&scratch.join(".dev.account.json")).expect("write the profile");
    let listed = run("node list-messages.mjs", &scratch);
    assert!(listed.contains(&format!("{id} outbound")), "the example lists {id}: {listed}");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// clients/python generated from docs/openapi.json and installed from its folder (a copy) into a
/// fresh virtualenv (from the wheels `scripts/setup.sh` downloaded, without the network), where its example lists the account's
/// messages from the profile, and answers a wrong key with the API's typed error.
fn the_python_client_installs_as_a_package(w: &Worker) {
    let (c, id, scratch) = a_sent_message(w, "py-client");
    let run = |command: &str, env: &[(&str, &str)]| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&scratch)
            .env_remove("EXACTLY_API_KEY")
            .envs(env.iter().copied())
            .output()
            .expect("run");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), printed)
    };
    let (wheels, client) = (root().join(".tools/python-wheels"), root().join("clients/python"));
    // Generated as its README says, then a copy of the folder installed (setuptools builds in the
    // folder it installs from).
    let install = format!(
        "sh {}/scripts/python-client.sh && cp -r {} client && python3 -m venv venv && venv/bin/pip install --quiet --disable-pip-version-check \
         --no-index --find-links {} ./client",
        root().display(),
        client.display(),
        wheels.display()
    );
    let (ok, printed) = run(&install, &[]);
    assert!(ok, "{install}: {printed}");
    std::fs::copy(client.join("examples/list_messages.py"), scratch.join("list_messages.py")).expect("copy");
    let profile = sim::dev::Profile { url: w.base.clone(), account_id: c.account.clone(), api_key: c.key.clone() };
    profile.save(&scratch.join(".dev.account.json")).expect("write the profile");
    let (ok, listed) = run("venv/bin/python list_messages.py", &[]);
    assert!(ok && listed.contains(&format!("{id} outbound")), "the example lists {id}: {listed}");
    let (ok, refused) = run("venv/bin/python list_messages.py", &[("EXACTLY_API_KEY", "sk_not_a_key")]);
    assert!(!ok && refused.contains("GET /v1/messages: 401 unauthorized: "), "the typed error: {refused}");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Starts `make dev`'s script on ports no other test is given ([`exactly_tests::free_port`],
/// below the range that sockets binding port 0 are handed), and waits until it says where the
/// console is: its start applies every migration through wrangler and checks the build, which
/// on a machine busy with the rest of the suite takes minutes.
fn serve_make_dev(
    w: &Worker,
    env: &mut Vec<(&str, String)>,
    unset: &[&str],
) -> (Background, Arc<Mutex<Vec<String>>>, u16, u16) {
    let (port, carrier) = (exactly_tests::free_port(), exactly_tests::free_port());
    env.extend([
        ("PORT", port.to_string()),
        ("CARRIER_PORT", carrier.to_string()),
        ("INSPECTOR_PORT", exactly_tests::free_port().to_string()),
    ]);
    let (dev, served) = background_without("sh scripts/dev.sh", env, unset);
    let console = format!("dev: the console: http://127.0.0.1:{port}/console/");
    let ready = w.eventually(Duration::from_secs(600), || served.lock().unwrap().contains(&console));
    assert!(ready, "make dev said where the console is: {:?}", served.lock().unwrap());
    (dev, served, port, carrier)
}

/// `make dev`'s script, as a newcomer meets it where another process holds 8787 and 8788: it
/// refuses the taken port, naming its setting; on two other ports (`PORT`, `CARRIER_PORT`) it
/// serves, its variables follow the ports, and it says where everything is after wrangler's
/// lines, without wrangler's "changed" line for a build nothing changed. Against it, the README's
/// quickstart with no `EXACTLY_URL` and no `ADMIN_TOKEN` ends in three verified webhooks, and the
/// README's `sim chaos` line with seeds 7 and 1234 reports 0 duplicate effects and 0 missing. Its
/// variables, keys, local state and profile live in a scratch directory (`DEV_VARS`,
/// `DEV_STATE`, `EXACTLY_VARS`, `EXACTLY_TELNYX_KEYS`, `EXACTLY_PROFILE`).
fn make_dev_on_other_ports_serves_the_quickstart_and_chaos(w: &Worker) {
    let dir = root().join("target/e2e").join(format!("make-dev-{}", sim::random_hex()));
    std::fs::create_dir_all(&dir).expect("make the scratch directory");
    // Another process on the defaults; when this machine's own `make dev` holds them, they are
    // taken all the same.
    let _held: Vec<_> =
        ["127.0.0.1:8787", "127.0.0.1:8788"].iter().filter_map(|a| std::net::TcpListener::bind(a).ok()).collect();
    let vars = dir.join(".dev.vars").display().to_string();
    let mut env = vec![
        ("DEV_VARS", vars.clone()),
        ("DEV_STATE", dir.join("state").display().to_string()),
        ("EXACTLY_VARS", vars.clone()),
        ("EXACTLY_TELNYX_KEYS", dir.join(".dev.keys").display().to_string()),
        ("EXACTLY_PROFILE", dir.join(".dev.account.json").display().to_string()),
    ];
    let unset = ["EXACTLY_URL", "ADMIN_TOKEN", "EXACTLY_API_KEY", "PORT", "CARRIER_PORT", "INSPECTOR_PORT"];
    let refused = shell_without("sh scripts/dev.sh", &env, &unset).output().expect("run make dev's script");
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success() && said.contains("port 8787 (PORT) is taken"), "refused: {said}");

    let unset = &unset[..3];
    let (_dev, served, port, carrier) = serve_make_dev(w, &mut env, unset);
    let written = std::fs::read_to_string(&vars).expect("make dev wrote its variables");
    for line in
        [format!("PUBLIC_BASE_URL=http://127.0.0.1:{port}"), format!("TELNYX_API_BASE=http://127.0.0.1:{carrier}")]
    {
        assert!(written.lines().any(|l| l == line), "{line} in {vars}");
    }

    let readme = std::fs::read_to_string(root().join("README.md")).expect("read README.md");
    let (_listen, _lines) = run_quickstart(w, &quickstart_commands(&readme), &env, unset);

    let section = readme.split("\n## The carrier simulator").nth(1).expect("the README's simulator section");
    let chaos = section.lines().find(|l| l.starts_with("bin/sim chaos --facts")).expect("the README's chaos line");
    let chaos = chaos.split('#').next().unwrap_or_default().trim();
    for seed in [7, 1234] {
        let out = shell_without(&format!("{chaos} --seed {seed}"), &env, unset).output().expect("run chaos");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        eprintln!("quickstart: {chaos} --seed {seed}\n{printed}");
        assert!(out.status.success(), "{chaos} --seed {seed}: {printed}");
        for count in ["duplicate effects:", "events missing:"] {
            let value = printed.lines().find_map(|l| l.strip_prefix(count)).map(str::trim);
            assert_eq!(value, Some("0"), "{count} with seed {seed}: {printed}");
        }
    }
    let spurious = "The file edge/src,core/src changed, restarting build...";
    assert!(!served.lock().unwrap().iter().any(|l| l == spurious), "no build announced that nothing caused");
    let _ = std::fs::remove_dir_all(&dir);
}
