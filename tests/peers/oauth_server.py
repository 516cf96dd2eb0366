"""A Python SDK MCPServer over streamable HTTP that accepts only JWTs from the test issuer
(oauth2-mock-server) with scope `mcp`, verified against its JWKS; no token is a 401.
Usage: oauth_server.py PORT ISSUER_PORT"""
import sys

import jwt
from jwt import PyJWKClient
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

port, issuer_port = int(sys.argv[1]), int(sys.argv[2])
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
        required_scopes=["mcp"],
    ),
)


@server.tool()
def whoami() -> str:
    """The client id of the token this call came with."""
    token = get_access_token()
    return token.client_id if token else "nobody"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=port)
