# The compiled languages an environment's `program` (environment.nix) may
# be, by name: each a table of its language, file, build and run.
{
  go = import ./go.nix;
  rust = import ./rust.nix;
  java = import ./java.nix;
  c = import ./c.nix;
  cpp = import ./cpp.nix;
}
