# Takes pkgs, jail.nix's `jail`, an evaluated environment
# (evalEnvironment.nix), its profile (one tree of its packages) and its
# jail's policy (what jail/default.nix returns, one permission); returns
# the session wrapper, bin/sandbox-NAME-session (docs/contracts.md, contract 3): the same
# jail as the run wrapper, with the session agent (package.nix) as its entry
# and the jail's pid 1.
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
  # The agent is the jail's pid 1 (the entry's script execs it), not a
  # bubblewrap init: that init would keep the launcher's pipes as its stdin
  # and stdout, open to the jail's processes (same user, dumpable) through
  # /proc/1/fd. The kernel also drops every signal sent to a pid
  # namespace's init from inside it unless init handles it, and the agent
  # handles none. The agent reaps orphans itself (agent/src/init.rs);
  # --die-with-parent still applies to it, so killing the wrapper ends it,
  # and with it every process of the jail.
  (c.unsafe-add-raw-args "--as-pid-1")
  (c.set-argv [
    "--interpreter"
    environment.interpreter
    "--program"
    "${profile}/bin/${interpreter.program}"
    "--driver"
    "${driver}"
  ])
])
