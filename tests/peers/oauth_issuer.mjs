// An OAuth 2 token endpoint for the Antler suites: oauth2-mock-server (RS256 JWTs, JWKS at
// /jwks) whose tokens live `ttl` seconds (the JWT `exp`; `expires_in` as the server says,
// unless `--expires-in N`), carrying the client id; each token request is appended to `log`
// as one JSON line (never the secret).
// Usage: node oauth_issuer.mjs PORT TTL LOG [--expires-in N]
import { appendFileSync } from 'node:fs';
import { OAuth2Server } from 'oauth2-mock-server';

const [port, ttl, log, flag, expiresIn] = process.argv.slice(2);
const server = new OAuth2Server();
// The issuer is named as clients reach it, so metadata discovery finds the issuer it asked.
server.issuer.url = `http://127.0.0.1:${port}`;
await server.issuer.keys.generate('RS256');
server.service.on('beforeTokenSigning', (token, req) => {
  token.payload.exp = Math.floor(Date.now() / 1000) + Number(ttl);
  token.payload.client_id = req.body.client_id ?? 'refresh-client';
});
server.service.on('beforeResponse', (response, req) => {
  if (flag === '--expires-in') response.body.expires_in = Number(expiresIn);
  if (req.body.grant_type === 'client_credentials') response.body.refresh_token = undefined;
  const b = req.body;
  appendFileSync(log, JSON.stringify({
    grant_type: b.grant_type, client_id: b.client_id, scope: b.scope, audience: b.audience,
    refresh_token: b.refresh_token, resource: b.resource, has_secret: Boolean(b.client_secret),
    issued_refresh_token: response.body.refresh_token,
  }) + '\n');
});
await server.start(Number(port), '127.0.0.1');
console.log(`issuer ${server.issuer.url}`);
