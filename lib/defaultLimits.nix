# The limits an environment gets unless it sets its own (manifest v1
# `limits`, CONTRIBUTING.md contract 1). Sizes in MiB, times in seconds.
{
  timeout_s = 30;
  memory_mb = 1024;
  pids = 256;
  output_bytes = 65536;
  workspace_mb = 512;
  tmp_mb = 256;
  cpu_s = 60;
  file_mb = 256;
  nofile = 1024;
}
