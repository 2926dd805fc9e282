/* llama_parallel.h - a Llama under tensor and context parallelism: which part of each tensor a
   rank holds, its init, and the forward pass's parallel parts (bt_parallel.h's ops).

   USAGE
     #define LLAMA_PARALLEL_IMPLEMENTATION in *one* C/CUDA file, then #include "llama_parallel.h".
     It needs llama.h and bt_parallel.h (which brings bt_dist.h).

     bt_par *p = bt_par_open(&opts, dist, on_gpu);           // a collective: the mesh's communicators
     llama_build_tp(&m, cfg, dev, opts.tp, p->tp_rank, 1, BT_F32);   // or llama_build_padded when tp = 1
     llama_par_attach(p, &m);                                  // the model's forward now runs split
     llama_init(&m, seed);                                     // a shard: the 1-process weights' slice
     ... bt_par_batch for each batch, llama_loss, bt_backward, bt_par_reduce_grads ...
     bt_par_free(p);                                           // before bt_dist_shutdown

   The mesh, the shards' layout and the step's reductions are bt_parallel.h's (A MODEL ON THE
   MESH). Tensor parallelism (Megatron's split): rank r of a tp group holds
       emb          rows [r Vp/tp, (r+1) Vp/tp): the vocabulary-parallel embedding
       wqkv         the rows of its H/tp query heads, then of its Hkv/tp key heads, then of its
                    Hkv/tp value heads (column-parallel: its query heads' groups are its own kv
                    heads, h / (H / Hkv) on both sides, so the grouped attention is local)
       wo           columns [r H D/tp, ..): row-parallel, its partial sums all-reduced
       w13          rows [r F/tp, ..) of gate, then the same of up (column-parallel: swiglu pairs
                    each gate column with its up column on the same rank)
       w2           columns [r F/tp, ..): row-parallel
       head         (untied) rows [r Vp/tp, ..): with the tied head the embedding's rows, through
                    the fused vocabulary-parallel loss (no logits gathered)
   and the RMSNorm weights whole (with sp their gradients come from the rank's sequence slice:
   bt_par_reduce_grads sums them over tp). tp must divide H, Hkv, F and Vp (llama_tp_check).
   Checkpoints hold the 1-process buffer (bt_par_gather_whole on save, bt_par_shard_of_whole on
   load), so files move between layouts; a Hugging Face directory loads whole, then is sliced.
   Context parallelism: rank i of a cp group holds the zig-zag chunks i and 2 cp - 1 - i of every
   sequence (bt_par_batch); attention is bt_cp_attention_qkv_ex, which rotates q and k at the
   tokens' global positions (each chunk from its own start) and gives each query head its
   group's K/V; every other op of a Llama works per token (no position embedding).
*/
#ifndef LLAMA_PARALLEL_H
#define LLAMA_PARALLEL_H
#include "llama.h"
#include "bt_parallel.h"

BTDEF int llama_n_leaves(const llama_config *c);                 /* llama_build's leaves: 2 + 6 L, + 1 untied */
BTDEF bt_tp_shard llama_shard_of(const llama_config *c, int leaf);   /* leaf in llama_build's order */
/* 0 when tp divides the heads H, the kv heads Hkv, the MLP width F and Vp; else -1, err naming them */
BTDEF int llama_tp_check(const llama_config *c, int tp, char *err, size_t errlen);
/* the parameters a rank of a tp-way model holds; *whole (may be NULL): those of its whole tensors */
BTDEF int64_t llama_local_numel(const llama_config *c, int tp, int64_t *whole);
/* rank r's shard: llama_build_padded's leaves, each its shard's shape, the whole tensors first in
   the buffer; num_params stays the whole model's, flat_numel is the shard's (padded to pad_to).
   Refuses (bt_error) a tp llama_tp_check refuses. */
BTDEF void llama_build_tp(llama *m, llama_config cfg, bt_device dev, int tp, int r, int64_t pad_to, bt_dtype grad_dt);
BTDEF void llama_par_attach(bt_par *p, llama *m);   /* m's forward and init go split; p gets m's layout */
/* m itself, or with tp > 1 its shards gathered into *whole on rank 0 (made at the first call,
   refreshed on each; llama_free it after) and NULL elsewhere; a collective */
BTDEF llama *llama_par_whole_model(bt_par *p, llama *m, llama *whole);
#endif /* LLAMA_PARALLEL_H */

/* ============================================================================================== */
#ifdef LLAMA_PARALLEL_IMPLEMENTATION
#ifndef LLAMA_PARALLEL_IMPLEMENTATION_DONE
#define LLAMA_PARALLEL_IMPLEMENTATION_DONE
#include <stdlib.h>
#include <string.h>

/* ---- shards: which part of each whole tensor a rank holds ---- */
BTDEF int llama_n_leaves(const llama_config *c) { return 2 + 6 * c->L + !c->tie; }
BTDEF bt_tp_shard llama_shard_of(const llama_config *c, int leaf) {
    int64_t C = c->C, D = C / c->H, F = c->F, qkv[3] = {c->H * D, c->Hkv * D, c->Hkv * D}, gu[2] = {F, F};
    if (leaf == 0 || leaf == 2 + 6 * c->L) return bt_tp_shard_make(BT_TP_ROWS, c->Vp, C, 2);   /* emb, the untied head */
    if (leaf == 1 + 6 * c->L) return bt_tp_shard_make(BT_TP_WHOLE, C, 1, 1);                  /* norm */
    switch ((leaf - 1) % 6) {
    case 1: return bt_tp_shard_packed(qkv, 3, C, 2);                 /* wqkv */
    case 2: return bt_tp_shard_make(BT_TP_COLS, C, c->H * D, 2);     /* wo */
    case 4: return bt_tp_shard_packed(gu, 2, C, 2);                  /* w13 */
    case 5: return bt_tp_shard_make(BT_TP_COLS, C, F, 2);            /* w2 */
    default: return bt_tp_shard_make(BT_TP_WHOLE, C, 1, 1);         /* attn_norm, mlp_norm */
    }
}
BTDEF int llama_tp_check(const llama_config *c, int tp, char *err, size_t errlen) {
    if (tp < 1) { bt_msgf(err, errlen, "tp %d must be at least 1", tp); return -1; }
    if (c->H % tp || c->Hkv % tp) {
        bt_msgf(err, errlen, "--tp %d does not divide the model's %d query heads and %d key/value heads (each rank holds H/tp query "
                "heads and the Hkv/tp key/value heads of their groups)", tp, c->H, c->Hkv);
        return -1;
    }
    if (c->F % tp) { bt_msgf(err, errlen, "--tp %d does not divide the MLP width F = %d", tp, c->F); return -1; }
    if (c->Vp % tp) { bt_msgf(err, errlen, "--tp %d does not divide the padded vocabulary Vp = %d", tp, c->Vp); return -1; }
    return 0;
}
static bt_tp_shard llama__shard_fn(const void *c, int leaf) { return llama_shard_of((const llama_config *)c, leaf); }
static void llama__layout(const llama_config *c, int tp, bt_tp_layout *l) { bt_tp_layout_of(l, llama__shard_fn, c, llama_n_leaves(c), tp); }
BTDEF int64_t llama_local_numel(const llama_config *c, int tp, int64_t *whole) {
    return bt_tp_local_numel(llama__shard_fn, c, llama_n_leaves(c), tp, whole);
}
static const llama_split *llama__tp_split(void);
BTDEF void llama_build_tp(llama *m, llama_config cfg, bt_device dev, int tp, int r, int64_t pad_to, bt_dtype grad_dt) {
    char err[512];
    if (llama_config_check(&cfg, "llama_build_tp", err, sizeof err) || llama_tp_check(&cfg, tp, err, sizeof err)) bt_error("llama_build_tp: %s", err);
    if (r < 0 || r >= tp || pad_to < 1) bt_error("llama_build_tp: rank %d of tp %d, pad_to %lld", r, tp, (long long)pad_to);
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->device = dev; m->tp = tp; m->tp_rank = r;
    if (tp > 1) m->split = llama__tp_split();
    bt_tp_layout lay;
    llama__layout(&cfg, tp, &lay);
    m->num_params = llama_num_params(&cfg);
    m->flat_numel = (lay.local_numel + pad_to - 1) / pad_to * pad_to;
    m->flat = bt_zeros(bt_shape1(m->flat_numel), BT_F32, dev);
    m->flat_grad = bt_zeros(bt_shape1(m->flat_numel), grad_dt, dev);
    m->params = (bt_tensor **)calloc((size_t)lay.n, sizeof(bt_tensor *));
    m->layers = (llama_layer *)calloc((size_t)cfg.L, sizeof(llama_layer));
    if (!m->params || !m->layers) bt_error("llama_build_tp: out of host memory");
    for (int i = 0; i < lay.n; i++) {
        int64_t at = lay.local_off[i];
        bt_tensor *p = llama_leaf(m, &at, bt_tp_shard_shape(lay.s[i], tp));
        if (i == 0) m->emb = p;
        else if (i == 1 + 6 * cfg.L) m->norm = p;
        else if (i == 2 + 6 * cfg.L) m->head = p;
        else {
            llama_layer *y = &m->layers[(i - 1) / 6];
            bt_tensor **slot[6] = {&y->attn_norm, &y->wqkv, &y->wo, &y->mlp_norm, &y->w13, &y->w2};
            *slot[(i - 1) % 6] = p;
        }
    }
    if (cfg.tie) m->head = m->emb;
    bt_tp_layout_free(&lay);
}
/* llama_init on a shard: each matrix's elements drawn at their offsets in the 1-process buffer
   (bt_tp_shard_normal_), the norms 1, the vocabulary's padded rows (those of [V, Vp) the rank
   holds) 0: the shards are the 1-process weights */
static void llama__init_tp(llama *m, uint64_t seed) {
    int old = bt_set_grad_enabled(0);
    const llama_config *c = &m->cfg;
    bt_tp_layout lay;
    llama__layout(c, m->tp, &lay);
    for (int i = 0; i < lay.n; i++) {
        bt_tensor *p = m->params[i];
        if (p->ndim == 1) { bt_fill_(p, 1.0); continue; }
        bt_scope_begin();
        bt_tensor *local = bt_view(p, bt_shape1(bt_numel(p)));
        bt_tp_shard_normal_(lay.s[i], m->tp, m->tp_rank, local, 0.02, seed, (uint64_t)lay.whole_off[i]);
        if (p == m->emb || p == m->head) {   /* rows [lo, hi) of the vocabulary here; zero those >= V */
            int64_t lo = (int64_t)m->tp_rank * (c->Vp / m->tp), hi = lo + c->Vp / m->tp, z = lo > c->V ? lo : c->V;
            if (hi > z) bt_zero_(bt_narrow(p, 0, z - lo, hi - z));
        }
        bt_scope_end();
    }
    bt_tp_layout_free(&lay);
    bt_set_grad_enabled(old);
}

/* ---- the forward pass's parallel parts (llama.h's llama_split) ---- */
#define LLAMA_P(x) llama_param_as(m, (x), dt)
/* this rank's tokens idx [B, Tl] -> [B, Tl, C] ([B, Tl/tp, C] with sp: the embedding exits the
   vocabulary-parallel region by a reduce-scatter) */
static bt_tensor *llama__par_embed(llama *m, bt_tensor *idx, bt_dtype dt) {
    bt_par *p = m->par;
    if (!p) bt_error("llama: a tensor-parallel shard's forward pass needs its mesh (llama_par_attach)");
    if (idx->shape[1] != p->Tl) bt_error("tp/cp forward: %lld tokens per row, the mesh is set for %d", (long long)idx->shape[1], p->Tl);
    return bt_tp_embedding(p->tpc, LLAMA_P(m->emb), idx);
}
/* wqkv column-parallel (this rank's H/tp query and Hkv/tp kv heads), RoPE and grouped attention
   (over the cp group with cp > 1), wo row-parallel */
static bt_tensor *llama__par_attention(llama *m, llama_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_par *p = m->par;
    const llama_config *c = &m->cfg;
    int tp = m->tp > 1 ? m->tp : 1;
    int64_t H = c->H / tp, Hkv = c->Hkv / tp;
    if (!p) bt_error("llama: a split forward pass needs its mesh (llama_par_attach)");
    bt_tensor *qkv = tp > 1 ? bt_tp_linear_col(p->tpc, h, LLAMA_P(y->wqkv), NULL) : bt_linear(h, LLAMA_P(y->wqkv), NULL);
    bt_tensor *a = p->cp > 1 ? bt_cp_attention_qkv_ex(p->cpc, qkv, H, Hkv, &c->rope, 1) : bt_attention_qkv_ex(qkv, H, Hkv, &c->rope);
    return tp > 1 ? bt_tp_linear_row(p->tpc, a, LLAMA_P(y->wo), NULL) : bt_linear(a, LLAMA_P(y->wo), NULL);
}
/* w13 column-parallel (this rank's gate and up columns side by side: bt_swiglu's layout), w2 row-parallel */
static bt_tensor *llama__par_mlp(llama *m, llama_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_tp *tp = m->par->tpc;
    return bt_tp_linear_row(tp, bt_swiglu(bt_tp_linear_col(tp, h, LLAMA_P(y->w13), NULL)), LLAMA_P(y->w2), NULL);
}
/* the vocabulary-parallel head (tied: the embedding's rows) and loss on the final norm's output x */
static bt_tensor *llama__par_loss(llama *m, bt_tensor *x, bt_tensor *targets, bt_dtype dt) {
    return bt_tp_linear_cross_entropy(m->par->tpc, x, LLAMA_P(m->head), targets, m->cfg.V, -1);
}
#undef LLAMA_P
static const llama_split llama__split_tp = {llama__par_embed, llama__par_attention, llama__par_mlp, llama__par_loss, llama__init_tp};
static const llama_split llama__split_cp = {NULL, llama__par_attention, NULL, NULL, NULL};
static const llama_split *llama__tp_split(void) { return &llama__split_tp; }

/* ---- the mesh ---- */
BTDEF void llama_par_attach(bt_par *p, llama *m) {
    if (p->tp != (m->tp > 1 ? m->tp : 1)) bt_error("llama_par_attach: the mesh's tp %d, the model's shard of tp %d", p->tp, m->tp);
    m->par = p;
    m->split = m->tp > 1 ? &llama__split_tp : &llama__split_cp;
    bt_par_set_layout(p, llama__shard_fn, &m->cfg, llama_n_leaves(&m->cfg));
}
BTDEF llama *llama_par_whole_model(bt_par *p, llama *m, llama *whole) {
    if (m->tp <= 1) return m;
    bt_tensor *w = bt_par_gather_whole(p, m->flat);
    if (!w) return NULL;
    if (!whole->flat) llama_build(whole, m->cfg, m->device);
    bt_copy_(whole->flat, w);   /* llama_build: flat_numel = num_params, no padding */
    bt_release(w);
    return whole;
}
#endif /* LLAMA_PARALLEL_IMPLEMENTATION_DONE */
#endif /* LLAMA_PARALLEL_IMPLEMENTATION */
