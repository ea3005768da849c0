# Takes lib and runCommand; returns nixpkgs' buildEnv ({ name, paths,
# pathsToLink, ignoreCollisions, postBuild, meta, passthru } -> derivation):
# one tree of symlinks into every path. As nixpkgs' does, it links a whole
# directory when one path alone has it, and makes a directory of links
# where two have one; two different files at one place are an error unless
# collisions are ignored. Like nixpkgs', its passthru has `paths`.
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
    # merge FROM TO: links every entry of the directory FROM into TO.
    merge() {
      local from=$1 to=$2 entry target
      for entry in "$from"/* "$from"/.[!.]* "$from"/..?*; do
        [ -e "$entry" ] || [ -L "$entry" ] || continue
        target=$to/''${entry##*/}
        if [ ! -e "$target" ] && [ ! -L "$target" ]; then
          ln -s "$entry" "$target"
        elif [ -d "$entry" ] && [ -d "$target" ]; then
          if [ -L "$target" ]; then
            local linked
            linked=$(readlink "$target")
            rm "$target"
            mkdir "$target"
            merge "$linked" "$target"
          fi
          merge "$entry" "$target"
        elif [ "$(readlink -f "$target")" != "$(readlink -f "$entry")" ] && [ -z "$ignoreCollisions" ]; then
          echo "buildEnv $name: collision between $entry and $(readlink -f "$target")" >&2
          exit 1
        fi
      done
    }
    mkdir -p "$out"
    for path in $paths; do
      for link in $pathsToLink; do
        from=''${path%/}''${link%/}
        [ -d "$from" ] || continue
        mkdir -p "$out''${link%/}"
        merge "$from" "$out''${link%/}"
      done
    done
    eval "$postBuild"
  ''
