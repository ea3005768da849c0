# Takes pkgs and the flake's library; returns the servers the packages on
# demand tests serve (checks/e2e/packages.py): `packages-server`, the python
# and shell presets with an allowlist (jq, ripgrep, hello, slowBuild and
# every python3Packages module) and building on, as the harness must (its Nix
# has no binary cache, so nothing could be substituted), and
# `packages-nobuild`, the python preset taking any attribute from the
# binary cache only, which shows what a package that is not there gets.
{ pkgs, sandboxLib }:
let
  python = sandboxLib.presets.python pkgs;
in
{
  packages-server = sandboxLib.mkServer pkgs {
    environments = [
      python
      (sandboxLib.presets.shell pkgs)
    ];
    packagesOnDemand = {
      allow = [
        "jq"
        "ripgrep"
        "hello"
        "slowBuild"
        "python3Packages."
      ];
      build = true;
      timeoutSeconds = 600;
    };
  };
  packages-nobuild = sandboxLib.mkServer pkgs {
    environments = [ python ];
    packagesOnDemand.allow = "any";
  };
}
