"""Drives Antler's MCP server with the official MCP Python SDK client (pinned in
tests/requirements.txt) and prints one JSON report for tests/tests/suite/mcp_serve.rs.

    mcp_serve_client.py http URL ALICE_TOKEN BOB_TOKEN THREAD
    mcp_serve_client.py stdio THREAD ANTLER [ARG...]
    mcp_serve_client.py cancel URL TOKEN THREAD STARTED_FILE COMMAND
    mcp_serve_client.py present URL TOKEN OTHER_TOKEN THREAD
    mcp_serve_client.py elicit URL TOKEN THREAD TOOL ANSWER_JSON
    mcp_serve_client.py elicit-stdio THREAD TOOL ANSWER_JSON ANTLER [ARG...]
    mcp_serve_client.py call URL TOKEN THREAD TOOL ARGS_JSON
    mcp_serve_client.py calls URL TOKEN THREAD CALLS_JSON
    mcp_serve_client.py task URL TOKEN THREAD ARGS_JSON
    mcp_serve_client.py task-cancel URL TOKEN THREAD STARTED_FILE ARGS_JSON
    mcp_serve_client.py task-elicit URL TOKEN THREAD ARGS_JSON ANSWER_JSON
    mcp_serve_client.py reopen URL TOKEN THREAD ROUNDS
    mcp_serve_client.py hold URL TOKEN THREAD READY_FILE

In `cancel`, the session calls bash with COMMAND (which writes STARTED_FILE, a path on
this machine, once it runs, then sleeps), cancels the call once STARTED_FILE exists
(the SDK sends `notifications/cancelled`), then calls bash again.

In `elicit`, the session calls TOOL (no arguments) and answers each elicitation the
server forwards with ANSWER_JSON (`{"action": ..., "content": ...}`); the report has what
was asked and the call's result. `elicit-stdio` does the same over stdio, starting
ANTLER ARG... (`antler mcp serve ...`).

In `calls`, the session makes each call of CALLS_JSON (`[[TOOL, ARGS], ...]`) in turn; the
report has each result's text and its content items (type, MIME type, data).

In `task`, the session calls `task` with ARGS_JSON and a progress callback (the SDK sends
`_meta.progressToken`); the report has the progress notifications and the result. In
`task-cancel`, it cancels that call once STARTED_FILE (a path on this machine) exists,
then calls bash. In `task-elicit`, it answers each elicitation the server forwards with
ANSWER_JSON, as `elicit` does.

In `reopen`, ROUNDS sessions one after the other work on THREAD: each calls bash once
and closes (the SDK sends `DELETE`), and the next one opens right away; the report has
each round's result (or the error it got) and the statuses of the thread's runs read
right after the round's session closed. In `hold`, the session calls bash on THREAD,
writes READY_FILE (a path on this machine) and then waits without closing, until it is
killed.

In `present`, TOKEN's session writes a text and a binary file in its thread's outputs with
bash, presents them (`present_files`, and waits for
`notifications/resources/list_changed`), lists its resources and reads each link back;
OTHER_TOKEN's session on a thread of the same name lists its resources and tries to read
the first one's links.

Alice's session works on THREAD (named in `_meta` `antler/thread`): it lists its tools,
promotes a deferred MCP tool with `tool_search` (and waits for
`notifications/tools/list_changed`), lists again, calls the promoted tool, and writes a file
with bash in the thread's sandbox that a second call reads. Bob's session names the same
thread id (his own thread of that name) and tries to read Alice's file. Over stdio the
client starts ANTLER ARG... (`antler mcp serve ...`) and, on THREAD, lists its tools and
writes then reads a file with bash. Nothing is asserted here: the report says what the
client saw.
"""

import asyncio
import contextlib
import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
import mcp.types as types

NOTE = "/mnt/user-data/workspace/note.txt"
# How long a notification may take to arrive before the report says it did not.
NOTIFICATION_WAIT_S = 30


@contextlib.asynccontextmanager
async def http_session(url, token, **session_args):
    """An initialized session over streamable HTTP with TOKEN; closed (DELETE) on exit."""
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write, **session_args) as session:
                await session.initialize()
                yield session


def text_of(result):
    return {
        "is_error": bool(result.is_error),
        "text": "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text"),
    }


async def alice(url, token, thread):
    report = {}
    changed = anyio.Event()

    async def on_message(message):
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    meta = {"antler/thread": thread}
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                report["protocol_version"] = init.protocol_version
                report["server_name"] = init.server_info.name
                report["list_changed_capability"] = bool(
                    init.capabilities.tools and init.capabilities.tools.list_changed
                )
                # The first request binds the session's thread.
                before = await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
                report["tools_before"] = sorted(t.name for t in before.tools)
                early = await session.call_tool(
                    "everything_echo", {"message": "too early"}, meta=meta
                )
                report["echo_before"] = text_of(early)
                denied = await session.call_tool(
                    "write_file",
                    {"description": "denied", "path": NOTE, "content": "x"},
                    meta=meta,
                )
                report["denied"] = text_of(denied)
                found = await session.call_tool(
                    "tool_search", {"query": "select:everything_echo"}, meta=meta
                )
                report["tool_search"] = text_of(found)
                with anyio.move_on_after(NOTIFICATION_WAIT_S):
                    await changed.wait()
                report["list_changed"] = changed.is_set()
                after = await session.list_tools()
                report["tools_after"] = sorted(t.name for t in after.tools)
                echo = await session.call_tool(
                    "everything_echo", {"message": "hello antler"}, meta=meta
                )
                report["echo"] = text_of(echo)
                wrote = await session.call_tool(
                    "bash",
                    {"description": "write a note", "command": f"echo from-alice > {NOTE} && echo written"},
                    meta=meta,
                )
                report["bash"] = text_of(wrote)
                read_back = await session.call_tool(
                    "read_file", {"description": "read the note", "path": NOTE}, meta=meta
                )
                report["read_back"] = text_of(read_back)
                try:
                    other = await session.call_tool(
                        "ls", {"description": "list", "path": "/mnt/user-data/workspace"},
                        meta={"antler/thread": thread + "-other"},
                    )
                    report["other_thread"] = text_of(other)
                except Exception as refused:  # the MCP error the server answered
                    report["other_thread"] = {"is_error": True, "text": str(refused)}
    return report


async def bob(url, token, thread):
    report = {}
    meta = {"antler/thread": thread}
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
                report["tools"] = sorted(t.name for t in tools.tools)
                read = await session.call_tool(
                    "read_file", {"description": "read alice's note", "path": NOTE}, meta=meta
                )
                report["read_alices_note"] = text_of(read)
                listed = await session.call_tool(
                    "bash",
                    {"description": "look", "command": "cat /mnt/user-data/workspace/note.txt; ls -a /mnt/user-data/workspace"},
                    meta=meta,
                )
                report["bash"] = text_of(listed)
    return report


async def over_stdio(thread, command, args):
    report = {}
    meta = {"antler/thread": thread}
    # The server sees Antler's settings of this environment (its sandbox base directory).
    env = {k: v for k, v in os.environ.items() if k.startswith("ANTLER_")}
    server = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["server_name"] = init.server_info.name
            tools = await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
            report["tools"] = sorted(t.name for t in tools.tools)
            wrote = await session.call_tool(
                "bash",
                {"description": "write a note", "command": f"echo over-stdio > {NOTE} && echo written"},
                meta=meta,
            )
            report["bash"] = text_of(wrote)
            read_back = await session.call_tool(
                "read_file", {"description": "read the note", "path": NOTE}, meta=meta
            )
            report["read_back"] = text_of(read_back)
    return report


async def cancel(url, token, thread, started_file, command):
    report = {}
    meta = {"antler/thread": thread}
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                report["cancelled_result"] = None
                async with anyio.create_task_group() as group:

                    async def long_call():
                        result = await session.call_tool(
                            "bash", {"description": "sleep", "command": command}, meta=meta
                        )
                        report["cancelled_result"] = text_of(result)

                    group.start_soon(long_call)
                    while not os.path.exists(started_file):
                        await anyio.sleep(0.05)
                    # Cancelling the caller's scope sends notifications/cancelled.
                    group.cancel_scope.cancel()
                after = await session.call_tool(
                    "bash", {"description": "after", "command": "echo after-cancel"}, meta=meta
                )
                report["after"] = text_of(after)
    return report


def contents_of(result):
    out = []
    for c in result.contents:
        if getattr(c, "text", None) is not None:
            out.append({"uri": str(c.uri), "mime_type": c.mime_type, "text": c.text})
        else:
            out.append({"uri": str(c.uri), "mime_type": c.mime_type, "blob": c.blob})
    return out


async def present(url, token, other_token, thread):
    report = {}
    meta = {"antler/thread": thread}
    changed = anyio.Event()

    async def on_message(message):
        if getattr(message, "method", None) == "notifications/resources/list_changed":
            changed.set()

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                report["resources_capability"] = init.capabilities.resources is not None
                report["resources_list_changed_capability"] = bool(
                    init.capabilities.resources and init.capabilities.resources.list_changed
                )
                wrote = await session.call_tool(
                    "bash",
                    {
                        "description": "write outputs",
                        "command": "echo from-owner > /mnt/user-data/outputs/report.txt"
                        " && printf '\\000\\001\\377' > /mnt/user-data/outputs/data.bin && echo ok",
                    },
                    meta=meta,
                )
                report["bash"] = text_of(wrote)
                # bash presents nothing: no resources/list_changed yet.
                report["changed_before_present"] = changed.is_set()
                presented = await session.call_tool(
                    "present_files",
                    {"filepaths": ["/mnt/user-data/outputs/report.txt", "/mnt/user-data/outputs/data.bin"]},
                    meta=meta,
                )
                report["present"] = text_of(presented)
                with anyio.move_on_after(NOTIFICATION_WAIT_S):
                    await changed.wait()
                report["resources_list_changed"] = changed.is_set()
                report["links"] = [
                    {"uri": str(c.uri), "name": c.name, "mime_type": c.mime_type}
                    for c in presented.content
                    if getattr(c, "type", "") == "resource_link"
                ]
                listed = await session.list_resources()
                report["listed"] = [str(r.uri) for r in listed.resources]
                report["read"] = []
                for link in report["links"]:
                    report["read"] += contents_of(await session.read_resource(link["uri"]))
    other = {}
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {other_token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_resources(params=types.PaginatedRequestParams(_meta=meta))
                other["listed"] = [str(r.uri) for r in listed.resources]
                try:
                    got = await session.read_resource(report["links"][0]["uri"], meta=meta)
                    other["read"] = contents_of(got)
                except Exception as refused:  # the MCP error the server answered
                    other["read_error"] = str(refused)
    return {"owner": report, "other": other}


async def elicit_on(read, write, thread, tool, answer):
    report = {"asked": []}
    meta = {"antler/thread": thread}

    async def on_elicitation(context, params):
        report["asked"].append(
            {"message": params.message, "requested_schema": params.requested_schema}
        )
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))

    async with ClientSession(read, write, elicitation_callback=on_elicitation) as session:
        await session.initialize()
        tools = await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
        report["tools"] = sorted(t.name for t in tools.tools)
        report["call"] = text_of(await session.call_tool(tool, {}, meta=meta))
    return report


async def elicit(url, token, thread, tool, answer):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            return await elicit_on(read, write, thread, tool, answer)


async def elicit_stdio(thread, tool, answer, command, args):
    env = {k: v for k, v in os.environ.items() if k.startswith("ANTLER_")}
    server = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(server) as (read, write):
        return await elicit_on(read, write, thread, tool, answer)


def content_items(result):
    return [
        {
            "type": c.type,
            "mime_type": getattr(c, "mime_type", None),
            "data": getattr(c, "data", None),
        }
        for c in result.content
    ]


async def calls(url, token, thread, steps):
    report = {"calls": []}
    meta = {"antler/thread": thread}
    async with http_session(url, token) as session:
        tools = await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
        report["tools"] = sorted(t.name for t in tools.tools)
        for tool, args in steps:
            result = await session.call_tool(tool, args, meta=meta)
            report["calls"].append({**text_of(result), "content": content_items(result)})
    return report


async def task(url, token, thread, args, started_file=None, answer=None):
    report = {"progress": [], "result": None, "asked": []}
    meta = {"antler/thread": thread}

    async def on_progress(progress, total, message):
        report["progress"].append({"progress": progress, "total": total, "message": message})

    async def on_elicitation(context, params):
        report["asked"].append(
            {"message": params.message, "requested_schema": params.requested_schema}
        )
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))

    elicitation = {"elicitation_callback": on_elicitation} if answer is not None else {}
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write, **elicitation) as session:
                await session.initialize()
                tools = await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
                report["tools"] = sorted(t.name for t in tools.tools)
                async with anyio.create_task_group() as group:

                    async def task_call():
                        result = await session.call_tool(
                            "task", args, progress_callback=on_progress, meta=meta
                        )
                        report["result"] = text_of(result)

                    group.start_soon(task_call)
                    if started_file is not None:
                        while not os.path.exists(started_file):
                            await anyio.sleep(0.05)
                        # Cancelling the caller's scope sends notifications/cancelled.
                        group.cancel_scope.cancel()
                if started_file is not None:
                    after = await session.call_tool(
                        "bash", {"description": "after", "command": "echo after-cancel"}, meta=meta
                    )
                    report["after"] = text_of(after)
    return report


async def call(url, token, thread, tool, args):
    report = {}
    meta = {"antler/thread": thread}
    async with http_session(url, token) as session:
        tools = await session.list_tools(params=types.PaginatedRequestParams(_meta=meta))
        report["tools"] = sorted(t.name for t in tools.tools)
        report["call"] = text_of(await session.call_tool(tool, args, meta=meta))
    return report


async def one_round(url, token, thread, command):
    meta = {"antler/thread": thread}
    async with http_session(url, token) as session:
        result = await session.call_tool(
            "bash", {"description": "round", "command": command}, meta=meta
        )
        return text_of(result)


async def reopen(url, token, thread, rounds):
    report = {"rounds": []}
    runs_url = url.removesuffix("/mcp") + f"/api/threads/{thread}/runs"
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        for i in range(rounds):
            try:
                done = await one_round(url, token, thread, f"echo round-{i}")
            except Exception as failed:  # the MCP error the server answered
                done = {"is_error": True, "text": repr(failed)}
            # Right after the session closed: the thread's runs as the gateway sees them.
            runs = (await client.get(runs_url)).json()
            done["run_statuses"] = [r.get("status") for r in runs]
            report["rounds"].append(done)
    return report


async def hold(url, token, thread, ready_file):
    meta = {"antler/thread": thread}
    async with http_session(url, token) as session:
        await session.call_tool("bash", {"description": "hold", "command": "echo held"}, meta=meta)
        with open(ready_file, "w") as ready:
            ready.write("ready")
        await anyio.sleep_forever()


async def main():
    if sys.argv[1] == "reopen":
        url, token, thread, rounds = sys.argv[2:6]
        print(json.dumps(await reopen(url, token, thread, int(rounds))))
        return
    if sys.argv[1] == "hold":
        url, token, thread, ready_file = sys.argv[2:6]
        await hold(url, token, thread, ready_file)
        return
    if sys.argv[1] == "calls":
        url, token, thread, steps = sys.argv[2:6]
        print(json.dumps(await calls(url, token, thread, json.loads(steps))))
        return
    if sys.argv[1] == "task":
        url, token, thread, args = sys.argv[2:6]
        print(json.dumps(await task(url, token, thread, json.loads(args))))
        return
    if sys.argv[1] == "task-elicit":
        url, token, thread, args, answer = sys.argv[2:7]
        report = await task(url, token, thread, json.loads(args), answer=json.loads(answer))
        print(json.dumps(report))
        return
    if sys.argv[1] == "task-cancel":
        url, token, thread, started_file, args = sys.argv[2:7]
        print(json.dumps(await task(url, token, thread, json.loads(args), started_file)))
        return
    if sys.argv[1] == "elicit-stdio":
        thread, tool, answer, command = sys.argv[2:6]
        report = await elicit_stdio(thread, tool, json.loads(answer), command, sys.argv[6:])
        print(json.dumps(report))
        return
    if sys.argv[1] == "call":
        url, token, thread, tool, args = sys.argv[2:7]
        print(json.dumps(await call(url, token, thread, tool, json.loads(args))))
        return
    if sys.argv[1] == "elicit":
        url, token, thread, tool, answer = sys.argv[2:7]
        print(json.dumps(await elicit(url, token, thread, tool, json.loads(answer))))
        return
    if sys.argv[1] == "present":
        url, token, other_token, thread = sys.argv[2:6]
        print(json.dumps(await present(url, token, other_token, thread)))
        return
    if sys.argv[1] == "cancel":
        url, token, thread, started_file, command = sys.argv[2:7]
        print(json.dumps(await cancel(url, token, thread, started_file, command)))
        return
    if sys.argv[1] == "stdio":
        thread, command, args = sys.argv[2], sys.argv[3], sys.argv[4:]
        print(json.dumps(await over_stdio(thread, command, args)))
        return
    _, url, alice_token, bob_token, thread = sys.argv[1:6]
    report = {"alice": await alice(url, alice_token, thread)}
    report["bob"] = await bob(url, bob_token, thread)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
