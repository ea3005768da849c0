# Go, as an environment's `program` (environment.nix): a table, not a
# function. The code is one file of package main; `go build` makes the
# program, with the build cache (GOCACHE) in the runner's cache, which a
# session keeps, so that a changed source builds only what changed. Cgo
# off (no C compiler needed), no module downloads (GOPROXY=off: the
# standard library only), no toolchain switch.
{
  language = "Go";
  file = "main.go";
  build = ''
    export GOCACHE="$cache/go-build" GOPATH="$cache/go" CGO_ENABLED=0 GOPROXY=off GOTOOLCHAIN=local
    go build -o "$out/main" "$src"
  '';
  run = ''exec "$out/main"'';
}
