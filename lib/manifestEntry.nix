# Takes an evaluated environment (evalEnvironment.nix), the sandbox's store
# path (a placeholder while it builds) and the nixpkgs revision (or null);
# returns the sandbox's manifest, version 1 with this one environment
# (docs/contracts.md contract 1), as an attribute set.
#
# `kernel_budgets` states the jail's share of its host user's per-user
# kernel counters (kernelBudgets.nix). `packages` names what the model can use: a Python made by
# python3.withPackages (a buildEnv whose passthru has `python` and
# `paths`) is listed as that Python and the Python modules in it (those
# with `pythonModule`: the chosen ones first, then what they need), not as
# one `python3-3.12.8-env` that tells the model nothing.
{
  environment,
  storePath,
  nixpkgsRev,
}:
let
  inherit (environment) name interpreter;
  names =
    package:
    if package ? python && package ? paths then
      [ package.python.name ]
      ++ map (module: module.name) (builtins.filter (path: path ? pythonModule) package.paths)
    else
      [ package.name ];
  # `network` as contract 1 has it: a boolean, or the policy with its
  # credentials' sources (never their secrets) and placeholders.
  network =
    let
      policy = environment.network;
    in
    if builtins.isBool policy then
      policy
    else
      {
        allow = map (rule: {
          inherit (rule)
            host
            port
            paths
            methods
            credentials
            ;
        }) policy.allow;
        credentials = builtins.mapAttrs (var: credential: {
          placeholder = (import ./egress.nix).placeholder var;
          from_file = credential.fromFile;
          from_env = credential.fromEnv;
          inherit (credential) headers;
        }) policy.credentials;
        ca_bundle = if policy.caBundle == null then null else toString policy.caBundle;
      };
  # The first of each name, in order.
  unique = builtins.foldl' (seen: name: if builtins.elem name seen then seen else seen ++ [ name ]) [ ];
in
{
  version = 1;
  environments.${name} = {
    inherit (environment)
      description
      interpreter
      limits
      ;
    inherit network;
    # Ports a session may publish to the host (jail/kernelBudgets.nix
    # makes their jail's network namespace and the forwarder).
    inherit (environment) publish;
    run = [ "${storePath}/bin/sandbox-${name}" ] ++ (import ./interpreters.nix).${interpreter}.runArgs;
    session = [ "${storePath}/bin/sandbox-${name}-session" ];
    packages = unique (builtins.concatMap names environment.packages);
    # What jail/kernelBudgets.nix holds the jail to, for the launcher's
    # probe: the namespace limits by their sysctl's name, the rlimits by
    # theirs.
    kernel_budgets = (import ./kernelBudgets.nix).sysctls // (import ./kernelBudgets.nix).rlimits;
    # The wrappers mount a session's copy-on-write project layer when the
    # launcher names one (jail/projectMount.nix, NIX_SANDBOX_PROJECT_LAYER).
    project_layer = true;
    # The session wrapper keeps /workspace on a session layer the launcher
    # names (jail/workspace.nix, NIX_SANDBOX_LAYER): checkpoints and forks.
    session_layer = true;
    store_path = storePath;
    nixpkgs_rev = nixpkgsRev;
  }
  # How the launcher's probe runs bash in a program environment's jail.
  // (
    if interpreter == "program" then
      {
        shell = [
          "${storePath}/bin/sandbox-${name}"
          "--shell"
          "-s"
        ];
      }
    else
      { }
  );
}
