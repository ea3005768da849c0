# The interpreters an environment can drive, by manifest `interpreter`: the
# program its packages must provide, the arguments of an ephemeral run that
# takes the whole script from stdin before running it (so the script reading
# stdin gets EOF), and the session agent's driver file for it (agent/drivers).
# `program` has no program of its packages: its run wrapper's entry is the
# environment's program runner (programRunner.nix), which its driver calls
# too, and bash runs the driver. `compileDriver`, where present: the file
# that compiles the driver with the environment's own interpreter
# (compilePythonDriver.nix), so that no session start compiles it.
{
  python = {
    program = "python3";
    runArgs = [ "-" ];
    driver = "python.py";
    compileDriver = ./compilePythonDriver.nix;
  };
  bash = {
    program = "bash";
    runArgs = [
      "-c"
      "source /dev/stdin"
    ];
    driver = "bash.sh";
  };
  node = {
    program = "node";
    runArgs = [ "-" ];
    driver = "node.js";
  };
  program = {
    program = null;
    runArgs = [ ];
    driver = "program.sh";
  };
}
