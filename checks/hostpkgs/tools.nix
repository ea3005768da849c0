# The host's tools hostpkgs offers, by nixpkgs attribute name. Takes nothing;
# returns, for each, the Debian packages whose files it holds (the first one
# gives the version), its mainProgram, extra aliases (bin/name = a link to
# bin/target), the other hostpkgs packages its postInstall reads (by name,
# as $NAME), and postInstall, shell run after the files are copied and
# patched (hostTool.nix). Runtime data a program looks for at a path of the
# host is put in the closure here, and the program pointed at it.
{
  # Every other package's loader and C library (hostTool.nix), and the
  # locale the jails set, C.UTF-8 (libc-bin's; nixpkgs' glibc has it too).
  glibc = {
    debs = [ "libc6" ];
    postInstall = ''
      mkdir -p "$out/lib/locale"
      cp -r /usr/lib/locale/C.utf8 "$out/lib/locale/"
    '';
  };
  bash = {
    debs = [ "bash" ];
    mainProgram = "bash";
    aliases.sh = "bash";
  };
  bubblewrap = {
    debs = [ "bubblewrap" ];
    mainProgram = "bwrap";
    # Debian's C library finds locales only in /usr/lib/locale, where
    # nixpkgs' finds them in its own store path: every jail shows glibc's
    # (a path of its closure) there, so that C.UTF-8 loads. Nothing else.
    postInstall = ''
      mkdir -p "$out/libexec"
      mv "$out/bin/bwrap" "$out/libexec/bwrap"
      printf '#!%s\nexec %s --ro-bind %s /usr/lib/locale "$@"\n' \
        "$shell/bin/sh" "$out/libexec/bwrap" "$glibc/lib/locale" >"$out/bin/bwrap"
      chmod +x "$out/bin/bwrap"
    '';
  };
  coreutils.debs = [ "coreutils" ];
  curl = {
    debs = [ "curl" ];
    mainProgram = "curl";
  };
  diffutils.debs = [ "diffutils" ];
  fd = {
    debs = [ "fd-find" ];
    mainProgram = "fd";
    aliases.fd = "fdfind";
  };
  file = {
    debs = [
      "file"
      "libmagic1"
      "libmagic-mgc"
    ];
    mainProgram = "file";
    # libmagic reads /usr/share/misc/magic; point it at the closure's copy.
    postInstall = ''
      mv "$out/bin/file" "$out/bin/.file-wrapped"
      printf '#!%s\nexport MAGIC="''${MAGIC:-%s}"\nexec -a "$0" %s "$@"\n' \
        "$shell/bin/bash" "$out/lib/file/magic.mgc" "$out/bin/.file-wrapped" >"$out/bin/file"
      chmod +x "$out/bin/file"
    '';
  };
  findutils.debs = [ "findutils" ];
  gawk = {
    debs = [ "gawk" ];
    mainProgram = "gawk";
    aliases.awk = "gawk";
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
      "libpython3.11-minimal"
      "libpython3.11-stdlib"
    ];
    mainProgram = "python3";
    aliases.python = "python3";
    inputs = [ "tzdata" ];
    # zoneinfo's time zones: tzdata's (as nixpkgs' python3 has them), not
    # the host's /usr/share/zoneinfo. Then the standard library compiled:
    # the store is read-only in a jail, so Python could not cache it there,
    # and hash-checked .pyc files hold whatever mtime the store gives.
    postInstall = ''
      sysconfig=$out/lib/python3.11/_sysconfigdata__x86_64-linux-gnu.py
      sed -i "s|'TZPATH': '[^']*'|'TZPATH': '$tzdata/share/zoneinfo'|" "$sysconfig"
      grep -q "'TZPATH': '$tzdata/share/zoneinfo'" "$sysconfig"
      "$out/bin/python3" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$out/lib/python3.11"
    '';
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
  tzdata.debs = [ "tzdata" ];
}
