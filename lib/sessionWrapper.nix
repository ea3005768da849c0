# Takes pkgs, jail.nix's `jail`, an evaluated environment
# (evalEnvironment.nix), its profile (one tree of its packages), its
# jail's policy (what jail/default.nix returns, one permission) and its
# program runner (programRunner.nix; null unless its interpreter is
# `program`, whose driver calls it and which bash runs); returns
# the session wrapper, bin/sandbox-NAME-session (docs/contracts.md, contract 3): the same
# jail as the run wrapper, with the session agent (package.nix) as its entry
# and the jail's pid 1.
# The agent drives the environment's own interpreter from the profile (so
# the environment's packages import in a session too) through its driver
# file from agent/drivers, copied into the store (compiled by that
# interpreter where interpreters.nix names a `compileDriver`). It takes no arguments:
# the launcher's frames come on stdin and go out on stdout.
{
  pkgs,
  jail,
  environment,
  profile,
  policy,
  runner,
}:
let
  interpreter = (import ./interpreters.nix).${environment.interpreter};
  agent = pkgs.callPackage ../package.nix { };
  driverFile = ../agent/drivers + "/${interpreter.driver}";
  driverSource = builtins.path {
    path = driverFile;
    name = "nix-sandbox-mcp-${interpreter.driver}";
  };
  driver =
    if interpreter ? compileDriver then
      import interpreter.compileDriver {
        inherit pkgs;
        python = "${profile}/bin/${interpreter.program}";
        source = driverSource;
      }
    else if runner == null then
      driverSource
    else
      pkgs.writeText "nix-sandbox-mcp-${environment.name}-${interpreter.driver}" (
        builtins.replaceStrings [ "@runner@" ] [ "${runner}/bin/sandbox-${environment.name}-program" ] (
          builtins.readFile driverFile
        )
      );
  program = if runner == null then "${profile}/bin/${interpreter.program}" else "${pkgs.bash}/bin/bash";
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
    program
    "--driver"
    "${driver}"
  ])
])
