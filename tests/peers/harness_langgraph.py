"""A real agent harness driving Antler's tools: a LangGraph ReAct agent (langgraph's prebuilt
`create_react_agent`) whose model is langchain-openai's ChatOpenAI and whose tools are
Antler's, loaded with langchain-mcp-adapters from `antler mcp serve` over stdio. Prints one
JSON report for tests/tests/suite/mcp_serve_harness.rs.

    harness_langgraph.py MODEL_BASE_URL THREAD TASK ANTLER [ARG...]

The agent's model is the OpenAI-compatible endpoint at MODEL_BASE_URL (the suite's
replaying stand-in, which scripts the tool calls). The client starts ANTLER ARG...
(`antler mcp serve ...`) and holds one MCP session for the whole run, so every call works
in one thread's sandbox: the session's first request (a `tools/list` naming THREAD in
`_meta` `antler/thread`) binds it, then the adapters load the tools and the agent runs
TASK. Runs on langchain-mcp-adapters' own Python environment (tests/.venv-harness: the
adapters need the MCP SDK 1.x, the suites' driver is on 2.x; see tests/requirements.txt).
Nothing is asserted here: the report says what the agent saw and answered.
"""

import asyncio
import json
import sys
import warnings

import mcp.types as types
from langchain_core.messages import AIMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

# LangGraph 1.x points to langchain's create_agent; langgraph's own prebuilt agent is the
# harness here.
warnings.filterwarnings("ignore", message="create_react_agent has been moved")
# More than the scripted calls need, so a model that loops ends the run with an error.
RECURSION_LIMIT = 16


def text_of(content):
    """A message's content as text (the adapters give a tool's result as content blocks)."""
    if isinstance(content, str):
        return content
    return "\n".join(
        block.get("text", "") if isinstance(block, dict) else str(block) for block in content
    )


async def main(base_url, thread, task, command, args):
    client = MultiServerMCPClient(
        {"antler": {"transport": "stdio", "command": command, "args": args}}
    )
    async with client.session("antler") as session:
        bound = await session.list_tools(
            params=types.PaginatedRequestParams(_meta={"antler/thread": thread})
        )
        tools = await load_mcp_tools(session, server_name="antler")
        model = ChatOpenAI(
            model="scripted",
            base_url=base_url,
            api_key="sk-scripted",
            streaming=True,
            max_retries=0,
        )
        agent = create_react_agent(model, tools)
        result = await agent.ainvoke(
            {"messages": [("user", task)]}, {"recursion_limit": RECURSION_LIMIT}
        )
    messages = result["messages"]
    return {
        "listed": sorted(t.name for t in bound.tools),
        "tools": sorted(t.name for t in tools),
        "calls": [
            {"name": c["name"], "args": c["args"]}
            for m in messages
            if isinstance(m, AIMessage)
            for c in m.tool_calls
        ],
        "results": [
            {"name": m.name, "status": m.status, "text": text_of(m.content)}
            for m in messages
            if isinstance(m, ToolMessage)
        ],
        "answer": text_of(messages[-1].content),
    }


if __name__ == "__main__":
    base_url, thread, task, command, *args = sys.argv[1:]
    print(json.dumps(asyncio.run(main(base_url, thread, task, command, args))))
