# configuration.nix: with nix-sandbox-mcp.nixosModules.default imported.
{ pkgs, ... }:
{
  programs.nix-sandbox-mcp = {
    enable = true;
    environments.data-science = {
      interpreter = "python";
      packages = [
        (pkgs.python3.withPackages (ps: [
          ps.numpy
          ps.pandas
        ]))
      ];
    };
  };
  services.nix-sandbox-mcp = {
    enable = true; # MCP over HTTP at http://127.0.0.1:8765/mcp
    tokenFile = "/run/secrets/nix-sandbox-mcp-token"; # not in the Nix store
  };
}
