// A strict OAuth 2 authorization server for the Antler suites, on oauth2-mock-server (RS256
// JWTs, JWKS at /jwks, OpenID metadata, an /authorize that approves at once with PKCE):
// - the scope a code was authorized for is the scope of its tokens (and of their refreshes);
// - refresh tokens rotate and each is good once: a used or unknown one is 400 invalid_grant;
// - with --client-key PEM, a client_credentials request must carry a private_key_jwt client
//   assertion signed by that key (iss = sub = client_id, aud = the issuer or the token
//   endpoint, not expired), else 401 invalid_client;
// - with --deny-scope S, scope S is never granted.
// Tokens live --ttl seconds (the JWT exp; default 3600); expires_in says --expires-in (default
// the ttl). Each token request is appended to LOG as one JSON line (the refresh tokens used
// and issued, so a test can follow the rotation; never a secret or an assertion).
// Usage: node oauth_strict_issuer.mjs PORT LOG [--ttl N] [--expires-in N] [--client-key PEM]
//        [--deny-scope S]
import { appendFileSync, readFileSync } from 'node:fs';
import { createPublicKey } from 'node:crypto';
import { jwtVerify } from 'jose';
import { OAuth2Server } from 'oauth2-mock-server';

const [port, log, ...rest] = process.argv.slice(2);
const flag = (name) => {
  const i = rest.indexOf(name);
  return i >= 0 ? rest[i + 1] : undefined;
};
const ttl = Number(flag('--ttl') ?? 3600);
const expiresIn = Number(flag('--expires-in') ?? ttl);
const keyFile = flag('--client-key');
const clientKey = keyFile ? createPublicKey(readFileSync(keyFile)) : undefined;
const denied = flag('--deny-scope');

const server = new OAuth2Server();
server.issuer.url = `http://127.0.0.1:${port}`;
const tokenEndpoint = `${server.issuer.url}/token`;
await server.issuer.keys.generate('RS256');

const grant = (scope) =>
  (scope ?? '').split(' ').filter((s) => s && s !== denied).join(' ');
// code -> the scope it was authorized for; live refresh token -> its scope.
const codes = new Map();
const live = new Map();

server.service.on('beforeAuthorizeRedirect', (redirect, req) => {
  const code = redirect.url.searchParams.get('code');
  if (code) codes.set(code, grant(req.query.scope));
});

// The scope a request's tokens carry, decided before they are signed.
const scopeOf = (b) => {
  if (b.grant_type === 'authorization_code') return codes.get(b.code) ?? '';
  if (b.grant_type === 'refresh_token') return live.get(b.refresh_token) ?? '';
  return grant(b.scope);
};

// The client: the body's, else HTTP Basic's (client_secret_basic).
const clientOf = (req) => {
  if (req.body.client_id) return req.body.client_id;
  const basic = /^Basic (.+)$/i.exec(req.headers.authorization ?? '');
  if (!basic) return undefined;
  return decodeURIComponent(Buffer.from(basic[1], 'base64').toString().split(':')[0]);
};

server.service.on('beforeTokenSigning', (token, req) => {
  token.payload.exp = Math.floor(Date.now() / 1000) + ttl;
  token.payload.client_id = clientOf(req) ?? 'login-client';
  token.payload.scope = scopeOf(req.body);
});

const verifyAssertion = async (b) => {
  if (!clientKey) return undefined;
  if (b.client_assertion_type !== 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
      || !b.client_assertion) return 'no client assertion';
  try {
    const { payload } = await jwtVerify(b.client_assertion, clientKey, {
      audience: [server.issuer.url, tokenEndpoint],
    });
    if (!payload.iss || payload.iss !== payload.sub) return 'iss and sub differ';
    b.client_id = payload.sub;
    return undefined;
  } catch (e) {
    return String(e.code ?? e.message);
  }
};

server.service.on('beforeResponse', (response, req) => {
  const b = req.body;
  const entry = {
    grant_type: b.grant_type, client_id: clientOf(req), requested_scope: b.scope,
    refresh_token: b.refresh_token, resource: b.resource,
    assertion: req.assertionRefusal === undefined ? (b.client_assertion ? 'verified' : 'none') : 'refused',
  };
  if (req.assertionRefusal !== undefined) {
    response.statusCode = 401;
    response.body = { error: 'invalid_client', error_description: req.assertionRefusal };
  } else if (b.grant_type === 'refresh_token' && !live.has(b.refresh_token)) {
    response.statusCode = 400;
    response.body = { error: 'invalid_grant', error_description: 'refresh token used or unknown' };
  } else {
    const scope = scopeOf(b);
    if (b.grant_type === 'refresh_token') live.delete(b.refresh_token);
    response.body.scope = scope;
    response.body.expires_in = expiresIn;
    if (b.grant_type === 'client_credentials') {
      response.body.refresh_token = undefined;
    } else {
      live.set(response.body.refresh_token, scope);
    }
    entry.granted_scope = scope;
    entry.issued_refresh_token = response.body.refresh_token;
  }
  entry.status = response.statusCode;
  appendFileSync(log, JSON.stringify(entry) + '\n');
});

// The client assertion is verified before the mock handles the request (it names the
// token's client from the body).
const express = (await import('express')).default;
const front = express();
front.use('/token', express.urlencoded({ extended: false }), async (req, _res, next) => {
  if (req.body?.grant_type === 'client_credentials') {
    req.assertionRefusal = await verifyAssertion(req.body);
  }
  next();
});
front.use(server.service.requestHandler);
await new Promise((resolve) => front.listen(Number(port), '127.0.0.1', resolve));
console.log(`issuer ${server.issuer.url}`);
