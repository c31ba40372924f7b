#!/usr/bin/env python3
"""Drives `grove mcp` with the official MCP Python SDK: lists the tools, spawns an
agent through them, waits for it, and reads its diff. Prints one JSON object.

    pip install mcp
    GROVE_BIN=grove python3 examples/mcp_client.py REPO
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def is_error(result):
    # The SDK renamed the field across versions.
    return getattr(result, "is_error", None) or getattr(result, "isError", False)


def text(result):
    if is_error(result):
        raise RuntimeError(result.content[0].text)
    return json.loads(result.content[0].text)


async def main(repo):
    server = StdioServerParameters(
        command=os.environ.get("GROVE_BIN", "grove"), args=["mcp"], env=dict(os.environ), cwd=repo
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = sorted(tool.name for tool in (await session.list_tools()).tools)
            spawned = text(await session.call_tool(
                "spawn_agent", {"argv": ["sh", "-c", "echo from-mcp > MCP.txt"], "name": "mcp"}))
            waited = text(await session.call_tool("wait_agents", {"ids": [spawned["id"]]}))
            diff = text(await session.call_tool("agent_diff", {"id": spawned["id"]}))
            bad = await session.call_tool("agent_status", {"id": "zzzz"})
            print(json.dumps({
                "tools": tools,
                "id": spawned["id"],
                "outcome": waited["agents"][0]["outcome"],
                "branch": waited["agents"][0]["branch"],
                "diff": diff["diff"],
                "bad_is_error": bool(is_error(bad)),
                "bad_message": bad.content[0].text,
            }))


if __name__ == "__main__":
    asyncio.run(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")))
