# Takes nixpkgs' lib and an evaluated configuration (lib.evalModules); returns
# its config, or throws the messages of its failed assertions the way NixOS
# and home-manager do ("Failed assertions:" then one "- MESSAGE" a line).
lib: evaluated:
let
  failed = map (a: a.message) (lib.filter (a: !a.assertion) evaluated.config.assertions);
in
if failed == [ ] then
  evaluated.config
else
  throw "\nFailed assertions:\n${lib.concatMapStringsSep "\n" (message: "- ${message}") failed}"
