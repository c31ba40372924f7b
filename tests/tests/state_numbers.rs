//! Numbers and edge cases of shared state (issue 17): an integer past the exact range is
//! refused the same way on the CLI and the socket; 1 and 1.0 are one number for every
//! reducer; a `--file` batch with a repeated key is refused.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use support::*;

const SCHEMA: &str = r#"
[state]
version = 1
[state.channels]
count  = { reducer = "add", default = 0 }
top    = { reducer = "max" }
labels = { reducer = "union" }
notes  = { reducer = "merge" }
"#;

fn setup() -> Grove {
    grove_with_session("s", SCHEMA).0
}

/// Sends `request` as it is written, byte for byte, after a hello; the answer.
fn raw_call(g: &Grove, request: &str) -> Value {
    let stream = UnixStream::connect(g.home.join("grove.sock")).expect("connect");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    let hello =
        r#"{"jsonrpc":"2.0","id":0,"method":"hello","params":{"protocol":1,"client":"raw"}}"#;
    for line in [hello, request] {
        writer.write_all(line.as_bytes()).expect("write");
        writer.write_all(b"\n").expect("write");
    }
    let mut answer = String::new();
    reader.read_line(&mut answer).expect("hello answer");
    answer.clear();
    reader.read_line(&mut answer).expect("answer");
    serde_json::from_str(&answer).expect("json answer")
}

fn state(g: &Grove) -> Value {
    serde_json::from_str(&g.ok(&["state", "get", "--session", "s"])).expect("json")
}

#[test]
fn an_integer_past_the_exact_range_is_refused_alike_on_the_cli_and_the_socket() {
    let g = setup();
    for big in [
        "18446744073709551616",
        "-9223372036854775809",
        "[1, 100000000000000000000000]",
    ] {
        let out = g.refused(
            &["state", "update", "--session", "s", "--", "count", big],
            "outside the range integers are exact in",
        );
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"state.update","params":{{"session":"s","writes":[{{"channel":"count","value":{big}}}]}}}}"#
        );
        let answer = raw_call(&g, &request);
        assert_eq!(
            answer["error"]["code"],
            grove_proto::codes::BAD_INPUT,
            "{answer}"
        );
        let message = answer["error"]["message"].as_str().expect("message");
        assert!(
            out.stderr.contains(message),
            "same message: {message} / {}",
            out.stderr
        );
    }
    // The edges of the range are taken exactly.
    g.state_update("s", &["count", "18446744073709551615"]);
    assert_eq!(state(&g)["count"], json!(u64::MAX));
    g.state_update("s", &["count", r#"{"__overwrite__": 0}"#]);
    g.state_update("s", &["--", "count", "-9223372036854775808"]);
    assert_eq!(state(&g)["count"], json!(i64::MIN));
    let mut c = client(&g);
    let shown = call(&mut c, "session.show", json!({"name": "s"})).expect("show");
    assert_eq!(shown["head"], 3, "nothing of the refused writes stayed");
}

/// state-semantics.md 10: an `add` channel holding a float refuses a whole number it
/// would round (2^53 + 1), and one holding such a number refuses a float, alike on the
/// CLI and the socket; the value and the checkpoints stay as they were.
#[test]
fn a_float_sum_that_would_round_an_integer_is_refused() {
    let g = setup();
    let past = "9007199254740993"; // 2^53 + 1
    g.state_update("s", &["count", "0.5"]);
    let out = g.refused(
        &["state", "update", "--session", "s", "--", "count", past],
        "would be rounded",
    );
    assert!(out.stderr.contains(past), "{}", out.stderr);
    let request = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"state.update","params":{{"session":"s","writes":[{{"channel":"count","value":{past}}}]}}}}"#
    );
    let answer = raw_call(&g, &request);
    assert_eq!(
        answer["error"]["code"],
        grove_proto::codes::BAD_INPUT,
        "{answer}"
    );
    assert_eq!(state(&g)["count"], json!(0.5));

    g.state_update("s", &["count", &format!(r#"{{"__overwrite__": {past}}}"#)]);
    g.refused(
        &["state", "update", "--session", "s", "count", "1.5"],
        "would be rounded",
    );
    g.state_update("s", &["count", "1"]);
    assert_eq!(state(&g)["count"], json!(9_007_199_254_740_994_u64));
    let mut c = client(&g);
    let shown = call(&mut c, "session.show", json!({"name": "s"})).expect("show");
    assert_eq!(shown["head"], 3, "nothing of the refused writes stayed");
}

#[test]
fn one_and_one_point_zero_are_one_number_for_every_reducer() {
    let g = setup();
    g.state_update("s", &["labels", "[1, 2.5]", "top", "1"]);
    g.state_update("s", &["labels", "[1.0, 2.50, 3]", "top", "1.0"]);
    let now = state(&g);
    assert_eq!(now["labels"], json!([1, 2.5, 3]));
    assert_eq!(now["top"], json!(1));
    // Exact past 2^53, where a float cannot tell the two apart.
    g.state_update("s", &["top", "9007199254740992.0"]);
    g.state_update("s", &["top", "9007199254740993"]);
    assert_eq!(state(&g)["top"], json!(9_007_199_254_740_993_u64));
}

#[test]
fn a_file_batch_with_a_repeated_key_is_refused() {
    let g = setup();
    let file = g.dir.path().join("batch.json");
    // `state update --file` of `text` is refused; its stderr.
    let refused = |text: &str| {
        std::fs::write(&file, text).expect("write");
        let out = g.run(&[
            "state",
            "update",
            "--session",
            "s",
            "--file",
            file.to_str().expect("utf8"),
        ]);
        assert_eq!(out.code, 2, "{}", out.stderr);
        out.stderr
    };
    let stderr = refused(r#"{"count": 1, "count": 2}"#);
    assert!(stderr.contains("key `count` appears twice"), "{stderr}");
    assert!(stderr.contains("batch.json"), "{stderr}");
    // NDJSON: the line is named, and no batch of the file is sent.
    let stderr = refused("{\"count\": 1}\n{\"notes\": {\"k\": 1, \"k\": 2}}\n");
    assert!(
        stderr.contains("batch.json:2: key `k` appears twice"),
        "{stderr}"
    );
    assert_eq!(state(&g)["count"], 0);
}
