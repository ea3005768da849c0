# Takes the names of the environment's own variables, then jail.nix's
# combinators; returns the permission of a jail in the
# host's network namespace. It is jail.nix's `network` with one change:
# jail.nix binds /etc/ssl entry by entry, two processes (stat, realpath)
# for each, so a host with a few hundred certificate links (Debian's
# /etc/ssl/certs, or a JDK's) took over a second to start every jail, and
# the links it made pointed at files the jail did not have. Here each CA
# bundle where a distribution keeps it is bound as one file, its symlinks
# followed by bubblewrap, with no process started: what TLS clients read
# (OpenSSL, nixpkgs' default `/etc/ssl/certs/ca-certificates.crt`, curl,
# Java's `cacerts`). Not bound: the hashed certificate directory (NixOS
# has none either; every client reads the bundle) and /etc/ssl/private.
# SSL_CERT_FILE and NIX_SSL_CERT_FILE name the first bundle found, so that
# clients whose built-in path is another distribution's (or a store
# path's) verify with the host's CAs too; the environment's own `env`
# (the names in `own`) keeps its values.
own: c:
let
  bundles = [
    "/etc/ssl/certs/ca-certificates.crt"
    "/etc/ssl/certs/ca-bundle.crt"
    "/etc/pki/tls/certs/ca-bundle.crt"
    "/etc/ssl/cert.pem"
    "/etc/pki/tls/cert.pem"
  ];
  tls = bundles ++ [
    "/etc/ssl/openssl.cnf"
    "/etc/ssl/certs/java/cacerts"
  ];
  named = builtins.filter (var: !(builtins.elem var own)) [
    "SSL_CERT_FILE"
    "NIX_SSL_CERT_FILE"
  ];
in
c.include-once "network" (
  state:
  c.compose (
    [
      c.time-zone
      (c.share-ns "net")
      (c.runtime-deep-ro-bind "/etc/hosts")
      (c.runtime-deep-ro-bind "/etc/nsswitch.conf")
      (c.runtime-deep-ro-bind "/etc/resolv.conf")
      (c.try-readonly "/run/systemd/resolve")
      (c.write-text "/etc/hostname" "${state.hostname}\n")
      (c.unsafe-add-raw-args "--hostname ${c.escape state.hostname}")
    ]
    ++ map (file: c.add-runtime ''
      if [ -r ${file} ]; then RUNTIME_ARGS+=(--ro-bind ${file} ${file}); fi
    '') tls
    ++ [
      (c.add-runtime ''
        for bundle in ${builtins.concatStringsSep " " bundles}; do
          if [ -r "$bundle" ]; then
            RUNTIME_ARGS+=(${builtins.concatStringsSep " " (map (var: ''--setenv ${var} "$bundle"'') named)})
            break
          fi
        done
      '')
    ]
  ) state
)
