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
'use strict';

const fs = require('fs');
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

const repl = require('repl');
const server = repl.start({
  input: new PassThrough(),
  output: process.stderr,
  prompt: '',
  terminal: false,
  useGlobal: true,
  ignoreUndefined: true,
  breakEvalOnSigint: true,
});
// The REPL's own SIGINT handling is for a terminal, and node's report of a
// SIGINT is not trusted (see above): the agent's answer decides.
server.removeAllListeners('SIGINT');

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
let pending = Buffer.alloc(0);
const chunk = Buffer.alloc(1 << 16);
function receive() {
  const end = pending.indexOf(0);
  if (end >= 0) {
    const code = pending.subarray(0, end).toString('utf8');
    pending = pending.subarray(end + 1);
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
receive();
