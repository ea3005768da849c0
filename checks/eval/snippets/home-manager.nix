# home.nix: programs.nix-sandbox-mcp in a home-manager configuration that
# imports nix-sandbox-mcp.homeManagerModules.default.
{ pkgs, ... }:
{
  programs.nix-sandbox-mcp = {
    enable = true;
    environments.data-science = {
      interpreter = "python";
      description = "Python with numpy and pandas";
      packages = [
        (pkgs.python3.withPackages (ps: [
          ps.numpy
          ps.pandas
        ]))
      ];
      limits.memory_mb = 2048;
    };
    environments.node.enable = false;
    projectDir = "/home/alice/src/project";
  };
  # Then each client that should see it: programs.claude-code.enableMcpIntegration = true;
}
