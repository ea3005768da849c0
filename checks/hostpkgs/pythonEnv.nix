# Takes lib, buildEnv and hostpkgs' python3; returns python3.withPackages'
# result for a list of python3Packages (a derivation with bin/python3): a
# virtual environment (pyvenv.cfg, home = python3's bin/) whose
# lib/python3/dist-packages links the packages and the packages they
# propagate, so its python3 imports them, and only them, from the store;
# sys.executable and sys.prefix are the environment's, as with nixpkgs'.
# Its passthru has nixpkgs' `python` (and buildEnv's `paths`: the modules,
# the chosen ones first).
{
  lib,
  buildEnv,
  python3,
}:
packages:
let
  entry = package: {
    key = package.name;
    inherit package;
  };
  closure = builtins.genericClosure {
    startSet = map entry packages;
    operator = item: map entry (item.package.propagatedPythonPackages or [ ]);
  };
  majorMinor = lib.versions.majorMinor python3.version;
in
buildEnv {
  name = "python3-${python3.version}-env";
  paths = map (item: item.package) closure;
  pathsToLink = [ "/lib/python3/dist-packages" ];
  postBuild = ''
    mkdir -p "$out/bin"
    for program in python python3 python${majorMinor}; do
      ln -s ${python3}/bin/$program "$out/bin/$program"
    done
    printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' \
      ${python3}/bin ${python3.version} >"$out/pyvenv.cfg"
  '';
  meta.mainProgram = "python3";
  passthru.python = python3;
}
