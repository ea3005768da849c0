# The environments a server serves only when asked for by name (mkServer's
# `presets`, the modules' `presets`), so that the default tool surface
# stays the bundled three: each takes pkgs and returns mkSandbox arguments.
{
  go = import ./go.nix;
  rust = import ./rust.nix;
  java = import ./java.nix;
  c = import ./c.nix;
  cpp = import ./cpp.nix;
  network-tools = import ./network-tools.nix;
}
