//! `grove mcp`: an MCP server on stdio (the official Rust SDK, rmcp) so that an AI
//! parent agent can fan work out to grove agents. Every tool is one call of the socket
//! protocol (docs/protocol.md); the daemon starts by itself if it is not running.

use crate::connect::{connect, dirs};
use anyhow::{Context, Result};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run() -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let cwd = std::env::current_dir().context("reading the current directory")?;
        let service = GroveTools::new(cwd)
            .serve(rmcp::transport::stdio())
            .await
            .context("starting the MCP server on stdio")?;
        service.waiting().await.context("serving MCP")?;
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(Clone)]
struct GroveTools {
    /// Where spawned agents go when the caller names no repository.
    default_repo: PathBuf,
    #[allow(dead_code)] // read by the code #[tool_handler] generates
    tool_router: ToolRouter<Self>,
}

/// Calls one protocol method on a blocking thread; errors become a tool error the
/// model can read, not a protocol failure.
async fn rpc(method: &'static str, params: Value) -> Result<CallToolResult, ErrorData> {
    let answer = tokio::task::spawn_blocking(move || -> Result<Value> {
        let mut client = connect(&dirs()?)?;
        let response = client.call_raw(method, params)?;
        match response.error {
            Some(error) => Err(anyhow::anyhow!("{} (code {})", error.message, error.code)),
            None => Ok(response.result.unwrap_or(Value::Null)),
        }
    })
    .await
    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    Ok(match answer {
        Ok(value) => CallToolResult::success(vec![ContentBlock::text(
            serde_json::to_string_pretty(&value).unwrap_or_default(),
        )]),
        Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("grove: {e:#}"))]),
    })
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SpawnRequest {
    #[schemars(
        description = "The command to run, as argv: e.g. [\"claude\", \"-p\", \"fix the failing test in src/lib.rs\"] or [\"sh\", \"-c\", \"make test\"]."
    )]
    argv: Vec<String>,
    #[schemars(
        description = "Path of the git repository (default: the directory grove mcp runs in)."
    )]
    repo: Option<String>,
    #[schemars(description = "Short name; the branch becomes grove/<name>-<id>.")]
    name: Option<String>,
    #[schemars(
        description = "Branch, tag or commit to start from (default: the repository's current HEAD)."
    )]
    base: Option<String>,
    #[schemars(
        description = "Session to join (agents of one session share state); created on first use."
    )]
    session: Option<String>,
    #[schemars(description = "Stop the agent after this many seconds.")]
    timeout_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ListRequest {
    #[schemars(description = "Include finished agents too (default: only live ones).")]
    all: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct IdRequest {
    #[schemars(description = "Agent id, or any unique prefix of it.")]
    id: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct WaitRequest {
    #[schemars(description = "Agent ids (or unique prefixes) to wait for.")]
    ids: Vec<String>,
    #[schemars(
        description = "\"all\" (default): return when every agent has finished; \"any\": as soon as one has."
    )]
    mode: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct LogsRequest {
    #[schemars(description = "Agent id, or any unique prefix of it.")]
    id: String,
    #[schemars(
        description = "Byte offset to read from (default 0; use next_offset from the previous call to continue)."
    )]
    offset: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct DiffRequest {
    #[schemars(description = "Agent id, or any unique prefix of it.")]
    id: String,
    #[schemars(description = "Only the summary of changed files (git diff --stat).")]
    stat: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct StateGetRequest {
    #[schemars(description = "The session.")]
    session: String,
    #[schemars(
        description = "Read the state as it was right after this checkpoint (default: now)."
    )]
    at: Option<u64>,
    #[schemars(description = "Only this channel.")]
    channel: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct StateWrite {
    #[schemars(description = "A channel declared in the session's schema.")]
    channel: String,
    #[schemars(
        description = "The delta to apply (e.g. [\"item\"] for append, 1 for add, any JSON for overwrite)."
    )]
    value: Value,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct StateUpdateRequest {
    #[schemars(description = "The session.")]
    session: String,
    #[schemars(description = "The writes of one atomic batch, applied in order.")]
    writes: Vec<StateWrite>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct StateHistoryRequest {
    #[schemars(description = "The session.")]
    session: String,
    #[schemars(description = "How many of the newest checkpoints (default 20).")]
    limit: Option<u32>,
}

#[tool_router]
impl GroveTools {
    fn new(default_repo: PathBuf) -> Self {
        GroveTools {
            default_repo,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Start a coding agent: runs `argv` as its own process in a fresh git worktree on a new branch (grove/<id>), and returns at once with the agent's record (id, branch, status). Use it to fan work out in parallel; then call wait_agents. The agent's work comes back as commits on its branch."
    )]
    async fn spawn_agent(
        &self,
        Parameters(r): Parameters<SpawnRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let repo = r
            .repo
            .map(PathBuf::from)
            .unwrap_or_else(|| self.default_repo.clone());
        let repo = if repo.is_absolute() {
            repo
        } else {
            self.default_repo.join(repo)
        };
        rpc(
            "agent.spawn",
            json!({
                "argv": r.argv, "repo": repo, "name": r.name, "base": r.base,
                "session": r.session, "timeout_ms": r.timeout_seconds.map(|s| s * 1000),
                // The agent runs with this server's environment, as with `grove spawn`.
                "caller_env": super::spawn::caller_env(),
            }),
        )
        .await
    }

    #[tool(
        description = "List agents with their id, status, branch and result. By default only live ones (queued, running); set all=true to include finished agents."
    )]
    async fn list_agents(
        &self,
        Parameters(r): Parameters<ListRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc("agent.list", json!({ "all": r.all.unwrap_or(false) })).await
    }

    #[tool(
        description = "Everything grove knows about one agent: status, command, branch, head commit, files changed, insertions, deletions, exit code, its report, log path."
    )]
    async fn agent_status(
        &self,
        Parameters(r): Parameters<IdRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc("agent.get", json!({ "id": r.id })).await
    }

    #[tool(
        description = "Block until the given agents have finished (mode \"all\", the default) or until one has (mode \"any\"), then return each finished agent's result: outcome, branch, head commit, diffstat and report."
    )]
    async fn wait_agents(
        &self,
        Parameters(r): Parameters<WaitRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc(
            "agent.wait",
            json!({ "ids": r.ids, "mode": r.mode.unwrap_or_else(|| "all".into()) }),
        )
        .await
    }

    #[tool(
        description = "Read an agent's output (stdout and stderr), from a byte offset. Returns text, next_offset, and complete=true once the agent has ended and everything was read."
    )]
    async fn agent_logs(
        &self,
        Parameters(r): Parameters<LogsRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc(
            "agent.logs",
            json!({ "id": r.id, "offset": r.offset.unwrap_or(0) }),
        )
        .await
    }

    #[tool(
        description = "The agent's work as a git diff of its branch against where it started (git diff <base>...<branch>). Set stat=true for just the list of changed files. Use it to review before merging."
    )]
    async fn agent_diff(
        &self,
        Parameters(r): Parameters<DiffRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc(
            "agent.diff",
            json!({ "id": r.id, "stat": r.stat.unwrap_or(false) }),
        )
        .await
    }

    #[tool(
        description = "Stop an agent: SIGTERM to its whole process tree, SIGKILL after a grace period; agents it spawned stop too. Its work so far is kept on its branch."
    )]
    async fn kill_agent(
        &self,
        Parameters(r): Parameters<IdRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc("agent.kill", json!({ "id": r.id })).await
    }

    #[tool(
        description = "Read a session's shared state (the JSON object its agents write to), now or as it was at a checkpoint, or one channel of it."
    )]
    async fn state_get(
        &self,
        Parameters(r): Parameters<StateGetRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc(
            "state.get",
            json!({ "session": r.session, "at": r.at, "channel": r.channel }),
        )
        .await
    }

    #[tool(
        description = "Apply one atomic batch of writes to a session's shared state. Each channel merges writes with its declared reducer (append, add, union, merge, max, min, overwrite), so send deltas, not totals. Returns the checkpoint created; it is durable when this returns."
    )]
    async fn state_update(
        &self,
        Parameters(r): Parameters<StateUpdateRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let writes: Vec<Value> = r
            .writes
            .into_iter()
            .map(|w| json!({ "channel": w.channel, "value": w.value }))
            .collect();
        rpc(
            "state.update",
            json!({ "session": r.session, "writes": writes }),
        )
        .await
    }

    #[tool(
        description = "List a session's checkpoints, newest first: id, time, writer (agent id or user), and the channels each batch wrote."
    )]
    async fn state_history(
        &self,
        Parameters(r): Parameters<StateHistoryRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        rpc(
            "state.history",
            json!({ "session": r.session, "limit": r.limit.unwrap_or(20) }),
        )
        .await
    }
}

#[tool_handler]
impl ServerHandler for GroveTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("grove", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "grove runs coding agents in parallel, each in its own git worktree and branch. \
                 spawn_agent to start work, wait_agents to collect results, agent_diff to review, \
                 state_* to share structured results between agents of one session.",
            )
    }
}
