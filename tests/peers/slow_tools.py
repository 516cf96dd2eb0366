"""A Python SDK MCPServer for the Antler suites: `sleep` (for calls in flight and timeouts),
`fail` (an isError result), `echo`. Runs over stdio, or streamable HTTP with `--http PORT`."""
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("antler-slow-tools")
# Sleeps the client cancelled (notifications/cancelled), by their `seconds`.
CANCELLED: list[float] = []


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep for `seconds`, then say how long it slept."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        CANCELLED.append(seconds)
        raise
    return f"slept {seconds}"


@server.tool()
def cancellations() -> str:
    """The `seconds` of every sleep the client cancelled, as JSON."""
    import json
    return json.dumps(CANCELLED)


@server.tool()
def fail(message: str) -> str:
    """Always fails with `message`."""
    raise ToolError(message)


@server.tool()
def echo(text: str) -> str:
    """Echo `text` back."""
    return text


@server.tool()
def pid() -> str:
    """The server's process id and start time."""
    import os
    return f"{os.getpid()} {time.time()}"


@server.tool()
def where() -> str:
    """The server's process id, working directory and TMPDIR, as JSON."""
    import json
    import os
    return json.dumps({"pid": os.getpid(), "cwd": os.getcwd(), "tmpdir": os.environ.get("TMPDIR")})


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called `name` and announce it with notifications/tools/list_changed."""

    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description=f"added at run time as {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
