# Takes { pkgs, environment, ... } and jail.nix's combinators; returns the
# jail's network permission:
# - `network = true`: the host's network namespace, and the files name
#   resolution and TLS read (hostNetwork.nix);
# - `network = false`: nothing; the jail keeps a network namespace of its
#   own with only loopback in it;
# - a policy: the same namespace of its own, and the launcher's egress
#   proxy as its only way out. The run-time code binds the proxy's socket
#   ($NIX_SANDBOX_EGRESS_SOCKET, one per jail, made by the launcher) and the
#   jail's CA bundle ($NIX_SANDBOX_EGRESS_CA) into the jail, or stops the
#   wrapper with status 2 when the launcher gave none; the entry becomes the
#   agent package's egress-bridge, which serves the socket at
#   127.0.0.1:3128 and then execs the entry; the proxy variables of
#   curl, pip, npm, git, Python and Node point there, their CA variables
#   at the bundle, and each credential's variable holds its placeholder.
#   With NIX_SANDBOX_NETWORK_OFF=1 (the launcher's, for a session whose
#   profile takes the network away) nothing is required or bound: the
#   bridge still serves 127.0.0.1:3128, and each connection to it is
#   closed at once, since no socket is there to carry it to.
# With NIX_SANDBOX_NETWORK_OFF=1, `network = true` loses the host's
# namespace in kernelBudgets.nix; `network = false` has none to lose.
{ pkgs, environment, ... }:
c:
let
  inherit (environment) network name;
  egress = import ../egress.nix;
  proxy = "http://127.0.0.1:${toString egress.port}";
  bridge = "${pkgs.callPackage ../../package.nix { }}/bin/egress-bridge";
  proxyVars = [
    "HTTP_PROXY"
    "HTTPS_PROXY"
    "ALL_PROXY"
    "http_proxy"
    "https_proxy"
    "all_proxy"
    "npm_config_proxy"
    "npm_config_https_proxy"
  ];
  bundleVars = [
    "SSL_CERT_FILE"
    "REQUESTS_CA_BUNDLE"
    "NODE_EXTRA_CA_CERTS"
    "PIP_CERT"
    "CURL_CA_BUNDLE"
    "GIT_SSL_CAINFO"
    "npm_config_cafile"
  ];
in
if network == true then
  import ./hostNetwork.nix (builtins.attrNames environment.env) c
else if network == false then
  c.compose [ ]
else
  c.compose (
    [
      (c.add-runtime ''
        if [ "''${NIX_SANDBOX_NETWORK_OFF:-}" != 1 ]; then
          if [ -z "''${NIX_SANDBOX_EGRESS_SOCKET:-}" ] || [ ! -S "$NIX_SANDBOX_EGRESS_SOCKET" ]; then
            echo "sandbox-${name}: this environment's network policy needs the server's egress proxy (NIX_SANDBOX_EGRESS_SOCKET, a socket): run it through nix-sandbox-mcp" >&2
            exit 2
          fi
          RUNTIME_ARGS+=(--ro-bind "$NIX_SANDBOX_EGRESS_SOCKET" ${egress.socket})
          if [ -n "''${NIX_SANDBOX_EGRESS_CA:-}" ]; then
            RUNTIME_ARGS+=(--ro-bind "$NIX_SANDBOX_EGRESS_CA" ${egress.bundle})
          fi
        fi
      '')
      # Node's fetch follows the proxy variables when told to (releases
      # that read NODE_USE_ENV_PROXY; older ones ignore it and reach
      # nothing).
      (c.set-env "NODE_USE_ENV_PROXY" "1")
      (c.set-env "NO_PROXY" "localhost,127.0.0.1,::1")
      (c.set-env "no_proxy" "localhost,127.0.0.1,::1")
      (
        s:
        s
        // {
          entry = "${bridge} --listen 127.0.0.1:${toString egress.port} --socket ${egress.socket} -- ${s.entry}";
        }
      )
    ]
    ++ map (var: c.set-env var proxy) proxyVars
    ++ map (var: c.set-env var egress.bundle) bundleVars
    ++ pkgs.lib.mapAttrsToList (var: _: c.set-env var (egress.placeholder var)) network.credentials
  )
