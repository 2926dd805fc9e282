/* bt_test_files.h - a scratch directory and whole files, for the tests that write files.

       if (bt_test_dir_make("test_thing")) return 1;   // /tmp/bt_test_thing.XXXXXX
       bt_test_write_file(bt_test_path("a.bin"), bytes, n);
       char *text = bt_test_read_file(bt_test_path("a.bin"), &len);   // NUL-terminated, malloc'd
       ...
       bt_test_dir_remove();

   Include after tests/bt_test.h, in a file that asks for POSIX.1-2008 (_POSIX_C_SOURCE 200809L,
   _XOPEN_SOURCE 700, or C++, whose compilers ask for it themselves): mkdtemp. */
#ifndef BT_TEST_FILES_H
#define BT_TEST_FILES_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char bt_test_dir[64];    /* this test's scratch directory, once bt_test_dir_make made it */

/* a new directory /tmp/bt_<name>.XXXXXX; 0, or -1 after saying why */
static inline int bt_test_dir_make(const char *name) {
    snprintf(bt_test_dir, sizeof bt_test_dir, "/tmp/bt_%s.XXXXXX", name);
    if (mkdtemp(bt_test_dir)) return 0;
    perror(bt_test_dir);
    return -1;
}
/* the directory and everything in it */
static inline void bt_test_dir_remove(void) {
    char cmd[512];
    if (!bt_test_dir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", bt_test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", bt_test_dir);
}
/* bt_test_dir/name, in one of 8 rotating buffers (so a call may take several paths) */
static inline const char *bt_test_path(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", bt_test_dir, name);
    return buf[k];
}

/* the whole file, NUL-terminated and malloc'd, its length in *len (len may be NULL); NULL when it
   cannot be read */
static inline char *bt_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *b = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? (char *)malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (!b) return NULL;
    b[n] = 0;
    if (len) *len = (size_t)n;
    return b;
}
/* path holds exactly the n bytes at p afterwards (a test that cannot write its inputs ends) */
static inline void bt_test_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) { perror(path); exit(1); }
}
static inline void bt_test_write_text(const char *path, const char *text) { bt_test_write_file(path, text, strlen(text)); }
/* the file exists and holds needle */
static inline int bt_test_file_has(const char *path, const char *needle) {
    char *s = bt_test_read_file(path, NULL);
    int r = s && strstr(s, needle);
    free(s);
    return r;
}
#endif
