# Takes nixpkgs' lib and a configuration holding the options of
# serverSettings.nix; returns the server's environment variables
# (PROJECT_DIR and PROJECT_MOUNT when projectDir is set, and
# NIX_SANDBOX_PROJECT_WRITABLE=1 when it is writable too,
# NIX_SANDBOX_PROJECT_DEVSHELL=1 when its dev shell is an environment,
# NIX_SANDBOX_OUTPUT_DIR and its caps when outputDir is, the session
# timeouts, the counts, the unread bytes and packages on demand's bounds
# always, NIX_SANDBOX_LAYERS_MB when layersMb is set), an attribute set of
# strings.
lib: settings:
lib.optionalAttrs (settings.projectDir != null) {
  PROJECT_DIR = settings.projectDir;
  PROJECT_MOUNT = settings.projectMount;
}
// lib.optionalAttrs (settings.projectDir != null && settings.projectWritable) {
  NIX_SANDBOX_PROJECT_WRITABLE = "1";
}
// lib.optionalAttrs (settings.projectDir != null && settings.projectDevShell) {
  NIX_SANDBOX_PROJECT_DEVSHELL = "1";
}
// lib.optionalAttrs (settings.outputDir != null) {
  NIX_SANDBOX_OUTPUT_DIR = settings.outputDir;
  NIX_SANDBOX_OUTPUT_MAX_MB = toString settings.outputMaxMb;
  NIX_SANDBOX_OUTPUT_CALL_MB = toString settings.outputCallMb;
}
// {
  SESSION_IDLE_TIMEOUT = toString settings.sessionIdleTimeout;
  SESSION_MAX_LIFETIME = toString settings.sessionMaxLifetime;
  NIX_SANDBOX_MAX_SESSIONS = toString settings.maxSessions;
  NIX_SANDBOX_MAX_SESSIONS_TOTAL = toString settings.maxSessionsTotal;
  NIX_SANDBOX_MAX_CHECKPOINTS = toString settings.maxCheckpoints;
  NIX_SANDBOX_MAX_RUNS = toString settings.maxRuns;
  NIX_SANDBOX_MAX_UNREAD_BYTES = toString settings.maxUnreadBytes;
  NIX_SANDBOX_MAX_COMPOSITIONS = toString settings.maxCompositions;
  NIX_SANDBOX_PACKAGES_CACHE_MAX = toString settings.packagesCacheMax;
  NIX_SANDBOX_FILES_MB = toString settings.filesMb;
}
// lib.optionalAttrs (settings.layersMb != null) {
  NIX_SANDBOX_LAYERS_MB = toString settings.layersMb;
}
