"""Drives Antler's MCP server with the official MCP Python SDK client (pinned in
tests/requirements.txt) through calls an approval rule asks about, answering each
elicitation from a script, and prints one JSON report for
tests/tests/suite/mcp_serve_approvals.rs.

    mcp_serve_approvals_client.py http URL TOKEN THREAD CALLS_JSON ANSWERS_JSON
    mcp_serve_approvals_client.py stdio THREAD CALLS_JSON ANSWERS_JSON ANTLER [ARG...]

The session (on THREAD, named in `_meta` `antler/thread`) makes each call of CALLS_JSON
(`[[TOOL, ARGS], ...]`) in turn. ANSWERS_JSON is the script of answers: a list whose next
item answers each elicitation, `{"action": ..., "content": ..., "delay_s": N}` (the
client waits N seconds before it answers; no item left: it cancels; with
`"cancel_call": true` it first cancels the call that is asked about, which the SDK tells
the server with `notifications/cancelled`); `null` declares no elicitation capability at
all. Over stdio the client starts ANTLER ARG... (`antler mcp
serve ...`). The report has what the client was asked (message and schema) and each
call's result; nothing is asserted here.
"""

import asyncio
import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
import mcp.types as types


def text_of(result):
    return {
        "is_error": bool(result.is_error),
        "text": "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text"),
    }


async def session_on(read, write, thread, steps, answers):
    report = {"asked": [], "calls": []}
    meta = {"antler/thread": thread}
    script = list(answers or [])
    # Set by an answer that cancels the call in flight.
    cancel_now = {"event": anyio.Event()}

    async def on_elicitation(context, params):
        report["asked"].append(
            {"message": params.message, "requested_schema": params.requested_schema}
        )
        if not script:
            return types.ElicitResult(action="cancel")
        answer = script.pop(0)
        if answer.get("cancel_call"):
            cancel_now["event"].set()
        if answer.get("delay_s"):
            await anyio.sleep(answer["delay_s"])
        return types.ElicitResult(
            action=answer.get("action", "cancel"), content=answer.get("content")
        )

    elicitation = {"elicitation_callback": on_elicitation} if answers is not None else {}
    async with ClientSession(read, write, **elicitation) as session:
        await session.initialize()
        await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
        for tool, args in steps:
            cancel_now["event"] = anyio.Event()
            outcome = {"cancelled": True}
            async with anyio.create_task_group() as group:

                async def one_call():
                    result = await session.call_tool(tool, args, meta=meta)
                    outcome.clear()
                    outcome.update(text_of(result))
                    group.cancel_scope.cancel()

                async def cancel_when_told():
                    await cancel_now["event"].wait()
                    # Cancelling the caller's scope sends notifications/cancelled.
                    group.cancel_scope.cancel()

                group.start_soon(one_call)
                group.start_soon(cancel_when_told)
            report["calls"].append(outcome)
    return report


async def over_http(url, token, thread, steps, answers):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            return await session_on(read, write, thread, steps, answers)


async def over_stdio(thread, steps, answers, command, args):
    # The server sees Antler's settings of this environment (its sandbox base directory).
    env = {k: v for k, v in os.environ.items() if k.startswith("ANTLER_")}
    server = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(server) as (read, write):
        return await session_on(read, write, thread, steps, answers)


async def main():
    if sys.argv[1] == "http":
        url, token, thread, steps, answers = sys.argv[2:7]
        report = await over_http(url, token, thread, json.loads(steps), json.loads(answers))
    else:
        thread, steps, answers, command = sys.argv[2:6]
        report = await over_stdio(
            thread, json.loads(steps), json.loads(answers), command, sys.argv[6:]
        )
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
