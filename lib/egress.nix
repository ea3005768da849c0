# Takes nothing; returns the constants the jail's side of network by policy
# shares between the manifest (manifestEntry.nix) and the jail
# (jail/network.nix): where the egress proxy's socket and the jail's CA
# bundle are bound in the jail, the port the bridge serves there, and the
# placeholder a credential's variable holds in place of its secret.
{
  socket = "/run/nix-sandbox/egress.sock";
  bundle = "/run/nix-sandbox/ca.pem";
  port = 3128;
  placeholder = var: "nix-sandbox-placeholder-${var}";
}
