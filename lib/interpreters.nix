# The interpreters an environment can drive, by manifest `interpreter`: the
# program its packages must provide, and the arguments of an ephemeral run
# that takes the whole script from stdin before running it (so the script
# reading stdin gets EOF).
{
  python = {
    program = "python3";
    runArgs = [ "-" ];
  };
  bash = {
    program = "bash";
    runArgs = [
      "-c"
      "source /dev/stdin"
    ];
  };
  node = {
    program = "node";
    runArgs = [ "-" ];
  };
}
