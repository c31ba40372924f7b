//! A real MCP client (the official Python SDK) drives `grove mcp`. CI installs the SDK
//! into a virtualenv and points GROVE_MCP_PYTHON at its python; without it the test
//! says why it skips.

mod support;

use support::*;

#[test]
fn a_real_mcp_client_lists_tools_spawns_waits_and_reads_the_diff() {
    let Some(python) = mcp_python() else {
        return;
    };
    let g = Grove::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mcp_client.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(&g.repo)
        .envs(grove_env(&g))
        .env("GROVE_BIN", BIN)
        .output()
        .expect("python");
    let result = json_printed(&out);
    let tools = tool_names(&result);
    assert_eq!(tools, MCP_TOOLS);
    assert_eq!(result["outcome"], "succeeded");
    assert!(result["branch"]
        .as_str()
        .unwrap_or("")
        .starts_with("grove/mcp-"));
    assert!(
        result["diff"].as_str().unwrap_or("").contains("+from-mcp"),
        "{result}"
    );
    assert_eq!(result["bad_is_error"], true);
    assert!(result["bad_message"]
        .as_str()
        .unwrap_or("")
        .contains("no agent has an id starting with"));
}
