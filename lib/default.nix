# Takes jail.nix (the flake input); returns the library: mkSandbox and
# mkServer (each takes pkgs first), the bundled presets and those served
# only when named (each a function from pkgs to mkSandbox arguments), and
# the compiled languages an environment's `program` may be.
{ jail-nix }:
{
  mkSandbox = import ./mkSandbox.nix { inherit jail-nix; };
  mkServer = import ./mkServer.nix { inherit jail-nix; };
  presets = import ../presets;
  optionalPresets = import ../presets/optional.nix;
  languages = import ./languages;
}
