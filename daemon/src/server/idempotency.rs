//! Idempotency keys (docs/protocol.md, "Retries and idempotency"): a request that
//! changes something and carries a key gets, when the key was seen before, the first
//! answer instead of a second effect. Keys are the caller's own: one agent's key never
//! finds another's answer.

use super::connection::Conn;
use super::handlers::{self, Answer, Json};
use super::Ctx;
use grove_proto::methods::{
    self as m, Method, CHANGING_METHODS, IDEMPOTENCY_KEY, IDEMPOTENCY_RETRY,
};
use grove_proto::now_ms;
use grove_proto::{codes, RpcError};
use serde_json::Value;

const MAX_KEY_BYTES: usize = 128;

/// One lock per key in use: a retry that arrives while the first request still runs
/// (the client lost only its connection) waits for its answer.
pub type KeyLocks = crate::keyed::Keyed<tokio::sync::Mutex<()>>;

/// A request's idempotency key, and whether the client says it sends it again.
pub struct Key {
    pub key: String,
    pub retry: bool,
}

/// Takes the key (and the retry flag) out of `params` (the methods' own params do not
/// know them).
pub fn take_key(method: &str, params: &mut Option<Value>) -> Result<Option<Key>, RpcError> {
    let Some(Value::Object(map)) = params else {
        return Ok(None);
    };
    let retry = match map.remove(IDEMPOTENCY_RETRY) {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                format!("`{IDEMPOTENCY_RETRY}` of {method} is not a boolean; send true with a request sent again"),
            ))
        }
    };
    let Some(key) = map.remove(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = |why: &str| {
        RpcError::new(
            codes::INVALID_PARAMS,
            format!("`{IDEMPOTENCY_KEY}` of {method} {why}; send a string of 1 to {MAX_KEY_BYTES} bytes that is new for each request (the same only when sending that request again)"),
        )
    };
    match key {
        Value::String(key) if !key.is_empty() && key.len() <= MAX_KEY_BYTES => Ok(CHANGING_METHODS
            .contains(&method)
            .then_some(Key { key, retry })),
        Value::String(key) if key.is_empty() => Err(bad("is empty")),
        Value::String(key) => Err(bad(&format!("is {} bytes long", key.len()))),
        _ => Err(bad("is not a string")),
    }
}

/// The key as stored: scoped to the caller.
pub fn scoped(conn: &Conn, key: &str) -> String {
    match conn.agent() {
        Some(agent) => format!("agent {}:{key}", agent.id),
        None => format!("user:{key}"),
    }
}

/// Runs `method` once per key: a key seen before gets the stored answer. The key is
/// held until the answer is stored; the connection does not abort a keyed request when
/// its client leaves, so a client that sends again at once waits for the first.
pub async fn run(
    ctx: &Ctx,
    conn: &Conn,
    key: Key,
    method: &str,
    params: Option<Value>,
) -> Option<Answer> {
    let Key { key, retry } = key;
    let key = scoped(conn, &key);
    let lock = ctx.idempotency.get_pruning(&key);
    let _held = lock.lock().await;
    once(ctx, conn, key, retry, method, params).await
}

async fn once(
    ctx: &Ctx,
    conn: &Conn,
    key: String,
    retry: bool,
    method: &str,
    params: Option<Value>,
) -> Option<Answer> {
    if retry {
        match stored(ctx, &key, method).await {
            Ok(Some(answer)) => return Some(Ok(answer)),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
    }
    let conn = conn.with_key(key.clone());
    let answer = handlers::dispatch(ctx, &conn, None, method, params).await?;
    // Spawns and state updates store their key with their effect; the rest right after.
    let with_effect = [m::Spawn::NAME, m::StateUpdate::NAME].contains(&method);
    if let (Ok(json), false) = (&answer, with_effect) {
        let (key, method, text) = (key, method.to_string(), json.text());
        let saved = ctx
            .db
            .call(move |db| crate::db::idempotency::record(db, &key, &method, &text))
            .await;
        if let Err(e) = saved {
            tracing::warn!(error = %e, "cannot store an idempotency key; a retry would repeat the request");
        }
    }
    if answer.is_ok() {
        crate::faults::point("before_answer");
    }
    Some(answer)
}

/// The answer stored for `key`, if any, and if it was for `method`.
async fn stored(ctx: &Ctx, key: &str, method: &str) -> Result<Option<Json>, RpcError> {
    let owned = key.to_string();
    let found = ctx
        .db
        .call(move |db| crate::db::idempotency::find(db, &owned, now_ms()))
        .await
        .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?;
    let Some((was, answer)) = found else {
        return Ok(None);
    };
    if was != method {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            format!("this `{IDEMPOTENCY_KEY}` was sent with {was}, not {method}: choose a new key for each request"),
        ));
    }
    if method != m::Spawn::NAME {
        return Ok(Some(Json::raw(answer.into_bytes())));
    }
    // A spawn's key names its agent: the answer is that agent as the first answer
    // would have shown it (running once prepared, or queued). A key whose agent never
    // came to be (a crash in between) is no answer: spawn again.
    let agent = serde_json::from_str::<Value>(&answer)
        .ok()
        .and_then(|v| v["agent"].as_str().map(String::from))
        .unwrap_or_default();
    match ctx.core.respawn(&agent).await {
        Ok(Some(record)) => Json::of(&record).map(Some),
        Err(e) => Err(e.into()),
        Ok(None) => {
            let owned = key.to_string();
            let _ = ctx
                .db
                .call(move |db| crate::db::idempotency::forget(db, &owned))
                .await;
            Ok(None)
        }
    }
}
