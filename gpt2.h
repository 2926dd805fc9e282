/* gpt2.h - GPT-2 built from the BluTrain-C ops: config, parameters, the forward pass, generation.

   USAGE
     #define GPT2_IMPLEMENTATION in *one* C/CUDA file (beside the bt_ implementations), then
     #include "gpt2.h". It needs bt_autograd.h (the ops) and bt_data.h (the tokenizer, for samples).

     gpt2 m;
     gpt2_build(&m, gpt2_config_make(12, 12, 768, 1024, BT_GPT2_VOCAB), bt_cuda_device(0));
     gpt2_init(&m, 1337);
     bt_scope_begin();
     bt_tensor *loss = gpt2_loss(&m, idx, targets, BT_BF16);   // idx, targets: [B, T] i32
     bt_backward(loss);                                         // gradients in m.flat_grad
     bt_scope_end();
     gpt2_free(&m);

   The model is GPT-2 (Radford et al. 2019) as llm.c and Hugging Face's GPT2LMHeadModel have it:
   token + position embeddings, L pre-layernorm blocks (causal self-attention, an MLP of width 4C
   with the tanh GELU), a final layernorm, the head tied to the token embedding. The backward pass
   is the autograd engine's (bt_autograd.h); each op's math is in bt_tensor.h. Files: gpt2_io.h
   (llm.c model files, Hugging Face), gpt2_parallel.h (tensor and context parallelism).

   FP8 (docs/fp8.md): gpt2_fp8_enable gives the model one scaling state per block linear (qkv,
   attention projection, MLP fc, MLP projection) in one flat f32 buffer; a training forward (grad
   mode on) then runs those four linears through bt_linear_fp8 (e4m3 forward, e5m2 gradients),
   and with fp8_head set the classifier through bt_linear_cross_entropy_fp8 (one state more),
   everything else as before. gpt2_fp8_update, once per optimizer step, rolls the states.

   SECTIONS (implementation)
     1. configuration and presets
     2. parameters: one flat fp32 buffer, init, llm.c's file order; the FP8 states
     3. the forward pass
     4. generation: a KV cache, sampling
*/
#ifndef GPT2_H
#define GPT2_H
#include "bt_autograd.h"
#include "bt_data.h"

/* ---- 1. configuration ---- */
typedef struct {
    int maxT;       /* context length */
    int V;          /* vocabulary */
    int Vp;         /* vocabulary padded to a multiple of 128: the logits' width (faster matmuls) */
    int L, H, C;    /* layers, heads, channels */
} gpt2_config;

typedef struct { const char *name; int L, H, C, maxT; } gpt2_preset;
extern const gpt2_preset gpt2_presets[];   /* d12 (124M) d24 d36 d48 (1.5B), long-context and CPU-sized ones */
extern const int gpt2_npresets;

BTDEF gpt2_config gpt2_config_make(int L, int H, int C, int maxT, int V);   /* Vp = V rounded up to 128 */
/* a preset by name, or "dLwC": L layers of width C (a multiple of 128), heads of 128, T 1024; -1: neither */
BTDEF int gpt2_config_from_preset(const char *name, int V, gpt2_config *cfg);
/* every field bounded and consistent, at most 2^40 parameters; err names src and the field as
   `field` spells it ("header field ", "gpt2.", "") */
BTDEF int gpt2_config_check(const gpt2_config *cfg, const char *src, const char *field, char *err, size_t errlen);
BTDEF int64_t gpt2_num_params(const gpt2_config *c);

/* ---- 2. the model ---- */
typedef struct {
    bt_tensor *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb;
    bt_tensor *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} gpt2_layer;

struct gpt2_split;
typedef struct gpt2 {
    gpt2_config cfg;
    int64_t num_params;            /* of the whole model (files, FLOPs), also when this is a tp shard */
    int64_t flat_numel;            /* the buffers' length: this rank's parameters, padded when sharded (ZeRO) */
    bt_tensor *flat, *flat_grad;   /* every parameter and its gradient, one buffer each */
    bt_tensor *flat_lowp;          /* a bf16 copy of flat for mixed precision, made on demand */
    uint32_t lowp_version;         /* flat's version when flat_lowp was last refreshed */
    bt_tensor *pos;                /* [maxT] i32 positions 0..maxT-1, made on first use */
    bt_tensor *wte, *wpe, *lnfw, *lnfb;
    gpt2_layer *layers;
    bt_tensor **params;            /* the leaves in buffer order, for the optimizer */
    int64_t *file_off;             /* [n_params]: each leaf's offset in llm.c's file order */
    int n_params;
    bt_device device;
    int mlir;                      /* fc bias + GELU through bt_mlir.h's fused kernel (BT_MLIR builds) */
    int tp, tp_rank;               /* tensor parallelism: this rank's shard of tp; 0 when whole */
    const struct gpt2_split *split;   /* tensor/context parallel forward (gpt2_parallel.h); NULL: whole */
    struct bt_par *par;            /* that split's mesh (bt_parallel.h) */
    bt_tensor *fp8_buf;            /* f32 [n_fp8, 3, 2 + history]: the FP8 states (gpt2_fp8_enable); NULL: none */
    bt_fp8_state *fp8;             /* [n_fp8]: layer l's linear k at l * GPT2_FP8_LINEARS + k, then the head's; views of fp8_buf */
    int n_fp8;                     /* the states: 4 L, + 1 with fp8_head */
    int fp8_head;                  /* set before gpt2_fp8_enable: the classifier's products in FP8 too (bt_linear_cross_entropy_fp8) */
    bt_unit_set units;             /* fsdp: the parameters from gathered units (units.src NULL: the leaves) */
} gpt2;
/* the block linears that run in FP8, in a layer's order in fp8_buf */
enum { GPT2_FP8_QKV, GPT2_FP8_PROJ, GPT2_FP8_FC, GPT2_FP8_FCPROJ, GPT2_FP8_LINEARS };

/* The parts of the model tensor or context parallelism replace (gpt2_parallel.h); a NULL member
   keeps the whole model's. embed, attention and mlp return their block's output without the
   residual; loss takes the final layernorm's output. */
typedef struct gpt2_split {
    bt_tensor *(*embed)(gpt2 *m, bt_tensor *idx, bt_dtype dt);
    bt_tensor *(*attention)(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt);
    bt_tensor *(*mlp)(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt);
    bt_tensor *(*loss)(gpt2 *m, bt_tensor *x, bt_tensor *targets, bt_dtype dt);
    void (*init)(gpt2 *m, uint64_t seed);
    void (*to_file_order)(const gpt2 *m, const float *mem, float *file);
    void (*from_file_order)(const gpt2 *m, const float *file, float *mem);
} gpt2_split;

/* One process: no padding, fp32 gradients. _padded: buffers of num_params rounded up to a
   multiple of pad_to (ZeRO's equal shards; the padding is zero), gradients in grad_dt. */
BTDEF void gpt2_build(gpt2 *m, gpt2_config cfg, bt_device dev);
BTDEF void gpt2_build_padded(gpt2 *m, gpt2_config cfg, bt_device dev, int64_t pad_to, bt_dtype grad_dt);
/* the next leaf of numel(shape) at *mark of the buffers, llm.c's file offset file_off (a builder's step) */
BTDEF bt_tensor *gpt2_leaf(gpt2 *m, int64_t *mark, int64_t file_off, bt_shape shape);
BTDEF void gpt2_free(gpt2 *m);
BTDEF void gpt2_init(gpt2 *m, uint64_t seed);
/* between the buffer's order (mem, flat_numel floats) and llm.c's file order (file, num_params) */
BTDEF void gpt2_to_file_order(const gpt2 *m, const float *mem, float *file);
BTDEF void gpt2_from_file_order(const gpt2 *m, const float *file, float *mem);
/* llm.c's stacked order: tensor kind k of layer l at its offsets (P_WTE .. P_LNFB) */
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB,
       P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, P_COUNT };
BTDEF void gpt2_param_sizes(const gpt2_config *c, int64_t *sz);
/* The FP8 linears (bt_linear_fp8; bt_tensor.h states the math): one state per block linear, all in
   fp8_buf on the model's device, 3 (2 + history) floats each (o NULL: bt_fp8_default_opts), set
   to the start (scales 1, histories 0, nothing primed); called again, it sets them back to the
   start (e.g. after forwards that only measured memory). With m->fp8_head set the classifier gets
   a state too (the last, index 4 L) and runs through bt_linear_cross_entropy_fp8. Refused with
   tensor or context parallelism (the split's linears are its own). A forward with grad mode off
   (validation, generation) keeps the bf16 linears: its casts would feed the amax history. */
BTDEF void gpt2_fp8_enable(gpt2 *m, const bt_fp8_opts *o);
/* after an optimizer step: bt_fp8_update of every state (the step's amaxes into the histories, the
   next scales); no host wait */
BTDEF void gpt2_fp8_update(gpt2 *m);
/* Fully sharded data parallelism (trainer.h's --dp fsdp over bt_parallel.h's bt_fsdp; bt_tensor.h's
   bt_units states the contract): the weights live as shards elsewhere and the forward gathers each
   unit just before it runs. The units in the buffer (elements from flat's start): unit u =
   [lo[u], lo[u + 1]), L + 2 of them (the count is returned; lo holds L + 3): 0 = wte and wpe, 1 + l
   = block l, L + 1 = the final layernorm. */
BTDEF int gpt2_units_bounds(const gpt2 *m, int64_t *lo);
/* the forward's parameters from u (NULL: the model's own leaves again) */
BTDEF void gpt2_set_units(gpt2 *m, const bt_units *u);

/* ---- 3. the forward pass (idx, targets: [B, T] i32 on the model's device) ---- */
BTDEF bt_tensor *gpt2_param_as(gpt2 *m, bt_tensor *p, bt_dtype dt);   /* p in the compute dtype */
BTDEF void gpt2_lowp_refresh(gpt2 *m, bt_dtype dt);   /* the bf16 copy after an update (outside a CUDA graph) */
/* copy is flat_lowp and was written from the weights' last change (an optimizer's update did it:
   bt_adamw_set_copy), so the next forward needs no cast; another tensor: nothing */
BTDEF void gpt2_lowp_written(gpt2 *m, const bt_tensor *copy);
BTDEF bt_tensor *gpt2_hidden(gpt2 *m, bt_tensor *idx, bt_dtype dt);   /* the final layernorm's output [B, T, C] */
BTDEF bt_tensor *gpt2_logits(gpt2 *m, bt_tensor *idx, bt_dtype dt);   /* [B, T, Vp] */
/* mean cross-entropy over the V real columns, the head fused into the loss (no [B, T, Vp] logits) */
BTDEF bt_tensor *gpt2_loss(gpt2 *m, bt_tensor *idx, bt_tensor *targets, bt_dtype dt);

/* ---- 4. generation ----
   The keys and values every layer computed for the positions seen so far: a new token then costs
   one position's forward pass, and n tokens O(n) matmul rows, not O(n^2).
       gpt2_kv_cache *c = gpt2_kv_cache_create(m, BT_F32);
       bt_tensor *logits = gpt2_forward_cached(m, c, prompt, n);   // [Vp] of the last position
       ... then one token at a time; gpt2_kv_cache_reset(c) starts a new sequence
       gpt2_kv_cache_free(c, m->cfg.L); */
typedef struct {
    bt_tensor **k, **v;     /* per layer [H, maxT, D] in the compute dtype: positions 0..len-1 filled */
    int len;
    bt_dtype dt;
} gpt2_kv_cache;
BTDEF gpt2_kv_cache *gpt2_kv_cache_create(gpt2 *m, bt_dtype dt);
BTDEF void gpt2_kv_cache_reset(gpt2_kv_cache *kv);
BTDEF void gpt2_kv_cache_free(gpt2_kv_cache *kv, int L);
/* the n tokens ids (host) at positions kv->len .. + n - 1: their keys and values appended, the
   last one's logits returned ([Vp], in the current scope); kv->len + n <= maxT */
BTDEF bt_tensor *gpt2_forward_cached(gpt2 *m, gpt2_kv_cache *kv, const int32_t *ids, int n);
/* greedy when topk <= 1 or temp <= 0, else top-k with temperature; r uniform in [0, 1) */
BTDEF int gpt2_sample_next(const float *logits, int V, int topk, double temp, double r);
/* n tokens after <|endoftext|>, printed as text (token ids without a tokenizer) */
BTDEF void gpt2_sample(gpt2 *m, bt_tokenizer *tok, int n, int topk, double temp, uint64_t seed, bt_dtype dt);
#endif /* GPT2_H */

/* ============================================================================================== */
#ifdef GPT2_IMPLEMENTATION
#ifndef GPT2_IMPLEMENTATION_DONE
#define GPT2_IMPLEMENTATION_DONE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef BT_MLIR
#include "bt_mlir.h"
#endif

/* ---- 1. configuration and presets ---- */
const gpt2_preset gpt2_presets[] = {
    {"d12", 12, 12, 768, 1024},        /* GPT-2 124M */
    {"d12_32k", 12, 12, 768, 32768},   /* its shape with a 32768-token position table (long contexts: --cp) */
    {"d48_64k", 48, 25, 1600, 65536},  /* 1.5B with a 65536-token table: T 65536 overflows one 141 GB GPU */
    {"d24", 24, 16, 1024, 1024},       /* 350M */
    {"d36", 36, 20, 1280, 1024},       /* 774M */
    {"d48", 48, 25, 1600, 1024},       /* 1558M */
    {"s6", 6, 6, 384, 256},            /* small ones for CPUs */
    {"s4", 4, 4, 128, 256},
    {"s2", 2, 2, 64, 128},
};
const int gpt2_npresets = (int)(sizeof gpt2_presets / sizeof gpt2_presets[0]);

BTDEF gpt2_config gpt2_config_make(int L, int H, int C, int maxT, int V) {
    gpt2_config c;
    c.L = L; c.H = H; c.C = C; c.maxT = maxT; c.V = V; c.Vp = (V + 127) / 128 * 128;
    return c;
}
BTDEF int gpt2_config_from_preset(const char *name, int V, gpt2_config *cfg) {
    for (int i = 0; i < gpt2_npresets; i++)
        if (!strcmp(name, gpt2_presets[i].name)) {
            *cfg = gpt2_config_make(gpt2_presets[i].L, gpt2_presets[i].H, gpt2_presets[i].C, gpt2_presets[i].maxT, V);
            return 0;
        }
    /* "dLwC": L layers of width C, heads of 128 (GPT-3's 6.7B is d32w4096, its 13B d40w5120) */
    int L, C, len = 0;
    if (sscanf(name, "d%dw%d%n", &L, &C, &len) == 2 && name[len] == '\0' && L >= 1 && L <= 4096 && C >= 128 && C <= 65536 &&
        C % 128 == 0) {
        *cfg = gpt2_config_make(L, C / 128, C, 1024, V);
        return 0;
    }
    return -1;
}
BTDEF void gpt2_param_sizes(const gpt2_config *c, int64_t *sz) {
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
BTDEF int64_t gpt2_num_params(const gpt2_config *c) {
    int64_t sz[P_COUNT], n = 0;
    gpt2_param_sizes(c, sz);
    for (int i = 0; i < P_COUNT; i++) n += sz[i];
    return n;
}
#define GPT2_MAX_PARAMS (1LL << 40)     /* 4 TiB of fp32: more than any host holds */
BTDEF int gpt2_config_check(const gpt2_config *cfg, const char *src, const char *field, char *err, size_t errlen) {
    static const struct { const char *name; int32_t hi; } bound[6] = {
        {"maxT", 1 << 20}, {"V", 1 << 24}, {"L", 4096}, {"H", 1 << 16}, {"C", 1 << 16}, {"Vp", 1 << 24}};
    const int v[6] = {cfg->maxT, cfg->V, cfg->L, cfg->H, cfg->C, cfg->Vp};
    for (int i = 0; i < 6; i++)
        if (v[i] < 1 || v[i] > bound[i].hi) {
            bt_msgf(err, errlen, "%s: %s%s = %d is out of range (1 to %d)", src, field, bound[i].name, v[i], bound[i].hi);
            return -1;
        }
    if (cfg->Vp < cfg->V || cfg->C % cfg->H) {
        bt_msgf(err, errlen, "%s: inconsistent config maxT %d V %d Vp %d L %d H %d C %d", src, cfg->maxT, cfg->V, cfg->Vp, cfg->L, cfg->H, cfg->C);
        return -1;
    }
    int64_t n = gpt2_num_params(cfg);   /* at most ~2^48 with the bounds above: no overflow */
    if (n > GPT2_MAX_PARAMS) {
        bt_msgf(err, errlen, "%s: L %d, C %d, Vp %d, maxT %d give %lld parameters, more than 2^40", src, cfg->L, cfg->C, cfg->Vp, cfg->maxT, (long long)n);
        return -1;
    }
    return 0;
}

/* ---- 2. parameters in one flat fp32 buffer, layer by layer ----
   The parameters and their gradients live in one flat buffer each, in forward order:
       wte, wpe, layer 0 (ln1w ln1b qkvw qkvb projw projb ln2w ln2b fcw fcb fcprojw fcprojb),
       layer 1, ..., lnfw, lnfb
   so that the backward pass finishes the gradients at the END of the buffer first: data
   parallelism sends those while the earlier layers still compute. (One process may move the
   gradients into one buffer per unit of gpt2_units_bounds, held only while written and read:
   bt_grads_lazy, bt_optim.h.) llm.c's model file stacks each
   of its 16 tensors over the layers instead (P_WTE ...); each leaf knows its offset there
   (file_off), and reading and writing a model file permutes between the two orders. */

/* a view of flat, its gradient the same span of flat_grad: the optimizer and the files see one
   buffer, the graph sees ordinary leaves */
BTDEF bt_tensor *gpt2_leaf(gpt2 *m, int64_t *mark, int64_t file_off, bt_shape shape) {
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
BTDEF void gpt2_build_padded(gpt2 *m, gpt2_config cfg, bt_device dev, int64_t pad_to, bt_dtype grad_dt) {
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
BTDEF void gpt2_build(gpt2 *m, gpt2_config cfg, bt_device dev) { gpt2_build_padded(m, cfg, dev, 1, BT_F32); }

BTDEF void gpt2_free(gpt2 *m) {
    bt_units_free(&m->units);
    for (int i = 0; i < m->n_params; i++) bt_release(m->params[i]);
    bt_release(m->flat); bt_release(m->flat_grad); bt_release(m->flat_lowp); bt_release(m->pos);
    bt_fp8_bank_free(&m->fp8, &m->fp8_buf, m->n_fp8);
    free(m->params); free(m->file_off); free(m->layers);
    memset(m, 0, sizeof *m);
}

/* the FP8 states: 4 L of them (and the head's), each a [3, 2 + history] slice of one buffer (a
   checkpoint saves the buffer whole); with the default history 16, 216 bytes per linear */
BTDEF void gpt2_fp8_enable(gpt2 *m, const bt_fp8_opts *o) {
    if (m->split) bt_error("gpt2_fp8_enable: FP8 linears with tensor or context parallelism are not supported (--precision fp8 with --tp or --cp)");
    int n = m->cfg.L * GPT2_FP8_LINEARS + (m->fp8_head != 0);
    if (m->fp8 && n != m->n_fp8) bt_error("gpt2_fp8_enable: the model has %d FP8 states, fp8_head asks for %d (set it before the first enable)", m->n_fp8, n);
    bt_fp8_bank_reset(&m->fp8, &m->fp8_buf, n, o, m->device, "gpt2_fp8_enable");
    m->n_fp8 = n;
}
BTDEF void gpt2_fp8_update(gpt2 *m) {
    if (m->fp8) bt_fp8_bank_update(m->fp8, m->fp8_buf, m->n_fp8);
}

BTDEF void gpt2_to_file_order(const gpt2 *m, const float *mem, float *file) {
    if (m->split && m->split->to_file_order) { m->split->to_file_order(m, mem, file); return; }
    for (int i = 0; i < m->n_params; i++)
        memcpy(file + m->file_off[i], mem + (m->params[i]->offset - m->flat->offset), sizeof(float) * (size_t)bt_numel(m->params[i]));
}
BTDEF void gpt2_from_file_order(const gpt2 *m, const float *file, float *mem) {
    if (m->split && m->split->from_file_order) { m->split->from_file_order(m, file, mem); return; }
    for (int i = 0; i < m->n_params; i++)
        memcpy(mem + (m->params[i]->offset - m->flat->offset), file + m->file_off[i], sizeof(float) * (size_t)bt_numel(m->params[i]));
}

/* the file-order offset of leaf p */
static int64_t gpt2__file_offset(const gpt2 *m, const bt_tensor *p) {
    for (int i = 0; i < m->n_params; i++) if (m->params[i] == p) return m->file_off[i];
    bt_error("gpt2: %p is not a parameter of the model", (const void *)p);
    return 0;
}
/* GPT-2's init: weights and embeddings N(0, 0.02), the two residual projections N(0, 0.02 /
   sqrt(2 L)) so the residual stream's variance does not grow with depth, biases 0, layernorm
   gains 1. Each tensor draws from Philox at its offset in llm.c's file order, so a seed gives the
   same weights on any device and in any buffer layout. */
BTDEF void gpt2_init(gpt2 *m, uint64_t seed) {
    if (m->split && m->split->init) { m->split->init(m, seed); return; }
    int old = bt_set_grad_enabled(0);
    double std = 0.02, res_std = 0.02 / sqrt(2.0 * m->cfg.L);
    bt_normal_(m->wte, 0, std, seed, (uint64_t)gpt2__file_offset(m, m->wte));
    bt_normal_(m->wpe, 0, std, seed, (uint64_t)gpt2__file_offset(m, m->wpe));
    for (int l = 0; l < m->cfg.L; l++) {
        gpt2_layer *y = &m->layers[l];
        bt_tensor *w[2] = {y->qkvw, y->fcw}, *r[2] = {y->projw, y->fcprojw};
        for (int i = 0; i < 2; i++) bt_normal_(w[i], 0, std, seed, (uint64_t)gpt2__file_offset(m, w[i]));
        for (int i = 0; i < 2; i++) bt_normal_(r[i], 0, res_std, seed, (uint64_t)gpt2__file_offset(m, r[i]));
        bt_fill_(y->ln1w, 1.0); bt_fill_(y->ln2w, 1.0);
    }
    bt_fill_(m->lnfw, 1.0);
    bt_set_grad_enabled(old);
}

/* ---- 3. the forward pass ---- */
/* Parameter p as dtype dt (the compute dtype). For bf16 the whole flat buffer is cast once after
   each change of the fp32 weights (the optimizer step bumps their version), and each parameter is
   a view of that copy; the cast node's backward returns fp32 gradients to the leaves. */
BTDEF void gpt2_lowp_refresh(gpt2 *m, bt_dtype dt) {
    if (dt == m->flat->dtype) return;
    if (m->flat->storage->halves) {   /* the weights in two halves: the copy is their high halves, always current */
        if (dt != BT_BF16 || !m->flat_lowp || m->flat_lowp->storage != m->flat->storage)
            bt_error("gpt2: the weights are held in two halves (bt_adamw_split): they compute in bf16 (their high halves), not %s",
                     bt_dtype_name(dt));
        return;
    }
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
BTDEF void gpt2_lowp_written(gpt2 *m, const bt_tensor *copy) {
    if (copy && copy == m->flat_lowp) m->lowp_version = m->flat->storage->version;
}
/* ---- fsdp's units: the parameters of a unit are views of its gathered tensor ----
   Memory per rank: the shards, plus the units gathered now. Unit 0 (wte, wpe: the tied head
   needs wte at the end) lives through the whole pass; each block is gathered inside its
   bt_checkpoint region (gpt2__block forces BT_RECOMPUTE_BLOCK under fsdp), so the first run's
   copy goes at the region's end and the backward's remake gathers it again, as a leaf whose
   gradient hook reduce-scatters the block's gradient as soon as the region's backward is done:
   one block's full parameters at a time (plus unit 0), for one more forward of the blocks. */
BTDEF int gpt2_units_bounds(const gpt2 *m, int64_t *lo) {
    int L = m->cfg.L;
    int64_t base = m->flat->offset;
    lo[0] = 0;
    for (int l = 0; l < L; l++) lo[1 + l] = m->layers[l].ln1w->offset - base;
    lo[L + 1] = m->lnfw->offset - base;
    lo[L + 2] = m->lnfb->offset - base + bt_numel(m->lnfb);
    return L + 2;
}
BTDEF void gpt2_set_units(gpt2 *m, const bt_units *u) {
    if (u && m->split) bt_error("gpt2: fsdp's units with tensor or context parallelism (not supported)");
    int64_t *lo = (int64_t *)malloc(sizeof(int64_t) * ((size_t)m->cfg.L + 3));
    if (!lo) bt_error("gpt2: out of host memory");
    int n = gpt2_units_bounds(m, lo);
    bt_units_set(&m->units, u, lo, n, "gpt2");
    free(lo);
}
BTDEF bt_tensor *gpt2_param_as(gpt2 *m, bt_tensor *p, bt_dtype dt) {
    if (m->units.src) return bt_units_param(&m->units, p, m->flat);
    if (dt == p->dtype) {
        if (m->flat->storage->halves) bt_error("gpt2: a forward in %s, but the weights are held in two halves (bt_adamw_split): bf16 only",
                                               bt_dtype_name(dt));
        return p;
    }
    gpt2_lowp_refresh(m, dt);
    return bt_cast_cached(p, bt_view(bt_narrow(m->flat_lowp, 0, p->offset, bt_numel(p)), bt_shape_of(p)));
}
#define GPT2_P(x) gpt2_param_as(m, (x), dt)

/* r + x w^T + b (r NULL: without): through bt_linear_fp8 / bt_linear_add_fp8 with the scaling state
   st, or with st NULL bt_linear / bt_linear_add (the residual add rides the GEMM on a GPU either way) */
static bt_tensor *gpt2__linear(bt_fp8_state *st, bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *r) {
    if (st) return r ? bt_linear_add_fp8(x, w, b, r, st) : bt_linear_fp8(x, w, b, st);
    return r ? bt_linear_add(x, w, b, r) : bt_linear(x, w, b);
}
/* layer y's linear k (GPT2_FP8_QKV ..): its FP8 state when f8, else NULL (the bf16 linear). f8 is
   decided once per forward (gpt2_hidden: FP8 states and grad mode on) and travels with the
   recompute regions, whose first forward runs with grad mode off and whose remake with it on. */
#define GPT2_F8(k) (f8 ? &m->fp8[(y - m->layers) * GPT2_FP8_LINEARS + (k)] : NULL)

/* x + causal self-attention of one block's h: [B, T, C] -> [B, T, C]. One projection makes q, k, v
   side by side ([B, T, 3C]); the attention op reads the heads out of it in place; the residual add
   rides the output projection. */
static bt_tensor *gpt2__attention(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_tensor *x, bt_dtype dt, int f8) {
    if (m->split && m->split->attention) return bt_add(x, m->split->attention(m, y, h, dt));
    bt_tensor *qkv = gpt2__linear(GPT2_F8(GPT2_FP8_QKV), h, GPT2_P(y->qkvw), GPT2_P(y->qkvb), NULL);
    return gpt2__linear(GPT2_F8(GPT2_FP8_PROJ), bt_attention_qkv(qkv, m->cfg.H), GPT2_P(y->projw), GPT2_P(y->projb), x);
}
/* x + the MLP of h (bias + GELU and the residual add ride the GEMMs: bt_mlp_gelu). FP8:
   bt_mlp_gelu_fp8, GELU and its derivative inside the casts of the second linear's input and the
   first one's gradient, the residual in the second product */
static bt_tensor *gpt2__mlp(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_tensor *x, bt_dtype dt, int f8) {
    if (m->split && m->split->mlp) return bt_add(x, m->split->mlp(m, y, h, dt));
    if (f8)
        return bt_mlp_gelu_fp8(h, GPT2_P(y->fcw), GPT2_P(y->fcb), GPT2_P(y->fcprojw), GPT2_P(y->fcprojb), x, GPT2_F8(GPT2_FP8_FC),
                               GPT2_F8(GPT2_FP8_FCPROJ));
#ifdef BT_MLIR
    if (m->mlir) {   /* the fc bias + GELU as one fused kernel after a matmul without bias: bt_linear + bt_gelu's math */
        bt_tensor *u = bt_mlir_bias_gelu(bt_linear(h, GPT2_P(y->fcw), NULL), GPT2_P(y->fcb));
        return bt_linear_add(u, GPT2_P(y->fcprojw), GPT2_P(y->fcprojb), x);
    }
#endif
    return bt_mlp_gelu(h, GPT2_P(y->fcw), GPT2_P(y->fcb), GPT2_P(y->fcprojw), GPT2_P(y->fcprojb), x);
}
/* positions 0..T-1 on the model's device: a view of one tensor made once, so that a forward pass
   uploads nothing (a CUDA graph cannot capture an upload) */
static bt_tensor *gpt2__positions(gpt2 *m, int64_t T) {
    if (!m->pos) {
        bt_scope_begin();
        m->pos = bt_keep(bt_arange(m->cfg.maxT, BT_I32, m->device));
        bt_scope_end();
    }
    return bt_narrow(m->pos, 0, 0, T);
}
/* The block's two sublayers as bt_checkpoint regions (bt_autograd.h): each takes the residual
   stream x and returns x + sublayer(layernorm(x)), so both consumers of x are inside (the remade
   backward gives the same bits). The parameters are reached through the layer: GPT2_P's casts are
   made inside, their nodes remade with the rest. */
typedef struct { gpt2 *m; gpt2_layer *y; bt_dtype dt; int no_gelu, f8, unit; } gpt2__region;
static bt_tensor *gpt2__attn_region(void *ctx, bt_tensor **in) {
    gpt2__region *r = (gpt2__region *)ctx;
    gpt2 *m = r->m; gpt2_layer *y = r->y; bt_dtype dt = r->dt;
    int f8 = r->f8;
    if (!(m->split && m->split->attention)) {
        /* qkv through bt_layernorm_linear (ln1's output remade under NORM), or bt_layernorm_linear_fp8
           (ln1's kernel writes the e4m3 output: no bf16 output) */
        bt_tensor *qkv = f8 ? bt_layernorm_linear_fp8(in[0], GPT2_P(y->ln1w), GPT2_P(y->ln1b), 1e-5, GPT2_P(y->qkvw), GPT2_P(y->qkvb),
                                                      GPT2_F8(GPT2_FP8_QKV))
                            : bt_layernorm_linear(in[0], GPT2_P(y->ln1w), GPT2_P(y->ln1b), 1e-5, GPT2_P(y->qkvw), GPT2_P(y->qkvb));
        return gpt2__linear(GPT2_F8(GPT2_FP8_PROJ), bt_attention_qkv(qkv, m->cfg.H), GPT2_P(y->projw), GPT2_P(y->projb), in[0]);
    }
    return gpt2__attention(m, y, bt_layernorm(in[0], GPT2_P(y->ln1w), GPT2_P(y->ln1b), 1e-5), in[0], dt, f8);
}
/* no_gelu: GELU's own recompute off. Inside a remade region it gains nothing (the region's backward
   holds the re-run's gelu(h), one layer's, alive during that layer's backward only); next to one
   (attn with gelu) it changed gradient bits on an H200 (254K of the d12 test's elements; not on
   the CPU; the cause is not yet found), so with any region the MLP keeps gelu(h) */
static bt_tensor *gpt2__mlp_region(void *ctx, bt_tensor **in) {
    gpt2__region *r = (gpt2__region *)ctx;
    gpt2 *m = r->m; gpt2_layer *y = r->y; bt_dtype dt = r->dt;
    int old = r->no_gelu ? bt_set_recompute(bt_get_recompute() & ~BT_RECOMPUTE_GELU) : 0;
    int f8 = r->f8, plain = !(m->split && m->split->mlp);
#ifdef BT_MLIR
    plain = plain && !m->mlir;
#endif
    bt_tensor *out = plain && f8   /* ln2's kernel writes the e4m3 output: no bf16 output */
        ? bt_layernorm_mlp_gelu_fp8(in[0], GPT2_P(y->ln2w), GPT2_P(y->ln2b), 1e-5, GPT2_P(y->fcw), GPT2_P(y->fcb), GPT2_P(y->fcprojw),
                                    GPT2_P(y->fcprojb), in[0], GPT2_F8(GPT2_FP8_FC), GPT2_F8(GPT2_FP8_FCPROJ))
        : plain   /* the fused MLP, which with GELU's recompute also remakes ln2's output */
        ? bt_layernorm_mlp_gelu(in[0], GPT2_P(y->ln2w), GPT2_P(y->ln2b), 1e-5, GPT2_P(y->fcw), GPT2_P(y->fcb), GPT2_P(y->fcprojw),
                                GPT2_P(y->fcprojb), in[0])
        : gpt2__mlp(m, y, bt_layernorm(in[0], GPT2_P(y->ln2w), GPT2_P(y->ln2b), 1e-5), in[0], dt, f8);
    if (r->no_gelu) bt_set_recompute(old);
    return out;
}
static bt_tensor *gpt2__block_region(void *ctx, bt_tensor **in) {
    gpt2__region *r = (gpt2__region *)ctx;
    bt_units_begin(&r->m->units, r->unit, r->dt);   /* fsdp: the block's parameters, here and in the remake */
    bt_tensor *x1 = gpt2__attn_region(ctx, in), *out = gpt2__mlp_region(ctx, &x1);
    bt_units_end(&r->m->units, r->unit);
    return out;
}
/* One block under the recompute flags (bt_set_recompute). What each keeps for the backward per
   layer, in units of B*T*C activations (the compute dtype), beside small per-row statistics
   (layernorm's mean and rstd, attention's logsumexp: B*T*(2 + H) floats):
     none   16: ln1's out 1, qkv 3, attention's out 1, x1 1; ln2's out 1, h 4, gelu(h) 4, x2 1
     NORM   14: ln1's out remade from x, ln2's from x1 (the GPU's bf16 and fp32 paths; not FP8's)
     GELU   11: gelu(h) remade from h, ln2's out from x1 (the fused GPU MLP; the CPU path keeps them);
                FP8 (bt_mlp_gelu_fp8): the e4m3 gelu(h)^T remade from h, 2 units less
     ATTN   11: x1 and the MLP's 10; ln1's out, qkv, attention's out remade
     MLP     7: the attention's 6 and x2; ln2's out, h, gelu(h) remade
     BLOCK   1: x2 alone (the next block's input; this block's input is the last one's x2)
   (ATTN | MLP keeps 2: x1 and x2 for the same work as BLOCK.) The remade region's activations are
   alive during its own backward only: one layer's worth on top. The work remade: ATTN about 4C^2
   + 2TC multiply-adds per token (qkv, projection, attention), MLP 8C^2, BLOCK both: one more
   forward of the blocks, ~1/3 more per step for GPT-2 (forward 1, backward 2). */
static bt_tensor *gpt2__block(gpt2 *m, gpt2_layer *y, bt_tensor *x, bt_dtype dt, int rc, int f8) {
    if (m->units.src) rc |= BT_RECOMPUTE_BLOCK;   /* fsdp gathers a block inside its region (bt_units) */
    gpt2__region r = {m, y, dt, (rc & (BT_RECOMPUTE_ATTN | BT_RECOMPUTE_MLP | BT_RECOMPUTE_BLOCK)) != 0, f8, 1 + (int)(y - m->layers)};
    if (m->units.src && !bt_grad_enabled()) return bt_units_run(gpt2__block_region, &r, x);   /* the block's unit goes at its end */
    if (rc & BT_RECOMPUTE_BLOCK) return bt_checkpoint(gpt2__block_region, &r, sizeof r, &x, 1);
    x = rc & BT_RECOMPUTE_ATTN ? bt_checkpoint(gpt2__attn_region, &r, sizeof r, &x, 1) : gpt2__attn_region(&r, &x);
    return rc & BT_RECOMPUTE_MLP ? bt_checkpoint(gpt2__mlp_region, &r, sizeof r, &x, 1) : gpt2__mlp_region(&r, &x);
}
#define GPT2_RECOMPUTE_REGIONS (BT_RECOMPUTE_ATTN | BT_RECOMPUTE_MLP | BT_RECOMPUTE_BLOCK)
/* keep0: unit 0 (fsdp) stays gathered for the tied head (the caller ends it) */
static bt_tensor *gpt2__hidden(gpt2 *m, bt_tensor *idx, bt_dtype dt, int keep0) {
    int rc = bt_get_recompute();
    if ((rc & GPT2_RECOMPUTE_REGIONS) && m->split && (m->split->attention || m->split->mlp))
        bt_error("gpt2: recompute attn, mlp or block (flags %d) with tensor or context parallelism: the split blocks' "
                 "collectives are not remade in the backward; use none or gelu", rc);
    bt_units_begin(&m->units, 0, dt);
    bt_tensor *x = m->split && m->split->embed ? m->split->embed(m, idx, dt)
                 : bt_add(bt_embedding(GPT2_P(m->wte), idx), bt_embedding(GPT2_P(m->wpe), gpt2__positions(m, idx->shape[1])));
    if (!keep0) bt_units_end(&m->units, 0);
    int f8 = m->fp8 && bt_grad_enabled();   /* a training forward: the FP8 linears */
    for (int l = 0; l < m->cfg.L; l++) {   /* a scope per block: what no node saved goes at the block's end */
        bt_scope_begin();
        x = bt_scope_return(gpt2__block(m, &m->layers[l], x, dt, rc, f8));
    }
    bt_units_begin(&m->units, m->cfg.L + 1, dt);
    x = bt_layernorm(x, GPT2_P(m->lnfw), GPT2_P(m->lnfb), 1e-5);
    bt_units_end(&m->units, m->cfg.L + 1);
    return x;
}
BTDEF bt_tensor *gpt2_hidden(gpt2 *m, bt_tensor *idx, bt_dtype dt) { return gpt2__hidden(m, idx, dt, 0); }
/* weight tying: the head is wte */
BTDEF bt_tensor *gpt2_logits(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    bt_tensor *h = gpt2__hidden(m, idx, dt, 1);   /* before GPT2_P(wte): fsdp gathers unit 0 there */
    bt_tensor *z = bt_linear(h, GPT2_P(m->wte), NULL);
    bt_units_end(&m->units, 0);
    return z;
}
BTDEF bt_tensor *gpt2_loss(gpt2 *m, bt_tensor *idx, bt_tensor *targets, bt_dtype dt) {
    if (m->split && m->split->loss) return m->split->loss(m, gpt2_hidden(m, idx, dt), targets, dt);
    bt_tensor *h = gpt2__hidden(m, idx, dt, 1);   /* before GPT2_P(wte): fsdp gathers unit 0 there */
    bt_tensor *loss = m->fp8 && m->fp8_head && bt_grad_enabled()
                    ? bt_linear_cross_entropy_fp8(h, GPT2_P(m->wte), targets, m->cfg.V, -1, &m->fp8[m->n_fp8 - 1])
                    : bt_linear_cross_entropy(h, GPT2_P(m->wte), targets, m->cfg.V, -1);
    bt_units_end(&m->units, 0);
    return loss;
}

/* ---- 4. generation: a KV cache, sampling ---- */
BTDEF gpt2_kv_cache *gpt2_kv_cache_create(gpt2 *m, bt_dtype dt) {
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
BTDEF void gpt2_kv_cache_reset(gpt2_kv_cache *kv) { kv->len = 0; }
BTDEF void gpt2_kv_cache_free(gpt2_kv_cache *kv, int L) {
    if (!kv) return;
    for (int l = 0; l < L; l++) { bt_release(kv->k[l]); bt_release(kv->v[l]); }
    free(kv->k); free(kv->v); free(kv);
}
/* attention of n new positions (h [1, n, C]) over the len cached ones and themselves: their
   keys and values are appended to the cache, then softmax(q K^T / sqrt(D) + mask) V with K, V
   the cache's first len + n rows; mask (NULL when n = 1) hides the later new positions */
static bt_tensor *gpt2__attention_cached(gpt2 *m, gpt2_layer *y, bt_tensor *h, gpt2_kv_cache *kv, int l, bt_tensor *mask) {
    int64_t n = h->shape[1], C = m->cfg.C, H = m->cfg.H, D = C / H, T = kv->len + n;
    bt_dtype dt = kv->dt;
    bt_tensor *qkv = bt_linear(h, GPT2_P(y->qkvw), GPT2_P(y->qkvb));   /* [1, n, 3C] */
    const int heads_first[3] = {1, 0, 2};
    bt_tensor *part[3];                                                 /* q, k, v as [H, n, D] */
    for (int i = 0; i < 3; i++) part[i] = bt_permute(bt_reshape(bt_narrow(qkv, 2, i * C, C), bt_shape3(n, H, D)), heads_first);
    bt_copy_(bt_narrow(kv->k[l], 1, kv->len, n), part[1]);
    bt_copy_(bt_narrow(kv->v[l], 1, kv->len, n), part[2]);
    bt_tensor *s = bt_scale(bt_matmul_t(part[0], bt_narrow(kv->k[l], 1, 0, T), 0, 1), 1.0 / sqrt((double)D));   /* [H, n, T] */
    if (mask) s = bt_add(s, mask);
    bt_tensor *o = bt_matmul(bt_softmax(s), bt_narrow(kv->v[l], 1, 0, T));                                     /* [H, n, D] */
    o = bt_reshape(bt_permute(o, heads_first), bt_shape3(1, n, C));
    return bt_linear(o, GPT2_P(y->projw), GPT2_P(y->projb));
}
BTDEF bt_tensor *gpt2_forward_cached(gpt2 *m, gpt2_kv_cache *kv, const int32_t *ids, int n) {
    const gpt2_config *c = &m->cfg;
    bt_dtype dt = kv->dt;
    if (n < 1 || kv->len + n > c->maxT)
        bt_error("gpt2_forward_cached: %d new positions after %d cached ones do not fit the context of %d", n, kv->len, c->maxT);
    int old = bt_set_grad_enabled(0);
    bt_tensor *idx = bt_from_data(ids, bt_shape2(1, n), BT_I32, m->device);
    bt_tensor *pos = bt_narrow(bt_arange(kv->len + n, BT_I32, m->device), 0, kv->len, n);
    bt_tensor *x = bt_add(bt_embedding(GPT2_P(m->wte), idx), bt_embedding(GPT2_P(m->wpe), pos));
    bt_tensor *mask = n > 1 ? bt_causal_mask(n, kv->len, dt, m->device) : NULL;
    for (int l = 0; l < c->L; l++) {
        gpt2_layer *y = &m->layers[l];
        x = bt_add(x, gpt2__attention_cached(m, y, bt_layernorm(x, GPT2_P(y->ln1w), GPT2_P(y->ln1b), 1e-5), kv, l, mask));
        x = gpt2__mlp(m, y, bt_layernorm(x, GPT2_P(y->ln2w), GPT2_P(y->ln2b), 1e-5), x, dt, 0);
    }
    kv->len += n;
    x = bt_layernorm(bt_select(bt_select(x, 0, 0), 0, n - 1), GPT2_P(m->lnfw), GPT2_P(m->lnfb), 1e-5);   /* [C] */
    bt_tensor *logits = bt_matmul(GPT2_P(m->wte), x);                                                     /* [Vp] */
    bt_set_grad_enabled(old);
    return logits;
}
BTDEF int gpt2_sample_next(const float *logits, int V, int topk, double temp, double r) {
    int best = 0;
    for (int j = 1; j < V; j++) if (logits[j] > logits[best]) best = j;
    if (topk <= 1 || temp <= 0) return best;
    if (topk > V) topk = V;
    int *top = (int *)malloc(sizeof(int) * topk);
    if (!top) bt_error("gpt2_sample_next: out of host memory");
    int n = 0;
    for (int j = 0; j < V; j++) {                      /* insertion into the k best, descending */
        if (n == topk && logits[j] <= logits[top[n - 1]]) continue;
        int i = n < topk ? n++ : n - 1;
        while (i > 0 && logits[top[i - 1]] < logits[j]) { top[i] = top[i - 1]; i--; }
        top[i] = j;
    }
    double *p = (double *)malloc(sizeof(double) * n), sum = 0;
    if (!p) bt_error("gpt2_sample_next: out of host memory");
    for (int i = 0; i < n; i++) { p[i] = exp((logits[top[i]] - logits[top[0]]) / temp); sum += p[i]; }
    int pick = n > 0 ? top[n - 1] : best;
    double acc = 0;
    for (int i = 0; i < n; i++) { acc += p[i] / sum; if (r < acc) { pick = top[i]; break; } }
    free(top); free(p);
    return pick;
}
/* When the context fills up, the cache restarts from the last maxT/2 tokens. */
BTDEF void gpt2_sample(gpt2 *m, bt_tokenizer *tok, int n, int topk, double temp, uint64_t seed, bt_dtype dt) {
    const gpt2_config *c = &m->cfg;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    float *row = (float *)malloc(sizeof(float) * (size_t)c->Vp);
    if (!ids || !row) bt_error("gpt2_sample: out of host memory");
    gpt2_kv_cache *kv = gpt2_kv_cache_create(m, dt);
    int len = 1, fed = 0;                  /* ids[0..fed) are in the cache */
    ids[0] = BT_EOT < c->V ? BT_EOT : 0;   /* a model with a smaller vocabulary starts from token 0 */
    for (int s = 0; s < n; s++) {
        if (kv->len + (len - fed) > c->maxT) { gpt2_kv_cache_reset(kv); fed = len - (c->maxT > 1 ? c->maxT / 2 : 1); }
        bt_scope_begin();
        bt_to_host(gpt2_forward_cached(m, kv, ids + fed, len - fed), row, BT_F32);
        bt_scope_end();
        fed = len;
        ids[len++] = gpt2_sample_next(row, c->V, topk, temp, bt_philox_uniform(seed, (uint64_t)s));
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
#undef GPT2_P
#undef GPT2_F8
#endif /* GPT2_IMPLEMENTATION_DONE */
#endif /* GPT2_IMPLEMENTATION */
