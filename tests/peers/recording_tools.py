"""A Python SDK MCPServer for the approval suites, over stdio: every call of `publish` and
`delete` is appended to the file named by its first argument (one JSON line: tool and
arguments) before it answers, so a test reads exactly which calls the server saw."""
import json
import sys

from mcp.server.mcpserver import MCPServer

RECORD = sys.argv[1]
server = MCPServer("antler-recording-tools")


def record(tool: str, args: dict) -> None:
    with open(RECORD, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "args": args}) + "\n")


@server.tool()
def publish(text: str) -> str:
    """Publish `text`."""
    record("publish", {"text": text})
    return f"published {text}"


@server.tool()
def delete(name: str) -> str:
    """Delete `name`."""
    record("delete", {"name": name})
    return f"deleted {name}"


if __name__ == "__main__":
    server.run()
