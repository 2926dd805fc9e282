/* train_gpt2.c - GPT-2 built from the BluTrain-C headers and trained end to end.

   make && ./train_gpt2            default run: GPT-2 124M on a GPU, a small GPT on a CPU,
                                   on Tiny Shakespeare (make data makes the shards)
   ./train_gpt2 -h                 every flag

   The same file builds two ways: `cc` gives a CPU binary; `nvcc -x cu` a CUDA one, which runs on
   the CPU when no GPU is present. Read top to bottom:
     1. configuration and presets        5. command line
     2. the model: parameters, init, I/O  6. the training loop
     3. the forward pass                  7. checkpoints: save, resume, signals, Hugging Face files
     4. inference: KV cache, sampling     8. tensor and context parallelism (--tp, --cp)
                                          9. a run, from the flags to the saved model
   The backward pass is the autograd engine's (bt_autograd.h); each op's math sits in bt_tensor.h. */
#define _POSIX_C_SOURCE 200809L   /* before any #include: bt_data.h uses pread, readlink, sigaction */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_DIST_IMPLEMENTATION
#define BT_CKPT_IMPLEMENTATION
#define BT_PARALLEL_IMPLEMENTATION
#include "bt_autograd.h"
#include "bt_optim.h"
#include "bt_data.h"
#include "bt_dist.h"
#include "bt_ckpt.h"
#ifdef BT_MLIR                /* make MLIR=1: --mlir routes elementwise chains through bt_mlir.h */
#define BT_MLIR_IMPLEMENTATION
#include "bt_mlir.h"
#endif
#include "bt_parallel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>
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
    {"d12_32k", 12, 12, 768, 32768},   /* its shape with a 32768-token position table (long contexts: --cp) */
    {"d48_64k", 48, 25, 1600, 65536},  /* 1.5B with a 65536-token table: T 65536 overflows one 141 GB GPU */
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
   2. the model: parameters in one flat fp32 buffer, layer by layer
   ============================================================================================ */
/* The parameters and their gradients live in one flat fp32 buffer each, in forward order:
       wte, wpe, layer 0 (ln1w ln1b qkvw qkvb projw projb ln2w ln2b fcw fcb fcprojw fcprojb),
       layer 1, ..., lnfw, lnfb
   so that the backward pass finishes the gradients at the END of the buffer first: data
   parallelism sends those while the earlier layers still compute. llm.c's model file stacks each
   of its 16 tensors over the layers instead (the enum below); each leaf knows its offset there
   (file_off), and reading and writing a model file permutes between the two orders. */
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
    int64_t flat_numel;            /* the buffers' length: num_params, padded when sharded (ZeRO) */
    bt_tensor *flat, *flat_grad;   /* every parameter and its gradient, one buffer each */
    bt_tensor *flat_lowp;          /* bf16 copy of flat for mixed precision, made on demand */
    uint32_t lowp_version;         /* flat's version when flat_lowp was last refreshed */
    bt_tensor *pos;                /* [maxT] i32 positions 0..maxT-1, made on first use: no upload per forward */
    bt_tensor *wte, *wpe, *lnfw, *lnfb;
    gpt2_layer *layers;
    bt_tensor **params;            /* the leaves, for the optimizer */
    int64_t *file_off;             /* [n_params]: each leaf's offset in llm.c's file order */
    int n_params;
    bt_device device;
    int tp, tp_rank;               /* tensor parallelism: this rank's shard of tp (section 8); 0 when whole */
    struct gpt2_par *par;          /* tensor/context parallelism (section 8), NULL: none */
} gpt2;
/* section 8: a tensor-parallel shard's file order, init and forward pass */
static void par_to_file_order(const gpt2 *m, int rank, const float *mem, float *file);
static void par_from_file_order(const gpt2 *m, const float *file, float *mem);
static void par_init(gpt2 *m, uint64_t seed);
static bt_tensor *par_embed(gpt2 *m, bt_tensor *idx, bt_dtype dt);
static bt_tensor *par_attention(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt);
static bt_tensor *par_mlp(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt);
static bt_tensor *par_loss(gpt2 *m, bt_tensor *x, bt_tensor *targets, bt_dtype dt);

/* The next leaf, numel(shape) elements from the buffer's fill mark, in file order at file_off:
   a view of flat, its gradient the same span of flat_grad. The optimizer and the files see one
   buffer, the graph sees ordinary leaves. */
static bt_tensor *gpt2_leaf(gpt2 *m, int64_t *mark, int64_t file_off, bt_shape shape) {
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
    bt_tensor *span = bt_narrow(m->flat, 0, *mark, n), *p = bt_view(span, shape);
    bt_tensor *gspan = bt_narrow(m->flat_grad, 0, *mark, n);
    bt_release(span);
    bt_set_requires_grad(p, 1);
    p->grad = bt_view(gspan, shape);
    bt_release(gspan);
    m->file_off[m->n_params] = file_off;
    m->params[m->n_params++] = p;
    *mark += n;
    return p;
}

/* flat buffers of num_params elements rounded up to a multiple of pad_to (>= 1): ZeRO gives each
   rank an equal shard; the padding is zero and never read as a parameter. The gradients are kept
   in grad_dt: fp32, or the compute dtype when they only hold one micro-batch's (ZeRO-2). */
static void gpt2_build_padded(gpt2 *m, gpt2_config cfg, bt_device dev, int64_t pad_to, bt_dtype grad_dt) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->device = dev;
    int64_t sz[P_COUNT], off[P_COUNT], total = 0, mark = 0, C = cfg.C;
    gpt2_param_sizes(&cfg, sz);
    for (int i = 0; i < P_COUNT; i++) { off[i] = total; total += sz[i]; }
    m->num_params = total;
    m->flat_numel = (total + pad_to - 1) / pad_to * pad_to;
    m->flat = bt_zeros(bt_shape1(m->flat_numel), BT_F32, dev);
    m->flat_grad = bt_zeros(bt_shape1(m->flat_numel), grad_dt, dev);
    m->params = (bt_tensor **)calloc((size_t)(4 + 12 * cfg.L), sizeof(bt_tensor *));
    m->file_off = (int64_t *)calloc((size_t)(4 + 12 * cfg.L), sizeof(int64_t));
    m->layers = (gpt2_layer *)calloc((size_t)cfg.L, sizeof(gpt2_layer));
    if (!m->params || !m->file_off || !m->layers) bt_error("gpt2_build: out of host memory");
    m->wte = gpt2_leaf(m, &mark, off[P_WTE], bt_shape2(cfg.Vp, C));
    m->wpe = gpt2_leaf(m, &mark, off[P_WPE], bt_shape2(cfg.maxT, C));
    for (int l = 0; l < cfg.L; l++) {
        gpt2_layer *y = &m->layers[l];
        y->ln1w = gpt2_leaf(m, &mark, off[P_LN1W] + l * C, bt_shape1(C));
        y->ln1b = gpt2_leaf(m, &mark, off[P_LN1B] + l * C, bt_shape1(C));
        y->qkvw = gpt2_leaf(m, &mark, off[P_QKVW] + l * 3 * C * C, bt_shape2(3 * C, C));
        y->qkvb = gpt2_leaf(m, &mark, off[P_QKVB] + l * 3 * C, bt_shape1(3 * C));
        y->projw = gpt2_leaf(m, &mark, off[P_PROJW] + l * C * C, bt_shape2(C, C));
        y->projb = gpt2_leaf(m, &mark, off[P_PROJB] + l * C, bt_shape1(C));
        y->ln2w = gpt2_leaf(m, &mark, off[P_LN2W] + l * C, bt_shape1(C));
        y->ln2b = gpt2_leaf(m, &mark, off[P_LN2B] + l * C, bt_shape1(C));
        y->fcw = gpt2_leaf(m, &mark, off[P_FCW] + l * 4 * C * C, bt_shape2(4 * C, C));
        y->fcb = gpt2_leaf(m, &mark, off[P_FCB] + l * 4 * C, bt_shape1(4 * C));
        y->fcprojw = gpt2_leaf(m, &mark, off[P_FCPROJW] + l * 4 * C * C, bt_shape2(C, 4 * C));
        y->fcprojb = gpt2_leaf(m, &mark, off[P_FCPROJB] + l * C, bt_shape1(C));
    }
    m->lnfw = gpt2_leaf(m, &mark, off[P_LNFW], bt_shape1(C));
    m->lnfb = gpt2_leaf(m, &mark, off[P_LNFB], bt_shape1(C));
}
/* one process: no padding, fp32 gradients (the tests build models this way; not static, so that
   a build that does not call it has no unused-function warning) */
void gpt2_build(gpt2 *m, gpt2_config cfg, bt_device dev) { gpt2_build_padded(m, cfg, dev, 1, BT_F32); }

static void gpt2_free(gpt2 *m) {
    for (int i = 0; i < m->n_params; i++) bt_release(m->params[i]);
    bt_release(m->flat); bt_release(m->flat_grad); bt_release(m->flat_lowp); bt_release(m->pos);
    free(m->params); free(m->file_off); free(m->layers);
    memset(m, 0, sizeof *m);
}

/* between the buffer's order (mem) and llm.c's file order (file), num_params floats each */
static void gpt2_to_file_order(const gpt2 *m, const float *mem, float *file) {
    if (m->tp > 1) { par_to_file_order(m, m->tp_rank, mem, file); return; }
    for (int i = 0; i < m->n_params; i++)
        memcpy(file + m->file_off[i], mem + (m->params[i]->offset - m->flat->offset), sizeof(float) * (size_t)bt_numel(m->params[i]));
}
static void gpt2_from_file_order(const gpt2 *m, const float *file, float *mem) {
    if (m->tp > 1) { par_from_file_order(m, file, mem); return; }
    for (int i = 0; i < m->n_params; i++)
        memcpy(mem + (m->params[i]->offset - m->flat->offset), file + m->file_off[i], sizeof(float) * (size_t)bt_numel(m->params[i]));
}

/* the file-order offset of leaf p */
static int64_t gpt2_file_offset(const gpt2 *m, const bt_tensor *p) {
    for (int i = 0; i < m->n_params; i++) if (m->params[i] == p) return m->file_off[i];
    bt_error("gpt2: %p is not a parameter of the model", (const void *)p);
    return 0;
}
/* GPT-2's init: weights and embeddings N(0, 0.02), the two residual projections N(0, 0.02 /
   sqrt(2 L)) so the residual stream's variance does not grow with depth, biases 0, layernorm
   gains 1. Each tensor draws from Philox at its offset in llm.c's file order, so a seed gives the
   same weights on any device and in any buffer layout. */
static void gpt2_init(gpt2 *m, uint64_t seed) {
    if (m->tp > 1) { par_init(m, seed); return; }
    int old = bt_set_grad_enabled(0);
    double std = 0.02, res_std = 0.02 / sqrt(2.0 * m->cfg.L);
    bt_normal_(m->wte, 0, std, seed, (uint64_t)gpt2_file_offset(m, m->wte));
    bt_normal_(m->wpe, 0, std, seed, (uint64_t)gpt2_file_offset(m, m->wpe));
    for (int l = 0; l < m->cfg.L; l++) {
        gpt2_layer *y = &m->layers[l];
        bt_tensor *w[2] = {y->qkvw, y->fcw}, *r[2] = {y->projw, y->fcprojw};
        for (int i = 0; i < 2; i++) bt_normal_(w[i], 0, std, seed, (uint64_t)gpt2_file_offset(m, w[i]));
        for (int i = 0; i < 2; i++) bt_normal_(r[i], 0, res_std, seed, (uint64_t)gpt2_file_offset(m, r[i]));
        bt_fill_(y->ln1w, 1.0); bt_fill_(y->ln2w, 1.0);
    }
    bt_fill_(m->lnfw, 1.0);
    bt_set_grad_enabled(old);
}

/* Model file: llm.c's layout, version 3 (fp32): int32 header[256] = {20240326, 3, maxT, V, L,
   H, C, Vp, 0...}, then the flat buffer. Each header field is bounded and the parameter count
   (in 64 bits) must match the file's size before anything is allocated. */
#define GPT2_MODEL_MAGIC 20240326
#define GPT2_MAX_PARAMS (1LL << 40)     /* 4 TiB of fp32: more than any host holds */
static int64_t gpt2_num_params(const gpt2_config *c) {
    int64_t sz[P_COUNT], n = 0;
    gpt2_param_sizes(c, sz);
    for (int i = 0; i < P_COUNT; i++) n += sz[i];
    return n;
}
/* err = a followed by b, cut to errlen (b may be a whole bt_data_error() message) */
static void err_join(char *err, size_t errlen, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > errlen - 1) la = errlen - 1;
    if (lb > errlen - 1 - la) lb = errlen - 1 - la;
    memcpy(err, a, la); memcpy(err + la, b, lb); err[la + lb] = 0;
}
/* a model file opened for reading: a FIFO or directory is refused, never waited on */
static FILE *gpt2_open_model(const char *path, uint64_t *size, char *err, size_t errlen) {
    int fd = bt_input_open(path, size);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) { err_join(err, errlen, "", fd < 0 ? bt_data_error() : strerror(errno)); if (fd >= 0) close(fd); }
    return f;
}
/* cfg's fields bounded and consistent, its parameter count at most 2^40; the messages name src and
   the fields as `field` says them ("header field ": a model file's, "gpt2.": a checkpoint's) */
static int gpt2_config_check(const gpt2_config *cfg, const char *src, const char *field, char *err, size_t errlen) {
    static const struct { const char *name; int32_t hi; } bound[6] = {
        {"maxT", 1 << 20}, {"V", 1 << 24}, {"L", 4096}, {"H", 1 << 16}, {"C", 1 << 16}, {"Vp", 1 << 24}};
    const int v[6] = {cfg->maxT, cfg->V, cfg->L, cfg->H, cfg->C, cfg->Vp};
    for (int i = 0; i < 6; i++)
        if (v[i] < 1 || v[i] > bound[i].hi) {
            snprintf(err, errlen, "%s: %s%s = %d is out of range (1 to %d)", src, field, bound[i].name, v[i], bound[i].hi);
            return -1;
        }
    if (cfg->Vp < cfg->V || cfg->C % cfg->H) {
        snprintf(err, errlen, "%s: inconsistent config maxT %d V %d Vp %d L %d H %d C %d", src, cfg->maxT, cfg->V, cfg->Vp, cfg->L, cfg->H, cfg->C);
        return -1;
    }
    int64_t n = gpt2_num_params(cfg);   /* at most ~2^48 with the bounds above: no overflow */
    if (n > GPT2_MAX_PARAMS) {
        snprintf(err, errlen, "%s: L %d, C %d, Vp %d, maxT %d give %lld parameters, more than 2^40", src, cfg->L, cfg->C, cfg->Vp, cfg->maxT, (long long)n);
        return -1;
    }
    return 0;
}
static int gpt2_read_header(const char *path, gpt2_config *cfg, char *err, size_t errlen) {
    uint64_t size;
    FILE *f = gpt2_open_model(path, &size, err, errlen);
    if (!f) return -1;
    int32_t h[256];
    size_t got = fread(h, sizeof(int32_t), 256, f);
    fclose(f);
    if (got != 256) { snprintf(err, errlen, "%s: too short for a model header (%zu of 1024 bytes)", path, got * 4); return -1; }
    if (h[0] != GPT2_MODEL_MAGIC) { snprintf(err, errlen, "%s: bad magic %d (expected %d, an llm.c/BluTrain model file)", path, h[0], GPT2_MODEL_MAGIC); return -1; }
    if (h[1] != 3) { snprintf(err, errlen, "%s: version %d (only 3, fp32, is read)", path, h[1]); return -1; }
    cfg->maxT = h[2]; cfg->V = h[3]; cfg->L = h[4]; cfg->H = h[5]; cfg->C = h[6]; cfg->Vp = h[7];
    if (gpt2_config_check(cfg, path, "header field ", err, errlen)) return -1;
    int64_t n = gpt2_num_params(cfg);
    if (size != 1024 + 4 * (uint64_t)n) {
        snprintf(err, errlen, "%s: the header's config (L %d, C %d, Vp %d, maxT %d) has %lld parameters (%llu bytes with the header), the file has %llu bytes",
                 path, cfg->L, cfg->C, cfg->Vp, cfg->maxT, (long long)n, (unsigned long long)(1024 + 4 * (uint64_t)n), (unsigned long long)size);
        return -1;
    }
    return 0;
}
static int gpt2_load_weights(gpt2 *m, const char *path, char *err, size_t errlen) {
    uint64_t size;
    FILE *f = gpt2_open_model(path, &size, err, errlen);
    if (!f) return -1;
    float *buf = (float *)malloc(sizeof(float) * (size_t)m->num_params), *mem = (float *)calloc((size_t)m->flat_numel, sizeof(float));
    if (!buf || !mem) { fclose(f); free(buf); free(mem); snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    int ok = fseek(f, 1024, SEEK_SET) == 0 && fread(buf, sizeof(float), (size_t)m->num_params, f) == (size_t)m->num_params;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (!ok || extra) {
        free(buf); free(mem);
        snprintf(err, errlen, "%s: expected exactly %lld parameters after the header", path, (long long)m->num_params);
        return -1;
    }
    gpt2_from_file_order(m, buf, mem);
    bt_tensor *host = bt_from_blob(mem, bt_shape1(m->flat_numel), BT_F32, bt_cpu());
    bt_copy_(m->flat, host);
    bt_release(host);
    free(buf); free(mem);
    return 0;
}
/* through a bt_atomic_file (bt_data.h): a failure, a kill or a concurrent save never leaves a
   half-written model at path; a symlink is written through; a device or FIFO is refused */
static int gpt2_save(gpt2 *m, const char *path, char *err, size_t errlen) {
    int32_t h[256] = {0};
    h[0] = GPT2_MODEL_MAGIC; h[1] = 3; h[2] = m->cfg.maxT; h[3] = m->cfg.V; h[4] = m->cfg.L;
    h[5] = m->cfg.H; h[6] = m->cfg.C; h[7] = m->cfg.Vp;
    float *buf = (float *)malloc(sizeof(float) * (size_t)m->num_params), *mem = (float *)malloc(sizeof(float) * (size_t)m->flat_numel);
    if (!buf || !mem) { free(buf); free(mem); snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    bt_to_host(m->flat, mem, BT_F32);
    gpt2_to_file_order(m, mem, buf);
    free(mem);
    bt_atomic_file *f = bt_atomic_open(path);
    int ok = f && !bt_atomic_write(f, h, sizeof h) && !bt_atomic_write(f, buf, sizeof(float) * (size_t)m->num_params);
    free(buf);
    if (f && !ok) bt_atomic_abort(f);
    if (!ok || bt_atomic_commit(f)) { err_join(err, errlen, "", bt_data_error()); return -1; }
    return 0;
}

/* ============================================================================================
   3. the forward pass
   ============================================================================================ */
/* Parameter p as dtype dt (the compute dtype). For bf16 the whole flat buffer is cast once after
   each change of the fp32 weights (the optimizer step bumps their version), and each parameter is
   a view of that copy; the cast node's backward returns fp32 gradients to the leaves. */
static void gpt2_lowp_refresh(gpt2 *m, bt_dtype dt) {
    if (dt == m->flat->dtype) return;
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
}
static bt_tensor *param_as(gpt2 *m, bt_tensor *p, bt_dtype dt) {
    if (dt == p->dtype) return p;
    gpt2_lowp_refresh(m, dt);
    return bt_cast_cached(p, bt_view(bt_narrow(m->flat_lowp, 0, p->offset, bt_numel(p)), bt_shape_of(p)));
}

/* x + causal self-attention of one block's h: [B, T, C] -> [B, T, C]. One projection makes q, k, v
   side by side ([B, T, 3C]); the attention op reads the heads out of it in place; the residual add
   rides the output projection. */
static bt_tensor *gpt2_attention(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_tensor *x, bt_dtype dt) {
    if (m->par) return bt_add(x, par_attention(m, y, h, dt));
    bt_tensor *qkv = bt_linear(h, param_as(m, y->qkvw, dt), param_as(m, y->qkvb, dt));
    return bt_linear_add(bt_attention_qkv(qkv, m->cfg.H), param_as(m, y->projw, dt), param_as(m, y->projb, dt), x);
}

#ifdef BT_MLIR
/* --mlir: the fc layer's bias + GELU as one fused kernel (bt_mlir_bias_gelu), forward and
   backward, after a matmul without bias; the same math as bt_linear + bt_gelu */
static int gpt2_use_mlir;
#endif

/* x + the MLP of h (bias + GELU and the residual add ride the GEMMs: bt_mlp_gelu) */
static bt_tensor *gpt2_mlp(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_tensor *x, bt_dtype dt) {
    if (m->tp > 1) return bt_add(x, par_mlp(m, y, h, dt));
#ifdef BT_MLIR
    if (gpt2_use_mlir) {
        bt_tensor *u = bt_mlir_bias_gelu(bt_linear(h, param_as(m, y->fcw, dt), NULL), param_as(m, y->fcb, dt));
        return bt_linear_add(u, param_as(m, y->fcprojw, dt), param_as(m, y->fcprojb, dt), x);
    }
#endif
    return bt_mlp_gelu(h, param_as(m, y->fcw, dt), param_as(m, y->fcb, dt), param_as(m, y->fcprojw, dt),
                       param_as(m, y->fcprojb, dt), x);
}

/* positions 0..T-1 on the model's device: a view of one tensor made once, so that a forward pass
   uploads nothing (a CUDA graph cannot capture an upload) */
static bt_tensor *gpt2_positions(gpt2 *m, int64_t T) {
    if (!m->pos) {
        bt_scope_begin();
        m->pos = bt_keep(bt_arange(m->cfg.maxT, BT_I32, m->device));
        bt_scope_end();
    }
    return bt_narrow(m->pos, 0, 0, T);
}

/* idx [B, T] i32 on the model's device -> the final layernorm's output [B, T, C] in dtype dt */
static bt_tensor *gpt2_hidden(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    const gpt2_config *c = &m->cfg;
    int64_t T = idx->shape[1];
    bt_tensor *pos = gpt2_positions(m, T);
    bt_tensor *x = m->par ? par_embed(m, idx, dt) : bt_add(bt_embedding(param_as(m, m->wte, dt), idx), bt_embedding(param_as(m, m->wpe, dt), pos));
    for (int l = 0; l < c->L; l++) {
        gpt2_layer *y = &m->layers[l];
        x = gpt2_attention(m, y, bt_layernorm(x, param_as(m, y->ln1w, dt), param_as(m, y->ln1b, dt), 1e-5), x, dt);
        x = gpt2_mlp(m, y, bt_layernorm(x, param_as(m, y->ln2w, dt), param_as(m, y->ln2b, dt), 1e-5), x, dt);
    }
    return bt_layernorm(x, param_as(m, m->lnfw, dt), param_as(m, m->lnfb, dt), 1e-5);
}

/* idx [B, T] -> logits [B, T, Vp] in dtype dt; weight tying: the head is wte (training uses the
   fused gpt2_loss; the tests and programs that include this file use this) */
bt_tensor *gpt2_logits(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    return bt_linear(gpt2_hidden(m, idx, dt), param_as(m, m->wte, dt), NULL);
}

/* mean cross-entropy of the next tokens over the V real columns (the padding never counts), with
   the head fused into the loss: the [B, T, Vp] logits are never held whole */
static bt_tensor *gpt2_loss(gpt2 *m, bt_tensor *idx, bt_tensor *targets, bt_dtype dt) {
    if (m->tp > 1) return par_loss(m, gpt2_hidden(m, idx, dt), targets, dt);
    return bt_linear_cross_entropy(gpt2_hidden(m, idx, dt), param_as(m, m->wte, dt), targets, m->cfg.V, -1);
}

/* ============================================================================================
   4. inference: a KV cache, sampling
   ============================================================================================ */
/* The keys and values every layer computed for the positions seen so far. With them a new token
   costs one position's forward pass (its attention reads the cached keys and values) instead of
   the whole sequence's: generating n tokens is O(n) matmul rows, not O(n^2).
       gpt2_kv_cache *c = gpt2_kv_cache_create(m, BT_F32);
       bt_tensor *logits = gpt2_forward_cached(m, c, prompt, n);   // [Vp] of the last position
       ... then one token at a time; gpt2_kv_cache_reset(c) starts a new sequence
       gpt2_kv_cache_free(c); */
typedef struct {
    bt_tensor **k, **v;     /* per layer [H, maxT, D] in the compute dtype: positions 0..len-1 filled */
    int len;
    bt_dtype dt;
} gpt2_kv_cache;

static gpt2_kv_cache *gpt2_kv_cache_create(gpt2 *m, bt_dtype dt) {
    const gpt2_config *c = &m->cfg;
    gpt2_kv_cache *kv = (gpt2_kv_cache *)calloc(1, sizeof *kv);
    if (kv) { kv->k = (bt_tensor **)calloc((size_t)c->L, sizeof(bt_tensor *)); kv->v = (bt_tensor **)calloc((size_t)c->L, sizeof(bt_tensor *)); }
    if (!kv || !kv->k || !kv->v) bt_error("gpt2_kv_cache_create: out of host memory");
    kv->dt = dt;
    bt_scope_begin();
    for (int l = 0; l < c->L; l++) {
        kv->k[l] = bt_keep(bt_empty(bt_shape3(c->H, c->maxT, c->C / c->H), dt, m->device));
        kv->v[l] = bt_keep(bt_empty(bt_shape3(c->H, c->maxT, c->C / c->H), dt, m->device));
    }
    bt_scope_end();
    return kv;
}
static void gpt2_kv_cache_reset(gpt2_kv_cache *kv) { kv->len = 0; }
static void gpt2_kv_cache_free(gpt2_kv_cache *kv, int L) {
    if (!kv) return;
    for (int l = 0; l < L; l++) { bt_release(kv->k[l]); bt_release(kv->v[l]); }
    free(kv->k); free(kv->v); free(kv);
}

/* attention of n new positions (h [1, n, C]) over the len cached ones and themselves: their
   keys and values are appended to the cache, then softmax(q K^T / sqrt(D) + mask) V with K, V
   the cache's first len + n rows; mask (NULL when n = 1) hides the later new positions */
static bt_tensor *gpt2_attention_cached(gpt2 *m, gpt2_layer *y, bt_tensor *h, gpt2_kv_cache *kv, int l, bt_tensor *mask) {
    int64_t n = h->shape[1], C = m->cfg.C, H = m->cfg.H, D = C / H, T = kv->len + n;
    bt_tensor *qkv = bt_linear(h, param_as(m, y->qkvw, kv->dt), param_as(m, y->qkvb, kv->dt));   /* [1, n, 3C] */
    const int heads_first[3] = {1, 0, 2};
    bt_tensor *part[3];                                                             /* q, k, v as [H, n, D] */
    for (int i = 0; i < 3; i++) part[i] = bt_permute(bt_reshape(bt_narrow(qkv, 2, i * C, C), bt_shape3(n, H, D)), heads_first);
    bt_copy_(bt_narrow(kv->k[l], 1, kv->len, n), part[1]);
    bt_copy_(bt_narrow(kv->v[l], 1, kv->len, n), part[2]);
    bt_tensor *s = bt_scale(bt_matmul_t(part[0], bt_narrow(kv->k[l], 1, 0, T), 0, 1), 1.0 / sqrt((double)D));   /* [H, n, T] */
    if (mask) s = bt_add(s, mask);
    bt_tensor *o = bt_matmul(bt_softmax(s), bt_narrow(kv->v[l], 1, 0, T));                                     /* [H, n, D] */
    o = bt_reshape(bt_permute(o, heads_first), bt_shape3(1, n, C));
    return bt_linear(o, param_as(m, y->projw, kv->dt), param_as(m, y->projb, kv->dt));
}

/* [n, len + n]: 0 where new position i may see key j (j <= len + i), -inf elsewhere */
static bt_tensor *gpt2_causal_mask(int n, int len, bt_dtype dt, bt_device dev) {
    int T = len + n;
    float *mk = (float *)malloc(sizeof(float) * (size_t)n * T);
    if (!mk) bt_error("gpt2_causal_mask: out of host memory");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < T; j++) mk[(size_t)i * T + j] = j <= len + i ? 0.0f : -INFINITY;
    bt_tensor *t = bt_cast(bt_from_data(mk, bt_shape2(n, T), BT_F32, dev), dt);
    free(mk);
    return t;
}

/* Runs the n tokens ids (host memory) at positions kv->len .. kv->len + n - 1, appends their
   keys and values, and returns the logits of the last one: [Vp] in the cache's dtype. Call it
   inside a scope (bt_scope_begin/end): the logits and every temporary die at its end. Gradients
   off. kv->len + n must not exceed maxT (bt_error otherwise). */
static bt_tensor *gpt2_forward_cached(gpt2 *m, gpt2_kv_cache *kv, const int32_t *ids, int n) {
    const gpt2_config *c = &m->cfg;
    bt_dtype dt = kv->dt;
    if (n < 1 || kv->len + n > c->maxT)
        bt_error("gpt2_forward_cached: %d new positions after %d cached ones do not fit the context of %d", n, kv->len, c->maxT);
    int old = bt_set_grad_enabled(0);
    bt_tensor *idx = bt_from_data(ids, bt_shape2(1, n), BT_I32, m->device);
    bt_tensor *pos = bt_narrow(bt_arange(kv->len + n, BT_I32, m->device), 0, kv->len, n);
    bt_tensor *x = bt_add(bt_embedding(param_as(m, m->wte, dt), idx), bt_embedding(param_as(m, m->wpe, dt), pos));
    bt_tensor *mask = n > 1 ? gpt2_causal_mask(n, kv->len, dt, m->device) : NULL;
    for (int l = 0; l < c->L; l++) {
        gpt2_layer *y = &m->layers[l];
        x = bt_add(x, gpt2_attention_cached(m, y, bt_layernorm(x, param_as(m, y->ln1w, dt), param_as(m, y->ln1b, dt), 1e-5), kv, l, mask));
        x = gpt2_mlp(m, y, bt_layernorm(x, param_as(m, y->ln2w, dt), param_as(m, y->ln2b, dt), 1e-5), x, dt);
    }
    kv->len += n;
    x = bt_layernorm(bt_select(bt_select(x, 0, 0), 0, n - 1), param_as(m, m->lnfw, dt), param_as(m, m->lnfb, dt), 1e-5);   /* [C] */
    bt_tensor *logits = bt_matmul(param_as(m, m->wte, dt), x);                                                        /* [Vp] */
    bt_set_grad_enabled(old);
    return logits;
}

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

/* Generate n tokens after <|endoftext|> through a KV cache and print them as text. When the
   context fills up, the cache restarts from the last maxT/2 tokens. */
static void gpt2_sample(gpt2 *m, bt_tokenizer *tok, int n, int topk, double temp, uint64_t seed, bt_dtype dt) {
    const gpt2_config *c = &m->cfg;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    float *row = (float *)malloc(sizeof(float) * (size_t)c->Vp);
    if (!ids || !row) bt_error("gpt2_sample: out of host memory");
    gpt2_kv_cache *kv = gpt2_kv_cache_create(m, dt);
    int len = 1, fed = 0;          /* ids[0..fed) are in the cache */
    ids[0] = BT_EOT < c->V ? BT_EOT : 0;   /* a model with a smaller vocabulary starts from token 0 */
    for (int s = 0; s < n; s++) {
        if (kv->len + (len - fed) > c->maxT) { gpt2_kv_cache_reset(kv); fed = len - (c->maxT > 1 ? c->maxT / 2 : 1); }
        bt_scope_begin();
        bt_to_host(gpt2_forward_cached(m, kv, ids + fed, len - fed), row, BT_F32);
        bt_scope_end();
        fed = len;
        ids[len++] = sample_next(row, c->V, topk, temp, bt_philox_uniform(seed, (uint64_t)s));
    }
    gpt2_kv_cache_free(kv, c->L);
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
    int deterministic;        /* the same bits on every run (no atomics, no matmul autotuning) */
    int nproc;                /* --nproc: ranks this process starts on its node (1: none) */
    const char *dp;           /* ddp | zero1 | zero2: data parallelism when world > 1 */
    int bucket_mb;            /* DDP bucket size */
    const char *comm_dtype;   /* fp32 | bf16: the gradients' dtype on the wire */
    double nccl_timeout;      /* seconds a collective may take before the run is aborted */
    const char *ckpt_dir;     /* checkpoints (section 7): where they go; also --resume auto's place */
    int ckpt_every, ckpt_keep;   /* a checkpoint every N steps (0: only at the end and on a signal); the newest K kept (0: all) */
    const char *resume;       /* FILE, DIR or auto: continue that run */
    const char *init_from;    /* a Hugging Face model.safetensors (or its directory), or a checkpoint: its weights */
    const char *export_hf;    /* DIR: model.safetensors + config.json for transformers at the end */
    int skip_nonfinite;       /* a step with a non-finite loss or norm skips its update instead of stopping the run */
    int mlir;                 /* --mlir: fused chains through bt_mlir.h (BT_MLIR builds only) */
    int tp, cp, sp, async_tp; /* tensor / context parallelism (section 8): group sizes, sequence parallel, overlap */
    const char *cp_comm;      /* ring | allgather | alltoall: how context parallelism moves K/V (NULL: ring) */
    int cuda_graph;           /* --cuda-graph: 1 on, 0 off, -1 (default) on where it is supported (resolve_graph) */
    int recompute;            /* --recompute: BT_RECOMPUTE_* flags, -1 (default) chosen by memory (choose_recompute) */
    int given_i, given_j, given_t, given_tok;   /* flags the user gave: defaults are explained, not blamed */
} train_opts;

static void default_opts(train_opts *o) {
    memset(o, 0, sizeof *o);
    o->train_glob = "data/tinyshakespeare_train.bin"; o->val_glob = "data/tinyshakespeare_val.bin";
    o->model = NULL; o->tok_dir = "data";
    o->B = -1; o->T = -1; o->total_batch = -1; o->steps = -1; o->val_every = -1; o->val_batches = 20;
    o->sample_every = -1; o->gen_len = 64; o->topk = 40; o->warmup = -1;
    o->lr = -1; o->final_lr_frac = 0.1; o->weight_decay = 0.1; o->clip = 1.0; o->temp = 1.0;
    o->seed = 1337; o->precision = NULL; o->device = "auto";
    o->nproc = 1; o->dp = "ddp"; o->bucket_mb = 25; o->comm_dtype = "fp32"; o->nccl_timeout = 600;
    o->ckpt_keep = 3; o->tp = 1; o->cp = 1; o->cuda_graph = -1; o->recompute = -1;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: train_gpt2 [options]\n"
        "  -i GLOB   train shards (default data/tinyshakespeare_train.bin)\n"
        "  -j GLOB   val shards (default data/tinyshakespeare_val.bin)\n"
        "  -e NAME   model: a preset (d12 d24 d36 d48 s6 s4 s2; d12_32k, d48_64k: d12, d48 with maxT 32768, 65536) or a model file (llm.c layout, fp32)\n"
        "            (default: d12 on a GPU, s4 on a CPU)\n"
        "  -b N      micro-batch size B (default: the largest power of two that fits on a GPU; 8 on a CPU)\n"
        "  -t N      sequence length T (default 1024 on a GPU, 64 on a CPU; at most the model's context)\n"
        "  -d N      total batch in tokens, reached by gradient accumulation (default 524288 GPU, B*T CPU)\n"
        "  -l LR     peak learning rate (default 6e-4 GPU, 2e-3 CPU)\n"
        "  -u N      warmup steps (default 10%% of the steps, at most 700)\n"
        "  -q F      final learning rate as a fraction of the peak (default 0.1)\n"
        "  -c WD     AdamW weight decay of the matrices (default 0.1)\n"
        "  -x N      training steps (default 20 GPU, 300 CPU)\n"
        "  -v N      validate every N steps (and at the end; 0 = never, -j unused) (default 25 CPU, 10 GPU)\n"
        "  -m N      validation batches (default 20)\n"
        "  -s N      sample every N steps (and at the end; 0 = only at the end)\n"
        "  -g N      tokens to sample (default 64)\n"
        "  -o DIR    write DIR/log.jsonl (one JSON object per step; DIR is made if missing)\n"
        "  --save PATH   write the trained model (llm.c layout) at the end, before the last sample\n"
        "  --precision fp32|tf32|bf16   (default bf16 on a GPU, fp32 on a CPU)\n"
        "  --device auto|cpu|cuda|cuda:N  (default auto: cuda:0 when there is a GPU)\n"
        "  --seed N  --topk N  --temp T  --clip C (0 = no clipping)\n"
        "  --tokenizer DIR   encoder.json and vocab.bpe (default data; without them samples print as ids)\n"
        "  --overfit         train on the first batch only (a check that the model can learn)\n"
        "  --deterministic   the same bits on every run: no float atomics, no matmul autotuning\n"
        "  -n, --nproc N     start N processes on this node, one per GPU (data parallel; -d stays the global batch)\n"
        "  --dp ddp|zero1|zero2   with several processes (this, torchrun, srun or mpirun): all-reduced\n"
        "            gradients (ddp, default), + sharded AdamW state (zero1), + sharded gradients (zero2);\n"
        "            with --tp/--cp over the dp x cp ranks of each tp index (GPUs only)\n"
        "  --bucket-mb N     DDP gradient bucket size (default 25)\n"
        "  --comm-dtype fp32|bf16   gradients on the wire (default fp32)\n"
        "  --nccl-timeout S  abort the run when a collective takes longer (default 600)\n"
        "  --ckpt-dir DIR    checkpoints (weights, AdamW state, data position) go to DIR/ckpt_STEP.safetensors:\n"
        "            after the last step, on SIGINT/SIGTERM, and every --ckpt-every steps\n"
        "  --ckpt-every N    a checkpoint every N steps, written while training goes on (default 0: none)\n"
        "  --ckpt-keep K     keep the newest K checkpoints (default 3; 0 keeps all)\n"
        "  --resume FILE|DIR|auto   continue a run from a checkpoint (DIR: its newest valid one; auto: that of\n"
        "            --ckpt-dir, or a fresh start when it has none), bit for bit; give the run's options again\n"
        "  --init-from PATH  start from a Hugging Face GPT-2 model.safetensors (or its directory), or from a\n"
        "            checkpoint's weights (a new run from the start: fresh AdamW state, any number of processes)\n"
        "  --export-hf DIR   write DIR/model.safetensors and DIR/config.json for transformers at the end\n"
        "  --skip-nonfinite  skip an update whose loss or gradient norm is not finite (default: stop the run)\n"
        "  --mlir            the MLP's bias + GELU as one kernel compiled by MLIR (bt_mlir.h; a make MLIR=1 build)\n"
        "  --tp N    tensor parallelism over N processes (heads, MLP and vocabulary split; data parallel over\n"
        "            processes / (tp x cp)); N divides the heads, 4C and the padded vocabulary\n"
        "  --sp      with --tp: sequence parallelism (layernorms and residuals on T/tp tokens)\n"
        "  --async-tp  with --tp: overlap each layer's collective with its matmul (chunked)\n"
        "  --cp N    context parallelism over N processes (each holds 2 zig-zag chunks of T/(2N) tokens)\n"
        "  --cp-comm ring|allgather|alltoall   how --cp moves keys and values (default ring)\n"
        "  --cuda-graph on|off   capture each micro-batch's forward + backward in a CUDA graph, replayed\n"
        "            (default on; with several processes of data parallelism (ddp, zero1, zero2) the graph\n"
        "            holds the gradient buckets' collectives too; not with --tp, --cp, --mlir, where off is\n"
        "            the default; the CPU ignores it)\n"
        "  --recompute none|gelu   activations remade in the backward instead of kept: gelu(h) of the MLP\n"
        "            (default: none when -b fits without, else gelu; none with the measured -b)\n"
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
        if (!strcmp(a, "--deterministic")) { o->deterministic = 1; continue; }
        if (!strcmp(a, "--skip-nonfinite")) { o->skip_nonfinite = 1; continue; }
        if (!strcmp(a, "--mlir")) {
#ifndef BT_MLIR
            snprintf(err, errlen, "--mlir: this binary was built without MLIR; make MLIR=1 (needs libmlir-19-dev)"); return -1;
#endif
            o->mlir = 1; continue;
        }
        if (!strcmp(a, "--sp")) { o->sp = 1; continue; }
        if (!strcmp(a, "--async-tp")) { o->async_tp = 1; continue; }
        if (i + 1 >= argc) { snprintf(err, errlen, "%s needs a value", a); return -1; }
        const char *v = argv[++i];
        int bad = 0;
        /* "--save --quiet" is a forgotten value, not a file named --quiet ("-l -1" stays a number) */
        if (v[0] == '-' && v[1] && !(v[1] >= '0' && v[1] <= '9') && v[1] != '.') {
            snprintf(err, errlen, "%s needs a value, but the next argument is the option '%s'", a, v); return -1;
        }
        if (!*v) { snprintf(err, errlen, "%s needs a value, got an empty one", a); return -1; }
        if (!strcmp(a, "-i")) { o->train_glob = v; o->given_i = 1; }
        else if (!strcmp(a, "-j")) { o->val_glob = v; o->given_j = 1; }
        else if (!strcmp(a, "-o")) o->out_dir = v;
        else if (!strcmp(a, "-e")) o->model = v;
        else if (!strcmp(a, "--save")) o->save_path = v;
        else if (!strcmp(a, "--tokenizer")) { o->tok_dir = v; o->given_tok = 1; }
        else if (!strcmp(a, "-b")) bad = parse_int(v, 1, 1 << 20, &o->B);
        else if (!strcmp(a, "-t")) { bad = parse_int(v, 1, 1 << 20, &o->T); o->given_t = 1; }
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
        else if (!strcmp(a, "-n") || !strcmp(a, "--nproc")) bad = parse_int(v, 1, 1024, &o->nproc);
        else if (!strcmp(a, "--bucket-mb")) bad = parse_int(v, 1, 1 << 16, &o->bucket_mb);
        else if (!strcmp(a, "--nccl-timeout")) bad = parse_double(v, 1, 1e7, &o->nccl_timeout);
        else if (!strcmp(a, "--ckpt-dir")) o->ckpt_dir = v;
        else if (!strcmp(a, "--ckpt-every")) bad = parse_int(v, 0, 1 << 30, &o->ckpt_every);
        else if (!strcmp(a, "--ckpt-keep")) bad = parse_int(v, 0, 1 << 20, &o->ckpt_keep);
        else if (!strcmp(a, "--resume")) o->resume = v;
        else if (!strcmp(a, "--init-from")) o->init_from = v;
        else if (!strcmp(a, "--export-hf")) o->export_hf = v;
        else if (!strcmp(a, "--tp")) bad = parse_int(v, 1, 1024, &o->tp);
        else if (!strcmp(a, "--cp")) bad = parse_int(v, 1, 1024, &o->cp);
        else if (!strcmp(a, "--cp-comm")) {
            bt_cp_kv kv;
            o->cp_comm = v;
            if (bt_cp_kv_parse(v, &kv)) { snprintf(err, errlen, "--cp-comm must be ring, allgather or alltoall, got '%s'", v); return -1; }
        }
        else if (!strcmp(a, "--recompute")) {
            if (strcmp(v, "none") && strcmp(v, "gelu")) { snprintf(err, errlen, "--recompute must be none or gelu, got '%s'", v); return -1; }
            o->recompute = !strcmp(v, "gelu") ? BT_RECOMPUTE_GELU : 0;
        }
        else if (!strcmp(a, "--cuda-graph")) {
            if (strcmp(v, "on") && strcmp(v, "off")) { snprintf(err, errlen, "--cuda-graph must be on or off, got '%s'", v); return -1; }
            o->cuda_graph = !strcmp(v, "on");
        }
        else if (!strcmp(a, "--dp")) {
            o->dp = v;
            if (strcmp(v, "ddp") && strcmp(v, "zero1") && strcmp(v, "zero2")) { snprintf(err, errlen, "--dp must be ddp, zero1 or zero2, got '%s'", v); return -1; }
        } else if (!strcmp(a, "--comm-dtype")) {
            o->comm_dtype = v;
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) { snprintf(err, errlen, "--comm-dtype must be fp32 or bf16, got '%s'", v); return -1; }
        }
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
    const char *clash = o->ckpt_every && !o->ckpt_dir ? "--ckpt-every needs --ckpt-dir DIR (where the checkpoints go)"
        : o->resume && !strcmp(o->resume, "auto") && !o->ckpt_dir ? "--resume auto needs --ckpt-dir DIR (where to look)"
        : o->resume && o->init_from ? "--resume and --init-from exclude each other (--init-from starts a new run from a model's weights)"
        : o->init_from && o->model ? "-e and --init-from exclude each other (both say where the model comes from)" : NULL;
    if (clash) { snprintf(err, errlen, "%s", clash); return -1; }
    return 0;
}

/* fill what the flags left open from the machine, then check the combination */
static int resolve_opts(train_opts *o, int on_gpu, const gpt2_config *cfg, char *err, size_t errlen) {
    if (o->T < 0) o->T = on_gpu ? 1024 : 64;
    if (o->T > cfg->maxT) {
        if (o->given_t) snprintf(err, errlen, "-t %d is longer than the model's context %d", o->T, cfg->maxT);
        else snprintf(err, errlen, "the default -t %d (on a %s) is longer than the model's context %d: give -t %d or less", o->T, on_gpu ? "GPU" : "CPU", cfg->maxT, cfg->maxT);
        return -1;
    }
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
    int64_t bt = (int64_t)o->B * o->T;   /* 64 bits: -b and -t may each be up to 2^20 */
    if (bt > INT32_MAX) {
        snprintf(err, errlen, "-b %d x -t %d = %lld tokens per micro-batch, more than 2^31 - 1", o->B, o->T, (long long)bt); return -1;
    }
    if (o->total_batch < 0) o->total_batch = on_gpu ? 524288 : (int)bt;
    if (o->total_batch % bt) {
        snprintf(err, errlen, "-d %d is not a multiple of B*T = %d*%d", o->total_batch, o->B, o->T); return -1;
    }
    return 0;
}

/* --cuda-graph: on by default on GPUs, one or several processes of data parallelism (the
   micro-step's graph then holds the gradient buckets' collectives: bit-identical to eager and
   0.5-1.2% faster on two H200s, bench/RESULTS.md); tp/cp's collectives and --mlir's kernels are
   not captured (an error when asked for); no GPU: ignored */
static int resolve_graph(train_opts *o, int on_gpu, char *err, size_t errlen) {
    const char *why = o->tp * o->cp > 1 ? "--tp or --cp" : o->mlir ? "--mlir" : NULL;
    if (on_gpu && why && o->cuda_graph == 1) { snprintf(err, errlen, "--cuda-graph on: not supported with %s; use --cuda-graph off", why); return -1; }
    o->cuda_graph = on_gpu && !why && o->cuda_graph != 0;
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

/* where the weights come from: --resume, --init-from (section 7), else -e */
typedef struct {
    bt_ckpt_file *file;    /* NULL: -e */
    int resume;            /* 1: the whole state is resumed from it, 0: its weights only */
    int hf;                /* 1: a Hugging Face GPT-2 file */
    char prefix[16];       /* its names' prefix: "transformer." or "" (older files) */
    char path[4096];
} model_source;

/* The micro-step's CUDA graphs (--cuda-graph): the shapes they were captured for and the tensors
   they read and write, made before the capture so that their addresses stay fixed. One graph per
   kind of micro-step: [0] computes (one process; or data parallel, accumulating only), [1]
   computes and communicates (data parallel: the step's last micro-batch; zero2: every one). */
typedef struct {
    bt_graph *graph[2];        /* NULL until captured */
    int pool;                  /* the private pool they share (the first capture's), 0 before */
    int B, T, accum;           /* the shapes, and the scale 1/accum, baked into the graph */
    bt_dtype dt;
    bt_tensor *in;             /* [2, B, T] i32: a micro-batch's inputs and targets, copied in before a launch */
    bt_tensor *idx, *tgt;      /* its two halves */
    bt_tensor *loss_sum;       /* f32 scalar: every micro-step adds its loss / accum */
    int32_t *host;             /* [accum, 2, B, T]: a step's tokens, uploaded at once */
    int warmed[2];             /* the eager micro-step before each capture has run */
    int captures;              /* captures made in this run (a change of shape makes a new one) */
} step_graph;

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
    /* data parallelism over several processes (dist == NULL: one) */
    bt_dist *dist;
    bt_ddp *ddp;               /* the gradient buckets */
    int zero;                  /* 0: ddp, 1: zero1, 2: zero2 */
    int64_t shard_lo, shard_hi;   /* ZeRO: this rank's range of the flat buffers (AdamW state, updates) */
    int64_t shard;             /* ZeRO: elements per rank; the flat buffers are shard x the ZeRO group's size (zero_comm) */
    bt_tensor *grad_shard;     /* zero2: this rank's fp32 gradients, summed over the micro-batches */
    void *comm_ev[2];          /* around the step's last bt_ddp_wait on the compute stream (timed) */
    void *work_ev[2];          /* BT_STEP_TIMES=1: the step's start and the end of its last backward (timed) */
    int comm_early;            /* buckets already launched when the step's last backward ended; -1: no timed wait this step (graphs) */
    /* checkpoints (section 7) */
    model_source src;
    int start_step;            /* the first step to run: 0, or the resumed checkpoint's */
    bt_ckpt_saver *saver;      /* rank 0 with --ckpt-dir: the asynchronous writer */
    int fence_pending;         /* a snapshot's copies must be done before the next update (ckpt_fence) */
    bt_tensor *gathered[5];    /* ZeRO or tp: AdamW's m and v (and with tp the weights) gathered, alive until the fence;
                                  [3], [4]: with ZeRO m and v over the ZeRO group (with tp the input of the tp gather) */
    double last_stall_ms, total_stall_ms;   /* host time of the last snapshot, of all */
    int64_t saves_seen;        /* finished saves reported so far */
    int skipped;               /* --skip-nonfinite: updates skipped */
    struct gpt2_par *par;      /* tensor/context parallelism (section 8), NULL: none */
    step_graph sg;             /* --cuda-graph */
    double host_ms;            /* the last step's host time until its loss read (the rest is waiting for the GPU) */
} trainer;
static void ckpt_fence(trainer *tr);   /* section 7 */
/* section 8 */
static void par_batch(trainer *tr, int B, bt_tensor **idx, bt_tensor **tgt);
static void par_reduce_grads(trainer *tr);
static void par_mean(trainer *tr, bt_tensor *t);
static bt_tensor *par_grad_norm(trainer *tr);
static void par_free(struct gpt2_par *p);
static int par_data_world(const trainer *tr);
static int par_data_rank(const struct gpt2_par *p);
static int par_first_rank_of_data(const struct gpt2_par *p, int d);
static bt_tensor *par_gather_whole(trainer *tr, bt_tensor *x);
static bt_tensor *par_shard_of_whole(const gpt2 *m, bt_tensor *whole);
static int par_source_load(trainer *tr, char *err, size_t errlen);
static bt_comm *par_dpcp_comm(const struct gpt2_par *p);
static int64_t par_whole_numel(const gpt2 *m);
static void par_tp_sum(const struct gpt2_par *p, bt_tensor *t);
static void par_stage_mark(trainer *tr, int k);

/* the next batch of L into tr->inputs and tr->targets */
static void load_batch(trainer *tr, bt_loader *L) {
    if (bt_loader_next(L, tr->inputs, tr->targets) != 0) bt_error("data: %s", bt_data_error());
}
/* one batch of B rows from L onto the device as i32 [B, T] tensors (in the current scope) */
static void next_batch(trainer *tr, bt_loader *L, int B, bt_tensor **idx, bt_tensor **tgt) {
    load_batch(tr, L);
    bt_shape s = bt_shape2(B, tr->o.T);
    *idx = bt_from_data(tr->inputs, s, BT_I32, tr->model.device);
    *tgt = bt_from_data(tr->targets, s, BT_I32, tr->model.device);
    if (tr->par) par_batch(tr, B, idx, tgt);   /* this rank's zig-zag tokens (cp) */
}

static double evaluate(trainer *tr) {
    /* the graph's pool is free between launches: validation borrows it instead of reserving more */
    int pool = tr->sg.pool;
    if (pool) bt_alloc_pool_push(tr->model.device, pool);
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
    if (tr->par) par_mean(tr, sum);
    else if (tr->dist) bt_all_reduce(tr->dist->world_comm, bt_data_ptr(sum), bt_data_ptr(sum), 1, BT_F32, BT_RED_AVG, NULL);
    double loss = bt_item(sum) / (n ? n : 1);
    bt_scope_end();
    bt_set_grad_enabled(old);
    if (pool) bt_alloc_pool_pop(tr->model.device);
    return loss;
}

/* ---- ZeRO (--dp zero1|zero2) ----
   The ranks that hold the same flat buffer share out its AdamW state (zero2: and its gradients'
   sum): all processes, or with tp/cp the dp x cp ranks of one tp index, whose buffer is that tp
   rank's part of the model (section 8). Rank g of that group owns [g S, (g+1) S) of the buffer,
   S = bt_shard_numel(its parameters, the group's size, 64); the buffer is padded to S x size. */
static bt_comm *zero_comm(const trainer *tr) { return tr->par ? par_dpcp_comm(tr->par) : tr->dist->world_comm; }
/* group rank g's range [*lo, *hi) of a buffer of n parameters in shards of S: clipped to n (the
   padding past the parameters holds no state; the last ranks' ranges may be empty) */
static void zero_shard_range(int g, int64_t S, int64_t n, int64_t *lo, int64_t *hi) {
    int64_t a = (int64_t)g * S, b = a + S;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}
/* the elements of the range [lo, hi) below W (a tp buffer's whole tensors, which come first):
   [lo, lo + k) is in the whole tensors, [lo + k, hi) in the split ones; returns k */
static int64_t zero_whole_part(int64_t lo, int64_t hi, int64_t W) {
    int64_t k = W - lo;
    return k < 0 ? 0 : k > hi - lo ? hi - lo : k;
}
/* this rank's reduced gradients of its range: zero2's fp32 sum, or zero1's part of flat_grad */
static bt_tensor *zero_grads(trainer *tr) {
    return tr->zero == 2 ? tr->grad_shard : bt_narrow(tr->model.flat_grad, 0, tr->shard_lo, tr->shard_hi - tr->shard_lo);
}
/* fp32 [2] on g's device: the sum of squares of g's first w elements, of the others */
static bt_tensor *zero_sumsq_parts(bt_tensor *g, int64_t w) {
    int64_t n = bt_numel(g);
    bt_tensor *sq = bt_zeros(bt_shape1(2), BT_F32, bt_device_of(g));
    if (w > 0) bt_add_(bt_narrow(sq, 0, 0, 1), bt_sumsq(bt_narrow(g, 0, 0, w)), 1.0);
    if (n > w) bt_add_(bt_narrow(sq, 0, 1, 1), bt_sumsq(bt_narrow(g, 0, w, n - w)), 1.0);
    return sq;
}
/* Each rank holds the reduced gradients of its range only, so the ranges' sums of squares are
   added over the group. With tp, norm^2 = the whole tensors' part (equal on every tp rank: counted
   once) + the split tensors' part of every tp rank: the two parts are summed over the group apart,
   then the split part over tp (a rank's tp peers have its group rank, so they own the same range
   of buffers laid out alike). */
static bt_tensor *zero_grad_norm(trainer *tr) {
    gpt2 *m = &tr->model;
    int64_t W = m->tp > 1 ? par_whole_numel(m) : m->flat_numel;   /* tp = 1: every tensor whole */
    bt_tensor *sq = zero_sumsq_parts(zero_grads(tr), zero_whole_part(tr->shard_lo, tr->shard_hi, W));
    bt_all_reduce(zero_comm(tr), bt_data_ptr(sq), bt_data_ptr(sq), 2, BT_F32, BT_RED_SUM, NULL);
    if (m->tp > 1) par_tp_sum(tr->par, bt_narrow(sq, 0, 1, 1));
    return bt_sqrt(bt_add(bt_narrow(sq, 0, 0, 1), bt_narrow(sq, 0, 1, 1)));
}
/* this rank's range of the buffer, AdamW's state for it alone, zero2's fp32 sum of its gradients */
static void zero_setup(trainer *tr) {
    zero_shard_range(zero_comm(tr)->rank, tr->shard, tr->opt.numel, &tr->shard_lo, &tr->shard_hi);   /* opt.numel: the parameters */
    bt_adamw_shard(&tr->opt, tr->shard_lo, tr->shard_hi);
    if (tr->zero == 2) {
        bt_scope_begin();
        tr->grad_shard = bt_keep(bt_zeros(bt_shape1(tr->shard_hi - tr->shard_lo), BT_F32, tr->model.device));
        bt_scope_end();
    }
}

/* The global L2 norm of the gradients (fp32 [1] on the device, no host sync) */
static bt_tensor *global_grad_norm(trainer *tr) {
    if (tr->zero) return zero_grad_norm(tr);
    if (tr->par) return par_grad_norm(tr);
    return bt_grad_norm(tr->model.params, tr->model.n_params);
}
/* zero2: the reduced gradients of this rank's shard, added (in fp32) to the shard's sum; the
   gradient buffer then holds the next micro-batch's */
static void zero2_accumulate(trainer *tr) {
    bt_scope_begin();
    bt_tensor *part = bt_narrow(tr->model.flat_grad, 0, tr->shard_lo, tr->shard_hi - tr->shard_lo);
    bt_add_(tr->grad_shard, bt_cast(part, BT_F32), 1.0);
    bt_scope_end();
    bt_zero_(tr->model.flat_grad);
}

/* GPT-2's tied embedding under data parallelism. wte's gradient is the output layer's (dense,
   final right after that layer's backward, the first of the pass) plus the lookup's rows (added by
   the last op of the pass). All-reduced as one table its bucket goes out last, with nothing left to
   hide it (0.55 ms of a 34 ms step on two H200s). Instead the dense part's bucket goes out as soon
   as the final layernorm's weight gradient is ready (that layernorm's backward follows the output
   layer's), and the rows travel by bt_ddp_add_rows: world x B x T rows of C instead of V x C.
   Taken when the gathered rows are smaller than the fp32 table (few tokens per rank), with plain
   data parallelism and an fp32 gradient buffer; BT_DDP_ROWS=0 or 1 in the environment overrides. */
static int param_index(const gpt2 *m, const bt_tensor *p) {
    for (int i = 0; i < m->n_params; i++) if (m->params[i] == p) return i;
    bt_error("param_index: not a parameter of the model");
    return -1;
}
static void wte_dense_ready(bt_tensor *leaf, void *user) {
    trainer *tr = (trainer *)user;
    (void)leaf;
    bt_ddp_param_ready(tr->ddp, param_index(&tr->model, tr->model.wte), NULL);
}
static int ddp_rows_exchange(trainer *tr) {
    const gpt2 *m = &tr->model;
    const char *env = getenv("BT_DDP_ROWS");
    if (tr->par || m->device.type != BT_GPU || m->flat_grad->dtype != BT_F32 || tr->dist->world < 2 || tr->o.B < 1) return 0;
    if (env && (!strcmp(env, "0") || !strcmp(env, "1"))) return env[0] == '1';
    double gathered = (double)tr->dist->world * tr->o.B * tr->o.T * bt_dtype_size(tr->dt);   /* per column */
    return gathered <= 4.0 * (double)m->wte->shape[0];
}

/* The gradient communication the backward pass did not hide: the compute stream's time from the
   end of the backward to the arrival of the last bucket (timed events around bt_ddp_wait; read
   after the step's host sync, so a step with several synced micro-batches reports its last), and
   the buckets that were already on their way when the backward ended. */
static void ddp_wait_timed(trainer *tr) {
    void *s = bt_stream_current(tr->model.device);
    tr->comm_early = bt_ddp_get_stats(tr->ddp).launched;
    if (tr->comm_ev[0]) bt_event_record(tr->comm_ev[0], s);
    bt_ddp_wait(tr->ddp, NULL);
    if (tr->comm_ev[1]) bt_event_record(tr->comm_ev[1], s);
}
static double comm_exposed_ms(trainer *tr) {
    return tr->comm_ev[0] ? bt_event_elapsed_ms(tr->comm_ev[0], tr->comm_ev[1]) : NAN;
}

/* One micro-batch: the forward pass, the backward of loss / accum (the gradients average over the
   micro-batches) and loss / accum added into loss_sum (f32 on the device) */
static void micro_step(trainer *tr, bt_tensor *idx, bt_tensor *tgt, int accum, bt_tensor *loss_sum) {
    if (tr->par) par_stage_mark(tr, 0);
    bt_tensor *loss = gpt2_loss(&tr->model, idx, tgt, tr->dt);
    if (tr->par) par_stage_mark(tr, 1);
    bt_backward(bt_scale(loss, 1.0 / accum));
    if (tr->par) par_stage_mark(tr, 2);
    int old = bt_set_grad_enabled(0);
    bt_add_(loss_sum, bt_cast(loss, BT_F32), 1.0 / accum);
    bt_set_grad_enabled(old);
}

/* does micro-batch a of accum communicate its gradients? ddp, zero1: the step's last; zero2:
   every one (its reduced shard is then added to the step's sum) */
static int dp_sync(const trainer *tr, int a, int accum) { return tr->zero == 2 || a == accum - 1; }

/* micro-batch a with its data-parallel part: the buckets' collectives during the backward (a
   synced one), the compute stream's wait for them, zero2's fold. graphed: run for (or inside) a
   CUDA graph, so no timing events: the eager path times the step's last backward and its wait. */
static void dp_micro_step(trainer *tr, bt_tensor *idx, bt_tensor *tgt, int a, int accum, bt_tensor *loss_sum, int graphed) {
    int sync = dp_sync(tr, a, accum);
    if (tr->ddp) bt_ddp_set_sync(tr->ddp, sync);
    micro_step(tr, idx, tgt, accum, loss_sum);
    if (!graphed && tr->work_ev[1] && a == accum - 1) bt_event_record(tr->work_ev[1], bt_stream_current(tr->model.device));
    if (tr->ddp && sync) {
        if (graphed) bt_ddp_wait(tr->ddp, NULL);
        else ddp_wait_timed(tr);
    }
    if (tr->zero == 2) zero2_accumulate(tr);
}

/* ---- the micro-step as a CUDA graph (--cuda-graph) ----
   Every micro-batch issues the same kernels on the same shapes, so after one eager micro-step
   (which tunes the matmuls and makes every lazily made buffer: none of that may happen in a
   capture) the next one is captured into a graph, in a private pool, and each later micro-step is
   one launch. What the graph cannot hold stays outside: the upload of the tokens (a step's at
   once, then one device copy per micro-batch into the graph's inputs), the refresh of the bf16
   weights after an update, the gradient norm, the loss read and AdamW. The kernels are the eager
   path's, so the losses and weights are the same bits with and without the graph.
   Data parallelism: the micro-step that communicates is a graph of its own, captured after one
   eager run of it (which sizes every buffer and connects NCCL) and holding the gradient buckets'
   collectives (bt_dist.h, CUDA GRAPHS: the comm stream forks from and joins the capture), so one
   replay does the backward, the overlapped reductions and the compute stream's wait for them; the
   optimizer step simply follows it. The loss and norm all-reduces and ZeRO's all-gather stay
   outside. The two graphs share one pool: they replay one after the other on one stream and free
   every temporary by their end. Every rank captures and replays the same sequence. */
static void step_graph_free(step_graph *g) {
    int captures = g->captures;
    for (int k = 0; k < 2; k++) bt_graph_free(g->graph[k]);
    bt_release(g->idx); bt_release(g->tgt); bt_release(g->in); bt_release(g->loss_sum);
    free(g->host);
    memset(g, 0, sizeof *g);
    g->captures = captures;
}
/* the graph's tensors for this step's shapes: a change of B, T, accumulation or dtype drops the
   graph, and the next micro-steps warm up and capture anew */
static step_graph *step_graph_for(trainer *tr, int accum) {
    step_graph *g = &tr->sg;
    int B = tr->o.B, T = tr->o.T;
    if (g->in && g->B == B && g->T == T && g->accum == accum && g->dt == tr->dt) return g;
    step_graph_free(g);
    g->B = B; g->T = T; g->accum = accum; g->dt = tr->dt;
    g->host = (int32_t *)malloc(sizeof(int32_t) * 2 * (size_t)accum * B * T);
    if (!g->host) bt_error("--cuda-graph: out of host memory for %d micro-batches of %d x %d tokens", accum, B, T);
    bt_scope_begin();
    g->in = bt_keep(bt_zeros(bt_shape3(2, B, T), BT_I32, tr->model.device));
    g->idx = bt_keep(bt_view(bt_narrow(g->in, 0, 0, 1), bt_shape2(B, T)));
    g->tgt = bt_keep(bt_view(bt_narrow(g->in, 0, 1, 1), bt_shape2(B, T)));
    g->loss_sum = bt_keep(bt_scalar(0, BT_F32, tr->model.device));
    bt_scope_end();
    return g;
}
/* the step's accum micro-batches onto the device in one upload: [accum, 2, B, T] (current scope) */
static bt_tensor *step_graph_tokens(trainer *tr, step_graph *g, int step) {
    size_t n = (size_t)g->B * g->T;
    for (int a = 0; a < g->accum; a++) {
        if (tr->o.overfit && step + a > 0) bt_loader_reset(tr->train);
        load_batch(tr, tr->train);
        memcpy(g->host + (2 * (size_t)a) * n, tr->inputs, n * sizeof(int32_t));
        memcpy(g->host + (2 * (size_t)a + 1) * n, tr->targets, n * sizeof(int32_t));
    }
    return bt_from_data(g->host, bt_shape4(g->accum, 2, g->B, g->T), BT_I32, tr->model.device);
}
/* micro-batch a (of kind k) captured into g->graph[k], in the pool of the step's graphs */
static void step_graph_capture(trainer *tr, step_graph *g, int k, int a) {
    gpt2 *m = &tr->model;
    bt_alloc_empty_cache(m->device);   /* the warm-up's cached blocks go back: the graph's pool takes their place */
    bt_graph *cg = bt_graph_capture_begin(m->device);
    if (g->pool) { bt_alloc_pool_pop(m->device); bt_alloc_pool_push(m->device, g->pool); }   /* the end pops it */
    else g->pool = bt_graph_pool(cg);
    bt_scope_begin();
    dp_micro_step(tr, g->idx, g->tgt, a, g->accum, g->loss_sum, 1);
    bt_scope_end();
    bt_graph_capture_end(cg);
    g->graph[k] = cg;
    g->captures++;
}
/* micro-batch a of the step's tokens through its kind's graph (warm-up and capture on first use) */
static void graph_micro_step(trainer *tr, step_graph *g, bt_tensor *tokens, int a) {
    gpt2 *m = &tr->model;
    int k = tr->ddp && dp_sync(tr, a, g->accum);
    bt_copy_(g->in, bt_view(bt_narrow(tokens, 0, a, 1), bt_shape3(2, g->B, g->T)));
    gpt2_lowp_refresh(m, tr->dt);   /* the bf16 weights after the last update: a copy outside the graph */
    if (!g->graph[k] && !g->warmed[k]) { dp_micro_step(tr, g->idx, g->tgt, a, g->accum, g->loss_sum, 1); g->warmed[k] = 1; return; }
    if (!g->graph[k]) step_graph_capture(tr, g, k, a);
    bt_graph_launch(g->graph[k]);
    /* its collectives were not timed in the capture: the watchdog times the replay */
    if (k) bt_dist_watch(tr->dist->world_comm, "ddp micro-step graph", NULL);
}

/* One optimizer step over total_batch tokens (this rank's share of it with several processes).
   The mean loss and the global gradient norm are read (one host sync) before the update, which is
   made only when both are finite: returns 1 when it was made (*grad_norm is the pre-clipping norm),
   0 when it was not (the weights are unchanged). With data parallelism every rank sees the same
   reduced loss and norm, so every rank decides alike. */
static int train_step(trainer *tr, int step, double lr, double *loss, double *grad_norm) {
    double t0 = now_s();
    int accum = tr->o.total_batch / (tr->o.B * tr->o.T * par_data_world(tr));
    bt_zero_(tr->model.flat_grad);
    if (tr->grad_shard) bt_zero_(tr->grad_shard);
    bt_scope_begin();
    step_graph *g = tr->o.cuda_graph == 1 ? step_graph_for(tr, accum) : NULL;
    bt_tensor *loss_sum = g ? g->loss_sum : bt_scalar(0, BT_F32, tr->model.device), *tokens = NULL;
    if (g) { bt_zero_(loss_sum); tokens = step_graph_tokens(tr, g, step); }
    tr->comm_early = -1;   /* no timed wait (yet) in this step */
    if (tr->work_ev[0]) bt_event_record(tr->work_ev[0], bt_stream_current(tr->model.device));
    for (int a = 0; a < accum; a++) {
        bt_scope_begin();
        if (g) {
            graph_micro_step(tr, g, tokens, a);
            if (tr->work_ev[1] && a == accum - 1) bt_event_record(tr->work_ev[1], bt_stream_current(tr->model.device));
        } else {
            bt_tensor *idx, *tgt;
            if (tr->o.overfit && step + a > 0) bt_loader_reset(tr->train);
            next_batch(tr, tr->train, tr->o.B, &idx, &tgt);
            dp_micro_step(tr, idx, tgt, a, accum, loss_sum, 0);
        }
        bt_scope_end();
    }
    if (tr->par) { par_reduce_grads(tr); par_mean(tr, loss_sum); }
    else if (tr->dist) bt_all_reduce(tr->dist->world_comm, bt_data_ptr(loss_sum), bt_data_ptr(loss_sum), 1, BT_F32, BT_RED_AVG, NULL);
    bt_tensor *norm = global_grad_norm(tr);
    tr->host_ms = (now_s() - t0) * 1e3;
    *loss = bt_item(loss_sum);
    *grad_norm = bt_item(norm);
    int finite = isfinite(*loss) && isfinite(*grad_norm);
    if (finite) {
        if (tr->fence_pending) ckpt_fence(tr);   /* a checkpoint's copies of the weights and state finish first */
        bt_adamw_set_grad_norm(&tr->opt, norm);
        bt_adamw_update(&tr->opt, (float)lr, tr->grad_shard);
        if (tr->zero)      /* every rank's updated shard to every rank of its group, in place */
            bt_all_gather(zero_comm(tr), (float *)bt_data_ptr(tr->model.flat) + zero_comm(tr)->rank * tr->shard,
                          bt_data_ptr(tr->model.flat), tr->shard, BT_F32, NULL);
    }
    bt_scope_end();
    return finite;
}

/* A step whose loss or gradient norm is not finite made no update (train_step). This is the one
   place that decides what follows: the run stops, naming the step, and saves nothing; with
   --skip-nonfinite it warns and goes on with the next batch (that update skipped). 1: stop. */
static int on_nonfinite_step(trainer *tr, int step, double loss) {
    const char *what = isfinite(loss) ? "the gradients are" : "the loss is";
    if (tr->o.skip_nonfinite) {
        tr->skipped++;
        fprintf(stderr, "warning: step %d: %s not finite: its update is skipped (--skip-nonfinite), the run goes on\n", step, what);
        return 0;
    }
    fprintf(stderr, "error: step %d: %s not finite: training diverged; stopped before that update, and no model is saved "
            "(try a lower -l, a longer warmup -u, or --clip; --skip-nonfinite skips such updates)\n", step, what);
    return 1;
}

/* a JSON number (fmt), or null for a non-finite one: JSON has no nan or inf */
static const char *json_num(char *buf, size_t n, const char *fmt, double x) {
    if (!isfinite(x)) return "null";
    snprintf(buf, n, fmt, x);
    return buf;
}

/* Close the log. failed_errno != 0: a write failed. A log that cannot be written is a warning,
   once: it stops, the run goes on (the model matters more than its log). */
static void log_close(trainer *tr, int failed_errno, const char *then) {
    if (!tr->log) return;
    int e = failed_errno;
    if (fclose(tr->log) != 0 && !e) e = errno;
    tr->log = NULL;
    if (e) fprintf(stderr, "warning: -o %s: cannot write %s/log.jsonl (%s): %s\n", tr->o.out_dir, tr->o.out_dir, strerror(e), then);
}

/* one JSON object per step; val is NULL on steps without validation; extra: more members
   (", \"key\": value ...") or "" */
static void log_json(trainer *tr, int step, double loss, double lr, double norm, double ms, double tps, const double *val, const char *extra) {
    if (!tr->log) return;
    char a[32], b[32], c[32];
    bt_alloc_stats_t st = bt_alloc_stats(tr->model.device);
    errno = 0;
    int bad = fprintf(tr->log, "{\"step\": %d, \"train_loss\": %s, \"lr\": %.6e, \"grad_norm\": %s, \"ms\": %.3f, \"host_ms\": %.3f, "
                      "\"tok_per_s\": %.1f, \"mem_mib\": %.1f, \"peak_allocated_mib\": %.1f, \"peak_reserved_mib\": %.1f",
                      step, json_num(a, sizeof a, "%.6f", loss), lr, json_num(b, sizeof b, "%.6f", norm), ms, tr->host_ms, tps,
                      st.allocated / 1048576.0, st.peak_allocated / 1048576.0, st.peak_reserved / 1048576.0) < 0;
    if (val) bad |= fprintf(tr->log, ", \"val_loss\": %s", json_num(c, sizeof c, "%.6f", *val)) < 0;
    bad |= fprintf(tr->log, "%s}\n", extra) < 0;
    bad |= fflush(tr->log) != 0;
    if (bad) log_close(tr, errno ? errno : EIO, "the log stops here, the run goes on");
}

/* The tokenizer for samples. One given with --tokenizer must load; the default one may be
   absent (samples then print as token ids). */
static int load_tokenizer(trainer *tr, char *err, size_t errlen) {
    char enc[4096], bpe[4096];
    snprintf(enc, sizeof enc, "%s/encoder.json", tr->o.tok_dir); snprintf(bpe, sizeof bpe, "%s/vocab.bpe", tr->o.tok_dir);
    tr->tok = bt_tokenizer_load(enc, bpe);
    if (tr->tok) return 0;
    if (tr->o.given_tok) { err_join(err, errlen, "--tokenizer: ", bt_data_error()); return -1; }
    fprintf(stderr, "note: no tokenizer (%s); samples print as token ids\n", bt_data_error());
    return 0;
}

/* Every output of the run, checked before anything is built or trained: a bad --save or -o
   path must not cost a run. -o DIR is made here when missing. */
static int check_outputs(const train_opts *o, char *err, size_t errlen) {
    if (o->save_path && bt_output_check(o->save_path)) { err_join(err, errlen, "--save: ", bt_data_error()); return -1; }
    if (o->out_dir) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/log.jsonl", o->out_dir) >= (int)sizeof path) { snprintf(err, errlen, "-o: the directory name is too long"); return -1; }
        if (bt_output_dir(o->out_dir) || bt_output_check(path)) { err_join(err, errlen, "-o: ", bt_data_error()); return -1; }
    }
    if (o->ckpt_dir) {   /* made here; a checkpoint's name in it must be writable */
        char path[4096];
        if (bt_ckpt_path(o->ckpt_dir, 0, path, sizeof path)) { snprintf(err, errlen, "--ckpt-dir: the directory name is too long"); return -1; }
        if (bt_output_dir(o->ckpt_dir) || bt_output_check(path)) { err_join(err, errlen, "--ckpt-dir: ", bt_data_error()); return -1; }
    }
    if (o->export_hf) {
        static const char *const files[2] = {"model.safetensors", "config.json"};
        for (int i = 0; i < 2; i++) {
            char path[4096];
            if (snprintf(path, sizeof path, "%s/%s", o->export_hf, files[i]) >= (int)sizeof path) { snprintf(err, errlen, "--export-hf: the directory name is too long"); return -1; }
            if (bt_output_dir(o->export_hf) || bt_output_check(path)) { err_join(err, errlen, "--export-hf: ", bt_data_error()); return -1; }
        }
    }
    return 0;
}

/* -o DIR: DIR/log.jsonl, created or truncated now (after check_outputs); a resumed run appends */
static int open_log(trainer *tr, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/log.jsonl", tr->o.out_dir);
    int fd = bt_output_open(path, tr->src.resume);
    if (fd < 0 || !(tr->log = fdopen(fd, "w"))) {
        err_join(err, errlen, "-o: ", fd < 0 ? bt_data_error() : strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return 0;
}

/* frees what the trainer holds (any part may be missing: every exit path comes here); rc passes
   through. With several processes a failed rank aborts the job (the others are waiting in a
   collective for it), a finished one leaves cleanly (a collective: every rank gets here). */
static void ckpt_end(trainer *tr);   /* section 7 */
static int trainer_end(trainer *tr, int rc) {
    ckpt_end(tr);                    /* first: a save in flight still reads the weights */
    log_close(tr, 0, "the log is incomplete");
#ifdef BT_MLIR
    if (gpt2_use_mlir && !rc && (!tr->dist || tr->dist->rank == 0)) {
        bt_mlir_stats_t st = bt_mlir_stats();
        printf("mlir: %llu fused calls, %llu fused backwards, %llu fallbacks; %llu compiles (%.0f ms), %llu disk hits (cache %s)\n",
               (unsigned long long)st.fused_calls, (unsigned long long)st.fused_backwards, (unsigned long long)st.fallbacks,
               (unsigned long long)st.compiles, st.compile_ms, (unsigned long long)st.disk_hits, *bt_mlir_cache_dir() ? bt_mlir_cache_dir() : "off");
    }
    bt_mlir_shutdown();
#endif
    step_graph_free(&tr->sg);
    if (tr->ddp) bt_ddp_free(tr->ddp);
    for (int i = 0; i < 2; i++) if (tr->comm_ev[i]) bt_event_destroy(tr->comm_ev[i]);
    for (int i = 0; i < 2; i++) if (tr->work_ev[i]) bt_event_destroy(tr->work_ev[i]);
    bt_release(tr->grad_shard);
    par_free(tr->par);               /* before the communicators go */
    tr->model.par = NULL;
    if (tr->dist) {
        if (rc) bt_dist_abort(tr->dist, "stopped with an error (above)");
        bt_dist_shutdown(tr->dist);
    }
    bt_adamw_free(&tr->opt);
    gpt2_free(&tr->model);
    bt_loader_close(tr->train); bt_loader_close(tr->val);
    bt_tokenizer_free(tr->tok);
    free(tr->inputs); free(tr->targets);
    memset(tr, 0, sizeof *tr);
    return rc;
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

/* Memory of a micro-step at B: activations grow linearly in B, so two probes (B = 1, b2) give the
   fixed part and the part per sequence (with the recomputation set now). The budget keeps 10% of
   the device free for fragmentation and the libraries' own buffers. A larger b2 measures the part
   per sequence closer to a large B's (d12 at T=1024: 372 MiB from B = 1, 2, ~300 MiB seen at B = 64..192). */
typedef struct { size_t fixed, per; double budget; } mem_model;
static mem_model probe_memory(gpt2 *m, int T, bt_dtype dt, int b2) {
    mem_model mm = {0, 1, 0};
#ifdef BT_CUDA
    size_t p1 = probe_peak(m, 1, T, dt), p2 = probe_peak(m, b2, T, dt), free_b = 0, total_b = 0;
    mm.per = p2 > p1 ? (p2 - p1) / (size_t)(b2 - 1) : 1; mm.fixed = p1 > mm.per ? p1 - mm.per : 0;
    bt_device_memory(m->device, &free_b, &total_b);
    mm.budget = 0.9 * (double)(free_b + bt_alloc_stats(m->device).reserved);
#else
    (void)m; (void)T; (void)dt; (void)b2;
#endif
    return mm;
}
static int mem_fits(mem_model mm, int B) { return mm.fixed + (double)mm.per * B <= mm.budget; }

/* --recompute by default: none (the fastest) when micro-batch B fits without it, else gelu */
static int choose_recompute(gpt2 *m, int B, int T, bt_dtype dt) {
    int b2 = B >= 8 ? 8 : 2;
    mem_model none = probe_memory(m, T, dt, b2);
    if (mem_fits(none, B)) { printf("recompute: none (B %d fits: %.0f of %.0f MiB)\n", B, (none.fixed + (double)none.per * B) / 1048576.0, none.budget / 1048576.0); return 0; }
    int old = bt_set_recompute(BT_RECOMPUTE_GELU);
    mem_model gelu = probe_memory(m, T, dt, b2);
    bt_set_recompute(old);
    printf("recompute: gelu (B %d needs %.0f MiB without, %.0f with; %.0f usable)\n", B, (none.fixed + (double)none.per * B) / 1048576.0,
           (gelu.fixed + (double)gelu.per * B) / 1048576.0, gelu.budget / 1048576.0);
    return BT_RECOMPUTE_GELU;
}

/* The largest power-of-two micro-batch that fits (probe_memory). */
static int auto_micro_batch(gpt2 *m, int T, int total_batch, bt_dtype dt) {
    int best = 1;
#ifdef BT_CUDA
    mem_model mm = probe_memory(m, T, dt, 2);
    size_t per = mm.per, fixed = mm.fixed;
    double budget = mm.budget;
    while ((int64_t)best * 2 * T <= total_batch && total_batch % ((int64_t)best * 2 * T) == 0 && fixed + (double)per * best * 2 <= budget) best *= 2;
    printf("auto micro-batch: %.0f MiB per sequence of %d tokens, %.0f MiB fixed, %.0f MiB usable -> B = %d\n",
           per / 1048576.0, T, fixed / 1048576.0, budget / 1048576.0, best);
#else
    (void)m; (void)T; (void)total_batch; (void)dt;
#endif
    return best;
}

/* The data-parallel parts: every rank starts from rank 0's weights, holds (ZeRO) its shard of
   the AdamW state and, for zero2, of the summed gradients, and communicates its gradients through
   the bucket engine, whose hooks fire as the backward pass finishes each parameter. */
static void setup_data_parallel(trainer *tr) {
    gpt2 *m = &tr->model;
    bt_comm *c = tr->par ? par_dpcp_comm(tr->par) : tr->dist->world_comm;   /* tp/cp: the ranks holding the same shard */
    bt_broadcast(c, bt_data_ptr(m->flat), bt_data_ptr(m->flat), m->flat_numel, BT_F32, 0, NULL);
    m->flat->storage->version++;
    if (tr->zero) zero_setup(tr);
    bt_param_span *spans = (bt_param_span *)malloc(sizeof(bt_param_span) * (size_t)m->n_params);
    if (!spans || bt_ddp_spans_from_grads(m->params, m->n_params, m->flat_grad, spans)) bt_error("data parallel: %s", bt_dist_error());
    bt_ddp_opts d;
    memset(&d, 0, sizeof d);
    d.bucket_cap_bytes = (size_t)tr->o.bucket_mb << 20;
    d.comm_dtype = !strcmp(tr->o.comm_dtype, "bf16") ? BT_BF16 : m->flat_grad->dtype;
    d.shard_numel = tr->zero ? tr->shard : 0;
    d.trace = getenv("BT_DDP_TRACE") && atoi(getenv("BT_DDP_TRACE")) > 0;   /* per-bucket timeline of the last step */
    /* NCCL's host cost per bucket moves off the thread that launches the backward's kernels; not
       with tp/cp, whose collectives during the backward must keep one order on every rank
       (BT_DDP_THREAD=0: in the calling thread, for comparison) */
    d.launch_thread = !tr->par && !(getenv("BT_DDP_THREAD") && !strcmp(getenv("BT_DDP_THREAD"), "0"));
    d.defer = getenv("BT_DDP_DEFER") && atoi(getenv("BT_DDP_DEFER")) > 0;   /* no overlap, for measurements */
    /* ranks on one host reduce their buckets through the copy engines, not NCCL's kernels (bt_dist.h,
       COPY ENGINES); BT_DDP_CE=0: NCCL */
    d.copy_engines = !(getenv("BT_DDP_CE") && !strcmp(getenv("BT_DDP_CE"), "0"));
    int rows = !d.defer && ddp_rows_exchange(tr);   /* the rows follow wte's bucket, which a deferred pass has not sent */
    if (rows) d.launch_as_ready = 1;   /* wte's bucket fills first and must not wait for the plan's order */
    tr->ddp = bt_ddp_create(c, bt_data_ptr(m->flat_grad), m->flat_grad->dtype, m->flat_numel, spans, m->n_params, &d);
    for (int i = 0; i < m->n_params; i++)
        if (!(rows && m->params[i] == m->wte)) bt_register_grad_hook(m->params[i], bt_ddp_grad_hook, bt_ddp_hook_arg(tr->ddp, i));
    if (rows) {
        bt_register_grad_hook(m->lnfw, wte_dense_ready, tr);
        bt_set_rows_hook(m->wte, bt_ddp_rows_hook, bt_ddp_hook_arg(tr->ddp, param_index(m, m->wte)));
    }
    free(spans);
    if (m->device.type == BT_GPU)
        for (int i = 0; i < 2; i++) tr->comm_ev[i] = bt_event_create_timed(m->device);
}

/* ============================================================================================
   7. checkpoints: save, resume, signals, Hugging Face files
   ============================================================================================ */
/* A checkpoint (bt_ckpt.h) is one safetensors file, DIR/ckpt_STEP.safetensors, holding
       params    [num_params] f32   the weights in the flat buffer's order (section 2: wte, wpe,
                                    layer 0 .. L-1 with its 12 tensors each, lnfw, lnfb)
       adamw.m   [num_params] f32   AdamW's moments over the same elements
       adamw.v   [num_params] f32
   and in its metadata the run: what a resume must share with it (ckpt_fields: the model, the
   batch, the schedule, the seed, the precision, the data parallelism), the steps done
   (train.step, which is also the learning-rate schedule's position, and adamw.step), every
   rank's data-loader position (loader.RANK), every rank's matmul autotuner choices
   (train.matmul_tuning.RANK) and the device; bt_ckpt.h adds a CRC32C of every tensor and one
   of the header. Only rank 0 writes. With ZeRO each rank holds a shard of m and v: at a
   checkpoint the shards are all-gathered into temporaries, so the file is the same whatever the
   data-parallel mode, and a resume reads its own shard out of it. With --tp the weights, m and v
   are gathered over the tp group into the 1-GPU layout the same way (section 8), and the loader
   positions are the data-parallel ranks' (a tp or cp group reads one dp index's rows): a
   checkpoint of --tp 2 or --cp 2 is the file one process writes, and resumes in any layout.
   A snapshot costs the loop only the enqueueing of device-to-host copies into pinned memory (on
   a copy stream); the next optimizer update waits for them on the device (ckpt_fence), and a
   thread checksums and writes the file while training goes on (at most one save in flight). */

/* ---- signals ---- */
static volatile sig_atomic_t stop_signal;   /* the first SIGINT/SIGTERM: stop after this step */
static pid_t signal_launcher;               /* a rank's launcher (its parent process), or 0 */

/* The first SIGINT/SIGTERM asks the loop to finish its step, checkpoint and exit 0; a second one
   ends the process at once, after removing the temporaries of files being written (the previous
   checkpoint stays whole). A launcher (--nproc, torchrun) passes on the Ctrl-C that its ranks
   got from the terminal too: a copy from it does not count as the second. */
static void on_stop_signal(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (!stop_signal) { stop_signal = sig; return; }
    if (signal_launcher > 0 && info && info->si_code == SI_USER && info->si_pid == signal_launcher) return;
    bt_atomic_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);                        /* delivered when the handler returns: the default, the end */
}
/* main's: a signal that was ignored when the process started (nohup, `&` in a script) stays
   ignored (inline: the tests that include this file need not use it) */
static inline void install_stop_signals(void) {
    static const int sigs[2] = {SIGINT, SIGTERM};
    for (int k = 0; k < 2; k++) {
        struct sigaction sa, old;
        if (sigaction(sigs[k], NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_stop_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGINT); sigaddset(&sa.sa_mask, SIGTERM);
        sigaction(sigs[k], &sa, NULL);
    }
}
/* Stop now? A collective with several processes (a MAX over the ranks' flags once per step):
   ranks that got the signal at different steps stop after the same one, and none waits alone. */
static int stop_agreed(trainer *tr) {
    int mine = stop_signal != 0;
    if (!tr->dist) return mine;
    bt_scope_begin();
    bt_tensor *f = bt_full(bt_shape1(1), mine, BT_I32, tr->model.device);
    bt_all_reduce(tr->dist->world_comm, bt_data_ptr(f), bt_data_ptr(f), 1, BT_I32, BT_RED_MAX, NULL);
    int any = bt_item(f) != 0;
    bt_scope_end();
    return any;
}

/* ---- what a checkpoint records of the run ---- */
/* What a resumed run must share with the run it resumes (all that changes its losses), as text:
   doubles as %.17g, so equal values give equal text. One table for writing and for checking.
   world is the data-parallel one: --tp and --cp change no loss (beyond rounding), so a
   checkpoint moves between them freely. */
#define CKPT_MAX_FIELDS 24
typedef struct { const char *key, *flag; char val[48]; } ckpt_field;
static int ckpt_fields(const train_opts *o, const gpt2_config *c, int world, ckpt_field *f) {
    int n = 0;
#define FIELD(k, fl, fmt, v) (f[n].key = (k), f[n].flag = (fl), snprintf(f[n].val, sizeof f[n].val, fmt, v), n++)
    FIELD("gpt2.maxT", "-e", "%d", c->maxT); FIELD("gpt2.V", "-e", "%d", c->V); FIELD("gpt2.Vp", "-e", "%d", c->Vp);
    FIELD("gpt2.L", "-e", "%d", c->L); FIELD("gpt2.H", "-e", "%d", c->H); FIELD("gpt2.C", "-e", "%d", c->C);
    FIELD("train.B", "-b", "%d", o->B); FIELD("train.T", "-t", "%d", o->T);
    FIELD("train.total_batch", "-d", "%d", o->total_batch); FIELD("train.steps", "-x", "%d", o->steps);
    FIELD("train.lr", "-l", "%.17g", o->lr); FIELD("train.warmup", "-u", "%d", o->warmup);
    FIELD("train.final_lr_frac", "-q", "%.17g", o->final_lr_frac); FIELD("train.weight_decay", "-c", "%.17g", o->weight_decay);
    FIELD("train.clip", "--clip", "%.17g", o->clip); FIELD("train.seed", "--seed", "%llu", (unsigned long long)o->seed);
    FIELD("train.overfit", "--overfit", "%d", o->overfit); FIELD("train.precision", "--precision", "%s", o->precision);
    FIELD("train.world", "the number of data-parallel processes: processes / (--tp x --cp)", "%d", world);
    FIELD("train.dp", "--dp", "%s", world > 1 ? o->dp : "none");
    FIELD("train.comm_dtype", "--comm-dtype", "%s", world > 1 ? o->comm_dtype : "none");
    FIELD("train.bucket_mb", "--bucket-mb", "%d", world > 1 ? o->bucket_mb : 0);
#undef FIELD
    return n;
}
/* the model's config out of a checkpoint's metadata, checked as a model file's header is */
static int ckpt_config(const bt_ckpt_meta *meta, const char *path, gpt2_config *c, char *err, size_t errlen) {
    static const char *const keys[6] = {"gpt2.maxT", "gpt2.V", "gpt2.Vp", "gpt2.L", "gpt2.H", "gpt2.C"};
    int *dst[6] = {&c->maxT, &c->V, &c->Vp, &c->L, &c->H, &c->C};
    for (int i = 0; i < 6; i++) {
        int64_t v;
        if (bt_ckpt_meta_get_i64(meta, keys[i], &v) || v < INT32_MIN || v > INT32_MAX) {
            snprintf(err, errlen, "%.500s: metadata \"%s\": %.400s", path, keys[i], bt_ckpt_error()); return -1;
        }
        *dst[i] = (int)v;
    }
    return gpt2_config_check(c, path, "gpt2.", err, errlen);
}

/* --resume: the run's options against the checkpoint's, naming the first that differs */
static int ckpt_check_fields(const model_source *src, const train_opts *o, const gpt2_config *c, int world, char *err, size_t errlen) {
    ckpt_field f[CKPT_MAX_FIELDS];
    int n = ckpt_fields(o, c, world, f);
    for (int i = 0; i < n; i++) {
        const char *v = bt_ckpt_meta_get(bt_ckpt_file_meta(src->file), f[i].key);
        if (!v) { snprintf(err, errlen, "--resume %.500s: no \"%s\" in its metadata: not a train_gpt2 checkpoint", src->path, f[i].key); return -1; }
        if (strcmp(v, f[i].val) && !strncmp(f[i].key, "gpt2.", 5)) {
            gpt2_config h;
            if (ckpt_config(bt_ckpt_file_meta(src->file), src->path, &h, err, errlen)) return -1;
            snprintf(err, errlen, "--resume %.500s: the checkpoint holds a model of L %d H %d C %d maxT %d V %d, -e %s is L %d H %d "
                     "C %d maxT %d V %d", src->path, h.L, h.H, h.C, h.maxT, h.V, o->model ? o->model : "?", c->L, c->H, c->C, c->maxT, c->V);
            return -1;
        }
        if (strcmp(v, f[i].val)) {
            snprintf(err, errlen, "--resume %.500s: the checkpoint's run had %s = %s (%s), this one %s: give the options of the run "
                     "it continues (or start a new run from its weights with --init-from)", src->path, f[i].key, v, f[i].flag, f[i].val);
            return -1;
        }
    }
    return 0;
}
/* Every rank's matmul choices (bt_k_matmul_tuning_export) into rank 0's meta: a resumed rank
   imports its own, so each picks the algorithms it picked before. A collective. */
static int ckpt_meta_tuning(trainer *tr, bt_ckpt_meta *meta) {
    int bad = 0;
#ifdef BT_CUDA
    bt_device dev = tr->model.device;
    if (dev.type != BT_GPU) return 0;
    int world = tr->dist ? tr->dist->world : 1;
    uint64_t n = bt_k_matmul_tuning_export(dev.index, NULL, 0), max = 0;
    uint64_t *sizes = (uint64_t *)calloc((size_t)world, sizeof *sizes);
    if (!sizes) bt_error("checkpoint: out of host memory");
    sizes[0] = n;
    if (tr->dist && bt_store_allgather(bt_dist_store(tr->dist), &n, sizes, sizeof n)) bt_error("checkpoint: %s", bt_dist_error());
    for (int r = 0; r < world; r++) max = sizes[r] > max ? sizes[r] : max;
    unsigned char *mine = (unsigned char *)calloc(max ? max : 1, 1), *all = (unsigned char *)calloc(max ? (size_t)max * world : 1, 1);
    if (!mine || !all) bt_error("checkpoint: out of host memory");
    bt_k_matmul_tuning_export(dev.index, mine, max);
    memcpy(all, mine, n);
    if (tr->dist && bt_store_allgather(bt_dist_store(tr->dist), mine, all, max)) bt_error("checkpoint: %s", bt_dist_error());
    for (int r = 0; meta && r < world; r++) {
        char key[48];
        snprintf(key, sizeof key, "train.matmul_tuning.%d", r);
        bad |= bt_ckpt_meta_set_blob(meta, key, all + (size_t)r * max, sizes[r]);
    }
    free(sizes); free(mine); free(all);
#else
    (void)tr; (void)meta;
#endif
    return bad;
}
/* --resume: this rank's matmul choices back, before the first matmul plans them anew; only on
   the GPU model that made them */
static void ckpt_import_tuning(trainer *tr) {
#ifdef BT_CUDA
    const bt_ckpt_meta *meta = bt_ckpt_file_meta(tr->src.file);
    bt_device dev = tr->model.device;
    char key[48];
    snprintf(key, sizeof key, "train.matmul_tuning.%d", tr->dist ? tr->dist->rank : 0);
    if (dev.type != BT_GPU || !bt_ckpt_meta_get(meta, key)) return;
    const char *made_on = bt_ckpt_meta_get(meta, "train.device");
    int64_t tp = 1, cp = 1;   /* absent: a checkpoint of one layout */
    bt_ckpt_meta_get_i64(meta, "train.tp", &tp); bt_ckpt_meta_get_i64(meta, "train.cp", &cp);
    if (tp != tr->o.tp || cp != tr->o.cp) return;   /* other shapes per rank: the choices do not apply */
    if (!made_on || strcmp(made_on, bt_device_name(dev))) {
        printf("note: the checkpoint was made on %s, this is %s: the matmuls choose their algorithms afresh, and the "
               "losses may differ from the first run's in the last bits\n", made_on ? made_on : "?", bt_device_name(dev));
        return;
    }
    void *blob = NULL;
    size_t n = 0;
    if (bt_ckpt_meta_get_blob(meta, key, &blob, &n)) { fprintf(stderr, "warning: --resume: %s\n", bt_ckpt_error()); return; }
    bt_k_matmul_tuning_import(dev.index, blob, n);
    free(blob);
#else
    (void)tr;
#endif
}

/* The checkpoint's metadata (rank 0's; NULL on the others): a collective, as every rank's loader
   state and matmul choices are gathered through the store. The loader positions are the data-
   parallel ranks' (with tp/cp one per dp index: its ranks read the same rows), and the fields
   name the data-parallel world, so a tp or cp run's checkpoint is the one a run of as many
   processes / (tp x cp) would write. */
static bt_ckpt_meta *ckpt_meta(trainer *tr, int step, double loss) {
    int world = tr->dist ? tr->dist->world : 1, rank = tr->dist ? tr->dist->rank : 0, bad = 0, dworld = par_data_world(tr);
    bt_loader_state mine, *all = (bt_loader_state *)calloc((size_t)world, sizeof *all);
    if (!all) bt_error("checkpoint: out of host memory");
    memset(&mine, 0, sizeof mine);
    bt_loader_get_state(tr->train, &mine);
    all[0] = mine;
    if (tr->dist && bt_store_allgather(bt_dist_store(tr->dist), &mine, all, sizeof mine)) bt_error("checkpoint: %s", bt_dist_error());
    bt_ckpt_meta *meta = rank == 0 ? bt_ckpt_meta_new() : NULL;
    bad |= ckpt_meta_tuning(tr, meta);
    if (meta) {
        ckpt_field f[CKPT_MAX_FIELDS];
        int n = ckpt_fields(&tr->o, &tr->model.cfg, dworld, f);
        const train_opts *o = &tr->o;
        for (int i = 0; i < n; i++) bad |= bt_ckpt_meta_set(meta, f[i].key, f[i].val);
        bad |= bt_ckpt_meta_set(meta, "train_gpt2.checkpoint", "1");
        bad |= bt_ckpt_meta_set_i64(meta, "train.step", step);
        bad |= bt_ckpt_meta_set_i64(meta, "adamw.step", tr->opt.step);
        bad |= bt_ckpt_meta_set_f64(meta, "train.loss", loss);
        bad |= bt_ckpt_meta_set_f64(meta, "train.lr_next", bt_lr_cosine(step, o->warmup, o->steps, o->lr, o->lr * o->final_lr_frac));
        bad |= bt_ckpt_meta_set(meta, "train.device", bt_device_of(tr->model.flat).type == BT_GPU ? bt_device_name(tr->model.device) : "cpu");
        bad |= bt_ckpt_meta_set_i64(meta, "train.deterministic", o->deterministic);
        bad |= bt_ckpt_meta_set_i64(meta, "train.tp", o->tp);   /* the layout it was made in: not a resume's constraint */
        bad |= bt_ckpt_meta_set_i64(meta, "train.cp", o->cp);
        for (int d = 0; d < dworld; d++) bad |= bt_ckpt_meta_set_loader(meta, d, &all[tr->par ? par_first_rank_of_data(tr->par, d) : d]);
        if (bad) bt_error("checkpoint: the metadata: %s", bt_ckpt_error());
    }
    free(all);
    return meta;
}

/* ---- saving ---- */
/* ZeRO: x (this rank's range of AdamW's m or v) all-gathered over the ZeRO group into a new
   buffer laid out as the flat buffer ([flat_numel], the padding 0), owned by the caller */
static bt_tensor *zero_gather(trainer *tr, bt_tensor *x) {
    bt_comm *c = zero_comm(tr);
    int64_t S = tr->shard, n = tr->shard_hi - tr->shard_lo;
    bt_scope_begin();
    bt_tensor *all = bt_keep(bt_zeros(bt_shape1(S * c->size), BT_F32, tr->model.device));
    if (n > 0) bt_copy_(bt_narrow(all, 0, c->rank * S, n), x);
    bt_all_gather(c, (float *)bt_data_ptr(all) + c->rank * S, bt_data_ptr(all), S, BT_F32, NULL);
    bt_scope_end();
    return all;
}
/* AdamW's m and v over all num_params elements in the 1-GPU layout: the optimizer's own, or
   gathered (collectives) into temporaries that live until the fence: with ZeRO every rank's range
   over the ZeRO group, then with tp the tp ranks' buffers into the 1-GPU layout (on rank 0; NULL
   on the others) */
static void ckpt_gather_adamw(trainer *tr, bt_tensor **m, bt_tensor **v) {
    if (!tr->zero && tr->model.tp <= 1) { *m = tr->opt.m; *v = tr->opt.v; return; }
    bt_tensor *state[2] = {tr->opt.m, tr->opt.v}, **out[2] = {m, v};
    for (int k = 0; k < 2; k++) {
        bt_tensor *x = tr->zero ? (tr->gathered[3 + k] = zero_gather(tr, state[k])) : state[k];
        *out[k] = tr->model.tp > 1 ? (tr->gathered[k] = par_gather_whole(tr, x)) : bt_narrow(x, 0, 0, tr->model.num_params);
    }
}
static void ckpt_release_gathered(trainer *tr) {
    for (int k = 0; k < 5; k++) { bt_release(tr->gathered[k]); tr->gathered[k] = NULL; }
}
/* before the next optimizer update: the device waits there for the snapshot's copies (the host
   does not); the gathered temporaries may then go (later work on the stream comes after them) */
static void ckpt_fence(trainer *tr) {
    bt_ckpt_saver_fence(tr->saver, NULL);
    ckpt_release_gathered(tr);
    tr->fence_pending = 0;
}

/* The checkpoint after `step` steps, a collective (every rank calls it after the same step): the
   state gathered, rank 0's copies enqueued; the host time is the loop's stall. A save that failed
   is a warning, the run goes on (the previous checkpoint is whole). */
static void ckpt_snapshot(trainer *tr, int step, double loss) {
    double t0 = now_s();
    if (tr->fence_pending) ckpt_fence(tr);   /* no update since the last snapshot (skipped ones) */
    bt_scope_begin();
    bt_tensor *m, *v;
    ckpt_gather_adamw(tr, &m, &v);
    /* the weights in the 1-GPU layout: with tp the shards gathered (rank 0), else the buffer */
    bt_tensor *w = tr->model.tp > 1 ? (tr->gathered[2] = par_gather_whole(tr, tr->model.flat)) : bt_narrow(tr->model.flat, 0, 0, tr->model.num_params);
    bt_ckpt_meta *meta = ckpt_meta(tr, step, loss);
    if (tr->saver) {
        bt_tensor *t[3] = {w, m, v};
        const char *names[3] = {"params", "adamw.m", "adamw.v"};
        if (bt_ckpt_saver_wait(tr->saver)) fprintf(stderr, "warning: checkpoint: %s\n", bt_ckpt_error());   /* the previous one */
        if (bt_ckpt_saver_snapshot(tr->saver, step, t, names, 3, meta))
            fprintf(stderr, "warning: the checkpoint of step %d was not taken: %s\n", step, bt_ckpt_error());
        else tr->fence_pending = 1;
    }
    bt_ckpt_meta_free(meta);
    bt_scope_end();
    if (!tr->fence_pending) ckpt_release_gathered(tr);
    tr->last_stall_ms = 1e3 * (now_s() - t0);
    tr->total_stall_ms += tr->last_stall_ms;
}
/* a checkpoint after step s (1-based): every --ckpt-every steps and after the last one */
static int ckpt_due(const trainer *tr, int s) {
    return tr->o.ckpt_dir && ((tr->o.ckpt_every && s % tr->o.ckpt_every == 0) || s == tr->o.steps);
}
/* A save that finished since the last call: printed, and its figures appended to `json` (a log
   line's extra members, cap bytes). 1 when there was one. */
static int ckpt_report(trainer *tr, char *json, size_t cap) {
    bt_ckpt_saver_stats st;
    if (!tr->saver) return 0;
    bt_ckpt_saver_get_stats(tr->saver, &st);
    if (st.saves == tr->saves_seen) return 0;
    tr->saves_seen = st.saves;
    printf("checkpoint %s: %.1f MB in %.0f ms (%.0f MB/s; checksums %.0f ms, write %.0f ms)\n", bt_ckpt_saver_last_path(tr->saver),
           st.last_bytes / 1e6, st.last_save_ms, st.last_mb_per_s, st.last_checksum_ms, st.last_write_ms);
    fflush(stdout);
    size_t len = strlen(json);
    snprintf(json + len, cap - len, ", \"ckpt_saved_step\": %lld, \"ckpt_save_ms\": %.1f, \"ckpt_mb_per_s\": %.1f",
             (long long)st.last_step, st.last_save_ms, st.last_mb_per_s);
    return 1;
}
/* the end of a run (its last step, or a signal): the checkpoint of `step` unless taken already,
   then the host waits for the save. 0, or -1 when it failed (said). */
static int ckpt_finish(trainer *tr, int step, int saved_step, double loss) {
    if (!tr->o.ckpt_dir || step == tr->start_step) return 0;   /* nothing new to save */
    if (step != saved_step) ckpt_snapshot(tr, step, loss);
    if (!tr->saver) return 0;
    int r = bt_ckpt_saver_wait(tr->saver);
    if (r) fprintf(stderr, "error: checkpoint: %s\n", bt_ckpt_error());
    char json[256] = "";
    ckpt_report(tr, json, sizeof json);
    return r;
}
/* trainer_end's part: the save in flight finishes (a whole checkpoint), then all is freed */
static void ckpt_end(trainer *tr) {
    if (tr->saver && bt_ckpt_saver_free(tr->saver)) fprintf(stderr, "warning: checkpoint: %s\n", bt_ckpt_error());
    tr->saver = NULL;
    ckpt_release_gathered(tr);
    bt_ckpt_close(tr->src.file);
    tr->src.file = NULL;
}

/* ---- resuming ---- */
static void ckpt_report_bad(const char *path, const char *why, void *user) {
    (void)user;
    (void)path;   /* why names it */
    fprintf(stderr, "warning: --resume: skipping a damaged checkpoint: %s\n", why);
}
/* the file --resume names (on this process): FILE, or the newest checkpoint of DIR (auto:
   --ckpt-dir) that passes every check, each newer one that fails reported and skipped. 0 found,
   1 auto found none (a fresh start), -1 error. */
static int ckpt_find_resume_here(const train_opts *o, char *path, size_t n, char *err, size_t errlen) {
    int is_auto = !strcmp(o->resume, "auto");
    const char *dir = is_auto ? o->ckpt_dir : o->resume;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        if (is_auto) return 1;                        /* not made yet: nothing to resume */
        snprintf(path, n, "%s", o->resume);           /* a file: its own checks name any problem */
        return 0;
    }
    int64_t step, *steps = NULL;
    int r = bt_ckpt_find_latest(dir, &step, path, n, ckpt_report_bad, NULL);
    if (r == 0) return 0;
    int count = r == 1 ? bt_ckpt_list(dir, &steps) : -1;
    free(steps);
    if (count == 0 && is_auto) return 1;
    if (count == 0) snprintf(err, errlen, "--resume %.500s: no checkpoint (ckpt_STEP.safetensors) in it", dir);
    else if (count > 0) snprintf(err, errlen, "--resume %.500s: none of its %d checkpoints is whole (each is reported above)", is_auto ? o->ckpt_dir : dir, count);
    else err_join(err, errlen, "--resume: ", bt_ckpt_error());
    return -1;
}
/* the same for every rank: rank 0 looks, the others are told */
static int ckpt_find_resume(const train_opts *o, bt_dist *dist, char *path, size_t n, char *err, size_t errlen) {
    struct { int32_t rc; char path[4096], err[1024]; } msg;
    memset(&msg, 0, sizeof msg);
    if (!dist || dist->rank == 0) msg.rc = ckpt_find_resume_here(o, msg.path, sizeof msg.path, msg.err, sizeof msg.err);
    if (dist && bt_store_broadcast(bt_dist_store(dist), &msg, sizeof msg)) { err_join(err, errlen, "--resume: ", bt_dist_error()); return -1; }
    snprintf(path, n, "%s", msg.path);
    snprintf(err, errlen, "%s", msg.err);
    return msg.rc;
}

/* ---- Hugging Face GPT-2 (transformers' GPT2LMHeadModel) ---- */
/* Its names: PREFIX + wte.weight [V, C], wpe.weight [maxT, C], h.N.* (below), ln_f.weight,
   ln_f.bias, PREFIX "transformer." ("" in older files), the head tied to wte (no lm_head.weight,
   or one equal to wte). Its Conv1D layers keep weights as [in, out]; ours are [out, in]. */
static const struct { const char *name; int transpose; } hf_layer_tensors[12] = {
    {"ln_1.weight", 0}, {"ln_1.bias", 0}, {"attn.c_attn.weight", 1}, {"attn.c_attn.bias", 0},
    {"attn.c_proj.weight", 1}, {"attn.c_proj.bias", 0}, {"ln_2.weight", 0}, {"ln_2.bias", 0},
    {"mlp.c_fc.weight", 1}, {"mlp.c_fc.bias", 0}, {"mlp.c_proj.weight", 1}, {"mlp.c_proj.bias", 0}};
/* the Hugging Face name of leaf i (gpt2_build_padded's order: wte, wpe, 12 per layer in the order
   above, lnfw, lnfb); 1 when that file holds its transpose */
static int hf_name(const gpt2 *m, int i, const char *prefix, char *name, size_t n) {
    int L = m->cfg.L;
    if (i >= 2 && i < 2 + 12 * L) {
        snprintf(name, n, "%sh.%d.%s", prefix, (i - 2) / 12, hf_layer_tensors[(i - 2) % 12].name);
        return hf_layer_tensors[(i - 2) % 12].transpose;
    }
    snprintf(name, n, "%s%s", prefix, i == 0 ? "wte.weight" : i == 1 ? "wpe.weight" : i == 2 + 12 * L ? "ln_f.weight" : "ln_f.bias");
    return 0;
}
/* 1 when a GPT-2 file of L layers may hold `name`: ours, the attention's mask buffers of older
   transformers, a head */
static int hf_known_name(const char *name, const char *prefix, int L) {
    size_t pl = strlen(prefix);
    int l, end = 0;
    if (!strcmp(name, "lm_head.weight")) return 1;
    if (strncmp(name, prefix, pl)) return 0;
    name += pl;
    if (!strcmp(name, "wte.weight") || !strcmp(name, "wpe.weight") || !strcmp(name, "ln_f.weight") || !strcmp(name, "ln_f.bias")) return 1;
    if (sscanf(name, "h.%d.%n", &l, &end) != 1 || end == 0 || l < 0 || l >= L) return 0;
    if (!strcmp(name + end, "attn.bias") || !strcmp(name + end, "attn.masked_bias")) return 1;
    for (int k = 0; k < 12; k++) if (!strcmp(name + end, hf_layer_tensors[k].name)) return 1;
    return 0;
}
/* config.json beside the model file, parsed (NULL when there is none; -1 on a bad one) */
static int hf_read_config_json(const char *model_path, bt_json_doc **doc, char *err, size_t errlen) {
    char path[4096];
    const char *slash = strrchr(model_path, '/');
    int dl = slash ? (int)(slash - model_path) : 0;
    snprintf(path, sizeof path, "%.*s%sconfig.json", dl, model_path, slash ? "/" : "");
    *doc = NULL;
    uint64_t size = 0;
    if (access(path, F_OK) != 0) return 0;
    int fd = bt_input_open(path, &size);
    if (fd < 0) { err_join(err, errlen, "--init-from: ", bt_data_error()); return -1; }
    char *text = size <= (1u << 20) ? (char *)malloc((size_t)size + 1) : NULL;
    ssize_t got = text ? pread(fd, text, (size_t)size, 0) : -1;
    close(fd);
    if (got != (ssize_t)size) { free(text); snprintf(err, errlen, "--init-from: %.500s: cannot read it (%llu bytes; at most 1 MiB)", path, (unsigned long long)size); return -1; }
    *doc = bt_json_parse(text, (size_t)size, 0);
    free(text);
    if (!*doc) { snprintf(err, errlen, "--init-from: %.500s: %.400s", path, bt_ckpt_error()); return -1; }
    return 0;
}
/* n_head from config.json (its other fields must agree with the tensors), else from the preset
   of the same depth and width */
static int hf_heads(const model_source *src, gpt2_config *c, char *err, size_t errlen) {
    bt_json_doc *doc;
    if (hf_read_config_json(src->path, &doc, err, errlen)) return -1;
    if (!doc) {
        for (int i = 0; i < GPT2_NPRESETS; i++)
            if (gpt2_presets[i].L == c->L && gpt2_presets[i].C == c->C) { c->H = gpt2_presets[i].H; return 0; }
        snprintf(err, errlen, "--init-from %.500s: no config.json beside it to give the number of heads (n_head), and no preset has "
                 "L %d and C %d", src->path, c->L, c->C);
        return -1;
    }
    const bt_json *root = bt_json_root(doc), *act = bt_json_get(root, "activation_function");
    static const char *const keys[5] = {"n_head", "n_layer", "n_embd", "n_positions", "vocab_size"};
    const int want[5] = {0, c->L, c->C, c->maxT, c->V};
    int r = 0;
    for (int i = 0; i < 5 && !r; i++) {
        const bt_json *v = bt_json_get(root, keys[i]);
        int64_t x = 0;
        if ((!v && i == 0) || (v && (bt_json_i64(v, &x) || x < 1 || x > INT32_MAX))) {
            snprintf(err, errlen, "--init-from: config.json beside %.500s: \"%s\" is %s", src->path, keys[i], v ? "not a positive integer" : "missing");
            r = -1;
        } else if (v && i == 0) c->H = (int)x;
        else if (v && x != want[i]) {
            snprintf(err, errlen, "--init-from: config.json beside %.500s says %s %lld, the tensors %d", src->path, keys[i], (long long)x, want[i]);
            r = -1;
        }
    }
    if (!r && act && (act->type != BT_JSON_STRING || (strcmp(act->str, "gelu_new") && strcmp(act->str, "gelu_pytorch_tanh")))) {
        snprintf(err, errlen, "--init-from: config.json beside %.500s: activation_function \"%s\": train_gpt2's GELU is the tanh form "
                 "(gelu_new)", src->path, act->type == BT_JSON_STRING ? act->str : "?");
        r = -1;
    }
    bt_json_free(doc);
    return r;
}
/* the config of a Hugging Face GPT-2 file from its tensors' shapes (+ n_head); every tensor of it
   must be one a GPT-2 has */
static int hf_config(model_source *src, gpt2_config *c, char *err, size_t errlen) {
    bt_ckpt_file *f = src->file;
    char name[160];
    snprintf(src->prefix, sizeof src->prefix, "%s", bt_ckpt_find(f, "transformer.wte.weight") ? "transformer." : "");
    snprintf(name, sizeof name, "%swte.weight", src->prefix);
    const bt_ckpt_info *wte = bt_ckpt_find(f, name), *wpe;
    snprintf(name, sizeof name, "%swpe.weight", src->prefix);
    wpe = bt_ckpt_find(f, name);
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1]) {
        snprintf(err, errlen, "--init-from %.500s: not a GPT-2 model in Hugging Face's layout (transformer.wte.weight [V, C] and "
                 "transformer.wpe.weight [maxT, C] expected), nor a train_gpt2 checkpoint", src->path);
        return -1;
    }
    int L = 0;
    for (; L < 4096; L++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", src->prefix, L);
        if (!bt_ckpt_find(f, name)) break;
    }
    if (wte->shape[0] > INT32_MAX || wpe->shape[0] > INT32_MAX || wte->shape[1] > INT32_MAX) {
        snprintf(err, errlen, "--init-from %.500s: wte or wpe has more than 2^31 rows or columns", src->path); return -1;
    }
    c->V = (int)wte->shape[0]; c->C = (int)wte->shape[1]; c->maxT = (int)wpe->shape[0]; c->L = L;
    c->Vp = round_up(c->V, 128); c->H = 1;
    if (L == 0) { snprintf(err, errlen, "--init-from %.500s: no layers (%sh.0.ln_1.weight)", src->path, src->prefix); return -1; }
    for (int i = 0; i < bt_ckpt_count(f); i++)
        if (!hf_known_name(bt_ckpt_info_at(f, i)->name, src->prefix, L)) {
            snprintf(err, errlen, "--init-from %.500s: tensor '%s' is not part of a GPT-2 of %d layers", src->path, bt_ckpt_info_at(f, i)->name, L);
            return -1;
        }
    if (hf_heads(src, c, err, errlen)) return -1;
    return gpt2_config_check(c, src->path, "", err, errlen);
}
/* a head (lm_head.weight) in the file must be wte itself: ours is tied */
static int hf_check_tied_head(gpt2 *m, model_source *src, char *err, size_t errlen) {
    const bt_ckpt_info *h = bt_ckpt_find(src->file, "lm_head.weight");
    int V = m->cfg.V, C = m->cfg.C, r = 0;
    if (!h) return 0;
    bt_scope_begin();
    bt_tensor *head = bt_empty(bt_shape2(V, C), BT_F32, bt_cpu()), *wte = bt_empty(bt_shape2(V, C), BT_F32, bt_cpu());
    bt_to_host(bt_narrow(m->wte, 0, 0, V), bt_data_ptr(wte), BT_F32);
    if (bt_ckpt_load(src->file, "lm_head.weight", head, BT_CKPT_CONVERT)) { err_join(err, errlen, "--init-from: ", bt_ckpt_error()); r = -1; }
    else if (memcmp(bt_data_ptr(head), bt_data_ptr(wte), sizeof(float) * (size_t)V * C)) {
        snprintf(err, errlen, "--init-from %.500s: lm_head.weight differs from %swte.weight: train_gpt2's head is the embedding itself "
                 "(tie_word_embeddings)", src->path, src->prefix);
        r = -1;
    }
    bt_scope_end();
    return r;
}
/* every leaf from the file: Conv1D weights transposed, wte's rows padded to Vp with zeros, any
   float dtype converted to f32 */
static int hf_load(gpt2 *m, model_source *src, char *err, size_t errlen) {
    char name[160];
    int r = 0;
    for (int i = 0; i < m->n_params && !r; i++) {
        bt_tensor *p = m->params[i];
        int flags = BT_CKPT_CONVERT | (hf_name(m, i, src->prefix, name, sizeof name) ? BT_CKPT_TRANSPOSE : 0) | (i == 0 ? BT_CKPT_PAD_ROWS : 0);
        bt_scope_begin();   /* into a view of the flat buffer: the leaf itself is autograd's */
        bt_tensor *dst = bt_view(bt_narrow(m->flat, 0, p->offset - m->flat->offset, bt_numel(p)), bt_shape_of(p));
        if (bt_ckpt_load(src->file, name, dst, flags)) { err_join(err, errlen, "--init-from: ", bt_ckpt_error()); r = -1; }
        bt_scope_end();
    }
    return r ? -1 : hf_check_tied_head(m, src, err, errlen);
}
/* --export-hf DIR: model.safetensors (f32, transformers' names, the real vocabulary's rows of
   wte, no head: it is tied) and config.json, each written atomically */
static int hf_export(gpt2 *m, const char *dir, char *err, size_t errlen) {
    char path[4096], name[160];
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    int bad = !w;
    for (int i = 0; i < m->n_params && !bad; i++) {
        int tr = hf_name(m, i, "transformer.", name, sizeof name);
        bad = bt_ckpt_writer_add_tensor(w, name, m->params[i], tr ? BT_CKPT_TRANSPOSE : 0, i == 0 ? m->cfg.V : 0) != 0;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!bad) bad = bt_ckpt_writer_save(w, path) != 0;
    bt_ckpt_writer_free(w);
    if (bad) { err_join(err, errlen, "--export-hf: ", bt_ckpt_error()); return -1; }
    const gpt2_config *c = &m->cfg;
    bt_json_writer j;
    bt_json_writer_init(&j, 2);
    bt_json_object(&j, NULL);
    bt_json_array(&j, "architectures"); bt_json_string(&j, NULL, "GPT2LMHeadModel"); bt_json_end(&j);
    bt_json_string(&j, "model_type", "gpt2");
    bt_json_int(&j, "vocab_size", c->V); bt_json_int(&j, "n_positions", c->maxT); bt_json_int(&j, "n_ctx", c->maxT);
    bt_json_int(&j, "n_embd", c->C); bt_json_int(&j, "n_layer", c->L); bt_json_int(&j, "n_head", c->H);
    bt_json_null(&j, "n_inner");                              /* 4 n_embd */
    bt_json_string(&j, "activation_function", "gelu_new");    /* the tanh form, as bt_gelu */
    bt_json_number(&j, "layer_norm_epsilon", 1e-5);
    bt_json_number(&j, "initializer_range", 0.02);
    bt_json_number(&j, "resid_pdrop", 0.0); bt_json_number(&j, "embd_pdrop", 0.0); bt_json_number(&j, "attn_pdrop", 0.0);
    bt_json_bool(&j, "scale_attn_weights", 1);
    bt_json_bool(&j, "tie_word_embeddings", 1);
    bt_json_bool(&j, "use_cache", 1);
    if (c->V > BT_EOT) { bt_json_int(&j, "bos_token_id", BT_EOT); bt_json_int(&j, "eos_token_id", BT_EOT); }
    bt_json_string(&j, "dtype", "float32");
    bt_json_end(&j);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int r = bt_json_save(&j, path);
    bt_json_writer_free(&j);
    if (r) { err_join(err, errlen, "--export-hf: ", bt_ckpt_error()); return -1; }
    return 0;
}

/* ---- where the model comes from ---- */
/* --resume (a checkpoint: config, weights, AdamW state, step, data position) or --init-from (a
   Hugging Face file, or a checkpoint's weights): the file opened and the model's config read.
   Neither (or --resume auto with nothing to resume): src->file stays NULL, -e decides. */
static int model_source_open(const train_opts *o, bt_dist *dist, model_source *src, gpt2_config *cfg, char *err, size_t errlen) {
    memset(src, 0, sizeof *src);
    if (o->resume) {
        int r = ckpt_find_resume(o, dist, src->path, sizeof src->path, err, errlen);
        if (r) return r < 0 ? -1 : 0;
        src->resume = 1;
    } else if (o->init_from) {
        struct stat sb;
        int is_dir = stat(o->init_from, &sb) == 0 && S_ISDIR(sb.st_mode);
        snprintf(src->path, sizeof src->path, "%s%s", o->init_from, is_dir ? "/model.safetensors" : "");
    } else return 0;
    const char *flag = src->resume ? "--resume" : "--init-from";
    if (!(src->file = bt_ckpt_open(src->path, src->resume ? BT_CKPT_REQUIRE_CHECKSUMS : 0))) {
        snprintf(err, errlen, "%s: %.900s", flag, bt_ckpt_error());
        return -1;
    }
    const bt_ckpt_meta *meta = bt_ckpt_file_meta(src->file);
    if (bt_ckpt_meta_get(meta, "train_gpt2.checkpoint")) return ckpt_config(meta, src->path, cfg, err, errlen);
    if (src->resume) { snprintf(err, errlen, "--resume %.500s: not a train_gpt2 checkpoint (no train_gpt2.checkpoint in its metadata)", src->path); return -1; }
    src->hf = 1;
    return hf_config(src, cfg, err, errlen);
}
/* the weights from the source into a whole (one-process) model m: a checkpoint's params, or a
   Hugging Face file's tensors */
static int model_source_load_into(gpt2 *m, model_source *src, char *err, size_t errlen) {
    if (src->hf) return hf_load(m, src, err, errlen);
    bt_scope_begin();
    int r = bt_ckpt_load(src->file, "params", bt_narrow(m->flat, 0, 0, m->num_params), 0);
    bt_scope_end();
    if (r) err_join(err, errlen, src->resume ? "--resume: " : "--init-from: ", bt_ckpt_error());
    return r;
}
/* ... into the run's model: with tp > 1 through a whole model in host memory (section 8) */
static int model_source_load(trainer *tr, char *err, size_t errlen) {
    if (tr->model.tp > 1) return par_source_load(tr, err, errlen);
    return model_source_load_into(&tr->model, &tr->src, err, errlen);
}
/* --resume, once the optimizer and the loaders exist: AdamW's state (this rank's range of it),
   the step counts, this rank's data position; then the file is closed */
static int ckpt_restore(trainer *tr, char *err, size_t errlen) {
    const bt_ckpt_meta *meta = bt_ckpt_file_meta(tr->src.file);
    bt_adamw *opt = &tr->opt;
    int64_t step, astep;
    bt_loader_state st;
    if (bt_ckpt_meta_get_i64(meta, "train.step", &step) || bt_ckpt_meta_get_i64(meta, "adamw.step", &astep) ||
        step < 0 || step > tr->o.steps || astep < 0 || astep > step) {
        snprintf(err, errlen, "--resume %.500s: train.step or adamw.step is missing or out of range (%.400s)", tr->src.path, bt_ckpt_error());
        return -1;
    }
    int r, tp = tr->model.tp > 1;
    bt_scope_begin();
    if (!tp && opt->lo == 0 && opt->hi == tr->model.num_params) {
        r = bt_ckpt_load(tr->src.file, "adamw.m", opt->m, 0) || bt_ckpt_load(tr->src.file, "adamw.v", opt->v, 0);
    } else {   /* ZeRO or tp: the whole state through host memory, this rank's range (or shard) copied in */
        bt_tensor *m = bt_empty(bt_shape1(tr->model.num_params), BT_F32, bt_cpu()), *v = bt_empty(bt_shape1(tr->model.num_params), BT_F32, bt_cpu());
        r = bt_ckpt_load(tr->src.file, "adamw.m", m, 0) || bt_ckpt_load(tr->src.file, "adamw.v", v, 0);
        if (!r && tp) { m = par_shard_of_whole(&tr->model, m); v = par_shard_of_whole(&tr->model, v); }
        if (!r) bt_adamw_set_state(opt, bt_narrow(m, 0, opt->lo, opt->hi - opt->lo), bt_narrow(v, 0, opt->lo, opt->hi - opt->lo), astep);
    }
    bt_scope_end();
    if (r) { err_join(err, errlen, "--resume: ", bt_ckpt_error()); return -1; }
    opt->step = astep;
    int drank = tr->par ? par_data_rank(tr->par) : tr->dist ? tr->dist->rank : 0;   /* tp/cp ranks read their dp index's rows */
    if (bt_ckpt_meta_get_loader(meta, drank, &st)) { err_join(err, errlen, "--resume: ", bt_ckpt_error()); return -1; }
    if (bt_loader_set_state(tr->train, &st)) { err_join(err, errlen, "--resume: the data position: ", bt_data_error()); return -1; }
    tr->start_step = (int)step;
    bt_ckpt_close(tr->src.file);
    tr->src.file = NULL;
    return 0;
}

/* ============================================================================================
   8. tensor and context parallelism (--tp, --cp)
   ============================================================================================ */
/* The processes form a mesh dp x tp x cp (bt_dist.h: rank = (dp_i cp + cp_i) tp + tp_i), the
   ops are bt_parallel.h's. Tensor parallelism (--tp, Megatron's split): rank r of a tp group holds
       wte         rows [r Vp/tp, (r+1) Vp/tp): the vocabulary-parallel embedding and the fused
                   vocabulary-parallel loss (max and sum-exp all-reduced; no logits gathered)
       qkvw, qkvb  the q, k and v rows of its H/tp heads (column-parallel: the heads' attention
                   is local)
       projw       columns [r C/tp, ..): row-parallel, its partial sums all-reduced
       fcw, fcb    rows [r 4C/tp, ..): column-parallel
       fcprojw     columns [r 4C/tp, ..): row-parallel
   and the other tensors whole (wpe, the layernorms, the row-parallel layers' biases). With --sp
   the activations between the parallel regions hold T/tp of the sequence, so the whole tensors'
   gradients come from the rank's slice only: they are summed over the tp group after backward.
   Every shard element is drawn at its whole-model file offset, so a tp run starts from the
   1-GPU weights of its seed; model files hold the whole model in llm.c's order and checkpoints
   (weights and AdamW's m and v, which follow the weights element for element) the 1-GPU
   buffer's: shards gathered on save, sliced on load, so files move between layouts.
   Context parallelism (--cp): rank i of a cp group holds the zig-zag chunks i and 2 cp - 1 - i of
   every sequence (tokens, targets and positions, bt_zigzag_global); attention is
   bt_cp_attention_qkv with the --cp-comm K/V strategy, every other op works per token. A rank's
   loss is its tokens' mean; the cp ranks hold equal token counts, so the mean of their means is
   the sequence's mean and the gradients are averaged over the dp x cp group (the DDP buckets run
   on that communicator). The loader runs per dp index: each tp and cp rank of it reads the same
   rows, so -b B -d D is the same global batch as on one GPU.
   On CPUs the collectives go through the TCP store: tp or cp (one of them) must span every
   process, and a launcher's variables start the ranks (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR;
   --nproc needs NCCL); the cp group's gradients are then summed through the store too. */
typedef struct gpt2_par {
    int tp, cp, dp, tp_rank, cp_rank, dp_rank, sp, on_cpu;
    bt_comm *dpcp_comm;        /* the ranks of this tp index: they hold the same shard (DDP's group) */
    bt_tp *tpc;                /* tp > 1 */
    bt_cp *cpc;                /* cp > 1 */
    bt_tp *cp_sum;             /* CPU with cp > 1: sums over the cp group through the store */
    int Tl;                    /* this rank's tokens of a sequence: T / cp */
    int32_t *pos;              /* [Tl]: their global positions */
    int32_t *loc_in, *loc_tg;  /* [B Tl]: a batch's tokens and targets of this rank */
    void *stage_ev[3];         /* GPU: timed events before the forward, after it, after the backward */
    double fwd_ms, bwd_ms;     /* their intervals in the last step */
    gpt2 whole;                /* rank 0 with tp > 1: the gathered model for the outputs */
} gpt2_par;

/* ---- shards: which part of each whole tensor a rank holds ---- */
enum { SHARD_WHOLE, SHARD_ROWS, SHARD_QKV, SHARD_COLS };
typedef struct { int kind; int64_t R, K; int ndim; } gpt2_shard;   /* of the whole tensor [R, K] (K = 1: a vector) */
static gpt2_shard shard_make(int kind, int64_t R, int64_t K, int ndim) { gpt2_shard s; s.kind = kind; s.R = R; s.K = K; s.ndim = ndim; return s; }
/* leaf i in gpt2_build_padded's order (wte, wpe, 12 per layer, lnfw, lnfb) */
static gpt2_shard gpt2_shard_of(const gpt2_config *c, int leaf) {
    int64_t C = c->C;
    if (leaf == 0) return shard_make(SHARD_ROWS, c->Vp, C, 2);
    if (leaf == 1) return shard_make(SHARD_WHOLE, c->maxT, C, 2);
    if (leaf >= 2 + 12 * c->L) return shard_make(SHARD_WHOLE, C, 1, 1);
    switch ((leaf - 2) % 12) {
    case 2: return shard_make(SHARD_QKV, 3 * C, C, 2);      /* qkvw */
    case 3: return shard_make(SHARD_QKV, 3 * C, 1, 1);      /* qkvb */
    case 4: return shard_make(SHARD_COLS, C, C, 2);         /* projw */
    case 8: return shard_make(SHARD_ROWS, 4 * C, C, 2);     /* fcw */
    case 9: return shard_make(SHARD_ROWS, 4 * C, 1, 1);     /* fcb */
    case 10: return shard_make(SHARD_COLS, C, 4 * C, 2);    /* fcprojw */
    default: return shard_make(SHARD_WHOLE, C, 1, 1);      /* ln1w ln1b projb ln2w ln2b fcprojb */
    }
}
static bt_shape gpt2_shard_shape(gpt2_shard s, int tp) {
    int64_t R = s.R, K = s.K;
    if (s.kind == SHARD_ROWS || s.kind == SHARD_QKV) R /= tp;
    else if (s.kind == SHARD_COLS) K /= tp;
    return s.ndim == 1 ? bt_shape1(R * K) : bt_shape2(R, K);
}
/* rank r's elements of the whole tensor full [R, K] as a view whose row-major order is the
   shard's (QKV: [3, R/3/tp, K], the q, k and v rows of the rank's heads) */
static bt_tensor *gpt2_shard_view(bt_tensor *full, gpt2_shard s, int tp, int r) {
    switch (s.kind) {
    case SHARD_ROWS: return bt_narrow(full, 0, r * (s.R / tp), s.R / tp);
    case SHARD_COLS: return bt_narrow(full, 1, r * (s.K / tp), s.K / tp);
    case SHARD_QKV: return bt_narrow(bt_view(full, bt_shape3(3, s.R / 3, s.K)), 1, r * (s.R / 3 / tp), s.R / 3 / tp);
    default: return full;
    }
}
/* leaf i's shard of rank r (local: its elements, 1-D) to or from the whole tensor full [R, K] */
static void gpt2_shard_copy(const gpt2_config *c, int i, int tp, int r, bt_tensor *local, bt_tensor *full, int to_full) {
    bt_tensor *v = gpt2_shard_view(full, gpt2_shard_of(c, i), tp, r), *l = bt_view(local, bt_shape_of(v));
    if (to_full) bt_copy_(v, l); else bt_copy_(l, v);
}
/* the file-order offset of leaf i's whole tensor (llm.c's order: each kind stacked over layers) */
static int64_t gpt2_leaf_file_base(const gpt2_config *c, int i) {
    int64_t sz[P_COUNT], off[P_COUNT], total = 0;
    gpt2_param_sizes(c, sz);
    for (int k = 0; k < P_COUNT; k++) { off[k] = total; total += sz[k]; }
    if (i < 2) return off[i == 0 ? P_WTE : P_WPE];
    if (i >= 2 + 12 * c->L) return off[i == 2 + 12 * c->L ? P_LNFW : P_LNFB];
    int k = P_LN1W + (i - 2) % 12, l = (i - 2) / 12;   /* the 12 layer kinds in the enum's order */
    return off[k] + l * (sz[k] / c->L);
}

/* the parameters a rank of a tp-way model holds (tp = 1: all of them); *whole (may be NULL): the
   elements of its whole (replicated) tensors among them */
static int64_t gpt2_local_numel(const gpt2_config *cfg, int tp, int64_t *whole) {
    int64_t local = 0, w = 0;
    for (int i = 0; i < 4 + 12 * cfg->L; i++) {
        gpt2_shard s = gpt2_shard_of(cfg, i);
        bt_shape sh = gpt2_shard_shape(s, tp);
        int64_t k = sh.ndim == 1 ? sh.d[0] : sh.d[0] * sh.d[1];
        local += k;
        if (s.kind == SHARD_WHOLE) w += k;
    }
    if (whole) *whole = w;
    return local;
}
/* rank r's shard of a tp-way model: the same leaves as gpt2_build_padded, each its shard's
   shape; num_params stays the whole model's (files, FLOPs), flat_numel is the shard's, rounded
   up to a multiple of pad_to as gpt2_build_padded's (ZeRO over the ranks of this tp index), with
   the gradients in grad_dt. The whole (replicated) tensors come first in the buffer, in leaf
   order, then the shards: with sp their gradients are one span of flat_grad, summed over tp by
   one collective (par_reduce_grads). */
static void gpt2_build_tp(gpt2 *m, gpt2_config cfg, bt_device dev, int tp, int r, int64_t pad_to, bt_dtype grad_dt) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->device = dev; m->tp = tp; m->tp_rank = r;
    int n = 4 + 12 * cfg.L;
    int64_t whole, local = gpt2_local_numel(&cfg, tp, &whole);
    int64_t mark[2] = {0, whole};   /* the next whole tensor's offset, the next shard's */
    m->num_params = gpt2_num_params(&cfg);
    m->flat_numel = (local + pad_to - 1) / pad_to * pad_to;
    m->flat = bt_zeros(bt_shape1(m->flat_numel), BT_F32, dev);
    m->flat_grad = bt_zeros(bt_shape1(m->flat_numel), grad_dt, dev);
    m->params = (bt_tensor **)calloc((size_t)n, sizeof(bt_tensor *));
    m->file_off = (int64_t *)calloc((size_t)n, sizeof(int64_t));
    m->layers = (gpt2_layer *)calloc((size_t)cfg.L, sizeof(gpt2_layer));
    if (!m->params || !m->file_off || !m->layers) bt_error("gpt2_build_tp: out of host memory");
    for (int i = 0; i < n; i++) {
        gpt2_shard s = gpt2_shard_of(&cfg, i);
        bt_tensor *p = gpt2_leaf(m, &mark[s.kind != SHARD_WHOLE], gpt2_leaf_file_base(&cfg, i), gpt2_shard_shape(s, tp));
        if (i < 2) *(i == 0 ? &m->wte : &m->wpe) = p;
        else if (i >= 2 + 12 * cfg.L) *(i == 2 + 12 * cfg.L ? &m->lnfw : &m->lnfb) = p;
        else {
            gpt2_layer *y = &m->layers[(i - 2) / 12];
            bt_tensor **slot[12] = {&y->ln1w, &y->ln1b, &y->qkvw, &y->qkvb, &y->projw, &y->projb,
                                    &y->ln2w, &y->ln2b, &y->fcw, &y->fcb, &y->fcprojw, &y->fcprojb};
            *slot[(i - 2) % 12] = p;
        }
    }
}
/* leaf i's offset in the flat buffer */
static int64_t gpt2_leaf_off(const gpt2 *m, int i) { return m->params[i]->offset - m->flat->offset; }
/* the elements of the whole tensors, the first span of a tp shard's buffer (gpt2_build_tp) */
static int64_t par_whole_numel(const gpt2 *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) if (gpt2_shard_of(&m->cfg, i).kind == SHARD_WHOLE) n += bt_numel(m->params[i]);
    return n;
}
/* off[i] = leaf i's offset in the 1-GPU flat buffer (gpt2_build_padded: leaf order, whole tensors) */
static void gpt2_whole_offsets(const gpt2_config *c, int64_t *off) {
    int64_t at = 0;
    for (int i = 0; i < 4 + 12 * c->L; i++) { gpt2_shard s = gpt2_shard_of(c, i); off[i] = at; at += s.R * s.K; }
}

/* Between rank's shard (local: a [flat_numel] buffer in the shard's layout: the weights, or
   AdamW's m or v, which follow them element for element) and the whole model (whole:
   [num_params], leaf i at off[i]: llm.c's file order with m->file_off, the 1-GPU buffer's with
   gpt2_whole_offsets); both on one device */
static void par_shards_map(const gpt2 *m, int rank, bt_tensor *local, bt_tensor *whole, const int64_t *off, int to_whole) {
    bt_scope_begin();
    for (int i = 0; i < m->n_params; i++) {
        gpt2_shard s = gpt2_shard_of(&m->cfg, i);
        bt_tensor *full = bt_view(bt_narrow(whole, 0, off[i], s.R * s.K), bt_shape2(s.R, s.K));
        gpt2_shard_copy(&m->cfg, i, m->tp, rank, bt_narrow(local, 0, gpt2_leaf_off(m, i), bt_numel(m->params[i])), full, to_whole);
    }
    bt_scope_end();
}
/* the same in host memory, the whole model in llm.c's file order (model files) */
static void par_shards_file(const gpt2 *m, int rank, float *mem, float *file, int to_file) {
    bt_scope_begin();
    par_shards_map(m, rank, bt_from_blob(mem, bt_shape1(m->flat_numel), BT_F32, bt_cpu()),
                   bt_from_blob(file, bt_shape1(m->num_params), BT_F32, bt_cpu()), m->file_off, to_file);
    bt_scope_end();
}
static void par_to_file_order(const gpt2 *m, int rank, const float *mem, float *file) { par_shards_file(m, rank, (float *)mem, file, 1); }
static void par_from_file_order(const gpt2 *m, const float *file, float *mem) { par_shards_file(m, m->tp_rank, mem, (float *)file, 0); }
/* this rank's shard of whole ([num_params] in the 1-GPU buffer's order, any device) as a new
   [flat_numel] tensor on whole's device (in the current scope): a resume's weights and AdamW state */
static bt_tensor *par_shard_of_whole(const gpt2 *m, bt_tensor *whole) {
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * (size_t)m->n_params);
    if (!off) bt_error("tp: out of host memory");
    gpt2_whole_offsets(&m->cfg, off);
    bt_tensor *local = bt_zeros(bt_shape1(m->flat_numel), BT_F32, bt_device_of(whole));
    par_shards_map(m, m->tp_rank, local, whole, off, 0);
    free(off);
    return local;
}

/* gpt2_init on a shard: every element drawn at its whole-model file offset (a strided shard
   through a whole tensor made on the device and sliced), so the shards are the 1-GPU weights */
static void par_init(gpt2 *m, uint64_t seed) {
    int old = bt_set_grad_enabled(0), L = m->cfg.L;
    double std = 0.02, res_std = 0.02 / sqrt(2.0 * L);
    for (int i = 0; i < m->n_params; i++) {
        int k = i >= 2 && i < 2 + 12 * L ? (i - 2) % 12 : -1;
        double sd = i < 2 || k == 2 || k == 8 ? std : k == 4 || k == 10 ? res_std : 0;
        int one = k == 0 || k == 6 || i == 2 + 12 * L;   /* ln1w, ln2w, lnfw */
        gpt2_shard s = gpt2_shard_of(&m->cfg, i);
        bt_scope_begin();
        bt_tensor *local = bt_narrow(m->flat, 0, gpt2_leaf_off(m, i), bt_numel(m->params[i]));
        if (sd > 0 && (s.kind == SHARD_WHOLE || s.kind == SHARD_ROWS)) {   /* one contiguous run */
            int64_t first = s.kind == SHARD_ROWS ? (int64_t)m->tp_rank * (s.R / m->tp) * s.K : 0;
            bt_normal_(local, 0, sd, seed, (uint64_t)(m->file_off[i] + first));
        } else if (sd > 0) {
            bt_tensor *full = bt_empty(bt_shape2(s.R, s.K), BT_F32, m->device);
            bt_normal_(full, 0, sd, seed, (uint64_t)m->file_off[i]);
            gpt2_shard_copy(&m->cfg, i, m->tp, m->tp_rank, local, full, 0);
        } else if (one) bt_fill_(local, 1.0);
        bt_scope_end();
    }
    bt_set_grad_enabled(old);
}

/* ---- the forward pass's parallel parts (gpt2_hidden, gpt2_attention, gpt2_mlp, gpt2_loss
   branch here) ---- */
/* token + position embeddings of this rank's tokens idx [B, Tl] -> [B, Tl, C] ([B, Tl/tp, C] with sp) */
static bt_tensor *par_embed(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    gpt2_par *p = m->par;
    if (idx->shape[1] != p->Tl) bt_error("tp/cp forward: %lld tokens per row, the positions are set for %d", (long long)idx->shape[1], p->Tl);
    int64_t n = p->sp ? p->Tl / p->tp : p->Tl, lo = p->sp ? (int64_t)p->tp_rank * n : 0;
    bt_tensor *wte = param_as(m, m->wte, dt);
    bt_tensor *tok = m->tp > 1 ? bt_tp_embedding(p->tpc, wte, idx) : bt_embedding(wte, idx);
    bt_tensor *pos = bt_from_data(p->pos + lo, bt_shape1(n), BT_I32, m->device);
    return bt_add(tok, bt_embedding(param_as(m, m->wpe, dt), pos));
}
/* qkv column-parallel (this rank's H/tp heads), attention (the cp ring with cp > 1), the
   projection row-parallel */
static bt_tensor *par_attention(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    gpt2_par *p = m->par;
    bt_tensor *qw = param_as(m, y->qkvw, dt), *qb = param_as(m, y->qkvb, dt), *pw = param_as(m, y->projw, dt), *pb = param_as(m, y->projb, dt);
    int64_t H = m->cfg.H / (m->tp > 1 ? m->tp : 1);
    bt_tensor *qkv = m->tp > 1 ? bt_tp_linear_col(p->tpc, h, qw, qb) : bt_linear(h, qw, qb);
    bt_tensor *a = p->cp > 1 ? bt_cp_attention_qkv(p->cpc, qkv, H, 1) : bt_attention_qkv(qkv, H);
    return m->tp > 1 ? bt_tp_linear_row(p->tpc, a, pw, pb) : bt_linear(a, pw, pb);
}
static bt_tensor *par_mlp(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_tp *tp = m->par->tpc;
    bt_tensor *u = bt_gelu(bt_tp_linear_col(tp, h, param_as(m, y->fcw, dt), param_as(m, y->fcb, dt)));
    return bt_tp_linear_row(tp, u, param_as(m, y->fcprojw, dt), param_as(m, y->fcprojb, dt));
}
/* the vocabulary-parallel head and loss on the final layernorm's output x (entered, with sp
   gathered, inside) */
static bt_tensor *par_loss(gpt2 *m, bt_tensor *x, bt_tensor *targets, bt_dtype dt) {
    return bt_tp_linear_cross_entropy(m->par->tpc, x, param_as(m, m->wte, dt), targets, m->cfg.V, -1);
}

/* ---- the flags ---- */
/* 0, or -1 with err naming the flag: the combination of --tp, --cp, --sp, --async-tp, --cp-comm
   with the model, the sequence, the processes and the other options */
static int par_check(const train_opts *o, const gpt2_config *c, int world, int on_gpu, char *err, size_t errlen) {
    int tp = o->tp, cp = o->cp;
    if (o->sp && tp < 2) { snprintf(err, errlen, "--sp (sequence parallelism) needs --tp 2 or more"); return -1; }
    if (o->async_tp && tp < 2) { snprintf(err, errlen, "--async-tp needs --tp 2 or more"); return -1; }
    if (o->cp_comm && cp < 2) { snprintf(err, errlen, "--cp-comm %s needs --cp 2 or more", o->cp_comm); return -1; }
    if (tp * cp == 1) return 0;
    const char *what = tp > 1 && cp > 1 ? "--tp/--cp" : tp > 1 ? "--tp" : "--cp";
    if (world % (tp * cp)) {
        snprintf(err, errlen, "--tp %d x --cp %d = %d does not divide the %d process%s (start a multiple of %d: --nproc, torchrun, srun or mpirun)",
                 tp, cp, tp * cp, world, world == 1 ? "" : "es", tp * cp);
        return -1;
    }
    if (c->H % tp) { snprintf(err, errlen, "--tp %d does not divide the model's %d heads", tp, c->H); return -1; }
    if ((4 * c->C) % tp) { snprintf(err, errlen, "--tp %d does not divide the MLP width 4C = %d", tp, 4 * c->C); return -1; }
    if (c->Vp % tp) { snprintf(err, errlen, "--tp %d does not divide the padded vocabulary Vp = %d", tp, c->Vp); return -1; }
    if (o->T % (2 * cp)) { snprintf(err, errlen, "-t %d is not a multiple of 2 x --cp = %d (each rank holds two equal zig-zag chunks)", o->T, 2 * cp); return -1; }
    if (o->sp && (o->T / cp) % tp) { snprintf(err, errlen, "--sp: the %d tokens per rank (-t %d / --cp %d) are not a multiple of --tp %d", o->T / cp, o->T, cp, tp); return -1; }
    if (o->cp_comm && !strcmp(o->cp_comm, "alltoall") && (c->H / tp) % cp) {
        snprintf(err, errlen, "--cp-comm alltoall: the %d heads per tp rank are not a multiple of --cp %d", c->H / tp, cp); return -1;
    }
    if (o->B < 0) { snprintf(err, errlen, "%s needs -b (the automatic micro-batch probe is for one GPU)", what); return -1; }
    if (!on_gpu && world != tp * cp) {
        snprintf(err, errlen, "%s on CPUs: collectives go through the TCP store, so --tp x --cp must be all %d processes (no data parallelism)", what, world);
        return -1;
    }
    if (!on_gpu && strcmp(o->dp, "ddp")) {
        snprintf(err, errlen, "--dp %s with %s on CPUs: ZeRO shards the state over data-parallel ranks, and tp/cp on CPUs have none "
                 "(the store path; use --dp ddp, or GPUs)", o->dp, what);
        return -1;
    }
    if (!on_gpu && tp > 1 && cp > 1) { snprintf(err, errlen, "--tp with --cp on CPUs: each needs the whole world's store; use one of them"); return -1; }
    return 0;
}

/* ---- the mesh, the contexts, the data ---- */
/* the mesh's communicators and contexts, this rank's positions; a collective (the splits) */
static gpt2_par *par_open(const train_opts *o, bt_dist *d, int on_gpu) {
    gpt2_par *p = (gpt2_par *)calloc(1, sizeof *p);
    if (!p) bt_error("tp/cp: out of host memory");
    bt_mesh mesh;
    if (bt_mesh_init(&mesh, d->world, o->tp, o->cp)) bt_error("tp/cp: %s", bt_dist_error());
    p->tp = o->tp; p->cp = o->cp; p->dp = mesh.dp; p->sp = o->sp; p->on_cpu = !on_gpu;
    p->tp_rank = bt_mesh_coord(&mesh, d->rank, BT_MESH_TP);
    p->cp_rank = bt_mesh_coord(&mesh, d->rank, BT_MESH_CP);
    p->dp_rank = bt_mesh_coord(&mesh, d->rank, BT_MESH_DP);
    bt_comm *tpc = NULL, *cpc = NULL;
    if (on_gpu) {
        bt_dist_mesh_comms(d, &mesh, NULL, &tpc, &cpc);
        p->dpcp_comm = bt_dist_split(d, d->world_comm, p->tp_rank, d->rank, "dpcp");
    } else {                        /* the store path: the one parallel axis spans the world */
        tpc = o->tp > 1 ? d->world_comm : NULL;
        cpc = o->cp > 1 ? d->world_comm : NULL;
    }
    bt_tp_opts to;
    memset(&to, 0, sizeof to);
    to.sp = o->sp; to.async = o->async_tp; to.deterministic = o->deterministic;
    if (o->tp > 1) p->tpc = bt_tp_create(tpc, &to);
    if (o->cp > 1) {
        bt_cp_kv kv = BT_CP_RING;
        if (o->cp_comm) bt_cp_kv_parse(o->cp_comm, &kv);   /* checked by the parser */
        p->cpc = bt_cp_create(cpc, kv);
        if (!on_gpu) p->cp_sum = bt_tp_create(cpc, NULL);
    }
    for (int k = 0; k < 3 && on_gpu; k++) p->stage_ev[k] = bt_event_create_timed(bt_cuda_device(d->device));
    p->Tl = o->T / o->cp;
    p->pos = (int32_t *)malloc(sizeof(int32_t) * (size_t)p->Tl);
    p->loc_in = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * p->Tl);
    p->loc_tg = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * p->Tl);
    if (!p->pos || !p->loc_in || !p->loc_tg) bt_error("tp/cp: out of host memory");
    for (int j = 0; j < p->Tl; j++) p->pos[j] = (int32_t)bt_zigzag_global(o->T, o->cp, p->cp_rank, j);
    return p;
}
/* before bt_dist_shutdown (the contexts' streams) */
static void par_free(gpt2_par *p) {
    if (!p) return;
    bt_tp_free(p->tpc); bt_cp_free(p->cpc); bt_tp_free(p->cp_sum);
    for (int k = 0; k < 3; k++) if (p->stage_ev[k]) bt_event_destroy(p->stage_ev[k]);
    gpt2_free(&p->whole);
    free(p->pos); free(p->loc_in); free(p->loc_tg);
    free(p);
}
/* a batch's rows (full sequences, in tr->inputs / tr->targets) -> this rank's zig-zag tokens */
static void par_batch(trainer *tr, int B, bt_tensor **idx, bt_tensor **tgt) {
    gpt2_par *p = tr->par;
    int T = tr->o.T;
    if (p->cp == 1) return;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < p->Tl; j++) {
            p->loc_in[(size_t)b * p->Tl + j] = tr->inputs[(size_t)b * T + p->pos[j]];
            p->loc_tg[(size_t)b * p->Tl + j] = tr->targets[(size_t)b * T + p->pos[j]];
        }
    *idx = bt_from_data(p->loc_in, bt_shape2(B, p->Tl), BT_I32, tr->model.device);
    *tgt = bt_from_data(p->loc_tg, bt_shape2(B, p->Tl), BT_I32, tr->model.device);
}
static bt_comm *par_dpcp_comm(const gpt2_par *p) { return p->dpcp_comm; }
/* t (contiguous) := its sum over the tp group, in place */
static void par_tp_sum(const gpt2_par *p, bt_tensor *t) { bt_tp_reduce_grad(p->tpc, t); }
/* the data-parallel ranks: the loaders' world, the divisor of the global batch */
static int par_data_world(const trainer *tr) { return tr->par ? tr->par->dp : tr->dist ? tr->dist->world : 1; }
/* this rank's index among them (its loader's rank), and the first process of index d (bt_dist.h's
   mesh: rank = (dp_i cp + cp_i) tp + tp_i) */
static int par_data_rank(const gpt2_par *p) { return p->dp_rank; }
static int par_first_rank_of_data(const gpt2_par *p, int d) { return d * p->cp * p->tp; }
/* the DDP buckets over the dp x cp group (every rank of it holds the same shard), with ZeRO
   reducing to the owners of that group's ranges; a group of one (--tp 2 on two GPUs) reduces
   nothing, and ZeRO's range is then the whole buffer */
static void par_setup_grads(trainer *tr) {
    if (!tr->par->on_cpu && tr->par->dpcp_comm && tr->par->dpcp_comm->size > 1) setup_data_parallel(tr);
    else if (tr->zero) zero_setup(tr);
}
/* With sp each tp rank's gradients of the whole tensors come from its slice of the sequence: they
   are summed over tp after the step's backward passes, where the dp x cp reduction has put them.
   Both reductions are sums, so their order is free; only the place differs. ddp: all of the
   buffer's whole span. ZeRO-1: the buckets reduced the last micro-batch's gradients to the
   owners, so only the rank's range of flat_grad holds them (the rest is not read). ZeRO-2: every
   micro-batch was reduced to the owners and folded into grad_shard (fp32), flat_grad zeroed, so
   the sum is of grad_shard (of the sums over the micro-batches: linear, the same). The tp peers of
   a rank own the same range of buffers laid out alike, so each takes part with as many elements:
   the part of its range below the whole span's end (none: no collective on any of them). */
static bt_tensor *par_whole_grads(trainer *tr) {
    gpt2 *m = &tr->model;
    int64_t W = par_whole_numel(m);
    if (!tr->zero) return bt_narrow(m->flat_grad, 0, 0, W);
    return bt_narrow(zero_grads(tr), 0, 0, zero_whole_part(tr->shard_lo, tr->shard_hi, W));
}
/* after a step's backward passes: the sums the DDP buckets do not make. With sp the whole
   tensors' gradients over tp (the first span of the buffer, or of the ZeRO range: one collective,
   par_whole_grads); on CPUs the gradients' mean over cp */
static void par_reduce_grads(trainer *tr) {
    gpt2_par *p = tr->par;
    gpt2 *m = &tr->model;
    if (p->cp_sum) {
        bt_tp_reduce_grad(p->cp_sum, m->flat_grad);
        bt_mul_scalar_(m->flat_grad, 1.0 / p->cp);
    }
    if (p->sp && p->tpc) {
        bt_scope_begin();
        bt_tensor *g = par_whole_grads(tr);
        if (bt_numel(g) > 0) bt_tp_reduce_grad(p->tpc, g);
        bt_scope_end();
    }
}
/* t (fp32, one element) := its mean over the processes (the tp ranks hold equal values) */
static void par_mean(trainer *tr, bt_tensor *t) {
    gpt2_par *p = tr->par;
    if (!p->on_cpu) { bt_all_reduce(tr->dist->world_comm, bt_data_ptr(t), bt_data_ptr(t), 1, BT_F32, BT_RED_AVG, NULL); return; }
    if (!p->cp_sum) return;
    bt_tp_reduce_grad(p->cp_sum, t);
    bt_mul_scalar_(t, 1.0 / p->cp);
}
/* the global gradient norm: the shards' squares (the buffer past the whole tensors) summed over
   tp, the whole tensors' once */
static bt_tensor *par_grad_norm(trainer *tr) {
    gpt2 *m = &tr->model;
    if (m->tp <= 1) return bt_grad_norm(m->params, m->n_params);
    int64_t W = par_whole_numel(m);
    bt_tensor *sq = bt_sumsq(bt_narrow(m->flat_grad, 0, W, m->flat_numel - W));
    bt_tp_reduce_grad(m->par->tpc, sq);
    return bt_sqrt(bt_add(sq, bt_sumsq(bt_narrow(m->flat_grad, 0, 0, W))));
}
/* The shards of x (this tp rank's [flat_numel] buffer: the weights, or AdamW's m or v) gathered
   over the tp group into the whole model in the 1-GPU buffer's order: [num_params] on the
   device, owned by the caller, on rank 0 (NULL on the others). A collective; no host sync, so a
   checkpoint's copies of it overlap the next step. Memory: tp x flat_numel for the gather (every
   tp rank) and num_params for the whole (rank 0). */
static bt_tensor *par_gather_whole(trainer *tr, bt_tensor *x) {
    gpt2 *m = &tr->model;
    gpt2_par *p = tr->par;
    int old = bt_set_grad_enabled(0), rank0 = tr->dist->rank == 0;
    int64_t n = m->flat_numel, *off = (int64_t *)malloc(sizeof(int64_t) * (size_t)m->n_params);
    if (!off) bt_error("tp: out of host memory");
    gpt2_whole_offsets(&m->cfg, off);
    bt_scope_begin();
    bt_tensor *all = bt_tp_all_gather(p->tpc, bt_view(x, bt_shape2(1, n))), *whole = NULL;   /* [tp, n] */
    if (rank0) {
        whole = bt_keep(bt_empty(bt_shape1(m->num_params), BT_F32, m->device));
        for (int r = 0; r < p->tp; r++) par_shards_map(m, r, bt_select(all, 0, r), whole, off, 1);
    }
    bt_scope_end();
    free(off);
    bt_set_grad_enabled(old);
    return whole;
}
/* the model for the outputs (--save, --export-hf, samples): the model itself, or with tp > 1
   the shards gathered into a whole model on rank 0 (NULL on the others; made once, refreshed on
   each call); a collective */
static gpt2 *par_whole_model(trainer *tr) {
    gpt2 *m = &tr->model;
    gpt2_par *p = tr->par;
    if (m->tp <= 1) return m;
    bt_tensor *w = par_gather_whole(tr, m->flat);
    if (!w) return NULL;
    if (!p->whole.flat) gpt2_build(&p->whole, m->cfg, m->device);
    bt_copy_(p->whole.flat, w);   /* gpt2_build: flat_numel = num_params, no padding */
    bt_release(w);
    return &p->whole;
}
/* --resume or --init-from with tp > 1: the source loaded as one process would, into a whole
   model in host memory, and this rank's shard of it copied in */
static int par_source_load(trainer *tr, char *err, size_t errlen) {
    gpt2 *m = &tr->model, whole;
    gpt2_build(&whole, m->cfg, bt_cpu());
    int r = model_source_load_into(&whole, &tr->src, err, errlen);
    if (!r) {
        bt_scope_begin();
        bt_copy_(m->flat, par_shard_of_whole(m, whole.flat));
        bt_scope_end();
    }
    gpt2_free(&whole);
    return r;
}
/* Where a step's time goes, for async against sync TP: the compute stream's time of the last
   micro-batch's forward pass (with its collectives) and backward pass, from timed events read
   after the step's host sync. The communication async TP hides is the difference of the two
   runs' stage times. */
static void par_stage_mark(trainer *tr, int k) {
    gpt2_par *p = tr->par;
    if (p->stage_ev[k]) bt_event_record(p->stage_ev[k], bt_stream_current(tr->model.device));
}
/* the step's stage times, appended to a log line's extra members (", \"fwd_ms\": .., \"bwd_ms\": ..") */
static void par_stage_report(trainer *tr, char *json, size_t cap) {
    gpt2_par *p = tr->par;
    if (!p->stage_ev[0]) return;
    p->fwd_ms = bt_event_elapsed_ms(p->stage_ev[0], p->stage_ev[1]);
    p->bwd_ms = bt_event_elapsed_ms(p->stage_ev[1], p->stage_ev[2]);
    size_t len = strlen(json);
    snprintf(json + len, cap - len, ", \"fwd_ms\": %.3f, \"bwd_ms\": %.3f", p->fwd_ms, p->bwd_ms);
}
static void par_stage_print(const gpt2_par *p) {
    if (p->stage_ev[0]) printf(" | fwd %.1f ms bwd %.1f ms", p->fwd_ms, p->bwd_ms);
}
/* the run's layout, printed once */
static void par_describe(const gpt2_par *p, const train_opts *o) {
    printf("model parallel: dp %d x tp %d x cp %d%s%s", p->dp, p->tp, p->cp, p->sp ? ", sequence parallel" : "", o->async_tp ? ", async TP" : "");
    if (p->cp > 1) printf(", K/V by %s, %d tokens per rank", o->cp_comm ? o->cp_comm : "ring", p->Tl);
    if (strcmp(o->dp, "ddp")) printf(", %s: AdamW state%s in %d shards (dp x cp)", o->dp, !strcmp(o->dp, "zero2") ? " and gradients" : "", p->dp * p->cp);
    printf("%s\n", p->on_cpu ? " (CPU: collectives through the TCP store)" : "");
}

/* ============================================================================================
   9. a run: from the flags to the saved model
   ============================================================================================ */
static int train_main(train_opts *o) {
    char err[1024];
    /* several processes (--nproc, torchrun, srun, mpirun): one GPU each; rank 0 prints */
    bt_dist *dist = NULL;
    bt_dist_env env;
    if (bt_dist_env_read(&env)) { fprintf(stderr, "error: %s\n", bt_dist_error()); return 1; }
    /* tp or cp on CPUs: collectives through the TCP store (section 8) */
    int cpu_ranks = env.world > 1 && o->tp * o->cp > 1 && (!strcmp(o->device, "cpu") || bt_cuda_device_count() == 0);
    if (env.world > 1) {
        if (!strcmp(o->device, "cpu") && !cpu_ranks) { fprintf(stderr, "error: --device cpu with %d processes: data parallelism needs a GPU per process\n", env.world); return 1; }
        bt_dist_opts dop;
        memset(&dop, 0, sizeof dop);
        dop.nccl_timeout_s = o->nccl_timeout;
        dop.store_only = cpu_ranks;
        /* tp/cp issue hundreds of collectives a step on the critical path: blocking communicators
           spare each one the host's wait for ncclInProgress (bt_dist.h, FAULTS). --cuda-graph on
           captures the buckets' collectives from this thread: a blocking communicator enqueues
           them on it (a non-blocking one hands the launch to a thread of NCCL's, untried inside a
           capture). BT_NCCL_BLOCKING=0|1 overrides */
        dop.blocking_comms = o->tp * o->cp > 1 || o->cuda_graph == 1;
        if (getenv("BT_NCCL_BLOCKING")) dop.blocking_comms = atoi(getenv("BT_NCCL_BLOCKING")) != 0;
        dist = bt_dist_init(&dop);
        signal_launcher = getppid();   /* its copies of a Ctrl-C are not a second signal (section 7) */
        if (dist->rank != 0 && !freopen("/dev/null", "w", stdout)) fprintf(stderr, "warning: rank %d: stdout stays open\n", dist->rank);
        static char devname[16];
        snprintf(devname, sizeof devname, "cuda:%d", dist->device);
        if (!cpu_ranks) o->device = devname;
    }
    int world = dist ? dist->world : 1;
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

    /* the model: a checkpoint resumed (--resume), a Hugging Face file or a checkpoint's weights
       (--init-from), else -e: a preset or an llm.c model file */
    trainer tr;
    memset(&tr, 0, sizeof tr);
    gpt2_config cfg;
    const char *model = o->model ? o->model : (on_gpu ? "d12" : "s4");
    if (model_source_open(o, dist, &tr.src, &cfg, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    int from_file = 0;
    if (!tr.src.file || o->model) {   /* with --resume, -e names the model the checkpoint must hold */
        from_file = gpt2_config_from_preset(model, BT_GPT2_VOCAB, &cfg) != 0;
        if (from_file && gpt2_read_header(model, &cfg, err, sizeof err)) {
            usage(stderr);
            fprintf(stderr, "error: -e %s is neither a preset nor a readable model file: %s\n", model, err);
            return trainer_end(&tr, 1);
        }
    }
    if (tr.src.file) from_file = 0;
    if (tr.src.resume && o->B < 0) {  /* -b omitted: the checkpoint's, not one measured anew */
        int64_t b;
        if (!bt_ckpt_meta_get_i64(bt_ckpt_file_meta(tr.src.file), "train.B", &b) && b >= 1 && b <= (1 << 20)) o->B = (int)b;
    }
    if (resolve_opts(o, on_gpu, &cfg, err, sizeof err)) { usage(stderr); fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    if (check_outputs(o, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    if (par_check(o, &cfg, world, on_gpu, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    if (tr.src.resume && ckpt_check_fields(&tr.src, o, &cfg, world / (o->tp * o->cp), err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    if (resolve_graph(o, on_gpu, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }

    tr.o = *o;
    tr.dist = dist;
    if (load_tokenizer(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    tr.dt = !strcmp(o->precision, "bf16") ? BT_BF16 : BT_F32;
#ifdef BT_MLIR
    gpt2_use_mlir = o->mlir;
#endif
    bt_set_matmul_precision(!strcmp(o->precision, "tf32") ? BT_MATMUL_TF32 : BT_MATMUL_FP32);
    if (o->deterministic) bt_set_deterministic(1);
    tr.zero = !dist ? 0 : !strcmp(o->dp, "zero1") ? 1 : !strcmp(o->dp, "zero2") ? 2 : 0;
    if (o->tp * o->cp > 1) tr.par = par_open(o, dist, on_gpu);
    /* ZeRO's group: the processes, or with tp/cp the dp x cp ranks of this tp index (zero_comm) */
    int zworld = tr.par ? tr.par->dp * tr.par->cp : world;
    tr.shard = tr.zero ? bt_shard_numel(gpt2_local_numel(&cfg, o->tp, NULL), zworld, 64) : 0;
    int64_t pad_to = tr.zero ? tr.shard * zworld : 1;
    bt_dtype grad_dt = tr.zero == 2 ? tr.dt : BT_F32;
    if (o->tp > 1) gpt2_build_tp(&tr.model, cfg, dev, o->tp, tr.par->tp_rank, pad_to, grad_dt);
    else gpt2_build_padded(&tr.model, cfg, dev, pad_to, grad_dt);
    tr.model.par = tr.par;
    if (tr.src.resume) ckpt_import_tuning(&tr);   /* before any matmul chooses its algorithm */
    if (tr.src.file) {
        if (model_source_load(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
        if (!tr.src.resume) { bt_ckpt_close(tr.src.file); tr.src.file = NULL; }
    } else if (from_file) {
        if (gpt2_load_weights(&tr.model, model, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    } else gpt2_init(&tr.model, o->seed);
    bt_adamw_init(&tr.opt, tr.model.params, tr.model.n_params, 0.9f, 0.95f, 1e-8f, (float)o->weight_decay, (float)o->clip);
    if (o->recompute >= 0) bt_set_recompute(o->recompute);   /* before the probes: auto B counts with it */
    int auto_b = o->B < 0;
    if (o->B < 0) {                                  /* the GPU default: the largest that fits */
        if (o->total_batch < 0) o->total_batch = 524288;
        o->B = auto_micro_batch(&tr.model, o->T, o->total_batch / world, tr.dt);
        if (dist) {                                  /* every rank takes the smallest */
            bt_scope_begin();
            bt_tensor *b = bt_full(bt_shape1(1), o->B, BT_I32, dev);
            bt_all_reduce(dist->world_comm, bt_data_ptr(b), bt_data_ptr(b), 1, BT_I32, BT_RED_MIN, NULL);
            o->B = (int)bt_item(b);
            bt_scope_end();
        }
        if (resolve_opts(o, on_gpu, &cfg, err, sizeof err)) { usage(stderr); fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    }
    /* --recompute by default: none with the measured B (it fits by construction) or several processes */
    if (o->recompute < 0) o->recompute = on_gpu && !auto_b && world == 1 ? choose_recompute(&tr.model, o->B, o->T, tr.dt) : 0;
    bt_set_recompute(o->recompute);
    tr.o = *o;
    int dworld = par_data_world(&tr);   /* the data-parallel ranks: world / (tp cp) */
    if (o->total_batch % ((int64_t)o->B * o->T * dworld)) {
        fprintf(stderr, "error: -d %d is not a multiple of B*T*%s = %d*%d*%d\n", o->total_batch, tr.par ? "data-parallel ranks" : "processes", o->B, o->T, dworld);
        return trainer_end(&tr, 1);
    }
    if (tr.par) par_setup_grads(&tr);
    else if (dist) setup_data_parallel(&tr);
    if (dev.type == BT_GPU && getenv("BT_STEP_TIMES") && atoi(getenv("BT_STEP_TIMES")) > 0)   /* the step line gets fwd+bwd ms */
        for (int i = 0; i < 2; i++) tr.work_ev[i] = bt_event_create_timed(dev);
    int rank = dist ? dist->rank : 0, drank = tr.par ? tr.par->dp_rank : rank;
    /* every token of every shard is checked against the vocabulary now, not at step 5000 */
    tr.train = bt_loader_open(o->train_glob, o->B, o->T, drank, dworld, 1, o->seed);
    if (!tr.train || bt_loader_check_vocab(tr.train, cfg.V)) {
        fprintf(stderr, "error: train data (-i %s): %s\n%s", o->train_glob, bt_data_error(), o->given_i ? "" : "(make data builds the default shards)\n");
        return trainer_end(&tr, 1);
    }
    if (o->val_every > 0) {   /* -v 0: no validation, -j unused */
        /* a large (auto) micro-batch can outgrow a small validation set: halve B for validation */
        for (tr.val_B = o->B; !(tr.val = bt_loader_open(o->val_glob, tr.val_B, o->T, drank, dworld, 0, 0)) && tr.val_B > 1;) tr.val_B /= 2;
        if (!tr.val || bt_loader_check_vocab(tr.val, cfg.V)) {
            fprintf(stderr, "error: val data (-j %s): %s\n%s", o->val_glob, bt_data_error(), o->given_j ? "" : "(make data builds the default shards; -v 0 trains without validation)\n");
            return trainer_end(&tr, 1);
        }
    }
    tr.inputs = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * o->T);
    tr.targets = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * o->T);
    if (!tr.inputs || !tr.targets) { fprintf(stderr, "error: out of host memory for a batch of -b %d x -t %d tokens\n", o->B, o->T); return trainer_end(&tr, 1); }
    if (tr.src.resume && ckpt_restore(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    if (o->ckpt_dir && rank == 0 && !(tr.saver = bt_ckpt_saver_new(o->ckpt_dir, o->ckpt_keep))) {
        fprintf(stderr, "error: --ckpt-dir: %s\n", bt_ckpt_error()); return trainer_end(&tr, 1);
    }
    /* the staging of periodic snapshots (weights, m, v: fp32) is allocated before the first step,
       so no snapshot stalls on it (pinned memory takes ~0.3 s per GB to allocate) */
    if (tr.saver && o->ckpt_every > 0 && bt_ckpt_saver_reserve(tr.saver, (size_t)3 * sizeof(float) * (size_t)tr.model.num_params, on_gpu)) {
        fprintf(stderr, "error: --ckpt-every: %s\n", bt_ckpt_error()); return trainer_end(&tr, 1);
    }
    if (o->out_dir && rank == 0 && open_log(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }

    int accum = o->total_batch / (o->B * o->T * dworld);
    double flops_per_token = 6.0 * tr.model.num_params + 12.0 * cfg.L * cfg.C * o->T;
    double peak = on_gpu ? peak_flops(bt_device_name(dev), o->precision) : 0;   /* 0: MFU not shown */
    printf("model %s: L %d H %d C %d maxT %d V %d (padded %d), %.2fM parameters on %s\n", tr.src.file || tr.src.resume ? tr.src.path : model, cfg.L, cfg.H, cfg.C,
           cfg.maxT, cfg.V, cfg.Vp, tr.model.num_params / 1e6, on_gpu ? bt_device_name(dev) : "cpu");
    printf("B %d T %d, total batch %d tokens (%d micro-batches), %d steps, lr %.2e warmup %d, precision %s%s\n",
           o->B, o->T, o->total_batch, accum, o->steps, o->lr, o->warmup, o->precision, o->recompute ? ", recompute gelu" : "");
    if (on_gpu) printf("cuda graph: %s\n", !o->cuda_graph ? "off" : dist && dworld > 1
                       ? "on (each kind of micro-step, accumulating or communicating, is captured with its collectives after one eager run, then replayed)"
                       : "on (the micro-step is captured after one eager micro-step, then replayed)");
    if (dist && dworld > 1) printf("data parallel: %d processes (%s), %s, buckets of %d MB, gradients on the wire in %s%s\n", dworld,
                     bt_launcher_name(dist->env.launcher), o->dp, o->bucket_mb, o->comm_dtype,
                     tr.ddp && bt_ddp_get_stats(tr.ddp).copy_engines ? " (copy engines)" : " (NCCL)");
    if (tr.par) par_describe(tr.par, o);
    printf("train %zu batches/epoch (%s), ", bt_loader_num_batches(tr.train), o->train_glob);
    if (tr.val) printf("val %zu batches of %d rows (%s)\n", bt_loader_num_batches(tr.val), tr.val_B, o->val_glob);
    else printf("no validation (-v 0)\n");
    if (tr.src.resume) printf("resumed from %s after step %d\n", tr.src.path, tr.start_step);
    else if (tr.src.hf) printf("initialized from %s (Hugging Face GPT-2)\n", tr.src.path);
    fflush(stdout);

    double t_start = now_s(), last_val = NAN, last_loss = NAN;
    int rc = 0, step = tr.start_step, saved_step = tr.start_step, stopped = 0;
    for (; step < o->steps; step++) {
        if (stop_agreed(&tr)) { stopped = 1; break; }   /* SIGINT/SIGTERM: this many steps are done */
        double lr = bt_lr_cosine(step, o->warmup, o->steps, o->lr, o->lr * o->final_lr_frac);
        double t0 = now_s(), loss = 0, norm = 0;
        int updated = train_step(&tr, step, lr, &loss, &norm);
        last_loss = loss;
        double dt_s = now_s() - t0, tps = o->total_batch / dt_s;
        double mfu = peak > 0 ? 100.0 * flops_per_token * tps / world / peak : 0;   /* per GPU */
        int last = step == o->steps - 1, validated = updated && tr.val && ((step + 1) % o->val_every == 0 || last);
        double val = validated ? (last_val = evaluate(&tr)) : NAN;
        char extra[512] = "";        /* the log line's checkpoint figures */
        int snap = ckpt_due(&tr, step + 1) && (updated || o->skip_nonfinite);   /* not of a run about to stop */
        if (snap) {
            ckpt_snapshot(&tr, step + 1, loss);
            saved_step = step + 1;
            snprintf(extra, sizeof extra, ", \"ckpt_stall_ms\": %.3f, \"ckpt_stall_total_ms\": %.3f", tr.last_stall_ms, tr.total_stall_ms);
        }
        if (tr.par) par_stage_report(&tr, extra, sizeof extra);
        if (!o->quiet || last || validated || !updated || snap) {
            printf("step %4d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s", step + 1, o->steps, loss, lr, norm, dt_s * 1e3, tps);
            if (peak > 0) printf(" | MFU %.1f%%", mfu);
            printf(" | mem %.0f MiB", bt_alloc_stats(dev).allocated / 1048576.0);
            if (validated) printf(" | val %.4f", val);
            if (tr.ddp && tr.comm_ev[0] && tr.comm_early >= 0)
                printf(" | comm %.2f ms exposed, %d/%d buckets early", comm_exposed_ms(&tr), tr.comm_early, bt_ddp_get_stats(tr.ddp).buckets);
            if (tr.work_ev[0]) printf(" | fwd+bwd %.2f ms", bt_event_elapsed_ms(tr.work_ev[0], tr.work_ev[1]));
            if (snap) printf(" | checkpoint stall %.1f ms", tr.last_stall_ms);
            if (tr.par) par_stage_print(tr.par);
            printf("\n");
            if (last && tr.ddp) bt_ddp_print_trace(tr.ddp, stdout);
            fflush(stdout);
        }
        ckpt_report(&tr, extra, sizeof extra);
        log_json(&tr, step + 1, loss, lr, norm, dt_s * 1e3, tps, validated ? &val : NULL, extra);
        if (!updated && on_nonfinite_step(&tr, step + 1, loss)) { rc = 1; break; }
        gpt2 *sm = o->sample_every && (step + 1) % o->sample_every == 0 && !last ? (tr.par ? par_whole_model(&tr) : &tr.model) : NULL;
        if (sm && rank == 0) {   /* tp: the shards gathered on rank 0 (a collective: every rank took part) */
            printf("--- sample (greedy) ---\n");
            gpt2_sample(sm, tr.tok, o->gen_len, 1, 0, o->seed + (uint64_t)step, tr.dt);
            printf("--- sample (top-%d, temperature %.2f) ---\n", o->topk, o->temp);
            gpt2_sample(sm, tr.tok, o->gen_len, o->topk, o->temp, o->seed + (uint64_t)step, tr.dt);
            printf("---\n");
        }
    }
    if (rc) return trainer_end(&tr, rc);
    if (ckpt_finish(&tr, step, saved_step, last_loss)) return trainer_end(&tr, 1);
    if (stopped) printf("stopped by %s after step %d of %d%s\n", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", step, o->steps,
                        o->ckpt_dir ? "" : " (no --ckpt-dir: no checkpoint written)");
    if (tr.sg.captures) printf("cuda graph: %d captures\n", tr.sg.captures);
    printf("done: %d steps in %.1f s, ", step - tr.start_step, now_s() - t_start);
    if (tr.skipped) printf("%d updates skipped (not finite), ", tr.skipped);
    if (last_val == last_val) printf("final val loss %.4f, ", last_val);
    printf("peak memory %.0f MiB\n", bt_alloc_stats(dev).peak_allocated / 1048576.0);
    /* with --tp the outputs come from the shards gathered into a whole model on rank 0 (a collective) */
    gpt2 *out = tr.par && (o->save_path || o->export_hf || (o->gen_len > 0 && !stopped)) ? par_whole_model(&tr) : &tr.model;
    /* the model is saved before the last sample: a slow or interrupted sample cannot lose it */
    if (rank == 0 && o->save_path && gpt2_save(out, o->save_path, err, sizeof err)) { fprintf(stderr, "error: --save: %s\n", err); return trainer_end(&tr, 1); }
    if (o->save_path) printf("saved %s\n", o->save_path);
    if (rank == 0 && o->export_hf && hf_export(out, o->export_hf, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return trainer_end(&tr, 1); }
    if (o->export_hf) printf("exported %s/model.safetensors and config.json (Hugging Face GPT-2)\n", o->export_hf);
    if (o->gen_len > 0 && rank == 0 && !stopped && !stop_signal) {
        uint64_t seed = o->seed + (uint64_t)(o->steps > 0 ? o->steps - 1 : 0);
        printf("--- sample (greedy) ---\n");
        gpt2_sample(out, tr.tok, o->gen_len, 1, 0, seed, tr.dt);
        printf("--- sample (top-%d, temperature %.2f) ---\n", o->topk, o->temp);
        gpt2_sample(out, tr.tok, o->gen_len, o->topk, o->temp, seed, tr.dt);
        printf("---\n");
    }
    return trainer_end(&tr, 0);
}

#ifndef TRAIN_GPT2_NO_MAIN
int main(int argc, char **argv) {
    train_opts o;
    default_opts(&o);
    char err[1024];
    int r = parse_args(argc, argv, &o, err, sizeof err);
    if (r == 1) { usage(stdout); return 0; }
    if (r < 0) { usage(stderr); fprintf(stderr, "error: %s\n", err); return 2; }
#if !BT_DIST_NCCL
    if (o.nproc > 1 && o.tp * o.cp > 1) {   /* the store path (section 8) needs ranks started by a launcher */
        fprintf(stderr, "error: --nproc %d: this build has no NCCL; --tp/--cp on CPUs run as processes started with RANK, WORLD_SIZE, "
                "LOCAL_RANK and MASTER_ADDR set (torchrun, srun, mpirun or by hand: README)\n", o.nproc);
        return 2;
    }
#endif
    bt_dist_launch(o.nproc);   /* --nproc N: the parent supervises N ranks; each returns here */
    install_stop_signals();    /* SIGINT/SIGTERM: finish the step, checkpoint, exit 0; a second one: at once (section 7) */
    return train_main(&o);
}
#endif
