# Takes jail.nix (the flake input); returns the library: mkSandbox and
# mkServer (each takes pkgs first) and the bundled presets (each a function
# from pkgs to mkSandbox arguments).
{ jail-nix }:
{
  mkSandbox = import ./mkSandbox.nix { inherit jail-nix; };
  mkServer = import ./mkServer.nix { inherit jail-nix; };
  presets = import ../presets;
}
