/* proc_test.h - process helpers shared by the multi-process tests (test_dist, test_parallel and
   their GPU twins): waiting for a child with a time limit, reading a rank's log, and (CUDA builds)
   counting GPUs in a child process so the parent never initialises CUDA before it forks.
   Include after bt_dist.h (bt__now, bt__sleep) and tests/bt_test.h. */
#ifndef BT_PROC_TEST_H
#define BT_PROC_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>

/* waits for pid up to limit_s (then SIGKILL); returns the exit code, 128 + signal, or -1 */
static inline int wait_limit(pid_t pid, double limit_s) {
    double end = bt__now() + limit_s;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -1;
        if (bt__now() > end) { kill(pid, SIGKILL); waitpid(pid, &st, 0); return -1; }
        bt__sleep(0.005);
    }
}

/* the whole file, NUL-terminated (malloc'd), or NULL */
static inline char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = (char *)malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

#ifdef BT_CUDA
/* the number of GPUs, asked in a child (CUDA must not be initialised before the ranks fork) */
static inline int gpu_count(void) {
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) { int n = bt_k_device_count(); _exit(n > 100 ? 100 : n); }
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}
#define NEED_2_GPUS() do { int n__ = gpu_count(); if (n__ < 2) { BT_SKIP("needs 2 GPUs, found %d", n__); return; } } while (0)
#endif
#endif
