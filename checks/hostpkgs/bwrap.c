/* The stand-in's bin/bwrap (tools.nix): Debian's bwrap, LIBEXEC_BWRAP,
 * started with "--ro-bind LOCALE /usr/lib/locale" before the caller's
 * arguments, as one exec. Debian's C library finds locales only in
 * /usr/lib/locale, where nixpkgs' finds them in its own store path; a shell
 * script doing the same would cost every jail a shell's start, which
 * nixpkgs' bwrap, a program, does not. On x86_64 it is built without a C
 * library (tools.nix: -nostdlib), so that it costs no C library's start
 * either (on this project's VM host glibc's start alone is about 0.25 ms,
 * its CPU feature probes trapping to the hypervisor): nixpkgs' bwrap is
 * one program, and the stand-in should cost what one program costs.
 * Takes bwrap's arguments; returns only when the exec fails (127). */

#define LOCALE_ARGS 3

/* bwrap's arguments: Debian's bwrap, the locale bind, then the caller's
 * (argv[1] to argv[argc], its NULL included); `args` holds argc + 4. */
static void bwrap_args(char **args, long argc, char **argv) {
  args[0] = LIBEXEC_BWRAP;
  args[1] = "--ro-bind";
  args[2] = LOCALE;
  args[3] = "/usr/lib/locale";
  for (long i = 1; i <= argc; i++) {
    args[i + LOCALE_ARGS] = argv[i];
  }
}

#if defined(__x86_64__) && defined(NO_LIBC)

static long syscall3(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall"
                   : "=a"(r)
                   : "a"(n), "D"(a), "S"(b), "d"(c)
                   : "rcx", "r11", "memory");
  return r;
}

static unsigned long length(const char *s) {
  unsigned long n = 0;
  while (s[n] != '\0') {
    n++;
  }
  return n;
}

/* The kernel's initial stack: argc, argv[0..argc], NULL, envp..., NULL. */
__attribute__((used, noreturn)) static void start(long *stack) {
  long argc = stack[0];
  char **argv = (char **)(stack + 1);
  char **envp = argv + argc + 1;
  char *args[argc + LOCALE_ARGS + 1];
  bwrap_args(args, argc, argv);
  syscall3(59 /* execve */, (long)LIBEXEC_BWRAP, (long)args, (long)envp);
  static const char failed[] = "bwrap: cannot execute " LIBEXEC_BWRAP "\n";
  syscall3(1 /* write */, 2, (long)failed, (long)length(failed));
  for (;;) {
    syscall3(60 /* exit */, 127, 0, 0);
  }
}

__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "  xor %rbp, %rbp\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call start\n"
        "  hlt\n");

#else

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  char **args = calloc((size_t)argc + LOCALE_ARGS + 1, sizeof *args);
  if (args == NULL) {
    perror("bwrap");
    return 127;
  }
  bwrap_args(args, argc, argv);
  execv(LIBEXEC_BWRAP, args);
  perror(LIBEXEC_BWRAP);
  return 127;
}

#endif
