//! Clients: a blocking one (used by `grove`) and an async one (tokio).

use crate::framing::{encode_line, read_frame, read_frame_async, Frame};
use crate::jsonrpc::{Request, Response, RpcError};
use crate::methods::{Hello, HelloParams, HelloResult, Method};
use crate::{MAX_LINE_BYTES, PROTOCOL_VERSION};
use serde::Deserialize;
use serde_json::Value;
use std::io::{self, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::retry::{new_idempotency_key, retry_for_from_env, Revive, DEFAULT_RETRY_FOR};
use crate::retry::{Next, Outgoing};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers at the socket (no daemon, or a stale socket file). The cause is
    /// said in the message and not chained as a source, so that printing the chain
    /// (`{:#}`) says it once.
    #[error("cannot connect to the grove daemon at {path}: {cause}")]
    Unreachable { path: String, cause: io::Error },
    #[error("lost the connection to the grove daemon: {0}")]
    Io(io::Error),
    #[error("{}", .0.message)]
    Rpc(RpcError),
    #[error("the grove daemon sent something unexpected: {0}")]
    Protocol(String),
    /// The socket's directory or whoever answers on it is not this user's: nothing was
    /// sent.
    #[error("{0}; nothing was sent")]
    Untrusted(String),
    /// No daemon answers and none can be started for a cause that does not pass (a
    /// damaged database): trying again would only wait out the retry window.
    #[error("{0}")]
    WontStart(String),
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Io(e)
    }
}

impl ClientError {
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc(e) => Some(e.code),
            _ => None,
        }
    }
}

/// Turns a raw response into the typed result of method `M`.
fn decode<M: Method>(response: Response) -> Result<M::Result, ClientError> {
    if let Some(error) = response.error {
        return Err(ClientError::Rpc(error));
    }
    let value = response.result.unwrap_or(Value::Null);
    serde_json::from_value(value)
        .map_err(|e| ClientError::Protocol(format!("bad result for {}: {e}", M::NAME)))
}

fn parse_response(frame: Frame) -> Result<Option<Response>, ClientError> {
    match frame {
        Frame::Line(line) => {
            let value: Value = serde_json::from_slice(&line)
                .map_err(|e| ClientError::Protocol(format!("invalid JSON: {e}")))?;
            // Notifications (no id) are events; callers of `call` skip them.
            if value.get("id").is_none() {
                return Ok(None);
            }
            serde_json::from_value(value)
                .map(Some)
                .map_err(|e| ClientError::Protocol(format!("invalid response: {e}")))
        }
        Frame::TooLong => Err(ClientError::Protocol("response over the line cap".into())),
        Frame::Eof { .. } => Err(ClientError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the daemon closed the connection",
        ))),
    }
}

fn hello_params() -> HelloParams {
    HelloParams {
        protocol: PROTOCOL_VERSION,
        client: format!("grove-proto {}", env!("CARGO_PKG_VERSION")),
    }
}

/// Refuses a socket whose directory someone else could write (see
/// [`crate::paths::secure_socket_dir`]). A missing directory is left to `connect`, which
/// then finds nothing to connect to.
fn check_socket_dir(socket: &Path) -> Result<(), ClientError> {
    let dir = socket.parent().unwrap_or(Path::new("/"));
    crate::paths::secure_socket_dir(dir)
        .map(|_| ())
        .map_err(|e| ClientError::Untrusted(e.to_string()))
}

/// Refuses a server that is not run by this user, before a byte goes out: the directory
/// may have been swapped between the check and the connect, and only the kernel's
/// record of the listening process (SO_PEERCRED) is beyond an impostor's reach.
fn check_server(stream: &impl std::os::fd::AsFd, socket: &Path) -> Result<(), ClientError> {
    let me = nix::unistd::geteuid().as_raw();
    let (uid, pid) = grove_sys::peer::credentials(stream).map_err(|e| {
        ClientError::Untrusted(format!("cannot tell who serves {}: {e}", socket.display()))
    })?;
    if uid != me {
        let pid = pid.map_or_else(|| "pid unknown".into(), |pid| format!("pid {pid}"));
        return Err(ClientError::Untrusted(format!(
            "{} is served by uid {uid} ({pid}), not by you (uid {me}): it is not your grove \
             daemon; remove the socket's directory or set GROVE_HOME to a directory of yours",
            socket.display(),
        )));
    }
    Ok(())
}

/// One connection to the daemon, of either client: replaced whole when it is lost.
struct Connection<R, W> {
    reader: R,
    writer: W,
    next_id: u64,
    /// `None` while the answer to `hello` is still on its way (see [`Client::connect_pipelined`]).
    hello: Option<HelloResult>,
}

/// The retry settings, the same on both clients (the policy itself is [`crate::retry`]).
macro_rules! retry_settings {
    ($client:ty) => {
        impl $client {
            /// Sets how long calls keep retrying after a lost connection (zero: never).
            pub fn retry_for(mut self, retry_for: Duration) -> Self {
                self.retry_for = retry_for;
                self
            }

            /// Sets what to do when nothing answers at the socket during a retry.
            pub fn revive_with(mut self, revive: Revive) -> Self {
                self.revive = Some(revive);
                self
            }
        }
    };
}

retry_settings!(Client);
retry_settings!(AsyncClient);

/// A blocking connection that has said hello. When the connection drops (a daemon
/// restarting), a call reconnects and sends its request again, with the same
/// idempotency key, for up to [`Client::retry_for`]; a subscription is sent again and
/// its stream goes on after a `<prefix>.lagged` notification (`"reconnected": true`).
pub struct Client {
    conn: Connection<BufReader<UnixStream>, UnixStream>,
    path: PathBuf,
    retry_for: Duration,
    revive: Option<Revive>,
    /// The last subscription (method, params), sent again after a reconnect.
    subscription: Option<(String, Value)>,
}

impl Client {
    /// Blocks until the daemon pushes the next notification (after a subscription).
    /// A lost connection is replaced and the subscription sent again; what was missed
    /// meanwhile is said by a `<prefix>.lagged` notification.
    pub fn next_notification(&mut self) -> Result<crate::Notification, ClientError> {
        let mut lost = match self.next_notification_once() {
            Err(ClientError::Io(e)) if self.subscription.is_some() => e,
            other => return other,
        };
        let (method, params) = self.subscription.clone().unwrap_or_default();
        let mut outgoing = Outgoing::new(&method, params);
        let resubscribed = loop {
            let attempts = outgoing.failed(self.retry_for, ClientError::Io(lost))?;
            self.reconnect(attempts)?;
            // The daemon answers a subscription before it streams anything, so the
            // next response is the new subscription's answer (a `state.watch` head
            // says how many updates went by meanwhile).
            let answer = self
                .send_request(&method, outgoing.attempt())
                .and_then(|()| self.next_response());
            match answer {
                Ok(response) => match response.error {
                    Some(error) => return Err(ClientError::Rpc(error)),
                    None => break response.result.unwrap_or(Value::Null),
                },
                Err(ClientError::Io(e)) => lost = e,
                Err(e) => return Err(e),
            }
        };
        let prefix = method.split('.').next().unwrap_or("events");
        Ok(crate::Notification {
            jsonrpc: "2.0".into(),
            method: format!("{prefix}.lagged"),
            params: serde_json::json!({
                "missed": null,
                "reconnected": true,
                "resubscribed": resubscribed,
                "resync": "the daemon restarted: read the current picture again, then keep reading",
            }),
        })
    }

    fn next_notification_once(&mut self) -> Result<crate::Notification, ClientError> {
        self.hello()?;
        loop {
            match read_frame(&mut self.conn.reader, MAX_LINE_BYTES)? {
                Frame::Line(line) => {
                    let value: Value = serde_json::from_slice(&line)
                        .map_err(|e| ClientError::Protocol(format!("invalid JSON: {e}")))?;
                    if value.get("id").is_some() {
                        continue;
                    }
                    return serde_json::from_value(value)
                        .map_err(|e| ClientError::Protocol(format!("invalid notification: {e}")));
                }
                other => {
                    parse_response(other)?;
                }
            }
        }
    }

    /// A second handle on the connection's socket, for a thread that writes while
    /// this one reads (`agent.attach`: keys go out as output comes in).
    pub fn writer(&self) -> std::io::Result<UnixStream> {
        self.conn.writer.try_clone()
    }

    /// Connects and waits for the daemon's answer to `hello`.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let mut client = Client::connect_pipelined(path)?;
        match client.hello().map(|_| ()) {
            Err(e) if e.is_retried() => {
                let attempts =
                    Outgoing::new(Hello::NAME, Value::Null).failed(client.retry_for, e)?;
                client.reconnect(attempts)?;
            }
            other => other?,
        }
        Ok(client)
    }

    /// As [`Client::connect_pipelined`], but a daemon that does not answer is waited
    /// for (up to `GROVE_RETRY_FOR`; a socket file removed by a stop only for a
    /// restart's grace) instead of reported at once: for a caller that may not start
    /// one (an agent) and counts on the user's next command to.
    pub fn connect_waiting(path: &Path) -> Result<Client, ClientError> {
        match Client::connect_pipelined(path) {
            Err(e) if e.is_daemon_down() => {
                let retry_for = retry_for_from_env();
                let attempts = crate::retry::Reconnect::new(Instant::now() + retry_for, e);
                let mut client = Client::reopen(path, attempts, &mut None)?;
                client.retry_for = retry_for;
                Ok(client)
            }
            other => other,
        }
    }

    /// Connects and says `hello` without waiting for the answer: the first call goes
    /// out right behind it, and both answers come back together, one round trip
    /// instead of two. A refused hello (another protocol version) is that call's error.
    /// The daemon reads `hello` before anything after it, so the order is safe.
    pub fn connect_pipelined(path: &Path) -> Result<Client, ClientError> {
        let retry_for = retry_for_from_env();
        // A daemon going away between our connect and our `hello` (a restart) cuts the
        // connection: that is waited out, but only for a restart's grace, as nothing
        // here can start a daemon; the caller sees what is left (unreachable, say).
        let mut client = match Client::open(path) {
            Err(e) if e.is_retried() => {
                let grace = retry_for.min(crate::retry::RESTART_GRACE);
                let attempts = Outgoing::new(Hello::NAME, Value::Null).failed(grace, e)?;
                Client::reopen(path, attempts, &mut None)?
            }
            other => other?,
        };
        client.retry_for = retry_for;
        Ok(client)
    }

    /// A connection that has sent `hello`, without retries.
    fn open(path: &Path) -> Result<Client, ClientError> {
        check_socket_dir(path)?;
        let stream = UnixStream::connect(path).map_err(|cause| ClientError::Unreachable {
            path: path.display().to_string(),
            cause,
        })?;
        check_server(&stream, path)?;
        let writer = stream.try_clone()?;
        let mut client = Client {
            conn: Connection {
                // Long answers (agent.list pages) arrive in fewer reads. A buffer for a
                // whole line measured slower: its fresh pages cost more than the reads.
                reader: BufReader::with_capacity(64 * 1024, stream),
                writer,
                next_id: 2,
                hello: None,
            },
            path: path.to_path_buf(),
            retry_for: Duration::ZERO,
            revive: None,
            subscription: None,
        };
        let params = serde_json::to_value(hello_params())
            .map_err(|e| ClientError::Protocol(format!("cannot encode params: {e}")))?;
        if let Err(cut) = client.send(&encode_line(&Request::new(1, Hello::NAME, params))) {
            // Turned away before it read a byte (a cap): its one line says so, and is
            // still there to read; anything else is the cut.
            return Err(match client.next_response() {
                Ok(Response {
                    error: Some(error), ..
                }) if error.code == crate::codes::BUSY => ClientError::Rpc(error),
                _ => cut,
            });
        }
        Ok(client)
    }

    /// What the daemon said to `hello`, read now if it has not been yet.
    pub fn hello(&mut self) -> Result<&HelloResult, ClientError> {
        let hello = match self.conn.hello.take() {
            Some(hello) => hello,
            None => decode::<Hello>(self.next_response()?)?,
        };
        Ok(self.conn.hello.insert(hello))
    }

    fn next_response(&mut self) -> Result<Response, ClientError> {
        loop {
            if let Some(response) =
                parse_response(read_frame(&mut self.conn.reader, MAX_LINE_BYTES)?)?
            {
                return Ok(response);
            }
        }
    }

    pub fn call<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, ClientError> {
        let params = serde_json::to_value(params)
            .map_err(|e| ClientError::Protocol(format!("cannot encode params: {e}")))?;
        decode::<M>(self.call_raw(M::NAME, params)?)
    }

    pub fn call_raw(&mut self, method: &str, params: Value) -> Result<Response, ClientError> {
        self.retrying(Outgoing::new(method, params), |client, method, params| {
            client.send_request(method, params)?;
            unless_stopping(client.next_response()?)
        })
    }

    /// Runs `once` (one request and its answer), and after a lost connection reconnects
    /// and runs it again, as [`Outgoing`] says.
    fn retrying<T>(
        &mut self,
        mut outgoing: Outgoing<'_>,
        mut once: impl FnMut(&mut Client, &str, Value) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        if outgoing.is_subscription() {
            self.subscription = Some((outgoing.method().to_string(), outgoing.params().clone()));
        }
        loop {
            match once(self, outgoing.method(), outgoing.attempt()) {
                Err(e) if e.is_retried() => {
                    let reconnect = outgoing.failed(self.retry_for, e)?;
                    self.reconnect(reconnect)?;
                }
                other => return other,
            }
        }
    }

    /// Sends one request (saying `hello` first when it is still unanswered).
    fn send_request(&mut self, method: &str, params: Value) -> Result<(), ClientError> {
        let id = self.conn.next_id;
        self.conn.next_id += 1;
        self.send(&encode_line(&Request::new(id, method, params)))?;
        self.hello()?;
        Ok(())
    }

    /// Replaces a lost connection, as `attempts` says.
    fn reconnect(&mut self, attempts: crate::retry::Reconnect) -> Result<(), ClientError> {
        let fresh = Client::reopen(&self.path, attempts, &mut self.revive)?;
        self.conn = fresh.conn;
        Ok(())
    }

    /// A new connection whose `hello` was answered, tried as `attempts` says; `revive`
    /// runs when nothing answers at the socket.
    fn reopen(
        path: &Path,
        mut attempts: crate::retry::Reconnect,
        revive: &mut Option<Revive>,
    ) -> Result<Client, ClientError> {
        loop {
            std::thread::sleep(attempts.pause()?);
            let fresh = Client::open(path).and_then(|mut fresh| {
                fresh.hello()?;
                Ok(fresh)
            });
            match fresh {
                Ok(fresh) => return Ok(fresh),
                Err(e) => {
                    if attempts.failed(e)? == Next::Revive {
                        if let Some(revive) = revive.as_mut() {
                            if let Err(e @ ClientError::WontStart(_)) = revive(path) {
                                return Err(e);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A call whose answer may come with a descriptor (SCM_RIGHTS): `agent.attach`
    /// with `direct`. The answer is read with recvmsg, byte by byte of the socket, as a
    /// buffered read would drop the descriptor.
    pub fn call_receiving_fd<M: Method>(
        &mut self,
        params: &M::Params,
    ) -> Result<(M::Result, Option<std::os::fd::OwnedFd>), ClientError> {
        self.hello()?;
        if !self.conn.reader.buffer().is_empty() {
            return Err(ClientError::Protocol(
                "the daemon sent more than was asked before a descriptor call".into(),
            ));
        }
        let params = serde_json::to_value(params)
            .map_err(|e| ClientError::Protocol(format!("cannot encode params: {e}")))?;
        let id = self.conn.next_id;
        self.conn.next_id += 1;
        self.send(&encode_line(&Request::new(id, M::NAME, params)))?;
        let mut line = Vec::new();
        let mut fds = Vec::new();
        let mut byte = [0u8; 1];
        while line.last() != Some(&b'\n') {
            if line.len() > MAX_LINE_BYTES {
                return Err(ClientError::Protocol("response over the line cap".into()));
            }
            let (n, mut got) =
                grove_sys::fdpass::recv_with_fds(self.conn.reader.get_ref(), &mut byte)?;
            if n == 0 {
                return Err(ClientError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the daemon closed the connection",
                )));
            }
            line.push(byte[0]);
            fds.append(&mut got);
        }
        line.pop();
        let response = parse_response(Frame::Line(line))?
            .ok_or_else(|| ClientError::Protocol("a notification instead of the answer".into()))?;
        Ok((decode::<M>(response)?, fds.into_iter().next()))
    }

    /// Writes a request. A daemon that turned the connection away (too many open) has
    /// said why in its answer to `hello`: that reason beats a broken pipe.
    fn send(&mut self, line: &[u8]) -> Result<(), ClientError> {
        if let Err(e) = self.conn.writer.write_all(line) {
            if let Err(ClientError::Rpc(reason)) = self.hello() {
                return Err(ClientError::Rpc(reason));
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Sends a request and hands each line that arrives to `parse` until it returns a
    /// response (`Some`); `None` means the line was a notification. For long results
    /// that the caller reads straight from the line's bytes, e.g. with [`Envelope`].
    pub fn call_with<T>(
        &mut self,
        method: &str,
        params: Value,
        mut parse: impl FnMut(Vec<u8>) -> Result<Option<T>, ClientError>,
    ) -> Result<T, ClientError> {
        self.retrying(Outgoing::new(method, params), |client, method, params| {
            client.send_request(method, params)?;
            loop {
                match read_frame(&mut client.conn.reader, MAX_LINE_BYTES)? {
                    Frame::Line(line) => {
                        if let Some(response) = parse(line)? {
                            return Ok(response);
                        }
                    }
                    other => {
                        parse_response(other)?;
                    }
                }
            }
        })
    }
}

/// A response line parsed in one pass straight into the result type `R` (which may
/// borrow from the line), without the `Value` tree that [`Response`] builds.
#[derive(Debug, Deserialize)]
#[serde(bound(deserialize = "R: Deserialize<'de>"))]
pub struct Envelope<R> {
    /// False for notifications, which have no `id`.
    #[serde(default, deserialize_with = "present", rename = "id")]
    has_id: bool,
    #[serde(default = "Option::default")]
    result: Option<R>,
    #[serde(default)]
    error: Option<RpcError>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

impl<'de, R: Deserialize<'de>> Envelope<R> {
    /// The result of the response in `line`; `None` when the line is a notification.
    pub fn parse(line: &'de [u8], method: &str) -> Result<Option<R>, ClientError> {
        let envelope: Envelope<R> = serde_json::from_slice(line)
            .map_err(|e| ClientError::Protocol(format!("bad result for {method}: {e}")))?;
        if !envelope.has_id {
            return Ok(None);
        }
        match (envelope.error, envelope.result) {
            (Some(error), _) => Err(ClientError::Rpc(error)),
            (None, Some(result)) => Ok(Some(result)),
            (None, None) => Err(ClientError::Protocol(format!(
                "the answer to {method} has no result"
            ))),
        }
    }
}

/// An async connection that has said hello. It rides out a daemon restart as
/// [`Client`] does, under the same policy ([`crate::retry`]): a call whose connection
/// drops reconnects and is sent again, with the same idempotency key, for up to
/// `GROVE_RETRY_FOR` seconds. It reads no notifications (no subscriptions).
pub struct AsyncClient {
    conn: Connection<
        tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
        tokio::net::unix::OwnedWriteHalf,
    >,
    path: PathBuf,
    retry_for: Duration,
    /// Run on a blocking thread: starting a daemon waits for it.
    revive: Option<Revive>,
}

impl AsyncClient {
    /// As [`Client::connect_waiting`], for async callers.
    pub async fn connect_waiting(path: &Path) -> Result<AsyncClient, ClientError> {
        match AsyncClient::connect(path).await {
            Err(e) if e.is_daemon_down() => {
                let retry_for = retry_for_from_env();
                let attempts = crate::retry::Reconnect::new(Instant::now() + retry_for, e);
                let mut client = AsyncClient::reopen(path, attempts, &mut None).await?;
                client.retry_for = retry_for;
                Ok(client)
            }
            other => other,
        }
    }

    /// Connects and waits for the answer to `hello`; later calls retry for
    /// `GROVE_RETRY_FOR` seconds.
    pub async fn connect(path: &Path) -> Result<AsyncClient, ClientError> {
        let retry_for = retry_for_from_env();
        let mut client = match AsyncClient::open(path).await {
            Err(e) if e.is_retried() => {
                let attempts = Outgoing::new(Hello::NAME, Value::Null).failed(retry_for, e)?;
                AsyncClient::reopen(path, attempts, &mut None).await?
            }
            other => other?,
        };
        client.retry_for = retry_for;
        Ok(client)
    }

    /// What the daemon said to `hello`.
    pub fn hello(&self) -> Option<&HelloResult> {
        self.conn.hello.as_ref()
    }

    /// A connection that has said hello, without retries.
    async fn open(path: &Path) -> Result<AsyncClient, ClientError> {
        check_socket_dir(path)?;
        let stream = tokio::net::UnixStream::connect(path)
            .await
            .map_err(|cause| ClientError::Unreachable {
                path: path.display().to_string(),
                cause,
            })?;
        check_server(&stream, path)?;
        let (read, write) = stream.into_split();
        let mut client = AsyncClient {
            conn: Connection {
                reader: tokio::io::BufReader::new(read),
                writer: write,
                next_id: 1,
                hello: None,
            },
            path: path.to_path_buf(),
            retry_for: Duration::ZERO,
            revive: None,
        };
        let params = serde_json::to_value(hello_params())
            .map_err(|e| ClientError::Protocol(format!("cannot encode params: {e}")))?;
        let hello = client.call_once(Hello::NAME, params).await?;
        client.conn.hello = Some(decode::<Hello>(hello)?);
        Ok(client)
    }

    pub async fn call<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, ClientError> {
        let params = serde_json::to_value(params)
            .map_err(|e| ClientError::Protocol(format!("cannot encode params: {e}")))?;
        decode::<M>(self.call_raw(M::NAME, params).await?)
    }

    pub async fn call_raw(&mut self, method: &str, params: Value) -> Result<Response, ClientError> {
        let mut outgoing = Outgoing::new(method, params);
        loop {
            match self
                .call_once(method, outgoing.attempt())
                .await
                .and_then(unless_stopping)
            {
                Err(e) if e.is_retried() => {
                    let attempts = outgoing.failed(self.retry_for, e)?;
                    self.reconnect(attempts).await?;
                }
                other => return other,
            }
        }
    }

    async fn call_once(&mut self, method: &str, params: Value) -> Result<Response, ClientError> {
        use tokio::io::AsyncWriteExt;
        let id = self.conn.next_id;
        self.conn.next_id += 1;
        let sent = self
            .conn
            .writer
            .write_all(&encode_line(&Request::new(id, method, params)))
            .await;
        if let Err(cut) = sent {
            // As in the blocking client: a connection turned away at a cap says so in
            // the one line it got before it was closed.
            let frame = read_frame_async(&mut self.conn.reader, MAX_LINE_BYTES).await;
            return Err(match frame.map(parse_response) {
                Ok(Ok(Some(Response {
                    error: Some(error), ..
                }))) if error.code == crate::codes::BUSY => ClientError::Rpc(error),
                _ => ClientError::Io(cut),
            });
        }
        loop {
            let frame = read_frame_async(&mut self.conn.reader, MAX_LINE_BYTES).await?;
            if let Some(response) = parse_response(frame)? {
                return Ok(response);
            }
        }
    }

    /// Replaces a lost connection, as `attempts` says.
    async fn reconnect(&mut self, attempts: crate::retry::Reconnect) -> Result<(), ClientError> {
        let fresh = AsyncClient::reopen(&self.path, attempts, &mut self.revive).await?;
        self.conn = fresh.conn;
        Ok(())
    }

    /// A new connection, tried as `attempts` says; `revive` runs (on a blocking thread,
    /// as starting a daemon waits for it) when nothing answers at the socket.
    async fn reopen(
        path: &Path,
        mut attempts: crate::retry::Reconnect,
        revive: &mut Option<Revive>,
    ) -> Result<AsyncClient, ClientError> {
        loop {
            tokio::time::sleep(attempts.pause()?).await;
            match AsyncClient::open(path).await {
                Ok(fresh) => return Ok(fresh),
                Err(e) => {
                    if attempts.failed(e)? == Next::Revive {
                        run_revive(revive, path).await?;
                    }
                }
            }
        }
    }
}

/// Runs the revive hook on a blocking thread; only its `WontStart` is final.
async fn run_revive(revive: &mut Option<Revive>, path: &Path) -> Result<(), ClientError> {
    let Some(mut hook) = revive.take() else {
        return Ok(());
    };
    let path = path.to_path_buf();
    let ran = tokio::task::spawn_blocking(move || {
        let result = hook(&path);
        (hook, result)
    })
    .await;
    // A hook that panicked is dropped: retries go on without it.
    let Ok((hook, result)) = ran else {
        return Ok(());
    };
    *revive = Some(hook);
    match result {
        Err(e @ ClientError::WontStart(_)) => Err(e),
        _ => Ok(()),
    }
}

/// A stopping daemon's refusal (it ran nothing) is a failure to retry with the next
/// daemon, not the call's answer.
fn unless_stopping(response: Response) -> Result<Response, ClientError> {
    match response {
        Response {
            error: Some(error), ..
        } if error.code == crate::codes::SHUTTING_DOWN => Err(ClientError::Rpc(error)),
        answered => Ok(answered),
    }
}

impl ClientError {
    /// True when the daemon refused our protocol version.
    pub fn is_protocol_mismatch(&self) -> bool {
        self.rpc_code() == Some(crate::codes::PROTOCOL_MISMATCH)
    }

    /// True when the daemon turned the connection away at a cap, having read nothing.
    pub fn is_busy(&self) -> bool {
        self.rpc_code() == Some(crate::codes::BUSY)
    }

    /// True when no daemon is there to answer: its socket file is gone or nobody
    /// listens on it (a crash, a restart); not when this process may not connect.
    pub fn is_daemon_down(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable { cause, .. }
                if matches!(cause.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused)
        )
    }

    /// True when the daemon refused the request because it is stopping: nothing of it
    /// ran, and the next daemon takes it.
    pub fn is_shutting_down(&self) -> bool {
        self.rpc_code() == Some(crate::codes::SHUTTING_DOWN)
    }

    /// True for the failures a call is sent again after (see [`crate::retry`]).
    fn is_retried(&self) -> bool {
        matches!(self, ClientError::Io(_)) || self.is_busy() || self.is_shutting_down()
    }
}
