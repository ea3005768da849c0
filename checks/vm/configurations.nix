# Takes pkgs and the offline harness's module evaluators (checks/eval/modules.nix:
# `nixos` and `home`, each a list of modules to an evaluated configuration);
# returns what the VM test (checks/vm/run) boots with:
#   service:  the unit file of services.nix-sandbox-mcp as the docs'
#             NixOS snippet configures it, plus an `online` environment
#             (network = true), rendered from the evaluated
#             systemd.services entry by unit.nix;
#   mcp-json: ~/.config/mcp/mcp.json as home-manager writes it for the
#             docs' home-manager snippet plus a `tight` environment
#             (cpu_s = 4, for a session's CPU budget), the server and its
#             env;
#   languages: the server of a home-manager configuration that turns on
#             the language presets by name (go, rust, java, c, cpp and
#             network-tools) and drops the bundled three, each language's
#             `timeout_s` and `cpu_s` raised through the same option set
#             (`emulatedLimits`), so that a build under an emulated CPU
#             (TCG is 25 to 40 times slower than the host) ends within its
#             run: what checks/vm/tests/languages.py serves to
#             checks/languages.py.
{
  pkgs,
  nixos,
  home,
}:
let
  system = nixos [
    ../eval/snippets/nixos.nix
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
    ../eval/snippets/home-manager.nix
    {
      programs.nix-sandbox-mcp.environments.tight = {
        interpreter = "python";
        description = "Python with a CPU budget of 4 s";
        packages = [ pkgs.python3 ];
        limits.cpu_s = 4;
      };
    }
  ];
  # A build's wall time and CPU time under the guest's emulated CPUs; a
  # session's cpu_s counts every build of its calls together.
  emulatedLimits = {
    timeout_s = 100;
    cpu_s = 600;
  };
  compiled = [
    "go"
    "rust"
    "java"
    "c"
    "cpp"
  ];
  languages = home [
    {
      programs.nix-sandbox-mcp = {
        enable = true;
        presets = compiled ++ [ "network-tools" ];
        environments =
          pkgs.lib.genAttrs compiled (_: {
            limits = emulatedLimits;
          })
          // {
            python.enable = false;
            shell.enable = false;
            node.enable = false;
          };
      };
    }
  ];
in
{
  service = pkgs.writeText "nix-sandbox-mcp.service" (
    import ./unit.nix pkgs.lib system.systemd.services.nix-sandbox-mcp
  );
  mcp-json = user.xdg.configFile."mcp/mcp.json".source;
  languages = languages.programs.nix-sandbox-mcp.finalPackage;
}
