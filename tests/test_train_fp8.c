/* test_train_fp8.c - --precision fp8 on the CPU (issue 37), where bt_linear_fp8 emulates the GPU's
   casts and products with the same bytes: GPT-2's four block linears per layer through FP8 with a
   state each in one flat buffer (gpt2_fp8_enable). The model: the amaxes of two micro-batches
   accumulate as the larger of each (bitwise), gpt2_fp8_update rolls them into the histories and
   the next scales; a forward with grad mode off (validation, samples) leaves the states alone and
   is the bf16 linears' forward; --recompute block gives the same gradients and states as none.
   The program: an fp8 run's losses stay within FP8_TOL of the fp32 run's and fall; its checkpoints
   hold fp8.state (which evolves from step to step) and fp8.primed; a run resumed from a middle
   checkpoint is the uninterrupted one bit for bit (losses, weights, AdamW state, FP8 states), for
   both recipes; an fp32 checkpoint resumed with fp8 and the reverse are refused, naming
   --precision; --init-from takes an fp8 checkpoint's weights into any run; the flag errors (recipe
   names, history range, flags without fp8, a GPU's 16-byte rows); data parallelism (ddp, zero2, fsdp
   on 2 CPU ranks against one process); and a Llama
   (ls2) through the same wiring. Runs: the s2 and ls2 presets, -b 1 -t 8 or -b 2 -t 16, a few
   steps (tests/train_runs.h). */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"

#define RUN "-e s2 -b 1 -t 8 -v 0 -g 0 --quiet"
/* The fp8 run's loss against fp32's, per step, over the first 8 steps of s2 (-b 2 -t 16): measured
   at most 0.0033 nats on this CPU for either recipe (x and w in e4m3: 3 mantissa bits, a relative
   rounding of up to 2^-4 per element, which averages out over the K-long dot products). 0.03
   leaves 9x room for other compilers' and CPUs' f32 sums. */
#define FP8_TOL 0.03

/* ---- the model ---- */
typedef struct { gpt2 m; bt_tensor *idx[2], *tgt[2]; int64_t nf; } fixture;
static void fixture_make(fixture *f, int fp8) {
    gpt2_build(&f->m, gpt2_config_make(2, 2, 32, 16, 64), bt_cpu());
    gpt2_init(&f->m, 7);
    if (fp8) gpt2_fp8_enable(&f->m, NULL);   /* CURRENT in the op's default: set DELAYED where the test needs it */
    int32_t ids[2][2 * 17];
    uint64_t s = 12345;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 2 * 17; i++) { s = s * 6364136223846793005ull + 1442695040888963407ull; ids[k][i] = (int32_t)(s >> 33) % 64; }
    bt_scope_begin();
    for (int k = 0; k < 2; k++) {
        int32_t x[2 * 16], y[2 * 16];
        for (int r = 0; r < 2; r++)
            for (int t = 0; t < 16; t++) { x[r * 16 + t] = ids[k][r * 17 + t]; y[r * 16 + t] = ids[k][r * 17 + t + 1]; }
        f->idx[k] = bt_keep(bt_from_data(x, bt_shape2(2, 16), BT_I32, bt_cpu()));
        f->tgt[k] = bt_keep(bt_from_data(y, bt_shape2(2, 16), BT_I32, bt_cpu()));
    }
    bt_scope_end();
    f->nf = fp8 ? bt_numel(f->m.fp8_buf) : 0;
}
static void fixture_free(fixture *f) {
    for (int k = 0; k < 2; k++) { bt_release(f->idx[k]); bt_release(f->tgt[k]); }
    gpt2_free(&f->m);
}
static void states_delayed(gpt2 *m) {
    bt_fp8_opts o = bt_fp8_default_opts();
    o.recipe = BT_FP8_DELAYED;
    gpt2_fp8_enable(m, &o);
}
/* micro-batch k's forward and backward (grad mode on: the FP8 linears); its loss */
static float fwd_bwd(fixture *f, int k) {
    bt_scope_begin();
    bt_tensor *loss = gpt2_loss(&f->m, f->idx[k], f->tgt[k], BT_F32);
    float l = (float)bt_item(loss);
    bt_backward(loss);
    bt_scope_end();
    return l;
}
static void get(bt_tensor *t, float *out) { bt_to_host(t, out, BT_F32); }

/* two micro-batches: each state's amax row is the larger of the two alone, bit for bit; then the
   update: history[0] <- that amax, amax <- 0, scale <- amax / fmax, every tensor primed */
static void test_model_accumulation(void) {
    fixture f;
    fixture_make(&f, 1);
    states_delayed(&f.m);
    int64_t nf = f.nf, row = 2 + 16, nst = 2 * GPT2_FP8_LINEARS;
    BT_CHECK(nf == nst * 3 * row, "fp8_buf holds %lld floats, expected 4 L 3 (2 + 16) = %lld", (long long)nf, (long long)(nst * 3 * row));
    float *a = malloc(sizeof(float) * nf), *b = malloc(sizeof(float) * nf), *ab = malloc(sizeof(float) * nf), *up = malloc(sizeof(float) * nf);
    fwd_bwd(&f, 0); get(f.m.fp8_buf, a);
    states_delayed(&f.m);
    fwd_bwd(&f, 1); get(f.m.fp8_buf, b);
    states_delayed(&f.m);
    fwd_bwd(&f, 0); fwd_bwd(&f, 1); get(f.m.fp8_buf, ab);
    int bad = 0, differ = 0;
    for (int64_t r = 0; r < nf / row; r++) {
        float want = a[r * row] > b[r * row] ? a[r * row] : b[r * row];
        bad += memcmp(&ab[r * row], &want, 4) != 0 || !(want > 0);
        differ += r % 3 != BT_FP8_W && a[r * row] != b[r * row];   /* x and gy differ between the batches */
    }
    BT_CHECK(!bad, "%d of %lld amax rows are not max(micro-batch 0, micro-batch 1) (or are 0)", bad, (long long)(nf / row));
    BT_CHECK(differ > 0, "the two micro-batches gave the same amaxes everywhere: the test shows nothing");
    for (int i = 0; i < nst; i++) BT_CHECK(f.m.fp8[i].primed == 0 && f.m.fp8[i].seen == 7, "state %d: primed %u seen %u before the update", i, f.m.fp8[i].primed, f.m.fp8[i].seen);
    gpt2_fp8_update(&f.m);
    get(f.m.fp8_buf, up);
    bad = 0;
    for (int64_t r = 0; r < nf / row; r++) {
        float scale = bt_fp8_scale_of(ab[r * row], bt_fp8_max(bt_fp8_format((int)(r % 3))));
        bad += up[r * row] != 0 || memcmp(&up[r * row + 2], &ab[r * row], 4) || memcmp(&up[r * row + 1], &scale, 4) || up[r * row + 3] != 0;
    }
    BT_CHECK(!bad, "%d rows not rolled as bt_fp8_update states", bad);
    for (int i = 0; i < nst; i++) BT_CHECK(f.m.fp8[i].primed == 7 && f.m.fp8[i].seen == 0, "state %d: primed %u seen %u after", i, f.m.fp8[i].primed, f.m.fp8[i].seen);
    free(a); free(b); free(ab); free(up);
    fixture_free(&f);
}

/* grad mode off (validation, samples): the states untouched, the loss the bf16 linears' (here f32:
   the model without FP8, bit for bit); with grad mode on the loss is FP8's (another value) */
static void test_model_eval_is_plain(void) {
    fixture f, g;
    fixture_make(&f, 1);
    fixture_make(&g, 0);
    float *s0 = malloc(sizeof(float) * f.nf), *s1 = malloc(sizeof(float) * f.nf);
    get(f.m.fp8_buf, s0);
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    float lf = (float)bt_item(gpt2_loss(&f.m, f.idx[0], f.tgt[0], BT_F32)), lg = (float)bt_item(gpt2_loss(&g.m, g.idx[0], g.tgt[0], BT_F32));
    bt_scope_end();
    bt_set_grad_enabled(old);
    get(f.m.fp8_buf, s1);
    BT_CHECK(!memcmp(s0, s1, sizeof(float) * f.nf), "a forward with grad mode off changed the FP8 states");
    for (int i = 0; i < 2 * GPT2_FP8_LINEARS; i++) BT_CHECK(f.m.fp8[i].seen == 0, "state %d seen %u after a no-grad forward", i, f.m.fp8[i].seen);
    BT_CHECK(!memcmp(&lf, &lg, 4), "no-grad loss %.9g, the model without FP8 %.9g", lf, lg);
    float l8 = fwd_bwd(&f, 0);
    BT_CHECK(l8 != lg && fabsf(l8 - lg) < FP8_TOL, "the training forward's loss %.9g vs %.9g: FP8 must change it, a little", l8, lg);
    free(s0); free(s1);
    fixture_free(&f); fixture_free(&g);
}

/* --recompute block remakes each block in the backward (its first forward with grad mode off):
   the FP8 path travels with the region, so the gradients and the states are none's, bit for bit */
static void test_model_recompute(void) {
    fixture f;
    fixture_make(&f, 1);
    int64_t np = f.m.flat_numel;
    float *g0 = malloc(sizeof(float) * np), *g1 = malloc(sizeof(float) * np), *s0 = malloc(sizeof(float) * f.nf), *s1 = malloc(sizeof(float) * f.nf);
    for (int pass = 0; pass < 2; pass++) {
        int old = bt_set_recompute(pass ? BT_RECOMPUTE_BLOCK : 0);
        states_delayed(&f.m);
        bt_zero_(f.m.flat_grad);
        fwd_bwd(&f, 0); fwd_bwd(&f, 1);
        bt_set_recompute(old);
        get(f.m.flat_grad, pass ? g1 : g0); get(f.m.fp8_buf, pass ? s1 : s0);
    }
    BT_CHECK(!memcmp(g0, g1, sizeof(float) * np), "--recompute block: the gradients differ from none's");
    BT_CHECK(!memcmp(s0, s1, sizeof(float) * f.nf), "--recompute block: the FP8 states differ from none's");
    free(g0); free(g1); free(s0); free(s1);
    fixture_free(&f);
}

/* ---- the program ---- */
static void test_flags(void) {
    train_opts o;
    char err[512];
    const char *bad[][2] = {{"--precision fp9", "--precision must be fp32, tf32, bf16 or fp8, got 'fp9'"},
                            {"--precision fp8 --fp8-recipe late", "--fp8-recipe must be current or delayed, got 'late'"},
                            {"--precision fp8 --fp8-history 0", "bad value '0' for --fp8-history"},
                            {"--precision fp8 --fp8-history 1025", "bad value '1025' for --fp8-history"},
                            {"--precision fp8 --fp8-accum slow", "--fp8-accum must be split, fast or fast-dx, got 'slow'"},
                            {"--precision fp8 --fp8-head yes", "--fp8-head must be on or off, got 'yes'"},
                            {"--precision bf16 --fp8-head on", "--fp8-recipe, --fp8-history, --fp8-accum and --fp8-head need --precision fp8"},
                            {"--fp8-recipe current", "--fp8-recipe, --fp8-history, --fp8-accum and --fp8-head need --precision fp8"},
                            {"--precision bf16 --fp8-history 4", "--fp8-recipe, --fp8-history, --fp8-accum and --fp8-head need --precision fp8"},
                            {"--precision bf16 --fp8-accum fast", "--fp8-recipe, --fp8-history, --fp8-accum and --fp8-head need --precision fp8"},
                            {"--precision fp8 --tp 2", "--precision fp8: not with --tp or --cp"},
                            {"--precision fp8 --cp 2", "--precision fp8: not with --tp or --cp"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = train_parse(bad[i][0], &o, err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, bad[i][1]), "'%s': %d '%s'", bad[i][0], r, err);
    }
    BT_CHECK(train_parse("--precision fp8 --fp8-recipe current --fp8-history 4 --fp8-accum fast", &o, err, sizeof err) == 0 &&
             !strcmp(o.fp8_recipe, "current") && o.fp8_history == 4 && !strcmp(o.fp8_accum, "fast"), "good flags: %s", err);
    BT_CHECK(train_parse("--precision fp8 --fp8-accum fast-dx", &o, err, sizeof err) == 0 && !strcmp(o.fp8_accum, "fast-dx"), "fast-dx: %s", err);
    /* a GPU's FP8 products need rows of 16 bytes (resolve_opts as on a GPU: this CPU cannot run it) */
    trainer_config cfg = trainer_config_gpt2(gpt2_config_make(2, 2, 64, 128, 50257));
    train_parse("--precision fp8 -t 24 -b 2", &o, err, sizeof err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, sizeof err) == -1 && strstr(err, "--precision fp8 on a GPU: -t 24 is not a multiple of 16"), "-t 24: '%s'", err);
    train_parse("--precision fp8 -t 24 -b 2", &o, err, sizeof err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, sizeof err) == 0 && !strcmp(o.fp8_recipe, "delayed") && o.fp8_history == 16 &&
             !strcmp(o.fp8_accum, "fast-dx"), "-t 24 on a CPU: '%s'", err);
    cfg = trainer_config_gpt2(gpt2_config_make(2, 2, 72, 128, 50257));
    train_parse("--precision fp8 -t 32 -b 2", &o, err, sizeof err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, sizeof err) == -1 && strstr(err, "the model's width C 72"), "C 72: '%s'", err);
    cfg = trainer_config_llama(llama_config_make(2, 4, 2, 64, 40, 512, 128));   /* F 40 */
    train_parse("--precision fp8 -t 32 -b 2", &o, err, sizeof err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, sizeof err) == -1 && strstr(err, "the MLP width F 40"), "Llama F 40: '%s'", err);
    cfg = trainer_config_llama(llama_config_make(2, 4, 1, 56, 48, 512, 128));   /* (4 + 2) 14 = 84 */
    train_parse("--precision fp8 -t 32 -b 2", &o, err, sizeof err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, sizeof err) == -1 && strstr(err, "the model's width C 56"), "Llama C 56: '%s'", err);
    cfg = trainer_config_llama(llama_config_make(2, 4, 1, 80, 48, 512, 128));   /* (4 + 2) 20 = 120: not 16 | */
    train_parse("--precision fp8 -t 32 -b 2", &o, err, sizeof err);
    BT_CHECK(resolve_opts(&o, 1, &cfg, err, sizeof err) == -1 && strstr(err, "the qkv width (H + 2 Hkv) D 120"), "Llama qkv 120: '%s'", err);
}

/* fp32 and fp8 (both recipes) over 8 steps: fp8's losses within FP8_TOL of fp32's at every step,
   not all equal to them, and falling */
static void test_losses_near_fp32(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    const char *prec[3] = {"--precision fp32", "--precision fp8", "--precision fp8 --fp8-recipe current"};
    const char *name[3] = {"losses_fp32", "losses_delayed", "losses_current"};
    double loss[3][8];
    char args[4096], out[65536];
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "-e s2 -b 2 -t 16 -v 0 -g 0 --quiet -x 8 %s -o %s", prec[k], tp(name[k]));
        int rc = train_run(args, out, sizeof out), n = read_losses(tp(name[k]), loss[k], 8);
        BT_CHECK(rc == 0 && n == 8, "%s: exit %d, %d losses: %s", prec[k], rc, n, out);
        if (k) BT_CHECK(strstr(out, k == 1 ? "FP8: delayed scaling, history 16" : "FP8: current scaling"), "%s: %s", prec[k], out);
        if (rc || n != 8) return;
    }
    for (int k = 1; k < 3; k++) {
        double worst = 0;
        for (int s = 0; s < 8; s++) worst = fmax(worst, fabs(loss[k][s] - loss[0][s]));
        BT_CHECK(worst < FP8_TOL && worst > 0, "%s: the largest loss difference from fp32 is %.6f (expected in (0, %g))", prec[k], worst, FP8_TOL);
        BT_CHECK(loss[k][7] < loss[k][0] - 0.2, "%s: the loss went from %.4f to %.4f", prec[k], loss[k][0], loss[k][7]);
    }
}

/* a checkpoint's fp8.state as floats (malloc'd; *n its count), NULL when absent */
static float *ckpt_state(const char *path, int64_t *n, char *primed, size_t cap) {
    bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_REQUIRE_CHECKSUMS);
    const bt_ckpt_info *in = f ? bt_ckpt_find(f, "fp8.state") : NULL;
    float *s = in ? malloc(in->nbytes) : NULL;
    if (s && bt_ckpt_read(f, "fp8.state", s, in->nbytes)) { free(s); s = NULL; }
    if (s) *n = (int64_t)(in->nbytes / 4);
    const char *p = f ? bt_ckpt_meta_get(bt_ckpt_file_meta(f), "fp8.primed") : NULL;
    snprintf(primed, cap, "%s", p ? p : "");
    bt_ckpt_close(f);
    return s;
}

/* per recipe (and delayed with --fp8-head on): 8 steps with a checkpoint every 2; the states in them
   (432 floats for s2, primed "77777777"; with the head 486 and "777777777") change from checkpoint
   to checkpoint; a run resumed from step 4 gives the same log lines and the same checkpoints 6 and
   8, fp8.state included, byte for byte */
static void test_state_checkpointed_and_resumed(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    const char *recipe[3] = {"delayed", "current", "delayed"}, *head[3] = {"off", "off", "on"};
    for (int k = 0; k < 3; k++) {
        const int nst = 2 * 4 + (k == 2);
        char args[4096], out[65536], ref[600], reflog[640], res[600], reslog[640], why[256], primed[64], primed2[64];
        snprintf(ref, sizeof ref, "%s_%s_%s", tp("ref"), recipe[k], head[k]); snprintf(reflog, sizeof reflog, "%s_log", ref);
        snprintf(res, sizeof res, "%s_%s_%s", tp("res"), recipe[k], head[k]); snprintf(reslog, sizeof reslog, "%s_log", res);
        snprintf(args, sizeof args, RUN " -x 8 --precision fp8 --fp8-recipe %s --fp8-head %s --ckpt-every 2 --ckpt-keep 0 --ckpt-dir %s -o %s", recipe[k], head[k], ref, reflog);
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0, "%s reference: exit %d: %s", recipe[k], rc, out);
        if (rc) return;
        int64_t n2 = 0, n4 = 0;
        float *s2 = ckpt_state(ckpt(ref, 2), &n2, primed, sizeof primed), *s4 = ckpt_state(ckpt(ref, 4), &n4, primed2, sizeof primed2);
        BT_CHECK(s2 && s4 && n2 == nst * 3 * 18 && n4 == n2, "fp8.state: %lld and %lld floats (expected %d)", (long long)n2, (long long)n4, nst * 3 * 18);
        BT_CHECK(!strncmp(primed, "777777777", (size_t)nst) && strlen(primed) == (size_t)nst && !strcmp(primed2, primed), "fp8.primed '%s', '%s'", primed, primed2);
        if (s2 && s4 && n2 == n4) {
            int scales_moved = 0, not_one = 0;
            for (int64_t r = 0; r < n2 / 18; r++) { scales_moved += s2[r * 18 + 1] != s4[r * 18 + 1]; not_one += s4[r * 18 + 1] != 1.f; }
            BT_CHECK(scales_moved > 0 && not_one == n2 / 18, "%s: %d scales changed between steps 2 and 4, %d of %lld not 1", recipe[k], scales_moved, not_one, (long long)(n2 / 18));
        }
        free(s2); free(s4);
        bt_ckpt_file *f = bt_ckpt_open(ckpt(ref, 4), BT_CKPT_REQUIRE_CHECKSUMS);
        const char *rv = f ? bt_ckpt_meta_get(bt_ckpt_file_meta(f), "train.fp8_recipe") : NULL, *hv = f ? bt_ckpt_meta_get(bt_ckpt_file_meta(f), "train.fp8_history") : NULL;
        const char *dv = f ? bt_ckpt_meta_get(bt_ckpt_file_meta(f), "train.fp8_head") : NULL;
        BT_CHECK(rv && !strcmp(rv, recipe[k]) && hv && !strcmp(hv, "16") && dv && !strcmp(dv, head[k]), "train.fp8_recipe %s, train.fp8_history %s, train.fp8_head %s",
                 rv ? rv : "-", hv ? hv : "-", dv ? dv : "-");
        bt_ckpt_close(f);
        snprintf(args, sizeof args, RUN " -x 8 --precision fp8 --fp8-recipe %s --fp8-head %s --ckpt-every 2 --ckpt-keep 0 --resume %s --ckpt-dir %s -o %s", recipe[k], head[k], ckpt(ref, 4), res, reslog);
        rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0 && strstr(out, "after step 4"), "%s resume: exit %d: %s", recipe[k], rc, out);
        static char want[16384], got[16384];
        char lp[700];
        snprintf(lp, sizeof lp, "%s/log.jsonl", reflog); log_losses(lp, 4, want, sizeof want);
        snprintf(lp, sizeof lp, "%s/log.jsonl", reslog); log_losses(lp, 4, got, sizeof got);
        BT_CHECK(want[0] && !strcmp(want, got), "%s: the resumed log\n%s\ndiffers from the uninterrupted one\n%s", recipe[k], got, want);
        static const char *const keys[] = {"train.step", "adamw.step", "fp8.primed", NULL};
        for (int s = 6; s <= 8; s += 2) {
            BT_CHECK(same_checkpoints(ckpt(ref, s), ckpt(res, s), keys, why, sizeof why), "%s, checkpoint %d: %s", recipe[k], s, why);
            int64_t na = 0, nb = 0;
            float *a = ckpt_state(ckpt(ref, s), &na, primed, sizeof primed), *b = ckpt_state(ckpt(res, s), &nb, primed2, sizeof primed2);
            BT_CHECK(a && b && na == nb && !memcmp(a, b, sizeof(float) * (size_t)na), "%s, checkpoint %d: fp8.state differs", recipe[k], s);
            free(a); free(b);
        }
    }
}

/* fp32 <-> fp8 across a resume is refused (the losses would not continue: another run), naming
   --precision and pointing at --init-from, which takes the weights into either */
static void test_cross_precision(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char args[4096], out[65536], f32dir[600], f8dir[600];
    snprintf(f32dir, sizeof f32dir, "%s", tp("f32")); snprintf(f8dir, sizeof f8dir, "%s", tp("f8"));
    snprintf(args, sizeof args, RUN " -x 4 --ckpt-every 2 --ckpt-dir %s", f32dir);
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0, "fp32 run: exit %d: %s", rc, out);
    snprintf(args, sizeof args, RUN " -x 4 --ckpt-every 2 --precision fp8 --ckpt-dir %s", f8dir);
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0, "fp8 run: exit %d: %s", rc, out);
    struct { const char *flags, *dir, *want; } c[] = {
        {"--precision fp8", f32dir, "train.precision = fp32 (--precision), this one fp8"},
        {"--precision fp32", f8dir, "train.precision = fp8 (--precision), this one fp32"},
        {"--precision fp8 --fp8-recipe current", f8dir, "train.fp8_recipe = delayed (--fp8-recipe), this one current"},
        {"--precision fp8 --fp8-history 8", f8dir, "train.fp8_history = 16 (--fp8-history), this one 8"},
        {"--precision fp8 --fp8-accum split", f8dir, "train.fp8_accum = fast-dx (--fp8-accum), this one split"},
        {"--precision fp8 --fp8-accum fast", f8dir, "train.fp8_accum = fast-dx (--fp8-accum), this one fast"},
        {"--precision fp8 --fp8-head off", f8dir, "train.fp8_head = on (--fp8-head), this one off"}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        snprintf(args, sizeof args, RUN " -x 4 %s --resume %s", c[i].flags, ckpt(c[i].dir, 2));
        rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 1 && strstr(out, c[i].want) && strstr(out, "--init-from") && !strstr(out, "step "), "%s: exit %d: %s", c[i].flags, rc, out);
    }
    snprintf(args, sizeof args, "-b 1 -t 8 -v 0 -g 0 --quiet -x 1 --init-from %s", ckpt(f8dir, 2));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "step    1/1"), "fp8 weights into an fp32 run: exit %d: %s", rc, out);
    snprintf(args, sizeof args, "-b 1 -t 8 -v 0 -g 0 --quiet -x 1 --precision fp8 --init-from %s", ckpt(f32dir, 2));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "step    1/1"), "fp32 weights into an fp8 run: exit %d: %s", rc, out);
    /* --fp8-head and --fp8-accum not given on a resume: the checkpoint's, so a run made with the head
       off and split accumulation goes on so (the default run, head on and fast-dx, so; one made with
       fast, so) */
    const char *hv[3] = {"off", "on", "on"}, *av[3] = {"split", "fast-dx", "fast"};
    const char *made[3] = {" --fp8-head off --fp8-accum split", "", " --fp8-accum fast"};
    for (int k = 0; k < 3; k++) {
        char d0[600], d1[600], tag[32];
        snprintf(tag, sizeof tag, "f8h%s_%s", hv[k], av[k]); snprintf(d0, sizeof d0, "%s", tp(tag));
        snprintf(tag, sizeof tag, "f8h%s_%s_res", hv[k], av[k]); snprintf(d1, sizeof d1, "%s", tp(tag));
        snprintf(args, sizeof args, RUN " -x 4 --ckpt-every 2 --precision fp8%s --ckpt-dir %s", made[k], d0);
        rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0, "fp8 head %s run: exit %d: %s", hv[k], rc, out);
        snprintf(args, sizeof args, RUN " -x 4 --ckpt-every 2 --precision fp8 --resume %s --ckpt-dir %s", ckpt(d0, 2), d1);
        rc = train_run(args, out, sizeof out);
        bt_ckpt_file *f = rc == 0 ? bt_ckpt_open(ckpt(d1, 4), BT_CKPT_REQUIRE_CHECKSUMS) : NULL;
        const char *got = f ? bt_ckpt_meta_get(bt_ckpt_file_meta(f), "train.fp8_head") : NULL;
        const char *acc = f ? bt_ckpt_meta_get(bt_ckpt_file_meta(f), "train.fp8_accum") : NULL;
        BT_CHECK(rc == 0 && strstr(out, "after step 2") && got && !strcmp(got, hv[k]) && acc && !strcmp(acc, av[k]),
                 "a resume of a head-%s %s run without --fp8-head, --fp8-accum: exit %d, train.fp8_head %s, train.fp8_accum %s: %s", hv[k],
                 av[k], rc, got ? got : "-", acc ? acc : "-", out);
        bt_ckpt_close(f);
    }
}

/* a Llama (ls2) through the same wiring (llama.h's four block linears, and the head with --fp8-head
   on): fp8's losses within FP8_TOL of fp32's (measured at most 0.0049 delayed, 0.0113 current) and
   falling, the head's FP8 changing them; --recompute block the same log lines as none; a resume
   from step 4 bit for bit, head off and on (the log, the checkpoint of step 8 with fp8.state: 8
   states, 9 with the head) */
static void test_llama(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    const char *prec[3] = {"--precision fp32", "--precision fp8 --fp8-head off", "--precision fp8"}, *name[3] = {"llama_fp32", "llama_fp8", "llama_fp8h"};
    double loss[3][8];
    char args[4096], out[65536], why[256];
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "-e ls2 -b 2 -t 16 -v 0 -g 0 --quiet -x 8 %s -o %s", prec[k], tp(name[k]));
        int rc = train_run(args, out, sizeof out), n = read_losses(tp(name[k]), loss[k], 8);
        BT_CHECK(rc == 0 && n == 8, "Llama %s: exit %d, %d losses: %s", prec[k], rc, n, out);
        if (rc || n != 8) return;
    }
    for (int k = 1; k < 3; k++) {
        double worst = 0, head = 0;
        for (int s = 0; s < 8; s++) worst = fmax(worst, fabs(loss[k][s] - loss[0][s])), head = fmax(head, fabs(loss[k][s] - loss[1][s]));
        BT_CHECK(worst < FP8_TOL && worst > 0, "Llama %s: the largest loss difference from fp32 is %.6f (expected in (0, %g))", prec[k], worst, FP8_TOL);
        BT_CHECK(loss[k][7] < loss[k][0] - 0.1, "Llama %s: the loss went from %.4f to %.4f", prec[k], loss[k][0], loss[k][7]);
        if (k == 2) BT_CHECK(head > 0, "Llama: --fp8-head on (the default) gave the losses of off (the head's products not in FP8?)");
    }
    static char want[16384], got[16384];
    char lp[700];
    const char *rc_name[2] = {"llama_rc_none", "llama_rc_block"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "-e ls2 -b 1 -t 8 -v 0 -g 0 --quiet -x 4 --precision fp8 --recompute %s -o %s", k ? "block" : "none", tp(rc_name[k]));
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0, "Llama fp8 --recompute %s: exit %d: %s", k ? "block" : "none", rc, out);
        snprintf(lp, sizeof lp, "%s/log.jsonl", tp(rc_name[k]));
        log_losses(lp, 0, k ? got : want, sizeof want);
    }
    BT_CHECK(want[0] && !strcmp(want, got), "Llama fp8: --recompute block's log\n%s\ndiffers from none's\n%s", got, want);
    for (int h = 0; h < 2; h++) {
        const char *hd = h ? "on" : "off";
        const int nst = 2 * 4 + h;
        char ref[600], res[600];
        snprintf(ref, sizeof ref, "%s_%s", tp("llama_ref"), hd); snprintf(res, sizeof res, "%s_%s", tp("llama_res"), hd);
        snprintf(args, sizeof args, "-e ls2 -b 1 -t 8 -v 0 -g 0 --quiet -x 8 --precision fp8 --fp8-head %s --ckpt-every 2 --ckpt-keep 0 --ckpt-dir %s -o %s/log",
                 hd, ref, ref);
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0, "Llama fp8 head %s reference: exit %d: %s", hd, rc, out);
        snprintf(args, sizeof args, "-e ls2 -b 1 -t 8 -v 0 -g 0 --quiet -x 8 --precision fp8 --fp8-head %s --ckpt-every 2 --ckpt-keep 0 --resume %s --ckpt-dir %s -o %s/log",
                 hd, ckpt(ref, 4), res, res);
        rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0 && strstr(out, "after step 4"), "Llama fp8 head %s resume: exit %d: %s", hd, rc, out);
        snprintf(lp, sizeof lp, "%s/log/log.jsonl", ref); log_losses(lp, 4, want, sizeof want);
        snprintf(lp, sizeof lp, "%s/log/log.jsonl", res); log_losses(lp, 4, got, sizeof got);
        BT_CHECK(want[0] && !strcmp(want, got), "Llama fp8 head %s: the resumed log\n%s\ndiffers from the uninterrupted one\n%s", hd, got, want);
        static const char *const keys[] = {"train.step", "adamw.step", "fp8.primed", NULL};
        BT_CHECK(same_checkpoints(ckpt(ref, 8), ckpt(res, 8), keys, why, sizeof why), "Llama fp8 head %s, checkpoint 8: %s", hd, why);
        int64_t na = 0, nb = 0;
        char pa[64], pb[64];
        float *a = ckpt_state(ckpt(ref, 8), &na, pa, sizeof pa), *b = ckpt_state(ckpt(res, 8), &nb, pb, sizeof pb);
        BT_CHECK(a && b && na == nst * 3 * 18 && na == nb && !memcmp(a, b, sizeof(float) * (size_t)na) && !strncmp(pa, "777777777", (size_t)nst) &&
                 strlen(pa) == (size_t)nst, "Llama fp8 head %s, checkpoint 8: fp8.state %lld and %lld floats, primed '%s'", hd, (long long)na, (long long)nb, pa);
        free(a); free(b);
    }
}

/* --precision fp8 with --dp ddp, zero2 and fsdp on two CPU ranks (the store's collectives) against one
   process on the same global batch (-d 128: four micro-batches in one process, two a rank): the
   amaxes all-reduced (max) before each update give every rank the whole batch's scales, so the
   casts are one process's (gy's scale a power of two apart: each rank's gradient is its mean over
   2 micro-batches where one process's is over 4) and only the order of the f32 sums differs: losses
   within 1e-5 relative, and the final checkpoint's x and w rows of fp8.state (amax, scale,
   history) within 1e-5 relative of one process's, its gy rows twice one process's but for the head's
   (the logit gradient is cast per micro-batch before the accumulation's factor: one process's). Without the
   all-reduce the ranks' histories hold their own micro-batches' amaxes (measured with it removed:
   losses 4.3e-5 apart, the states' x and w rows 0.15). */
static void test_data_parallel(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    const char *run = "-e s2 -b 2 -t 16 -v 0 -g 0 -u 1 --seed 5 --device cpu -d 128 -x 4 --precision fp8 --ckpt-every 4 --ckpt-keep 0";
    const char *modes[3] = {"ddp", "zero2", "fsdp"};
    char args[1600], c1[900], c2[900], dir[64], tag[64], p1[64], p2[64];
    double l1[8], l2[8];
    snprintf(args, sizeof args, "%s --ckpt-dir %s/f8dp1.ck", run, bt_test_dir);
    if (run_logged(1, args, "f8dp1", l1, 8) != 4) return;
    ckpt_file("f8dp1.ck", 4, c1, sizeof c1);
    int64_t n1 = 0, n2 = 0;
    float *s1 = ckpt_state(c1, &n1, p1, sizeof p1);
    BT_CHECK(s1 && n1 > 0, "one process: no fp8.state in %s", c1);
    const int hist = 16, row = 2 + hist;
    for (int k = 0; k < 3 && s1; k++) {
        snprintf(dir, sizeof dir, "f8dp_%s.ck", modes[k]); snprintf(tag, sizeof tag, "f8dp_%s", modes[k]);
        snprintf(args, sizeof args, "%s --dp %s --ckpt-dir %s/%s", run, modes[k], bt_test_dir, dir);
        if (run_logged(2, args, tag, l2, 8) != 4) continue;
        double worst = loss_diff(l2, l1, 4);
        BT_CHECK(worst < 1e-5, "fp8 --dp %s on 2 CPU ranks: losses differ from one process's by %.3g (step 4: %.7f vs %.7f)", modes[k], worst,
                 l2[3], l1[3]);
        ckpt_file(dir, 4, c2, sizeof c2);
        float *s2 = ckpt_state(c2, &n2, p2, sizeof p2);
        BT_CHECK(s2 && n2 == n1 && !strcmp(p1, p2), "fp8 --dp %s: fp8.state of %lld floats, primed '%s' (one process: %lld, '%s')", modes[k],
                 (long long)n2, p2, (long long)n1, p1);
        double wx = 0, wg = 0;
        for (int64_t i = 0; s2 && n2 == n1 && i < n1; i++) {
            int r = (int)(i % (3 * row) / row);          /* the row: x, w, gy (BT_FP8_X, _W, _G) */
            int head = i / (3 * row) == n1 / (3 * row) - 1;   /* the last state, the head's (--fp8-head on, the default) */
            double a = s1[i], b = s2[i];
            if (r == BT_FP8_G && !head) a *= 2;
            double e = fabs(b - a) / (fabs(a) + 1e-30);
            if (a == 0 && b == 0) e = 0;
            if (r == BT_FP8_G) wg = fmax(wg, e); else wx = fmax(wx, e);
        }
        BT_CHECK(wx < 1e-5 && wg < 1e-5, "fp8 --dp %s: the states differ from one process's: x and w rows by %.3g, gy rows (x2; the head's x1) by %.3g",
                 modes[k], wx, wg);
        printf("info: fp8 --dp %s on 2 CPU ranks vs 1 process: losses within %.2e, FP8 states within %.2e (x, w) and %.2e (gy x 2)\n",
               modes[k], worst, wx, wg);
        free(s2);
    }
    free(s1);
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_train_fp8");
    BT_RUN(test_model_accumulation);
    BT_RUN(test_model_eval_is_plain);
    BT_RUN(test_model_recompute);
    BT_RUN(test_flags);
    BT_RUN(test_losses_near_fp32);
    BT_RUN(test_state_checkpointed_and_resumed);
    BT_RUN(test_cross_precision);
    BT_RUN(test_llama);
    BT_RUN(test_data_parallel);
    train_runs_done();
    return bt_test_summary("test_train_fp8");
}
