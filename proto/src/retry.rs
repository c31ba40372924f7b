//! The one retry policy of both clients (blocking [`crate::Client`] and
//! [`crate::AsyncClient`]): what is sent again after a lost connection, with which
//! idempotency key, for how long, and how a client waits for a daemon to come back
//! (docs/protocol.md, "Retries and idempotency"). No I/O here: each client runs the
//! steps with its own sockets and sleeps.

use crate::client::ClientError;
use crate::methods::{
    CHANGING_METHODS, IDEMPOTENCY_KEY, IDEMPOTENCY_RETRY, NEVER_RETRIED, SUBSCRIPTIONS,
};
use serde_json::Value;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a client keeps trying to reach a restarting daemon unless told otherwise
/// (`GROVE_RETRY_FOR`, in seconds; 0 turns retries off).
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(300);

/// How long a client waits for a socket file that is gone to come back (a daemon
/// restarting binds its socket first thing) before it takes the daemon for stopped.
pub(crate) const RESTART_GRACE: Duration = Duration::from_secs(5);

/// First and longest pause between two attempts to reconnect.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// `GROVE_RETRY_FOR` (seconds), else [`DEFAULT_RETRY_FOR`].
pub fn retry_for_from_env() -> Duration {
    std::env::var("GROVE_RETRY_FOR")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs >= 0.0)
        .map_or(DEFAULT_RETRY_FOR, Duration::from_secs_f64)
}

/// Called when nothing answers at the socket while a client retries: a chance to start
/// a daemon (the CLI does). Its errors are not final, the client keeps trying, but
/// [`ClientError::WontStart`]: a daemon that cannot start.
pub type Revive = Box<dyn FnMut(&Path) -> Result<(), ClientError> + Send>;

/// A fresh idempotency key: the time in ms, then this process's 128 random bits, then
/// a count of the keys it made, in hex. The time first makes keys sort in the order
/// they are made, so the daemon's index of them grows at its end: random keys landed on
/// a random page of it each, and a group of state updates then wrote hundreds of index
/// pages to the database (14k against 25k updates/s on bench case 5). The random part
/// is drawn once per process and the count tells its keys apart: a key per request
/// costs no system call.
pub fn new_idempotency_key() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PROCESS: OnceLock<String> = OnceLock::new();
    static MADE: AtomicU64 = AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let process = PROCESS.get_or_init(|| {
        let mut bytes = [0u8; 16];
        if grove_sys::random::fill(&mut bytes).is_err() {
            // No randomness: the start time and pid still tell this process from others.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            return format!("{nanos:x}-{:x}", std::process::id());
        }
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    });
    let made = MADE.fetch_add(1, Ordering::Relaxed);
    format!("{millis:012x}-{process}-{made:x}")
}

/// One request across its attempts: the same idempotency key every time (one is
/// added when the method changes something and the caller chose none), and
/// `idempotency_retry: true` from the second attempt on, which makes the daemon look
/// the key up.
pub(crate) struct Outgoing<'a> {
    method: &'a str,
    params: Value,
    sent: bool,
    /// When the retries stop: set at the first lost connection.
    deadline: Option<Instant>,
}

impl<'a> Outgoing<'a> {
    pub(crate) fn new(method: &'a str, mut params: Value) -> Outgoing<'a> {
        if let Value::Object(map) = &mut params {
            if CHANGING_METHODS.contains(&method) && !map.contains_key(IDEMPOTENCY_KEY) {
                map.insert(IDEMPOTENCY_KEY.into(), new_idempotency_key().into());
            }
        }
        Outgoing {
            method,
            params,
            sent: false,
            deadline: None,
        }
    }

    pub(crate) fn method(&self) -> &'a str {
        self.method
    }

    /// The params as first sent (with the key): what a subscription resends.
    pub(crate) fn params(&self) -> &Value {
        &self.params
    }

    pub(crate) fn is_subscription(&self) -> bool {
        SUBSCRIPTIONS.contains(&self.method)
    }

    /// The params of the next attempt.
    pub(crate) fn attempt(&mut self) -> Value {
        let mut params = self.params.clone();
        if let (true, Value::Object(map)) = (self.sent, &mut params) {
            if map.contains_key(IDEMPOTENCY_KEY) {
                map.insert(IDEMPOTENCY_RETRY.into(), true.into());
            }
        }
        self.sent = true;
        params
    }

    /// After an attempt failed: until when to try reconnecting, counted from the first
    /// failure; the error back when this request is not sent again. A lost connection
    /// is retried unless the method never is (the request may have run; the
    /// idempotency key makes running it twice safe), and so is one a stopping daemon
    /// refused; a connection turned away at a cap always is, as the daemon read
    /// nothing of it.
    pub(crate) fn failed(
        &mut self,
        retry_for: Duration,
        e: ClientError,
    ) -> Result<Reconnect, ClientError> {
        let again = match &e {
            ClientError::Io(_) => !NEVER_RETRIED.contains(&self.method),
            // A stopping daemon ran nothing of it, but a stop it refused is done.
            e if e.is_shutting_down() => !NEVER_RETRIED.contains(&self.method),
            e => e.is_busy(),
        };
        if !again || retry_for.is_zero() {
            return Err(e);
        }
        let deadline = *self.deadline.get_or_insert(Instant::now() + retry_for);
        Ok(Reconnect::new(deadline, e))
    }
}

/// What to do after a failed attempt to reconnect.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Pause and try again.
    Again,
    /// Nothing answers at the socket: start a daemon if the client can, then as `Again`.
    Revive,
}

/// The attempts to replace one lost connection: pauses growing from 20 ms to 1 s until
/// the deadline, and which failures end them early.
pub(crate) struct Reconnect {
    deadline: Instant,
    pause: Duration,
    last: ClientError,
    absent_since: Option<Instant>,
}

impl Reconnect {
    pub(crate) fn new(deadline: Instant, last: ClientError) -> Reconnect {
        Reconnect {
            deadline,
            pause: FIRST_PAUSE,
            last,
            absent_since: None,
        }
    }

    /// The pause before the next attempt; the last error once the deadline has passed.
    pub(crate) fn pause(&mut self) -> Result<Duration, ClientError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::mem::replace(
                &mut self.last,
                ClientError::Protocol("no attempt left".into()),
            ));
        }
        let pause = self.pause.min(left);
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        Ok(pause)
    }

    /// Weighs a failed attempt: try again, or the error that ends the retries.
    pub(crate) fn failed(&mut self, e: ClientError) -> Result<Next, ClientError> {
        let next = match &e {
            // No socket file: the daemon was stopped on purpose (it removes its socket)
            // or is restarting (the next binds it at once). Wait a little for a
            // restart; never start a daemon someone stopped.
            ClientError::Unreachable { cause, .. } if cause.kind() == io::ErrorKind::NotFound => {
                let since = *self.absent_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= RESTART_GRACE {
                    return Err(e);
                }
                Next::Again
            }
            // A socket nobody answers: its daemon died.
            ClientError::Unreachable { .. } => Next::Revive,
            // Cut before `hello` was answered: a daemon going away or coming up. One
            // at a cap says so (`BUSY`) instead, so cuts are always waited out.
            ClientError::Io(_) => Next::Again,
            // Turned away at a cap: it clears as connections close (a silent one is
            // closed within seconds), so this is waited out like a restart.
            e if e.is_busy() => Next::Again,
            // Refused by a daemon on its way out: the next one answers.
            e if e.is_shutting_down() => Next::Again,
            _ => return Err(e),
        };
        self.last = e;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_differ_and_sort_in_the_order_they_were_made() {
        let keys: Vec<String> = (0..100).map(|_| super::new_idempotency_key()).collect();
        let distinct: std::collections::HashSet<&String> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        let times: Vec<&str> = keys.iter().map(|k| &k[..12]).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{keys:?}");
        assert!(keys.iter().all(|k| k.len() <= 128), "{keys:?}");
    }

    #[test]
    fn a_changing_request_keeps_its_key_and_says_when_it_is_sent_again() {
        let mut out = Outgoing::new("state.update", json!({"session": "s"}));
        let first = out.attempt();
        let key = first[IDEMPOTENCY_KEY].as_str().map(str::to_owned);
        assert!(key.is_some(), "{first}");
        assert!(first.get(IDEMPOTENCY_RETRY).is_none(), "{first}");
        let again = out.attempt();
        assert_eq!(again[IDEMPOTENCY_KEY].as_str(), key.as_deref());
        assert_eq!(again[IDEMPOTENCY_RETRY], json!(true));
    }

    #[test]
    fn a_reading_request_gets_no_key_and_a_stop_is_never_sent_again() {
        let mut out = Outgoing::new("agent.list", json!({}));
        assert_eq!(out.attempt(), json!({}));
        assert_eq!(out.attempt(), json!({}));
        let mut stop = Outgoing::new("daemon.stop", json!({}));
        let lost = io::Error::new(io::ErrorKind::UnexpectedEof, "closed");
        assert!(stop
            .failed(Duration::from_secs(60), ClientError::Io(lost))
            .is_err());
    }

    #[test]
    fn a_request_turned_away_at_a_cap_is_sent_again_whatever_its_method() {
        let busy = || ClientError::Rpc(crate::RpcError::new(crate::codes::BUSY, "cap"));
        let mut stop = Outgoing::new("daemon.stop", json!({}));
        let mut again = stop
            .failed(Duration::from_secs(60), busy())
            .expect("retried");
        for _ in 0..10 {
            assert_eq!(again.failed(busy()).ok(), Some(Next::Again));
        }
        let refused = ClientError::Rpc(crate::RpcError::new(crate::codes::REFUSED, "no"));
        assert!(stop.failed(Duration::from_secs(60), refused).is_err());
        assert!(stop.failed(Duration::ZERO, busy()).is_err());
    }

    #[test]
    fn a_request_a_stopping_daemon_refused_is_sent_again_but_a_stop_is_not() {
        let stopping = || {
            ClientError::Rpc(crate::RpcError::new(
                crate::codes::SHUTTING_DOWN,
                "stopping",
            ))
        };
        let mut update = Outgoing::new("state.update", json!({"session": "s"}));
        let mut again = update
            .failed(Duration::from_secs(60), stopping())
            .expect("retried");
        assert_eq!(again.failed(stopping()).ok(), Some(Next::Again));
        let mut stop = Outgoing::new("daemon.stop", json!({}));
        assert!(stop.failed(Duration::from_secs(60), stopping()).is_err());
    }

    #[test]
    fn pauses_grow_to_a_second_and_stop_at_the_deadline() {
        let mut r = Reconnect::new(
            Instant::now() + Duration::from_secs(60),
            ClientError::Io(io::Error::other("lost")),
        );
        let pauses: Vec<_> = (0..8).filter_map(|_| r.pause().ok()).collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert_eq!(pauses[7], LONGEST_PAUSE);
        let mut done = Reconnect::new(Instant::now(), ClientError::Io(io::Error::other("lost")));
        assert!(matches!(done.pause(), Err(ClientError::Io(_))));
    }
}
