# Takes jail.nix (the flake input); returns the library: mkSandbox,
# mkServer and mkAgentSandbox (each takes pkgs first), the bundled agents
# (pkgs -> { NAME = mkAgentSandbox arguments without `name`; }), the bundled presets and those served
# only when named (each a function from pkgs to mkSandbox arguments), and
# the compiled languages an environment's `program` may be, and the
# built-in profiles (mkServer's default `profiles`).
{ jail-nix }:
{
  mkSandbox = import ./mkSandbox.nix { inherit jail-nix; };
  mkServer = import ./mkServer.nix { inherit jail-nix; };
  mkAgentSandbox = import ./mkAgentSandbox.nix { inherit jail-nix; };
  agents = import ./agents.nix;
  presets = import ../presets;
  optionalPresets = import ../presets/optional.nix;
  languages = import ./languages;
  profiles = import ../presets/profiles.nix;
}
