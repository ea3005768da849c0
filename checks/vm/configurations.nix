# Takes pkgs and the offline harness's module evaluators (checks/modules.nix:
# `nixos` and `home`, each a list of modules to an evaluated configuration);
# returns what the VM test (checks/vm/run) boots with:
#   service:  the unit file of services.nix-sandbox-mcp as the docs'
#             NixOS snippet configures it, plus an `online` environment
#             (network = true), rendered from the evaluated
#             systemd.services entry by unit.nix;
#   mcp-json: ~/.config/mcp/mcp.json as home-manager writes it for the
#             docs' home-manager snippet plus a `tight` environment
#             (cpu_s = 4, for a session's CPU budget), the server and its
#             env.
{
  pkgs,
  nixos,
  home,
}:
let
  system = nixos [
    ../snippets/nixos.nix
    {
      programs.nix-sandbox-mcp.environments.online = {
        interpreter = "python";
        description = "Python with the host's network";
        packages = [ pkgs.python3 ];
        network = true;
      };
    }
  ];
  user = home [
    ../snippets/home-manager.nix
    {
      programs.nix-sandbox-mcp.environments.tight = {
        interpreter = "python";
        description = "Python with a CPU budget of 4 s";
        packages = [ pkgs.python3 ];
        limits.cpu_s = 4;
      };
    }
  ];
in
{
  service = pkgs.writeText "nix-sandbox-mcp.service" (
    import ./unit.nix pkgs.lib system.systemd.services.nix-sandbox-mcp
  );
  mcp-json = user.xdg.configFile."mcp/mcp.json".source;
}
