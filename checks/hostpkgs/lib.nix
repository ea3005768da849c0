# Takes nixpkgs' lib; returns it as the stand-in's `lib`: not a nixpkgs
# checkout, so manifests record no nixpkgs revision.
nixpkgsLib:
nixpkgsLib.extend (
  final: prev: { trivial = prev.trivial // { revisionWithDefault = default: default; }; }
)
