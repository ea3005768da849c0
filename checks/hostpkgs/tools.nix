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
    # bin/bwrap is a static program that adds that bind and execs Debian's
    # (bwrap.c), not a script: nixpkgs' bwrap starts no shell, so neither
    # does the stand-in (the host's C compiler, which cargo links with). On
    # x86_64 it has no C library either, whose start would be a second
    # program's that nixpkgs' bwrap does not pay.
    postInstall = ''
      mkdir -p "$out/libexec"
      mv "$out/bin/bwrap" "$out/libexec/bwrap"
      no_libc=()
      if [ "$(uname -m)" = x86_64 ]; then
        no_libc=(-DNO_LIBC -nostdlib -fno-stack-protector -fno-tree-loop-distribute-patterns)
      fi
      /usr/bin/cc -static -O2 -s "''${no_libc[@]}" -o "$out/bin/bwrap" \
        -DLIBEXEC_BWRAP="\"$out/libexec/bwrap\"" -DLOCALE="\"$glibc/lib/locale\"" ${./bwrap.c}
    '';
  };
  coreutils.debs = [ "coreutils" ];
  curl = {
    debs = [ "curl" ];
    mainProgram = "curl";
  };
  diffutils.debs = [ "diffutils" ];
  # bind9's dig, as nixpkgs' `dnsutils` (bind.dnsutils).
  dnsutils = {
    debs = [ "bind9-dnsutils" ];
    mainProgram = "dig";
  };
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
  # GCC with binutils, the C library's headers and start files, and the
  # C++ library: a compiler whose output runs in a jail. Like nixpkgs' cc
  # wrapper, bin/gcc, g++, cc and c++ are scripts that add the C library's
  # headers (include/, which Debian's gcc looks for in /usr/include only:
  # -idirafter) and link with the store's loader and libraries
  # (-dynamic-linker, -rpath): Debian's gcc would name /lib64's loader,
  # which no jail has. GCC finds its own files (cc1, crtbegin.o, the C++
  # headers, the start files in lib/) relative to where it runs from; the C
  # library's linker scripts (libc.so) name host paths, rewritten to the
  # store.
  gcc = {
    debs = [
      "gcc-12"
      "cpp-12"
      "g++-12"
      "libgcc-12-dev"
      "libstdc++-12-dev"
      "libstdc++6"
      "libgcc-s1"
      "libc6-dev"
      "libcrypt-dev"
      "linux-libc-dev"
      "binutils"
      "binutils-x86-64-linux-gnu"
    ];
    includes = true;
    mainProgram = "gcc";
    postInstall = ''
      for script in "$out"/lib/*.so; do
        if [ -f "$script" ] && [ ! -L "$script" ] && grep -q '^GROUP' "$script"; then
          sed -i -e "s|/usr/lib/x86_64-linux-gnu/|$out/lib/|g" \
            -e "s|/lib/x86_64-linux-gnu/|$glibc/lib/|g" -e "s|/lib64/|$glibc/lib/|g" "$script"
        fi
      done
      # The link flags only where the driver links (not with -c, -S, -E,
      # -M or a query), where they would be input of their own.
      for name in gcc g++; do
        real=$(readlink -f "$out/bin/x86_64-linux-gnu-$name-12")
        rm -f "$out/bin/$name" "$out/bin/$name-12"
        {
          echo "#!$shell/bin/bash"
          echo 'link=(-Wl,-dynamic-linker='"$glibc"'/lib/ld-linux-x86-64.so.2 -Wl,-rpath,'"$glibc"'/lib -Wl,-rpath,'"$out"'/lib)'
          echo '[ $# -gt 0 ] || link=()'
          echo 'for arg; do case $arg in -c | -S | -E | -M | -MM | -dump* | -print-* | --version | --help) link=() ;; esac; done'
          echo "exec $real -idirafter $out/include/x86_64-linux-gnu -idirafter $out/include \"\$@\" \"\''${link[@]}\""
        } >"$out/bin/$name"
        chmod +x "$out/bin/$name"
      done
      ln -s gcc "$out/bin/cc"
      ln -s g++ "$out/bin/c++"
    '';
  };
  gawk = {
    debs = [ "gawk" ];
    mainProgram = "gawk";
    aliases.awk = "gawk";
  };
  go = {
    debs = [
      "golang-1.19-go"
      "golang-1.19-src"
    ];
    mainProgram = "go";
    aliases.gofmt = "../lib/go-1.19/bin/gofmt";
    # Debian's go command is linked with the C library (cgo), and the
    # RUNPATH patchelf adds breaks a Go binary (it segfaults at start): it
    # runs unpatched through the store's loader instead, told its GOROOT
    # (it would find it from where it runs, which is now the loader).
    postInstall = ''
      real=$out/lib/go-1.19/bin/go
      cp --remove-destination /usr/lib/go-1.19/bin/go "$real"
      printf '#!%s\nexport GOROOT="''${GOROOT:-%s}"\nexec %s --library-path %s %s "$@"\n' \
        "$shell/bin/bash" "$out/lib/go-1.19" "$glibc/lib/ld-linux-x86-64.so.2" "$glibc/lib" "$real" >"$out/bin/go"
      chmod +x "$out/bin/go"
    '';
  };
  iproute2 = {
    debs = [ "iproute2" ];
    mainProgram = "ip";
  };
  # OpenJDK as nixpkgs' jdk_headless; it finds its home from where java
  # runs, through these links.
  jdk_headless = {
    debs = [
      "openjdk-17-jdk-headless"
      "openjdk-17-jre-headless"
    ];
    mainProgram = "java";
    aliases = {
      java = "../lib/jvm/java-17-openjdk-amd64/bin/java";
      javac = "../lib/jvm/java-17-openjdk-amd64/bin/javac";
      jshell = "../lib/jvm/java-17-openjdk-amd64/bin/jshell";
    };
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
  # netcat-openbsd, as nixpkgs' `netcat` (libressl's nc, the same options).
  netcat = {
    debs = [ "netcat-openbsd" ];
    mainProgram = "nc";
    aliases.nc = "nc.openbsd";
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
  openssl = {
    debs = [ "openssl" ];
    mainProgram = "openssl";
  };
  ripgrep = {
    debs = [ "ripgrep" ];
    mainProgram = "rg";
  };
  # rustc finds its standard library relative to where it runs
  # (lib/rustlib); it links with `cc`, which the rust environment's gcc
  # gives.
  rustc = {
    debs = [
      "rustc"
      "libstd-rust-dev"
      "libstd-rust-1.63"
    ];
    mainProgram = "rustc";
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
