/* test_train_gpt2.c - the program train_gpt2.c on the CPU: its command line (values, misread
   flags, sizes in 64 bits), and whole runs that must fail early and cleanly (bad output paths, bad
   tokens, special files, a diverging loss, a full disk, missing files, a model too large for the
   memory) or learn (the loss falls on
   Tiny Shakespeare). The runs are this binary re-executed as train_gpt2 (tests/train_runs.h). */
#define _XOPEN_SOURCE 700   /* mknod, for a device node of our own */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"
#include <float.h>
#include <sys/sysmacros.h>

static int parse(const char *line, train_opts *o, char *err) { return train_parse(line, o, err, 256); }
static int parse_argv(int argc, const char **args, train_opts *o, char *err) {   /* for values strtok cannot make ("") */
    train_default_opts(o);
    return parse_args(argc, (char **)args, o, err, 256);
}
#define TINY_RUN "-e s2 -b 2 -t 16 -v 0 -g 0 --quiet"

static void test_cli(void) {
    train_opts o; char err[256];
    BT_CHECK(parse("-b 4 -t 32 -x 10 --precision bf16", &o, err) == 0 && o.B == 4 && o.T == 32 && o.steps == 10, "good flags: %s", err);
    BT_CHECK(parse("-h", &o, err) == 1, "-h asks for help");
    BT_CHECK(parse("--device cuda:1", &o, err) == 0 && !strcmp(o.device, "cuda:1"), "--device cuda:1: %s", err);
    const char *rc_names[] = {"none", "gelu", "attn", "mlp", "block"};
    const int rc_flags[] = {0, BT_RECOMPUTE_GELU, BT_RECOMPUTE_ATTN, BT_RECOMPUTE_MLP, BT_RECOMPUTE_BLOCK};
    for (int i = 0; i < 5; i++) {
        char line[64]; snprintf(line, sizeof line, "--recompute %s", rc_names[i]);
        BT_CHECK(parse(line, &o, err) == 0 && o.recompute == rc_flags[i] && !strcmp(trainer_recompute_name(o.recompute), rc_names[i]),
                 "%s: %d (%s)", line, o.recompute, err);
    }
    BT_CHECK(parse("--recompute gelu --tp 2", &o, err) == 0, "--recompute gelu with --tp: %s", err);
    struct { const char *args, *msg; } bad[] = {
        {"-b", "-b needs a value"}, {"-b 0", "bad value '0' for -b"}, {"-b x", "bad value 'x' for -b"},
        {"-t 12abc", "bad value '12abc' for -t"}, {"-l -1", "bad value '-1' for -l"}, {"--bogus 1", "unknown option '--bogus'"},
        {"--precision fp16", "--precision must be fp32, tf32, bf16 or fp8"}, {"--device tpu", "--device must be auto, cpu, cuda or cuda:N"},
        {"-q 2", "bad value '2' for -q"}, {"--device cuda:x", "--device must be"}, {"--device cuda:99", "--device must be"},
        {"-x 1 --bogus", "unknown option '--bogus'"}, {"-x 1 stray", "unknown option 'stray'"},   /* issue 35, finding 7: last, no value */
        {"--recompute all", "--recompute must be none, norm, gelu, attn, mlp or block, got 'all'"},
        {"--recompute block --tp 2", "--recompute attn, mlp or block: not with --tp or --cp"},
        {"--recompute norm --tp 2", "--recompute norm: not with --tp or --cp"},
        {"--cp 2 --recompute mlp", "not with --tp or --cp"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = parse(bad[i].args, &o, err);
        BT_CHECK(r == -1 && strstr(err, bad[i].msg), "'%s' gave %d '%s', expected '%s'", bad[i].args, r, err, bad[i].msg);
    }
    gpt2_config g; gpt2_config_from_preset("s2", 50257, &g);
    trainer_config cfg = trainer_config_gpt2(g);
    parse("-t 4096", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "longer than the model's context"), "T > maxT: %s", err);
    parse("-b 4 -t 32 -d 100", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "not a multiple of B*T"), "bad -d: %s", err);
    parse("--precision bf16", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "needs a GPU"), "bf16 on cpu: %s", err);
    parse("", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == 0 && o.B == 8 && o.T == 64 && o.total_batch == 512, "cpu defaults");
    /* --grad-dtype bf16: a bf16 or fp8 GPU run with one micro-batch a step (resolve_opts as on a GPU) */
    BT_CHECK(parse("--grad-dtype f16", &o, err) == -1 && strstr(err, "--grad-dtype must be auto, f32 or bf16, got 'f16'"), "f16: %s", err);
    BT_CHECK(parse("", &o, err) == 0 && !strcmp(o.grad_dtype, "auto"), "the default gradient dtype: %s", o.grad_dtype);
    /* auto: bf16 for a bf16 or fp8 GPU run of one process with one micro-batch a step and -b given; else f32 */
    static const struct { const char *flags; int gpu; const char *want; } au[] = {
        {"-b 4 -t 32 -d 128", 1, "bf16"}, {"--precision fp8 -b 4 -t 32 -d 128", 1, "bf16"}, {"-b 4 -t 32 -d 256", 1, "f32"},
        {"--precision tf32 -b 4 -t 32 -d 128", 1, "f32"}, {"--precision fp32 -b 4 -t 32 -d 128", 1, "f32"}, {"-t 32 -d 128", 1, "f32"},
        {"-b 4 -t 32", 0, "f32"}, {"-b 4 -t 32 -d 128 --nproc 2", 1, "f32"}, {"-b 4 -t 32 -d 128 --tp 2", 1, "f32"},
        {"-b 4 -t 32 -d 128 --grad-dtype f32", 1, "f32"}, {"-b 4 -t 32 -d 128 --grad-dtype auto", 1, "bf16"}};
    for (size_t i = 0; i < sizeof au / sizeof au[0]; i++) {
        BT_CHECK(parse(au[i].flags, &o, err) == 0, "'%s': %s", au[i].flags, err);
        int r = resolve_opts(&o, au[i].gpu, &cfg, err, 256);
        BT_CHECK(r == 0 && !strcmp(o.grad_dtype, au[i].want), "auto, '%s' on a %s: %d %s (want %s) %s", au[i].flags, au[i].gpu ? "GPU" : "CPU",
                 r, o.grad_dtype, au[i].want, r ? err : "");
    }
    parse("--grad-dtype bf16 -b 4 -t 32", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "--grad-dtype bf16 needs --precision bf16 or fp8 on a GPU"), "cpu: %s", err);
    parse("--grad-dtype bf16 --precision tf32 -b 4 -t 32 -d 128", &o, err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, 256) == -1 && strstr(err, "fp32 and tf32 runs compute them in fp32"), "tf32: %s", err);
    parse("--grad-dtype bf16 -b 4 -t 32 -d 256", &o, err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, 256) == -1 && strstr(err, "needs one micro-batch a step: -d 256 is 2 micro-batches") &&
             strstr(err, "give -d 128"), "two micro-batches: %s", err);
    parse("--grad-dtype bf16 --precision fp8 -b 4 -t 32 -d 128", &o, err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, 256) == 0, "fp8, one micro-batch: %s", err);
    parse("--grad-dtype bf16 -b 4 -t 32", &o, err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, 256) == -1 && strstr(err, "-d 524288 is 4096 micro-batches"), "the GPU's default -d: %s", err);
}

/* finding 10: flags accepted and ignored or misread */
static void test_cli_misread_flags(void) {
    train_opts o; char err[256];
    gpt2_config g = {32, 50257, 50304, 2, 2, 32};   /* maxT 32 */
    trainer_config cfg = trainer_config_gpt2(g);
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

/* finding 6: sizes in 64 bits, bounded, the error naming the flag */
static void test_size_overflow(void) {
    train_opts o; char err[512];
    gpt2_config g = {1 << 20, 50257, 50304, 2, 2, 32};   /* a model with a very long context */
    trainer_config cfg = trainer_config_gpt2(g);
    parse("-b 65536 -t 65536", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, sizeof err) == -1 && strstr(err, "-b 65536 x -t 65536") && strstr(err, "4294967296"), "B*T: %s", err);
    parse("-b 32768 -t 65536", &o, err);   /* 2^31: one past int32 */
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, sizeof err) == -1 && strstr(err, "2^31"), "B*T = 2^31: %s", err);
}

/* a model whose static state cannot fit is refused before anything is allocated, naming the
   bytes and what it has (a 323B-parameter dLwC shape on this host; its 5 TB would otherwise be a
   failed allocation deep in the build, or the OOM killer on a host that overcommits); the check
   itself at the edge of this host's available memory */
static void test_static_memory_refused(void) {
    char out[65536], err[512];
    int rc = train_run("-e d100w16384 -b 1 -t 8 -x 1 -v 0 -g 0 --device cpu", out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "error: the model (d100w16384): 322.98B parameters need 5167.8 GB of host memory") &&
             strstr(out, "16 bytes a parameter") && !strstr(out, "step "), "exit %d: %s", rc, out);
    train_opts o;
    parse("--offload adamw", &o, err);
    double avail = host_available_bytes();
    BT_CHECK(avail > 0, "MemAvailable unread: %g", avail);
    int64_t n = (int64_t)(avail / 8.0);   /* m and v of n parameters: all of the available memory */
    BT_CHECK(check_static_memory(&o, n, 0, bt_cpu(), BT_F32, 0, err, sizeof err) == -1 && strstr(err, "16 bytes a parameter"),
             "a CPU run of %lld parameters: %s", (long long)n, err);
    BT_CHECK(check_static_memory(&o, 1000, 0, bt_cpu(), BT_F32, 0, err, sizeof err) == 0, "1000 parameters refused: %s", err);
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
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 1 && strstr(out, "--save") && strstr(out, bad[i][1]), "--save %s: exit %d: %s", bad[i][0], rc, out);
        BT_CHECK(!strstr(out, "step ") && lines_of(tp("run_bad_save/log.jsonl")) <= 0, "--save %s: it trained", bad[i][0]);
    }
    snprintf(args, sizeof args, TINY_RUN " -x 2 -o /dev/null/x");
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "-o") && !strstr(out, "step "), "-o /dev/null/x: exit %d: %s", rc, out);
}

/* issue 35 finding 4: a symbolic link planted where -o DIR's log.jsonl or --export-hf DIR's
   model.safetensors goes is refused before the first step, naming it; its target is untouched */
static void test_log_link_refused(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char args[2000], out[65536];
    mkdir(tp("linked_out"), 0755);
    bt_test_write_text(tp("victim.txt"), "precious");
    BT_CHECK(symlink(tp("victim.txt"), tp("linked_out/log.jsonl")) == 0, "symlink");
    snprintf(args, sizeof args, TINY_RUN " -x 1 -o %s", tp("linked_out"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "log.jsonl") && strstr(out, "symbolic link") && !strstr(out, "step "), "exit %d: %s", rc, out);
    BT_CHECK(bt_test_file_has(tp("victim.txt"), "precious"), "the link's target was truncated");
    mkdir(tp("linked_hf"), 0755);
    BT_CHECK(symlink(tp("victim.txt"), tp("linked_hf/model.safetensors")) == 0, "symlink");
    snprintf(args, sizeof args, TINY_RUN " -x 1 --export-hf %s", tp("linked_hf"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "--export-hf") && strstr(out, "model.safetensors") && strstr(out, "symbolic link") && !strstr(out, "step "),
             "--export-hf: exit %d: %s", rc, out);
    BT_CHECK(bt_test_file_has(tp("victim.txt"), "precious"), "the link's target was replaced");
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
        int rc = train_run(args, out, sizeof out);
        char want[64]; snprintf(want, sizeof want, "token %d at position 3000", bad[i]);
        BT_CHECK(rc == 1 && strstr(out, "bad_tokens.bin") && strstr(out, want) && !strstr(out, "step "), "token %d: exit %d: %s", bad[i], rc, out);
    }
    free(t);
    bt_shard_close(&s);
}

/* finding 5: a non-finite loss stops the run at that step, non-zero, no model saved, and the
   log holds JSON (null, never nan); the weights were finite, so it is the run that diverged */
static void test_nonfinite_loss_stops(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    gpt2 m; char err[512], args[2000], out[65536];
    gpt2_build(&m, gpt2_config_make(2, 2, 32, 32, BT_GPT2_VOCAB), bt_cpu()); gpt2_init(&m, 5);
    bt_fill_(m.lnfw, FLT_MAX);   /* finite weights (NaN ones are refused when loaded), logits that are not */
    BT_CHECK(gpt2_save(&m, tp("nan_model.bin"), err, sizeof err) == 0, "%s", err);
    gpt2_free(&m);
    snprintf(args, sizeof args, "-e %s -b 2 -t 16 -x 3 -v 0 -g 0 -o %s --save %s", tp("nan_model.bin"), tp("run_nan"), tp("nan_out.bin"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "step 1:") && strstr(out, "not finite") && strstr(out, "training diverged"), "exit %d: %s", rc, out);
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
             train_runs_exe, tp("run_full"), tp("full.err"));
    int rc = system(cmd);
    FILE *f = fopen(tp("full.err"), "rb");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0; out[n] = 0;
    if (f) fclose(f);
    const char *w = strstr(out, "warning: -o");
    BT_CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "the run must go on: status %d: %s", rc, out);
    BT_CHECK(w && strstr(w, "File too large") && !strstr(w + 1, "warning: -o"), "one warning: %s", out);
}

/* finding 10 (runs): -v 0 needs no validation shards; no "make data" hint for a given -i; a
   missing --tokenizer given explicitly is an error before training; a usage error (a bad -e, a bad
   value, a flag combination) is its reason and "see -h", exit 2; a text file as shards points at
   bt_tokenize */
static void test_flags_in_runs(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char out[65536];
    int rc = train_run(TINY_RUN " -x 1 -j /nonexistent/val.bin", out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "no validation"), "-v 0 without -j data: exit %d: %s", rc, out);
    rc = train_run(TINY_RUN " -x 1 -i /nonexistent/train*.bin", out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "no files match") && !strstr(out, "make data"), "-i given: exit %d: %s", rc, out);
    rc = train_run(TINY_RUN " -x 1 --tokenizer /nonexistent", out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "--tokenizer") && strstr(out, "/nonexistent/encoder.json") && !strstr(out, "step "), "--tokenizer: exit %d: %s", rc, out);
    rc = train_run("-e /nonexistent/model.bin -x 1", out, sizeof out);
    BT_CHECK(rc == 2 && strstr(out, "neither a preset") && strstr(out, "(see train_gpt2 -h)") && !strstr(out, "usage:"), "bad -e: exit %d: %s", rc, out);
    /* every usage error: its reason, "see -h", exit 2, and no usage text */
    const char *usage_errors[] = {"-b 0", "--bogus", "-t 99999", "--precision bf16 --device cpu", "--tp 2"};
    for (size_t i = 0; i < sizeof usage_errors / sizeof usage_errors[0]; i++) {
        char a[512];
        snprintf(a, sizeof a, TINY_RUN " -x 1 %s", usage_errors[i]);
        rc = train_run(a, out, sizeof out);
        BT_CHECK(rc == 2 && strstr(out, "(see train_gpt2 -h)") && !strstr(out, "usage:") && !strstr(out, "step "), "'%s': exit %d: %s", usage_errors[i], rc, out);
    }
    /* a text file given as shards points at bt_tokenize */
    rc = train_run(TINY_RUN " -x 1 -i README.md", out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "not a token shard") && strstr(out, "bt_tokenize"), "-i README.md: exit %d: %s", rc, out);
}

/* --recompute block and mlp: the same losses and, after 4 steps, the same weights (the saved model
   file, byte for byte) as none: the gradients were the same bits at every step */
static void test_recompute_runs(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    const char *modes[] = {"none", "block", "mlp"};
    char out[65536], args[4096], dir[3][1600], bin[3][1600];
    double loss[3][8];
    int n[3];
    for (int k = 0; k < 3; k++) {
        snprintf(dir[k], sizeof dir[k], "%s", tp(modes[k]));
        snprintf(bin[k], sizeof bin[k], "%s.bin", dir[k]);
        snprintf(args, sizeof args, TINY_RUN " -x 4 --recompute %s -o %s --save %s", modes[k], dir[k], bin[k]);
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0 && (k == 0 || strstr(out, modes[k])), "--recompute %s: exit %d: %s", modes[k], rc, out);
        n[k] = read_losses(dir[k], loss[k], 8);
    }
    for (int k = 1; k < 3; k++) {
        BT_CHECK(n[k] == 4 && n[0] == 4 && !memcmp(loss[k], loss[0], sizeof(double) * 4), "--recompute %s: %d losses, first %.9g (none: %d, %.9g)",
                 modes[k], n[k], loss[k][0], n[0], loss[0][0]);
        FILE *a = fopen(bin[0], "rb"), *b = fopen(bin[k], "rb");
        int same = a && b;
        for (int ca = 0, cb = 0; same && ca != EOF; ) { ca = fgetc(a); cb = fgetc(b); same = ca == cb; }
        if (a) fclose(a);
        if (b) fclose(b);
        BT_CHECK(same, "--recompute %s: the weights after 4 steps differ from none's", modes[k]);
    }
}

/* issue 35, finding 7: a path of 1,500+ bytes is shortened in the middle, and the reason after it
   stays (it was cut off: "error: --init-from: /tmp/.../abcdefghi") */
static void test_long_paths_keep_reason(void) {
    char longp[2000], under_file[2000], args[4096], out[65536];
    size_t at = (size_t)snprintf(longp, sizeof longp, "%s", bt_test_dir);
    while (at < 1550) at += (size_t)snprintf(longp + at, sizeof longp - at, "/0123456789");
    bt_test_write_text(tp("plain_file"), "x");
    snprintf(under_file, sizeof under_file, "%s%s", tp("plain_file"), longp + strlen(bt_test_dir));
    const struct { const char *flag, *path, *reason; int code; } cases[] = {
        {"-e", longp, "model.bin: cannot open: No such file or directory", 2},
        {"--init-from", longp, "model.bin: cannot open: No such file or directory", 1},
        {"--resume", longp, "model.bin: cannot open: No such file or directory", 1},
        {"-i", longp, "model.bin: no files match", 1}, {"--save", longp, "(No such file or directory)", 1},
        {"--tokenizer", longp, "model.bin/encoder.json: cannot open: No such file or directory", 1},
        {"-o", under_file, "model.bin: cannot make the directory: Not a directory", 1},
        {"--ckpt-dir", under_file, "model.bin: cannot make the directory: Not a directory", 1},
        {"--export-hf", under_file, "model.bin: cannot make the directory: Not a directory", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "%s -x 1 %s %s/model.bin", strcmp(cases[i].flag, "--init-from") && strcmp(cases[i].flag, "-e") ? TINY_RUN : "-b 2 -t 16 -v 0 -g 0",
                 cases[i].flag, cases[i].path);
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == cases[i].code && strstr(out, cases[i].reason) && strstr(out, "...") && !strstr(out, "step "), "%s: exit %d: %.200s ... %s",
                 cases[i].flag, rc, out, strlen(out) > 300 ? out + strlen(out) - 300 : out);
    }
}

/* finding 11: every early exit frees what it made (under make test-asan, LeakSanitizer makes a
   leaking run exit with 23 and say so) */
static void test_early_exits_free_memory(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char args[2000], out[65536];
    FILE *f = fopen(tp("short_model.bin"), "wb"); int32_t h[256] = {20240326, 3, 32, 300, 2, 2, 32, 384}; fwrite(h, 4, 256, f); fclose(f);
    const struct { const char *args; int code; } cases[] = {   /* 2: a usage error, 1: another */
        {"-x 1 -e %s", 2}, {"-x 1 -i /nonexistent*.bin", 1}, {"-x 1 -v 5 -j /nonexistent*.bin", 1}, {"-x 1 --tokenizer /nonexistent", 1},
        {"-x 1 -t 1000", 2}, {"-x 1 --save /nonexistent/m.bin", 1}, {"-x 1 -o /dev/null", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char c[600];
        snprintf(c, sizeof c, cases[i].args, tp("short_model.bin"));
        snprintf(args, sizeof args, TINY_RUN " %s", c);
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == cases[i].code && !strstr(out, "LeakSanitizer") && !strstr(out, "step "), "'%s': exit %d (expected %d): %s", c, rc, cases[i].code, out);
    }
}

/* a small GPT on Tiny Shakespeare: the validation loss falls well below ln(V) within 40 steps */
static void test_shakespeare_loss_falls(void) {
    if (access("data/tinyshakespeare_train.bin", R_OK) || access("data/tinyshakespeare_val.bin", R_OK)) {
        BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return;
    }
    train_opts o; char err[256];
    parse(quick() ? "-e s2 -b 4 -t 32 -x 15 -v 0 -g 0 -l 3e-3 -m 4 --quiet" : "-e s2 -b 8 -t 32 -x 40 -v 0 -g 0 -l 3e-3 -m 8 --quiet", &o, err);
    gpt2_config cfg; gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
    trainer_config tc = trainer_config_gpt2(cfg);
    BT_CHECK(resolve_opts(&o, 0, &tc, err, sizeof err) == 0, "%s", err);
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

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_train_gpt2");
    BT_RUN(test_cli);
    BT_RUN(test_cli_misread_flags);
    BT_RUN(test_size_overflow);
    BT_RUN(test_static_memory_refused);
    BT_RUN(test_bad_output_paths_do_not_train);
    BT_RUN(test_log_link_refused);
    BT_RUN(test_bad_token_in_shard);
    BT_RUN(test_nonfinite_loss_stops);
    BT_RUN(test_log_write_error_warns_once);
    BT_RUN(test_flags_in_runs);
    BT_RUN(test_recompute_runs);
    BT_RUN(test_long_paths_keep_reason);
    BT_RUN(test_early_exits_free_memory);
    BT_RUN(test_shakespeare_loss_falls);
    train_runs_done();
    return bt_test_summary("test_train_gpt2");
}
