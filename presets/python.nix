# Takes pkgs; returns the mkSandbox arguments of the bundled `python`
# environment: CPython and its standard library.
pkgs: {
  name = "python";
  interpreter = "python";
  description = "Python, standard library only";
  packages = [ pkgs.python3 ];
}
