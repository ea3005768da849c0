# The Python driver of nix-sandbox-mcp's session agent (agent/src/driver.rs
# describes the channel). Run as `python3 python.py` with the agent's channel
# on fds 3 (code in, NUL-terminated) and 4 (messages out, one a line).
#
# Each call's code runs in one persistent namespace, the `__main__` module's,
# so imports, variables, functions and classes persist (and pickle). When the
# last statement is an expression, its value is shown as the interactive
# interpreter does (sys.displayhook: repr, unless None). An uncaught exception
# prints its traceback (without this driver's frames) to stderr and gives
# status 1; KeyboardInterrupt gives 130. SystemExit (exit(), sys.exit(3))
# ends the interpreter with that code, as in a script: the agent reports it
# and starts a fresh interpreter for the next call. SIGINT raises
# KeyboardInterrupt only while call code runs; between calls it is ignored.
#
# An empty message before a call's code (the agent's `once`) makes that call
# the interpreter's only one, run as `python3 -` runs a script: named
# `<stdin>`, sys.argv ["-"], no value shown, no source in tracebacks; then
# the interpreter exits as that one would (non-daemon threads joined, atexit
# handlers run, status 1 after an uncaught exception, SystemExit's code,
# death by SIGINT after a KeyboardInterrupt), skipping only the
# interpreter's finalization, which the answer would wait for.
#
# Matplotlib: MPLBACKEND defaults to Agg (headless), and
# `plt.show()` saves every open figure to outputs/figure-N.png (N the next
# free number) in the working directory the driver started in (the
# session's /workspace), then closes them; the agent lists new files in
# outputs/ and the launcher shows the images to the model. The hook costs
# nothing until matplotlib.pyplot is imported.
#
# The first call of a session waits for this driver to start, and every
# warm jail starts one, so it imports only what that call needs: the C
# modules `_ast` and `_signal` rather than `ast` and `signal` (which builds
# its enums at import, about 3 ms, more than half of Python's own start),
# and `traceback` when an exception is to be printed. The source of each
# call goes to `linecache` (tracebacks show it) once anything imports that.
# The store holds this file compiled by the environment's own python3
# (python-compile.py), so that no start compiles it either.
import _ast
import fcntl
import os
import sys
import types

try:
    import _signal
except ImportError:  # an interpreter without CPython's C module
    import signal as _signal


# Linux's number where the fcntl module lacks the name (PyPy's does).
_F_DUPFD_CLOEXEC = getattr(fcntl, "F_DUPFD_CLOEXEC", 1030)


def _private_fd(fd):
    """Moves an inherited fd to a high, close-on-exec one."""
    try:
        new = fcntl.fcntl(fd, _F_DUPFD_CLOEXEC, 100)
    except OSError:  # a low RLIMIT_NOFILE
        new = os.dup(fd)  # non-inheritable too (PEP 446)
    os.close(fd)
    return new


_CODE_IN = _private_fd(3)
_MSG_OUT = _private_fd(4)
_PID = os.getpid()
_running = False


def _on_sigint(signum, frame):
    if _running:
        raise KeyboardInterrupt


def _send(message):
    data = message.encode() + b"\n"
    while data:
        data = data[os.write(_MSG_OUT, data) :]


_pending = bytearray()


def _receive():
    """The next call's code, or None when the agent closed the channel."""
    while True:
        end = _pending.find(b"\0")
        if end >= 0:
            code = bytes(_pending[:end])
            del _pending[: end + 1]
            return code.decode("utf-8", "surrogateescape")
        chunk = os.read(_CODE_IN, 1 << 16)
        if not chunk:
            return None
        _pending.extend(chunk)


def _flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def _compile(code, filename):
    """Code objects for the statements, the last expression shown as a REPL
    would; raises SyntaxError."""
    tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)
    last = tree.body[-1:] if tree.body and isinstance(tree.body[-1], _ast.Expr) else []
    if last:
        tree.body = tree.body[:-1]
    parts = [compile(tree, filename, "exec")]
    if last:
        parts.append(compile(_ast.Interactive(body=last), filename, "single"))
    return parts


# Each call's source, as linecache holds it: (size, mtime None, lines, name).
_cells = {}


def _remember(filename, code):
    """Keeps the call's source for tracebacks, in linecache when loaded."""
    entry = (len(code), None, code.splitlines(True), filename)
    _cells[filename] = entry
    linecache = sys.modules.get("linecache")
    if linecache is not None:
        linecache.cache[filename] = entry


def _fill_linecache(linecache):
    """linecache was just imported: every call's source so far into it."""
    linecache.cache.update(_cells)


def _user_traceback(tb):
    """tb without this driver's frames (its exec call, its SIGINT handler)."""
    kept = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != __file__:
            kept.append(tb)
        tb = tb.tb_next
    tb = None
    for entry in reversed(kept):
        tb = types.TracebackType(tb, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return tb


def _report(exc, frames=True):
    """Prints exc as the interpreter would, without this driver's frames (and
    without any for a syntax error), source lines from linecache."""
    tb = _user_traceback(exc.__traceback__) if frames else None
    exc = exc.with_traceback(tb)
    if sys.excepthook is sys.__excepthook__:
        import traceback

        traceback.print_exception(type(exc), exc, tb)
    else:
        sys.excepthook(type(exc), exc, tb)


def _exit_code(exc):
    """The process exit code of a SystemExit, as Python computes it."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run(code, namespace, number):
    """Runs one call; returns its status."""
    global _running
    filename = "<cell %d>" % number
    _remember(filename, code)
    try:
        parts = _compile(code, filename)
    except (SyntaxError, ValueError, OverflowError) as exc:
        _report(exc, frames=False)
        return 1
    try:
        try:
            _running = True
            _send("start")
            for part in parts:
                exec(part, namespace)
        finally:
            _running = False
    except SystemExit as exc:
        if os.getpid() != _PID:
            raise
        _flush()
        os._exit(_exit_code(exc))
    except KeyboardInterrupt as exc:
        _report(exc)
        return 130
    except BaseException as exc:
        _report(exc)
        return 1
    return 0


_OUTPUTS = os.path.join(os.getcwd(), "outputs")


def _save_figures(pyplot):
    """plt.show() in a session: every open figure to outputs/figure-N.png."""
    os.makedirs(_OUTPUTS, exist_ok=True)
    number = 1
    for figure in pyplot.get_fignums():
        while os.path.lexists(os.path.join(_OUTPUTS, "figure-%d.png" % number)):
            number += 1
        pyplot.figure(figure).savefig(os.path.join(_OUTPUTS, "figure-%d.png" % number))
    pyplot.close("all")


def _patch_pyplot(pyplot):
    """Replaces matplotlib.pyplot's `show` by [`_save_figures`]."""
    original = pyplot.show

    def show(*args, **kwargs):
        """Saves the open figures to outputs/ (nix-sandbox-mcp)."""
        _save_figures(pyplot)

    show.__wrapped__ = original
    pyplot.show = show


class _AfterImport:
    """A meta path finder that lets the other finders find the modules it
    watches, then hands each to its function once the module has run:
    matplotlib.pyplot gets its `show` replaced, linecache the calls' source."""

    watch = {"matplotlib.pyplot": _patch_pyplot, "linecache": _fill_linecache}

    def find_spec(self, name, path=None, target=None):
        then = self.watch.get(name)
        if then is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            then(module)

        spec.loader.exec_module = exec_module
        return spec


def _run_once(code, main_module):
    """The interpreter's only call, run as `python3 -` runs a script; never
    returns."""
    global _running
    sys.argv = ["-"]
    main_module.__file__ = "<stdin>"
    try:
        compiled = compile(code, "<stdin>", "exec")
    except (SyntaxError, ValueError, OverflowError) as exc:
        _report(exc, frames=False)
        _exit_once(1)
    try:
        try:
            _running = True
            _send("start")
            exec(compiled, main_module.__dict__)
        finally:
            _running = False
    except SystemExit as exc:
        _exit_once(_exit_code(exc))
    except KeyboardInterrupt as exc:
        _report(exc)
        _exit_once(None)
    except BaseException as exc:
        _report(exc)
        _exit_once(1)
    _exit_once(0)


def _exit_once(status):
    """Ends a one-shot interpreter as its exit would (non-daemon threads
    joined, then atexit handlers, the streams flushed), with `status`, or by
    SIGINT when None (after a KeyboardInterrupt), without the interpreter's
    finalization: the jail is killed next, and the answer waits for this
    exit."""
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit

    atexit._run_exitfuncs()
    _flush()
    if status is None:
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGINT)
        status = 130
    os._exit(status)


def main():
    _signal.signal(_signal.SIGINT, _on_sigint)
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.meta_path.insert(0, _AfterImport())
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    sys.argv = [""]
    sys.path[0] = ""  # the working directory, as in the interactive interpreter
    main_module = types.ModuleType("__main__")
    main_module.__builtins__ = __builtins__
    sys.modules["__main__"] = main_module
    number = 0
    while True:
        code = _receive()
        if code is None:
            return
        if code == "":
            code = _receive()
            if code is None:
                return
            _run_once(code, main_module)
        number += 1
        status = _run(code, main_module.__dict__, number)
        if os.getpid() != _PID:
            # A child forked by the code came back here: it is not the driver.
            _flush()
            os._exit(0)
        _flush()
        _send("done %d" % status)


main()
