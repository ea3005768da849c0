// The MCP Inspector's CLI mode (`inspector --cli`), one process per method
// as its users run it: every invocation is a connection of its own (over
// stdio a new server), so state cannot carry from one invocation to the next.
// It prints the whole result as JSON: content, isError and _meta.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as c from './common.mjs';

const VERSION = c.packageVersion('@modelcontextprotocol/inspector');
const LAUNCHER = join(process.env.NSM_NPM_DIR, 'node_modules', '@modelcontextprotocol', 'inspector',
  'clients', 'launcher', 'build', 'index.js');
const rep = new c.Report('inspector-cli', VERSION);
const home = process.cwd(); // a temporary directory of ../run's: no catalog or secret lands in ~

let target;
if (c.TRANSPORT === 'stdio') {
  const argv = c.serverArgv();
  const config = join(home, 'mcp.json');
  writeFileSync(config, JSON.stringify({ mcpServers: { sandbox: { command: argv[0], args: argv.slice(1) } } }));
  target = ['--config', config, '--server', 'sandbox'];
} else {
  target = [c.URL_, '--transport', 'http', '--header', `Authorization: Bearer ${c.TOKEN}`];
}

function inspector(args) {
  const r = spawnSync(process.execPath, [LAUNCHER, '--cli', ...target, ...args], {
    encoding: 'utf8', timeout: 30000,
    env: { ...process.env, HOME: home },
  });
  process.stderr.write(r.stderr || '');
  let json = null;
  try { json = JSON.parse(r.stdout); } catch { /* not JSON */ }
  return { status: r.status, stdout: r.stdout || '', stderr: r.stderr || '', json };
}

/** Its answer: stdout, else the last line of stderr that is neither its own notice nor the server's log. */
function lastWords(r) {
  if (r.stdout.trim()) return r.stdout.trim();
  const lines = r.stderr.split('\n').map((l) => l.trim())
    .filter((l) => l && !l.startsWith('[mcp-inspector]') && !/^\d{4}-\d\d-\d\dT/.test(l));
  return lines.pop() || '';
}

function callRun(args) {
  const toolArgs = Object.entries(args).map(([k, v]) => `${k}=${v}`);
  return inspector(['--method', 'tools/call', '--tool-name', 'run', '--tool-arg', ...toolArgs]);
}

try {
  let r = inspector(['--method', 'tools/list']);
  // Over stdio the server's log (rmcp, level info) names the revision the CLI asked for.
  const asked = /protocol_version: ProtocolVersion\("([0-9-]+)"\)/.exec(r.stderr);
  if (asked) rep.info(`negotiated: ${asked[1]} (initialize; read from the server's log)`);
  const names = r.json && r.json.tools ? r.json.tools.map((t) => t.name) : [];
  rep.check('tools/list has run', names.includes('run'), `exit ${r.status}`, r.stdout || r.stderr);

  r = callRun({ code: c.PRINT_CODE });
  if (r.json) {
    const seen = c.seenOf(r.json);
    rep.info(`shown: the CLI prints the whole result as JSON: ${seen.form}; exit status ${r.status}`);
    rep.check('print(6*7) shows 42', seen.text.includes('42') && !seen.isError, 'no 42', r.stdout);
  } else {
    rep.fail('print(6*7) shows 42', `exit ${r.status}, no JSON`, r.stdout || r.stderr);
  }

  r = callRun({ code: c.TRACE_CODE });
  if (r.json) {
    const seen = c.seenOf(r.json);
    rep.check('traceback shows ValueError and exit code 1',
      seen.text.includes('ValueError: boom') && seen.text.includes('exit code 1') && seen.isError === true,
      'missing traceback, `exit code 1` or isError', r.stdout);
    rep.info(`an isError result: exit status ${r.status}`);
  } else {
    rep.fail('traceback shows ValueError and exit code 1', `exit ${r.status}, no JSON`, r.stdout || r.stderr);
  }

  // One invocation: a session call with an output; the link cannot be read
  // by a later invocation (another connection), so only the text is checked.
  r = callRun({ session: 's', code: c.SESSION_CODE_1 });
  if (r.json) {
    const seen = c.seenOf(r.json);
    rep.check('session call writes outputs/data.csv', seen.text.includes('wrote data.csv') && !seen.isError,
      'no normal result', r.stdout);
    const uri = c.dataUri(seen.text);
    rep.check('text names sandbox://.../outputs/data.csv', uri !== null, 'no URI in text', seen.text);
    if (uri) {
      const rr = inspector(['--method', 'resources/read', '--uri', uri]);
      const text = rr.json && rr.json.contents ? rr.json.contents.map((x) => x.text || '').join('') : '';
      rep.info('resources/read from a later invocation: ' +
        (text.includes('a,b') ? 'works (the session outlived its connection)' : `fails as expected (new connection): ${c.short(lastWords(rr), 140)}`));
    }
  } else {
    rep.fail('session call writes outputs/data.csv', `exit ${r.status}, no JSON`, r.stdout || r.stderr);
  }
} catch (e) {
  rep.exception('driver', e);
}
rep.done();
