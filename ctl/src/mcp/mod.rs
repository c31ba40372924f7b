//! `grove mcp`: an MCP server on stdio (the official Rust SDK, rmcp) so that an AI
//! parent agent can fan work out to grove agents and finish the job: spawn, wait,
//! review, merge or discard. Most tools are one call of the socket protocol
//! (docs/protocol.md); review, overlaps, merge and discard run this same `grove` with
//! `--json`, so that they follow exactly the rules of the command line. The daemon
//! starts by itself if it is not running.

mod args;
#[cfg(test)]
mod schema_check;
mod tools;
mod wait;

use crate::connect::{connect_async, dirs};
use anyhow::{Context, Result};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run() -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
    /// Where spawned agents go, and where review, overlaps and merge look, when the
    /// caller names no repository.
    default_repo: PathBuf,
    tools: Vec<Tool>,
}

impl GroveTools {
    fn new(default_repo: PathBuf) -> Self {
        GroveTools {
            default_repo,
            tools: tools::all(),
        }
    }

    /// A repository argument, relative to the directory `grove mcp` runs in.
    fn repo(&self, given: Option<String>) -> PathBuf {
        match given {
            Some(path) => self.default_repo.join(path),
            None => self.default_repo.clone(),
        }
    }
}

/// What a tool answers: a JSON object for `structuredContent` (and its text form),
/// or an error the model can read and act on.
type Answer = std::result::Result<Value, String>;

fn answer(result: Answer) -> CallToolResult {
    match result {
        Ok(value) => CallToolResult::structured(value),
        Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
    }
}

/// Calls one protocol method; a daemon restarting meanwhile is ridden out (the call
/// is sent again with its idempotency key, docs/protocol.md).
async fn rpc(method: &'static str, params: Value) -> Answer {
    let call = async {
        let mut client = connect_async(&dirs()?).await?;
        anyhow::Ok(client.call_raw(method, params).await?)
    };
    match call.await {
        Ok(response) => match response.error {
            Some(error) => Err(format!(
                "grove: {} (code {})",
                for_mcp(&error.message),
                error.code
            )),
            None => Ok(response.result.unwrap_or(Value::Null)),
        },
        Err(e) => Err(format!("grove: {e:#}")),
    }
}

/// The daemon's words point at commands of the command line; an MCP caller has tools.
fn for_mcp(message: &str) -> String {
    const TOOLS_FOR_COMMANDS: &[(&str, &str)] = &[
        ("`grove list --all`", "list_agents with all=true"),
        ("`grove list`", "list_agents"),
        ("`grove wait ", "`wait_agents "),
        ("`grove kill ", "`kill_agent "),
        ("`grove show ", "`agent_status "),
        ("`grove discard ", "`discard_agent "),
        ("`grove session list`", "session_list"),
    ];
    TOOLS_FOR_COMMANDS
        .iter()
        .fold(message.to_string(), |text, (command, tool)| {
            text.replace(command, tool)
        })
}

async fn blocking<F>(work: F) -> Answer
where
    F: FnOnce() -> Result<Value> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("grove: {e:#}")),
        Err(e) => Err(format!("grove: the call failed: {e}")),
    }
}

/// Runs `grove --json ARGS` in `repo`: the command line's own checks and words apply.
async fn cli(repo: PathBuf, args: Vec<String>) -> Answer {
    blocking(move || {
        let exe = std::env::current_exe().context("finding the grove executable")?;
        let out = std::process::Command::new(exe)
            .arg("--json")
            .args(&args)
            .current_dir(&repo)
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("running grove {}", args.join(" ")))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let text = text.trim();
            let text = text.strip_prefix("grove: error: ").unwrap_or(text);
            anyhow::bail!("{text}");
        }
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "grove {} printed no JSON: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout)
            )
        })
    })
    .await
}

impl ServerHandler for GroveTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("grove", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "grove runs coding agents in parallel, each in its own git worktree and branch. \
                 spawn_agent to start work, wait_agents to collect results (call it again \
                 while still_running is not empty), agent_diff and review_agents to review, \
                 merge_agent or discard_agent to finish, state_* to share structured results \
                 between agents of one session.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.get_tool(&request.name).is_none() {
            return Err(ErrorData::invalid_params(
                format!(
                    "there is no tool {}; the tools are: {}",
                    request.name,
                    tools::names().join(", ")
                ),
                None,
            ));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = tools::call(self, &request.name, arguments, context).await;
        Ok(answer(result).into())
    }
}
