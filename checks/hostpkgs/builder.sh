# The one builder of every hostpkgs derivation (run by the host's /bin/bash).
#
# It does what nixpkgs' stdenv does for a runCommand, and no more: puts the
# bin/ of the derivation's inputs on PATH (then the host's /usr/bin and /bin:
# these packages are the host's tools), exposes structured attributes the
# way newer Nix does (NIX_ATTRS_JSON_FILE, NIX_ATTRS_SH_FILE, $out from the
# outputs), and runs the build command.
set -euo pipefail

if [ -e "$NIX_BUILD_TOP/.attrs.sh" ]; then
  # Nix 2.8 writes the structured attributes but does not name the files.
  export NIX_ATTRS_SH_FILE="$NIX_BUILD_TOP/.attrs.sh"
  export NIX_ATTRS_JSON_FILE="$NIX_BUILD_TOP/.attrs.json"
  # shellcheck disable=SC1090
  source "$NIX_ATTRS_SH_FILE"
  # shellcheck disable=SC2154
  out=${outputs[out]}
  export out
  inputs=(${nativeBuildInputs[@]+"${nativeBuildInputs[@]}"} ${buildInputs[@]+"${buildInputs[@]}"})
else
  read -r -a inputs <<<"${nativeBuildInputs:-} ${buildInputs:-}"
fi

PATH=/usr/bin:/bin
for input in "${inputs[@]}"; do
  if [ -d "$input/bin" ]; then
    PATH="$input/bin:$PATH"
  fi
done
export PATH
export HOME=/homeless-shelter
cd "$NIX_BUILD_TOP"

if [ -n "${buildCommandPath:-}" ]; then
  # shellcheck disable=SC1090
  source "$buildCommandPath"
else
  eval "${buildCommand:?hostpkgs: derivation without a buildCommand}"
fi
