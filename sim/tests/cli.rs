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

#[test]
fn every_command_answers_help() {
    let (ok, top, _) = sim(&["--help"]);
    assert!(ok, "{top}");
    let commands = ["sign", "carrier", "keygen", "load", "chaos", "sms-inbound", "sms-outbound", "ring"];
    for command in commands {
        assert!(top.contains(command), "`sim --help` lists {command}:\n{top}");
        let (ok, help, err) = sim(&[command, "--help"]);
        assert!(ok && help.contains("Usage: sim"), "sim {command} --help:\n{help}{err}");
    }
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
