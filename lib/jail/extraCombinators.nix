# Takes { environment, ... } and jail.nix's combinators; returns the
# environment's own permissions (`extraCombinators`), composed, after every
# other one.
{ environment, ... }:
c: c.compose (environment.extraCombinators c)
