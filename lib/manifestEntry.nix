# Takes an evaluated environment (evalEnvironment.nix), the sandbox's store
# path (a placeholder while it builds) and the nixpkgs revision (or null);
# returns the sandbox's manifest, version 1 with this one environment
# (CONTRIBUTING.md contract 1), as an attribute set.
{
  environment,
  storePath,
  nixpkgsRev,
}:
let
  inherit (environment) name interpreter;
in
{
  version = 1;
  environments.${name} = {
    inherit (environment)
      description
      interpreter
      limits
      network
      ;
    run = [ "${storePath}/bin/sandbox-${name}" ] ++ (import ./interpreters.nix).${interpreter}.runArgs;
    session = [ "${storePath}/bin/sandbox-${name}-session" ];
    packages = map (package: package.name) environment.packages;
    store_path = storePath;
    nixpkgs_rev = nixpkgsRev;
  };
}
