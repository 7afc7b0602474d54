// A real OpenID provider on 127.0.0.1 for MAD Arena's sign-in tests: oidc-provider (a certified OpenID
// Provider) with its own login page, test accounts, open client registration and its management (RFC 7591,
// RFC 7592: a live server registers its redirect URI once it has a port) and PKCE required.
//
// It listens on a free port and prints one line of JSON, {"issuer": "http://127.0.0.1:PORT"}, once it is ready.
// Tests drive it through POST /__test/accounts (add or change an account) and POST /__test/config (the
// authorization codes' lifetime, and a "mischief" that rewrites the ID tokens the token endpoint hands out,
// as a broken or hostile provider would: tests/sso/conftest.py lists the kinds).

import http from 'node:http';

import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import { Provider } from 'oidc-provider';

const accounts = new Map(); // sub -> { password, email, email_verified, name }
const settings = { codeTtlS: 30, mischief: 'none' };
const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const signingKey = { ...(await exportJWK(privateKey)), kid: 'test-key', alg: 'RS256', use: 'sig' };

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  jwks: { keys: [signingKey] },
  cookies: { keys: ['test-provider-cookie-key'] },
  features: {
    registration: { enabled: true },
    registrationManagement: { enabled: true },
    devInteractions: { enabled: false },
  },
  pkce: { required: () => true },
  scopes: ['openid', 'email', 'profile'],
  claims: { email: ['email', 'email_verified'], profile: ['name', 'preferred_username'] },
  ttl: {
    AuthorizationCode: () => settings.codeTtlS,
    AccessToken: 600,
    IdToken: 600,
    Interaction: 600,
    Session: 600,
    Grant: 600,
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, sub) {
    const account = accounts.get(sub);
    if (!account) return undefined;
    return {
      accountId: sub,
      async claims() {
        const { email, email_verified, name } = account;
        return { sub, email, email_verified, name, preferred_username: sub };
      },
    };
  },
  // Every client is first-party here: consent is granted without asking.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile');
    await grant.save();
    return grant;
  },
});

// The mischiefs: each returns the ID token a misbehaving provider would send instead of the real one.
const encode = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
const decode = (part) => JSON.parse(Buffer.from(part, 'base64url').toString());
const resign = (claims) => new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'test-key' }).sign(privateKey);
const now = () => Math.floor(Date.now() / 1000);
const mischiefs = {
  none: async (parts) => parts.join('.'),
  'tampered-claims': async ([header, payload, signature]) =>
    [header, encode({ ...decode(payload), sub: 'someone-else' }), signature].join('.'),
  'unsigned': async ([, payload]) => [encode({ alg: 'none' }), payload, ''].join('.'),
  'wrong-issuer': async ([, payload]) => resign({ ...decode(payload), iss: 'http://127.0.0.1:9/elsewhere' }),
  'wrong-audience': async ([, payload]) => {
    const claims = decode(payload);
    return resign({ ...claims, aud: 'another-client', azp: claims.aud });
  },
  'expired': async ([, payload]) => resign({ ...decode(payload), iat: now() - 7200, exp: now() - 3600 }),
  'wrong-nonce': async ([, payload]) => resign({ ...decode(payload), nonce: 'a-nonce-from-another-sign-in' }),
  'another-subject': async ([, payload]) => resign({ ...decode(payload), sub: 'someone-else' }),
};

provider.use(async (ctx, next) => {
  await next();
  if (ctx.path === '/token' && ctx.body?.id_token) {
    ctx.body.id_token = await mischiefs[settings.mischief](ctx.body.id_token.split('.'));
  }
});

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(res, uid, error = '') {
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  res.end(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Test provider: sign in</title></head>
<body><main><h1>Test provider</h1>${error ? `<p role="alert" id="provider-error">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label for="login">Account</label> <input id="login" name="login" autocomplete="username" required>
<label for="password">Password</label> <input id="password" name="password" type="password" required>
<button type="submit" id="provider-sign-in">Sign in</button></form></main></body></html>`);
}

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString();
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (req.method === 'GET') return loginPage(res, uid);
  if (action !== 'login' || details.prompt.name !== 'login') {
    res.statusCode = 400;
    return res.end('unexpected interaction');
  }
  const form = new URLSearchParams(await body(req));
  const account = accounts.get(form.get('login'));
  if (!account || account.password !== form.get('password')) return loginPage(res, uid, 'Wrong account or password.');
  return provider.interactionFinished(
    req,
    res,
    { login: { accountId: form.get('login') } },
    { mergeWithLastSubmission: false },
  );
}

async function testControl(req, res, what) {
  const sent = JSON.parse(await body(req));
  if (what === 'accounts') {
    accounts.set(sent.sub, { ...accounts.get(sent.sub), ...sent });
  } else if (what === 'config' && (sent.mischief === undefined || sent.mischief in mischiefs)) {
    if (sent.code_ttl_s !== undefined) settings.codeTtlS = sent.code_ttl_s;
    if (sent.mischief !== undefined) settings.mischief = sent.mischief;
  } else {
    res.statusCode = 400;
    return res.end(`unknown test control ${what} ${JSON.stringify(sent)}`);
  }
  res.setHeader('Content-Type', 'application/json');
  return res.end(JSON.stringify(settings));
}

const providerCallback = provider.callback();
server.on('request', async (req, res) => {
  const path = new URL(req.url, issuer).pathname;
  const interactionPath = path.match(/^\/interaction\/([\w-]+)(?:\/(\w+))?$/);
  const controlPath = path.match(/^\/__test\/(\w+)$/);
  try {
    if (interactionPath) return await interaction(req, res, interactionPath[1], interactionPath[2]);
    if (controlPath && req.method === 'POST') return await testControl(req, res, controlPath[1]);
    return providerCallback(req, res);
  } catch (error) {
    res.statusCode = 500;
    return res.end(String(error));
  }
});

console.log(JSON.stringify({ issuer }));
