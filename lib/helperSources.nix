# Takes pkgs and what needs them (for the error: "packagesOnDemand");
# returns { source, nixpkgs, system }: the store paths a helper of the
# server evaluates again (this flake's source, the nixpkgs the server is
# built with, as the same store paths as this evaluation's, so that what
# is unchanged is the same derivation and is not built again) and the
# system, which the server's recipes carry.
pkgs: what: {
  source = builtins.path {
    path = ../.;
    name = "source";
  };
  nixpkgs =
    if !(pkgs ? path) then
      throw "mkServer: `${what}` needs pkgs.path, the source of the nixpkgs the server is built with"
    else if builtins.isPath pkgs.path then
      builtins.path {
        path = pkgs.path;
        name = "source";
      }
    else
      pkgs.path;
  system = pkgs.stdenv.hostPlatform.system or pkgs.system;
}
