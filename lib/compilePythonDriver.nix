# Takes pkgs, an environment's python3 (a path) and the Python driver's
# source (agent/drivers/python.py, in the store); returns that driver
# compiled by that python3 into one .pyc file
# (agent/drivers/python-compile.py says how), which the session agent runs
# as `python3 DRIVER.pyc`: Python runs a .pyc as it would the source, but
# compiles nothing at each start (about 1.5 ms of a warm jail's CPU). A
# python3 that cannot compile it fails the build with its own error. With
# PYTHONHASHSEED 0, as nixpkgs compiles bytecode: the order of a set
# constant's items follows the string hash, so the file is the same on
# every build.
{
  pkgs,
  python,
  source,
}:
pkgs.runCommand "nix-sandbox-mcp-python.pyc" { PYTHONHASHSEED = "0"; } ''
  ${python} ${../agent/drivers/python-compile.py} ${source} "$out"
''
