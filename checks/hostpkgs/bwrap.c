/* The stand-in's bin/bwrap (tools.nix): Debian's bwrap, LIBEXEC_BWRAP,
 * started with "--ro-bind LOCALE /usr/lib/locale" before the caller's
 * arguments, as one exec. Debian's C library finds locales only in
 * /usr/lib/locale, where nixpkgs' finds them in its own store path; a shell
 * script doing the same would cost every jail a shell's start, which
 * nixpkgs' bwrap, a program, does not. Takes bwrap's arguments; returns
 * only when the exec fails (127). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  char **args = calloc((size_t)argc + 4, sizeof *args);
  if (args == NULL) {
    perror("bwrap");
    return 127;
  }
  args[0] = LIBEXEC_BWRAP;
  args[1] = "--ro-bind";
  args[2] = LOCALE;
  args[3] = "/usr/lib/locale";
  for (int i = 1; i < argc; i++) {
    args[i + 3] = argv[i];
  }
  execv(LIBEXEC_BWRAP, args);
  perror(LIBEXEC_BWRAP);
  return 127;
}
