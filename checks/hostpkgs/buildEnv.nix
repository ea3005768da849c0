# Takes lib and runCommand; returns nixpkgs' buildEnv ({ name, paths,
# pathsToLink, ignoreCollisions, postBuild, meta, passthru } -> derivation):
# one tree of symlinks into every path, directories merged, two different
# files at one place an error unless collisions are ignored; like nixpkgs',
# its passthru has `paths`.
{ lib, runCommand }:
{
  name,
  paths,
  pathsToLink ? [ "/" ],
  ignoreCollisions ? false,
  postBuild ? "",
  meta ? { },
  passthru ? { },
}:
runCommand name
  {
    inherit
      paths
      pathsToLink
      ignoreCollisions
      postBuild
      meta
      ;
    passthru = {
      inherit paths;
    }
    // passthru;
  }
  ''
    mkdir -p "$out"
    for path in $paths; do
      for link in $pathsToLink; do
        from=''${path%/}''${link%/}
        to=$out''${link%/}
        [ -d "$from" ] || continue
        while read -r -d "" dir; do
          mkdir -p "$to/$dir"
        done < <(cd "$from" && find -L . -type d -print0)
        while read -r -d "" file; do
          if [ -e "$to/$file" ] || [ -L "$to/$file" ]; then
            if [ "$(readlink -f "$to/$file")" != "$(readlink -f "$from/$file")" ] && [ -z "$ignoreCollisions" ]; then
              echo "buildEnv $name: collision between $from/$file and $(readlink "$to/$file")" >&2
              exit 1
            fi
            continue
          fi
          ln -s "$from/$file" "$to/$file"
        done < <(cd "$from" && find -L . ! -type d -print0)
      done
    done
    eval "$postBuild"
  ''
