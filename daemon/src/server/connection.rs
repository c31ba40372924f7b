//! One client connection: capped line framing, JSON-RPC envelopes, `hello` first.
//! Requests after `hello` run concurrently; responses (and, for subscriptions,
//! notifications) go out as they are ready.

use super::handlers::{self, Answer};
use super::Ctx;
use crate::core::Identity;
use grove_proto::framing::{encode_line, read_frame_async, Frame};
use grove_proto::{codes, Response, RpcError, MAX_LINE_BYTES};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// What a request handler knows of its connection: where to write, and which agent (if
/// any) the peer process belongs to.
#[derive(Clone)]
pub struct Conn {
    out: mpsc::Sender<Out>,
    agent: Option<Identity>,
    /// Where `attach.input` and `attach.resize` go while the connection is attached.
    /// Handed over by the reader itself, not by a task per message, so keys stay in
    /// the order they were typed.
    attached: Arc<std::sync::Mutex<Option<mpsc::Sender<Inbound>>>>,
    /// The request's idempotency key, scoped to the caller (see `idempotency.rs`).
    key: Option<String>,
}

/// One line for the client, with a descriptor handed over with it (SCM_RIGHTS) when
/// there is one.
pub struct Out {
    line: Vec<u8>,
    fd: Option<std::os::fd::OwnedFd>,
}

impl From<Vec<u8>> for Out {
    fn from(line: Vec<u8>) -> Out {
        Out { line, fd: None }
    }
}

/// What an attached client sends to the agent's terminal.
pub enum Inbound {
    Input(Vec<u8>),
    Resize(grove_proto::types::TtySize),
}

impl Conn {
    /// Makes this connection an attached one; `None` if it is already.
    pub fn attach_inbound(&self) -> Option<mpsc::Receiver<Inbound>> {
        let mut slot = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return None;
        }
        let (tx, rx) = mpsc::channel(256);
        *slot = Some(tx);
        Some(rx)
    }

    pub fn detach_inbound(&self) {
        *self.attached.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Hands an `attach.*` notification to the attached terminal, in order. Anything
    /// else, or with no attach under way, is not one and goes the usual way.
    async fn route_inbound(&self, call: &Call) -> bool {
        use grove_proto::methods::attach;
        if call.id.is_some() || !call.method.starts_with("attach.") {
            return false;
        }
        let sender = self
            .attached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let inbound = match (call.method.as_str(), call.params.clone()) {
            (attach::INPUT, Some(params)) => serde_json::from_value::<attach::Data>(params)
                .ok()
                .and_then(|d| attach::decode(&d.data).ok())
                .map(Inbound::Input),
            (attach::RESIZE, Some(params)) => {
                serde_json::from_value::<grove_proto::types::TtySize>(params)
                    .ok()
                    .filter(|s| s.rows > 0 && s.cols > 0)
                    .map(Inbound::Resize)
            }
            _ => None,
        };
        // A notification gets no answer (JSON-RPC): a malformed one, or one with no
        // attach under way, is dropped and logged.
        match (sender, inbound) {
            (Some(sender), Some(inbound)) => {
                let _ = sender.send(inbound).await;
            }
            _ => tracing::debug!(method = %call.method, "dropped an attach notification"),
        }
        true
    }

    /// This connection, for one request that carries `key`.
    pub fn with_key(&self, key: String) -> Conn {
        Conn {
            key: Some(key),
            ..self.clone()
        }
    }

    /// The idempotency key of the request being handled: stored with its effect.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The agent whose process tree the peer belongs to: that agent's authority is all
    /// this connection has, whatever it sends.
    pub fn agent(&self) -> Option<&Identity> {
        self.agent.as_ref()
    }

    /// Queues one line (a response or a notification). False once the client is gone.
    pub async fn send<T: serde::Serialize>(&self, message: &T) -> bool {
        self.out.send(encode_line(message).into()).await.is_ok()
    }

    pub async fn respond(&self, id: Option<Value>, answer: Answer) {
        let Some(id) = id else {
            return;
        };
        let line = match answer {
            Ok(result) => {
                let result = result.into_bytes();
                let mut line = ok_head(&id, result.len() + OK_TAIL.len());
                line.extend_from_slice(&result);
                line.extend_from_slice(OK_TAIL);
                line
            }
            Err(error) => encode_line(&Response::err(id, error)),
        };
        let _ = self.out.send(line.into()).await;
    }

    /// Queues a response line that the handler made itself, from [`ok_head`] on, so
    /// that a long result is never copied to be framed.
    pub async fn send_line(&self, line: Vec<u8>) {
        let _ = self.out.send(line.into()).await;
    }

    /// Answers `id` with `result` and hands `fd` to the client along with the answer.
    pub async fn respond_with_fd(
        &self,
        id: Option<Value>,
        result: super::handlers::Json,
        fd: std::os::fd::OwnedFd,
    ) -> bool {
        let Some(id) = id else {
            return false;
        };
        let result = result.into_bytes();
        let mut line = ok_head(&id, result.len() + OK_TAIL.len());
        line.extend_from_slice(&result);
        line.extend_from_slice(OK_TAIL);
        self.out.send(Out { line, fd: Some(fd) }).await.is_ok()
    }
}

/// What ends every success line.
pub const OK_TAIL: &[u8] = b"}\n";

/// `{"jsonrpc":"2.0","id":ID,"result":` (the fields of [`Response`] in its order), in a
/// buffer with room for `more` bytes: the result, then [`OK_TAIL`].
pub fn ok_head(id: &Value, more: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(64 + more);
    head.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // A `Value` always serializes; the fallback only keeps this function total.
    if serde_json::to_writer(&mut head, id).is_err() {
        head.extend_from_slice(b"null");
    }
    head.extend_from_slice(br#","result":"#);
    head
}

/// A request that passed envelope checks.
struct Call {
    /// `None` for a notification, which gets no response.
    id: Option<Value>,
    method: String,
    params: Option<Value>,
}

/// Which agent a connection's peer belongs to, being found out.
type Lookup = JoinHandle<Result<Option<Identity>, super::peer::Refusal>>;

/// How long a new connection may stay silent before `hello`: one that never says it
/// would hold its slot for good, and enough of them lock everyone out.
const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// Serves one connection; `reserved` when it holds one of the user's reserved slots.
pub async fn serve(mut stream: UnixStream, ctx: Arc<Ctx>, reserved: bool) {
    // Which agent the peer belongs to is looked up while the client says hello: only
    // the requests after it act with that authority.
    let pin = super::peer::Pin::take(&stream);
    let lookup = tokio::spawn({
        let core = ctx.core.clone();
        async move { super::peer::place(pin, &core).await }
    });
    let Some(lookup) = keep_reserve_for_the_user(&mut stream, lookup, reserved).await else {
        return;
    };
    let mut lookup = Some(lookup);
    let hello_by = tokio::time::Instant::now() + HELLO_WITHIN;
    let (read, mut write) = stream.into_split();
    let (out, mut outbox) = mpsc::channel::<Out>(256);
    let writer = tokio::spawn(async move {
        while let Some(Out { line, fd }) = outbox.recv().await {
            let sent = match fd {
                Some(fd) => send_with_fd(&write, &line, &fd).await,
                None => Ok(0),
            };
            let written = match sent {
                Ok(n) => write.write_all(&line[n..]).await,
                Err(e) => Err(e),
            };
            if written.is_err() {
                break;
            }
        }
    });
    let mut conn = Conn {
        out,
        agent: None,
        attached: Arc::default(),
        key: None,
    };
    // Handles of the requests in flight, to abort them when the client leaves...
    let mut requests: Vec<JoinHandle<()>> = Vec::new();
    // ...but those with an idempotency key, which run on until their answer is stored:
    // a client that lost its connection and sends again at once waits for it instead
    // of racing it (see `idempotency.rs`).
    let mut keyed: Vec<JoinHandle<()>> = Vec::new();
    let mut reader = BufReader::new(read);
    let mut stopped = ctx.stop.subscribe();
    let mut greeted = false;
    // Held while the connection lives: the agent's share of connections.
    let mut agent_slot = None;
    let stopping = loop {
        let frame = tokio::select! {
            frame = read_frame_async(&mut reader, MAX_LINE_BYTES) => Some(frame),
            _ = stopped.wait_for(|stop| *stop) => break true,
            () = tokio::time::sleep_until(hello_by), if !greeted => None,
        };
        let Some(frame) = frame else {
            let error = RpcError::new(
                codes::HELLO_REQUIRED,
                format!(
                    "no `hello` within {}s of connecting; connect again and say `hello` \
                     with the protocol version first",
                    HELLO_WITHIN.as_secs()
                ),
            );
            conn.send(&Response::err(Value::Null, error)).await;
            crate::metrics::connection_silent();
            break false;
        };
        let line = match frame {
            Ok(Frame::Line(line)) => line,
            Ok(Frame::TooLong) => {
                let error = RpcError::new(
                    codes::LINE_TOO_LONG,
                    format!("line longer than {MAX_LINE_BYTES} bytes; nothing of it was read"),
                );
                conn.send(&Response::err(Value::Null, error)).await;
                continue;
            }
            Ok(Frame::Eof { .. }) | Err(_) => break false,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let call = match parse_call(&line) {
            Ok(call) => call,
            Err((id, error)) => {
                conn.send(&Response::err(id, error)).await;
                continue;
            }
        };
        if call.method == "hello" {
            let result = handlers::hello::handle(&ctx, call.params).await;
            greeted = result.is_ok();
            conn.respond(call.id, result).await;
        } else if !greeted {
            let error = RpcError::new(
                codes::HELLO_REQUIRED,
                "say `hello` with the protocol version first",
            );
            conn.respond(call.id, Err(error)).await;
        } else {
            if let Some(lookup) = lookup.take() {
                let Ok(placed) = lookup.await else {
                    break false;
                };
                match placed_with_slot(placed, &ctx) {
                    Ok((agent, slot)) => {
                        conn.agent = agent;
                        agent_slot = slot;
                    }
                    Err(error) => {
                        conn.respond(call.id, Err(error)).await;
                        break false;
                    }
                }
                if let Some(agent) = &conn.agent {
                    tracing::debug!(agent = %agent.id, "connection from inside an agent");
                }
            }
            if conn.route_inbound(&call).await {
                continue;
            }
            requests.retain(|task| !task.is_finished());
            keyed.retain(|task| !task.is_finished());
            let mut params = call.params;
            let key = match super::idempotency::take_key(&call.method, &mut params) {
                Ok(key) => key,
                Err(e) => {
                    conn.respond(call.id, Err(e)).await;
                    continue;
                }
            };
            let with_key = key.is_some();
            let (ctx, conn) = (ctx.clone(), conn.clone());
            // Every line a request logs carries its method and, from inside an agent, the
            // agent: one agent's story can be followed through the log.
            let span = tracing::info_span!("request", method = %call.method, agent = conn.agent.as_ref().map(|a| a.id.as_str()));
            let task = tokio::spawn(
                async move {
                    let answer = match key {
                        Some(key) => {
                            super::idempotency::run(&ctx, &conn, key, &call.method, params).await
                        }
                        None => {
                            handlers::dispatch(&ctx, &conn, call.id.clone(), &call.method, params)
                                .await
                        }
                    };
                    if let Some(result) = answer {
                        tracing::debug!(ok = result.is_ok(), "answered");
                        conn.respond(call.id, result).await;
                    }
                }
                .instrument(span),
            );
            if with_key {
                keyed.push(task);
            } else {
                requests.push(task);
            }
        }
    };
    if stopping {
        // Let requests in flight (daemon.stop among them) answer before we go.
        let drain = async {
            for task in requests.iter_mut().chain(keyed.iter_mut()) {
                let _ = task.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    }
    // The client is gone (or we are stopping): nothing more to answer. A request the
    // drain saw finish is not awaited again (a finished JoinHandle panics when polled).
    if let Some(lookup) = lookup {
        lookup.abort();
    }
    requests.retain(|task| !task.is_finished());
    for task in &requests {
        task.abort();
    }
    for task in requests {
        let _ = task.await;
    }
    drop(conn);
    drop(agent_slot);
    let _ = writer.await;
}

/// A connection on the user's reserve is served only once it is known not to be an
/// agent's: an agent there is turned away as at the cap, before anything is read.
async fn keep_reserve_for_the_user(
    stream: &mut UnixStream,
    lookup: Lookup,
    reserved: bool,
) -> Option<Lookup> {
    if !reserved {
        return Some(lookup);
    }
    let placed = lookup.await.ok()?;
    if matches!(placed, Ok(Some(_))) {
        let error = RpcError::new(
            codes::BUSY,
            "the grove daemon's connections are all in use but those kept for the user's \
             own commands (max_connections); nothing of this one was read: close idle ones \
             and try again",
        );
        let _ = stream
            .write_all(&encode_line(&Response::err(Value::Null, error)))
            .await;
        crate::metrics::connection_turned_away();
        return None;
    }
    Some(tokio::spawn(async move { placed }))
}

/// The agent a placed connection acts for, with the slot it takes of that agent's
/// share; else the error it is closed with. Not knowing whose the connection is must
/// never make it the user's.
fn placed_with_slot(
    placed: Result<Option<Identity>, super::peer::Refusal>,
    ctx: &Ctx,
) -> Result<(Option<Identity>, Option<TreeSlots>), RpcError> {
    let agent = placed.map_err(|refusal| {
        tracing::warn!(reason = %refusal.0, "refused a connection");
        RpcError::new(codes::REFUSED, refusal.0)
    })?;
    let Some(agent) = agent else {
        return Ok((None, None));
    };
    // At its share, the agent's request was not run: its client waits and sends again.
    let slot = ctx.agent_connections.take(&agent.id).map_err(|why| {
        crate::metrics::connection_turned_away();
        RpcError::new(codes::BUSY, why)
    })?;
    // After the agent's share: a connection that share refuses holds nothing of its
    // tree's. Not retried by the client: only the tree closing some frees one.
    let tree = ctx.tree_connections.take(&agent.root).map_err(|why| {
        crate::metrics::connection_refused_tree();
        RpcError::new(codes::TREE_BUSY, why)
    })?;
    Ok((
        Some(agent),
        Some(TreeSlots {
            _agent: slot,
            _tree: tree,
        }),
    ))
}

/// The slots an agent's connection holds: of its agent's share and of its tree's.
pub struct TreeSlots {
    _agent: super::agent_slots::AgentSlot,
    _tree: super::agent_slots::AgentSlot,
}

/// Sends the start of `line` with `fd` attached (the descriptor travels with the
/// first byte that goes); returns how much of the line went.
async fn send_with_fd(
    write: &tokio::net::unix::OwnedWriteHalf,
    line: &[u8],
    fd: &std::os::fd::OwnedFd,
) -> std::io::Result<usize> {
    let stream: &UnixStream = write.as_ref();
    loop {
        stream.writable().await?;
        match stream.try_io(tokio::io::Interest::WRITABLE, || {
            grove_sys::fdpass::send_with_fd(stream, line, fd)
        }) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

/// Checks the JSON-RPC envelope; on failure returns the id to answer with and the error.
fn parse_call(line: &[u8]) -> Result<Call, (Value, RpcError)> {
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        (
            Value::Null,
            RpcError::new(codes::PARSE_ERROR, format!("invalid JSON: {e}")),
        )
    })?;
    let Value::Object(mut object) = value else {
        return Err((
            Value::Null,
            RpcError::new(codes::INVALID_REQUEST, "a request must be a JSON object"),
        ));
    };
    let id = object.remove("id");
    let answer_id = id.clone().unwrap_or(Value::Null);
    let invalid = |message: &str| {
        (
            answer_id.clone(),
            RpcError::new(codes::INVALID_REQUEST, message.to_string()),
        )
    };
    if !matches!(
        &id,
        None | Some(Value::Null | Value::Number(_) | Value::String(_))
    ) {
        return Err((
            Value::Null,
            RpcError::new(
                codes::INVALID_REQUEST,
                "`id` must be a number, a string or null",
            ),
        ));
    }
    if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    let Some(Value::String(method)) = object.remove("method") else {
        return Err(invalid("`method` must be a string"));
    };
    let params = object.remove("params");
    if !matches!(params, None | Some(Value::Object(_))) {
        return Err((
            answer_id,
            RpcError::new(codes::INVALID_PARAMS, "`params` must be an object"),
        ));
    }
    Ok(Call { id, method, params })
}

#[cfg(test)]
mod fuzz {
    use super::parse_call;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn any_line_is_a_call_or_an_error_with_a_code(line in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Err((_, error)) = parse_call(&line) {
                prop_assert!(error.code < 0 && !error.message.is_empty());
            }
        }

        #[test]
        fn json_shaped_lines_too(
            id in prop_oneof![Just("1"), Just("\"a\""), Just("null"), Just("[1]"), Just("{}")],
            version in prop_oneof![Just("\"2.0\""), Just("\"1.0\""), Just("2"), Just("null")],
            method in "[a-z.]{0,12}",
            params in prop_oneof![Just("{}"), Just("[]"), Just("1"), Just("null"), Just("{\"id\":\"x\"}")],
        ) {
            let line = format!("{{\"jsonrpc\":{version},\"id\":{id},\"method\":\"{method}\",\"params\":{params}}}");
            match parse_call(line.as_bytes()) {
                Ok(call) => prop_assert_eq!(call.method, method),
                Err((_, error)) => prop_assert!(error.code < 0),
            }
        }
    }
}
