/* train_llama.c - a small Llama-style language model built from the BluTrain-C headers: RMSNorm,
   a SwiGLU MLP, causal attention, no biases. None of its norm or activation chains has a
   hand-written kernel, so it is the model that bt_mlir.h's fused kernels are for: without --mlir
   every op of RMSNorm (square, mean, +eps, sqrt, div, mul) and of SwiGLU (silu as x sigmoid(x),
   sigmoid through tanh, then the gate's mul) is its own kernel and round trip to memory; with
   --mlir each chain is one kernel forward and one backward, compiled by MLIR (make MLIR=1).

   make build/train_llama          CPU build      make build/train_llama_cuda   CUDA build
   make MLIR=1 build/train_llama   with --mlir (the same for _cuda)
   build/train_llama -h            every flag

   The model: tokens -> wte + wpe (learned positions: rotary needs a pairwise rotation, which is
   not an elementwise chain) -> L blocks of
       x += Wo attention(Wqkv rmsnorm(x) w_a)           (causal, H heads, bt_attention_qkv)
       x += W2 (silu(W1 n) * W3 n),  n = rmsnorm(x) w_m   (hidden F = 8C/3 rounded up to 64)
   -> rmsnorm -> the tied head wte, fused into the cross-entropy (bt_linear_cross_entropy). It
   trains with AdamW on token shards (bt_data.h, the same ones as train_gpt2) and prints each
   step's loss and tokens/s; the summary's tokens/s leaves out the first two steps (the first
   compiles the kernels, or loads them from the cache). Build with -DTRAIN_LLAMA_NO_MAIN to
   include this file in a test (tests/test_llama.c). */
#define _POSIX_C_SOURCE 200809L
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_MLIR_IMPLEMENTATION
#include "bt_autograd.h"
#include "bt_optim.h"
#include "bt_data.h"
#include "bt_mlir.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <time.h>

/* ---- configuration ---- */
typedef struct { const char *name; int L, H, C, maxT; } llama_preset;
static const llama_preset llama_presets[] = {
    {"l12", 12, 12, 768, 1024},   /* the size of GPT-2 124M's blocks (F 2048: about as many weights) */
    {"l6", 6, 6, 384, 1024},
    {"l2", 2, 4, 64, 256},        /* for tests on a CPU */
};
#define LLAMA_NPRESETS ((int)(sizeof llama_presets / sizeof llama_presets[0]))
#define LLAMA_V 50257             /* the GPT-2 tokenizer of the shards */
#define LLAMA_VP 50304            /* padded to a multiple of 128 */

typedef struct { int L, H, C, F, maxT; } llama_config;

typedef struct {
    const char *train_glob, *model, *device, *precision;
    int B, T, steps, warmup, mlir, quiet;
    double lr, weight_decay;
    uint64_t seed;
} llama_opts;

/* ---- the model: fp32 master weights; in bf16 each weight's cast is made once per step ---- */
typedef struct { bt_tensor *p, *lowp; } llama_param;      /* lowp: the bf16 copy, or NULL */
typedef struct { llama_param attn_norm, wqkv, wo, mlp_norm, w1, w3, w2; } llama_layer;
typedef struct {
    llama_config cfg;
    llama_param wte, wpe, norm_f;
    llama_layer *layers;
    llama_param **all;            /* every parameter, for the optimizer and the casts */
    bt_tensor **leaves;
    int n;
    bt_dtype dt;                  /* compute dtype */
    int mlir;                     /* RMSNorm and SwiGLU through bt_mlir.h */
    bt_device dev;
} llama;

static void llama_param_new(llama *m, llama_param *p, bt_shape s, double std, uint64_t seed) {
    p->p = bt_empty(s, BT_F32, m->dev);
    if (std > 0) bt_normal_(p->p, 0, std, seed, 0); else bt_fill_(p->p, 1.0);
    bt_keep(p->p);
    bt_set_requires_grad(p->p, 1);
    p->lowp = m->dt == BT_F32 ? NULL : bt_keep(bt_empty(s, m->dt, m->dev));
    m->all[m->n] = p; m->leaves[m->n++] = p->p;
}

/* weights N(0, 0.02), the residual projections scaled by 1/sqrt(2L), norms 1 */
static void llama_build(llama *m, llama_config cfg, bt_device dev, bt_dtype dt, int mlir, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->dev = dev; m->dt = dt; m->mlir = mlir;
    int cap = 3 + 7 * cfg.L;
    m->all = (llama_param **)calloc((size_t)cap, sizeof(llama_param *));
    m->leaves = (bt_tensor **)calloc((size_t)cap, sizeof(bt_tensor *));
    m->layers = (llama_layer *)calloc((size_t)cfg.L, sizeof(llama_layer));
    if (!m->all || !m->leaves || !m->layers) bt_error("llama_build: out of host memory");
    int64_t C = cfg.C, F = cfg.F;
    double std = 0.02, res = 0.02 / sqrt(2.0 * cfg.L);
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    llama_param_new(m, &m->wte, bt_shape2(LLAMA_VP, C), std, seed);
    llama_param_new(m, &m->wpe, bt_shape2(cfg.maxT, C), std, seed + 1);
    for (int l = 0; l < cfg.L; l++) {
        llama_layer *y = &m->layers[l];
        uint64_t s = seed + 16 + 8 * (uint64_t)l;
        llama_param_new(m, &y->attn_norm, bt_shape1(C), 0, 0);
        llama_param_new(m, &y->wqkv, bt_shape2(3 * C, C), std, s);
        llama_param_new(m, &y->wo, bt_shape2(C, C), res, s + 1);
        llama_param_new(m, &y->mlp_norm, bt_shape1(C), 0, 0);
        llama_param_new(m, &y->w1, bt_shape2(F, C), std, s + 2);
        llama_param_new(m, &y->w3, bt_shape2(F, C), std, s + 3);
        llama_param_new(m, &y->w2, bt_shape2(C, F), res, s + 4);
    }
    llama_param_new(m, &m->norm_f, bt_shape1(C), 0, 0);
    bt_scope_end();
    bt_set_grad_enabled(old);
}
static void llama_free(llama *m) {
    for (int i = 0; i < m->n; i++) { bt_release(m->all[i]->p); bt_release(m->all[i]->lowp); }
    free(m->all); free(m->leaves); free(m->layers);
    memset(m, 0, sizeof *m);
}
/* the bf16 copies, after every update */
static void llama_refresh_casts(llama *m) {
    int old = bt_set_grad_enabled(0);
    for (int i = 0; i < m->n; i++) if (m->all[i]->lowp) bt_copy_(m->all[i]->lowp, m->all[i]->p);
    bt_set_grad_enabled(old);
}
static bt_tensor *W(const llama_param *p) { return p->lowp ? bt_cast_cached(p->p, p->lowp) : p->p; }

/* the two chains with no hand-written kernel: fused through bt_mlir.h, or as the plain ops */
static bt_tensor *llama_rmsnorm(const llama *m, bt_tensor *x, const llama_param *w) {
    return m->mlir ? bt_mlir_rmsnorm(x, W(w), 1e-5) : bt_mlir_rmsnorm_ops(x, W(w), 1e-5);
}
static bt_tensor *llama_swiglu(const llama *m, bt_tensor *g, bt_tensor *v) {
    return m->mlir ? bt_mlir_swiglu(g, v) : bt_mul(bt_mlir_silu_ops(g), v);
}

/* idx, targets [B, T] i32 -> the mean next-token cross-entropy */
static bt_tensor *llama_loss(llama *m, bt_tensor *idx, bt_tensor *targets) {
    const llama_config *c = &m->cfg;
    bt_tensor *pos = bt_arange(idx->shape[1], BT_I32, m->dev);
    bt_tensor *x = bt_add(bt_embedding(W(&m->wte), idx), bt_embedding(W(&m->wpe), pos));
    for (int l = 0; l < c->L; l++) {
        const llama_layer *y = &m->layers[l];
        bt_tensor *qkv = bt_linear(llama_rmsnorm(m, x, &y->attn_norm), W(&y->wqkv), NULL);
        x = bt_add(x, bt_linear(bt_attention_qkv(qkv, c->H), W(&y->wo), NULL));
        bt_tensor *n = llama_rmsnorm(m, x, &y->mlp_norm);
        bt_tensor *a = llama_swiglu(m, bt_linear(n, W(&y->w1), NULL), bt_linear(n, W(&y->w3), NULL));
        x = bt_add(x, bt_linear(a, W(&y->w2), NULL));
    }
    return bt_linear_cross_entropy(llama_rmsnorm(m, x, &m->norm_f), W(&m->wte), targets, LLAMA_V, -1);
}

/* ---- command line ---- */
static void llama_default_opts(llama_opts *o) {
    memset(o, 0, sizeof *o);
    o->train_glob = "data/tinyshakespeare_train.bin"; o->device = "auto";
    o->B = -1; o->T = -1; o->steps = -1; o->warmup = -1; o->lr = -1; o->weight_decay = 0.1; o->seed = 1337;
}
static int llama_int(const char *s, long lo, long hi, int *out) {
    char *end; errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v; return 0;
}
static int llama_double(const char *s, double lo, double hi, double *out) {
    char *end; errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v; return 0;
}
/* 0 ok, 1 help, -1 error (err names the flag) */
static int llama_parse_args(int argc, char **argv, llama_opts *o, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!strcmp(a, "--mlir")) {
            if (!bt_mlir_can_compile()) { snprintf(err, errlen, "--mlir: this binary was built without MLIR; make MLIR=1 (needs libmlir-19-dev)"); return -1; }
            o->mlir = 1; continue;
        }
        if (i + 1 >= argc || !argv[i + 1][0]) { snprintf(err, errlen, "%s needs a value", a); return -1; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-i")) o->train_glob = v;
        else if (!strcmp(a, "-e")) o->model = v;
        else if (!strcmp(a, "-b")) bad = llama_int(v, 1, 1 << 16, &o->B);
        else if (!strcmp(a, "-t")) bad = llama_int(v, 1, 1 << 16, &o->T);
        else if (!strcmp(a, "-x")) bad = llama_int(v, 1, 1 << 30, &o->steps);
        else if (!strcmp(a, "-u")) bad = llama_int(v, 0, 1 << 30, &o->warmup);
        else if (!strcmp(a, "-l")) bad = llama_double(v, 0, 10, &o->lr);
        else if (!strcmp(a, "-c")) bad = llama_double(v, 0, 10, &o->weight_decay);
        else if (!strcmp(a, "--seed")) { int s; bad = llama_int(v, 0, 2147483647L, &s); o->seed = (uint64_t)s; }
        else if (!strcmp(a, "--device")) {
            o->device = v;
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) { snprintf(err, errlen, "--device must be auto, cpu or cuda, got '%s'", v); return -1; }
        } else if (!strcmp(a, "--precision")) {
            o->precision = v;
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) { snprintf(err, errlen, "--precision must be fp32 or bf16, got '%s'", v); return -1; }
        } else { snprintf(err, errlen, "unknown option '%s'", a); return -1; }
        if (bad) { snprintf(err, errlen, "bad value '%s' for %s", v, a); return -1; }
    }
    return 0;
}
/* the machine's defaults, then the checks that need the model */
static int llama_resolve(llama_opts *o, int on_gpu, llama_config *cfg, char *err, size_t errlen) {
    const char *name = o->model ? o->model : on_gpu ? "l12" : "l2";
    int p = 0;
    while (p < LLAMA_NPRESETS && strcmp(llama_presets[p].name, name)) p++;
    if (p == LLAMA_NPRESETS) { snprintf(err, errlen, "-e %s: not a preset (l12, l6, l2)", name); return -1; }
    const llama_preset *ps = &llama_presets[p];
    cfg->L = ps->L; cfg->H = ps->H; cfg->C = ps->C; cfg->maxT = ps->maxT;
    cfg->F = (8 * ps->C / 3 + 63) / 64 * 64;
    if (o->B < 0) o->B = on_gpu ? 16 : 4;
    if (o->T < 0) o->T = on_gpu ? 1024 : 64;
    if (o->steps < 0) o->steps = 20;
    if (o->warmup < 0) o->warmup = o->steps / 10;
    if (o->lr < 0) o->lr = on_gpu ? 6e-4 : 3e-3;
    if (!o->precision) o->precision = on_gpu ? "bf16" : "fp32";
    if (o->T > cfg->maxT) { snprintf(err, errlen, "-t %d is longer than %s's context %d", o->T, name, cfg->maxT); return -1; }
    if (!on_gpu && strcmp(o->precision, "fp32")) { snprintf(err, errlen, "--precision %s needs a GPU (the CPU trains in fp32)", o->precision); return -1; }
    return 0;
}

static double llama_now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }

/* Trains o->steps steps; losses[s] (may be NULL) gets step s's loss. Returns 0, or 1 after printing
   the error. The summary line reads: "done: ... tok/s" (tokens/s of steps 3.., or all when fewer). */
static int llama_train(llama_opts *o, double *losses) {
    char err[512];
    int n_gpus = bt_cuda_device_count();
    if (!strcmp(o->device, "cuda") && n_gpus == 0) { fprintf(stderr, "error: --device cuda, but no GPU is visible (or this is a CPU build)\n"); return 1; }
    int on_gpu = n_gpus > 0 && strcmp(o->device, "cpu");
    llama_config cfg;
    if (llama_resolve(o, on_gpu, &cfg, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return 1; }
    bt_device dev = on_gpu ? bt_cuda_device(0) : bt_cpu();
    bt_loader *data = bt_loader_open(o->train_glob, o->B, o->T, 0, 1, 1, o->seed);
    if (!data || bt_loader_check_vocab(data, LLAMA_V)) { fprintf(stderr, "error: -i %s: %s\n", o->train_glob, bt_data_error()); bt_loader_close(data); return 1; }
    llama m;
    llama_build(&m, cfg, dev, !strcmp(o->precision, "bf16") ? BT_BF16 : BT_F32, o->mlir, o->seed);
    llama_refresh_casts(&m);
    int64_t np = 0;
    for (int i = 0; i < m.n; i++) np += bt_numel(m.leaves[i]);
    printf("llama: L %d H %d C %d F %d, %.2fM parameters on %s, B %d T %d, %s, %s\n", cfg.L, cfg.H, cfg.C, cfg.F, np / 1e6,
           on_gpu ? "cuda" : "cpu", o->B, o->T, o->precision, o->mlir ? "--mlir: RMSNorm and SwiGLU fused (bt_mlir.h)" : "unfused ops");
    bt_adamw opt;
    bt_adamw_init(&opt, m.leaves, m.n, 0.9f, 0.95f, 1e-8f, (float)o->weight_decay, 1.0f);
    size_t BT = (size_t)o->B * o->T;
    int32_t *in = (int32_t *)malloc(sizeof(int32_t) * BT), *tg = (int32_t *)malloc(sizeof(int32_t) * BT);
    if (!in || !tg) bt_error("train_llama: out of host memory for a batch of %zu tokens", BT);
    double timed_s = 0, first = 0, loss = 0;
    int timed = 0, rc = 0, skip = o->steps > 2 ? 2 : 0;
    for (int s = 0; s < o->steps; s++) {
        double t0 = llama_now();
        if (bt_loader_next(data, in, tg)) { fprintf(stderr, "error: data: %s\n", bt_data_error()); rc = 1; break; }
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(in, bt_shape2(o->B, o->T), BT_I32, dev), *tgt = bt_from_data(tg, bt_shape2(o->B, o->T), BT_I32, dev);
        bt_tensor *l = llama_loss(&m, idx, tgt);
        bt_backward(l);
        loss = bt_item(l);
        double lr = bt_lr_cosine(s, o->warmup, o->steps, o->lr, 0.1 * o->lr);
        bt_adamw_step(&opt, (float)lr);
        bt_zero_grad(m.leaves, m.n);
        llama_refresh_casts(&m);
        bt_scope_end();
        bt_synchronize(dev);
        double dt = llama_now() - t0;
        if (s >= skip) { timed_s += dt; timed++; }
        if (s == 0) first = loss;
        if (losses) losses[s] = loss;
        if (!o->quiet || s == 0 || s == o->steps - 1)
            printf("step %4d/%d | loss %.4f | lr %.2e | %.1f ms | %.0f tok/s\n", s + 1, o->steps, loss, lr, 1e3 * dt, BT / dt);
        if (!isfinite(loss)) { fprintf(stderr, "error: step %d: the loss is not finite\n", s + 1); rc = 1; break; }
    }
    if (!rc)
        printf("done: %d steps, loss %.4f -> %.4f, %.0f tok/s (steps %d..%d)%s\n", o->steps, first, loss,
               timed ? BT * timed / timed_s : 0.0, skip + 1, o->steps, o->mlir ? " --mlir" : "");
    if (o->mlir && !rc) {
        bt_mlir_stats_t st = bt_mlir_stats();
        printf("mlir: %llu fused calls, %llu fused backwards, %llu fallbacks; %llu compiles (%.0f ms), %llu disk hits, %llu aot hits (cache %s)\n",
               (unsigned long long)st.fused_calls, (unsigned long long)st.fused_backwards, (unsigned long long)st.fallbacks,
               (unsigned long long)st.compiles, st.compile_ms, (unsigned long long)st.disk_hits, (unsigned long long)st.aot_hits,
               *bt_mlir_cache_dir() ? bt_mlir_cache_dir() : "off");
    }
    free(in); free(tg);
    bt_adamw_free(&opt);
    llama_free(&m);
    bt_loader_close(data);
    bt_mlir_shutdown();
    return rc;
}

#ifndef TRAIN_LLAMA_NO_MAIN
static void llama_usage(FILE *f) {
    fprintf(f,
        "usage: train_llama [options]\n"
        "  -i GLOB   train shards (default data/tinyshakespeare_train.bin; GPT-2 tokens)\n"
        "  -e NAME   model preset: l12 (12 layers, C 768), l6, l2 (default: l12 on a GPU, l2 on a CPU)\n"
        "  -b N      batch size (default 16 GPU, 4 CPU)     -t N   sequence length (default 1024 GPU, 64 CPU)\n"
        "  -x N      training steps (default 20 GPU, 20 CPU) -u N   warmup steps (default 10%% of the steps)\n"
        "  -l LR     peak learning rate (default 6e-4 GPU, 3e-3 CPU; cosine decay to 10%%)\n"
        "  -c WD     AdamW weight decay of the matrices (default 0.1)\n"
        "  --seed N  --device auto|cpu|cuda   --precision fp32|bf16 (default bf16 on a GPU, fp32 on a CPU)\n"
        "  --mlir    RMSNorm and SwiGLU as fused kernels compiled by MLIR (bt_mlir.h; a make MLIR=1 build)\n"
        "  --quiet   only the first, the last and the summary line\n"
        "  -h        this help\n");
}
int main(int argc, char **argv) {
    llama_opts o;
    llama_default_opts(&o);
    char err[512];
    int r = llama_parse_args(argc, argv, &o, err, sizeof err);
    if (r == 1) { llama_usage(stdout); return 0; }
    if (r < 0) { llama_usage(stderr); fprintf(stderr, "error: %s\n", err); return 2; }
    return llama_train(&o, NULL);
}
#endif
