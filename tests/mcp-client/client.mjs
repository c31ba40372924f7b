// Drives `grove mcp` with the official TypeScript MCP SDK, started the way MCP hosts
// start servers: with the SDK's default environment (HOME, LOGNAME, PATH, SHELL, TERM,
// USER only). Calls every tool, sends bad arguments, and waits on an agent that
// outlives the client's request timeout. Prints one JSON object for
// tests/tests/mcp_clients.rs to check.
//
//   GROVE_MCP_NODE_MODULES=/path/to/node_modules GROVE_BIN=grove node client.mjs REPO

import { createRequire } from "node:module";
import { join } from "node:path";

const modules = process.env.GROVE_MCP_NODE_MODULES;
const require = createRequire(join(modules, "resolver.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

const repo = process.argv[2];
const transport = new StdioClientTransport({
  command: process.env.GROVE_BIN || "grove",
  args: ["mcp"],
  cwd: repo,
  stderr: "inherit",
});
const client = new Client({ name: "grove-test", version: "0.1.0" });
await client.connect(transport);

const out = {};
const failures = [];

// The SDK checks structuredContent against each tool's outputSchema.
async function call(name, args, options) {
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  if (!result.isError && result.structuredContent === undefined) {
    failures.push(`${name}: no structuredContent`);
  }
  return result;
}

async function ok(name, args, options) {
  const result = await call(name, args, options);
  if (result.isError) {
    failures.push(`${name} ${JSON.stringify(args)}: ${result.content[0].text}`);
    return {};
  }
  out.called = [...(out.called || []), name];
  return result.structuredContent;
}

async function refused(name, args) {
  try {
    const result = await call(name, args);
    return result.isError ? result.content[0].text : `accepted: ${JSON.stringify(result)}`;
  } catch (e) {
    return `protocol error: ${e.message}`;
  }
}

const tools = (await client.listTools()).tools;
out.tools = tools.map((t) => t.name).sort();
out.without_output_schema = tools.filter((t) => !t.outputSchema).map((t) => t.name);

// Bad arguments.
out.bogus = await refused("spawn_agent", { argv: ["true"], bogus: 1 });
out.empty_argv = await refused("spawn_agent", { argv: [] });
// Presets: an unknown one is named; a known one resolves to its CLI (not installed here,
// so the spawn is refused at the PATH lookup, which names the command).
out.preset_unknown = await refused("spawn_agent", { agent: "nope" });
out.preset_missing = await refused("spawn_agent", { agent: "ghost", prompt: "fix it", headless: true });
out.unknown_id = await refused("agent_status", { id: "zzzz" });
out.wrong_type = await refused("wait_agents", { ids: "notalist" });

// A session with a schema, an agent that writes a file, and the review loop.
const schema = '[state]\nversion = 1\n[state.channels]\nn = { reducer = "add", default = 0 }\n';
const first = await ok("spawn_agent", {
  argv: ["sh", "-c", 'echo from-ts > TS.txt; echo "env=$GROVE_TS_VAR"'],
  name: "ts",
  session: "ts-session",
  schema,
  env: { GROVE_TS_VAR: "passed" },
  timeout_seconds: 120,
  max_files: 1024,
  keep: false,
});
out.first_status = first.status;
const waited = await ok("wait_agents", { ids: [first.id] });
out.first_outcome = waited.agents?.[0]?.outcome;
out.first_complete = waited.complete;
out.status = (await ok("agent_status", { id: first.id })).status;
out.logs = (await ok("agent_logs", { id: first.id, offset: 0 })).text;
out.diff = (await ok("agent_diff", { id: first.id })).diff;
out.listed = (await ok("list_agents", { all: true })).agents?.map((a) => a.id);
await ok("report_agent", { id: first.id, text: "wrote TS.txt" });
out.review = await ok("review_agents", {});
out.review_one = await ok("review_agents", { id: first.id });
out.overlaps = await ok("overlaps", { hunks: true });
out.sessions = (await ok("session_list", {})).sessions?.map((s) => s.name);
out.session = (await ok("session_show", { name: "ts-session" })).name;
await ok("state_update", { session: "ts-session", writes: [{ channel: "n", value: 2 }] });
const got = await ok("state_get", { session: "ts-session" });
out.state_n = got.state?.n;
const history = await ok("state_history", { session: "ts-session", limit: 5 });
out.fork = (await ok("state_fork", {
  session: "ts-session",
  at: history.checkpoints?.[0]?.id,
  new_session: "ts-fork",
})).name;
out.merge = await ok("merge_agent", { id: first.id });

// A second agent, discarded.
const second = await ok("spawn_agent", { argv: ["sh", "-c", "echo two > TWO.txt"] });
await ok("wait_agents", { ids: [second.id] });
out.discard = await ok("discard_agent", { id: second.id });

// An agent killed while it runs.
const sleeper = await ok("spawn_agent", { argv: ["sleep", "600"] });
out.short_wait = await ok("wait_agents", { ids: [sleeper.id], timeout_s: 0.5 });
// A long wait with the SDK's default request options (a 60 s timeout, no progress
// handler): grove answers before the client gives up, with what still runs.
out.capped_wait = await ok("wait_agents", { ids: [sleeper.id], timeout_s: 120 });
await ok("kill_agent", { id: sleeper.id });
out.killed = (await ok("wait_agents", { ids: [sleeper.id] })).agents?.[0]?.outcome;

// An interactive agent: answer it through its terminal, read the answer off its screen.
const asker = await ok("spawn_agent", {
  argv: ["sh", "-c", "printf 'name? '; read n; echo \"hello $n\"; sleep 600"],
  tty: true,
});
await ok("send_input", { id: asker.id, text: "mcp" });
let screen = "";
for (let i = 0; i < 200 && !screen.includes("hello mcp"); i++) {
  screen = (await ok("read_screen", { id: asker.id })).text || "";
  await new Promise((r) => setTimeout(r, 50));
}
out.screen = screen;
await ok("kill_agent", { id: asker.id });

// An agent that asks (`grove ask`), answered here as the user.
const questioner = await ok("spawn_agent", {
  argv: ["sh", "-c", '"$GROVE_BIN" ask --choices ship,hold "ship it?"'],
  env: { GROVE_BIN: process.env.GROVE_BIN || "grove" },
});
// The parent waits for the question as it waits for an end: until "waiting".
const asking = (await ok("wait_agents", { ids: [questioner.id], until: "waiting" })).agents?.[0];
out.waited_activity = asking?.activity;
out.waited_question = asking?.question?.text;
out.answered = (await ok("answer_agent", { id: questioner.id, text: "ship" })).answer;
out.asked_outcome = (await ok("wait_agents", { ids: [questioner.id] })).agents?.[0]?.outcome;

// A wait that outlives the client's request timeout (2 s here, 60 s by default): the
// progress notifications keep the request alive.
const slow = await ok("spawn_agent", { argv: ["sleep", "5"] });
let progress = 0;
const long = await ok(
  "wait_agents",
  { ids: [slow.id] },
  { timeout: 2000, resetTimeoutOnProgress: true, onprogress: () => progress++ },
);
out.long_outcome = long.agents?.[0]?.outcome;
out.progress_notifications = progress;

out.failures = failures;
console.log(JSON.stringify(out));
await client.close();
