# Builder of a hostpkgs host tool (run by the host's /bin/bash): fills
# $out/bin with symlinks to what the Debian packages $debs install in
# /bin, /sbin, /usr/bin and /usr/sbin (always by their /usr path: Debian is
# merged-/usr, and a jail that shows the host's /usr shows no /bin), then adds
# the aliases ("name=/abs/target" words) and the shims ("name" words whose
# text is in the attribute shim_<name>).
# shellcheck disable=SC2154 # the derivation's attributes
set -euo pipefail
PATH=/usr/bin:/bin
mkdir -p "$out/bin"
for deb in $debs; do
  if ! dpkg-query -W "$deb" >/dev/null 2>&1; then
    echo "hostpkgs: $name needs the host's Debian package $deb (apt-get install $deb)" >&2
    exit 1
  fi
  while read -r file; do
    case $file in
      /bin/* | /sbin/* | /usr/bin/* | /usr/sbin/*) ;;
      *) continue ;;
    esac
    if [ -d "$file" ]; then continue; fi
    target=$file
    case $file in
      /bin/* | /sbin/*) if [ -e "/usr$file" ]; then target=/usr$file; fi ;;
    esac
    ln -sfn "$target" "$out/bin/${file##*/}"
  done < <(dpkg-query -L "$deb")
done
for alias in $aliases; do
  ln -sfn "${alias#*=}" "$out/bin/${alias%%=*}"
done
for shim in $shims; do
  var=shim_$shim
  rm -f "$out/bin/$shim"
  printf '%s\n' "${!var}" >"$out/bin/$shim"
  chmod +x "$out/bin/$shim"
done
if [ -n "$mainProgram" ] && [ ! -x "$out/bin/$mainProgram" ]; then
  echo "hostpkgs: $name: the host has no $mainProgram (Debian packages: $debs)" >&2
  exit 1
fi
