"""A Python SDK (2.3.0) MCPServer that serves the stateless `2026-07-28` era beside the
`initialize` one (the SDK picks the era from the client's first request): the tool `era`,
which answers with the protocol version the call arrived under and its `text`, and `grow`,
which adds a tool `grown` and tells the clients that the tool list changed (in the new era on
their `subscriptions/listen` streams).
Runs over stdio, or streamable HTTP at `/mcp` with `--http PORT`.
The SDK refuses server-initiated requests (elicitation, roots) in the new era."""
import json
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("antler-stateless-tools")


@server.tool()
def era(text: str, ctx: Context) -> str:
    """The protocol version this call arrived under, and `text` back, as JSON."""
    return json.dumps({"protocol_version": ctx.protocol_version, "text": text})


def grown() -> str:
    """A tool added while the server runs."""
    return "grown"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `grown` and says the tool list changed."""
    server.add_tool(grown)
    await ctx.notify_tools_changed()
    return "grew"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
