# Takes pkgs and lib.mkSandbox; returns the end-to-end tests' own
# environments: `custom`, a Python with jq added and small tmpfs limits, and
# `online`, the same with network = true.
{ pkgs, mkSandbox }:
let
  custom = {
    name = "custom";
    interpreter = "python";
    description = "Python with jq";
    packages = [
      pkgs.python3
      pkgs.jq
    ];
    limits = {
      tmp_mb = 8;
      workspace_mb = 8;
    };
  };
in
{
  custom = mkSandbox pkgs custom;
  online = mkSandbox pkgs (
    custom
    // {
      name = "online";
      network = true;
    }
  );
}
