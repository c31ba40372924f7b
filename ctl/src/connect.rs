//! Reaching the daemon, starting it first when nothing answers.
//!
//! Racing `grove` commands serialize on a start lock: the first starts the daemon and
//! waits until it says it is ready; the others wait on the lock, then find it running.

use crate::exit::DAMAGED;
use anyhow::{anyhow, Context, Result};
use grove_proto::client::Revive;
use grove_proto::methods::{AgentList, List, ListParams, Method};
use grove_proto::paths::Dirs;
use grove_proto::types::AgentRecord;
use grove_proto::{AsyncClient, Client, ClientError, Envelope};
use nix::fcntl::{Flock, FlockArg};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fs::{DirBuilder, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The line a daemon started with GROVE_NOTIFY_READY prints once it serves.
pub const READY_LINE: &str = "grove-daemon-ready";

const START_TIMEOUT: Duration = Duration::from_secs(30);

pub fn dirs() -> Result<Dirs> {
    Ok(Dirs::from_env()?)
}

/// Connects to a running daemon without starting one.
pub fn connect_existing(dirs: &Dirs) -> std::result::Result<Client, ClientError> {
    Client::connect(&dirs.socket)
}

/// Connects, starting the daemon when none answers. The `hello` goes out with the
/// first call rather than on its own (one round trip less for every command). A
/// connection lost later (the daemon restarting, or killed) is replaced for up to
/// `GROVE_RETRY_FOR` seconds, starting a daemon when none answers, and the call in
/// flight is sent again with its idempotency key (docs/protocol.md).
pub fn connect(dirs: &Dirs) -> Result<Client> {
    if let Some(agent) = crate::inside_agent::agent() {
        return match Client::connect_waiting(&dirs.socket) {
            Err(e @ ClientError::Unreachable { .. }) => Err(anyhow::Error::from(e)
                .context(crate::inside_agent::no_daemon_for_agent(dirs, &agent))),
            other => Ok(other?),
        };
    }
    let client = match Client::connect_pipelined(&dirs.socket) {
        Ok(client) => client,
        Err(ClientError::Unreachable { .. }) => start_and_connect(dirs)?,
        Err(e) => return Err(e.into()),
    };
    Ok(client.revive_with(revive(dirs)))
}

/// As [`connect`], for async callers (`grove mcp`). Starting a daemon waits for it, so
/// it runs on a blocking thread.
pub async fn connect_async(dirs: &Dirs) -> Result<AsyncClient> {
    if let Some(agent) = crate::inside_agent::agent() {
        return match AsyncClient::connect_waiting(&dirs.socket).await {
            Err(e @ ClientError::Unreachable { .. }) => Err(anyhow::Error::from(e)
                .context(crate::inside_agent::no_daemon_for_agent(dirs, &agent))),
            other => Ok(other?),
        };
    }
    let client = match AsyncClient::connect(&dirs.socket).await {
        Ok(client) => client,
        Err(ClientError::Unreachable { .. }) => {
            let for_start = dirs.clone();
            tokio::task::spawn_blocking(move || start_and_connect(&for_start).map(drop))
                .await
                .context("starting the grove daemon")??;
            AsyncClient::connect(&dirs.socket).await?
        }
        Err(e) => return Err(e.into()),
    };
    Ok(client.revive_with(revive(dirs)))
}

/// What a client does when nothing answers while it retries: start a daemon.
fn revive(dirs: &Dirs) -> Revive {
    let dirs = dirs.clone();
    Box::new(move |_| {
        start_and_connect(&dirs)
            .map(drop)
            .map_err(|e| match e.downcast::<ClientError>() {
                Ok(e @ ClientError::WontStart(_)) => e,
                Ok(e) => ClientError::Protocol(e.to_string()),
                Err(e) => ClientError::Protocol(format!("{e:#}")),
            })
    })
}

fn start_and_connect(dirs: &Dirs) -> Result<Client> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dirs.state_dir)
        .with_context(|| format!("creating {}", dirs.state_dir.display()))?;
    let lock_path = dirs.start_lock();
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    let _start_lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", lock_path.display()))?;
    // Whoever held the lock before us may have started it already.
    match connect_existing(dirs) {
        Ok(client) => return Ok(client),
        Err(ClientError::Unreachable { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    // A daemon that no longer answers but still holds its lock is stopping (its socket
    // goes first, the lock with the process): a daemon started now would find the lock
    // taken and fail, so the start waits for it to go.
    if crate::daemon_lock::lock_holder(&dirs.daemon_lock()).is_some() {
        crate::daemon_lock::wait_until_gone(&dirs.daemon_lock(), START_TIMEOUT)?;
    }
    spawn_daemon(dirs)?;
    Ok(connect_existing(dirs)?)
}

/// Starts `grove daemon run` detached and returns once it serves.
fn spawn_daemon(dirs: &Dirs) -> Result<()> {
    let exe = std::env::current_exe().context("finding the grove executable")?;
    let mut command = Command::new(exe);
    // Not only the daemon's own removal: /proc/<pid>/environ keeps what a process was
    // started with, and a lost agent's leftovers are found there by its token.
    for var in grove_proto::env::AGENT_IDENTITY_VARS {
        command.env_remove(var);
    }
    command
        .args(["daemon", "run"])
        .env("GROVE_NOTIFY_READY", "1")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from our terminal so
    // that Ctrl-C in this shell never reaches it.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
    let mut child = command.spawn().context("starting the grove daemon")?;
    let stdout = child.stdout.take().context("daemon stdout")?;
    let mut stderr = child.stderr.take().context("daemon stderr")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let ready = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.trim() == READY_LINE);
        let _ = tx.send(ready);
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(true) => Ok(()),
        Ok(false) => {
            let mut why = String::new();
            let _ = stderr.read_to_string(&mut why);
            let status = child.wait();
            // The daemon says why as any grove command does; said here once.
            let why = why.trim();
            let why = why.strip_prefix("grove: error: ").unwrap_or(why);
            let said = format!(
                "the grove daemon did not start: {why}\n(its log: {})",
                dirs.daemon_log().display()
            );
            // Damage does not pass by waiting: a retrying client stops at once.
            let damaged = status.is_ok_and(|s| s.code() == Some(i32::from(DAMAGED)));
            Err(if damaged {
                ClientError::WontStart(said).into()
            } else {
                anyhow!(said)
            })
        }
        Err(_) => Err(anyhow!(
            "the grove daemon did not become ready within {}s; see {}",
            START_TIMEOUT.as_secs(),
            dirs.daemon_log().display()
        )),
    }
}

/// Every agent the daemon lists (all pages of `agent.list`).
pub fn list_agents(client: &mut Client, all: bool) -> Result<Vec<AgentRecord>> {
    let mut agents = Vec::new();
    each_page(client, all, |line| {
        Ok(
            Envelope::<AgentList>::parse(&line, List::NAME)?.map(|page| {
                agents.extend(page.agents);
                page.next
            }),
        )
    })?;
    Ok(agents)
}

/// One page of `agent.list` with its records as the daemon wrote them.
#[derive(Deserialize)]
struct RawPage<'a> {
    #[serde(borrow)]
    agents: &'a RawValue,
    next: Option<String>,
}

/// Every agent the daemon lists, page by page: `each` gets a page's records as the
/// daemon serialized them (separated by commas, never empty), as it arrives. For
/// `--json`, which prints them as they are instead of parsing them into types and
/// serializing them again, and without holding every page at once (100,000 records
/// are 83 MiB).
pub fn list_agents_raw(
    client: &mut Client,
    all: bool,
    mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<()> {
    let mut written = Ok(());
    let mut page = |records: &[u8]| {
        if !records.is_empty() && written.is_ok() {
            written = each(records);
        }
    };
    each_page(client, all, |line| {
        if let Some((records, next)) = daemon_layout(&line) {
            page(&line[records]);
            return Ok(Some(next));
        }
        let Some(answer) = Envelope::<RawPage<'_>>::parse(&line, List::NAME)? else {
            return Ok(None);
        };
        let inner = answer
            .agents
            .get()
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .ok_or_else(|| ClientError::Protocol("agent.list: `agents` is not a list".into()))?
            .trim();
        page(inner.as_bytes());
        Ok(Some(answer.next))
    })?;
    Ok(written?)
}

/// Where the records and the `next` of an `agent.list` answer are, when the line has
/// the layout the daemon writes: `{"jsonrpc":"2.0","id":N,"result":{"agents":[...]}}`,
/// with `,"next":"ID"` after the list when more pages follow (docs/protocol.md). Then
/// the records need not be read through: checking a megabyte of JSON the daemon has
/// just serialized took a good share of a long list's time. Any other line (an error,
/// a notification, another layout) is `None` and gets parsed in full.
fn daemon_layout(line: &[u8]) -> Option<(Range<usize>, Option<String>)> {
    const NEXT: &[u8] = br#"],"next":"#;
    let rest = line.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = rest
        .get(digits..)
        .filter(|_| digits > 0)?
        .strip_prefix(br#","result":{"agents":["#)?;
    let start = line.len() - rest.len();
    let (end, next) = if line.ends_with(b"]}}") {
        (line.len() - 3, None)
    } else {
        // `next` is at the very end: the search from the back stops within a few bytes.
        let at = line.windows(NEXT.len()).rposition(|w| w == NEXT)?;
        let value = line[at + NEXT.len()..].strip_suffix(b"}}")?;
        (at, Some(serde_json::from_slice::<String>(value).ok()?))
    };
    let records = line.get(start..end)?;
    let whole_records = records.is_empty() || (records[0] == b'{' && records.ends_with(b"}"));
    whole_records.then_some((start..end, next))
}

/// Calls `agent.list` page after page. `read` parses one answer line (`None`: the line
/// was a notification) and returns where the next page starts.
fn each_page(
    client: &mut Client,
    all: bool,
    mut read: impl FnMut(Vec<u8>) -> Result<Option<Option<String>>, ClientError>,
) -> Result<()> {
    let mut after = None;
    loop {
        let params = serde_json::to_value(ListParams {
            all,
            after,
            limit: None,
        })?;
        match client.call_with(List::NAME, params, &mut read)? {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::daemon_layout;

    fn records(line: &str) -> Option<(&str, Option<String>)> {
        daemon_layout(line.as_bytes()).map(|(range, next)| (&line[range], next))
    }

    #[test]
    fn the_daemons_layout_gives_records_and_next_without_reading_them() {
        let page = r#"{"jsonrpc":"2.0","id":12,"result":{"agents":[{"argv":["]}}"]},{"id":"b"}]}}"#;
        assert_eq!(
            records(page),
            Some((r#"{"argv":["]}}"]},{"id":"b"}"#, None))
        );
        let more = r#"{"jsonrpc":"2.0","id":3,"result":{"agents":[{"id":"a"}],"next":"a\"b"}}"#;
        assert_eq!(
            records(more),
            Some((r#"{"id":"a"}"#, Some("a\"b".to_string())))
        );
        let empty = r#"{"jsonrpc":"2.0","id":2,"result":{"agents":[]}}"#;
        assert_eq!(records(empty), Some(("", None)));
    }

    #[test]
    fn any_other_line_is_left_to_the_full_parse() {
        for line in [
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","method":"agent.exited","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":"x","result":{"agents":[]}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"agents":[{"id":"a"}],"more":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"agents":[{"id":"a"}],"next":7}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"agents":[{"id":"a"}]"#,
            r#"{ "jsonrpc":"2.0","id":2,"result":{"agents":[]}}"#,
            "",
        ] {
            assert_eq!(records(line), None, "{line}");
        }
    }
}
