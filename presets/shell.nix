# Takes pkgs; returns the mkSandbox arguments of the bundled `shell`
# environment: bash and the usual command-line tools.
pkgs: {
  name = "shell";
  interpreter = "bash";
  description = "Bash with the usual command-line tools";
  packages = with pkgs; [
    bash
    coreutils
    findutils
    gnugrep
    gnused
    gawk
    diffutils
    jq
    ripgrep
    fd
    tree
    file
    gnutar
    gzip
  ];
}
