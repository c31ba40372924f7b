//! The wire protocol as any client sees it: raw JSON lines on the socket.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use support::*;

struct Raw {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Raw {
    fn connect(g: &Grove) -> Raw {
        g.ok(&["list"]); // starts the daemon
        let stream = UnixStream::connect(g.home.join("grove.sock")).expect("connect");
        Raw {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            writer: stream,
        }
    }

    fn send(&mut self, line: &[u8]) -> Value {
        self.writer.write_all(line).expect("write");
        self.writer.write_all(b"\n").expect("write");
        self.read()
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad response {line:?}: {e}"))
    }

    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(request.to_string().as_bytes())
    }

    fn hello(&mut self) {
        let response = self.call(0, "hello", json!({"protocol": 1, "client": "raw test"}));
        assert_eq!(response["result"]["protocol"], 1, "{response}");
    }
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error in {response}"))
}

#[test]
fn hello_comes_first() {
    let g = Grove::new();
    let mut raw = Raw::connect(&g);
    let response = raw.call(1, "agent.list", json!({}));
    assert_eq!(error_code(&response), -32005);
    assert_eq!(response["id"], 1);
    let response = raw.call(2, "hello", json!({"protocol": 7}));
    assert_eq!(error_code(&response), -32004);
    assert!(response["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("protocol 1"));
    raw.hello();
    let response = raw.call(3, "agent.list", json!({}));
    assert!(response["result"]["agents"].is_array(), "{response}");
}

/// `grove` sends `hello` and its request in one write, without waiting in between:
/// the daemon answers them in order, and a refused hello refuses what follows it.
#[test]
fn a_request_right_behind_hello_is_answered_after_it() {
    let g = Grove::new();
    let mut raw = Raw::connect(&g);
    let lines = |protocol: u32| {
        format!(
            "{}\n{}",
            json!({"jsonrpc": "2.0", "id": 1, "method": "hello",
                   "params": {"protocol": protocol, "client": "pipelined"}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "agent.list", "params": {"all": true}})
        )
    };
    let hello = raw.send(lines(1).as_bytes());
    assert_eq!(hello["id"], 1, "{hello}");
    assert_eq!(hello["result"]["protocol"], 1, "{hello}");
    let list = raw.read();
    assert_eq!(list["id"], 2, "{list}");
    assert!(list["result"]["agents"].is_array(), "{list}");

    let mut raw = Raw::connect(&g);
    let hello = raw.send(lines(7).as_bytes());
    assert_eq!(error_code(&hello), -32004, "{hello}");
    let list = raw.read();
    assert_eq!((list["id"].clone(), error_code(&list)), (json!(2), -32005));

    let mut client =
        grove_proto::Client::connect_pipelined(&g.home.join("grove.sock")).expect("connect");
    let listed = client
        .call::<grove_proto::methods::List>(&grove_proto::methods::ListParams {
            all: true,
            after: None,
            limit: None,
        })
        .expect("agent.list behind hello");
    assert!(listed.agents.is_empty());
    assert!(client.hello().expect("hello").pid > 0);
}

#[test]
fn malformed_requests_get_errors_and_the_daemon_keeps_serving() {
    let g = Grove::new();
    let mut raw = Raw::connect(&g);
    raw.hello();
    let cases: Vec<(&[u8], i64)> = vec![
        (b"{not json", -32700),
        (b"[1,2,3]", -32600),
        (br#"{"jsonrpc":"1.0","id":1,"method":"agent.list"}"#, -32600),
        (br#"{"jsonrpc":"2.0","id":1}"#, -32600),
        (
            br#"{"jsonrpc":"2.0","id":{"x":1},"method":"agent.list"}"#,
            -32600,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"agent.list","params":[1]}"#,
            -32602,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"no.such.method"}"#,
            -32601,
        ),
        (br#"{"jsonrpc":"2.0","id":1,"method":"agent.get"}"#, -32602),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"agent.get","params":{"id":5}}"#,
            -32602,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"agent.list","params":{"al":true}}"#,
            -32602,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"agent.get","params":{"id":"0000"}}"#,
            -32001,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"agent.wait","params":{"ids":[]}}"#,
            -32003,
        ),
    ];
    for (line, code) in cases {
        let response = raw.send(line);
        assert_eq!(
            error_code(&response),
            code,
            "{}: {response}",
            String::from_utf8_lossy(line)
        );
        assert!(!response["error"]["message"]
            .as_str()
            .unwrap_or("")
            .is_empty());
    }
    let response = raw.call(9, "agent.list", json!({"all": true}));
    assert!(response["result"]["agents"].is_array());
}

#[test]
fn spawn_params_are_checked_before_anything_happens() {
    let g = Grove::new();
    let mut raw = Raw::connect(&g);
    raw.hello();
    let repo = g.repo.to_str().expect("utf8");
    let cases = vec![
        (
            json!({"argv": [], "repo": repo}),
            -32003,
            "no command given",
        ),
        (
            json!({"argv": ["true"], "repo": "relative/path"}),
            -32003,
            "must be absolute",
        ),
        (
            json!({"argv": ["true"], "repo": repo, "name": "a/b"}),
            -32003,
            "branch name",
        ),
        (
            json!({"argv": ["true"], "repo": repo, "env": [{"name": "A=B", "value": ""}]}),
            -32003,
            "not valid",
        ),
        (
            json!({"argv": ["true"], "repo": repo, "timeout_ms": -5}),
            -32602,
            "invalid params",
        ),
        (json!({"argv": ["a\u{0}b"], "repo": repo}), -32003, "NUL"),
        (
            json!({"argv": ["true"], "repo": repo, "unknown": 1}),
            -32602,
            "unknown field",
        ),
        (
            json!({"argv": ["true"], "repo": "/nonexistent/../etc"}),
            -32003,
            "does not exist",
        ),
        (
            json!({"argv": ["true"], "repo": "/etc/../tmp"}),
            -32003,
            "not inside a git repository",
        ),
    ];
    for (params, code, needle) in cases {
        let response = raw.call(1, "agent.spawn", params.clone());
        assert_eq!(error_code(&response), code, "{params}: {response}");
        let message = response["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(needle), "{params}: {message}");
    }
    assert_eq!(g.json(&["list", "--all"])["agents"], json!([]));
    assert!(g.worktree_dirs().is_empty());
    assert_eq!(g.git(&["branch", "--list", "grove/*"]), "");
}

#[test]
fn oversized_line_is_refused_and_the_connection_goes_on() {
    let g = Grove::new();
    let mut raw = Raw::connect(&g);
    raw.hello();
    let huge = vec![b'x'; (1 << 20) + 10];
    let response = raw.send(&huge);
    assert_eq!(error_code(&response), -32006);
    let response = raw.call(5, "agent.list", json!({}));
    assert_eq!(response["id"], 5);
    assert!(response["result"]["agents"].is_array());
}

#[test]
fn half_a_line_then_disconnect_does_not_hurt_the_daemon() {
    let g = Grove::new();
    let pid = g.daemon_pid();
    {
        let mut raw = Raw::connect(&g);
        raw.writer
            .write_all(br#"{"jsonrpc":"2.0","id":1,"meth"#)
            .expect("write");
    }
    {
        let raw = Raw::connect(&g);
        drop(raw);
    }
    g.ok(&["list"]);
    assert_eq!(g.daemon_pid(), pid);
}

#[test]
fn notifications_get_no_response_but_requests_after_them_do() {
    let g = Grove::new();
    let mut raw = Raw::connect(&g);
    raw.hello();
    raw.writer
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"agent.list\"}\n")
        .expect("write");
    let response = raw.call(42, "daemon.status", json!({}));
    assert_eq!(response["id"], 42);
    assert!(response["result"]["pid"].is_number());
}

/// What bad input must leave untouched.
/// Everything a request could change. A session's `last_used_ms` is left out: it is an
/// access time (any read, even a refused one, keeps a session active), not its data.
fn snapshot(g: &Grove) -> (Value, Value, Vec<std::path::PathBuf>, String) {
    let mut sessions = g.json(&["session", "list"]);
    for session in sessions["sessions"].as_array_mut().into_iter().flatten() {
        if let Some(session) = session.as_object_mut() {
            session.remove("last_used_ms");
        }
    }
    (
        g.json(&["list", "--all"]),
        sessions,
        g.worktree_dirs(),
        g.git(&["for-each-ref"]),
    )
}

#[test]
fn every_method_refuses_bad_params_and_nothing_changes() {
    let g = Grove::new();
    let id = g.spawn(&["--session", "s"], "true");
    g.wait(&id);
    let mut raw = Raw::connect(&g);
    raw.hello();
    let before = snapshot(&g);
    let huge = "x".repeat(900_000);
    let weird_ids = [
        json!(5),
        json!(-1),
        json!(null),
        json!(["a"]),
        json!("../../etc/passwd"),
        json!("a\u{0}b"),
        json!("line\nbreak"),
        json!(huge),
        json!("ffffffffff"),
    ];
    let mut cases: Vec<(&str, Value)> = Vec::new();
    for method in grove_proto::methods::ALL_METHODS {
        if *method == "hello" {
            continue;
        }
        cases.push((method, json!({"zz_unknown_field": true})));
        cases.push((method, json!({"id": {"nested": true}, "zz": 1})));
    }
    for id in &weird_ids {
        for method in [
            "agent.get",
            "agent.kill",
            "agent.remove",
            "agent.logs",
            "agent.diff",
        ] {
            cases.push((method, json!({"id": id})));
        }
        cases.push(("agent.wait", json!({"ids": [id]})));
        cases.push(("agent.report", json!({"id": id, "text": "x"})));
        cases.push(("session.show", json!({"name": id})));
        cases.push(("state.get", json!({"session": id})));
        cases.push((
            "state.update",
            json!({"session": id, "writes": [{"channel": "x", "value": 1}]}),
        ));
        // A well-formed id is a valid session name: only the others must fail here.
        if *id != json!("ffffffffff") {
            cases.push((
                "state.fork",
                json!({"session": "s", "at": 0, "new_session": id}),
            ));
            cases.push(("session.create", json!({"name": id})));
        }
    }
    let repo = g.repo.to_str().expect("utf8");
    cases.extend([
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": format!("{repo}/../../..")}),
        ),
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": "/tmp/\u{0}x"}),
        ),
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": repo, "name": "a\nb"}),
        ),
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": repo, "base": "--orphan"}),
        ),
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": repo, "base": "main\n"}),
        ),
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": repo, "session": "../x"}),
        ),
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": repo, "limits": {"max_files": -1}}),
        ),
        (
            "agent.spawn",
            json!({"argv": ["true"], "repo": repo, "timeout_ms": 1e300}),
        ),
        ("agent.spawn", json!({"argv": "true", "repo": repo})),
        (
            "agent.spawn",
            json!({"argv": [&huge[..400_000]], "repo": repo, "name": &huge[..400_000]}),
        ),
        ("agent.wait", json!({"ids": "abc"})),
        ("agent.logs", json!({"id": id, "offset": -5})),
        (
            "agent.diff",
            json!({"id": id, "paths": ["--output=/tmp/x"]}),
        ),
        ("state.get", json!({"session": "s", "at": -1})),
        ("state.get", json!({"session": "s", "at": u64::MAX})),
        ("state.history", json!({"session": "s", "limit": -3})),
        ("state.compact", json!({"session": "s", "keep": 0})),
        (
            "state.fork",
            json!({"session": "s", "at": 99, "new_session": "f"}),
        ),
        ("state.update", json!({"session": "s", "writes": []})),
        (
            "state.update",
            json!({"session": "s", "writes": [{"channel": "nope", "value": 1}]}),
        ),
        (
            "session.create",
            json!({"name": "n", "schema": {"version": 1, "channels": {"x": {"reducer": "avg"}}}}),
        ),
        (
            "session.create",
            json!({"name": "n", "schema_text": {"origin": "x.toml", "text": "[state\n"}}),
        ),
        (
            "salvage.restore",
            json!({"repo": "relative", "reference": "x"}),
        ),
        (
            "salvage.restore",
            json!({"repo": repo, "reference": "../../heads/main"}),
        ),
        ("janitor.log", json!({"limit": "ten"})),
        ("events.subscribe", json!({"agent": "ffffffff"})),
        ("state.watch", json!({"session": "nope"})),
    ]);
    for (method, params) in cases {
        let response = raw.call(7, method, params.clone());
        let shown = params.to_string().chars().take(120).collect::<String>();
        assert!(
            response.get("result").is_none(),
            "{method} {shown} succeeded: {response}"
        );
        let message = response["error"]["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "{method} {shown}: {response}");
        assert_eq!(response["id"], 7, "{method}");
    }
    // The daemon still serves, and nothing changed.
    let response = raw.call(8, "daemon.status", json!({}));
    assert!(response["result"]["pid"].is_number());
    assert_eq!(snapshot(&g), before);
}
