# Takes the stand-in's source and nixpkgs lib's (store paths); returns
# its `path`, as nixpkgs' pkgs.path is: a file that `import path { system; }`
# turns into this package set again (the compose helper of packages on
# demand evaluates the server's nixpkgs so).
{ source, nixpkgsLib }:
builtins.toFile "hostpkgs.nix" ''
  { system ? "x86_64-linux", ... }:
  let
    lib = import ${source}/lib.nix (import ${nixpkgsLib}/lib);
  in
  import ${source}/packages.nix {
    inherit lib system;
    host = lib.importJSON ${source}/host.json;
  }
''
