# Takes pkgs; returns the bundled agents, each the mkAgentSandbox
# arguments (mkAgentSandbox.nix) of one coding-agent CLI of nixpkgs: its
# package and command, its model API's hosts, the variable its API key is
# read from and the header it goes in, and flags that hand sandboxing to
# the jail. An agent whose package this nixpkgs lacks is left out.
# claude-code is unfree: it is here for a pkgs with allowUnfree, the flake
# builds no package of it (docs/agents.md).
pkgs:
let
  agents = {
    codex = {
      package = pkgs.codex or null;
      command = "codex";
      hosts = [ "api.openai.com" ];
      apiKey.variable = "OPENAI_API_KEY";
      # The jail is the sandbox: Codex's own (Landlock, seccomp or a nested
      # bubblewrap) cannot be made inside it.
      flags = [
        "-c"
        ''sandbox_mode="danger-full-access"''
      ];
    };
    gemini-cli = {
      package = pkgs.gemini-cli or null;
      command = "gemini";
      hosts = [ "generativelanguage.googleapis.com" ];
      apiKey = {
        variable = "GEMINI_API_KEY";
        headers = [ "x-goog-api-key" ];
      };
      env.GEMINI_CLI_NO_RELAUNCH = "true";
    };
    opencode = {
      package = pkgs.opencode or null;
      command = "opencode";
      hosts = [ "api.openai.com" ];
      # Its catalogue of models, fetched at start (from models.dev, and
      # from models.opencode.ai since 1.x); no key goes there.
      extraHosts = [
        "models.dev"
        "models.opencode.ai"
      ];
      apiKey.variable = "OPENAI_API_KEY";
    };
    claude-code = {
      package = pkgs.claude-code or null;
      command = "claude";
      hosts = [ "api.anthropic.com" ];
      apiKey = {
        variable = "ANTHROPIC_API_KEY";
        headers = [ "x-api-key" ];
      };
      env = {
        DISABLE_AUTOUPDATER = "1";
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1";
      };
    };
  };
in
pkgs.lib.filterAttrs (_: agent: agent.package != null) agents
