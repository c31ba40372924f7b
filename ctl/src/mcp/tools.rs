//! The tools: their descriptions, input and output schemas, and what each one does.
//!
//! Schemas are written by hand so that strict clients take them: every property has
//! one `type` (no `["string","null"]` arrays: an optional argument is simply left out
//! of `required`), and `additionalProperties: false` says what the server enforces.

use super::{args, cli, rpc, wait, Answer, GroveTools};
use grove_proto::methods::{Diff, Empty, Get, IdParams, Kill, Method, Screen, SessionShow};
use rmcp::model::{Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{json, Map, Value};
use std::sync::Arc;

fn text(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

fn integer(description: &str) -> Value {
    json!({ "type": "integer", "minimum": 0, "description": description })
}

fn boolean(description: &str) -> Value {
    json!({ "type": "boolean", "description": description })
}

fn texts(description: &str) -> Value {
    json!({ "type": "array", "items": { "type": "string" }, "description": description })
}

const AGENT_ID: &str = "Agent id (or a unique prefix of it), or the agent's name.";

fn object(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    Arc::new(as_map(schema))
}

fn as_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// An agent record as the daemon sends it (docs/protocol.md, "Records").
fn record() -> Value {
    json!({
        "type": "object",
        "description": "An agent record: id, name, status, repo, branch, base_commit, worktree, \
                        outcome, exit_code, head_commit, files_changed, insertions, deletions, \
                        report, log_path, question (while it waits on answer_agent)...",
        "properties": {
            "id": { "type": "string" },
            "status": { "type": "string" },
            "branch": { "type": "string" },
        },
        "required": ["id", "status"],
    })
}

fn output(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    Arc::new(as_map(json!({
        "type": "object",
        "properties": properties,
        "required": required,
    })))
}

fn any_object(description: &str) -> Arc<Map<String, Value>> {
    Arc::new(as_map(
        json!({ "type": "object", "description": description }),
    ))
}

fn tool(
    name: &'static str,
    description: &'static str,
    input: Arc<Map<String, Value>>,
    output: Arc<Map<String, Value>>,
) -> Tool {
    Tool::new(name, description, input).with_raw_output_schema(output)
}

fn read_only(tool: Tool) -> Tool {
    let mut hints = ToolAnnotations::default();
    hints.read_only_hint = Some(true);
    tool.with_annotations(hints)
}

fn destructive(tool: Tool) -> Tool {
    let mut hints = ToolAnnotations::default();
    hints.destructive_hint = Some(true);
    tool.with_annotations(hints)
}

pub fn names() -> Vec<String> {
    all().into_iter().map(|t| t.name.into_owned()).collect()
}

pub fn all() -> Vec<Tool> {
    let agents = output(
        json!({ "agents": { "type": "array", "items": record() } }),
        &["agents"],
    );
    vec![
        tool(
            "spawn_agent",
            "Start a coding agent: runs `argv` (or the preset `agent` with `prompt`) as its own process in a fresh git worktree on a \
             new branch (grove/<name>-<id>), and returns at once with the agent's record (id, \
             branch, status: running, or queued when all worktree slots are taken). Use it to \
             fan work out in parallel; then call wait_agents. The agent's work comes back as \
             commits on its branch. The agent runs with this server's environment plus `env`.",
            object(
                json!({
                    "argv": { "type": "array", "items": { "type": "string" }, "minItems": 1,
                              "description": "The command to run, as argv: e.g. [\"claude\", \"-p\", \"fix the failing test\"] or [\"sh\", \"-c\", \"make test\"]." },
                    "repo": text("Path of the git repository (default: the directory grove mcp runs in)."),
                    "name": text("Short name; the branch becomes grove/<name>-<id>. Tools take it where they take an id."),
                    "base": text("Branch, tag or commit to start from, or an agent's id or name for its branch (default: the repository's current HEAD)."),
                    "session": text("Session to join (agents of one session share state); created on first use."),
                    "schema": text("State schema for a new session: TOML text with a [state] table (default: the [state] of the repository's .grove.toml)."),
                    "schema_file": text("Like schema, read from this file (relative to the repository)."),
                    "env": { "type": "object", "additionalProperties": { "type": "string" },
                             "description": "Variables to set for the agent, e.g. {\"RUST_LOG\": \"debug\"}." },
                    "env_clear": boolean("Give the agent a minimal environment: of this server's, only PATH, HOME, USER, LOGNAME, LANG, env_keep and the env_allow setting."),
                    "env_keep": texts("With env_clear, also pass on these variables."),
                    "timeout_seconds": integer("Stop the agent after this many seconds."),
                    "max_files": integer("Limit on open files (RLIMIT_NOFILE)."),
                    "max_procs": integer("Limit on processes and threads of the agent's whole tree."),
                    "memory_bytes": integer("Limit on address space in bytes (RLIMIT_AS)."),
                    "cpu_seconds": integer("Limit on CPU time in seconds (RLIMIT_CPU)."),
                    "jail": boolean("true: confine the agent's writes (Landlock) to its worktree and a private TMPDIR; false: run unjailed even where jail = true is configured (default: the configured setting)."),
                    "jail_write": texts("Let the jailed agent also write beneath these paths."),
                    "keep": boolean("Keep the worktree after the agent ends."),
                    "sparse": texts("Check out only these directories (sparse checkout), for big monorepos."),
                    "agent": text("Run this preset instead of argv: claude, codex, gemini, aider, or an [agents.NAME] of config.toml or .grove.toml (`grove agents` lists them)."),
                    "prompt": text("With agent: the task, put where the preset's command takes it."),
                    "headless": boolean("With agent: its non-interactive form (e.g. claude -p PROMPT) instead of a terminal."),
                    "tty": boolean("Give the agent a terminal of its own, for interactive agents (claude, codex, aider without their headless flags): then send_input types into it and read_screen shows it."),
                    "keep_stdin": boolean("Without tty: keep the agent's stdin open so that send_input writes to it."),
                }),
                &[],
            ),
            Arc::new(as_map(record())),
        ),
        tool(
            "send_input",
            "Type text into an agent's terminal (spawned with tty), then Enter unless \
             enter=false; or write it to the agent's open stdin (spawned with keep_stdin). Use \
             it to answer an agent that waits for input (its status is then `waiting`). Only \
             agents you spawned (or, for the user, any).",
            object(
                json!({
                    "id": text(AGENT_ID),
                    "text": text("What to type. Control keys as characters, e.g. \"\\u0003\" for Ctrl-C."),
                    "enter": boolean("Press Enter after the text (default true)."),
                }),
                &["id", "text"],
            ),
            output(
                json!({ "id": { "type": "string" }, "bytes": { "type": "integer" } }),
                &["id", "bytes"],
            ),
        ),
        read_only(tool(
            "read_screen",
            "What an agent's terminal (spawned with tty) shows now, as text: one line per row, \
             with the size and the cursor position. Read it after send_input to see the answer.",
            object(
                json!({
                    "id": text(AGENT_ID),
                    "ansi": boolean("Keep colours and attributes as escape sequences."),
                }),
                &["id"],
            ),
            output(
                json!({
                    "id": { "type": "string" },
                    "text": { "type": "string" },
                    "size": { "type": "object", "properties": {
                        "rows": { "type": "integer" }, "cols": { "type": "integer" } } },
                    "cursor": { "type": "array", "items": { "type": "integer" } },
                }),
                &["id", "text"],
            ),
        )),
        read_only(tool(
            "list_agents",
            "List agents with their id, name, status, branch and result. By default only live \
             and recent ones; set all=true to include every finished agent.",
            object(
                json!({ "all": boolean("Include collected, lost and cancelled agents too.") }),
                &[],
            ),
            agents.clone(),
        )),
        read_only(tool(
            "agent_status",
            "Everything grove knows about one agent: status, command, branch, head commit, \
             files changed, insertions, deletions, exit code, its report, log path. A running \
             agent's `activity` is `waiting` while it waits for input (then `question` holds \
             what it asks, if it asked with `grove ask`) and `working` otherwise.",
            object(json!({ "id": text(AGENT_ID) }), &["id"]),
            Arc::new(as_map(record())),
        )),
        read_only(tool(
            "wait_agents",
            "Wait until the given agents have finished (mode \"all\", the default) or until one \
             has (mode \"any\"); with until=\"waiting\", an agent that waits for input (its \
             activity is `waiting`: at a prompt, or asking a question) counts as arrived too. \
             For at most timeout_s seconds (default and most 50, under the usual 60 s \
             request timeout of MCP clients). Returns the finished agents' results in `agents` \
             (outcome, branch, head commit, diffstat, report) and the ids of those still \
             running in `still_running`: call again with those to keep waiting. Sends progress \
             notifications while waiting when the request carries a progress token.",
            object(
                json!({
                    "ids": { "type": "array", "items": { "type": "string" }, "minItems": 1,
                             "description": "Agent ids (or unique prefixes, or names) to wait for." },
                    "mode": { "type": "string", "enum": ["all", "any"],
                              "description": "\"all\" (default): until every agent has finished; \"any\": until one has." },
                    "until": { "type": "string", "enum": ["finished", "waiting"],
                               "description": "\"finished\" (default); \"waiting\": also return once an agent waits for input or asks a question (answer it with send_input or answer_agent)." },
                    "timeout_s": { "type": "number", "minimum": 0,
                                   "description": "Return after this many seconds with what has finished so far (default 50)." },
                }),
                &["ids"],
            ),
            output(
                json!({
                    "agents": { "type": "array", "items": record(),
                                "description": "The finished agents, with their results." },
                    "still_running": { "type": "array", "items": { "type": "string" },
                                       "description": "Ids of the agents not finished yet." },
                    "complete": { "type": "boolean",
                                  "description": "True when the wait is over: every agent finished (all) or one did (any)." },
                }),
                &["agents", "still_running", "complete"],
            ),
        )),
        read_only(tool(
            "agent_logs",
            "Read an agent's output (stdout and stderr) from a byte offset. Returns text, \
             next_offset, and complete=true once the agent has ended and everything was read.",
            object(
                json!({
                    "id": text(AGENT_ID),
                    "offset": integer("Byte offset to read from (default 0; pass next_offset from the previous call to continue)."),
                    "max_bytes": integer("Read at most this many bytes (default 512 KiB)."),
                }),
                &["id"],
            ),
            output(
                json!({
                    "text": { "type": "string" },
                    "next_offset": { "type": "integer" },
                    "complete": { "type": "boolean" },
                }),
                &["text", "next_offset", "complete"],
            ),
        )),
        read_only(tool(
            "agent_diff",
            "The agent's work as a git diff of its branch against where it started (git diff \
             <base>...<branch>). Set stat=true for just the list of changed files. Use it to \
             review before merging.",
            object(
                json!({
                    "id": text(AGENT_ID),
                    "stat": boolean("Only the summary of changed files (git diff --stat)."),
                    "paths": texts("Limit the diff to these paths."),
                }),
                &["id"],
            ),
            output(json!({ "diff": { "type": "string" } }), &["diff"]),
        )),
        read_only(tool(
            "review_agents",
            "Review finished agents' branches: without id, every unmerged one's outcome, \
             branch and diffstat; with id, that agent's report, commits and diffstat.",
            object(
                json!({
                    "id": text("Show this agent in detail (id, unique prefix or name)."),
                    "repo": text("The repository (default: the directory grove mcp runs in)."),
                    "all": boolean("Include branches already merged (by git, or by merge_agent with squash or rebase)."),
                }),
                &[],
            ),
            any_object("`agents` with the suggested order, or one agent's detail."),
        )),
        read_only(tool(
            "overlaps",
            "Files changed by more than one live or unmerged agent branch: the collisions \
             ahead, with the agents involved.",
            object(
                json!({
                    "hunks": boolean("Also give the changed line ranges (in the base's line numbers)."),
                    "repo": text("The repository (default: the directory grove mcp runs in)."),
                }),
                &[],
            ),
            output(json!({ "files": { "type": "array" } }), &["files"]),
        )),
        destructive(tool(
            "merge_agent",
            "Merge a finished agent's branch into the branch checked out in its repository (or \
             `into`), with git (hooks and config apply). Nothing changes on a conflict: the \
             result lists the conflicting files.",
            object(
                json!({
                    "id": text(AGENT_ID),
                    "squash": boolean("Squash the branch into one new commit on the target."),
                    "rebase": boolean("Rebase the branch onto the target, then fast-forward the target."),
                    "into": text("Merge into this branch (default: the branch checked out in the repository)."),
                    "delete": boolean("Delete the agent's branch once merged (grove's merge record keeps its tip)."),
                }),
                &["id"],
            ),
            any_object(
                "What the merge did: target branch, commits before and after, or the conflicts.",
            ),
        )),
        destructive(tool(
            "discard_agent",
            "Delete a finished agent's branch: calling this is the confirmation. Its tip stays \
             reachable at refs/grove/salvage/discarded-<id> until the retention period ends.",
            object(json!({ "id": text(AGENT_ID) }), &["id"]),
            any_object("The branch deleted and the ref that keeps its tip."),
        )),
        tool(
            "report_agent",
            "Leave or replace the short final report of an agent (as the agent itself would \
             with `grove report`).",
            object(
                json!({ "id": text(AGENT_ID), "text": text("The report (at most 64 KiB).") }),
                &["id", "text"],
            ),
            Arc::new(as_map(record())),
        ),
        tool(
            "answer_agent",
            "Answer the question an agent you spawned asks (`grove ask`; its status is then \
             `waiting` and its record's `question` holds the text and the `choices` it \
             takes). The agent gets the answer and goes on; the decision is stored in its \
             session's `decisions` channel, with you as its writer. Only the asker's parent \
             (or the user) may answer.",
            object(
                json!({
                    "id": text(AGENT_ID),
                    "text": text("The answer: one of the question's choices, when it gave some."),
                }),
                &["id", "text"],
            ),
            output(
                json!({
                    "question_id": { "type": "string" },
                    "question": { "type": "string" },
                    "answer": { "type": "string" },
                    "by": { "type": "string" },
                    "checkpoint": { "type": "integer" },
                }),
                &["question", "answer", "by", "checkpoint"],
            ),
        ),
        destructive(tool(
            "kill_agent",
            "Stop an agent: SIGTERM to its whole process tree, SIGKILL after a grace period; \
             agents it spawned stop too. Its work so far is kept on its branch.",
            object(json!({ "id": text(AGENT_ID) }), &["id"]),
            Arc::new(as_map(record())),
        )),
        read_only(tool(
            "session_list",
            "Every session (a group of agents sharing one state): channels, checkpoints, last \
             update, agents.",
            object(json!({}), &[]),
            output(json!({ "sessions": { "type": "array" } }), &["sessions"]),
        )),
        read_only(tool(
            "session_show",
            "One session: its agents and their statuses, schema, sizes.",
            object(json!({ "name": text("The session.") }), &["name"]),
            any_object("The session."),
        )),
        read_only(tool(
            "state_get",
            "Read a session's shared state (the JSON object its agents write to), now or as it \
             was at a checkpoint, or one channel of it.",
            object(
                json!({
                    "session": text("The session."),
                    "at": integer("Read the state as it was right after this checkpoint (default: now)."),
                    "migrate": boolean("Read `at`'s state carried through the migrations since, \
                        in the newest schema (default: the schema it was written under)."),
                    "channel": text("Only this channel."),
                }),
                &["session"],
            ),
            any_object("`session`, `checkpoint` and `state`."),
        )),
        tool(
            "state_update",
            "Apply one atomic batch of writes to a session's shared state. Each channel merges \
             writes with its declared reducer (append, add, union, merge, max, min, overwrite), \
             so send deltas, not totals. Returns the checkpoint created; it is durable when \
             this returns.",
            object(
                json!({
                    "session": text("The session."),
                    "writes": {
                        "type": "array", "minItems": 1,
                        "description": "The writes of one atomic batch, applied in order.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "channel": text("A channel declared in the session's schema."),
                                "value": {
                                    "description": "The delta to apply (e.g. [\"item\"] for append, 1 for add, any JSON for overwrite).",
                                    "anyOf": [
                                        { "type": "number" }, { "type": "string" }, { "type": "boolean" },
                                        { "type": "array" }, { "type": "object" }, { "type": "null" },
                                    ],
                                },
                            },
                            "required": ["channel", "value"],
                            "additionalProperties": false,
                        },
                    },
                    "base": integer("The checkpoint you last read: an overwrite of a channel changed since is refused as stale."),
                }),
                &["session", "writes"],
            ),
            any_object("`session` and `checkpoint`."),
        ),
        read_only(tool(
            "state_history",
            "List a session's checkpoints, newest first: id, time, writer (agent id or user), \
             and the channels each batch wrote.",
            object(
                json!({
                    "session": text("The session."),
                    "limit": integer("How many of the newest checkpoints (default 20)."),
                }),
                &["session"],
            ),
            any_object("`session` and `checkpoints`."),
        )),
        tool(
            "state_fork",
            "Start a new session from the state of another at one of its checkpoints (to retry \
             from a known point).",
            object(
                json!({
                    "session": text("The session to fork."),
                    "at": integer("The checkpoint to start from."),
                    "new_session": text("Name of the new session."),
                    "migrate": boolean("Give it the newest schema, the state carried \
                        through the migrations since (default: the checkpoint's schema)."),
                }),
                &["session", "at", "new_session"],
            ),
            any_object("The new session."),
        ),
    ]
}

pub async fn call(
    server: &GroveTools,
    name: &str,
    arguments: Value,
    context: RequestContext<RoleServer>,
) -> Answer {
    match name {
        "spawn_agent" => spawn(server, args::parse(name, arguments)?).await,
        "send_input" => {
            let r: args::SendInput = args::parse(name, arguments)?;
            rpc(
                "agent.send",
                json!({ "id": r.id, "text": r.text, "enter": r.enter.unwrap_or(true) }),
            )
            .await
        }
        "read_screen" => forward::<Screen>(name, arguments).await,
        "list_agents" => {
            let r: args::List = args::parse(name, arguments)?;
            rpc("agent.list", json!({ "all": r.all })).await
        }
        "agent_status" => forward::<Get>(name, arguments).await,
        "wait_agents" => wait::run(args::parse(name, arguments)?, context).await,
        "agent_logs" => {
            let r: args::Logs = args::parse(name, arguments)?;
            let mut params = json!({ "id": r.id, "offset": r.offset });
            if let Some(max) = r.max_bytes {
                params["max_bytes"] = json!(max);
            }
            rpc("agent.logs", params).await
        }
        "agent_diff" => forward::<Diff>(name, arguments).await,
        "review_agents" => {
            let r: args::Review = args::parse(name, arguments)?;
            let mut argv = vec!["review".to_string()];
            argv.extend(r.id.map(|id| dash_safe(name, id)).transpose()?);
            if r.all {
                argv.push("--all".into());
            }
            cli(server.repo(r.repo), argv).await
        }
        "overlaps" => {
            let r: args::Overlaps = args::parse(name, arguments)?;
            let mut argv = vec!["overlaps".to_string()];
            if r.hunks {
                argv.push("--hunks".into());
            }
            cli(server.repo(r.repo), argv).await
        }
        "merge_agent" => {
            let r: args::Merge = args::parse(name, arguments)?;
            if r.squash && r.rebase {
                return Err("merge_agent: squash and rebase exclude each other; pick one".into());
            }
            let mut argv = vec!["merge".to_string(), dash_safe(name, r.id)?];
            if r.squash {
                argv.push("--squash".into());
            }
            if r.rebase {
                argv.push("--rebase".into());
            }
            if let Some(into) = r.into {
                argv.push(format!("--into={into}"));
            }
            if r.delete {
                argv.push("--delete".into());
            }
            cli(server.default_repo.clone(), argv).await
        }
        "discard_agent" => {
            let r: IdParams = args::parse(name, arguments)?;
            let argv = vec!["discard".into(), "--yes".into(), dash_safe(name, r.id)?];
            cli(server.default_repo.clone(), argv).await
        }
        "report_agent" => {
            let r: args::Report = args::parse(name, arguments)?;
            rpc("agent.report", json!({ "id": r.id, "text": r.text })).await
        }
        "answer_agent" => {
            let r: args::Report = args::parse(name, arguments)?;
            // Run inside an agent (its process tree), this server answers as that agent.
            rpc("agent.answer", json!({ "id": r.id, "text": r.text })).await
        }
        "kill_agent" => forward::<Kill>(name, arguments).await,
        "session_list" => {
            let _: Empty = args::parse(name, arguments)?;
            rpc("session.list", json!({})).await
        }
        "session_show" => forward::<SessionShow>(name, arguments).await,
        "state_get" => {
            let r: args::StateGet = args::parse(name, arguments)?;
            rpc(
                "state.get",
                json!({ "session": r.session, "at": r.at, "migrate": r.migrate, "channel": r.channel }),
            )
            .await
        }
        "state_update" => {
            let r: args::StateUpdate = args::parse(name, arguments)?;
            let writes: Vec<Value> = r
                .writes
                .into_iter()
                .map(|w| match r.base {
                    Some(base) => json!({ "channel": w.channel, "value": w.value, "base": base }),
                    None => json!({ "channel": w.channel, "value": w.value }),
                })
                .collect();
            rpc(
                "state.update",
                json!({ "session": r.session, "writes": writes }),
            )
            .await
        }
        "state_history" => {
            let r: args::StateHistory = args::parse(name, arguments)?;
            rpc(
                "state.history",
                json!({ "session": r.session, "limit": r.limit.unwrap_or(20) }),
            )
            .await
        }
        "state_fork" => {
            let r: args::StateFork = args::parse(name, arguments)?;
            rpc(
                "state.fork",
                json!({
                    "session": r.session,
                    "at": r.at,
                    "new_session": r.new_session,
                    "migrate": r.migrate,
                }),
            )
            .await
        }
        other => Err(format!("there is no tool {other}")),
    }
}

/// A tool whose arguments are method `M`'s params as they are: parsed here, so that
/// unknown ones are refused before anything is sent, then sent on.
async fn forward<M: Method>(tool: &str, arguments: Value) -> Answer {
    let params: M::Params = args::parse(tool, arguments)?;
    let params = serde_json::to_value(params).map_err(|e| format!("{tool}: {e}"))?;
    rpc(M::NAME, params).await
}

/// An id passed on to the command line must not read as an option.
fn dash_safe(tool: &str, id: String) -> Result<String, String> {
    if id.starts_with('-') || id.is_empty() {
        return Err(format!("{tool}: `{id}` is not an agent id or name"));
    }
    Ok(id)
}

async fn spawn(server: &GroveTools, mut r: args::Spawn) -> Answer {
    let (mut jail_home, mut cli_files) = (Vec::new(), Vec::new());
    if let Some(name) = r.agent.take() {
        if !r.argv.is_empty() {
            return Err("spawn_agent: give argv or agent, not both".into());
        }
        let repo = server.repo(r.repo.clone());
        let preset = crate::commands::resolve_preset(&name, r.headless, r.prompt.as_deref(), &repo)
            .map_err(|e| format!("spawn_agent: {e:#}"))?;
        r.argv = preset.argv;
        jail_home = preset.jail_home;
        cli_files = preset.cli_files;
        r.tty = r.tty || (preset.tty && !r.headless);
        for (name, value) in preset.env {
            r.env.entry(name).or_insert(value);
        }
    } else if r.prompt.is_some() || r.headless {
        return Err("spawn_agent: prompt and headless go with agent (a preset)".into());
    }
    if r.argv.is_empty() || r.argv[0].is_empty() {
        return Err(
            "spawn_agent: argv is empty: give the command to run as an array of \
                    strings, e.g. [\"sh\", \"-c\", \"make test\"], or a preset as agent"
                .into(),
        );
    }
    if r.schema.is_some() && r.schema_file.is_some() {
        return Err("spawn_agent: give schema or schema_file, not both".into());
    }
    let repo = server.repo(r.repo);
    let schema = match (r.schema, r.schema_file) {
        (Some(text), _) => Some(json!({ "origin": "the schema argument", "text": text })),
        (_, Some(file)) => {
            let path = repo.join(&file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                format!(
                    "spawn_agent: cannot read schema_file {}: {e}",
                    path.display()
                )
            })?;
            Some(json!({ "origin": path.display().to_string(), "text": text }))
        }
        _ => None,
    };
    let env: Vec<Value> = r
        .env
        .into_iter()
        .map(|(name, value)| json!({ "name": name, "value": value }))
        .collect();
    let jail_write: Vec<_> = r.jail_write.iter().map(|p| repo.join(p)).collect();
    rpc(
        "agent.spawn",
        json!({
            "argv": r.argv, "repo": repo, "name": r.name, "base": r.base,
            "session": r.session, "schema": schema,
            "env": env,
            // The agent runs with this server's environment, as with `grove spawn`.
            "caller_env": crate::commands::caller_env(),
            "env_clear": r.env_clear, "env_keep": r.env_keep,
            "timeout_ms": r.timeout_seconds.map(|s| s.saturating_mul(1000)),
            "limits": {
                "max_files": r.max_files, "max_procs": r.max_procs,
                "memory_bytes": r.memory_bytes, "cpu_seconds": r.cpu_seconds,
            },
            "keep": r.keep, "sparse": r.sparse,
            "jail": r.jail, "jail_write": jail_write, "jail_home": jail_home, "cli_files": cli_files,
            "tty": r.tty, "keep_stdin": r.keep_stdin,
        }),
    )
    .await
}
