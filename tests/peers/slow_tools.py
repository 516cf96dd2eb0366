"""A Python SDK MCPServer for the Antler suites: `sleep` (for calls in flight and timeouts),
`fail` (an isError result), `echo`. Runs over stdio, or streamable HTTP with `--http PORT`."""
import sys
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("antler-slow-tools")


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep for `seconds`, then say how long it slept."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


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


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
