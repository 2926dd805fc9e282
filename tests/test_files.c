/* test_files.c - bt_data.h's files: non-blocking inputs, output checks, atomic replacement (links
   written through, or refused with BT_OUTPUT_NOFOLLOW; special files refused, no temporary left after a failure, concurrent writers
   by threads and processes, kill -9 and SIGTERM of a writer, the signal cleanup's chaining). */
#define _XOPEN_SOURCE 700   /* POSIX.1-2008 and mknod */
#include "bt_data.h"
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int has_text(const char *path, const char *want) {
    char *s = bt_test_read_file(path, NULL);
    int ok = s && !strcmp(s, want);
    free(s);
    return ok;
}

/* temporaries ("*.tmp.*") left in dir */
static int count_temps(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}
static void remove_temps(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) { snprintf(p, sizeof p, "%s/%s", dir, e->d_name); unlink(p); }
    if (d) closedir(d);
}

static int err_has(const char *a, const char *b) {
    return strstr(bt_data_error(), a) != NULL && (!b || strstr(bt_data_error(), b) != NULL);
}

/* ---- checks ---- */

static void test_output_check(void) {
    BT_CHECK(bt_output_check("") == -1 && err_has("empty", NULL), "empty: %s", bt_data_error());
    BT_CHECK(bt_output_check(NULL) == -1 && err_has("empty", NULL), "NULL: %s", bt_data_error());
    BT_CHECK(bt_output_check(bt_test_dir) == -1 && err_has(bt_test_dir, "is a directory"), "directory: %s", bt_data_error());
    BT_CHECK(bt_output_check(bt_test_path("x/")) == -1 && err_has("ends in '/'", NULL), "trailing slash: %s", bt_data_error());
    BT_CHECK(bt_output_check("/dev/null") == -1 && err_has("/dev/null", "character device"), "/dev/null: %s", bt_data_error());
    BT_CHECK(mkfifo(bt_test_path("fifo"), 0644) == 0, "mkfifo");
    BT_CHECK(bt_output_check(bt_test_path("fifo")) == -1 && err_has(bt_test_path("fifo"), "FIFO"), "fifo: %s", bt_data_error());
    BT_CHECK(bt_output_check(bt_test_path("no/such/m.bin")) == -1 && err_has(bt_test_path("no/such"), "does not exist"), "missing dir: %s", bt_data_error());
    bt_test_write_text(bt_test_path("plain"), "x");
    BT_CHECK(bt_output_check(bt_test_path("plain/m.bin")) == -1 && err_has(bt_test_path("plain/m.bin"), NULL), "a file as a directory: %s", bt_data_error());
    BT_CHECK(bt_output_check(bt_test_path("plain")) == 0, "an existing file: %s", bt_data_error());
    BT_CHECK(bt_output_check(bt_test_path("new.bin")) == 0, "a new file: %s", bt_data_error());
    BT_CHECK(symlink(bt_test_dir, bt_test_path("dirlink")) == 0 && bt_output_check(bt_test_path("dirlink")) == -1 && err_has(" -> ", "is a directory"),
             "link to a directory: %s", bt_data_error());
    BT_CHECK(symlink("nowhere.bin", bt_test_path("dangling")) == 0 && bt_output_check(bt_test_path("dangling")) == 0, "dangling link: %s", bt_data_error());
    BT_CHECK(symlink("no/such/dir/x", bt_test_path("dangling2")) == 0 && bt_output_check(bt_test_path("dangling2")) == -1 && err_has("does not exist", NULL),
             "link into a missing directory: %s", bt_data_error());
    BT_CHECK(symlink("loop_b", bt_test_path("loop_a")) == 0 && symlink("loop_a", bt_test_path("loop_b")) == 0, "loop links");
    BT_CHECK(bt_output_check(bt_test_path("loop_a")) == -1 && err_has("too many levels", NULL), "link loop: %s", bt_data_error());
    if (geteuid() != 0) {   /* root may write anywhere: access() cannot refuse it */
        BT_CHECK(mkdir(bt_test_path("ro"), 0555) == 0 && bt_output_check(bt_test_path("ro/m.bin")) == -1 && err_has(bt_test_path("ro"), "does not let"),
                 "read-only directory: %s", bt_data_error());
    }
}

static void test_output_dir(void) {
    BT_CHECK(bt_output_dir(bt_test_path("a/b//c")) == 0 && bt_output_dir(bt_test_path("a/b//c")) == 0, "mkdir -p: %s", bt_data_error());
    BT_CHECK(bt_output_check(bt_test_path("a/b/c/log.jsonl")) == 0, "made: %s", bt_data_error());
    BT_CHECK(bt_output_dir("") == -1 && err_has("empty", NULL), "empty: %s", bt_data_error());
    bt_test_write_text(bt_test_path("file"), "x");
    BT_CHECK(bt_output_dir(bt_test_path("file")) == -1 && err_has(bt_test_path("file"), "not a directory"), "a file: %s", bt_data_error());
    BT_CHECK(bt_output_dir(bt_test_path("file/sub")) == -1 && err_has(bt_test_path("file/sub"), NULL), "under a file: %s", bt_data_error());
}

static void test_input_open(void) {
    uint64_t size = 0;
    int fd;
    bt_test_write_text(bt_test_path("in.txt"), "hello");
    fd = bt_input_open(bt_test_path("in.txt"), &size);
    BT_CHECK(fd >= 0 && size == 5, "regular file: %s", bt_data_error());
    if (fd >= 0) close(fd);
    alarm(20);   /* a blocking open would hang here: the alarm ends the test binary instead */
    mkfifo(bt_test_path("fifo_in"), 0644);
    BT_CHECK(bt_input_open(bt_test_path("fifo_in"), NULL) == -1 && err_has(bt_test_path("fifo_in"), "FIFO"), "fifo: %s", bt_data_error());
    alarm(0);
    BT_CHECK(bt_input_open(bt_test_dir, NULL) == -1 && err_has("is a directory", NULL), "directory: %s", bt_data_error());
    BT_CHECK(bt_input_open("/dev/zero", NULL) == -1 && err_has("character device", NULL), "device: %s", bt_data_error());
    BT_CHECK(bt_input_open(bt_test_path("nothing"), NULL) == -1 && err_has(bt_test_path("nothing"), "No such file"), "missing: %s", bt_data_error());
    bt_test_write_text(bt_test_path("log"), "old\n");
    fd = bt_output_open(bt_test_path("log"), 1);
    BT_CHECK(fd >= 0 && write(fd, "new\n", 4) == 4, "append: %s", bt_data_error());
    if (fd >= 0) close(fd);
    BT_CHECK(has_text(bt_test_path("log"), "old\nnew\n"), "appended");
    fd = bt_output_open(bt_test_path("log"), 0);
    if (fd >= 0) close(fd);
    BT_CHECK(fd >= 0 && has_text(bt_test_path("log"), ""), "truncated");
    BT_CHECK(bt_output_open(bt_test_path("fifo_in"), 0) == -1 && bt_output_open("/dev/null", 0) == -1, "special files refused");
}

/* ---- atomic files ---- */

static int write_file(const char *path, const char *text) {
    bt_atomic_file *f = bt_atomic_open(path);
    if (!f) return -1;
    if (bt_atomic_write(f, text, strlen(text))) { bt_atomic_abort(f); return -1; }
    return bt_atomic_commit(f);
}

static void test_atomic_roundtrip(void) {
    bt_atomic_file *f;
    struct stat st;
    const char *p = bt_test_path("rt.bin");
    f = bt_atomic_open(p);
    BT_CHECK(f != NULL, "open: %s", bt_data_error());
    if (!f) return;
    BT_CHECK(count_temps(bt_test_dir) == 1 && access(p, F_OK) != 0, "the temporary exists and the target not yet");
    BT_CHECK(bt_atomic_write(f, "hello ", 6) == 0 && pwrite(bt_atomic_fd(f), "world", 5, 6) == 5, "writes");
    BT_CHECK(bt_atomic_commit(f) == 0, "commit: %s", bt_data_error());
    BT_CHECK(has_text(p, "hello world") && count_temps(bt_test_dir) == 0, "content, no temporary");
    /* a replacement keeps the permissions of the file it replaces */
    chmod(p, 0640);
    BT_CHECK(write_file(p, "second") == 0 && has_text(p, "second"), "rewrite: %s", bt_data_error());
    BT_CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0640, "mode %o, expected 640", (unsigned)(st.st_mode & 0777));
    /* two files open on one path at once: distinct temporaries, the last commit wins */
    {
        bt_atomic_file *a = bt_atomic_open(p), *b = bt_atomic_open(p);
        BT_CHECK(a && b && count_temps(bt_test_dir) == 2, "two temporaries");
        if (a && b) {
            bt_atomic_write(a, "AAA", 3); bt_atomic_write(b, "BB", 2);
            BT_CHECK(bt_atomic_commit(b) == 0 && bt_atomic_commit(a) == 0 && has_text(p, "AAA"), "last commit wins");
        }
    }
    /* bt_shard_write goes through it too */
    {
        uint16_t toks[3] = {1, 2, 3};
        bt_shard s;
        BT_CHECK(bt_shard_write(bt_test_path("s.bin"), toks, 3) == 0 && bt_shard_open(&s, bt_test_path("s.bin")) == 0 && s.n == 3, "shard");
        bt_shard_close(&s);
    }
    BT_CHECK(count_temps(bt_test_dir) == 0, "temporaries left");
}

static void test_atomic_symlinks(void) {
    struct stat st;
    char buf[256];
    ssize_t n;
    mkdir(bt_test_path("real"), 0755);
    bt_test_write_text(bt_test_path("real/target.bin"), "old");
    /* link2 -> link1 -> real/target.bin, the first two relative */
    BT_CHECK(symlink("real/target.bin", bt_test_path("link1")) == 0 && symlink("link1", bt_test_path("link2")) == 0, "links");
    {
        bt_atomic_file *f = bt_atomic_open(bt_test_path("link2"));
        BT_CHECK(f != NULL, "open through links: %s", bt_data_error());
        if (!f) return;
        BT_CHECK(count_temps(bt_test_path("real")) == 1 && count_temps(bt_test_dir) == 0, "the temporary lies beside the final target");
        bt_atomic_write(f, "new", 3);
        BT_CHECK(bt_atomic_commit(f) == 0, "commit: %s", bt_data_error());
    }
    BT_CHECK(has_text(bt_test_path("real/target.bin"), "new"), "the target got the bytes");
    BT_CHECK(lstat(bt_test_path("link2"), &st) == 0 && S_ISLNK(st.st_mode) && lstat(bt_test_path("link1"), &st) == 0 && S_ISLNK(st.st_mode), "links survive");
    n = readlink(bt_test_path("link1"), buf, sizeof buf - 1);
    BT_CHECK(n == 15 && !memcmp(buf, "real/target.bin", 15), "link1 unchanged");
    /* a dangling link: the file it names is created */
    BT_CHECK(symlink("real/fresh.bin", bt_test_path("to_fresh")) == 0 && write_file(bt_test_path("to_fresh"), "fresh") == 0, "dangling: %s", bt_data_error());
    BT_CHECK(has_text(bt_test_path("real/fresh.bin"), "fresh") && lstat(bt_test_path("to_fresh"), &st) == 0 && S_ISLNK(st.st_mode), "created through the link");
    /* an absolute link */
    snprintf(buf, sizeof buf, "%s", bt_test_path("real/abs.bin"));
    BT_CHECK(symlink(buf, bt_test_path("to_abs")) == 0 && write_file(bt_test_path("to_abs"), "abs") == 0 && has_text(bt_test_path("real/abs.bin"), "abs"), "absolute link");
}

/* BT_OUTPUT_NOFOLLOW (the files a program names in a directory of its own): a link at the name is
   refused by the check, the log's open and the atomic file, naming it; its target is untouched; a
   plain file or a new name works as without the flag */
static void test_nofollow(void) {
    const char *victim = bt_test_path("victim.txt"), *link = bt_test_path("own/log.jsonl"), *ck = bt_test_path("own/ckpt.bin");
    bt_atomic_file *f;
    struct stat st;
    int fd;
    mkdir(bt_test_path("own"), 0755);
    bt_test_write_text(victim, "precious");
    BT_CHECK(symlink(victim, link) == 0 && symlink(victim, ck) == 0, "links");
    BT_CHECK(bt_output_check_flags(link, BT_OUTPUT_NOFOLLOW) == -1 && err_has(link, "symbolic link") && err_has(victim, NULL), "check: %s", bt_data_error());
    BT_CHECK(bt_output_check_flags(link, 0) == 0, "without the flag the link is followed: %s", bt_data_error());
    BT_CHECK(bt_output_open_flags(link, 0, BT_OUTPUT_NOFOLLOW) == -1 && err_has(link, "symbolic link"), "log: %s", bt_data_error());
    BT_CHECK(bt_output_open_flags(link, 1, BT_OUTPUT_NOFOLLOW) == -1, "log, appending: %s", bt_data_error());
    f = bt_atomic_open_flags(ck, BT_OUTPUT_NOFOLLOW);
    BT_CHECK(f == NULL && err_has(ck, "symbolic link"), "atomic: %s", bt_data_error());
    bt_atomic_abort(f);
    BT_CHECK(has_text(victim, "precious"), "the link's target is untouched");
    BT_CHECK(lstat(ck, &st) == 0 && S_ISLNK(st.st_mode) && count_temps(bt_test_path("own")) == 0, "the link stays, no temporary");
    /* plain names work as without the flag */
    unlink(link); unlink(ck);
    fd = bt_output_open_flags(link, 0, BT_OUTPUT_NOFOLLOW);
    BT_CHECK(fd >= 0 && write(fd, "a\n", 2) == 2, "a new log: %s", bt_data_error());
    if (fd >= 0) close(fd);
    f = bt_atomic_open_flags(ck, BT_OUTPUT_NOFOLLOW);
    BT_CHECK(f && !bt_atomic_write(f, "ck", 2) && !bt_atomic_commit(f) && has_text(ck, "ck"), "a new file: %s", bt_data_error());
    /* a link planted after the check: the rename replaces the link itself, never its target */
    f = bt_atomic_open_flags(ck, BT_OUTPUT_NOFOLLOW);
    BT_CHECK(f && unlink(ck) == 0 && symlink(victim, ck) == 0, "a link planted while writing");
    BT_CHECK(f && !bt_atomic_write(f, "ck2", 3) && !bt_atomic_commit(f), "commit: %s", bt_data_error());
    BT_CHECK(has_text(victim, "precious") && lstat(ck, &st) == 0 && S_ISREG(st.st_mode) && has_text(ck, "ck2"), "the file replaced the link");
}

static void test_atomic_refuses_special_files(void) {
    struct stat st;
    uint16_t toks[2] = {5, 6};
    alarm(20);
    /* only checks touch /dev/null; anything that could replace a device uses a node of our own */
    BT_CHECK(bt_output_check("/dev/null") == -1 && err_has("/dev/null", "refusing to replace"), "/dev/null: %s", bt_data_error());
    if (mknod(bt_test_path("mynull"), S_IFCHR | 0666, makedev(1, 3)) == 0) {   /* a device node of our own (root) */
        bt_atomic_file *f = bt_atomic_open(bt_test_path("mynull"));
        BT_CHECK(f == NULL && err_has(bt_test_path("mynull"), "character device"), "own node: %s", bt_data_error());
        bt_atomic_abort(f);
        BT_CHECK(bt_shard_write(bt_test_path("mynull"), toks, 2) == -1 && err_has(bt_test_path("mynull"), "character device"), "shard to a device: %s", bt_data_error());
        BT_CHECK(stat(bt_test_path("mynull"), &st) == 0 && S_ISCHR(st.st_mode), "the node is still a device");
        BT_CHECK(symlink("mynull", bt_test_path("to_null")) == 0 && bt_atomic_open(bt_test_path("to_null")) == NULL && err_has("-> ", "character device"),
                 "link to a device: %s", bt_data_error());
    }
    mkfifo(bt_test_path("fifo_out"), 0644);
    BT_CHECK(bt_atomic_open(bt_test_path("fifo_out")) == NULL && err_has(bt_test_path("fifo_out"), "FIFO"), "fifo: %s", bt_data_error());
    BT_CHECK(stat(bt_test_path("fifo_out"), &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still there");
    BT_CHECK(bt_atomic_open(bt_test_dir) == NULL && err_has("is a directory", NULL), "directory: %s", bt_data_error());
    alarm(0);
    BT_CHECK(count_temps(bt_test_dir) == 0, "temporaries left");
}

/* in a child: at most limit bytes per file (RLIMIT_FSIZE), so a write fails with EFBIG as on a
   full disk; returns 0 when the write and the commit both failed cleanly */
/* a process about to end (bt_atomic_cleanup_exit): the open temporary goes, and no new one is made,
   so a thread opening a file after the cleanup cannot leave one behind */
static int child_cleanup_exit(const char *path) {
    bt_atomic_file *f = bt_atomic_open(path);
    if (!f || bt_atomic_write(f, "new", 3) != 0) return 20;
    bt_atomic_cleanup_exit();
    if (count_temps(bt_test_dir) != 0) return 21;
    if (bt_atomic_open(path) != NULL || !err_has("interrupted by a signal", NULL)) return 22;
    if (count_temps(bt_test_dir) != 0) return 23;
    if (bt_atomic_commit(f) != -1) return 24;
    return 0;
}
static int child_write_too_much(const char *path, size_t limit) {
    struct rlimit rl = {limit, limit};
    static char big[1 << 16];
    bt_atomic_file *f;
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 10;
    if (!(f = bt_atomic_open(path))) return 11;
    memset(big, 'z', sizeof big);
    if (bt_atomic_write(f, big, sizeof big) != -1 || !err_has("File too large", NULL)) return 12;
    if (bt_atomic_commit(f) != -1 || !err_has("unchanged", NULL)) return 13;
    return 0;
}

static void test_atomic_failures_leave_the_previous_file(void) {
    const char *p = bt_test_path("prev.bin");
    bt_atomic_file *f;
    pid_t pid;
    int status = 0;
    bt_test_write_text(p, "previous");
    /* abort */
    f = bt_atomic_open(p);
    BT_CHECK(f && bt_atomic_write(f, "partial", 7) == 0, "open");
    bt_atomic_abort(f);
    bt_atomic_abort(NULL);
    BT_CHECK(has_text(p, "previous") && count_temps(bt_test_dir) == 0, "abort keeps the file, removes the temporary");
    /* a write that fails (file size limit, as on a full disk) */
    fflush(NULL);
    pid = fork();
    if (pid == 0) _exit(child_write_too_much(p, 4096));
    waitpid(pid, &status, 0);
    BT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %d", status);
    BT_CHECK(has_text(p, "previous") && count_temps(bt_test_dir) == 0, "a failed write keeps the file, removes the temporary");
    /* the temporary removed by the cleanup (as a signal does) before the commit */
    f = bt_atomic_open(p);
    bt_atomic_write(f, "new", 3);
    bt_atomic_cleanup();
    BT_CHECK(count_temps(bt_test_dir) == 0, "cleanup unlinks");
    BT_CHECK(bt_atomic_commit(f) == -1 && err_has(p, "signal removed"), "commit after cleanup: %s", bt_data_error());
    BT_CHECK(has_text(p, "previous") && count_temps(bt_test_dir) == 0, "the file is unchanged");
    /* the cleanup of a process about to end refuses new temporaries (in a child: it is for good) */
    fflush(NULL);
    pid = fork();
    if (pid == 0) _exit(child_cleanup_exit(p));
    waitpid(pid, &status, 0);
    BT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child of bt_atomic_cleanup_exit: status %d", status);
    BT_CHECK(has_text(p, "previous") && count_temps(bt_test_dir) == 0, "the file is unchanged, no temporary");
    /* a commit whose rename fails: the target became a directory meanwhile */
    f = bt_atomic_open(bt_test_path("becomes_dir"));
    bt_atomic_write(f, "x", 1);
    mkdir(bt_test_path("becomes_dir"), 0755);
    mkdir(bt_test_path("becomes_dir/sub"), 0755);
    BT_CHECK(bt_atomic_commit(f) == -1 && err_has("cannot rename", NULL), "rename failure: %s", bt_data_error());
    BT_CHECK(count_temps(bt_test_dir) == 0, "no temporary after a failed rename");
    /* the registry is full: a clear error, nothing left behind */
    {
        bt_atomic_file *open_[BT_ATOMIC_MAX_OPEN];
        int i, n = 0;
        for (i = 0; i < BT_ATOMIC_MAX_OPEN; i++) n += (open_[i] = bt_atomic_open(p)) != NULL;
        BT_CHECK(n == BT_ATOMIC_MAX_OPEN && bt_atomic_open(p) == NULL && err_has("at once", NULL), "full registry: %s", bt_data_error());
        for (i = 0; i < BT_ATOMIC_MAX_OPEN; i++) bt_atomic_abort(open_[i]);
        BT_CHECK(count_temps(bt_test_dir) == 0 && has_text(p, "previous"), "all aborted");
    }
}

/* A file of writer w, version k: a header "w k len\n", then len bytes of one letter. Whole
   files only: a reader that sees anything else caught a torn write. */
static size_t make_content(char *buf, int w, int k) {
    size_t len = 20000 + (size_t)((w * 7919 + k * 104729) % 40000), h;
    h = (size_t)sprintf(buf, "%d %d %zu\n", w, k, len);
    memset(buf + h, 'a' + w, len);
    return h + len;
}
static int whole(const char *path) {
    size_t n, len;
    int w, k, off;
    char *s = bt_test_read_file(path, &n);
    int ok = s && sscanf(s, "%d %d %zu\n%n", &w, &k, &len, &off) == 3 && n == (size_t)off + len;
    for (size_t i = 0; ok && i < len; i++) ok = s[off + i] == 'a' + w;
    free(s);
    return ok;
}
static int write_versions(const char *path, int w, int versions) {
    char *buf = (char *)malloc(80000);
    int k, bad = 0;
    for (k = 0; k < versions; k++) {
        size_t n = make_content(buf, w, k);
        bt_atomic_file *f = bt_atomic_open(path);
        bad += !f || bt_atomic_write(f, buf, n / 2) || bt_atomic_write(f, buf + n / 2, n - n / 2) || bt_atomic_commit(f);
    }
    free(buf);
    return bad;
}

static void test_atomic_concurrent_processes(void) {
    const char *p = bt_test_path("shared.bin");
    pid_t pids[4];
    int w, failed = 0, reads = 0, torn = 0, alive = 4, status[4];
    char buf[80000];
    size_t n = make_content(buf, 9, 0);
    FILE *f = fopen(p, "wb");
    fwrite(buf, 1, n, f); fclose(f);
    fflush(NULL);
    for (w = 0; w < 4; w++)
        if ((pids[w] = fork()) == 0) _exit(write_versions(p, w, 40) ? 1 : 0);
    while (alive) {   /* read while they write: always one whole file */
        torn += !whole(p);
        reads++;
        for (w = 0; w < 4; w++)
            if (pids[w] && waitpid(pids[w], &status[w], WNOHANG) == pids[w]) { pids[w] = 0; alive--; }
    }
    for (w = 0; w < 4; w++) failed += !WIFEXITED(status[w]) || WEXITSTATUS(status[w]) != 0;
    BT_CHECK(failed == 0, "%d writers had a failed write or commit", failed);
    BT_CHECK(torn == 0, "%d of %d reads saw a torn or missing file", torn, reads);
    BT_CHECK(whole(p) && count_temps(bt_test_dir) == 0, "the final file is whole, no temporary left");
}

typedef struct { const char *path; int w, bad; } thread_arg;
static void *thread_writer(void *a_) {
    thread_arg *a = (thread_arg *)a_;
    a->bad = write_versions(a->path, a->w, 30);
    return NULL;
}

static void test_atomic_concurrent_threads(void) {
    pthread_t th[8];
    thread_arg args[8];
    char paths[3][512];
    int i, bad = 0;
    snprintf(paths[0], 512, "%s", bt_test_path("threads.bin"));
    snprintf(paths[1], 512, "%s", bt_test_path("thread6.bin"));
    snprintf(paths[2], 512, "%s", bt_test_path("thread7.bin"));
    for (i = 0; i < 8; i++) {   /* six threads on one path, two on their own */
        args[i].path = paths[i < 6 ? 0 : i - 5];
        args[i].w = i; args[i].bad = 0;
        pthread_create(&th[i], NULL, thread_writer, &args[i]);
    }
    for (i = 0; i < 8; i++) { pthread_join(th[i], NULL); bad += args[i].bad; }
    BT_CHECK(bad == 0, "%d writes failed", bad);
    BT_CHECK(whole(bt_test_path("threads.bin")) && whole(bt_test_path("thread6.bin")) && whole(bt_test_path("thread7.bin")), "whole files");
    BT_CHECK(count_temps(bt_test_dir) == 0, "temporaries left");
}

/* a child that opens an atomic file over path, writes forever in 64 KiB pieces and reports on
   fd `ready` after the first piece; setup (may be NULL) runs first */
static pid_t spawn_writer(const char *path, int ready, void (*setup)(void)) {
    pid_t pid;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        static char chunk[1 << 16];
        bt_atomic_file *f;
        int first = 1;
        if (setup) setup();
        if (!(f = bt_atomic_open(path))) _exit(3);
        memset(chunk, 'q', sizeof chunk);
        for (;;) {
            if (bt_atomic_write(f, chunk, sizeof chunk) != 0) _exit(4);
            if (first && write(ready, "r", 1) != 1) _exit(5);
            first = 0;
            if (lseek(bt_atomic_fd(f), 0, SEEK_CUR) > (64 << 20)) lseek(bt_atomic_fd(f), 0, SEEK_SET);   /* stay small */
        }
    }
    return pid;
}

static void install_cleanup(void) { if (bt_atomic_install_signal_cleanup() != 0) _exit(6); }
static void ignore_term_then_install(void) { signal(SIGTERM, SIG_IGN); install_cleanup(); }

static void test_atomic_killed_writer(void) {
    const char *p = bt_test_path("victim.bin");
    int fds[2], status = 0;
    char c;
    pid_t pid;
    struct timespec ms20 = {0, 20000000};
    bt_test_write_text(p, "previous");
    /* kill -9 in the middle of writing: the target is intact; the temporary stays (nothing can
       run at SIGKILL) and is named after the dead process */
    BT_CHECK(pipe(fds) == 0, "pipe");
    pid = spawn_writer(p, fds[1], NULL);
    BT_CHECK(read(fds[0], &c, 1) == 1, "writer started");
    nanosleep(&ms20, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    BT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "killed: status %d", status);
    BT_CHECK(has_text(p, "previous"), "kill -9 mid-write: the previous file is intact");
    {
        char pidpart[64];
        DIR *d = opendir(bt_test_dir);
        struct dirent *e;
        int named = 0;
        snprintf(pidpart, sizeof pidpart, "victim.bin.tmp.%ld.", (long)pid);
        while (d && (e = readdir(d))) named += strstr(e->d_name, pidpart) == e->d_name;
        if (d) closedir(d);
        BT_CHECK(count_temps(bt_test_dir) == 1 && named == 1, "the dead writer's temporary is named %s*", pidpart);
    }
    remove_temps(bt_test_dir);
    /* SIGTERM with the cleanup installed: the temporary is removed, then the default action */
    pid = spawn_writer(p, fds[1], install_cleanup);
    BT_CHECK(read(fds[0], &c, 1) == 1, "writer started");
    nanosleep(&ms20, NULL);
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    BT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "SIGTERM still ends the writer: status %d", status);
    BT_CHECK(has_text(p, "previous") && count_temps(bt_test_dir) == 0, "SIGTERM: no temporary, the previous file intact");
    /* SIGINT the same */
    pid = spawn_writer(p, fds[1], install_cleanup);
    BT_CHECK(read(fds[0], &c, 1) == 1, "writer started");
    kill(pid, SIGINT);
    waitpid(pid, &status, 0);
    BT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT && count_temps(bt_test_dir) == 0, "SIGINT: status %d", status);
    /* an ignored SIGTERM stays ignored: the writer lives on, its temporary too */
    pid = spawn_writer(p, fds[1], ignore_term_then_install);
    BT_CHECK(read(fds[0], &c, 1) == 1, "writer started");
    kill(pid, SIGTERM);
    nanosleep(&ms20, NULL);
    BT_CHECK(waitpid(pid, &status, WNOHANG) == 0 && count_temps(bt_test_dir) == 1, "ignored SIGTERM");
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    remove_temps(bt_test_dir);
    close(fds[0]); close(fds[1]);
}

/* a program's own handler installed before the cleanup: both run, the program goes on */
static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig) { (void)sig; own_handler_ran = 1; }

static int child_chained(const char *path) {
    bt_atomic_file *f;
    signal(SIGINT, own_handler);
    if (bt_atomic_install_signal_cleanup() || bt_atomic_install_signal_cleanup()) return 20;   /* twice is fine */
    if (!(f = bt_atomic_open(path)) || bt_atomic_write(f, "x", 1)) return 21;
    raise(SIGINT);
    if (!own_handler_ran) return 22;
    if (bt_atomic_commit(f) != -1 || !err_has("signal removed", NULL)) return 23;   /* its temporary is gone */
    if (write_file(path, "after") != 0) return 24;                                  /* and new files work */
    return 0;
}

static void test_signal_cleanup_chains(void) {
    const char *p = bt_test_path("chain.bin");
    int status = 0;
    pid_t pid;
    bt_test_write_text(p, "previous");
    fflush(NULL);
    if ((pid = fork()) == 0) _exit(child_chained(p));
    waitpid(pid, &status, 0);
    BT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    BT_CHECK(has_text(p, "after") && count_temps(bt_test_dir) == 0, "chained handler");
}

int main(void) {
    if (bt_test_dir_make("test_files")) return 1;
    BT_RUN(test_output_check);
    BT_RUN(test_output_dir);
    BT_RUN(test_input_open);
    BT_RUN(test_atomic_roundtrip);
    BT_RUN(test_atomic_symlinks);
    BT_RUN(test_atomic_refuses_special_files);
    BT_RUN(test_nofollow);
    BT_RUN(test_atomic_failures_leave_the_previous_file);
    BT_RUN(test_atomic_concurrent_processes);
    BT_RUN(test_atomic_concurrent_threads);
    BT_RUN(test_atomic_killed_writer);
    BT_RUN(test_signal_cleanup_chains);
    bt_test_dir_remove();
    return bt_test_summary("test_files");
}
