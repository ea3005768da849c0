# Takes nixpkgs' lib and a configuration holding the options of
# serverSettings.nix; returns the server's environment variables
# (PROJECT_DIR and PROJECT_MOUNT when projectDir is set,
# NIX_SANDBOX_OUTPUT_DIR when outputDir is, the session timeouts and count
# always), an attribute set of strings.
lib: settings:
lib.optionalAttrs (settings.projectDir != null) {
  PROJECT_DIR = settings.projectDir;
  PROJECT_MOUNT = settings.projectMount;
}
// lib.optionalAttrs (settings.outputDir != null) {
  NIX_SANDBOX_OUTPUT_DIR = settings.outputDir;
}
// {
  SESSION_IDLE_TIMEOUT = toString settings.sessionIdleTimeout;
  SESSION_MAX_LIFETIME = toString settings.sessionMaxLifetime;
  NIX_SANDBOX_MAX_SESSIONS = toString settings.maxSessions;
}
