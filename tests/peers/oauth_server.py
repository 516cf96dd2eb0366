"""A Python SDK MCPServer over streamable HTTP that accepts only JWTs from the test issuer,
verified against its JWKS, carrying every scope of SCOPES (space-separated; default
`mcp`). No token is a 401; a token with too few scopes is 403 `insufficient_scope`, whose
challenge names the scopes needed (`scope="..."`, as the MCP authorization spec asks of a
server; the SDK's own challenge leaves it out). Its one tool, `whoami`, answers the
token's client id, followed by its scopes when SCOPES is given.
Usage: oauth_server.py PORT ISSUER_PORT [SCOPES]"""
import sys

import jwt
import uvicorn
from jwt import PyJWKClient
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

port, issuer_port = int(sys.argv[1]), int(sys.argv[2])
scopes = sys.argv[3].split() if len(sys.argv) > 3 else ["mcp"]
name_scopes = len(sys.argv) > 3
jwks = PyJWKClient(f"http://127.0.0.1:{issuer_port}/jwks")


class JwksVerifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=["RS256"], options={"verify_aud": False})
        except Exception:
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope") or "").split(),
            expires_at=claims.get("exp"),
        )


server = MCPServer(
    "antler-secure",
    token_verifier=JwksVerifier(),
    auth=AuthSettings(
        issuer_url=f"http://127.0.0.1:{issuer_port}",
        resource_server_url=f"http://127.0.0.1:{port}/mcp",
        required_scopes=scopes,
    ),
)


@server.tool()
def whoami() -> str:
    """The client id of the token this call came with (and its scopes, with SCOPES)."""
    token = get_access_token()
    if not token:
        return "nobody"
    return f"{token.client_id} {' '.join(token.scopes)}" if name_scopes else token.client_id


def with_scope_challenge(app):
    """Adds `scope="SCOPES"` to the challenge of every 403."""

    async def wrapped(scope, receive, send):
        async def send_with_scope(message):
            if message["type"] == "http.response.start" and message["status"] == 403:
                headers = []
                for k, v in message.get("headers", []):
                    if k.lower() == b"www-authenticate":
                        v = v + f', scope="{" ".join(scopes)}"'.encode()
                    headers.append((k, v))
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_with_scope)

    return wrapped


if __name__ == "__main__":
    app = with_scope_challenge(server.streamable_http_app(host="127.0.0.1"))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
