/* train_gpt2.c - GPT-2 built from the BluTrain-C headers and trained end to end.

   make && ./train_gpt2            default run: GPT-2 124M on a GPU, a small GPT on a CPU,
                                   on Tiny Shakespeare (make data makes the shards)
   ./train_gpt2 -h                 every flag

   The same file builds two ways: `cc` gives a CPU binary; `nvcc -x cu` a CUDA one, which runs on
   the CPU when no GPU is present. Read top to bottom:
     1. configuration and presets        4. sampling
     2. the model: parameters, init, I/O  5. command line
     3. the forward pass                  6. the training loop
   The backward pass is the autograd engine's (bt_autograd.h); each op's math sits in bt_tensor.h. */
#define _POSIX_C_SOURCE 200809L   /* before any #include: bt_data.h uses pread, readlink, sigaction */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#include "bt_autograd.h"
#include "bt_optim.h"
#include "bt_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <sys/stat.h>

/* ============================================================================================
   1. configuration and presets
   ============================================================================================ */
typedef struct {
    int maxT;       /* context length */
    int V;          /* vocabulary */
    int Vp;         /* vocabulary padded to a multiple of 128: the logits' width (faster matmuls) */
    int L, H, C;    /* layers, heads, channels */
} gpt2_config;

typedef struct { const char *name; int L, H, C, maxT; } gpt2_preset;
static const gpt2_preset gpt2_presets[] = {
    {"d12", 12, 12, 768, 1024},    /* GPT-2 124M */
    {"d24", 24, 16, 1024, 1024},   /* 350M */
    {"d36", 36, 20, 1280, 1024},   /* 774M */
    {"d48", 48, 25, 1600, 1024},   /* 1558M */
    {"s6", 6, 6, 384, 256},        /* small ones for CPUs */
    {"s4", 4, 4, 128, 256},
    {"s2", 2, 2, 64, 128},
};
#define GPT2_NPRESETS ((int)(sizeof gpt2_presets / sizeof gpt2_presets[0]))

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

static int gpt2_config_from_preset(const char *name, int V, gpt2_config *cfg) {
    for (int i = 0; i < GPT2_NPRESETS; i++)
        if (!strcmp(name, gpt2_presets[i].name)) {
            cfg->L = gpt2_presets[i].L; cfg->H = gpt2_presets[i].H; cfg->C = gpt2_presets[i].C;
            cfg->maxT = gpt2_presets[i].maxT; cfg->V = V; cfg->Vp = round_up(V, 128);
            return 0;
        }
    return -1;
}

/* ============================================================================================
   2. the model: parameters in one flat fp32 buffer, in llm.c's checkpoint order
   ============================================================================================ */
/* The 16 tensors of llm.c's layout (per-layer ones stacked over L). The model file is this
   buffer after a 256-int header, so it reads and writes in one call and loads llm.c's files. */
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB,
       P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, P_COUNT };

static void gpt2_param_sizes(const gpt2_config *c, int64_t *sz) {
    int64_t L = c->L, C = c->C;
    sz[P_WTE] = (int64_t)c->Vp * C; sz[P_WPE] = (int64_t)c->maxT * C;
    sz[P_LN1W] = L * C; sz[P_LN1B] = L * C;
    sz[P_QKVW] = L * 3 * C * C; sz[P_QKVB] = L * 3 * C;
    sz[P_PROJW] = L * C * C; sz[P_PROJB] = L * C;
    sz[P_LN2W] = L * C; sz[P_LN2B] = L * C;
    sz[P_FCW] = L * 4 * C * C; sz[P_FCB] = L * 4 * C;
    sz[P_FCPROJW] = L * C * 4 * C; sz[P_FCPROJB] = L * C;
    sz[P_LNFW] = C; sz[P_LNFB] = C;
}

typedef struct {
    bt_tensor *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb;
    bt_tensor *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} gpt2_layer;

typedef struct {
    gpt2_config cfg;
    int64_t num_params;
    bt_tensor *flat, *flat_grad;   /* every parameter and its gradient, one buffer each */
    bt_tensor *flat_lowp;          /* bf16 copy of flat for mixed precision, made on demand */
    uint32_t lowp_version;         /* flat's version when flat_lowp was last refreshed */
    bt_tensor *wte, *wpe, *lnfw, *lnfb;
    gpt2_layer *layers;
    bt_tensor **params;            /* the leaves, for the optimizer */
    int n_params;
    bt_device device;
} gpt2;

/* A leaf parameter viewing flat[off : off + numel(shape)], its gradient the same span of
   flat_grad: the optimizer and the model file see one buffer, the graph sees ordinary leaves. */
static bt_tensor *gpt2_leaf(gpt2 *m, int64_t off, bt_shape shape) {
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
    bt_tensor *span = bt_narrow(m->flat, 0, off, n), *p = bt_view(span, shape);
    bt_tensor *gspan = bt_narrow(m->flat_grad, 0, off, n);
    bt_release(span);
    bt_set_requires_grad(p, 1);
    p->grad = bt_view(gspan, shape);
    bt_release(gspan);
    m->params[m->n_params++] = p;
    return p;
}

static void gpt2_build(gpt2 *m, gpt2_config cfg, bt_device dev) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->device = dev;
    int64_t sz[P_COUNT], off[P_COUNT], total = 0;
    gpt2_param_sizes(&cfg, sz);
    for (int i = 0; i < P_COUNT; i++) { off[i] = total; total += sz[i]; }
    m->num_params = total;
    m->flat = bt_zeros(bt_shape1(total), BT_F32, dev);
    m->flat_grad = bt_zeros(bt_shape1(total), BT_F32, dev);
    m->params = (bt_tensor **)calloc((size_t)(4 + 16 * cfg.L), sizeof(bt_tensor *));
    m->layers = (gpt2_layer *)calloc((size_t)cfg.L, sizeof(gpt2_layer));
    if (!m->params || !m->layers) bt_error("gpt2_build: out of host memory");
    int64_t C = cfg.C;
    m->wte = gpt2_leaf(m, off[P_WTE], bt_shape2(cfg.Vp, C));
    m->wpe = gpt2_leaf(m, off[P_WPE], bt_shape2(cfg.maxT, C));
    for (int l = 0; l < cfg.L; l++) {
        gpt2_layer *y = &m->layers[l];
        y->ln1w = gpt2_leaf(m, off[P_LN1W] + l * C, bt_shape1(C));
        y->ln1b = gpt2_leaf(m, off[P_LN1B] + l * C, bt_shape1(C));
        y->qkvw = gpt2_leaf(m, off[P_QKVW] + l * 3 * C * C, bt_shape2(3 * C, C));
        y->qkvb = gpt2_leaf(m, off[P_QKVB] + l * 3 * C, bt_shape1(3 * C));
        y->projw = gpt2_leaf(m, off[P_PROJW] + l * C * C, bt_shape2(C, C));
        y->projb = gpt2_leaf(m, off[P_PROJB] + l * C, bt_shape1(C));
        y->ln2w = gpt2_leaf(m, off[P_LN2W] + l * C, bt_shape1(C));
        y->ln2b = gpt2_leaf(m, off[P_LN2B] + l * C, bt_shape1(C));
        y->fcw = gpt2_leaf(m, off[P_FCW] + l * 4 * C * C, bt_shape2(4 * C, C));
        y->fcb = gpt2_leaf(m, off[P_FCB] + l * 4 * C, bt_shape1(4 * C));
        y->fcprojw = gpt2_leaf(m, off[P_FCPROJW] + l * 4 * C * C, bt_shape2(C, 4 * C));
        y->fcprojb = gpt2_leaf(m, off[P_FCPROJB] + l * C, bt_shape1(C));
    }
    m->lnfw = gpt2_leaf(m, off[P_LNFW], bt_shape1(C));
    m->lnfb = gpt2_leaf(m, off[P_LNFB], bt_shape1(C));
}

static void gpt2_free(gpt2 *m) {
    for (int i = 0; i < m->n_params; i++) bt_release(m->params[i]);
    bt_release(m->flat); bt_release(m->flat_grad); bt_release(m->flat_lowp);
    free(m->params); free(m->layers);
    memset(m, 0, sizeof *m);
}

/* GPT-2's init: weights and embeddings N(0, 0.02), the two residual projections N(0, 0.02 /
   sqrt(2 L)) so the residual stream's variance does not grow with depth, biases 0, layernorm
   gains 1. Each tensor draws from Philox at its own offset of the flat buffer, so a seed gives
   the same weights on any device. */
static void gpt2_init(gpt2 *m, uint64_t seed) {
    int old = bt_set_grad_enabled(0);
    double std = 0.02, res_std = 0.02 / sqrt(2.0 * m->cfg.L);
    bt_normal_(m->wte, 0, std, seed, 0);
    bt_normal_(m->wpe, 0, std, seed, (uint64_t)m->wte->offset + bt_numel(m->wte));
    for (int l = 0; l < m->cfg.L; l++) {
        gpt2_layer *y = &m->layers[l];
        bt_tensor *w[2] = {y->qkvw, y->fcw}, *r[2] = {y->projw, y->fcprojw};
        for (int i = 0; i < 2; i++) bt_normal_(w[i], 0, std, seed, (uint64_t)w[i]->offset);
        for (int i = 0; i < 2; i++) bt_normal_(r[i], 0, res_std, seed, (uint64_t)r[i]->offset);
        bt_fill_(y->ln1w, 1.0); bt_fill_(y->ln2w, 1.0);
    }
    bt_fill_(m->lnfw, 1.0);
    bt_set_grad_enabled(old);
}

/* Model file: llm.c's layout, version 3 (fp32): int32 header[256] = {20240326, 3, maxT, V, L,
   H, C, Vp, 0...}, then the flat buffer. */
#define GPT2_MODEL_MAGIC 20240326
static int gpt2_read_header(const char *path, gpt2_config *cfg, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return -1; }
    int32_t h[256];
    size_t got = fread(h, sizeof(int32_t), 256, f);
    fclose(f);
    if (got != 256) { snprintf(err, errlen, "%s: too short for a model header (%zu of 1024 bytes)", path, got * 4); return -1; }
    if (h[0] != GPT2_MODEL_MAGIC) { snprintf(err, errlen, "%s: bad magic %d (expected %d, an llm.c/BluTrain model file)", path, h[0], GPT2_MODEL_MAGIC); return -1; }
    if (h[1] != 3) { snprintf(err, errlen, "%s: version %d (only 3, fp32, is read)", path, h[1]); return -1; }
    cfg->maxT = h[2]; cfg->V = h[3]; cfg->L = h[4]; cfg->H = h[5]; cfg->C = h[6]; cfg->Vp = h[7];
    if (cfg->maxT <= 0 || cfg->V <= 0 || cfg->L <= 0 || cfg->H <= 0 || cfg->C <= 0 || cfg->Vp < cfg->V || cfg->C % cfg->H) {
        snprintf(err, errlen, "%s: inconsistent config maxT %d V %d Vp %d L %d H %d C %d", path, cfg->maxT, cfg->V, cfg->Vp, cfg->L, cfg->H, cfg->C);
        return -1;
    }
    return 0;
}
static int gpt2_load_weights(gpt2 *m, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return -1; }
    float *buf = (float *)malloc(sizeof(float) * (size_t)m->num_params);
    if (!buf) { fclose(f); snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    int ok = fseek(f, 1024, SEEK_SET) == 0 && fread(buf, sizeof(float), (size_t)m->num_params, f) == (size_t)m->num_params;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (!ok || extra) {
        free(buf);
        snprintf(err, errlen, "%s: expected exactly %lld parameters after the header", path, (long long)m->num_params);
        return -1;
    }
    bt_tensor *host = bt_from_blob(buf, bt_shape1(m->num_params), BT_F32, bt_cpu());
    bt_copy_(m->flat, host);
    bt_release(host);
    free(buf);
    return 0;
}
/* written to PATH.tmp then renamed: a failure never leaves a half-written model at PATH */
static int gpt2_save(gpt2 *m, const char *path, char *err, size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int32_t h[256] = {0};
    h[0] = GPT2_MODEL_MAGIC; h[1] = 3; h[2] = m->cfg.maxT; h[3] = m->cfg.V; h[4] = m->cfg.L;
    h[5] = m->cfg.H; h[6] = m->cfg.C; h[7] = m->cfg.Vp;
    float *buf = (float *)malloc(sizeof(float) * (size_t)m->num_params);
    if (!buf) { snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    bt_to_host(m->flat, buf, BT_F32);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(h, sizeof h, 1, f) == 1 && fwrite(buf, sizeof(float), (size_t)m->num_params, f) == (size_t)m->num_params;
    if (f && fclose(f) != 0) ok = 0;
    free(buf);
    if (!ok || rename(tmp, path) != 0) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); remove(tmp); return -1; }
    return 0;
}

/* ============================================================================================
   3. the forward pass
   ============================================================================================ */
/* Parameter p as dtype dt (the compute dtype). For bf16 the whole flat buffer is cast once after
   each change of the fp32 weights (the optimizer step bumps their version), and each parameter is
   a view of that copy; the cast node's backward returns fp32 gradients to the leaves. */
static bt_tensor *param_as(gpt2 *m, bt_tensor *p, bt_dtype dt) {
    if (dt == p->dtype) return p;
    if (!m->flat_lowp || m->flat_lowp->dtype != dt || m->lowp_version != m->flat->storage->version) {
        int old = bt_set_grad_enabled(0);
        if (!m->flat_lowp || m->flat_lowp->dtype != dt) {
            bt_release(m->flat_lowp);
            bt_scope_begin();
            m->flat_lowp = bt_keep(bt_empty(bt_shape_of(m->flat), dt, m->device));
            bt_scope_end();
        }
        bt_copy_(m->flat_lowp, m->flat);
        m->lowp_version = m->flat->storage->version;
        bt_set_grad_enabled(old);
    }
    return bt_cast_cached(p, bt_view(bt_narrow(m->flat_lowp, 0, p->offset, bt_numel(p)), bt_shape_of(p)));
}

/* causal self-attention of one block: x [B, T, C] -> [B, T, C]. One projection makes q, k, v
   side by side ([B, T, 3C]); the attention op reads the heads out of it in place. */
static bt_tensor *gpt2_attention(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_tensor *qkv = bt_linear(h, param_as(m, y->qkvw, dt), param_as(m, y->qkvb, dt));
    return bt_linear(bt_attention_qkv(qkv, m->cfg.H), param_as(m, y->projw, dt), param_as(m, y->projb, dt));
}

static bt_tensor *gpt2_mlp(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_tensor *u = bt_gelu(bt_linear(h, param_as(m, y->fcw, dt), param_as(m, y->fcb, dt)));
    return bt_linear(u, param_as(m, y->fcprojw, dt), param_as(m, y->fcprojb, dt));
}

/* idx [B, T] i32 on the model's device -> the final layernorm's output [B, T, C] in dtype dt */
static bt_tensor *gpt2_hidden(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    const gpt2_config *c = &m->cfg;
    int64_t T = idx->shape[1];
    bt_tensor *pos = bt_arange(T, BT_I32, m->device);
    bt_tensor *x = bt_add(bt_embedding(param_as(m, m->wte, dt), idx), bt_embedding(param_as(m, m->wpe, dt), pos));
    for (int l = 0; l < c->L; l++) {
        gpt2_layer *y = &m->layers[l];
        x = bt_add(x, gpt2_attention(m, y, bt_layernorm(x, param_as(m, y->ln1w, dt), param_as(m, y->ln1b, dt), 1e-5), dt));
        x = bt_add(x, gpt2_mlp(m, y, bt_layernorm(x, param_as(m, y->ln2w, dt), param_as(m, y->ln2b, dt), 1e-5), dt));
    }
    return bt_layernorm(x, param_as(m, m->lnfw, dt), param_as(m, m->lnfb, dt), 1e-5);
}

/* idx [B, T] -> logits [B, T, Vp] in dtype dt; weight tying: the head is wte */
static bt_tensor *gpt2_logits(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    return bt_linear(gpt2_hidden(m, idx, dt), param_as(m, m->wte, dt), NULL);
}

/* mean cross-entropy of the next tokens over the V real columns (the padding never counts), with
   the head fused into the loss: the [B, T, Vp] logits are never held whole */
static bt_tensor *gpt2_loss(gpt2 *m, bt_tensor *idx, bt_tensor *targets, bt_dtype dt) {
    return bt_linear_cross_entropy(gpt2_hidden(m, idx, dt), param_as(m, m->wte, dt), targets, m->cfg.V, -1);
}

/* ============================================================================================
   4. sampling
   ============================================================================================ */
/* next token from the logits of the last position: greedy when topk <= 1 or temp <= 0, else
   top-k over the real vocabulary with temperature; r is a uniform draw in [0, 1) */
static int sample_next(const float *logits, int V, int topk, double temp, double r) {
    int best = 0;
    for (int j = 1; j < V; j++) if (logits[j] > logits[best]) best = j;
    if (topk <= 1 || temp <= 0) return best;
    if (topk > V) topk = V;
    int *top = (int *)malloc(sizeof(int) * topk);
    int n = 0;
    for (int j = 0; j < V; j++) {                      /* insertion into the k best, descending */
        if (n == topk && logits[j] <= logits[top[n - 1]]) continue;
        int i = n < topk ? n++ : n - 1;
        while (i > 0 && logits[top[i - 1]] < logits[j]) { top[i] = top[i - 1]; i--; }
        top[i] = j;
    }
    double *p = (double *)malloc(sizeof(double) * n), sum = 0;
    for (int i = 0; i < n; i++) { p[i] = exp((logits[top[i]] - logits[top[0]]) / temp); sum += p[i]; }
    int pick = top[n - 1];
    double acc = 0;
    for (int i = 0; i < n; i++) { acc += p[i] / sum; if (r < acc) { pick = top[i]; break; } }
    free(top); free(p);
    return pick;
}

/* generate n tokens after <|endoftext|>, print them as text */
static void gpt2_sample(gpt2 *m, bt_tokenizer *tok, int n, int topk, double temp, uint64_t seed, bt_dtype dt) {
    const gpt2_config *c = &m->cfg;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    float *row = (float *)malloc(sizeof(float) * (size_t)c->Vp);
    int len = 1;
    ids[0] = BT_EOT;
    int old = bt_set_grad_enabled(0);
    for (int s = 0; s < n; s++) {
        int start = len > c->maxT ? len - c->maxT : 0, T = len - start;
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(ids + start, bt_shape2(1, T), BT_I32, m->device);
        bt_tensor *logits = gpt2_logits(m, idx, dt);
        bt_to_host(bt_select(bt_select(logits, 0, 0), 0, T - 1), row, BT_F32);
        bt_scope_end();
        ids[len++] = sample_next(row, c->V, topk, temp, bt_philox_uniform(seed, (uint64_t)s));
    }
    bt_set_grad_enabled(old);
    if (tok) {
        char *text = NULL;
        size_t nb = bt_decode(tok, ids + 1, (size_t)n, &text);
        if (nb != (size_t)-1) { fwrite(text, 1, nb, stdout); free(text); }
    } else {
        for (int i = 1; i < len; i++) printf("%d ", ids[i]);
    }
    printf("\n");
    fflush(stdout);
    free(ids); free(row);
}

/* ============================================================================================
   5. command line
   ============================================================================================ */
typedef struct {
    const char *train_glob, *val_glob, *out_dir, *model, *save_path, *tok_dir;
    int B, T, total_batch, steps, val_every, val_batches, sample_every, gen_len, topk, warmup;
    double lr, final_lr_frac, weight_decay, clip, temp;
    uint64_t seed;
    const char *precision;    /* fp32 | tf32 | bf16 */
    const char *device;       /* auto | cpu | cuda */
    int overfit;              /* train on the first batch only */
    int quiet;
} train_opts;

static void default_opts(train_opts *o) {
    memset(o, 0, sizeof *o);
    o->train_glob = "data/tinyshakespeare_train.bin"; o->val_glob = "data/tinyshakespeare_val.bin";
    o->model = NULL; o->tok_dir = "data";
    o->B = -1; o->T = -1; o->total_batch = -1; o->steps = -1; o->val_every = -1; o->val_batches = 20;
    o->sample_every = -1; o->gen_len = 64; o->topk = 40; o->warmup = -1;
    o->lr = -1; o->final_lr_frac = 0.1; o->weight_decay = 0.1; o->clip = 1.0; o->temp = 1.0;
    o->seed = 1337; o->precision = NULL; o->device = "auto";
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: train_gpt2 [options]\n"
        "  -i GLOB   train shards (default data/tinyshakespeare_train.bin)\n"
        "  -j GLOB   val shards (default data/tinyshakespeare_val.bin)\n"
        "  -e NAME   model: a preset (d12 d24 d36 d48 s6 s4 s2) or a model file (llm.c layout, fp32)\n"
        "            (default: d12 on a GPU, s4 on a CPU)\n"
        "  -b N      micro-batch size B (default: the largest power of two that fits on a GPU; 8 on a CPU)\n"
        "  -t N      sequence length T (default 1024 on a GPU, 64 on a CPU; at most the model's context)\n"
        "  -d N      total batch in tokens, reached by gradient accumulation (default 524288 GPU, B*T CPU)\n"
        "  -l LR     peak learning rate (default 6e-4 GPU, 2e-3 CPU)\n"
        "  -u N      warmup steps (default 10%% of the steps, at most 700)\n"
        "  -q F      final learning rate as a fraction of the peak (default 0.1)\n"
        "  -c WD     AdamW weight decay of the matrices (default 0.1)\n"
        "  -x N      training steps (default 20 GPU, 300 CPU)\n"
        "  -v N      validate every N steps (and at the end) (default 25 CPU, 10 GPU)\n"
        "  -m N      validation batches (default 20)\n"
        "  -s N      sample every N steps (and at the end; 0 = only at the end)\n"
        "  -g N      tokens to sample (default 64)\n"
        "  -o DIR    write DIR/log.jsonl (one JSON object per step)\n"
        "  --save PATH   write the trained model (llm.c layout) at the end\n"
        "  --precision fp32|tf32|bf16   (default bf16 on a GPU, fp32 on a CPU)\n"
        "  --device auto|cpu|cuda|cuda:N  (default auto: cuda:0 when there is a GPU)\n"
        "  --seed N  --topk N  --temp T  --clip C (0 = no clipping)\n"
        "  --tokenizer DIR   encoder.json and vocab.bpe (default data)\n"
        "  --overfit         train on the first batch only (a check that the model can learn)\n"
        "  -h        this help\n");
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end; errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v; return 0;
}
static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end; errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v; return 0;
}

/* 0 ok, 1 help asked, -1 error (err says which flag and why) */
static int parse_args(int argc, char **argv, train_opts *o, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--overfit")) { o->overfit = 1; continue; }
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (i + 1 >= argc) { snprintf(err, errlen, "%s needs a value", a); return -1; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-i")) o->train_glob = v;
        else if (!strcmp(a, "-j")) o->val_glob = v;
        else if (!strcmp(a, "-o")) o->out_dir = v;
        else if (!strcmp(a, "-e")) o->model = v;
        else if (!strcmp(a, "--save")) o->save_path = v;
        else if (!strcmp(a, "--tokenizer")) o->tok_dir = v;
        else if (!strcmp(a, "-b")) bad = parse_int(v, 1, 1 << 20, &o->B);
        else if (!strcmp(a, "-t")) bad = parse_int(v, 1, 1 << 20, &o->T);
        else if (!strcmp(a, "-d")) bad = parse_int(v, 1, 1 << 30, &o->total_batch);
        else if (!strcmp(a, "-x")) bad = parse_int(v, 0, 1 << 30, &o->steps);
        else if (!strcmp(a, "-v")) bad = parse_int(v, 0, 1 << 30, &o->val_every);
        else if (!strcmp(a, "-m")) bad = parse_int(v, 1, 1 << 20, &o->val_batches);
        else if (!strcmp(a, "-s")) bad = parse_int(v, 0, 1 << 30, &o->sample_every);
        else if (!strcmp(a, "-g")) bad = parse_int(v, 0, 1 << 20, &o->gen_len);
        else if (!strcmp(a, "-u")) bad = parse_int(v, 0, 1 << 30, &o->warmup);
        else if (!strcmp(a, "--topk")) bad = parse_int(v, 0, 1 << 20, &o->topk);
        else if (!strcmp(a, "-l")) bad = parse_double(v, 0, 10, &o->lr);
        else if (!strcmp(a, "-q")) bad = parse_double(v, 0, 1, &o->final_lr_frac);
        else if (!strcmp(a, "-c")) bad = parse_double(v, 0, 10, &o->weight_decay);
        else if (!strcmp(a, "--clip")) bad = parse_double(v, 0, 1e9, &o->clip);
        else if (!strcmp(a, "--temp")) bad = parse_double(v, 0, 100, &o->temp);
        else if (!strcmp(a, "--seed")) { int s; bad = parse_int(v, 0, 2147483647L, &s); o->seed = (uint64_t)s; }
        else if (!strcmp(a, "--precision")) {
            o->precision = v;
            if (strcmp(v, "fp32") && strcmp(v, "tf32") && strcmp(v, "bf16")) { snprintf(err, errlen, "--precision must be fp32, tf32 or bf16, got '%s'", v); return -1; }
        } else if (!strcmp(a, "--device")) {
            o->device = v;
            int n;
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda") && (strncmp(v, "cuda:", 5) || parse_int(v + 5, 0, BT_MAX_GPUS - 1, &n))) {
                snprintf(err, errlen, "--device must be auto, cpu, cuda or cuda:N, got '%s'", v); return -1;
            }
        } else { snprintf(err, errlen, "unknown option '%s'", a); return -1; }
        if (bad) { snprintf(err, errlen, "bad value '%s' for %s", v, a); return -1; }
    }
    return 0;
}

/* fill what the flags left open from the machine, then check the combination */
static int resolve_opts(train_opts *o, int on_gpu, const gpt2_config *cfg, char *err, size_t errlen) {
    if (o->T < 0) o->T = on_gpu ? 1024 : 64;
    if (o->T > cfg->maxT) { snprintf(err, errlen, "-t %d is longer than the model's context %d", o->T, cfg->maxT); return -1; }
    if (o->steps < 0) o->steps = on_gpu ? 20 : 300;
    if (o->val_every < 0) o->val_every = on_gpu ? 10 : 25;
    if (o->sample_every < 0) o->sample_every = 0;
    if (o->lr < 0) o->lr = on_gpu ? 6e-4 : 2e-3;
    if (o->warmup < 0) { o->warmup = o->steps / 10; if (o->warmup > 700) o->warmup = 700; }
    if (!o->precision) o->precision = on_gpu ? "bf16" : "fp32";
    if (!on_gpu && strcmp(o->precision, "fp32")) {
        snprintf(err, errlen, "--precision %s needs a GPU (the CPU path computes in fp32)", o->precision); return -1;
    }
    if (o->B < 0) {
        if (on_gpu) return 0;          /* measured once the model exists: auto_micro_batch */
        o->B = 8;
    }
    if (o->total_batch < 0) o->total_batch = on_gpu ? 524288 : o->B * o->T;
    if (o->total_batch % (o->B * o->T)) {
        snprintf(err, errlen, "-d %d is not a multiple of B*T = %d*%d", o->total_batch, o->B, o->T); return -1;
    }
    return 0;
}

/* ============================================================================================
   6. the training loop
   ============================================================================================ */
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }

/* dense peak FLOP/s of a GPU in a precision, for MFU, looked up by the GPU's name (datasheet
   figures, without sparsity); 0 when the GPU is not in the table */
static double peak_flops(const char *gpu, const char *precision) {
    static const struct { const char *name; double bf16, tf32, fp32; } table[] = {
        {"H100 PCIe", 756e12, 378e12, 51e12},
        {"H100", 989e12, 495e12, 67e12},     /* SXM (HBM3) */
        {"H200", 989e12, 495e12, 67e12},
        {"A100", 312e12, 156e12, 19.5e12},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(gpu, table[i].name))
            return !strcmp(precision, "bf16") ? table[i].bf16 : !strcmp(precision, "tf32") ? table[i].tf32 : table[i].fp32;
    return 0;
}

typedef struct {
    gpt2 model;
    bt_adamw opt;
    bt_loader *train, *val;
    bt_tokenizer *tok;
    int32_t *inputs, *targets;
    bt_dtype dt;
    int val_B;                 /* validation rows per batch: B, or fewer when the val shards are small */
    train_opts o;
    FILE *log;
} trainer;

/* one batch of B rows from L onto the device as i32 [B, T] tensors (in the current scope) */
static void next_batch(trainer *tr, bt_loader *L, int B, bt_tensor **idx, bt_tensor **tgt) {
    if (bt_loader_next(L, tr->inputs, tr->targets) != 0) bt_error("data: %s", bt_data_error());
    bt_shape s = bt_shape2(B, tr->o.T);
    *idx = bt_from_data(tr->inputs, s, BT_I32, tr->model.device);
    *tgt = bt_from_data(tr->targets, s, BT_I32, tr->model.device);
}

static double evaluate(trainer *tr) {
    int old = bt_set_grad_enabled(0);
    bt_loader_reset(tr->val);
    int n = tr->o.val_batches;
    if ((size_t)n > bt_loader_num_batches(tr->val)) n = (int)bt_loader_num_batches(tr->val);
    bt_scope_begin();
    bt_tensor *sum = bt_scalar(0, BT_F32, tr->model.device);
    for (int i = 0; i < n; i++) {
        bt_scope_begin();
        bt_tensor *idx, *tgt;
        next_batch(tr, tr->val, tr->val_B, &idx, &tgt);
        bt_add_(sum, bt_cast(gpt2_loss(&tr->model, idx, tgt, tr->dt), BT_F32), 1.0);
        bt_scope_end();
    }
    double loss = bt_item(sum) / (n ? n : 1);
    bt_scope_end();
    bt_set_grad_enabled(old);
    return loss;
}

/* one optimizer step over total_batch tokens; returns the mean loss (one host sync) */
static double train_step(trainer *tr, int step, double lr, double *grad_norm) {
    int accum = tr->o.total_batch / (tr->o.B * tr->o.T);
    bt_zero_(tr->model.flat_grad);
    bt_scope_begin();
    bt_tensor *loss_sum = bt_scalar(0, BT_F32, tr->model.device);
    for (int a = 0; a < accum; a++) {
        bt_scope_begin();
        bt_tensor *idx, *tgt;
        if (tr->o.overfit && step + a > 0) bt_loader_reset(tr->train);
        next_batch(tr, tr->train, tr->o.B, &idx, &tgt);
        bt_tensor *loss = gpt2_loss(&tr->model, idx, tgt, tr->dt);
        bt_backward(bt_scale(loss, 1.0 / accum));        /* grads average over the micro-batches */
        int old = bt_set_grad_enabled(0);
        bt_add_(loss_sum, bt_cast(loss, BT_F32), 1.0 / accum);
        bt_set_grad_enabled(old);
        bt_scope_end();
    }
    bt_adamw_step(&tr->opt, (float)lr);
    double loss = bt_item(loss_sum);
    *grad_norm = bt_item(tr->opt.grad_norm);
    bt_scope_end();
    return loss;
}

static void log_json(trainer *tr, int step, double loss, double lr, double norm, double ms, double tps, double val) {
    if (!tr->log) return;
    bt_alloc_stats_t st = bt_alloc_stats(tr->model.device);
    fprintf(tr->log, "{\"step\": %d, \"train_loss\": %.6f, \"lr\": %.6e, \"grad_norm\": %.6f, \"ms\": %.3f, \"tok_per_s\": %.1f, "
            "\"mem_mib\": %.1f, \"peak_allocated_mib\": %.1f, \"peak_reserved_mib\": %.1f",
            step, loss, lr, norm, ms, tps, st.allocated / 1048576.0, st.peak_allocated / 1048576.0, st.peak_reserved / 1048576.0);
    if (val == val) fprintf(tr->log, ", \"val_loss\": %.6f", val);
    fprintf(tr->log, "}\n");
    fflush(tr->log);
}

static bt_tokenizer *load_tokenizer(const char *dir) {
    char enc[4096], bpe[4096];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir); snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    bt_tokenizer *t = bt_tokenizer_load(enc, bpe);
    if (!t) fprintf(stderr, "note: no tokenizer (%s); samples print as token ids\n", bt_data_error());
    return t;
}

#ifdef BT_CUDA
/* Peak memory of one forward+backward at micro-batch B (synthetic tokens: memory does not
   depend on their values). */
static size_t probe_peak(gpt2 *m, int B, int T, bt_dtype dt) {
    bt_alloc_reset_peak(m->device);
    int32_t *ids = (int32_t *)calloc((size_t)B * T, sizeof(int32_t));
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(ids, bt_shape2(B, T), BT_I32, m->device);
    bt_backward(gpt2_loss(m, idx, idx, dt));
    bt_scope_end();
    free(ids);
    bt_zero_(m->flat_grad);
    return bt_alloc_stats(m->device).peak_allocated;
}
#endif

/* The largest power-of-two micro-batch that fits: activations grow linearly in B, so two
   probes (B = 1, 2) give the fixed part and the part per sequence; keep 10% of the device free
   for fragmentation and the libraries' own buffers. */
static int auto_micro_batch(gpt2 *m, int T, int total_batch, bt_dtype dt) {
    int best = 1;
#ifdef BT_CUDA
    size_t p1 = probe_peak(m, 1, T, dt), p2 = probe_peak(m, 2, T, dt), free_b = 0, total_b = 0;
    size_t per = p2 > p1 ? p2 - p1 : 1, fixed = p1 > per ? p1 - per : 0;
    bt_device_memory(m->device, &free_b, &total_b);
    double budget = 0.9 * (double)(free_b + bt_alloc_stats(m->device).reserved);
    while (best * 2 * T <= total_batch && total_batch % (best * 2 * T) == 0 && fixed + (double)per * best * 2 <= budget) best *= 2;
    printf("auto micro-batch: %.0f MiB per sequence of %d tokens, %.0f MiB fixed, %.0f MiB usable -> B = %d\n",
           per / 1048576.0, T, fixed / 1048576.0, budget / 1048576.0, best);
#else
    (void)m; (void)T; (void)total_batch; (void)dt;
#endif
    return best;
}

static int train_main(train_opts *o) {
    char err[1024];
    int n_gpus = bt_cuda_device_count(), want = !strncmp(o->device, "cuda", 4);
    int gpu_index = !strncmp(o->device, "cuda:", 5) ? atoi(o->device + 5) : 0;
    if (want && gpu_index >= n_gpus) {
#ifdef BT_CUDA
        fprintf(stderr, "error: --device %s, but %d GPU%s visible\n", o->device, n_gpus, n_gpus == 1 ? " is" : "s are");
#else
        fprintf(stderr, "error: --device %s, but this binary was built without CUDA (build with nvcc)\n", o->device);
#endif
        return 1;
    }
    int on_gpu = n_gpus > 0 && strcmp(o->device, "cpu");
#ifdef BT_CUDA
    if (!n_gpus) printf("no GPU found: running on the CPU\n");
#endif
    bt_device dev = on_gpu ? bt_cuda_device(gpu_index) : bt_cpu();

    gpt2_config cfg;
    const char *model = o->model ? o->model : (on_gpu ? "d12" : "s4");
    int from_file = gpt2_config_from_preset(model, BT_GPT2_VOCAB, &cfg) != 0;
    if (from_file && gpt2_read_header(model, &cfg, err, sizeof err)) {
        fprintf(stderr, "error: -e %s is neither a preset nor a readable model file: %s\n", model, err);
        return 1;
    }
    if (resolve_opts(o, on_gpu, &cfg, err, sizeof err)) { usage(stderr); fprintf(stderr, "error: %s\n", err); return 1; }

    trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.o = *o;
    tr.dt = !strcmp(o->precision, "bf16") ? BT_BF16 : BT_F32;
    bt_set_matmul_precision(!strcmp(o->precision, "tf32") ? BT_MATMUL_TF32 : BT_MATMUL_FP32);
    gpt2_build(&tr.model, cfg, dev);
    if (from_file) {
        if (gpt2_load_weights(&tr.model, model, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return 1; }
    } else gpt2_init(&tr.model, o->seed);
    bt_adamw_init(&tr.opt, tr.model.params, tr.model.n_params, 0.9f, 0.95f, 1e-8f, (float)o->weight_decay, (float)o->clip);
    if (o->B < 0) {                                  /* the GPU default: the largest that fits */
        if (o->total_batch < 0) o->total_batch = 524288;
        o->B = auto_micro_batch(&tr.model, o->T, o->total_batch, tr.dt);
        if (resolve_opts(o, on_gpu, &cfg, err, sizeof err)) { usage(stderr); fprintf(stderr, "error: %s\n", err); return 1; }
        tr.o = *o;
    }
    tr.train = bt_loader_open(o->train_glob, o->B, o->T, 0, 1, 1, o->seed);
    if (!tr.train) { fprintf(stderr, "error: train data (-i %s): %s\n(make data builds the default shards)\n", o->train_glob, bt_data_error()); return 1; }
    /* a large (auto) micro-batch can outgrow a small validation set: halve B for validation */
    for (tr.val_B = o->B; !(tr.val = bt_loader_open(o->val_glob, tr.val_B, o->T, 0, 1, 0, 0)) && tr.val_B > 1;) tr.val_B /= 2;
    if (!tr.val) { fprintf(stderr, "error: val data (-j %s): %s\n", o->val_glob, bt_data_error()); bt_loader_close(tr.train); return 1; }
    tr.tok = load_tokenizer(o->tok_dir);
    tr.inputs = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * o->T);
    tr.targets = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * o->T);

    if (o->out_dir) {
        char path[4096];
        mkdir(o->out_dir, 0755);
        snprintf(path, sizeof path, "%s/log.jsonl", o->out_dir);
        tr.log = fopen(path, "w");
        if (!tr.log) { fprintf(stderr, "error: -o %s: cannot write %s: %s\n", o->out_dir, path, strerror(errno)); return 1; }
    }
    int accum = o->total_batch / (o->B * o->T);
    double flops_per_token = 6.0 * tr.model.num_params + 12.0 * cfg.L * cfg.C * o->T;
    double peak = on_gpu ? peak_flops(bt_device_name(dev), o->precision) : 0;   /* 0: MFU not shown */
    printf("model %s: L %d H %d C %d maxT %d V %d (padded %d), %.2fM parameters on %s\n", model, cfg.L, cfg.H, cfg.C,
           cfg.maxT, cfg.V, cfg.Vp, tr.model.num_params / 1e6, on_gpu ? bt_device_name(dev) : "cpu");
    printf("B %d T %d, total batch %d tokens (%d micro-batches), %d steps, lr %.2e warmup %d, precision %s\n",
           o->B, o->T, o->total_batch, accum, o->steps, o->lr, o->warmup, o->precision);
    printf("train %zu batches/epoch (%s), val %zu batches of %d rows (%s)\n", bt_loader_num_batches(tr.train), o->train_glob,
           bt_loader_num_batches(tr.val), tr.val_B, o->val_glob);
    fflush(stdout);

    double t_start = now_s(), last_val = NAN;
    for (int step = 0; step < o->steps; step++) {
        double lr = bt_lr_cosine(step, o->warmup, o->steps, o->lr, o->lr * o->final_lr_frac);
        double t0 = now_s(), norm = 0;
        double loss = train_step(&tr, step, lr, &norm);
        double dt_s = now_s() - t0, tps = o->total_batch / dt_s;
        double mfu = peak > 0 ? 100.0 * flops_per_token * tps / peak : 0;
        int last = step == o->steps - 1;
        double val = NAN;
        if (o->val_every && ((step + 1) % o->val_every == 0 || last)) val = last_val = evaluate(&tr);
        if (!o->quiet || last || val == val) {
            printf("step %4d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s", step + 1, o->steps, loss, lr, norm, dt_s * 1e3, tps);
            if (peak > 0) printf(" | MFU %.1f%%", mfu);
            printf(" | mem %.0f MiB", bt_alloc_stats(dev).allocated / 1048576.0);
            if (val == val) printf(" | val %.4f", val);
            printf("\n");
            fflush(stdout);
        }
        log_json(&tr, step + 1, loss, lr, norm, dt_s * 1e3, tps, val);
        if ((o->sample_every && (step + 1) % o->sample_every == 0) || (last && o->gen_len > 0)) {
            printf("--- sample (greedy) ---\n");
            gpt2_sample(&tr.model, tr.tok, o->gen_len, 1, 0, o->seed + (uint64_t)step, tr.dt);
            printf("--- sample (top-%d, temperature %.2f) ---\n", o->topk, o->temp);
            gpt2_sample(&tr.model, tr.tok, o->gen_len, o->topk, o->temp, o->seed + (uint64_t)step, tr.dt);
            printf("---\n");
        }
    }
    printf("done: %d steps in %.1f s, final val loss %.4f, peak memory %.0f MiB\n", o->steps, now_s() - t_start, last_val,
           bt_alloc_stats(dev).peak_allocated / 1048576.0);
    int rc = 0;
    if (o->save_path && gpt2_save(&tr.model, o->save_path, err, sizeof err)) { fprintf(stderr, "error: --save: %s\n", err); rc = 1; }
    if (tr.log) fclose(tr.log);
    bt_adamw_free(&tr.opt);
    gpt2_free(&tr.model);
    bt_loader_close(tr.train); bt_loader_close(tr.val);
    bt_tokenizer_free(tr.tok);
    free(tr.inputs); free(tr.targets);
    return rc;
}

#ifndef TRAIN_GPT2_NO_MAIN
int main(int argc, char **argv) {
    train_opts o;
    default_opts(&o);
    char err[1024];
    int r = parse_args(argc, argv, &o, err, sizeof err);
    if (r == 1) { usage(stdout); return 0; }
    if (r < 0) { usage(stderr); fprintf(stderr, "error: %s\n", err); return 2; }
    return train_main(&o);
}
#endif
