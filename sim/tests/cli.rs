//! The command line: `--help` works on every command, and `sign` signs for each carrier what
//! the carrier's own scheme verifies.

use std::process::Command;

fn sim(args: &[&str]) -> (bool, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_sim")).args(args).env_remove("CARRIER_AUTH_TOKEN").output().expect("run sim");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The commands a `--help` lists under `Commands:` (without `help`).
fn listed(help: &str) -> Vec<String> {
    let Some(section) = help.split("Commands:\n").nth(1) else { return Vec::new() };
    section
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// `--help` on `path` and, recursively, on every command it lists; returns how many answered.
fn walk_help(path: &[String]) -> usize {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let (ok, help, err) = sim(&args);
    assert!(ok && help.contains("Usage: sim"), "sim {}:\n{help}{err}", args.join(" "));
    let mut answered = 1;
    for command in listed(&help) {
        let mut deeper = path.to_vec();
        deeper.push(command);
        answered += walk_help(&deeper);
    }
    answered
}

#[test]
fn every_command_answers_help() {
    let (ok, top, _) = sim(&["--help"]);
    assert!(ok, "{top}");
    let commands = ["account", "number", "listen", "send", "inbound", "events", "sign", "carrier", "keygen", "load"];
    for command in commands.iter().chain(&["chaos", "sms-inbound", "sms-outbound", "ring"]) {
        assert!(listed(&top).iter().any(|c| c == command), "`sim --help` lists {command}:\n{top}");
    }
    // Every command and subcommand (`account create`, `inbound sms`, ...) answers its own.
    let answered = walk_help(&[]);
    assert!(answered >= 1 + 14 + 4, "{answered} commands answered --help");
    let (ok, _, err) = sim(&["help"]);
    assert!(ok, "sim help: {err}");
    let (ok, _, err) = sim(&["no-such-command"]);
    assert!(!ok && err.contains("no-such-command"), "{err}");
}

#[test]
fn sign_signs_for_each_carrier() {
    let body = "MessageSid=SM1&MessageStatus=delivered";
    let url = "http://127.0.0.1:8787/webhooks/twilio";
    let (ok, out, err) = sim(&["sign", "twilio", body, "--url", url, "--token", "t0ken"]);
    assert!(ok, "{err}");
    let pairs = [("MessageSid", "SM1"), ("MessageStatus", "delivered")];
    let expected = sim::twilio::sign("t0ken", url, &pairs).1;
    assert_eq!(out.trim(), format!("-H x-twilio-signature:{expected}"));

    let (ok, out, err) = sim(&["sign", "plivo", "Status=delivered", "--token", "t0ken"]);
    assert!(ok, "{err}");
    let nonce = out.split("x-plivo-signature-v3-nonce:").nth(1).map(str::trim).unwrap_or_default();
    let expected =
        sim::plivo::sign_v3("t0ken", "http://127.0.0.1:8787/webhooks/plivo", nonce, &[("Status", "delivered")]).1;
    assert!(out.starts_with(&format!("-H x-plivo-signature-v3:{expected} ")), "{out}");

    let (ok, _, err) = sim(&["sign", "twilio", body]);
    assert!(!ok && err.contains("--token"), "a carrier token is asked for: {err}");
}

/// `listen` with an endpoint given: a delivery signed with its secret is verified, forwarded
/// with its headers and answered with the forward target's status; a tampered one is refused
/// (401), not forwarded and not counted; a second verified delivery of a webhook-id is attempt 2;
/// a timestamp no clock can subtract from is refused rather than crashing the listener.
#[test]
fn listen_verifies_forwards_and_refuses_what_does_not_verify() {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;

    let secret = exactly_core::webhook::SigningSecret::from_bytes(&[7u8; 24]);
    let local = sim::customer::CustomerEndpoint::start().expect("the forward target");
    local.always("/hooks", 202);
    /// Killed when the test ends, however it ends.
    struct Running(std::process::Child);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(["listen", "--json", "--endpoint", "ep_given"])
            .env("EXACTLY_ENDPOINT_SECRET", secret.to_whsec())
            .args(["--forward-to", &format!("{}/hooks", local.base)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start listen"),
    );
    let mut said = BufReader::new(child.0.stderr.take().expect("stderr")).lines().map_while(Result::ok);
    let mut lines = BufReader::new(child.0.stdout.take().expect("stdout")).lines().map_while(Result::ok);
    let first = said.next().expect("listen's first line, on stderr");
    let url = first.strip_prefix("sim: listening on ").and_then(|r| r.split(' ').next()).expect(&first).to_owned();
    assert!(first.ends_with("as endpoint ep_given"), "an endpoint given is not removed: {first}");

    let body = r#"{"id":"evt_1","type":"message.received","sequence":1,"data":{"id":"msg_1"}}"#;
    let now = exactly_core::Timestamp::from_unix_seconds(sim::unix_now());
    let signature = secret.sign("evt_1", now, body.as_bytes());
    let timestamp = now.unix_seconds().to_string();
    let post = |body: &str| {
        let answer = ureq::post(&url)
            .set("webhook-id", "evt_1")
            .set("webhook-timestamp", &timestamp)
            .set("webhook-signature", &signature)
            .set("content-type", "application/json")
            .send_string(body);
        match answer {
            Ok(a) => a.status(),
            Err(ureq::Error::Status(status, _)) => status,
            Err(e) => panic!("post to listen: {e}"),
        }
    };
    assert_eq!(post(body), 202, "answered with the forward target's status");
    assert_eq!(post(&body.replace("msg_1", "msg_2")), 401, "a tampered body is refused");
    assert_eq!(post(body), 202);
    let answer = ureq::post(&url)
        .set("webhook-id", "evt_1")
        .set("webhook-timestamp", "-9223372036854775808")
        .set("webhook-signature", &signature)
        .send_string(body);
    assert!(matches!(answer, Err(ureq::Error::Status(401, _))), "an impossible timestamp is refused: {answer:?}");
    let printed: Vec<serde_json::Value> =
        lines.by_ref().take(4).map(|l| serde_json::from_str(&l).expect("a JSON line")).collect();
    drop(child);
    let summary: Vec<(bool, u64, Option<u64>)> = printed
        .iter()
        .map(|p| (p["verified"] == true, p["attempt"].as_u64().unwrap_or(0), p["forwarded_status"].as_u64()))
        .collect();
    // A forged delivery is no attempt of the worker's: the third is the second verified one.
    assert_eq!(summary, [(true, 1, Some(202)), (false, 0, None), (true, 2, Some(202)), (false, 0, None)]);
    assert_eq!(printed[0]["event"]["data"]["id"], "msg_1");
    let forwarded = local.received("/hooks");
    assert_eq!(forwarded.len(), 2, "only what verified was forwarded");
    assert!(forwarded.iter().all(|r| r.body == body && r.header("webhook-signature") == Some(signature.as_str())));
}
