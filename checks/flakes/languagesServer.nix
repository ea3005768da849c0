# Takes pkgs and the flake's library; returns the server the languages
# tests serve (checks/e2e/languages.py): `languages-server`, mkServer with the
# optional presets named (go, rust, java, c, cpp, network-tools) and no
# other environment, as a user turns them on.
{ pkgs, sandboxLib }:
{
  languages-server = sandboxLib.mkServer pkgs {
    presets = [
      "go"
      "rust"
      "java"
      "c"
      "cpp"
      "network-tools"
    ];
  };
}
