/* test_gpt2.c - GPT-2 of train_gpt2.c on the CPU: command line, model files, learning (overfit
   one sequence; the loss falls on Tiny Shakespeare), parity with PyTorch on the tiny fixture
   (tests/fixtures/gpt2_tiny*.bin, made by tests/gpt2_ref.py --config tiny), the KV cache, and
   whole runs that must fail early and cleanly (bad output paths, bad tokens, special files, a
   diverging loss, a full disk, misread flags). Those runs are this binary re-executed with
   --run-train ARGS (a fresh process: its exit code, output and, under ASan, its leaks are its
   own); --save-loop PATH SEED N saves a model N times (for the concurrent-save test). */
#define _XOPEN_SOURCE 700   /* mknod, for a device node of our own */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/gpt2_parity.h"
#include "tests/gpt2_kv_check.h"
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static int quick(void) { return getenv("BT_TEST_QUICK") != NULL; }

static int parse(const char *line, train_opts *o, char *err) {
    char buf[512], *argv[32]; int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    argv[argc++] = (char *)"train_gpt2";
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    default_opts(o);
    return parse_args(argc, argv, o, err, 256);
}

static int parse_argv(int argc, const char **args, train_opts *o, char *err) {   /* for values strtok cannot make ("") */
    default_opts(o);
    return parse_args(argc, (char **)args, o, err, 256);
}

static void test_cli(void) {
    train_opts o; char err[256];
    BT_CHECK(parse("-b 4 -t 32 -x 10 --precision bf16", &o, err) == 0 && o.B == 4 && o.T == 32 && o.steps == 10, "good flags: %s", err);
    BT_CHECK(parse("-h", &o, err) == 1, "-h asks for help");
    BT_CHECK(parse("--device cuda:1", &o, err) == 0 && !strcmp(o.device, "cuda:1"), "--device cuda:1: %s", err);
    struct { const char *args, *msg; } bad[] = {
        {"-b", "-b needs a value"}, {"-b 0", "bad value '0' for -b"}, {"-b x", "bad value 'x' for -b"},
        {"-t 12abc", "bad value '12abc' for -t"}, {"-l -1", "bad value '-1' for -l"}, {"--bogus 1", "unknown option '--bogus'"},
        {"--precision fp8", "--precision must be fp32, tf32 or bf16"}, {"--device tpu", "--device must be auto, cpu, cuda or cuda:N"},
        {"-q 2", "bad value '2' for -q"}, {"--device cuda:x", "--device must be"}, {"--device cuda:99", "--device must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = parse(bad[i].args, &o, err);
        BT_CHECK(r == -1 && strstr(err, bad[i].msg), "'%s' gave %d '%s', expected '%s'", bad[i].args, r, err, bad[i].msg);
    }
    gpt2_config cfg; gpt2_config_from_preset("s2", 50257, &cfg);
    parse("-t 4096", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "longer than the model's context"), "T > maxT: %s", err);
    parse("-b 4 -t 32 -d 100", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "not a multiple of B*T"), "bad -d: %s", err);
    parse("--precision bf16", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "needs a GPU"), "bf16 on cpu: %s", err);
    parse("", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == 0 && o.B == 8 && o.T == 64 && o.total_batch == 512, "cpu defaults");
}

/* finding 10: flags accepted and ignored or misread */
static void test_cli_misread_flags(void) {
    train_opts o; char err[256];
    gpt2_config cfg = {32, 50257, 50304, 2, 2, 32};   /* maxT 32 */
    BT_CHECK(parse("--save --quiet", &o, err) == -1 && strstr(err, "--save needs a value") && strstr(err, "'--quiet'"), "--save --quiet: %s", err);
    BT_CHECK(parse("-o -v 5", &o, err) == -1 && strstr(err, "-o needs a value"), "-o -v: %s", err);
    BT_CHECK(parse("-l -1", &o, err) == -1 && strstr(err, "bad value '-1' for -l"), "a negative number is a value: %s", err);
    const char *empty_o[] = {"train_gpt2", "-o", ""}, *empty_save[] = {"train_gpt2", "--save", ""};
    BT_CHECK(parse_argv(3, empty_o, &o, err) == -1 && strstr(err, "-o needs a value, got an empty one"), "-o '': %s", err);
    BT_CHECK(parse_argv(3, empty_save, &o, err) == -1 && strstr(err, "--save needs a value"), "--save '': %s", err);
    parse("", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "the default -t 64") && strstr(err, "context 32"), "default -t: %s", err);
    parse("-t 40", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "-t 40 is longer") && !strstr(err, "default"), "given -t: %s", err);
}

/* finding 6: sizes in 64 bits, bounded, the error naming the flag or header field */
static void test_size_overflow(void) {
    train_opts o; char err[512];
    gpt2_config cfg = {1 << 20, 50257, 50304, 2, 2, 32};   /* a model with a very long context */
    parse("-b 65536 -t 65536", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, sizeof err) == -1 && strstr(err, "-b 65536 x -t 65536") && strstr(err, "4294967296"), "B*T: %s", err);
    parse("-b 32768 -t 65536", &o, err);   /* 2^31: one past int32 */
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, sizeof err) == -1 && strstr(err, "2^31"), "B*T = 2^31: %s", err);
    struct { int32_t maxT, V, L, H, C, Vp; const char *want; } bad[] = {
        {1024, 50257, 12, 1, 1 << 30, 50304, "header field C = 1073741824"},
        {1024, 50257, 12, 12, 768, -5, "header field Vp = -5"},
        {1 << 30, 50257, 12, 12, 768, 50304, "header field maxT"},
        {1024, 50257, 4096, 16, 65536, 50304, "more than 2^40"},
        {1024, 50257, 12, 12, 768, 50304, "the file has 1024 bytes"},   /* GPT-2 124M's header alone */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t h[256] = {GPT2_MODEL_MAGIC, 3, bad[i].maxT, bad[i].V, bad[i].L, bad[i].H, bad[i].C, bad[i].Vp};
        FILE *f = fopen("build/tests/big_model.bin", "wb"); fwrite(h, 4, 256, f); fclose(f);
        gpt2_config c2;
        int r = gpt2_read_header("build/tests/big_model.bin", &c2, err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, bad[i].want), "case %zu: %d '%s', expected '%s'", i, r, err, bad[i].want);
    }
}

static gpt2_config small_cfg(int V) {
    gpt2_config c; c.L = 2; c.H = 2; c.C = 32; c.maxT = 32; c.V = V; c.Vp = round_up(V, 128);
    return c;
}

static void test_model_file(void) {
    gpt2 a, b; char err[512];
    gpt2_config cfg = small_cfg(300);
    BT_CHECK(cfg.Vp == 384, "Vp %d", cfg.Vp);
    gpt2_build(&a, cfg, bt_cpu()); gpt2_init(&a, 7);
    const char *path = "build/tests/model_roundtrip.bin";
    BT_CHECK(gpt2_save(&a, path, err, sizeof err) == 0, "save: %s", err);
    gpt2_config c2;
    BT_CHECK(gpt2_read_header(path, &c2, err, sizeof err) == 0 && c2.L == 2 && c2.C == 32 && c2.Vp == 384, "header: %s", err);
    gpt2_build(&b, c2, bt_cpu());
    BT_CHECK(gpt2_load_weights(&b, path, err, sizeof err) == 0, "load: %s", err);
    BT_CHECK(!memcmp(bt_data_ptr(a.flat), bt_data_ptr(b.flat), 4 * (size_t)a.num_params), "weights differ after a round trip");
    /* init: std 0.02 on wte, residual projections smaller, layernorm gains 1 */
    double s = 0; const float *w = (const float *)bt_data_ptr(a.wte);
    for (int64_t i = 0; i < bt_numel(a.wte); i++) s += (double)w[i] * w[i];
    double std = sqrt(s / bt_numel(a.wte));
    BT_CHECK(fabs(std - 0.02) < 0.002, "wte std %.4f", std);
    BT_CHECK(bt_get(a.layers[1].ln2w, (int64_t[]){5}) == 1.0, "ln gain");
    /* a save into a missing directory fails and leaves the earlier file whole */
    BT_CHECK(gpt2_save(&a, "build/no/such/dir/m.bin", err, sizeof err) == -1 && strstr(err, "no/such/dir"), "bad save: %s", err);
    /* corrupt files give errors naming the file and the problem */
    FILE *f = fopen("build/tests/bad_model.bin", "wb"); int32_t h[256] = {12345, 3}; fwrite(h, 4, 256, f); fclose(f);
    BT_CHECK(gpt2_read_header("build/tests/bad_model.bin", &c2, err, sizeof err) == -1 && strstr(err, "bad magic 12345"), "%s", err);
    f = fopen("build/tests/short_model.bin", "wb"); fwrite(h, 4, 10, f); fclose(f);
    BT_CHECK(gpt2_read_header("build/tests/short_model.bin", &c2, err, sizeof err) == -1 && strstr(err, "too short"), "%s", err);
    f = fopen("build/tests/trunc_model.bin", "wb"); int32_t hh[256] = {GPT2_MODEL_MAGIC, 3, 32, 300, 2, 2, 32, 384};
    fwrite(hh, 4, 256, f); fwrite(bt_data_ptr(a.flat), 4, 100, f); fclose(f);
    BT_CHECK(gpt2_load_weights(&b, "build/tests/trunc_model.bin", err, sizeof err) == -1 && strstr(err, "expected exactly"), "truncated: %s", err);
    gpt2_free(&a); gpt2_free(&b);
}

/* findings 2, 3, 7: --save writes through a symlink, refuses a device node and a FIFO (without
   blocking), and -e refuses a FIFO or a directory without blocking */
static char tmpdir[256];
static const char *tp(const char *name) {   /* a path in tmpdir (four rotating buffers) */
    static char buf[4][512]; static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void test_save_special_targets(void) {
    gpt2 a; char err[512]; struct stat st;
    gpt2_build(&a, small_cfg(300), bt_cpu()); gpt2_init(&a, 7);
    alarm(30);   /* a blocking open would hang: the alarm ends the test binary instead */
    mkdir(tp("real"), 0755);
    BT_CHECK(symlink("real/model.bin", tp("model_link")) == 0, "symlink");
    BT_CHECK(gpt2_save(&a, tp("model_link"), err, sizeof err) == 0, "save through a link: %s", err);
    BT_CHECK(lstat(tp("model_link"), &st) == 0 && S_ISLNK(st.st_mode), "the link survives the save");
    gpt2_config c2;
    BT_CHECK(gpt2_read_header(tp("real/model.bin"), &c2, err, sizeof err) == 0 && c2.C == 32, "the target holds the model: %s", err);
    if (mknod(tp("dev"), S_IFCHR | 0666, makedev(1, 3)) == 0) {   /* a /dev/null of our own (root only) */
        BT_CHECK(gpt2_save(&a, tp("dev"), err, sizeof err) == -1 && strstr(err, "character device"), "device: %s", err);
        BT_CHECK(stat(tp("dev"), &st) == 0 && S_ISCHR(st.st_mode), "the device node is still a device");
    }
    BT_CHECK(mkfifo(tp("fifo"), 0644) == 0, "mkfifo");
    BT_CHECK(gpt2_save(&a, tp("fifo"), err, sizeof err) == -1 && strstr(err, "FIFO"), "save to a FIFO: %s", err);
    BT_CHECK(stat(tp("fifo"), &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still there");
    BT_CHECK(gpt2_read_header(tp("fifo"), &c2, err, sizeof err) == -1 && strstr(err, "FIFO"), "-e FIFO: %s", err);
    BT_CHECK(gpt2_read_header(tmpdir, &c2, err, sizeof err) == -1 && strstr(err, "directory"), "-e DIR: %s", err);
    alarm(0);
    gpt2_free(&a);
}

/* this binary, for the runs of a fresh process */
static char self_exe[1024];

/* run this binary with args through sh; its output (stdout and stderr) into out; the exit code */
static int run_self(const char *args, char *out, size_t cap) {
    char cmd[8192], outfile[600];
    snprintf(outfile, sizeof outfile, "%s/run.out", tmpdir);
    snprintf(cmd, sizeof cmd, "%s %s > %s 2>&1", self_exe, args, outfile);
    int rc = system(cmd);
    out[0] = 0;
    FILE *f = fopen(outfile, "rb");
    if (f) { size_t n = fread(out, 1, cap - 1, f); out[n] = 0; fclose(f); }
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}
static int run_train(const char *args, char *out, size_t cap) {
    char a[3000];
    snprintf(a, sizeof a, "--run-train %s", args);
    return run_self(a, out, cap);
}
static int lines_of(const char *path) {   /* -1: no such file */
    FILE *f = fopen(path, "rb");
    int n = 0, c;
    if (!f) return -1;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}
static int have_data(void) { return !access("data/tinyshakespeare_train.bin", R_OK) && !access("data/tinyshakespeare_val.bin", R_OK); }
#define TINY_RUN "-e s2 -b 2 -t 16 -v 0 -g 0 --quiet"

/* finding 3: two processes saving different models to one path at once: every save succeeds and
   the file is always one whole model */
static void test_concurrent_saves(void) {
    char cmd[4096], path[512];
    snprintf(path, sizeof path, "%s", tp("shared.bin"));
    snprintf(cmd, sizeof cmd, "%s --save-loop %s 1 12 & %s --save-loop %s 2 12; b=$?; wait $!; a=$?; exit $((a | b))", self_exe, path, self_exe, path);
    int st = system(cmd);
    BT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "concurrent saves: a save failed (status %d)", st);
    gpt2 a, b; char err[512];
    gpt2_build(&a, small_cfg(300), bt_cpu()); gpt2_build(&b, small_cfg(300), bt_cpu());
    BT_CHECK(gpt2_load_weights(&a, path, err, sizeof err) == 0, "load: %s", err);
    gpt2_init(&b, 1);
    int same1 = !memcmp(bt_data_ptr(a.flat), bt_data_ptr(b.flat), 4 * (size_t)a.num_params);
    gpt2_init(&b, 2);
    int same2 = !memcmp(bt_data_ptr(a.flat), bt_data_ptr(b.flat), 4 * (size_t)a.num_params);
    BT_CHECK(same1 || same2, "the file is neither model");
    gpt2_free(&a); gpt2_free(&b);
}

/* finding 1: a bad output path is reported before the first step; nothing is trained */
static void test_bad_output_paths_do_not_train(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char args[2000], out[65536], fifo[512], dev[512];
    snprintf(fifo, sizeof fifo, "%s", tp("fifo_save"));
    snprintf(dev, sizeof dev, "%s", tp("dev_save"));
    mkfifo(fifo, 0644);
    int ndev = mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0;   /* a /dev/null of our own (root only): never risk the real one */
    const char *bad[][2] = {{"/nonexistent/dir/m.bin", "does not exist"}, {"build", "is a directory"},
                            {fifo, "FIFO"}, {dev, "character device"}};
    for (int i = 0; i < 3 + ndev; i++) {
        snprintf(args, sizeof args, TINY_RUN " -x 2 -o %s --save %s", tp("run_bad_save"), bad[i][0]);
        int rc = run_train(args, out, sizeof out);
        BT_CHECK(rc == 1 && strstr(out, "--save") && strstr(out, bad[i][1]), "--save %s: exit %d: %s", bad[i][0], rc, out);
        BT_CHECK(!strstr(out, "step ") && lines_of(tp("run_bad_save/log.jsonl")) <= 0, "--save %s: it trained", bad[i][0]);
    }
    snprintf(args, sizeof args, TINY_RUN " -x 2 -o /dev/null/x");
    int rc = run_train(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "-o") && !strstr(out, "step "), "-o /dev/null/x: exit %d: %s", rc, out);
}

/* finding 4: a token outside the vocabulary is found when the shards are opened, naming the
   file and the position, both above V (60000) and between V and the padded Vp (50300) */
static void test_bad_token_in_shard(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    bt_shard s;
    BT_CHECK(bt_shard_open(&s, "data/tinyshakespeare_val.bin") == 0 && s.n > 4000, "val shard");
    uint16_t *t = (uint16_t *)malloc(2 * s.n);
    memcpy(t, s.tokens, 2 * s.n);
    const int bad[2] = {60000, 50300};
    for (int i = 0; i < 2; i++) {
        char args[2000], out[65536];
        t[3000] = (uint16_t)bad[i];
        bt_shard_write(tp("bad_tokens.bin"), t, s.n);
        snprintf(args, sizeof args, TINY_RUN " -x 1 -i %s", tp("bad_tokens.bin"));
        int rc = run_train(args, out, sizeof out);
        char want[64]; snprintf(want, sizeof want, "token %d at position 3000", bad[i]);
        BT_CHECK(rc == 1 && strstr(out, "bad_tokens.bin") && strstr(out, want) && !strstr(out, "step "), "token %d: exit %d: %s", bad[i], rc, out);
    }
    free(t);
    bt_shard_close(&s);
}

/* finding 5: a non-finite loss stops the run at that step, non-zero, no model saved, and the
   log holds JSON (null, never nan) */
static void test_nonfinite_loss_stops(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    gpt2 m; char err[512], args[2000], out[65536];
    gpt2_build(&m, small_cfg(BT_GPT2_VOCAB), bt_cpu()); gpt2_init(&m, 5);
    bt_fill_(m.lnfw, NAN);   /* every logit is NaN */
    BT_CHECK(gpt2_save(&m, tp("nan_model.bin"), err, sizeof err) == 0, "%s", err);
    gpt2_free(&m);
    snprintf(args, sizeof args, "-e %s -b 2 -t 16 -x 3 -v 0 -g 0 -o %s --save %s", tp("nan_model.bin"), tp("run_nan"), tp("nan_out.bin"));
    int rc = run_train(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "step 1:") && strstr(out, "not finite"), "exit %d: %s", rc, out);
    BT_CHECK(access(tp("nan_out.bin"), F_OK) != 0, "a NaN model was saved");
    char log[4096] = "";
    FILE *f = fopen(tp("run_nan/log.jsonl"), "rb");
    if (f) { size_t n = fread(log, 1, sizeof log - 1, f); log[n] = 0; fclose(f); }
    BT_CHECK(lines_of(tp("run_nan/log.jsonl")) == 1 && strstr(log, "\"train_loss\": null") && !strstr(log, "nan"), "log: %s", log);
    char buf[32];
    BT_CHECK(!strcmp(json_num(buf, sizeof buf, "%.6f", NAN), "null") && !strcmp(json_num(buf, sizeof buf, "%.6f", -INFINITY), "null") &&
             !strcmp(json_num(buf, sizeof buf, "%.2f", 1.5), "1.50"), "json_num");
}

/* finding 9: a log that cannot be written (a file size limit, as on a full disk) is one warning;
   the run goes on */
static void test_log_write_error_warns_once(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char cmd[3000], out[4096];
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 1; exec %s --run-train " TINY_RUN " -x 6 -o %s 2>%s >/dev/null",
             self_exe, tp("run_full"), tp("full.err"));
    int rc = system(cmd);
    FILE *f = fopen(tp("full.err"), "rb");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0; out[n] = 0;
    if (f) fclose(f);
    const char *w = strstr(out, "warning: -o");
    BT_CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "the run must go on: status %d: %s", rc, out);
    BT_CHECK(w && strstr(w, "File too large") && !strstr(w + 1, "warning: -o"), "one warning: %s", out);
}

/* finding 10 (runs): -v 0 needs no validation shards; no "make data" hint for a given -i; a
   missing --tokenizer given explicitly is an error before training; a bad -e prints the usage */
static void test_flags_in_runs(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char out[65536];
    int rc = run_train(TINY_RUN " -x 1 -j /nonexistent/val.bin", out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "no validation"), "-v 0 without -j data: exit %d: %s", rc, out);
    rc = run_train(TINY_RUN " -x 1 -i /nonexistent/train*.bin", out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "no files match") && !strstr(out, "make data"), "-i given: exit %d: %s", rc, out);
    rc = run_train(TINY_RUN " -x 1 --tokenizer /nonexistent", out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "--tokenizer") && strstr(out, "/nonexistent/encoder.json") && !strstr(out, "step "), "--tokenizer: exit %d: %s", rc, out);
    rc = run_train("-e /nonexistent/model.bin -x 1", out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "usage: train_gpt2") && strstr(out, "neither a preset"), "bad -e: exit %d: %s", rc, out);
}

/* finding 11: every early exit frees what it made (under make test-asan, LeakSanitizer makes a
   leaking run exit with 23 and say so) */
static void test_early_exits_free_memory(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char args[2000], out[65536];
    FILE *f = fopen(tp("short_model.bin"), "wb"); int32_t h[256] = {GPT2_MODEL_MAGIC, 3, 32, 300, 2, 2, 32, 384}; fwrite(h, 4, 256, f); fclose(f);
    const char *cases[] = {"-x 1 -e %s", "-x 1 -i /nonexistent*.bin", "-x 1 -v 5 -j /nonexistent*.bin", "-x 1 --tokenizer /nonexistent",
                           "-x 1 -t 1000", "-x 1 --save /nonexistent/m.bin", "-x 1 -o /dev/null"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char c[600];
        snprintf(c, sizeof c, cases[i], tp("short_model.bin"));
        snprintf(args, sizeof args, TINY_RUN " %s", c);
        int rc = run_train(args, out, sizeof out);
        BT_CHECK(rc == 1 && !strstr(out, "LeakSanitizer") && !strstr(out, "step "), "'%s': exit %d: %s", c, rc, out);
    }
}

/* finding 12: the KV cache gives the full forward pass's logits at every position (fp32 1e-5),
   filling the context exactly; one more position is an error; sampling past the context works */
static void test_kv_cache(void) {
    gpt2 m;
    gpt2_config cfg = small_cfg(300);
    gpt2_build(&m, cfg, bt_cpu()); gpt2_init(&m, 11);
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = (int32_t)(bt_philox_uniform(9, (uint64_t)i) * 300);
    double e1 = kv_cache_worst_relerr(&m, ids, 32, 1, BT_F32), e5 = kv_cache_worst_relerr(&m, ids, 20, 5, BT_F32);
    printf("info: kv cache vs full forward, fp32 cpu: worst relative error %.2e (1 prompt token, 32 positions), %.2e (5, 20)\n", e1, e5);
    BT_CHECK(e1 < 1e-5 && e5 < 1e-5, "kv cache logits differ: %.3e, %.3e", e1, e5);
    gpt2_kv_cache *kv = gpt2_kv_cache_create(&m, BT_F32);
    bt_scope_begin();
    gpt2_forward_cached(&m, kv, ids, 32);
    BT_EXPECT_ERROR(gpt2_forward_cached(&m, kv, ids, 1), "do not fit the context of 32");
    gpt2_kv_cache_reset(kv);
    BT_CHECK(gpt2_forward_cached(&m, kv, ids, 2) != NULL && kv->len == 2, "reset");
    bt_scope_end();
    gpt2_kv_cache_free(kv, cfg.L);
    gpt2_sample(&m, NULL, 40, 5, 1.0, 3, BT_F32);   /* 40 tokens through a context of 32: the cache restarts */
    gpt2_free(&m);
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}

/* a tiny GPT must drive the loss on one short sequence to ~0: the whole forward/backward/AdamW
   path works together */
static void test_overfit(void) {
    gpt2 m; gpt2_build(&m, small_cfg(64), bt_cpu()); gpt2_init(&m, 3);
    int T = 16; int32_t x[17];
    for (int i = 0; i < T + 1; i++) x[i] = (int32_t)(bt_philox_uniform(42, (uint64_t)i) * 64);
    bt_adamw opt; bt_adamw_init(&opt, m.params, m.n_params, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f);
    double first = 0, loss = 0;
    for (int step = 0; step < 150; step++) {
        bt_zero_(m.flat_grad);
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(x, bt_shape2(1, T), BT_I32, bt_cpu()), *tgt = bt_from_data(x + 1, bt_shape2(1, T), BT_I32, bt_cpu());
        bt_tensor *l = gpt2_loss(&m, idx, tgt, BT_F32);
        loss = bt_item(l); if (step == 0) first = loss;
        bt_backward(l);
        bt_scope_end();
        bt_adamw_step(&opt, 1e-2f);
        if (loss < 0.05) break;
    }
    BT_CHECK(fabs(first - log(64.0)) < 0.3, "initial loss %.3f should be near ln(64) = %.3f", first, log(64.0));
    BT_CHECK(loss < 0.1, "overfit loss %.4f not below 0.1", loss);
    bt_adamw_free(&opt); gpt2_free(&m);
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}

/* a small GPT on Tiny Shakespeare: the validation loss falls well below ln(V) within 40 steps */
static void test_shakespeare_loss_falls(void) {
    if (access("data/tinyshakespeare_train.bin", R_OK) || access("data/tinyshakespeare_val.bin", R_OK)) {
        BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return;
    }
    train_opts o; char err[256];
    parse(quick() ? "-e s2 -b 4 -t 32 -x 15 -v 0 -g 0 -l 3e-3 -m 4 --quiet" : "-e s2 -b 8 -t 32 -x 40 -v 0 -g 0 -l 3e-3 -m 8 --quiet", &o, err);
    gpt2_config cfg; gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, sizeof err) == 0, "%s", err);
    trainer tr; memset(&tr, 0, sizeof tr); tr.o = o; tr.dt = BT_F32; tr.val_B = o.B;
    tr.train = bt_loader_open(o.train_glob, o.B, o.T, 0, 1, 1, 1); tr.val = bt_loader_open(o.val_glob, o.B, o.T, 0, 1, 0, 0);
    BT_CHECK(tr.train && tr.val, "loaders: %s", bt_data_error());
    if (!tr.train || !tr.val) return;
    tr.inputs = (int32_t *)malloc(4 * (size_t)o.B * o.T); tr.targets = (int32_t *)malloc(4 * (size_t)o.B * o.T);
    gpt2_build(&tr.model, cfg, bt_cpu()); gpt2_init(&tr.model, 1);
    bt_adamw_init(&tr.opt, tr.model.params, tr.model.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    double before = evaluate(&tr), norm = 0, loss = 0;
    for (int s = 0; s < o.steps; s++) BT_CHECK(train_step(&tr, s, o.lr, &loss, &norm), "step %d: loss %g norm %g", s, loss, norm);
    double after = evaluate(&tr);
    BT_CHECK(fabs(before - log(50257.0)) < 0.5, "initial val loss %.3f should be near ln(50257) = 10.82", before);
    BT_CHECK(after < before - (quick() ? 1.0 : 2.0), "val loss %.3f -> %.3f did not fall enough", before, after);
    BT_CHECK(norm == norm && norm > 0, "grad norm %f", norm);
    bt_adamw_free(&tr.opt); gpt2_free(&tr.model); bt_loader_close(tr.train); bt_loader_close(tr.val);
    free(tr.inputs); free(tr.targets);
}

/* fp32 on the CPU against PyTorch fp32 (TF32 off): both sides sum in different orders, so
   errors are rounding-sized. Measured: logits ~1e-7, loss ~1e-8, grads <~1e-6, steps ~1e-7; the
   bounds leave one to two orders of margin and stay far below what a wrong formula gives. */
static void test_parity_tiny(void) {
    const char *model = "tests/fixtures/gpt2_tiny.bin", *state = "tests/fixtures/gpt2_tiny_state.bin";
    if (access(model, R_OK) || access(state, R_OK)) { BT_SKIP("no %s (python3 tests/gpt2_ref.py --config tiny, on a machine with torch)", state); return; }
    parity_tol tol = {1e-5, 1e-5, 1e-4, 1e-4};
    parity_result r;
    gpt2_parity(model, state, bt_cpu(), BT_F32, tol, &r);
    printf("parity tiny cpu fp32: logits %.2e loss %.2e worst grad %.2e (%s) worst step loss %.2e\n",
           r.logits, r.loss, r.grad_worst, r.grad_worst_name, r.step_loss_worst);
}

/* --save-loop PATH SEED N: save the small model of init SEED to PATH N times */
static int save_loop(const char *path, int seed, int n) {
    gpt2 m; char err[512];
    gpt2_build(&m, small_cfg(300), bt_cpu()); gpt2_init(&m, (uint64_t)seed);
    int bad = 0;
    for (int i = 0; i < n; i++) if (gpt2_save(&m, path, err, sizeof err)) { fprintf(stderr, "save %d: %s\n", i, err); bad++; }
    gpt2_free(&m);
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--run-train")) {   /* a run of train_gpt2 in this process, as its main does */
        train_opts o; char err[1024];
        default_opts(&o);
        int r = parse_args(argc - 1, argv + 1, &o, err, sizeof err);
        if (r) { fprintf(stderr, "error: %s\n", err); return 2; }
        return train_main(&o);
    }
    if (argc == 5 && !strcmp(argv[1], "--save-loop")) return save_loop(argv[2], atoi(argv[3]), atoi(argv[4]));
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[n > 0 ? n : 0] = 0;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bt_test_gpt2.%ld", (long)getpid());
    mkdir(tmpdir, 0755);
    BT_RUN(test_cli);
    BT_RUN(test_cli_misread_flags);
    BT_RUN(test_size_overflow);
    BT_RUN(test_model_file);
    BT_RUN(test_save_special_targets);
    BT_RUN(test_concurrent_saves);
    BT_RUN(test_bad_output_paths_do_not_train);
    BT_RUN(test_bad_token_in_shard);
    BT_RUN(test_nonfinite_loss_stops);
    BT_RUN(test_log_write_error_warns_once);
    BT_RUN(test_flags_in_runs);
    BT_RUN(test_early_exits_free_memory);
    BT_RUN(test_kv_cache);
    BT_RUN(test_overfit);
    BT_RUN(test_parity_tiny);
    BT_RUN(test_shakespeare_loss_falls);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return bt_test_summary("test_gpt2");
}
