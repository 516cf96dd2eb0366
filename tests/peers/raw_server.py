"""A deliberately misbehaving MCP server over stdio, speaking raw newline-delimited JSON-RPC.

Usage: raw_server.py MODE
  paged          tools/list in three pages (tools a1..a3, b1..b3, c1..c3)
  repeat-cursor  tools/list whose second page points back at the same cursor forever
  bad-names      tools named "ok_tool", "bad name", "<script>" and "md`x`"
  silent         never answers initialize (reads and ignores everything)
  deaf-to-discover  never answers server/discover; one tool, `echo`
  malformed      answers initialize, then writes garbage lines before each reply
  crash-on-call  exits with status 3 when a tool is called
  answer:VERSION answers initialize with VERSION whatever the client proposed; its tool
                 `initialize` returns the client's initialize params as JSON
  audio          its tool `speak` returns a text and an audio block (4 bytes of WAV)
  elicit         its tool `ask` sends elicitation/create (name and age, with defaults, name
                 required) and returns the client's answer as JSON
"""
import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "paged"
ANSWER = MODE.split(":", 1)[1] if MODE.startswith("answer:") else None
INIT_PARAMS = {}
# The tools/call waiting for the client's answer to an elicitation, by request id.
ELICITING = {}


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def tool(name):
    return {"name": name, "description": f"tool {name}", "inputSchema": {"type": "object", "properties": {}}}


PAGES = {None: (["a1", "a2", "a3"], "p2"), "p2": (["b1", "b2", "b3"], "p3"), "p3": (["c1", "c2", "c3"], None)}


def list_tools(params):
    cursor = (params or {}).get("cursor")
    if MODE == "paged":
        names, nxt = PAGES.get(cursor, ([], None))
    elif MODE == "repeat-cursor":
        names, nxt = (["r1"], "again") if cursor is None else (["r2"], "again")
    elif MODE == "bad-names":
        names, nxt = ["ok_tool", "bad name", "<script>", "md`x`"], None
    elif ANSWER:
        names, nxt = ["initialize"], None
    elif MODE == "audio":
        names, nxt = ["speak"], None
    elif MODE == "elicit":
        names, nxt = ["ask"], None
    else:
        names, nxt = ["echo"], None
    result = {"tools": [tool(n) for n in names]}
    if nxt:
        result["nextCursor"] = nxt
    return result


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if "method" not in msg and msg.get("id") in ELICITING:
        call = ELICITING.pop(msg["id"])
        answer = msg.get("result", msg.get("error"))
        send({"jsonrpc": "2.0", "id": call, "result": {"content": [{"type": "text", "text": json.dumps(answer, sort_keys=True)}]}})
        continue
    if MODE == "silent" or "id" not in msg or "method" not in msg:
        continue
    if MODE == "deaf-to-discover" and msg["method"] == "server/discover":
        continue
    method, mid = msg["method"], msg["id"]
    if MODE == "malformed":
        sys.stdout.write("this is not json\n")
        sys.stdout.write('{"jsonrpc": "2.0", "id": \n')
        sys.stdout.write('{"jsonrpc": "2.0", "result": 42}\n')
        sys.stdout.flush()
    if method == "initialize":
        INIT_PARAMS = msg["params"]
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": ANSWER or msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": f"raw-{MODE}", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": list_tools(msg.get("params"))})
    elif method == "tools/call":
        if MODE == "crash-on-call":
            sys.exit(3)
        if ANSWER:
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(INIT_PARAMS)}]}})
            continue
        if MODE == "audio":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [
                {"type": "text", "text": "Listen:"},
                {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}]}})
            continue
        if MODE == "elicit":
            rid = f"elicit-{mid}"
            ELICITING[rid] = mid
            send({"jsonrpc": "2.0", "id": rid, "method": "elicitation/create", "params": {
                "mode": "form",
                "message": "Who are you?",
                "requestedSchema": {"type": "object", "properties": {
                    "name": {"type": "string", "default": "Ada"},
                    "age": {"type": "integer", "minimum": 0, "default": 36}},
                    "required": ["name"]}}})
            continue
        args = msg["params"].get("arguments") or {}
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(args)}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
