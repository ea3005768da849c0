# The host's tools hostpkgs offers, by nixpkgs attribute name. Takes nothing;
# returns, for each, the Debian packages whose programs its bin/ links to
# (the first one gives the version), its mainProgram, extra aliases
# (name = absolute target) and shims (name = script text).
{
  bash = {
    debs = [ "bash" ];
    mainProgram = "bash";
    aliases.sh = "/usr/bin/bash";
  };
  bubblewrap = {
    debs = [ "bubblewrap" ];
    mainProgram = "bwrap";
    # The host's interpreters are linked against the host's /usr: every jail
    # shows it read-only, before the jail's own arguments; and the two /etc
    # entries the host's Python modules read (pythonPackages.nix): numpy
    # finds its BLAS through /etc/alternatives, matplotlib reads
    # /etc/matplotlibrc.
    shims.bwrap = ''
      #!/bin/sh
      exec /usr/bin/bwrap --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
        --ro-bind-try /etc/alternatives /etc/alternatives \
        --ro-bind-try /etc/matplotlibrc /etc/matplotlibrc "$@"
    '';
  };
  coreutils.debs = [ "coreutils" ];
  diffutils.debs = [ "diffutils" ];
  fd = {
    debs = [ "fd-find" ];
    mainProgram = "fd";
    aliases.fd = "/usr/bin/fdfind";
  };
  file = {
    debs = [ "file" ];
    mainProgram = "file";
  };
  findutils.debs = [ "findutils" ];
  gawk = {
    debs = [ "gawk" ];
    mainProgram = "gawk";
    aliases.awk = "/usr/bin/gawk";
  };
  gnugrep = {
    debs = [ "grep" ];
    mainProgram = "grep";
  };
  gnused = {
    debs = [ "sed" ];
    mainProgram = "sed";
  };
  gnutar = {
    debs = [ "tar" ];
    mainProgram = "tar";
  };
  gzip = {
    debs = [ "gzip" ];
    mainProgram = "gzip";
  };
  jq = {
    debs = [ "jq" ];
    mainProgram = "jq";
  };
  nix = {
    debs = [ "nix-bin" ];
    mainProgram = "nix";
  };
  nodejs = {
    debs = [ "nodejs" ];
    mainProgram = "node";
  };
  python3 = {
    debs = [
      "python3-minimal"
      "python3.11-minimal"
    ];
    mainProgram = "python3";
    aliases.python = "/usr/bin/python3";
  };
  ripgrep = {
    debs = [ "ripgrep" ];
    mainProgram = "rg";
  };
  shadow.debs = [
    "passwd"
    "login"
  ];
  shellcheck = {
    debs = [ "shellcheck" ];
    mainProgram = "shellcheck";
  };
  tree = {
    debs = [ "tree" ];
    mainProgram = "tree";
  };
}
