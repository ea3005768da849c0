# Takes pkgs and lib.mkSandbox; returns the end-to-end tests' own
# environments: `custom`, a Python with jq added and small tmpfs limits,
# `online`, the same with network = true, `science`, a Python with numpy
# (python3.withPackages, for sessions.py) whose sessions may publish port
# 8000, `plots`, a Python with numpy and
# matplotlib (for artifacts.py's plt.show()), the adversarial suite's
# `tight-python` and `tight-shell`, with limits small enough to hit fast,
# and `egress`, a Python with pip and curl whose network is a policy (egress.py:
# the test's own hosts, path rules with and without a credential, a
# credential on the TLS port, names of special-purpose addresses).
{ pkgs, mkSandbox }:
let
  # Files hit file_mb in /workspace and the tmpfs size in /tmp.
  tight = {
    timeout_s = 20;
    # What a call may ask for with `timeout_s`: a little past the default,
    # so that the cut is reached fast.
    max_timeout_s = 24;
    memory_mb = 256;
    pids = 64;
    cpu_s = 3;
    file_mb = 32;
    nofile = 128;
    tmp_mb = 16;
    workspace_mb = 64;
    output_bytes = 16384;
  };
  custom = {
    name = "custom";
    interpreter = "python";
    description = "Python with jq";
    packages = [
      pkgs.python3
      pkgs.jq
    ];
    limits = {
      tmp_mb = 8;
      workspace_mb = 8;
    };
  };
in
{
  custom = mkSandbox pkgs custom;
  online = mkSandbox pkgs (
    custom
    // {
      name = "online";
      network = true;
    }
  );
  science = mkSandbox pkgs {
    name = "science";
    interpreter = "python";
    description = "Python with numpy";
    packages = [ (pkgs.python3.withPackages (ps: [ ps.numpy ])) ];
    publish = [ 8000 ];
  };
  plots = mkSandbox pkgs {
    name = "plots";
    interpreter = "python";
    description = "Python with numpy and matplotlib";
    packages = [
      (pkgs.python3.withPackages (ps: [
        ps.numpy
        ps.matplotlib
      ]))
    ];
  };
  egress = mkSandbox pkgs {
    name = "egress";
    interpreter = "python";
    description = "Python with pip and curl, network by policy";
    packages = [
      (pkgs.python3.withPackages (ps: [ ps.pip ]))
      pkgs.curl
    ];
    network = {
      allow = [
        { host = "allowed.test"; }
        {
          host = "*.wild.test";
          port = 8443;
        }
        # Resolves to loopback: refused all the same.
        { host = "loop.test"; }
        {
          host = "api.test";
          paths = [ "/v1/" ];
          methods = [ "GET" ];
          credentials = [ "API_TOKEN" ];
        }
        # A path rule without a credential, over HTTP and HTTPS.
        {
          host = "paths.test";
          paths = [ "/v1/" ];
        }
        # A credential pinned to the TLS port, asked for in cleartext.
        {
          host = "clear.test";
          port = 443;
          credentials = [ "API_TOKEN" ];
        }
      ]
      # Names that resolve to special-purpose addresses: refused all the same.
      ++ map (host: { inherit host; }) [
        "bench.test"
        "ietf.test"
        "sixtofour.test"
        "siit.test"
        "nat64.test"
        "doc6.test"
      ];
      credentials.API_TOKEN.fromEnv = "NSM_EGRESS_SECRET";
    };
  };
  tight-python = mkSandbox pkgs {
    name = "tight-python";
    interpreter = "python";
    packages = [ pkgs.python3 ];
    limits = tight;
  };
  tight-shell = mkSandbox pkgs {
    name = "tight-shell";
    interpreter = "bash";
    packages = with pkgs; [
      bash
      coreutils
    ];
    limits = tight;
  };
}
