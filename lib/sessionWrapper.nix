# Takes pkgs, jail.nix's `jail`, an evaluated environment
# (evalEnvironment.nix), its profile (one tree of its packages) and its
# jail's policy (what jail/default.nix returns, one permission); returns
# the session wrapper, bin/sandbox-NAME-session (CONTRIBUTING.md, contract 3): the same
# jail as the run wrapper, with the session agent (package.nix) as its entry.
# The agent drives the environment's own interpreter from the profile (so
# the environment's packages import in a session too) through its driver
# file from agent/drivers, copied into the store. It takes no arguments:
# the launcher's frames come on stdin and go out on stdout.
{
  pkgs,
  jail,
  environment,
  profile,
  policy,
}:
let
  interpreter = (import ./interpreters.nix).${environment.interpreter};
  agent = pkgs.callPackage ../package.nix { };
  driver = builtins.path {
    path = ../agent/drivers + "/${interpreter.driver}";
    name = "nix-sandbox-mcp-${interpreter.driver}";
  };
in
jail "sandbox-${environment.name}-session" "${agent}/bin/agent" (c: [
  (policy c)
  (c.set-argv [
    "--interpreter"
    environment.interpreter
    "--program"
    "${profile}/bin/${interpreter.program}"
    "--driver"
    "${driver}"
  ])
])
