# The bundled environments, by name; each takes pkgs and returns mkSandbox
# arguments.
{
  python = import ./python.nix;
  shell = import ./shell.nix;
  node = import ./node.nix;
}
