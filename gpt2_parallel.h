/* gpt2_parallel.h - GPT-2 under tensor and context parallelism: which part of each tensor a rank
   holds, its init and file order, and the forward pass's parallel parts (bt_parallel.h's ops).

   USAGE
     #define GPT2_PARALLEL_IMPLEMENTATION in *one* C/CUDA file, then #include "gpt2_parallel.h".
     It needs gpt2.h and bt_parallel.h (which brings bt_dist.h).

     bt_par *p = bt_par_open(&opts, dist, on_gpu);          // a collective: the mesh's communicators
     gpt2_build_tp(&m, cfg, dev, opts.tp, p->tp_rank, 1, BT_F32);   // or gpt2_build_padded when tp = 1
     gpt2_par_attach(p, &m);                                 // the model's forward now runs split
     ... bt_par_batch for each batch, gpt2_loss, bt_backward, bt_par_reduce_grads ...
     bt_par_free(p);                                         // before bt_dist_shutdown

   The mesh, the shards' layout and the step's reductions are bt_parallel.h's (A MODEL ON THE
   MESH). Tensor parallelism (Megatron's split): rank r of a tp group holds
       wte         rows [r Vp/tp, (r+1) Vp/tp): the vocabulary-parallel embedding and the fused
                   vocabulary-parallel loss (max and sum-exp all-reduced; no logits gathered)
       qkvw, qkvb  the q, k and v rows of its H/tp heads (column-parallel: the heads' attention
                   is local)
       projw       columns [r C/tp, ..): row-parallel, its partial sums all-reduced
       fcw, fcb    rows [r 4C/tp, ..): column-parallel
       fcprojw     columns [r 4C/tp, ..): row-parallel
   and the other tensors whole (wpe, the layernorms, the row-parallel layers' biases). Model
   files hold the whole model in llm.c's order and checkpoints (weights and AdamW's m and v) the
   1-GPU buffer's: shards gathered on save, sliced on load, so files move between layouts.
   Context parallelism: rank i of a cp group holds the zig-zag chunks i and 2 cp - 1 - i of every
   sequence (tokens, targets and positions, bt_zigzag_global); attention is bt_cp_attention_qkv
   with the chosen K/V strategy, every other op works per token.
*/
#ifndef GPT2_PARALLEL_H
#define GPT2_PARALLEL_H
#include "gpt2.h"
#include "bt_parallel.h"

/* ---- shards ---- */
BTDEF bt_tp_shard gpt2_shard_of(const gpt2_config *c, int leaf);   /* leaf in gpt2_build's order */
BTDEF int64_t gpt2_leaf_file_base(const gpt2_config *c, int i);   /* leaf i's whole tensor in llm.c's order */
/* the parameters a rank of a tp-way model holds; *whole (may be NULL): those of its whole tensors */
BTDEF int64_t gpt2_local_numel(const gpt2_config *cfg, int tp, int64_t *whole);
/* rank r's shard: gpt2_build_padded's leaves, each its shard's shape, the whole tensors first in the
   buffer; num_params stays the whole model's, flat_numel is the shard's (padded to pad_to) */
BTDEF void gpt2_build_tp(gpt2 *m, gpt2_config cfg, bt_device dev, int tp, int r, int64_t pad_to, bt_dtype grad_dt);
BTDEF int64_t gpt2_par_whole_numel(const gpt2 *m);   /* the whole tensors' span at the buffer's start */
/* rank's shard (mem: [flat_numel]) to the whole model in llm.c's file order */
BTDEF void gpt2_par_to_file_order(const gpt2 *m, int rank, const float *mem, float *file);

/* ---- the mesh ---- */
BTDEF void gpt2_par_attach(bt_par *p, gpt2 *m);   /* m's forward, init and file order go split; p gets m's layout */
/* m itself, or with tp > 1 its shards gathered into *whole on rank 0 (made at the first call,
   refreshed on each; gpt2_free it after) and NULL elsewhere; a collective */
BTDEF gpt2 *gpt2_par_whole_model(bt_par *p, gpt2 *m, gpt2 *whole);
#endif /* GPT2_PARALLEL_H */

/* ============================================================================================== */
#ifdef GPT2_PARALLEL_IMPLEMENTATION
#ifndef GPT2_PARALLEL_IMPLEMENTATION_DONE
#define GPT2_PARALLEL_IMPLEMENTATION_DONE
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shards: which part of each whole tensor a rank holds ---- */
BTDEF bt_tp_shard gpt2_shard_of(const gpt2_config *c, int leaf) {
    int64_t C = c->C, qkv[3] = {C, C, C};
    if (leaf == 0) return bt_tp_shard_make(BT_TP_ROWS, c->Vp, C, 2);
    if (leaf == 1) return bt_tp_shard_make(BT_TP_WHOLE, c->maxT, C, 2);
    if (leaf >= 2 + 12 * c->L) return bt_tp_shard_make(BT_TP_WHOLE, C, 1, 1);
    switch ((leaf - 2) % 12) {
    case 2: return bt_tp_shard_packed(qkv, 3, C, 2);               /* qkvw */
    case 3: return bt_tp_shard_packed(qkv, 3, 1, 1);               /* qkvb */
    case 4: return bt_tp_shard_make(BT_TP_COLS, C, C, 2);          /* projw */
    case 8: return bt_tp_shard_make(BT_TP_ROWS, 4 * C, C, 2);      /* fcw */
    case 9: return bt_tp_shard_make(BT_TP_ROWS, 4 * C, 1, 1);      /* fcb */
    case 10: return bt_tp_shard_make(BT_TP_COLS, C, 4 * C, 2);     /* fcprojw */
    default: return bt_tp_shard_make(BT_TP_WHOLE, C, 1, 1);       /* ln1w ln1b projb ln2w ln2b fcprojb */
    }
}
BTDEF int64_t gpt2_leaf_file_base(const gpt2_config *c, int i) {
    int64_t sz[P_COUNT], off[P_COUNT], total = 0;
    gpt2_param_sizes(c, sz);
    for (int k = 0; k < P_COUNT; k++) { off[k] = total; total += sz[k]; }
    if (i < 2) return off[i == 0 ? P_WTE : P_WPE];
    if (i >= 2 + 12 * c->L) return off[i == 2 + 12 * c->L ? P_LNFW : P_LNFB];
    int k = P_LN1W + (i - 2) % 12, l = (i - 2) / 12;   /* the 12 layer kinds in the enum's order */
    return off[k] + l * (sz[k] / c->L);
}
/* the leaves' layout for tp (the caller frees it) */
static bt_tp_shard gpt2__shard_fn(const void *c, int leaf) { return gpt2_shard_of((const gpt2_config *)c, leaf); }
static void gpt2__layout(const gpt2_config *c, int tp, bt_tp_layout *l) { bt_tp_layout_of(l, gpt2__shard_fn, c, 4 + 12 * c->L, tp); }
BTDEF int64_t gpt2_local_numel(const gpt2_config *cfg, int tp, int64_t *whole) {
    return bt_tp_local_numel(gpt2__shard_fn, cfg, 4 + 12 * cfg->L, tp, whole);
}
static const gpt2_split *gpt2__tp_split(void);
/* With sp the whole tensors' gradients are one span of flat_grad, summed over tp by one collective.
   The shard's init and file order are its own at once (gpt2__split_tp); its forward pass needs the
   mesh (gpt2_par_attach). */
BTDEF void gpt2_build_tp(gpt2 *m, gpt2_config cfg, bt_device dev, int tp, int r, int64_t pad_to, bt_dtype grad_dt) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg; m->device = dev; m->tp = tp; m->tp_rank = r;
    if (tp > 1) m->split = gpt2__tp_split();
    int n = 4 + 12 * cfg.L;
    bt_tp_layout lay;
    gpt2__layout(&cfg, tp, &lay);
    m->num_params = gpt2_num_params(&cfg);
    m->flat_numel = (lay.local_numel + pad_to - 1) / pad_to * pad_to;
    m->flat = bt_zeros(bt_shape1(m->flat_numel), BT_F32, dev);
    m->flat_grad = bt_zeros(bt_shape1(m->flat_numel), grad_dt, dev);
    m->params = (bt_tensor **)calloc((size_t)n, sizeof(bt_tensor *));
    m->file_off = (int64_t *)calloc((size_t)n, sizeof(int64_t));
    m->layers = (gpt2_layer *)calloc((size_t)cfg.L, sizeof(gpt2_layer));
    if (!m->params || !m->file_off || !m->layers) bt_error("gpt2_build_tp: out of host memory");
    for (int i = 0; i < n; i++) {
        int64_t at = lay.local_off[i];
        bt_tensor *p = gpt2_leaf(m, &at, gpt2_leaf_file_base(&cfg, i), bt_tp_shard_shape(lay.s[i], tp));
        if (i < 2) *(i == 0 ? &m->wte : &m->wpe) = p;
        else if (i >= 2 + 12 * cfg.L) *(i == 2 + 12 * cfg.L ? &m->lnfw : &m->lnfb) = p;
        else {
            gpt2_layer *y = &m->layers[(i - 2) / 12];
            bt_tensor **slot[12] = {&y->ln1w, &y->ln1b, &y->qkvw, &y->qkvb, &y->projw, &y->projb,
                                    &y->ln2w, &y->ln2b, &y->fcw, &y->fcb, &y->fcprojw, &y->fcprojb};
            *slot[(i - 2) % 12] = p;
        }
    }
    bt_tp_layout_free(&lay);
}
static int64_t gpt2__leaf_off(const gpt2 *m, int i) { return m->params[i]->offset - m->flat->offset; }
BTDEF int64_t gpt2_par_whole_numel(const gpt2 *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) if (gpt2_shard_of(&m->cfg, i).kind == BT_TP_WHOLE) n += bt_numel(m->params[i]);
    return n;
}
/* between rank's shard (mem) and the whole model in llm.c's file order (file) in host memory */
static void gpt2__shards_file(const gpt2 *m, int rank, float *mem, float *file, int to_file) {
    bt_tp_layout lay;
    gpt2__layout(&m->cfg, m->tp, &lay);
    bt_scope_begin();
    bt_tp_layout_map(&lay, rank, bt_from_blob(mem, bt_shape1(m->flat_numel), BT_F32, bt_cpu()),
                     bt_from_blob(file, bt_shape1(m->num_params), BT_F32, bt_cpu()), m->file_off, to_file);
    bt_scope_end();
    bt_tp_layout_free(&lay);
}
BTDEF void gpt2_par_to_file_order(const gpt2 *m, int rank, const float *mem, float *file) { gpt2__shards_file(m, rank, (float *)mem, file, 1); }
static void gpt2__to_file_order(const gpt2 *m, const float *mem, float *file) { gpt2__shards_file(m, m->tp_rank, (float *)mem, file, 1); }
static void gpt2__from_file_order(const gpt2 *m, const float *file, float *mem) { gpt2__shards_file(m, m->tp_rank, mem, (float *)file, 0); }
/* gpt2_init on a shard: every element drawn at its whole-model file offset, so the shards are the
   1-GPU weights */
static void gpt2__init_tp(gpt2 *m, uint64_t seed) {
    int old = bt_set_grad_enabled(0), L = m->cfg.L;
    double std = 0.02, res_std = 0.02 / sqrt(2.0 * L);
    for (int i = 0; i < m->n_params; i++) {
        int k = i >= 2 && i < 2 + 12 * L ? (i - 2) % 12 : -1;
        double sd = i < 2 || k == 2 || k == 8 ? std : k == 4 || k == 10 ? res_std : 0;
        int one = k == 0 || k == 6 || i == 2 + 12 * L;   /* ln1w, ln2w, lnfw */
        bt_scope_begin();
        bt_tensor *local = bt_narrow(m->flat, 0, gpt2__leaf_off(m, i), bt_numel(m->params[i]));
        if (sd > 0) bt_tp_shard_normal_(gpt2_shard_of(&m->cfg, i), m->tp, m->tp_rank, local, sd, seed, (uint64_t)m->file_off[i]);
        else if (one) bt_fill_(local, 1.0);
        bt_scope_end();
    }
    bt_set_grad_enabled(old);
}

/* ---- the forward pass's parallel parts (gpt2.h's gpt2_split) ---- */
#define GPT2_P(x) gpt2_param_as(m, (x), dt)
/* token + position embeddings of this rank's tokens idx [B, Tl] -> [B, Tl, C] ([B, Tl/tp, C] with sp) */
static bt_tensor *gpt2__par_embed(gpt2 *m, bt_tensor *idx, bt_dtype dt) {
    bt_par *p = m->par;
    if (!p) bt_error("gpt2: a tensor-parallel shard's forward pass needs its mesh (gpt2_par_attach)");
    if (idx->shape[1] != p->Tl) bt_error("tp/cp forward: %lld tokens per row, the positions are set for %d", (long long)idx->shape[1], p->Tl);
    int64_t n = p->sp ? p->Tl / p->tp : p->Tl, lo = p->sp ? (int64_t)p->tp_rank * n : 0;
    bt_tensor *wte = GPT2_P(m->wte);
    bt_tensor *tok = m->tp > 1 ? bt_tp_embedding(p->tpc, wte, idx) : bt_embedding(wte, idx);
    bt_tensor *pos = bt_from_data(p->pos + lo, bt_shape1(n), BT_I32, m->device);
    return bt_add(tok, bt_embedding(GPT2_P(m->wpe), pos));
}
/* qkv column-parallel (this rank's H/tp heads), attention (the cp ring with cp > 1), the
   projection row-parallel */
static bt_tensor *gpt2__par_attention(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_par *p = m->par;
    bt_tensor *qw = GPT2_P(y->qkvw), *qb = GPT2_P(y->qkvb), *pw = GPT2_P(y->projw), *pb = GPT2_P(y->projb);
    int64_t H = m->cfg.H / (m->tp > 1 ? m->tp : 1);
    bt_tensor *qkv = m->tp > 1 ? bt_tp_linear_col(p->tpc, h, qw, qb) : bt_linear(h, qw, qb);
    bt_tensor *a = p->cp > 1 ? bt_cp_attention_qkv(p->cpc, qkv, H, 1) : bt_attention_qkv(qkv, H);
    return m->tp > 1 ? bt_tp_linear_row(p->tpc, a, pw, pb) : bt_linear(a, pw, pb);
}
static bt_tensor *gpt2__par_mlp(gpt2 *m, gpt2_layer *y, bt_tensor *h, bt_dtype dt) {
    bt_tp *tp = m->par->tpc;
    bt_tensor *u = bt_gelu(bt_tp_linear_col(tp, h, GPT2_P(y->fcw), GPT2_P(y->fcb)));
    return bt_tp_linear_row(tp, u, GPT2_P(y->fcprojw), GPT2_P(y->fcprojb));
}
/* the vocabulary-parallel head and loss on the final layernorm's output x */
static bt_tensor *gpt2__par_loss(gpt2 *m, bt_tensor *x, bt_tensor *targets, bt_dtype dt) {
    return bt_tp_linear_cross_entropy(m->par->tpc, x, GPT2_P(m->wte), targets, m->cfg.V, -1);
}
#undef GPT2_P
static const gpt2_split gpt2__split_tp = {gpt2__par_embed, gpt2__par_attention, gpt2__par_mlp, gpt2__par_loss,
                                          gpt2__init_tp, gpt2__to_file_order, gpt2__from_file_order};
static const gpt2_split gpt2__split_cp = {gpt2__par_embed, gpt2__par_attention, NULL, NULL, NULL, NULL, NULL};
static const gpt2_split *gpt2__tp_split(void) { return &gpt2__split_tp; }

/* ---- the mesh ---- */
BTDEF void gpt2_par_attach(bt_par *p, gpt2 *m) {
    m->par = p;
    m->split = m->tp > 1 ? &gpt2__split_tp : &gpt2__split_cp;
    bt_par_set_layout(p, gpt2__shard_fn, &m->cfg, 4 + 12 * m->cfg.L);
}
BTDEF gpt2 *gpt2_par_whole_model(bt_par *p, gpt2 *m, gpt2 *whole) {
    if (m->tp <= 1) return m;
    bt_tensor *w = bt_par_gather_whole(p, m->flat);
    if (!w) return NULL;
    if (!whole->flat) gpt2_build(whole, m->cfg, m->device);
    bt_copy_(whole->flat, w);   /* gpt2_build: flat_numel = num_params, no padding */
    bt_release(w);
    return whole;
}
#endif /* GPT2_PARALLEL_IMPLEMENTATION_DONE */
#endif /* GPT2_PARALLEL_IMPLEMENTATION */
