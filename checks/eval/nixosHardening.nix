# The systemd settings services.nix-sandbox-mcp must have (the offline
# harness checks the unit against them; see modules/nixos.nix for why each
# namespace-related one is what it is).
{
  DynamicUser = true;
  StateDirectory = "nix-sandbox-mcp";
  ProtectSystem = "strict";
  ProtectHome = true;
  PrivateTmp = true;
  NoNewPrivileges = true;
  RestrictAddressFamilies = [
    "AF_UNIX"
    "AF_INET"
    "AF_INET6"
    "AF_NETLINK"
  ];
  RestrictNamespaces = false;
  PrivateUsers = false;
  Delegate = true;
  # bwrap --hostname (network = true jails) needs sethostname.
  ProtectHostname = false;
  # More than systemd's 1,024: every jail's network gate may hold 128.
  LimitNOFILE = 65536;
}
