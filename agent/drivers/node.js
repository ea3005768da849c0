// The node driver of nix-sandbox-mcp's session agent (agent/src/driver.rs
// describes the channel). Run as `node node.js` with the agent's channel on
// fds 3 (code in, NUL-terminated) and 4 (messages out, one a line).
//
// Each call's code is one cell of node's own REPL evaluator (the `repl`
// module, in the global context): top-level `const`, `let`, `class` and
// `function` bindings persist between calls (declaring the same `let` or
// `const` twice is a SyntaxError, as in the REPL), `await` works at top
// level, `require` resolves from the working directory, and the value of the
// cell, unless undefined, is shown as the REPL shows it. An uncaught error
// is printed to stderr as the REPL prints it and gives status 1; one thrown
// later by a callback is printed too, and ends the cell it happens in.
// `process.exit(n)` ends the interpreter: the agent reports it and starts a
// fresh one for the next call. The event loop keeps running between calls.
//
// Interrupts (SIGINT from the agent) end the cell with status 130: its
// synchronous part runs under node's SIGINT watchdog (the REPL's
// breakEvalOnSigint), which stops even `while (true) {}`; a cell that is
// awaiting ends at once and leaves its promise running. Around the watchdog
// node's handling of SIGINT changes hands, and a SIGINT in between would kill
// node, so the driver says `start` when SIGINT is safe and `hold` before it
// stops being so; the agent's answer, `held 1` or `held 0`, says whether it
// sent one meanwhile. That answer, not node's own report, decides whether the
// cell was interrupted: node's watchdog can lose a signal that comes as the
// script ends, and then report it in a later cell.
//
// An empty message before a call's code (the agent's `once`) makes that call
// the interpreter's only one, run as `node -` runs a script given on stdin:
// named `[stdin]` (`__filename`, the `[stdin]:1` of an error), with
// `module`, `exports`, `require` and `__dirname` of a module `[stdin]` in
// the working directory, `process.argv` ending in `-`, no value shown and
// no REPL ever started (so no built-in modules as globals); then node runs
// its event loop out and exits as that one would (status 1 after an
// uncaught error, printed by node itself, `process.exit`'s code). Only the
// stack frames below the script's own differ: they name this driver where
// node's name its internals. The driver reads the first message before it
// starts the REPL, so that nothing of it is set up for such a call.
'use strict';

const fs = require('fs');
const path = require('path');
const vm = require('vm');
const { PassThrough } = require('stream');

// The channel on fresh close-on-exec fds (node opens files O_CLOEXEC), so
// that processes the code starts cannot inherit it.
function privateFd(fd, flags) {
  try {
    const own = fs.openSync(`/proc/self/fd/${fd}`, flags);
    fs.closeSync(fd);
    return own;
  } catch {
    return fd; // no /proc: node does not pass fds 3 and up to its children anyway
  }
}
const codeIn = privateFd(3, fs.constants.O_RDONLY);
const messagesOut = privateFd(4, fs.constants.O_WRONLY);

function send(message) {
  fs.writeSync(messagesOut, `${message}\n`);
}

// What was read from the agent past the last message taken.
let pending = Buffer.alloc(0);
const chunk = Buffer.alloc(1 << 16);

// The first whole message of what was read, taken from it, or null.
function takeMessage() {
  const end = pending.indexOf(0);
  if (end < 0) return null;
  const message = pending.subarray(0, end).toString('utf8');
  pending = pending.subarray(end + 1);
  return message;
}

// The next message, read synchronously (before the event loop runs), or
// null at end of file.
function readMessageSync() {
  for (;;) {
    const message = takeMessage();
    if (message !== null) return message;
    let n;
    try {
      n = fs.readSync(codeIn, chunk, 0, chunk.length, null);
    } catch (error) {
      if (error.code === 'EINTR' || error.code === 'EAGAIN') continue;
      throw error;
    }
    if (n === 0) return null;
    pending = Buffer.concat([pending, chunk.subarray(0, n)]);
  }
}

// After `hold`: the agent's answer, true when it sent SIGINT since `start`.
// Such a SIGINT is delivered by then, while the watchdog still takes it.
function awaitHeld() {
  const byte = Buffer.alloc(1);
  let answer = '';
  for (;;) {
    let n;
    try {
      n = fs.readSync(codeIn, byte, 0, 1, null);
    } catch (error) {
      // The SIGINT this may wait for interrupts the read (no SA_RESTART).
      if (error.code === 'EINTR') continue;
      throw error;
    }
    if (n === 0) process.exit(0);
    if (byte[0] === 0) break;
    answer += String.fromCharCode(byte[0]);
  }
  if (answer !== 'held 1' && answer !== 'held 0') {
    throw new Error(`node driver: expected held from the agent, got ${JSON.stringify(answer)}`);
  }
  return answer === 'held 1';
}

let cell = null; // the running cell: { number, done, interrupted, keepAlive }
let cellScriptNext = false; // the next script the REPL runs is the cell's

// The REPL runs the cell's script inside its SIGINT watchdog: tell the agent
// when SIGINT is safe, and ask before it stops being so. The REPL takes
// vm.Script.prototype's methods when it loads, so this comes first.
const runInThisContext = vm.Script.prototype.runInThisContext;
vm.Script.prototype.runInThisContext = function runCellScript(options) {
  if (!cellScriptNext) return runInThisContext.call(this, options);
  cellScriptNext = false;
  const c = cell;
  send('start');
  try {
    return runInThisContext.call(this, options);
  } finally {
    send('hold');
    if (awaitHeld()) c.interrupted = true;
  }
};

// A SIGINT that node's watchdog took too late is handed to the next
// watchdog that starts: this one, which runs up to 50 ms for it, so that the
// next cell does not get it.
const absorber = new vm.Script('for (const end = Date.now() + 50; Date.now() < end; );');
function absorbLateSigint() {
  try {
    runInThisContext.call(absorber, { breakOnSigint: true });
  } catch {
    // ERR_SCRIPT_EXECUTION_INTERRUPTED: absorbed.
  }
}

// Loaded now (it sets nothing up until started), so that a session's first
// call does not wait for it.
const repl = require('repl');

// A `once` call (see the top): the code is the next message.
function runOnce() {
  const code = readMessageSync();
  if (code === null) process.exit(0);
  vm.Script.prototype.runInThisContext = runInThisContext;
  process.argv.splice(1, Infinity, '-');
  delete process.mainModule;
  // node reads its stdin to the end first (the script's own reads find it
  // ended), as here; the driver's stdin is /dev/null.
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', () => {});
  process.stdin.on('end', () => runScript(code));
}

// Runs a `once` call's code as node's evalScript runs a script on stdin: a
// module `[stdin]` in the working directory.
function runScript(code) {
  const { Module } = require('module');
  const name = '[stdin]';
  const cwd = process.cwd();
  const main = new Module(name);
  main.filename = path.join(cwd, name);
  main.paths = Module._nodeModulePaths(cwd);
  send('start');
  // node's own wrapper, word for word, so that its frame reads the same.
  const wrapper = `
      globalThis.module = module;
      globalThis.exports = exports;
      globalThis.__dirname = __dirname;
      globalThis.require = require;
      return (main) => main();
    `;
  globalThis.__filename = name;
  // `import()` through node's own loader (node 20.12 and later), as a
  // script's on stdin; node warns that the option is experimental when it
  // is first used, a warning `node -` does not print: used once first
  // with the warning muted (node warns of a feature once).
  const importModuleDynamically = vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER;
  if (importModuleDynamically !== undefined && code.includes('import')) {
    const emitWarning = process.emitWarning;
    process.emitWarning = () => {};
    try {
      new vm.Script('import("node:path")', { importModuleDynamically })
        .runInThisContext()
        .catch(() => {});
    } finally {
      process.emitWarning = emitWarning;
    }
  }
  main._compile(wrapper, `${name}-wrapper`)(() =>
    new vm.Script(code, { filename: name, importModuleDynamically }).runInThisContext({
      displayErrors: true,
    }),
  );
}

let server = null; // the REPL, started by a session's first call

// Starts the REPL and the driver's handlers, then runs the session's first
// call.
function startSession(code) {
  server = repl.start({
    input: new PassThrough(),
    output: process.stderr,
    prompt: '',
    terminal: false,
    useGlobal: true,
    ignoreUndefined: true,
    breakEvalOnSigint: true,
  });
  // The REPL's own SIGINT handling is for a terminal, and node's report of
  // a SIGINT is not trusted (see above): the agent's answer decides.
  server.removeAllListeners('SIGINT');
  process.on('SIGINT', onSigint);
  // The watchdog's error has only the driver's frames to show.
  server._domain.prependListener('error', (error) => {
    if (error && error.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
      error.stack = `${error.name}: ${error.message}`;
      Object.defineProperty(error, 'code', { enumerable: false });
    }
  });
  // Errors of the cell (and any uncaught one while it runs) come here after
  // the REPL printed them.
  server._domain.on('error', () => {
    if (cell && !cell.done) finish(cell, 1);
  });
  process.on('unhandledRejection', (reason) => {
    process.stderr.write(`Uncaught (in promise) ${server.writer(reason)}\n`);
  });
  setImmediate(run, code);
}

function finish(c, status, value) {
  if (c.done) return;
  c.done = true;
  cell = null;
  clearInterval(c.keepAlive);
  if (value !== undefined) process.stdout.write(`${server.writer(value)}\n`);
  // Writes to a pipe may still be queued: `done` comes after them.
  flushed(process.stdout, () =>
    flushed(process.stderr, () => {
      send(`done ${c.interrupted ? 130 : status}`);
      receive();
    }),
  );
}

// Calls next once what was written to stream so far is out.
function flushed(stream, next) {
  if (stream.writableLength > 0 && stream.writable) stream.write('', next);
  else next();
}

// Ends an awaiting cell; its promise is left running.
function interrupt(c) {
  c.interrupted = true;
  process.stderr.write(
    'Uncaught Error: Script execution was interrupted by `SIGINT` (an awaited promise keeps running)\n',
  );
  finish(c, 130);
}

// SIGINT while no cell runs synchronously: ends an awaiting cell, else ignored.
function onSigint() {
  if (cell && !cell.done) interrupt(cell);
}

let cells = 0;
function run(code) {
  cells += 1;
  const c = {
    number: cells,
    done: false,
    interrupted: false,
    // Node would exit while the cell awaits something that holds no handle
    // (`await new Promise(() => {})`): the cell holds one.
    keepAlive: setInterval(() => {}, 1 << 30),
  };
  cell = c;
  // No SIGINT listener while the REPL's watchdog runs (node would take the
  // signal from the watchdog and give it to the listener, too late).
  process.removeListener('SIGINT', onSigint);
  cellScriptNext = true;
  try {
    server.eval(code, server.context, `<cell ${c.number}>`, (error, value) => {
      // A syntax error comes here (wrapped when the input looks unfinished);
      // the REPL hands such errors to its domain, which prints them.
      if (error) server._domain.emit('error', error.err || error);
      else finish(c, 0, value);
    });
  } finally {
    cellScriptNext = false;
    if (c.interrupted) absorbLateSigint();
    process.on('SIGINT', onSigint);
  }
  if (c.done) return;
  if (c.interrupted) interrupt(c);
  else send('start');
}

// Reads the next cell's code in the background, so the event loop (timers,
// servers the code started) keeps running between calls.
function receive() {
  const code = takeMessage();
  if (code !== null) {
    setImmediate(run, code);
    return;
  }
  fs.read(codeIn, chunk, 0, chunk.length, null, (error, n) => {
    if (error) {
      if (error.code === 'EINTR' || error.code === 'EAGAIN') return receive();
      throw error;
    }
    if (n === 0) process.exit(0);
    pending = Buffer.concat([pending, chunk.subarray(0, n)]);
    receive();
  });
}
// The first message, read before the event loop runs: empty for a `once`
// call, else the code of a session's first call.
const first = readMessageSync();
if (first === null) process.exit(0);
if (first === '') runOnce();
else startSession(first);
