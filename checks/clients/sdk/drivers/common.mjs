// What the Node drivers share: the same scenario and lines as common.py.
// ../run copies the .mjs drivers into the npm install so that their imports
// resolve; it sets NSM_SERVER_ARGV, NSM_TRANSPORT, NSM_URL and NSM_TOKEN.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export function packageVersion(name) {
  const file = join(process.env.NSM_NPM_DIR, 'node_modules', name, 'package.json');
  return JSON.parse(readFileSync(file, 'utf8')).version;
}

export const TRANSPORT = process.env.NSM_TRANSPORT || 'stdio';
export const URL_ = process.env.NSM_URL || '';
export const TOKEN = process.env.NSM_TOKEN || '';
export const AUTH = { Authorization: `Bearer ${TOKEN}` };

export function serverArgv() {
  return [...JSON.parse(process.env.NSM_SERVER_ARGV), '--stdio'];
}

export const PRINT_CODE = 'print(6*7)';
export const TRACE_CODE = "def f():\n    raise ValueError('boom')\n\nf()";
// The same program as common.py's SESSION_CODE_1 (a CSV and a 1x1 PNG).
export const SESSION_CODE_1 = JSON.parse(process.env.NSM_SESSION_CODE_1);
export const SESSION_CODE_2 = 'print(x + 1)';
export const CANCEL_SETUP = "y = 7\nprint('ready')";
export const CANCEL_CODE = "import time\ntime.sleep(30)\nprint('slept')";
export const AFTER_CANCEL = "print('after cancel', y)";
export const CANCEL_AFTER_MS = 1000;

const SESSION_RE = /session `([A-Za-z0-9_.-]+)`/;
const URI_RE = /sandbox:\/\/[A-Za-z0-9_.-]+\/outputs\/data\.csv/;

export function sessionHandle(requested, text) {
  for (const line of (text || '').split('\n')) {
    if (line.includes('session `')) {
      const m = SESSION_RE.exec(line);
      if (m) return m[1];
    }
  }
  return requested;
}

export function dataUri(text) {
  const m = URI_RE.exec(text || '');
  return m ? m[0] : null;
}

export function short(value, limit = 220) {
  let s = typeof value === 'string' ? value : JSON.stringify(value);
  if (s === undefined) s = String(value);
  s = s.replace(/\n/g, '\\n');
  return s.length <= limit ? s : s.slice(0, limit - 3) + '...';
}

export class Report {
  constructor(client, version, transport = TRANSPORT) {
    this.prefix = `${client} ${version} ${transport}`;
  }
  ok(what) { console.log(`ok - ${this.prefix}: ${what}`); }
  fail(what, reason, excerpt) {
    const tail = excerpt === undefined ? '' : `: ${short(excerpt)}`;
    console.log(`FAIL - ${this.prefix}: ${what}: ${reason}${tail}`);
  }
  info(text) { console.log(`info - ${this.prefix}: ${text}`); }
  check(what, cond, reason, excerpt) {
    if (cond) this.ok(what); else this.fail(what, reason || 'unexpected result', excerpt);
    return !!cond;
  }
  exception(what, e) {
    console.error(`[${this.prefix}] ${what}:`, e);
    this.fail(what, 'raised', `${e && e.name}: ${e && e.message}`);
  }
  done() { console.log('done'); }
}

/** What an SDK user sees of a CallToolResult: its content blocks. */
export function seenOf(result) {
  const blocks = result.content || [];
  const meta = result._meta || {};
  const sc = result.structuredContent;
  const form = `CallToolResult.content [${blocks.map((b) => b.type).join('+') || 'nothing'}]` +
    `; structuredContent ${sc === undefined || sc === null ? 'absent' : 'present'}` +
    `; _meta ${Object.keys(meta).length ? '[' + Object.keys(meta).sort().join(',') + ']' : 'absent'}`;
  return {
    text: blocks.filter((b) => b.type === 'text').map((b) => b.text).join('\n'),
    isError: result.isError,
    form,
    raw: result,
    links: blocks.filter((b) => b.type === 'resource_link').map((b) => b.uri),
    images: blocks.filter((b) => b.type === 'image').length,
    result,
  };
}

function structuredHides(result, needle) {
  const sc = result && result.structuredContent;
  return sc !== undefined && sc !== null && !JSON.stringify(sc).includes(needle);
}

export async function runScenario(rep, api, { protocol = null, cancelPropagates = true } = {}) {
  try {
    const names = await api.listTools();
    rep.check('tools/list has run', names.includes('run'), 'no run tool', names);
  } catch (e) { rep.exception('tools/list has run', e); }

  try {
    const seen = await api.call({ code: PRINT_CODE });
    rep.info(`shown: ${seen.form}`);
    rep.check('print(6*7) shows 42', seen.text.includes('42') && !seen.isError,
      seen.text.includes('42') ? 'flagged as error' : '42 not in what is shown', seen.raw);
    if (seen.result) {
      rep.check('structuredContent does not hide stdout', !structuredHides(seen.result, '42'),
        'structuredContent holds no stdout (clients that show it see no 42)', seen.result.structuredContent);
    }
  } catch (e) { rep.exception('print(6*7) shows 42', e); }

  try {
    const seen = await api.call({ code: TRACE_CODE });
    const good = seen.text.includes('ValueError: boom') && seen.text.includes('exit code 1');
    rep.check('traceback shows ValueError and exit code 1', good && seen.isError !== false,
      good ? 'not flagged as error' : 'missing traceback or `exit code 1`', seen.raw);
  } catch (e) { rep.exception('traceback shows ValueError and exit code 1', e); }

  await sessionChecks(rep, api, protocol);
  await cancelChecks(rep, api, cancelPropagates);
}

async function sessionChecks(rep, api, protocol) {
  const what = 'session call writes outputs/data.csv';
  let seen;
  try {
    seen = await api.call({ session: 's', code: SESSION_CODE_1 });
  } catch (e) { rep.exception(what, e); return; }
  if (!rep.check(what, seen.text.includes('wrote data.csv') && !seen.isError, 'no normal result', seen.raw)) return;
  rep.info(`shown (a call with outputs): ${seen.form}`);
  rep.check('outputs/dot.png comes back as an image', seen.images >= 1, 'no image in what is shown', seen.form);
  const handle = sessionHandle('s', seen.text);
  if (handle !== 's') rep.info(`session handle: server-minted \`${handle}\``);
  const uri = dataUri(seen.text);
  rep.check('text names sandbox://.../outputs/data.csv', uri !== null, 'no URI in text', seen.text);
  if (protocol && seen.result) {
    if (protocol >= '2025-06-18') {
      rep.check(`resource_link block on ${protocol}`, seen.links.length > 0, 'no resource_link block', seen.result.content);
    } else {
      rep.check(`no resource_link block on ${protocol}`, seen.links.length === 0,
        'resource_link sent to a client before 2025-06-18', seen.result.content);
    }
  }
  try {
    const seen2 = await api.call({ session: handle, code: SESSION_CODE_2 });
    rep.check('session keeps state (x + 1 = 42)', seen2.text.includes('42') && !seen2.isError,
      'state lost or call refused', seen2.raw);
  } catch (e) { rep.exception('session keeps state (x + 1 = 42)', e); }
  if (uri) {
    try {
      const text = await api.readResource(uri);
      rep.check('resources/read of the data.csv URI', text.includes('a,b') && text.includes('1,2'), 'contents differ', text);
    } catch (e) { rep.exception('resources/read of the data.csv URI', e); }
  }
}

async function cancelChecks(rep, api, propagates) {
  const what = propagates
    ? 'call right after a cancelled session call succeeds'
    : 'call right after an abandoned session call gets session_busy (the client does not cancel)';
  try {
    let seen = await api.call({ session: 'c', code: CANCEL_SETUP });
    if (!seen.text.includes('ready')) { rep.fail(what, 'setup call failed', seen.raw); return; }
    const handle = sessionHandle('c', seen.text);
    await api.cancelCall({ session: handle, code: CANCEL_CODE }, CANCEL_AFTER_MS);
    seen = await api.call({ session: handle, code: AFTER_CANCEL });
    if (!propagates) {
      rep.info('cancel: abandoning a call does not cancel it on the server');
      rep.check(what, seen.text.includes('session_busy'), 'no session_busy', seen.raw);
    } else if (seen.text.includes('session_busy')) {
      rep.fail(what, 'session_busy', seen.raw);
    } else {
      rep.check(what, seen.text.includes('after cancel 7') && !seen.isError, 'no normal result (state kept?)', seen.raw);
    }
  } catch (e) { rep.exception(what, e); }
}

// A run longer than the client's timeout: 60 s printing a line a second,
// asking for 90 s (`timeout_s`, past the environment's 30), called with a
// 30 s client timeout that progress resets. Without progress the client
// gives up at 30 s and the check fails.
export const LONG_CODE = 'for i in $(seq 1 60); do echo "line $i"; sleep 1; done; echo finished';
export const LONG_CLIENT_TIMEOUT_MS = 30000;

export async function longRunCheck(rep, client) {
  const what = 'a 60 s printing run (timeout_s 90) with a 30 s client timeout reset on progress returns its result';
  const notes = [];
  const started = Date.now();
  try {
    const result = await client.callTool(
      { name: 'run', arguments: { env: 'shell', code: LONG_CODE, timeout_s: 90 } },
      undefined,
      {
        timeout: LONG_CLIENT_TIMEOUT_MS,
        resetTimeoutOnProgress: true,
        onprogress: (p) => notes.push(p),
      },
    );
    const seen = seenOf(result);
    const secs = (Date.now() - started) / 1000;
    const withLines = notes.filter((p) => (p.message || '').includes('line ')).length;
    rep.info(`long run: ${notes.length} progress notifications in ${secs.toFixed(0)} s, ${withLines} with output lines, total ${notes.length ? notes[0].total : 'none'}`);
    const good = seen.text.includes('line 60') && seen.text.includes('finished') && !seen.isError;
    rep.check(what, good && secs >= 60 && withLines >= 30 && notes.every((p) => p.total === 90),
      good ? `${notes.length} notifications, ${withLines} with lines, ${secs.toFixed(0)} s` : 'no whole result', seen.raw);
  } catch (e) { rep.exception(what, e); }
}

/** The api over a TypeScript SDK Client (1.x and 2.x share these calls). */
export function sdkApi(client, { v1 }) {
  const call = (args, options) => (v1
    ? client.callTool({ name: 'run', arguments: args }, undefined, options)
    : client.callTool({ name: 'run', arguments: args }, options));
  return {
    async listTools() { return (await client.listTools()).tools.map((t) => t.name); },
    async call(args) { return seenOf(await call(args)); },
    async readResource(uri) {
      const r = await client.readResource({ uri });
      return r.contents.map((c) => c.text || '').join('');
    },
    async cancelCall(args, afterMs) {
      const ac = new AbortController();
      const pending = call(args, { signal: ac.signal }).catch(() => {});
      await new Promise((r) => setTimeout(r, afterMs));
      ac.abort('user cancelled');
      await pending;
    },
  };
}

// Runs the scenario for one TypeScript client: the transport is made here
// from the SDK's own classes (`Stdio`, `Http`), `open(transport, rep)`
// connects a Client over it and returns it with the negotiated revision;
// over HTTP the MCP session is ended with DELETE /mcp at the end; `extra(rep,
// client)`, when given, runs after the scenario.
export async function drive(name, version, { Stdio, Http, v1 }, open, extra = null) {
  const rep = new Report(name, version);
  try {
    let transport;
    if (TRANSPORT === 'stdio') {
      const argv = serverArgv();
      transport = new Stdio({ command: argv[0], args: argv.slice(1), stderr: 'inherit' });
    } else {
      transport = new Http(new URL(URL_), { requestInit: { headers: AUTH } });
    }
    const { client, protocol } = await open(transport, rep);
    await runScenario(rep, sdkApi(client, { v1 }), { protocol });
    if (extra) await extra(rep, client);
    if (TRANSPORT === 'http' && (v1 || transport.sessionId)) {
      try {
        await transport.terminateSession();
        rep.ok('terminateSession() (DELETE /mcp) succeeds');
      } catch (e) { rep.exception('terminateSession() (DELETE /mcp) succeeds', e); }
    }
    await client.close();
  } catch (e) {
    rep.exception('connection', e);
  }
  rep.done();
  process.exit(0);
}
