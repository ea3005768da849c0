# Takes lib and the system; returns nixpkgs' runCommand (name -> attributes ->
# build command -> derivation): a derivation built by the host's /bin/bash
# through builder.sh, with `passthru` and `meta` kept out of the derivation
# and put on the result, as stdenv.mkDerivation does.
{ lib, system }:
name: env: buildCommand:
let
  passthru = env.passthru or { };
  structured = env.__structuredAttrs or false;
  drv = derivation (
    removeAttrs env [
      "passthru"
      "meta"
    ]
    // {
      inherit name system buildCommand;
      builder = "/bin/bash";
      args = [ ./builder.sh ];
    }
    # Structured attributes go through .attrs.json, whatever their size.
    // lib.optionalAttrs (!structured) { passAsFile = (env.passAsFile or [ ]) ++ [ "buildCommand" ]; }
  );
in
drv
// passthru
// {
  meta = env.meta or { };
  inherit passthru;
}
