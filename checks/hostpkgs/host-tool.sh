# Builder of a hostpkgs host tool (run by the host's /bin/bash): copies the
# files of the Debian packages $debs into $out (closure.py copy; their
# headers too when $includes is set), adds the
# aliases ("name=target" words: bin/name, a link to bin/target), patches
# every ELF file and #! line to the store (closure.py fixup, #! lines to the
# package's own programs or those of $programs; not for glibc itself), runs
# $postInstall, and checks $mainProgram is there.
# shellcheck disable=SC2154 # the derivation's attributes
set -euo pipefail
PATH=/usr/bin:/bin
for deb in $debs; do
  if ! dpkg-query -W "$deb" >/dev/null 2>&1; then
    echo "hostpkgs: $name needs the host's Debian package $deb (apt-get install $deb)" >&2
    exit 1
  fi
done
if ! command -v patchelf >/dev/null; then
  echo "hostpkgs: $name needs patchelf on the host (apt-get install patchelf)" >&2
  exit 1
fi
# shellcheck disable=SC2086 # the packages are words
/usr/bin/python3 "$closure" copy ${includes:+--include} "$out" $debs
for alias in $aliases; do
  mkdir -p "$out/bin"
  ln -sfn "${alias#*=}" "$out/bin/${alias%%=*}"
done
if [ -n "$glibc" ]; then
  fixup=("$closure" fixup "$out" "$glibc" --libdir "lib/$pname")
  for program in $programs; do
    fixup+=(--programs "$program")
  done
  /usr/bin/python3 "${fixup[@]}"
fi
eval "$postInstall"
if [ -n "$mainProgram" ] && [ ! -x "$out/bin/$mainProgram" ]; then
  echo "hostpkgs: $name: the host has no $mainProgram (Debian packages: $debs)" >&2
  exit 1
fi
