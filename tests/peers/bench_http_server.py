"""The OAuth-on peer of Antler's MCP benchmark: a Python SDK MCPServer over streamable HTTP
at `/mcp` with one tool, `echo` (server-everything's: `message` back), that answers 401
(`WWW-Authenticate: Bearer`) to any request without `Authorization: Bearer TOKEN`; beside
it, a client_credentials token endpoint at `/token` that gives TOKEN (expires in an hour)
to CLIENT_ID/CLIENT_SECRET, and `/stats`, the number of token requests and of 401s so far.
Usage: bench_http_server.py PORT TOKEN CLIENT_ID CLIENT_SECRET"""
import base64
import json
import sys
from urllib.parse import parse_qs

import uvicorn
from mcp.server.mcpserver import MCPServer

port, token, client_id, client_secret = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
COUNTS = {"token_requests": 0, "unauthorized": 0}

server = MCPServer("antler-bench-echo")


@server.tool()
def echo(message: str) -> str:
    """Echo `message` back."""
    return f"Echo: {message}"


mcp_app = server.streamable_http_app()


async def respond(send, status, body, headers=()):
    data = json.dumps(body).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), *headers],
    })
    await send({"type": "http.response.body", "body": data})


async def read_body(receive):
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def client_of(scope, form):
    """The (client id, secret) of a token request: HTTP Basic, else the form's."""
    for name, value in scope["headers"]:
        if name == b"authorization" and value.lower().startswith(b"basic "):
            user, _, secret = base64.b64decode(value[6:]).decode().partition(":")
            return user, secret
    return form.get("client_id", [""])[0], form.get("client_secret", [""])[0]


async def app(scope, receive, send):
    if scope["type"] != "http":
        return await mcp_app(scope, receive, send)
    path = scope["path"]
    if path == "/token":
        COUNTS["token_requests"] += 1
        form = parse_qs((await read_body(receive)).decode())
        if form.get("grant_type", [""])[0] != "client_credentials" or client_of(scope, form) != (client_id, client_secret):
            return await respond(send, 401, {"error": "invalid_client"})
        return await respond(send, 200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600})
    if path == "/stats":
        return await respond(send, 200, COUNTS)
    authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
    if authorization != f"Bearer {token}":
        COUNTS["unauthorized"] += 1
        return await respond(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", b'Bearer error="invalid_token"')])
    return await mcp_app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
