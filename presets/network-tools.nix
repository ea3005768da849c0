# Takes pkgs; returns the mkSandbox arguments of the `network-tools`
# environment, which a server serves when asked for by name (mkServer's
# `presets`, the modules' `presets`): bash with curl, dig, netcat,
# openssl and iproute2. Its network is a policy that allows nothing until
# the user adds hosts (`network.allow`): HTTP and HTTPS to those go
# through the server's egress proxy (curl honours HTTP_PROXY and
# HTTPS_PROXY); DNS (dig), raw TCP and UDP (nc), and `openssl s_client`
# need `network = true`, the host's network.
pkgs: {
  name = "network-tools";
  interpreter = "bash";
  description = "Bash with curl, dig, nc, openssl, ip. HTTP(S) only to allowed hosts, through a proxy.";
  packages = with pkgs; [
    bash
    coreutils
    gnugrep
    gnused
    curl
    dnsutils
    netcat
    openssl
    iproute2
  ];
  network.allow = [ ];
}
