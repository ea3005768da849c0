# Takes pkgs; returns the mkSandbox arguments of the bundled `python`
# environment: CPython and its standard library. MPLBACKEND=Agg keeps
# matplotlib headless when packages add it (the module option replacing
# `packages` keeps this `env`); in sessions and runs with files, the
# agent's Python driver also makes plt.show() save to /workspace/outputs.
pkgs: {
  name = "python";
  interpreter = "python";
  description = "Python, standard library only";
  packages = [ pkgs.python3 ];
  env.MPLBACKEND = "Agg";
}
