# Compiles the Python driver (python.py) into the .pyc the session agent
# runs: `python3 python-compile.py SOURCE OUT`, by the environment's own
# python3 (a .pyc holds the magic number of the Python that wrote it).
# Unchecked hash (the store never changes, so nothing compares the
# source), and OUT named as the code's file: the driver compares its
# frames' file with `__file__` to leave them out of tracebacks.
# lib/compilePythonDriver.nix runs it at build time, the agent's tests
# before they drive the driver.
import py_compile
import sys

py_compile.compile(
    sys.argv[1],
    cfile=sys.argv[2],
    dfile=sys.argv[2],
    doraise=True,
    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
)
