# The built-in profiles, by name: what `nix-sandbox-mcp sandbox create
# --profile NAME ENV` applies to a session (lib/profile.nix says what each
# field may be). mkServer serves them unless given its own `profiles`.
{
  strict = {
    description = "No network, no added packages, no project; small limits: for code you do not trust";
    network = false;
    packages = false;
    project = "none";
    limits = {
      memory_mb = 512;
      cpu_s = 60;
      timeout_s = 30;
      max_timeout_s = 120;
      nofile = 256;
      file_mb = 64;
      workspace_mb = 64;
    };
  };
  offline-review = {
    description = "Reads the project read-only, without network or added packages: review and test, change nothing";
    network = false;
    packages = false;
    project = "read-only";
  };
  build-install = {
    description = "The environment as configured: its network policy, the server's packages, the project as the server mounts it";
    network = null;
    packages = true;
    project = null;
  };
}
