/* llama.h - Llama (2, 3, 3.1, 3.2) built from the BluTrain-C ops: config, presets, parameters,
   the forward pass, KV-cache generation. v0.3 (v0.2: llama_build_padded and flat_numel for ZeRO;
   the CPU presets s4, s2 renamed ls4, ls2, apart from GPT-2's in train_gpt2's -e. v0.3: llama_split,
   the hooks through which llama_parallel.h runs a tp shard or cp; llama_leaf public).

   USAGE
     #define LLAMA_IMPLEMENTATION in *one* C/CUDA file (beside the bt_ implementations; bt_all.h
     does it with BT_ALL_IMPLEMENTATION), then #include "llama.h". It needs bt_autograd.h (the ops)
     and bt_data.h (the tokenizer, for samples).

     llama m;  llama_config c;
     llama_config_from_preset("l125m", &c);                 // or llama_hf_config (llama_io.h)
     llama_build(&m, c, bt_cuda_device(0));
     llama_init(&m, 1337);
     bt_scope_begin();
     bt_tensor *loss = llama_loss(&m, idx, targets, BT_BF16);   // idx, targets: [B, T] i32
     bt_backward(loss);                                          // gradients in m.flat_grad
     bt_scope_end();
     llama_free(&m);

   The model is transformers' LlamaForCausalLM (Touvron et al. 2023; Llama 3, 2024): a token
   embedding, L pre-norm blocks
       x += Wo attention(rope(q), rope(k), v),  [q | k | v] = Wqkv rmsnorm(x) w_attn
       x += W2 swiglu(W13 rmsnorm(x) w_mlp)     (W13 = [gate; up], swiglu = silu(gate) * up)
   a final RMSNorm and a head (its own matrix, or the embedding when tied). No biases. Attention
   is grouped-query (GQA): H query heads share Hkv key/value heads, query head h reading key/value
   head h / (H / Hkv) (transformers' repeat_kv). RoPE is the rotate_half convention (bt_rope_ex:
   pairs (i, i + D/2)), with Llama 3.1's "llama3" frequency scaling as an option.

   Training runs attention as one op (bt_attention_qkv_ex): RoPE rotates q and k of the packed
   projection in one pass, the kernels read each group's K, V in place (no repeated copy), and the
   backward writes the gradients of q, k, v into one buffer, rotating those of q, k back in place.
   The KV cache stores the Hkv heads only and its attention reads them per group too.

   Files: llama_io.h (Hugging Face LlamaForCausalLM in and out). Tensor and context parallelism:
   llama_parallel.h (through llama_split). docs/llama.md.

   FP8 (docs/fp8.md): llama_fp8_enable gives the model one scaling state per block linear (wqkv,
   wo, w13, w2) in one flat f32 buffer, as gpt2.h's; a training forward (grad mode on) then runs
   them through bt_linear_fp8, and with fp8_head set the head through bt_linear_cross_entropy_fp8
   (one state more); llama_fp8_update, once per optimizer step, rolls the states.

   Fully sharded data parallelism (trainer.h's --dp fsdp): llama_set_units, as gpt2_set_units; the
   units are llama_units_bounds'.

   SECTIONS (implementation)
     1. configuration and presets
     2. parameters: one flat fp32 buffer, init; the FP8 states
     3. the forward pass
     4. generation: a KV cache, sampling
*/
#ifndef LLAMA_H
#define LLAMA_H
#include "bt_autograd.h"
#include "bt_data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. configuration ---- */
typedef struct {
    int L;              /* layers */
    int H, Hkv;         /* query heads, key/value heads (Hkv divides H) */
    int C;              /* channels; the head dim D = C / H (even, at most 512) */
    int F;              /* the MLP's hidden width (intermediate_size) */
    int V, Vp;          /* vocabulary, and padded to a multiple of 128 (the embedding's and head's rows) */
    int maxT;           /* context length (max_position_embeddings) */
    int tie;            /* 1: the head is the embedding (tie_word_embeddings) */
    double eps;         /* RMSNorm's epsilon (rms_norm_eps) */
    bt_rope_opts rope;  /* theta, and the llama3 scaling when rope.factor > 0 */
} llama_config;

typedef struct { const char *name; llama_config cfg; const char *what; } llama_preset;
extern const llama_preset llama_presets[];
extern const int llama_npresets;

/* the fields set, Vp = V rounded up to 128, eps 1e-5, theta 500000, no scaling, untied */
BTDEF llama_config llama_config_make(int L, int H, int Hkv, int C, int F, int V, int maxT);
BTDEF int llama_config_from_preset(const char *name, llama_config *cfg);   /* 0, or -1: no such preset */
/* every field bounded and consistent (Hkv | H, H | C, D even <= 512, the rope options), at most
   2^40 parameters: 0, or -1 with err naming src and the field */
BTDEF int llama_config_check(const llama_config *c, const char *src, char *err, size_t errlen);
BTDEF int64_t llama_num_params(const llama_config *c);   /* the parameters, the padded rows included */

/* ---- 2. the model ---- */
typedef struct {
    bt_tensor *attn_norm;   /* [C] */
    bt_tensor *wqkv;        /* [(H + 2 Hkv) D, C]: q's H D rows, then k's Hkv D, then v's Hkv D */
    bt_tensor *wo;          /* [C, H D] */
    bt_tensor *mlp_norm;    /* [C] */
    bt_tensor *w13;         /* [2F, C]: gate's F rows, then up's F (bt_swiglu's layout) */
    bt_tensor *w2;          /* [C, F] */
} llama_layer;

struct llama_split;
typedef struct llama {
    llama_config cfg;
    int64_t num_params;            /* the parameters (files, FLOPs) of the whole model, also when this is a tp shard */
    int64_t flat_numel;            /* the buffers' length: this rank's parameters, padded when sharded (ZeRO) */
    bt_tensor *flat, *flat_grad;   /* every parameter and its gradient, one buffer each (forward order) */
    bt_tensor *flat_lowp;          /* flat in the compute dtype when that is not f32, made on demand */
    uint32_t lowp_version;         /* flat's version when flat_lowp was last refreshed */
    bt_tensor *emb;                /* [Vp, C]; rows V.. are zero */
    llama_layer *layers;
    bt_tensor *norm;               /* [C] */
    bt_tensor *head;               /* [Vp, C]; == emb when tied */
    bt_tensor **params;            /* the leaves in buffer order, for the optimizer */
    int n_params;
    bt_device device;
    bt_tensor *fp8_buf;            /* f32 [n_fp8, 3, 2 + history]: the FP8 states (llama_fp8_enable); NULL: none */
    bt_fp8_state *fp8;             /* [n_fp8]: layer l's linear k at l * LLAMA_FP8_LINEARS + k, then the head's; views of fp8_buf */
    int n_fp8;                     /* the states: 4 L, + 1 with fp8_head */
    int fp8_head;                  /* set before llama_fp8_enable: the head's products in FP8 too (bt_linear_cross_entropy_fp8) */
    bt_unit_set units;             /* fsdp: the parameters from gathered units (units.src NULL: the leaves) */
    int tp, tp_rank;               /* tensor parallelism: this rank's shard of tp; 0 when whole */
    const struct llama_split *split;   /* tensor/context parallel forward (llama_parallel.h); NULL: whole */
    struct bt_par *par;            /* that split's mesh (bt_parallel.h) */
} llama;
/* The parts of the model tensor or context parallelism replace (llama_parallel.h); a NULL member
   keeps the whole model's. embed returns the first residual stream, attention and mlp their
   sublayer's output without the residual (h: the sublayer's RMSNorm output), loss takes the
   final norm's output; init draws a shard's weights. */
typedef struct llama_split {
    bt_tensor *(*embed)(llama *m, bt_tensor *idx, bt_dtype dt);
    bt_tensor *(*attention)(llama *m, llama_layer *y, bt_tensor *h, bt_dtype dt);
    bt_tensor *(*mlp)(llama *m, llama_layer *y, bt_tensor *h, bt_dtype dt);
    bt_tensor *(*loss)(llama *m, bt_tensor *x, bt_tensor *targets, bt_dtype dt);
    void (*init)(llama *m, uint64_t seed);
} llama_split;
/* the block linears that run in FP8, in a layer's order in fp8_buf */
enum { LLAMA_FP8_QKV, LLAMA_FP8_O, LLAMA_FP8_W13, LLAMA_FP8_W2, LLAMA_FP8_LINEARS };

/* One process: no padding, fp32 gradients. _padded: buffers of num_params rounded up to a
   multiple of pad_to (ZeRO's equal shards; the padding is zero), gradients in grad_dt. */
BTDEF void llama_build(llama *m, llama_config cfg, bt_device dev);
BTDEF void llama_build_padded(llama *m, llama_config cfg, bt_device dev, int64_t pad_to, bt_dtype grad_dt);
/* the next leaf of numel(shape) at *mark of the buffers (a builder's step; llama_build_tp's) */
BTDEF bt_tensor *llama_leaf(llama *m, int64_t *mark, bt_shape shape);
BTDEF void llama_free(llama *m);
/* transformers' init (LlamaPreTrainedModel._init_weights, initializer_range 0.02): every matrix and
   the embedding N(0, 0.02), the norms' weights 1; the embedding's and head's padded rows 0. Each
   leaf draws from Philox at its offset in the buffer: a seed gives the same weights on any device. */
BTDEF void llama_init(llama *m, uint64_t seed);
/* The FP8 linears, as gpt2_fp8_enable / gpt2_fp8_update: one state per block linear in fp8_buf
   (o NULL: bt_fp8_default_opts), set to the start (again when called again), and with m->fp8_head
   set one for the head (the last, index 4 L: its logits and their gradient in FP8, tied or not); a
   forward with grad mode off keeps the bf16 linears. The update: after each optimizer step, no
   host wait. */
BTDEF void llama_fp8_enable(llama *m, const bt_fp8_opts *o);
BTDEF void llama_fp8_update(llama *m);
/* Fully sharded data parallelism (bt_tensor.h's bt_units states the contract): the forward gathers
   each unit just before it runs. The units in the buffer (elements from flat's start): unit u =
   [lo[u], lo[u + 1]), L + 2 of them (the count is returned; lo holds L + 3): 0 = the embedding,
   1 + l = block l, L + 1 = the final norm and the untied head (the tied head is unit 0's). */
BTDEF int llama_units_bounds(const llama *m, int64_t *lo);
/* the forward's parameters from u (NULL: the model's own leaves again) */
BTDEF void llama_set_units(llama *m, const bt_units *u);

/* ---- 3. the forward pass (idx, targets: [B, T] i32 on the model's device, T <= maxT) ---- */
BTDEF bt_tensor *llama_param_as(llama *m, bt_tensor *p, bt_dtype dt);   /* p in the compute dtype */
BTDEF void llama_lowp_refresh(llama *m, bt_dtype dt);   /* the copy after an update (outside a CUDA graph) */
BTDEF void llama_lowp_written(llama *m, const bt_tensor *copy);   /* as gpt2_lowp_written */
BTDEF bt_tensor *llama_hidden(llama *m, bt_tensor *idx, bt_dtype dt);   /* the final norm's output [B, T, C] */
BTDEF bt_tensor *llama_logits(llama *m, bt_tensor *idx, bt_dtype dt);   /* [B, T, Vp] */
/* mean cross-entropy over the V real columns (targets -1 ignored), the head fused into the loss */
BTDEF bt_tensor *llama_loss(llama *m, bt_tensor *idx, bt_tensor *targets, bt_dtype dt);

/* ---- 4. generation ----
       llama_kv_cache *c = llama_kv_cache_create(m, BT_F32, 0);   // 0: room for maxT positions
       bt_tensor *logits = llama_forward_cached(m, c, prompt, n);  // [Vp] of the last position
       ... then one token at a time; llama_kv_cache_reset(c) starts a new sequence
       llama_kv_cache_free(c);
   The cache holds the Hkv key/value heads only (GQA's memory saving), keys after RoPE. */
typedef struct {
    bt_tensor **k, **v;     /* per layer [Hkv, cap, D] in the compute dtype: positions 0..len-1 filled */
    int L, len, cap;
    bt_dtype dt;
} llama_kv_cache;
BTDEF llama_kv_cache *llama_kv_cache_create(llama *m, bt_dtype dt, int cap);   /* cap <= 0 or > maxT: maxT */
BTDEF void llama_kv_cache_reset(llama_kv_cache *kv);
BTDEF void llama_kv_cache_free(llama_kv_cache *kv);
/* the n tokens ids (host) at positions kv->len .. + n - 1 (RoPE at those positions): their keys and
   values appended, the last one's logits returned ([Vp], in the current scope); len + n <= cap */
BTDEF bt_tensor *llama_forward_cached(llama *m, llama_kv_cache *kv, const int32_t *ids, int n);
/* greedy when topk <= 1 or temp <= 0, else among the topk largest logits with temperature temp;
   r uniform in [0, 1) */
BTDEF int llama_sample_next(const float *logits, int V, int topk, double temp, double r);
/* n_new tokens after the n_prompt of prompt (n_prompt >= 1) into out; when the cache fills up it
   restarts from the last cap/2 tokens (their positions start again at 0). 0, or -1 when n_prompt
   is out of [1, cap] */
BTDEF int llama_generate(llama *m, const int32_t *prompt, int n_prompt, int n_new, int topk, double temp,
                         uint64_t seed, bt_dtype dt, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif /* LLAMA_H */

/* ============================================================================================== */
#ifdef LLAMA_IMPLEMENTATION
#ifndef LLAMA_IMPLEMENTATION_DONE
#define LLAMA_IMPLEMENTATION_DONE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- 1. configuration and presets ---- */
#define LLAMA__CFG(L, H, Hkv, C, F, V, maxT, tie, theta, factor, lo, hi, orig) \
    {L, H, Hkv, C, F, V, ((V) + 127) / 128 * 128, maxT, tie, 1e-5, {theta, factor, lo, hi, orig}}
const llama_preset llama_presets[] = {
    {"l125m", LLAMA__CFG(12, 12, 4, 768, 2048, 50257, 1024, 1, 500000, 0, 0, 0, 0),
     "Llama 3 blocks at GPT-2 124M's width on the GPT-2 vocabulary (the token shards of make data): 114M"},
    {"l125m_128k", LLAMA__CFG(12, 12, 4, 768, 2048, 128256, 1024, 1, 500000, 0, 0, 0, 0),
     "the same on Llama 3's vocabulary: 174M"},
    {"llama3.2-1b", LLAMA__CFG(16, 32, 8, 2048, 8192, 128256, 131072, 1, 500000, 32, 1, 4, 8192),
     "Llama 3.2 1B: tied, llama3 rope scaling (factor 32): 1.24B"},
    {"llama3-8b", LLAMA__CFG(32, 32, 8, 4096, 14336, 128256, 8192, 0, 500000, 0, 0, 0, 0),
     "Llama 3 8B: untied, no scaling: 8.03B"},
    {"llama3.1-8b", LLAMA__CFG(32, 32, 8, 4096, 14336, 128256, 131072, 0, 500000, 8, 1, 4, 8192),
     "Llama 3.1 8B: llama3 rope scaling (factor 8): 8.03B"},
    /* "l" before the name: train_gpt2's -e takes GPT-2's presets and these, and GPT-2 has an s4 and an s2 */
    {"ls4", LLAMA__CFG(4, 4, 2, 128, 384, 50257, 256, 1, 500000, 0, 0, 0, 0), "for CPUs: 7.2M"},
    {"ls2", LLAMA__CFG(2, 4, 2, 64, 192, 50257, 128, 1, 500000, 0, 0, 0, 0), "for tests: 3.3M"},
};
const int llama_npresets = (int)(sizeof llama_presets / sizeof llama_presets[0]);
#undef LLAMA__CFG

BTDEF llama_config llama_config_make(int L, int H, int Hkv, int C, int F, int V, int maxT) {
    llama_config c;
    memset(&c, 0, sizeof c);
    c.L = L; c.H = H; c.Hkv = Hkv; c.C = C; c.F = F; c.V = V; c.Vp = (V + 127) / 128 * 128; c.maxT = maxT;
    c.eps = 1e-5; c.rope.theta = 500000.0;
    return c;
}
BTDEF int llama_config_from_preset(const char *name, llama_config *cfg) {
    for (int i = 0; i < llama_npresets; i++)
        if (!strcmp(name, llama_presets[i].name)) { *cfg = llama_presets[i].cfg; return 0; }
    return -1;
}
/* per layer: two norms, wqkv, wo, w13, w2 */
static int64_t llama__layer_numel(const llama_config *c) {
    int64_t C = c->C, D = C / (c->H > 0 ? c->H : 1), F = c->F;
    return 2 * C + ((int64_t)c->H + 2 * c->Hkv) * D * C + C * c->H * D + 2 * F * C + C * F;
}
BTDEF int64_t llama_num_params(const llama_config *c) {
    int64_t emb = (int64_t)c->Vp * c->C;
    return emb * (c->tie ? 1 : 2) + (int64_t)c->L * llama__layer_numel(c) + c->C;
}
#define LLAMA_MAX_PARAMS (1LL << 40)
BTDEF int llama_config_check(const llama_config *c, const char *src, char *err, size_t errlen) {
    static const struct { const char *name; int32_t hi; } bound[8] = {
        {"L", 4096}, {"H", 1 << 16}, {"Hkv", 1 << 16}, {"C", 1 << 17}, {"F", 1 << 20}, {"V", 1 << 24}, {"Vp", 1 << 24}, {"maxT", 1 << 24}};
    const int v[8] = {c->L, c->H, c->Hkv, c->C, c->F, c->V, c->Vp, c->maxT};
    for (int i = 0; i < 8; i++)
        if (v[i] < 1 || v[i] > bound[i].hi) {
            bt_msgf(err, errlen, "%s: %s = %d is out of range (1 to %d)", src, bound[i].name, v[i], bound[i].hi);
            return -1;
        }
    if (c->H % c->Hkv) { bt_msgf(err, errlen, "%s: Hkv = %d key/value heads do not divide H = %d query heads", src, c->Hkv, c->H); return -1; }
    if (c->C % c->H || (c->C / c->H) % 2 || c->C / c->H > 512) {
        bt_msgf(err, errlen, "%s: C = %d over H = %d heads must give an even head dim of at most 512", src, c->C, c->H); return -1;
    }
    if (c->Vp < c->V || c->Vp % 128) { bt_msgf(err, errlen, "%s: Vp = %d must be V = %d rounded up to 128", src, c->Vp, c->V); return -1; }
    if (!(c->eps > 0 && c->eps < 1)) { bt_msgf(err, errlen, "%s: the norm eps %g must be in (0, 1)", src, c->eps); return -1; }
    const bt_rope_opts *r = &c->rope;
    if (!(r->theta > 1)) { bt_msgf(err, errlen, "%s: rope theta %g must be > 1", src, r->theta); return -1; }
    if (r->factor != 0 && !(r->factor > 0 && r->low_freq_factor > 0 && r->high_freq_factor > r->low_freq_factor &&
                            r->original_max_position_embeddings > 0)) {
        bt_msgf(err, errlen, "%s: llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                "original_max_position_embeddings > 0, got %g, %g, %g, %lld", src, r->factor, r->low_freq_factor,
                r->high_freq_factor, (long long)r->original_max_position_embeddings);
        return -1;
    }
    int64_t n = llama_num_params(c);   /* at most ~2^60 with the bounds above: no overflow */
    if (n > LLAMA_MAX_PARAMS) {
        bt_msgf(err, errlen, "%s: L %d, C %d, F %d, Vp %d give %lld parameters, more than 2^40", src, c->L, c->C, c->F, c->Vp, (long long)n);
        return -1;
    }
    return 0;
}

/* ---- 2. parameters in one flat fp32 buffer, in forward order ----
       emb, layer 0 (attn_norm wqkv wo mlp_norm w13 w2), layer 1, ..., norm, head (untied only)
   The backward pass finishes the gradients at the END of the buffer first (data parallelism can
   send them while earlier layers still compute). Each leaf is a view of flat, its gradient the
   same span of flat_grad: the optimizer and the files see one buffer, the graph ordinary leaves. */
BTDEF bt_tensor *llama_leaf(llama *m, int64_t *mark, bt_shape shape) {
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
    bt_tensor *span = bt_narrow(m->flat, 0, *mark, n), *gspan = bt_narrow(m->flat_grad, 0, *mark, n);
    bt_tensor *p = bt_view(span, shape);
    bt_set_requires_grad(p, 1);
    p->grad = bt_view(gspan, shape);
    bt_release(span); bt_release(gspan);
    m->params[m->n_params++] = p;
    *mark += n;
    return p;
}
BTDEF void llama_build_padded(llama *m, llama_config cfg, bt_device dev, int64_t pad_to, bt_dtype grad_dt) {
    char err[512];
    if (llama_config_check(&cfg, "llama_build", err, sizeof err)) bt_error("%s", err);
    if (pad_to < 1) bt_error("llama_build_padded: pad_to %lld must be at least 1", (long long)pad_to);
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->device = dev;
    int64_t C = cfg.C, D = C / cfg.H, mark = 0;
    m->num_params = llama_num_params(&cfg);
    m->flat_numel = (m->num_params + pad_to - 1) / pad_to * pad_to;
    m->flat = bt_zeros(bt_shape1(m->flat_numel), BT_F32, dev);
    m->flat_grad = bt_zeros(bt_shape1(m->flat_numel), grad_dt, dev);
    m->params = (bt_tensor **)calloc((size_t)(3 + 6 * cfg.L), sizeof(bt_tensor *));
    m->layers = (llama_layer *)calloc((size_t)cfg.L, sizeof(llama_layer));
    if (!m->params || !m->layers) bt_error("llama_build: out of host memory");
    m->emb = llama_leaf(m, &mark, bt_shape2(cfg.Vp, C));
    for (int l = 0; l < cfg.L; l++) {
        llama_layer *y = &m->layers[l];
        y->attn_norm = llama_leaf(m, &mark, bt_shape1(C));
        y->wqkv = llama_leaf(m, &mark, bt_shape2(((int64_t)cfg.H + 2 * cfg.Hkv) * D, C));
        y->wo = llama_leaf(m, &mark, bt_shape2(C, (int64_t)cfg.H * D));
        y->mlp_norm = llama_leaf(m, &mark, bt_shape1(C));
        y->w13 = llama_leaf(m, &mark, bt_shape2(2 * (int64_t)cfg.F, C));
        y->w2 = llama_leaf(m, &mark, bt_shape2(C, cfg.F));
    }
    m->norm = llama_leaf(m, &mark, bt_shape1(C));
    m->head = cfg.tie ? m->emb : llama_leaf(m, &mark, bt_shape2(cfg.Vp, C));
    if (mark != m->num_params) bt_error("llama_build: %lld parameters laid out, %lld counted", (long long)mark, (long long)m->num_params);
}
BTDEF void llama_build(llama *m, llama_config cfg, bt_device dev) { llama_build_padded(m, cfg, dev, 1, BT_F32); }
BTDEF void llama_free(llama *m) {
    for (int i = 0; i < m->n_params; i++) bt_release(m->params[i]);
    bt_release(m->flat); bt_release(m->flat_grad); bt_release(m->flat_lowp);
    bt_fp8_bank_free(&m->fp8, &m->fp8_buf, m->n_fp8);
    bt_units_free(&m->units);
    free(m->params); free(m->layers);
    memset(m, 0, sizeof *m);
}
/* 4 L states (and the head's) of 3 (2 + history) f32 each, slices of one buffer (a checkpoint saves it whole) */
BTDEF void llama_fp8_enable(llama *m, const bt_fp8_opts *o) {
    if (m->split) bt_error("llama_fp8_enable: FP8 linears with tensor or context parallelism are not supported (--precision fp8 with --tp or --cp)");
    int n = m->cfg.L * LLAMA_FP8_LINEARS + (m->fp8_head != 0);
    if (m->fp8 && n != m->n_fp8) bt_error("llama_fp8_enable: the model has %d FP8 states, fp8_head asks for %d (set it before the first enable)", m->n_fp8, n);
    bt_fp8_bank_reset(&m->fp8, &m->fp8_buf, n, o, m->device, "llama_fp8_enable");
    m->n_fp8 = n;
}
BTDEF void llama_fp8_update(llama *m) {
    if (m->fp8) bt_fp8_bank_update(m->fp8, m->fp8_buf, m->n_fp8);
}
BTDEF void llama_init(llama *m, uint64_t seed) {
    if (m->split && m->split->init) { m->split->init(m, seed); return; }
    int old = bt_set_grad_enabled(0);
    const llama_config *c = &m->cfg;
    for (int i = 0; i < m->n_params; i++) {
        bt_tensor *p = m->params[i];
        if (p->ndim == 1) bt_fill_(p, 1.0);   /* the norms */
        else bt_normal_(p, 0.0, 0.02, seed, (uint64_t)(p->offset - m->flat->offset));
    }
    if (c->Vp > c->V) {
        bt_tensor *t[2] = {m->emb, m->head};
        for (int i = 0; i < (c->tie ? 1 : 2); i++) {
            bt_scope_begin();
            bt_zero_(bt_narrow(t[i], 0, c->V, c->Vp - c->V));
            bt_scope_end();
        }
    }
    bt_set_grad_enabled(old);
}

/* ---- 3. the forward pass ---- */
/* Parameter p in dtype dt. For another dtype than f32 (bf16 for mixed precision, f64 for gradient
   checks) the whole flat buffer is cast once after each change of the fp32 weights (the optimizer
   step bumps their version) and p is a view of that copy; the cast node returns f32 gradients to
   the leaves. */
BTDEF void llama_lowp_refresh(llama *m, bt_dtype dt) {
    if (dt == m->flat->dtype) return;
    if (m->flat->storage->halves) {   /* the weights in two halves: the copy is their high halves, always current */
        if (dt != BT_BF16 || !m->flat_lowp || m->flat_lowp->storage != m->flat->storage)
            bt_error("llama: the weights are held in two halves (bt_adamw_split): they compute in bf16 (their high halves), not %s",
                     bt_dtype_name(dt));
        return;
    }
    int fresh = m->flat_lowp && m->flat_lowp->dtype == dt;
    if (fresh && m->lowp_version == m->flat->storage->version) return;
    int old = bt_set_grad_enabled(0);
    if (!fresh) {
        bt_release(m->flat_lowp);
        bt_scope_begin();
        m->flat_lowp = bt_keep(bt_empty(bt_shape_of(m->flat), dt, m->device));
        bt_scope_end();
    }
    bt_copy_(m->flat_lowp, m->flat);
    m->lowp_version = m->flat->storage->version;
    bt_set_grad_enabled(old);
}
BTDEF void llama_lowp_written(llama *m, const bt_tensor *copy) {
    if (copy && copy == m->flat_lowp) m->lowp_version = m->flat->storage->version;
}
/* ---- fsdp's units: the parameters of a unit are views of its gathered tensor ----
   Memory per rank: the shards, plus the units gathered now. Each block is gathered inside its
   bt_checkpoint region (llama__block forces BT_RECOMPUTE_BLOCK under fsdp): the first run's copy
   goes at the region's end, the backward's remake gathers it again as the leaf whose hook
   reduce-scatters the block's gradient. Unit 0 lives through the pass when the head is tied (the
   head is emb), else only for the lookup; unit L + 1 (the norm, and the untied head: Vp C of it)
   from the final norm to the loss. One block's full parameters at a time, plus the head's unit,
   for one more forward of the blocks. */
BTDEF int llama_units_bounds(const llama *m, int64_t *lo) {
    int L = m->cfg.L;
    int64_t base = m->flat->offset;
    lo[0] = 0;
    for (int l = 0; l < L; l++) lo[1 + l] = m->layers[l].attn_norm->offset - base;
    lo[L + 1] = m->norm->offset - base;
    lo[L + 2] = m->num_params;   /* the last leaf's end: the norm's, or the untied head's */
    return L + 2;
}
BTDEF void llama_set_units(llama *m, const bt_units *u) {
    if (u && m->split) bt_error("llama: fsdp's units with tensor or context parallelism (not supported)");
    int64_t *lo = (int64_t *)malloc(sizeof(int64_t) * ((size_t)m->cfg.L + 3));
    if (!lo) bt_error("llama: out of host memory");
    int n = llama_units_bounds(m, lo);
    bt_units_set(&m->units, u, lo, n, "llama");
    free(lo);
}
/* the unit whose gathered tensor holds the head */
static int llama__head_unit(const llama *m) { return m->cfg.tie ? 0 : m->cfg.L + 1; }
BTDEF bt_tensor *llama_param_as(llama *m, bt_tensor *p, bt_dtype dt) {
    if (m->units.src) return bt_units_param(&m->units, p, m->flat);
    if (dt == p->dtype) {
        if (m->flat->storage->halves) bt_error("llama: a forward in %s, but the weights are held in two halves (bt_adamw_split): bf16 only",
                                               bt_dtype_name(dt));
        return p;
    }
    llama_lowp_refresh(m, dt);
    int64_t off = p->offset - m->flat->offset;
    return bt_cast_cached(p, bt_view(bt_narrow(m->flat_lowp, 0, off, bt_numel(p)), bt_shape_of(p)));
}
#define LLAMA_P(x) llama_param_as(m, (x), dt)

/* r + x w^T (r NULL: without): through bt_linear_fp8 / bt_linear_add_fp8 with the scaling state st,
   or with st NULL bt_linear / bt_linear_add (the residual add rides the GEMM on a GPU either way) */
static bt_tensor *llama__linear(bt_fp8_state *st, bt_tensor *x, bt_tensor *w, bt_tensor *r) {
    if (st) return r ? bt_linear_add_fp8(x, w, NULL, r, st) : bt_linear_fp8(x, w, NULL, st);
    return r ? bt_linear_add(x, w, NULL, r) : bt_linear(x, w, NULL);
}
/* layer y's linear k (LLAMA_FP8_QKV ..): its FP8 state when f8 (decided once per forward in
   llama_hidden, carried by the recompute regions, as gpt2.h's), else NULL (the bf16 linear) */
#define LLAMA_F8(k) (f8 ? &m->fp8[(y - m->layers) * LLAMA_FP8_LINEARS + (k)] : NULL)

/* x + the attention block of rmsnorm(x) [B, T, C]: one projection to [B, T, (H + 2 Hkv) D] (q, k, v
   heads side by side; bf16/fp32 through bt_rmsnorm_linear, so BT_RECOMPUTE_NORM remakes the norm's
   output; FP8 through bt_rmsnorm_linear_fp8, the norm's kernel writing its e4m3 output), RoPE on q
   and k and grouped-query attention in one op that reads K, V per group in place */
static bt_tensor *llama__attention(llama *m, llama_layer *y, bt_tensor *x, bt_dtype dt, int f8) {
    const llama_config *c = &m->cfg;
    bt_tensor *nw = LLAMA_P(y->attn_norm);
    if (m->split && m->split->attention) return bt_add(x, m->split->attention(m, y, bt_rmsnorm(x, nw, c->eps), dt));
    bt_tensor *qkv = f8 ? bt_rmsnorm_linear_fp8(x, nw, c->eps, LLAMA_P(y->wqkv), NULL, LLAMA_F8(LLAMA_FP8_QKV))
                        : bt_rmsnorm_linear(x, nw, c->eps, LLAMA_P(y->wqkv), NULL);
    bt_tensor *o = bt_attention_qkv_ex(qkv, c->H, c->Hkv, &c->rope);
    return llama__linear(LLAMA_F8(LLAMA_FP8_O), o, LLAMA_P(y->wo), x);
}
/* x + W2 swiglu(W13 rmsnorm(x)) (W13 through bt_rmsnorm_linear); FP8: bt_rmsnorm_mlp_swiglu_fp8, the
   norm's output cast in its kernel, SwiGLU and its gradient inside the casts of the second linear's
   input and the first's gradient */
static bt_tensor *llama__mlp(llama *m, llama_layer *y, bt_tensor *x, bt_dtype dt, int f8) {
    bt_tensor *nw = LLAMA_P(y->mlp_norm);
    if (m->split && m->split->mlp) return bt_add(x, m->split->mlp(m, y, bt_rmsnorm(x, nw, m->cfg.eps), dt));
    if (f8)
        return bt_rmsnorm_mlp_swiglu_fp8(x, nw, m->cfg.eps, LLAMA_P(y->w13), LLAMA_P(y->w2), x, LLAMA_F8(LLAMA_FP8_W13),
                                         LLAMA_F8(LLAMA_FP8_W2));
    return bt_linear_add(bt_swiglu(bt_rmsnorm_linear(x, nw, m->cfg.eps, LLAMA_P(y->w13), NULL)), LLAMA_P(y->w2), NULL, x);
}
/* The block's two sublayers as bt_checkpoint regions (bt_autograd.h), as gpt2.h's: each takes the
   residual stream x and returns x + sublayer(rmsnorm(x)), the parameters' casts made inside. */
typedef struct { llama *m; llama_layer *y; bt_dtype dt; int f8, unit; } llama__region;
static bt_tensor *llama__attn_region(void *ctx, bt_tensor **in) {
    llama__region *r = (llama__region *)ctx;
    return llama__attention(r->m, r->y, in[0], r->dt, r->f8);
}
static bt_tensor *llama__mlp_region(void *ctx, bt_tensor **in) {
    llama__region *r = (llama__region *)ctx;
    return llama__mlp(r->m, r->y, in[0], r->dt, r->f8);
}
static bt_tensor *llama__block_region(void *ctx, bt_tensor **in) {
    llama__region *r = (llama__region *)ctx;
    bt_units_begin(&r->m->units, r->unit, r->dt);   /* fsdp: the block's parameters, here and in the remake */
    bt_tensor *x1 = llama__attn_region(ctx, in), *out = llama__mlp_region(ctx, &x1);
    bt_units_end(&r->m->units, r->unit);
    return out;
}
/* One block under the recompute flags (bt_set_recompute: ATTN, MLP, BLOCK, NORM; GELU means nothing here).
   Kept for the backward per layer, in B T values (compute dtype; Q = (H + 2 Hkv) D, F the MLP's width):
     none   6C + Q + 3F: the attention's rmsnorm out C, the rotated packed q, k, v Q, attention's out
            C, x1 C; the MLP's rmsnorm out C, [gate; up] 2F, swiglu's out F, x2 C
     ATTN   3C + 3F: x1 and the MLP's; MLP 4C + Q: the attention's and x2; BLOCK C: x2 alone;
     NORM   2C less (not with FP8): the two rmsnorm outs remade from x and x1 (bt_rmsnorm_linear)
   (l125m: C 768, Q 1280, F 2048: 12.4K, 8.4K, 4.3K, 768 values a token and layer.) The remade
   region's activations live during its own backward only; the work remade is one more forward of
   the region. */
static bt_tensor *llama__block(llama *m, llama_layer *y, bt_tensor *x, bt_dtype dt, int rc, int f8) {
    llama__region r = {m, y, dt, f8, 1 + (int)(y - m->layers)};
    if (m->units.src) {   /* fsdp gathers a block inside its region (bt_units) */
        if (!bt_grad_enabled()) return bt_units_run(llama__block_region, &r, x);   /* the block's unit goes at its end */
        rc |= BT_RECOMPUTE_BLOCK;
    }
    if (rc & BT_RECOMPUTE_BLOCK) return bt_checkpoint(llama__block_region, &r, sizeof r, &x, 1);
    x = rc & BT_RECOMPUTE_ATTN ? bt_checkpoint(llama__attn_region, &r, sizeof r, &x, 1) : llama__attn_region(&r, &x);
    return rc & BT_RECOMPUTE_MLP ? bt_checkpoint(llama__mlp_region, &r, sizeof r, &x, 1) : llama__mlp_region(&r, &x);
}
/* keep_head: the head's unit (fsdp) stays gathered for the caller, who ends it */
static bt_tensor *llama__hidden(llama *m, bt_tensor *idx, bt_dtype dt, int keep_head) {
    const llama_config *c = &m->cfg;
    if (idx->ndim != 2 || idx->shape[1] > c->maxT) {
        char s[96];
        bt_error("llama: idx %s must be [B, T] with T at most the context of %d", bt_shape_str(idx, s, sizeof s), c->maxT);
    }
    int rc = bt_get_recompute(), hu = keep_head ? llama__head_unit(m) : -1;
    if ((rc & (BT_RECOMPUTE_ATTN | BT_RECOMPUTE_MLP | BT_RECOMPUTE_BLOCK)) && m->split && (m->split->attention || m->split->mlp))
        bt_error("llama: recompute attn, mlp or block (flags %d) with tensor or context parallelism: the split blocks' "
                 "collectives are not remade in the backward; use none", rc);
    bt_units_begin(&m->units, 0, dt);
    bt_tensor *x = m->split && m->split->embed ? m->split->embed(m, idx, dt) : bt_embedding(LLAMA_P(m->emb), idx);
    if (hu != 0) bt_units_end(&m->units, 0);
    int f8 = m->fp8 && bt_grad_enabled();   /* a training forward: the FP8 linears */
    for (int l = 0; l < c->L; l++) {   /* a scope per block: what no node saved goes at the block's end */
        bt_scope_begin();
        x = bt_scope_return(llama__block(m, &m->layers[l], x, dt, rc, f8));
    }
    bt_units_begin(&m->units, c->L + 1, dt);
    x = bt_rmsnorm(x, LLAMA_P(m->norm), c->eps);
    if (hu != c->L + 1) bt_units_end(&m->units, c->L + 1);
    return x;
}
BTDEF bt_tensor *llama_hidden(llama *m, bt_tensor *idx, bt_dtype dt) { return llama__hidden(m, idx, dt, 0); }
BTDEF bt_tensor *llama_logits(llama *m, bt_tensor *idx, bt_dtype dt) {
    if (m->tp > 1) bt_error("llama_logits: a tensor-parallel shard holds Vp/%d of the head's rows; gather the whole model (llama_par_whole_model)", m->tp);
    bt_tensor *h = llama__hidden(m, idx, dt, 1);   /* before LLAMA_P(head): fsdp gathers its unit there */
    bt_tensor *z = bt_linear(h, LLAMA_P(m->head), NULL);
    bt_units_end(&m->units, llama__head_unit(m));
    return z;
}
BTDEF bt_tensor *llama_loss(llama *m, bt_tensor *idx, bt_tensor *targets, bt_dtype dt) {
    if (m->split && m->split->loss) return m->split->loss(m, llama_hidden(m, idx, dt), targets, dt);
    bt_tensor *h = llama__hidden(m, idx, dt, 1);
    bt_tensor *loss = m->fp8 && m->fp8_head && bt_grad_enabled()
                    ? bt_linear_cross_entropy_fp8(h, LLAMA_P(m->head), targets, m->cfg.V, -1, &m->fp8[m->n_fp8 - 1])
                    : bt_linear_cross_entropy(h, LLAMA_P(m->head), targets, m->cfg.V, -1);
    bt_units_end(&m->units, llama__head_unit(m));
    return loss;
}

/* ---- 4. generation: a KV cache, sampling ---- */
BTDEF llama_kv_cache *llama_kv_cache_create(llama *m, bt_dtype dt, int cap) {
    const llama_config *c = &m->cfg;
    llama_kv_cache *kv = (llama_kv_cache *)calloc(1, sizeof *kv);
    if (kv) { kv->k = (bt_tensor **)calloc((size_t)c->L, sizeof(bt_tensor *)); kv->v = (bt_tensor **)calloc((size_t)c->L, sizeof(bt_tensor *)); }
    if (!kv || !kv->k || !kv->v) bt_error("llama_kv_cache_create: out of host memory");
    kv->L = c->L; kv->dt = dt; kv->cap = cap > 0 && cap < c->maxT ? cap : c->maxT;
    bt_scope_begin();
    for (int l = 0; l < c->L; l++) {
        kv->k[l] = bt_keep(bt_empty(bt_shape3(c->Hkv, kv->cap, c->C / c->H), dt, m->device));
        kv->v[l] = bt_keep(bt_empty(bt_shape3(c->Hkv, kv->cap, c->C / c->H), dt, m->device));
    }
    bt_scope_end();
    return kv;
}
BTDEF void llama_kv_cache_reset(llama_kv_cache *kv) { kv->len = 0; }
BTDEF void llama_kv_cache_free(llama_kv_cache *kv) {
    if (!kv) return;
    for (int l = 0; l < kv->L; l++) { bt_release(kv->k[l]); bt_release(kv->v[l]); }
    free(kv->k); free(kv->v); free(kv);
}
/* attention of n new positions (h [1, n, C]) over the len cached ones and themselves. Their keys
   (after RoPE at positions len ..) and values are appended to the cache; then per kv head j the G
   query heads of its group are one matrix of G n rows against the cache's K_j, V_j (no copy of
   K, V per query head): softmax(Q K^T / sqrt(D) + mask) V, mask (NULL when n = 1) hiding the
   later new positions. */
static bt_tensor *llama__attention_cached(llama *m, llama_layer *y, bt_tensor *h, llama_kv_cache *kv, int l, bt_tensor *mask) {
    const llama_config *c = &m->cfg;
    int64_t n = h->shape[1], H = c->H, Hkv = c->Hkv, G = H / Hkv, D = c->C / c->H, T = kv->len + n;
    bt_dtype dt = kv->dt;
    static const int kv_first[3] = {1, 0, 2}, groups_first[4] = {1, 2, 0, 3}, rows_first[4] = {2, 0, 1, 3};
    bt_tensor *qkv = bt_view(bt_linear(h, LLAMA_P(y->wqkv), NULL), bt_shape4(1, n, H + 2 * Hkv, D));
    bt_tensor *q = bt_rope_ex(bt_narrow(qkv, 2, 0, H), &c->rope, kv->len);          /* [1, n, H, D] */
    bt_tensor *k = bt_rope_ex(bt_narrow(qkv, 2, H, Hkv), &c->rope, kv->len);        /* [1, n, Hkv, D] */
    bt_tensor *v = bt_narrow(qkv, 2, H + Hkv, Hkv);
    bt_copy_(bt_narrow(kv->k[l], 1, kv->len, n), bt_permute(bt_select(k, 0, 0), kv_first));
    bt_copy_(bt_narrow(kv->v[l], 1, kv->len, n), bt_permute(bt_select(v, 0, 0), kv_first));
    /* q [n, Hkv, G, D] -> [Hkv, G, n, D] -> [Hkv, G n, D] */
    bt_tensor *qg = bt_reshape(bt_permute(bt_view(q, bt_shape4(n, Hkv, G, D)), groups_first), bt_shape3(Hkv, G * n, D));
    bt_tensor *s = bt_scale(bt_matmul_t(qg, bt_narrow(kv->k[l], 1, 0, T), 0, 1), 1.0 / sqrt((double)D));   /* [Hkv, G n, T] */
    if (mask) s = bt_reshape(bt_add(bt_view(s, bt_shape4(Hkv, G, n, T)), mask), bt_shape3(Hkv, G * n, T));
    bt_tensor *o = bt_matmul(bt_softmax(s), bt_narrow(kv->v[l], 1, 0, T));                                  /* [Hkv, G n, D] */
    o = bt_reshape(bt_permute(bt_view(o, bt_shape4(Hkv, G, n, D)), rows_first), bt_shape3(1, n, H * D));   /* [n, Hkv, G, D] */
    return bt_linear(o, LLAMA_P(y->wo), NULL);
}
BTDEF bt_tensor *llama_forward_cached(llama *m, llama_kv_cache *kv, const int32_t *ids, int n) {
    const llama_config *c = &m->cfg;
    if (m->tp > 1) bt_error("llama_forward_cached: a tensor-parallel shard; generate from the whole model (llama_par_whole_model)");
    bt_dtype dt = kv->dt;
    if (n < 1 || kv->len + n > kv->cap)
        bt_error("llama_forward_cached: %d new positions after %d cached ones do not fit the cache of %d", n, kv->len, kv->cap);
    int old = bt_set_grad_enabled(0);
    bt_tensor *x = bt_embedding(LLAMA_P(m->emb), bt_from_data(ids, bt_shape2(1, n), BT_I32, m->device));
    bt_tensor *mask = n > 1 ? bt_causal_mask(n, kv->len, dt, m->device) : NULL;
    for (int l = 0; l < c->L; l++) {
        llama_layer *y = &m->layers[l];
        x = bt_add(x, llama__attention_cached(m, y, bt_rmsnorm(x, LLAMA_P(y->attn_norm), c->eps), kv, l, mask));
        x = llama__mlp(m, y, x, dt, 0);
    }
    kv->len += n;
    x = bt_rmsnorm(bt_select(bt_select(x, 0, 0), 0, n - 1), LLAMA_P(m->norm), c->eps);   /* [C] */
    bt_tensor *logits = bt_matmul(LLAMA_P(m->head), x);                                  /* [Vp] */
    bt_set_grad_enabled(old);
    return logits;
}
/* top-k by k passes over the logits (k is small), then a draw from softmax(logit / temp) over them */
BTDEF int llama_sample_next(const float *logits, int V, int topk, double temp, double r) {
    int best = 0;
    for (int j = 1; j < V; j++) if (logits[j] > logits[best]) best = j;
    if (topk <= 1 || temp <= 0) return best;
    if (topk > V) topk = V;
    int *top = (int *)malloc(sizeof(int) * (size_t)topk);
    double *w = (double *)malloc(sizeof(double) * (size_t)topk), sum = 0;
    if (!top || !w) bt_error("llama_sample_next: out of host memory");
    top[0] = best;
    for (int i = 1; i < topk; i++) {   /* the largest logit below top[i - 1] (ties: the next index) */
        int pick = -1, prev = top[i - 1];
        for (int j = 0; j < V; j++) {
            int below = logits[j] < logits[prev] || (logits[j] == logits[prev] && j > prev);
            if (below && (pick < 0 || logits[j] > logits[pick])) pick = j;
        }
        top[i] = pick >= 0 ? pick : prev;
    }
    for (int i = 0; i < topk; i++) sum += w[i] = exp((logits[top[i]] - logits[best]) / temp);
    int out = top[topk - 1];
    for (int i = 0; i < topk; i++) { r -= w[i] / sum; if (r < 0) { out = top[i]; break; } }
    free(top); free(w);
    return out;
}
BTDEF int llama_generate(llama *m, const int32_t *prompt, int n_prompt, int n_new, int topk, double temp,
                         uint64_t seed, bt_dtype dt, int32_t *out) {
    llama_kv_cache *kv = llama_kv_cache_create(m, dt, 0);
    if (n_prompt < 1 || n_prompt > kv->cap) { llama_kv_cache_free(kv); return -1; }
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_prompt + n_new));
    float *row = (float *)malloc(sizeof(float) * (size_t)m->cfg.Vp);
    if (!ids || !row) bt_error("llama_generate: out of host memory");
    memcpy(ids, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int len = n_prompt, fed = 0;   /* ids[fed..len) are not in the cache yet */
    for (int s = 0; s < n_new; s++) {
        if (kv->len + (len - fed) > kv->cap) { llama_kv_cache_reset(kv); fed = len - (kv->cap > 1 ? kv->cap / 2 : 1); }
        bt_scope_begin();
        bt_to_host(llama_forward_cached(m, kv, ids + fed, len - fed), row, BT_F32);
        bt_scope_end();
        fed = len;
        ids[len++] = out[s] = llama_sample_next(row, m->cfg.V, topk, temp, bt_philox_uniform(seed, (uint64_t)s));
    }
    llama_kv_cache_free(kv);
    free(ids); free(row);
    return 0;
}
#undef LLAMA_P
#undef LLAMA_F8
#endif /* LLAMA_IMPLEMENTATION_DONE */
#endif /* LLAMA_IMPLEMENTATION */
