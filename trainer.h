/* trainer.h - the machinery of a training run that train_gpt2.c composes: the run's options and
   state, the model (GPT-2 or Llama, one interface), the data, data parallelism (DDP buckets, ZeRO)
   and tensor/context parallelism set up, fully sharded data parallelism (--dp fsdp: bt_parallel.h's
   engine under the model's units: bt_units), the micro-step captured as a CUDA graph, the micro-batch
   that fits, and checkpoints (save, resume, signals). The step itself (forward, backward, update)
   and the loop are train_gpt2.c's.

   USAGE
     #define TRAINER_IMPLEMENTATION in *one* C/CUDA file (train_gpt2.c), then #include "trainer.h".
     It needs gpt2.h, gpt2_io.h, gpt2_parallel.h, llama.h, llama_io.h, llama_parallel.h and the bt_ headers they
     bring, plus bt_optim.h.

   THE MODEL
     A run trains one family, chosen once (trainer_config.family): GPT-2 (gpt2.h, tr->model) or
     Llama (llama.h, tr->lm). Both keep every parameter in one flat fp32 buffer and its gradient in
     another, so the optimizer, ZeRO, the buckets, the gradient norm and the checkpoints see only
     those buffers (trainer_flat, trainer_flat_grad, trainer_params); the loop calls the model
     through trainer_model_* (loss, logits, the bf16 copy, init, samples, the Hugging Face export).
     Tensor/context parallelism takes either (gpt2_parallel.h, llama_parallel.h over bt_parallel.h's
     bt_par). --mlir, the tied embedding's rows exchange, --recompute gelu and --save (llm.c's GPT-2
     file) are GPT-2's only: a Llama run refuses them (trainer_family_check).
     --precision fp8 takes either: both models own their FP8 states alike (trainer_fp8_*).

   SECTIONS (implementation)
     0. the model: GPT-2 or Llama
     1. options
     2. data
     3. data parallelism: the buckets, ZeRO, the gradient norm
     4. the micro-step as a CUDA graph
     5. memory: the micro-batch and the recomputation that fit
     6. checkpoints: what a checkpoint records, saving, resuming, signals
     7. tensor and context parallelism: the flags, the layout
     8. the end of a run
     9. multiple-choice evaluation
*/
#ifndef TRAINER_H
#define TRAINER_H
#include "gpt2_io.h"
#include "gpt2_parallel.h"
#include "llama_io.h"
#include "llama_parallel.h"
#include "bt_optim.h"
#include <signal.h>
#include <stdio.h>

/* ---- 0. the model's family and config ---- */
enum { TRAINER_GPT2 = 0, TRAINER_LLAMA = 1 };
typedef struct {
    int family;                   /* TRAINER_GPT2 (0) or TRAINER_LLAMA */
    gpt2_config gpt2;             /* the family's own config */
    llama_config llama;
    int L, H, C, maxT, V, Vp;     /* the shape the loop needs (checks, FLOPs, the step line), of either */
} trainer_config;
trainer_config trainer_config_gpt2(gpt2_config c);
trainer_config trainer_config_llama(llama_config c);
/* a preset of either family by name (GPT-2's d12 .. s2, Llama's l125m .. ls2): 0, or -1 when none */
int trainer_config_preset(const char *name, trainer_config *c);
const char *trainer_family_name(int family);   /* "GPT-2", "Llama" */

/* ---- 1. the options of a run (train_gpt2.c's command line sets them; -1: decided later) ---- */
typedef struct {
    const char *train_glob, *val_glob, *out_dir, *model, *save_path, *tok_dir;
    int B, T, total_batch, steps, val_every, val_batches, sample_every, gen_len, topk, warmup;
    double lr, final_lr_frac, weight_decay, clip, temp;
    uint64_t seed;
    const char *precision;    /* fp32 | tf32 | bf16 | fp8 (GPT-2's block linears in FP8, the rest bf16; fp32 on a CPU) */
    const char *fp8_recipe;   /* --fp8-recipe current | delayed (NULL: not given; delayed with fp8) */
    int fp8_history;          /* --fp8-history N: the delayed recipe's amax history (0: not given; 16 with fp8) */
    const char *fp8_accum;    /* --fp8-accum split | fast | fast-dx: the products in fast accumulation (NULL: not given; split) */
    const char *fp8_head;     /* --fp8-head on | off: the classifier's products in FP8 too (NULL: not given; on, a resume the checkpoint's) */
    const char *grad_dtype;   /* --grad-dtype auto | f32 | bf16: the gradient buffer's dtype (bf16: one process, one micro-batch a
                                 step; auto, the default, is resolved to one of the two by train_gpt2.c's resolve_opts) */
    int offload;              /* --offload adamw: AdamW's m and v in pinned host memory (bt_adamw_init_offload) */
    const char *device;       /* auto | cpu | cuda | cuda:N */
    int overfit;              /* train on the first batch only */
    int quiet;
    int deterministic;        /* the same bits on every run (no atomics, no matmul autotuning) */
    int nproc;                /* --nproc: ranks this process starts on its node (1: none) */
    const char *dp;           /* ddp | zero1 | zero2: data parallelism when world > 1 */
    int bucket_mb;            /* DDP bucket size */
    int head_chunk_mb;        /* --head-chunk MB: the classifier's logits made this many MiB of rows at a time (1024) */
    const char *comm_dtype;   /* fp32 | bf16: the gradients' dtype on the wire */
    int ddp_rows;             /* the tied embedding's gradient as rows: 1 on, 0 off, -1 when smaller (ddp_rows_exchange) */
    int ddp_nccl;             /* 1: buckets through NCCL even where the copy engines could take them */
    int nccl_blocking;        /* blocking communicators: 1, 0, -1 where they pay (train_gpt2.c's train_main) */
    int timings;              /* the step line gets fwd+bwd ms; the last step prints DDP's bucket timeline */
    double nccl_timeout;      /* seconds a collective may take before the run is aborted */
    const char *ckpt_dir;     /* checkpoints: where they go; also --resume auto's place */
    int ckpt_every, ckpt_keep;   /* a checkpoint every N steps (0: only at the end and on a signal); the newest K kept (0: all) */
    int ckpt_overwrite;       /* the checkpoints in ckpt_dir of another run (or history) are deleted, not refused */
    const char *resume;       /* FILE, DIR or auto: continue that run */
    const char *init_from;    /* a Hugging Face model.safetensors (or its directory), or a checkpoint: its weights */
    const char *export_hf;    /* DIR: model.safetensors + config.json for transformers at the end */
    int skip_nonfinite;       /* a step with a non-finite loss or norm skips its update instead of stopping the run */
    int mlir;                 /* --mlir: fused chains through bt_mlir.h (BT_MLIR builds only) */
    int tp, cp, sp, async_tp; /* tensor / context parallelism: group sizes, sequence parallel, overlap */
    const char *cp_comm;      /* ring | allgather | alltoall: how context parallelism moves K/V (NULL: ring) */
    int cuda_graph;           /* 1 on, 0 off, -1 (default) on where it is supported */
    int recompute;            /* BT_RECOMPUTE_* flags, -1 (default) chosen by memory */
    int copy_in_update;       /* 1 (default): AdamW writes the bf16 weights in its own pass (trainer_update);
                                 0: a cast of their own before the forward (a test's reference: the same bits) */
    const char *weight_copy;  /* --weight-copy halves | separate: the bf16 weights as the fp32 weights' high halves
                                 (bt_adamw_split: 2 bytes a parameter less) or a copy of their own (NULL: not given;
                                 halves where trainer_halves_allowed, a resume the checkpoint's) */
    const char *grads;        /* --grads lazy | flat: each block's gradients take memory when the backward writes them and
                                 give it back after the update (bt_grads_lazy), or one buffer held throughout (NULL: not
                                 given; lazy where trainer_lazy_grads_allowed) */
    const char *eval_mc;      /* --eval-mc FILE: a multiple-choice set scored at each validation */
    int eval_only;            /* --eval-only: validation loss and --eval-mc of the model, no training */
    int given_i, given_j, given_t, given_tok, given_m;   /* flags the user gave: defaults are explained, not blamed */
} train_opts;
void train_default_opts(train_opts *o);

/* where the weights come from: --resume, --init-from, else -e */
typedef struct {
    bt_ckpt_file *file;    /* NULL: -e */
    int resume;            /* 1: the whole state is resumed from it, 0: its weights only */
    int hf;                /* 1: a Hugging Face file (GPT-2's, or a Llama directory: lhf) */
    int family;            /* the model it holds: TRAINER_GPT2 or TRAINER_LLAMA */
    llama_hf_files *lhf;   /* --init-from a Hugging Face Llama directory: its safetensors (file is NULL) */
    char prefix[16];       /* its names' prefix: "transformer." or "" (older files) */
    char path[4096];
} model_source;

/* The micro-step's CUDA graphs: the shapes they were captured for and the tensors they read and
   write, made before the capture so that their addresses stay fixed. One graph per kind of
   micro-step: [0] computes (one process; or data parallel, accumulating only), [1] computes and
   communicates (data parallel: the step's last micro-batch; zero2: every one). */
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

typedef struct trainer {
    int family;                /* TRAINER_GPT2 (0): model; TRAINER_LLAMA: lm (trainer_model_build sets it) */
    gpt2 model;
    llama lm;
    bt_adamw opt;
    bt_loader *train, *val;
    bt_tokenizer *tok;
    int32_t *inputs, *targets;
    bt_dtype dt;
    int val_B;                 /* validation rows per batch: B, or fewer when the val shards are small */
    train_opts o;
    FILE *log;
    int chart_off;             /* -o DIR's loss.svg failed once: no more charts */
    /* data parallelism over several processes (dist == NULL: one) */
    bt_dist *dist;
    bt_ddp *ddp;               /* the gradient buckets */
    bt_zero zero;              /* --dp zero1|zero2 (zero.stage 0: ddp) */
    bt_fsdp *fsdp;             /* --dp fsdp (bt_parallel.h): the shards of the weights, gradients and (through opt) AdamW state */
    bt_units fsdp_units;       /* the model's gathers go to fsdp */
    gpt2 fsdp_whole;           /* rank 0's whole model for the outputs (trainer_whole_model), made on first use */
    llama fsdp_whole_lm;       /* the same for a Llama */
    void *comm_ev[2];          /* around the step's last bt_ddp_wait on the compute stream (timed) */
    void *work_ev[2];          /* --timings: the step's start and the end of its last backward (timed) */
    int comm_early;            /* buckets already launched when the step's last backward ended; -1: no timed wait this step (graphs) */
    /* checkpoints */
    model_source src;
    int start_step;            /* the first step to run: 0, or the resumed checkpoint's */
    bt_ckpt_saver *saver;      /* rank 0 with --ckpt-dir: the asynchronous writer */
    int fence_pending;         /* a snapshot's copies must be done before the next update (trainer_ckpt_fence) */
    bt_tensor *gathered[7];    /* ZeRO or tp: AdamW's m and v (and with tp the weights) gathered, alive until the fence;
                                  [3], [4]: with ZeRO m and v over the ZeRO group (with tp the input of the tp gather);
                                  [5], [6]: an offloaded m and v copied to the GPU for those collectives */
    double last_stall_ms, total_stall_ms;   /* host time of the last snapshot, of all */
    int64_t saves_seen;        /* finished saves reported so far */
    int skipped;               /* --skip-nonfinite: updates skipped */
    bt_par *par;               /* tensor/context parallelism, NULL: none */
    gpt2 tp_whole;             /* rank 0 with --tp: the gathered model for the outputs (trainer_whole_model) */
    llama tp_whole_lm;         /* the same of a Llama */
    step_graph sg;             /* --cuda-graph */
    bt_tensor **grad_units;    /* --grads lazy: the units' gradient buffers (bt_grads_lazy), NULL: the flat buffer */
    int n_grad_units;
    double host_ms;            /* the last step's host time until its loss read (the rest is waiting for the GPU) */
    bt_mc_set mc;              /* --eval-mc: the multiple-choice set (n_items 0: none) */
} trainer;

/* ---- 0. the model, whichever family: its buffers, its forward, its outputs ---- */
bt_device trainer_device(const trainer *tr);
bt_tensor *trainer_flat(const trainer *tr);        /* the weights' buffer (fp32, flat_numel) */
bt_tensor *trainer_flat_grad(const trainer *tr);   /* the gradients' buffer (NULL under --dp fsdp: the engine's shards) */
bt_tensor **trainer_params(const trainer *tr, int *n);   /* the leaves in buffer order */
int64_t trainer_num_params(const trainer *tr);     /* of the whole model (files, FLOPs), also of a tp shard */
int64_t trainer_flat_numel(const trainer *tr);     /* the buffers' length: this rank's, padded for ZeRO */
trainer_config trainer_model_config(const trainer *tr);
/* the model of c on dev, buffers padded to a multiple of pad_to, gradients in grad_dt (--tp: gpt2_build_tp) */
void trainer_model_build(trainer *tr, const trainer_config *c, bt_device dev, int64_t pad_to, bt_dtype grad_dt);
void trainer_model_init(trainer *tr, uint64_t seed);
bt_tensor *trainer_model_loss(trainer *tr, bt_tensor *idx, bt_tensor *tgt);   /* mean cross-entropy in tr->dt */
bt_tensor *trainer_model_logits(trainer *tr, bt_tensor *idx);                 /* [B, T, Vp] */
void trainer_model_lowp_refresh(trainer *tr);      /* the bf16 copy after an update (outside a CUDA graph) */
/* n tokens after <|endoftext|>, printed; whole: GPT-2's whole model (trainer_whole_model), unused for
   Llama (its own, or the one trainer_whole_model gathered: with --tp tp_whole_lm, with fsdp
   fsdp_whole_lm) */
void trainer_model_sample(trainer *tr, gpt2 *whole, int n, int topk, double temp, uint64_t seed);
/* DIR/model.safetensors and DIR/config.json for transformers (GPT2LMHeadModel or LlamaForCausalLM) */
int trainer_model_export_hf(trainer *tr, gpt2 *whole, const char *dir, char *err, size_t errlen);
/* the flags a Llama run does not take yet (--mlir, --save, --ddp-rows on, --recompute gelu): 0,
   or -1 with err naming the flag */
int trainer_family_check(const train_opts *o, const trainer_config *c, char *err, size_t errlen);
/* --precision fp8: the model's FP8 states made (or set back to the start) with the run's recipe
   and history (gpt2_fp8_enable, llama_fp8_enable) */
void trainer_fp8_enable(trainer *tr);
/* --fp8-accum's names and bt_fp8_opts.fast_accum's bits, one table: split 0, fast BT_FP8_FAST_FWD,
   fast-dx BT_FP8_FAST_FWD | BT_FP8_FAST_DX. A name not in it (NULL, or a checkpoint's unknown
   value) has bits 0; bits not in it have the name NULL. */
int trainer_fp8_accum_bits(const char *name);
const char *trainer_fp8_accum_name(int bits);
/* once per optimizer step, after the last micro-batch's backward (train_gpt2.c calls it after the
   AdamW update, or after the update a non-finite step skipped): every state's amaxes of the step
   into its history and the next scales (gpt2_fp8_update, llama_fp8_update); no-op without FP8 */
void trainer_fp8_update(trainer *tr);

/* ---- 2. data ---- */
void trainer_load_batch(trainer *tr, bt_loader *L);   /* the next batch into tr->inputs, tr->targets */
/* one batch of B rows on the device as i32 [B, T] (this rank's tokens with cp), in the current scope */
void trainer_next_batch(trainer *tr, bt_loader *L, int B, bt_tensor **idx, bt_tensor **tgt);
int trainer_data_world(const trainer *tr);   /* the data-parallel ranks: the divisor of the global batch */

/* ---- 3. data parallelism ---- */
void trainer_setup_parallel(trainer *tr);    /* rank 0's weights everywhere, ZeRO's ranges, the buckets */
void trainer_ddp_wait_timed(trainer *tr);    /* bt_ddp_wait, the compute stream's wait timed */
double trainer_comm_exposed_ms(trainer *tr);
bt_tensor *trainer_grad_norm(trainer *tr);   /* the global L2 norm of the gradients (fp32 [1], no host sync) */
void trainer_update(trainer *tr, double lr, bt_tensor *norm);   /* AdamW on this rank's range; ZeRO's all-gather */
/* --weight-copy halves: the weights in two halves from here (before the first step, after any load)
   and back to fp32 (before the outputs read them); each a no-op where it does not apply */
int trainer_halves_allowed(const train_opts *o, int world, int on_gpu);
void trainer_weights_split(trainer *tr);
void trainer_weights_join(trainer *tr);
/* --grads lazy: one process on a GPU, none of tp/cp/fsdp/offload/mlir (their reductions, shards
   and chunked updates read the flat buffer). trainer_grads_lazy makes them so (after the
   optimizer's init); the step calls trainer_grads_begin before its first micro-step and
   trainer_grads_end after its update; trainer_grads_clear empties them (a probe's backward). */
int trainer_lazy_grads_allowed(const train_opts *o, int world, int on_gpu);
void trainer_grads_lazy(trainer *tr);
void trainer_grads_begin(trainer *tr);
void trainer_grads_end(trainer *tr);
void trainer_grads_clear(trainer *tr);

/* ---- 4. the micro-step as a CUDA graph ---- */
/* a micro-step: forward, backward of loss / accum, loss / accum into loss_sum, the data-parallel
   part of micro-batch a (graphed: inside or for a graph, nothing timed) */
typedef void (*trainer_micro_fn)(trainer *tr, bt_tensor *idx, bt_tensor *tgt, int a, int accum, bt_tensor *loss_sum, int graphed);
step_graph *trainer_graph_for(trainer *tr, int accum);          /* the graphs for this step's shapes */
bt_tensor *trainer_graph_tokens(trainer *tr, step_graph *g, int step);   /* the step's tokens uploaded at once */
/* micro-batch a through the graph of its kind (0 compute, 1 compute and communicate): warm-up and
   capture on first use */
void trainer_graph_micro_step(trainer *tr, step_graph *g, bt_tensor *tokens, int a, int kind, trainer_micro_fn micro);

/* ---- 5. memory ---- */
int trainer_auto_micro_batch(trainer *tr, int T, int total_batch, bt_dtype dt);   /* the largest power of two that fits */
/* the lightest of none, gelu, mlp, block with which B fits (measured), as BT_RECOMPUTE_* flags */
int trainer_choose_recompute(trainer *tr, int B, int T, bt_dtype dt);
int trainer_recompute_parse(const char *name);        /* none|norm|gelu|attn|mlp|block -> flags; -1 otherwise */
const char *trainer_recompute_name(int flags);        /* the flags' --recompute name ("flags" for another mix) */

/* ---- 6. checkpoints ---- */
void trainer_install_stop_signals(void);   /* SIGINT/SIGTERM: finish the step, checkpoint, exit 0; a second: at once */
void trainer_set_launcher(pid_t launcher); /* its copies of a Ctrl-C are not a second signal */
int trainer_stop_signal(void);             /* the signal that asked to stop, or 0 */
int trainer_stop_agreed(trainer *tr);      /* stop now? a collective with several processes */
/* --ckpt-dir, before anything reads it (a collective): rank 0's saver takes the directory for this run
   (made, locked, the temporaries dead writers left removed; another run holding it: an error naming it) */
int trainer_ckpt_lock(trainer *tr, const train_opts *o, bt_dist *dist, char *err, size_t errlen);
/* --resume or --init-from: the file opened, the model's config read (src->file NULL: neither); 0 or -1 */
int trainer_source_open(const train_opts *o, bt_dist *dist, model_source *src, trainer_config *cfg, char *err, size_t errlen);
int trainer_source_load(trainer *tr, char *err, size_t errlen);   /* its weights into the model */
void trainer_source_close(model_source *src);   /* its files closed (a resume's stays open until trainer_ckpt_restore) */
/* --resume: the run's options against the checkpoint's, naming the first that differs */
int trainer_ckpt_check(const model_source *src, const train_opts *o, const trainer_config *c, int world, char *err, size_t errlen);
void trainer_ckpt_import_tuning(trainer *tr);                  /* --resume: this rank's matmul choices back */
int trainer_ckpt_restore(trainer *tr, char *err, size_t errlen);   /* AdamW state, step counts, data position */
/* --ckpt-dir's checkpoints that are not the history of this run, after the restore, before anything is
   written (a collective): refused, naming the flags, or deleted with --ckpt-overwrite */
int trainer_ckpt_claim(trainer *tr, const train_opts *o, bt_dist *dist, char *err, size_t errlen);
void trainer_ckpt_snapshot(trainer *tr, int step, double loss);    /* a collective; the save goes on in a thread */
void trainer_ckpt_fence(trainer *tr);                          /* before the next update: the snapshot's copies done */
int trainer_ckpt_due(const trainer *tr, int s);                /* a checkpoint after step s (1-based)? */
int trainer_ckpt_report(trainer *tr, char *json, size_t cap);  /* a save finished since the last call: printed, logged */
int trainer_ckpt_finish(trainer *tr, int step, int saved_step, double loss);   /* the run's last checkpoint, waited for: 0, or -1 (said) */

/* ---- 7. tensor and context parallelism ---- */
int trainer_par_check(const train_opts *o, const trainer_config *c, int world, int on_gpu, char *err, size_t errlen);
bt_par_opts trainer_par_opts(const train_opts *o);
void trainer_par_describe(const bt_par *p, const train_opts *o);
/* the model for the outputs (tp, fsdp: gathered on rank 0, NULL elsewhere; a collective). A
   Llama's is gathered into tp_whole_lm, which trainer_model_sample and _export_hf read; the
   gpt2 pointer then only says whether this rank holds it. */
gpt2 *trainer_whole_model(trainer *tr);

/* ---- 8. the end ---- */
int trainer_end(trainer *tr, int rc);      /* frees what the trainer holds; rc passes through */

/* ---- 9. multiple-choice evaluation ----
   Every (item, ending) is a row: the context's tokens then the ending's, scored by the sum of the
   ending tokens' losses (the model predicting each from all before it). Rows are batched, many
   endings a forward pass, padded at the end to the batch's longest (causal attention: padding
   changes nothing before it) with ignored targets; a row longer than the model's context keeps its last maxT + 1 tokens; an
   empty context is <|endoftext|>. With several processes each scores items i = rank (mod ranks)
   and the per-ending sums are all-reduced: every rank ends with all of them. Not with --tp/--cp. */
typedef struct {
    int64_t n_items;
    int max_endings;
    double *loss;          /* [n_items * max_endings]: each ending's summed loss (nats) */
    int32_t *tokens;       /* [n_items * max_endings]: its scored tokens */
    int32_t *pred_sum, *pred_mean;   /* [n_items]: the ending of least summed / mean loss */
    double acc, acc_mean;  /* the fraction of items whose prediction is the label */
    double seconds;
} trainer_mc_result;
int trainer_eval_mc(trainer *tr, trainer_mc_result *r);       /* a collective; 0, or -1 (said) */
/* one JSON object per item: label, both predictions, each ending's loss and tokens (exact doubles) */
int trainer_mc_write(const trainer *tr, const trainer_mc_result *r, const char *path, char *err, size_t errlen);
void trainer_mc_free(trainer_mc_result *r);
#endif /* TRAINER_H */

/* ============================================================================================== */
#ifdef TRAINER_IMPLEMENTATION
#ifndef TRAINER_IMPLEMENTATION_DONE
#define TRAINER_IMPLEMENTATION_DONE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- 0. the model: GPT-2 or Llama ---- */
trainer_config trainer_config_gpt2(gpt2_config c) {
    trainer_config t;
    memset(&t, 0, sizeof t);
    t.family = TRAINER_GPT2; t.gpt2 = c;
    t.L = c.L; t.H = c.H; t.C = c.C; t.maxT = c.maxT; t.V = c.V; t.Vp = c.Vp;
    return t;
}
trainer_config trainer_config_llama(llama_config c) {
    trainer_config t;
    memset(&t, 0, sizeof t);
    t.family = TRAINER_LLAMA; t.llama = c;
    t.L = c.L; t.H = c.H; t.C = c.C; t.maxT = c.maxT; t.V = c.V; t.Vp = c.Vp;
    return t;
}
int trainer_config_preset(const char *name, trainer_config *c) {
    gpt2_config g;
    llama_config l;
    if (!gpt2_config_from_preset(name, BT_GPT2_VOCAB, &g)) { *c = trainer_config_gpt2(g); return 0; }
    if (!llama_config_from_preset(name, &l)) { *c = trainer_config_llama(l); return 0; }
    return -1;
}
const char *trainer_family_name(int family) { return family == TRAINER_LLAMA ? "Llama" : "GPT-2"; }

#define TRAINER__LLAMA(tr) ((tr)->family == TRAINER_LLAMA)
bt_device trainer_device(const trainer *tr) { return TRAINER__LLAMA(tr) ? tr->lm.device : tr->model.device; }
bt_tensor *trainer_flat(const trainer *tr) { return TRAINER__LLAMA(tr) ? tr->lm.flat : tr->model.flat; }
bt_tensor *trainer_flat_grad(const trainer *tr) { return TRAINER__LLAMA(tr) ? tr->lm.flat_grad : tr->model.flat_grad; }
bt_tensor **trainer_params(const trainer *tr, int *n) {
    *n = TRAINER__LLAMA(tr) ? tr->lm.n_params : tr->model.n_params;
    return TRAINER__LLAMA(tr) ? tr->lm.params : tr->model.params;
}
int64_t trainer_num_params(const trainer *tr) { return TRAINER__LLAMA(tr) ? tr->lm.num_params : tr->model.num_params; }
int64_t trainer_flat_numel(const trainer *tr) { return TRAINER__LLAMA(tr) ? tr->lm.flat_numel : tr->model.flat_numel; }
trainer_config trainer_model_config(const trainer *tr) {
    return TRAINER__LLAMA(tr) ? trainer_config_llama(tr->lm.cfg) : trainer_config_gpt2(tr->model.cfg);
}
void trainer_model_build(trainer *tr, const trainer_config *c, bt_device dev, int64_t pad_to, bt_dtype grad_dt) {
    tr->family = c->family;
    if (c->family == TRAINER_LLAMA) llama_build_padded(&tr->lm, c->llama, dev, pad_to, grad_dt);
    else gpt2_build_padded(&tr->model, c->gpt2, dev, pad_to, grad_dt);
}
void trainer_model_init(trainer *tr, uint64_t seed) {
    if (TRAINER__LLAMA(tr)) llama_init(&tr->lm, seed);
    else gpt2_init(&tr->model, seed);
}
/* the loss in dt (the memory probe's dtype may be the run's or not) */
static bt_tensor *trainer__loss(trainer *tr, bt_tensor *idx, bt_tensor *tgt, bt_dtype dt) {
    return TRAINER__LLAMA(tr) ? llama_loss(&tr->lm, idx, tgt, dt) : gpt2_loss(&tr->model, idx, tgt, dt);
}
bt_tensor *trainer_model_loss(trainer *tr, bt_tensor *idx, bt_tensor *tgt) { return trainer__loss(tr, idx, tgt, tr->dt); }
bt_tensor *trainer_model_logits(trainer *tr, bt_tensor *idx) {
    return TRAINER__LLAMA(tr) ? llama_logits(&tr->lm, idx, tr->dt) : gpt2_logits(&tr->model, idx, tr->dt);
}
void trainer_model_lowp_refresh(trainer *tr) {
    if (TRAINER__LLAMA(tr)) llama_lowp_refresh(&tr->lm, tr->dt);
    else gpt2_lowp_refresh(&tr->model, tr->dt);
}
/* Llama: llama_generate from <|endoftext|> (token 0 for a smaller vocabulary), the same draws as
   gpt2_sample's (Philox at (seed, s)), decoded by the GPT-2 tokenizer when the vocabulary is its */
/* a Llama's model for the outputs: the one trainer_whole_model gathered on rank 0 (fsdp, --tp), else its own */
static llama *trainer__llama_out(trainer *tr) { return tr->fsdp ? &tr->fsdp_whole_lm : tr->tp_whole_lm.flat ? &tr->tp_whole_lm : &tr->lm; }
void trainer_model_sample(trainer *tr, gpt2 *whole, int n, int topk, double temp, uint64_t seed) {
    if (!TRAINER__LLAMA(tr)) { gpt2_sample(whole, tr->tok, n, topk, temp, seed, tr->dt); return; }
    const llama_config *c = &tr->lm.cfg;
    int32_t prompt = BT_EOT < c->V ? BT_EOT : 0, *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!ids) bt_error("sample: out of host memory");
    if (n > 0 && llama_generate(trainer__llama_out(tr), &prompt, 1, n, topk, temp, seed, tr->dt, ids)) bt_error("sample: llama_generate failed");
    char *text = NULL;
    size_t nb = tr->tok && c->V == BT_GPT2_VOCAB && n > 0 ? bt_decode(tr->tok, ids, (size_t)n, &text) : (size_t)-1;
    if (nb != (size_t)-1) { fwrite(text, 1, nb, stdout); free(text); }
    else for (int i = 0; i < n; i++) printf("%d ", ids[i]);
    printf("\n");
    fflush(stdout);
    free(ids);
}
int trainer_model_export_hf(trainer *tr, gpt2 *whole, const char *dir, char *err, size_t errlen) {
    return TRAINER__LLAMA(tr) ? llama_hf_export(trainer__llama_out(tr), dir, err, errlen) : gpt2_hf_export(whole, dir, err, errlen);
}
int trainer_family_check(const train_opts *o, const trainer_config *c, char *err, size_t errlen) {
    if (c->family != TRAINER_LLAMA) return 0;
    const char *flag = o->mlir ? "--mlir" : o->save_path ? "--save" : o->ddp_rows == 1 ? "--ddp-rows on" : o->recompute == BT_RECOMPUTE_GELU ? "--recompute gelu" : NULL;
    if (!flag) return 0;
    if (!strcmp(flag, "--recompute gelu")) {
        snprintf(err, errlen, "--recompute gelu: a Llama has no GELU (its MLP is SwiGLU); attn, mlp or block remake its sublayers");
        return -1;
    }
    const char *why = !strcmp(flag, "--save") ? "it writes llm.c's GPT-2 model file; --export-hf DIR writes a Llama for transformers"
                    : !strcmp(flag, "--mlir") ? "its fused chain is GPT-2's MLP (bias + GELU)"
                    : "the rows exchange is GPT-2's tied embedding hook";
    snprintf(err, errlen, "%s: not for a Llama model yet (%s)", flag, why);
    return -1;
}

/* the recipe of --fp8-recipe, --fp8-history and --fp8-accum (train_gpt2.c's resolve_opts has filled them in) */
static const struct { const char *name; int bits; } trainer__fp8_accums[] = {
    {"split", 0}, {"fast", BT_FP8_FAST_FWD}, {"fast-dx", BT_FP8_FAST_FWD | BT_FP8_FAST_DX}};
int trainer_fp8_accum_bits(const char *name) {
    for (size_t i = 0; name && i < sizeof trainer__fp8_accums / sizeof trainer__fp8_accums[0]; i++)
        if (!strcmp(name, trainer__fp8_accums[i].name)) return trainer__fp8_accums[i].bits;
    return 0;
}
const char *trainer_fp8_accum_name(int bits) {
    for (size_t i = 0; i < sizeof trainer__fp8_accums / sizeof trainer__fp8_accums[0]; i++)
        if (trainer__fp8_accums[i].bits == bits) return trainer__fp8_accums[i].name;
    return NULL;
}
static bt_fp8_opts trainer__fp8_opts(const train_opts *o) {
    bt_fp8_opts f = bt_fp8_default_opts();
    f.recipe = o->fp8_recipe && !strcmp(o->fp8_recipe, "current") ? BT_FP8_CURRENT : BT_FP8_DELAYED;
    if (o->fp8_history > 0) f.history = o->fp8_history;
    f.fast_accum = trainer_fp8_accum_bits(o->fp8_accum);
    return f;
}
static int trainer__fp8_head(const train_opts *o) { return o->fp8_head && !strcmp(o->fp8_head, "on"); }
void trainer_fp8_enable(trainer *tr) {
    bt_fp8_opts f = trainer__fp8_opts(&tr->o);
    if (TRAINER__LLAMA(tr)) {
        tr->lm.fp8_head = trainer__fp8_head(&tr->o);
        llama_fp8_enable(&tr->lm, &f);
    } else {
        tr->model.fp8_head = trainer__fp8_head(&tr->o);
        gpt2_fp8_enable(&tr->model, &f);
    }
}
/* the model's FP8 states (NULL without), *n of them, in the flat buffer *buf (buf may be NULL) */
static bt_fp8_state *trainer__fp8(const trainer *tr, int *n, bt_tensor **buf) {
    bt_fp8_state *st = TRAINER__LLAMA(tr) ? tr->lm.fp8 : tr->model.fp8;
    *n = !st ? 0 : TRAINER__LLAMA(tr) ? tr->lm.n_fp8 : tr->model.n_fp8;
    if (buf) *buf = TRAINER__LLAMA(tr) ? tr->lm.fp8_buf : tr->model.fp8_buf;
    return st;
}
/* With several processes the step's amaxes are first all-reduced (max) over the world, so every
   rank rolls the same amaxes into the same histories and casts with the same scales: the scales of
   one process over the whole batch (x, w: the max over every micro-batch; gy: ddp's gradients are
   each rank's mean, a power-of-two multiple of one process's with 2^k ranks, whose scales then
   differ by that power of two and whose casts give the same bytes). The rest of each row (scale,
   history) is equal on every rank, so the max of the whole buffer leaves it as it is. */
void trainer_fp8_update(trainer *tr) {
    bt_tensor *buf = NULL;
    int n = 0;
    if (tr->dist && tr->dist->world > 1 && trainer__fp8(tr, &n, &buf) && buf)
        bt_all_reduce(tr->dist->world_comm, bt_data_ptr(buf), bt_data_ptr(buf), bt_numel(buf), BT_F32, BT_RED_MAX, NULL);
    if (TRAINER__LLAMA(tr)) llama_fp8_update(&tr->lm);
    else gpt2_fp8_update(&tr->model);
}

/* ---- 1. options ---- */
void train_default_opts(train_opts *o) {
    memset(o, 0, sizeof *o);
    o->train_glob = "data/tinyshakespeare_train.bin"; o->val_glob = "data/tinyshakespeare_val.bin";
    o->model = NULL; o->tok_dir = "data";
    o->B = -1; o->T = -1; o->total_batch = -1; o->steps = -1; o->val_every = -1; o->val_batches = 20;
    o->sample_every = -1; o->gen_len = 64; o->topk = 40; o->warmup = -1;
    o->lr = -1; o->final_lr_frac = 0.1; o->weight_decay = 0.1; o->clip = 1.0; o->temp = 1.0;
    o->seed = 1337; o->precision = NULL; o->device = "auto";
    o->nproc = 1; o->dp = "ddp"; o->bucket_mb = 25; o->head_chunk_mb = 1024; o->comm_dtype = "fp32"; o->nccl_timeout = 600; o->grad_dtype = "auto";
    o->ddp_rows = -1; o->nccl_blocking = -1;
    o->ckpt_keep = 3; o->tp = 1; o->cp = 1; o->cuda_graph = -1; o->recompute = -1; o->copy_in_update = 1;
}

/* ---- 2. data ---- */
void trainer_load_batch(trainer *tr, bt_loader *L) {
    if (bt_loader_next(L, tr->inputs, tr->targets) != 0) bt_error("data: %s", bt_data_error());
}
void trainer_next_batch(trainer *tr, bt_loader *L, int B, bt_tensor **idx, bt_tensor **tgt) {
    trainer_load_batch(tr, L);
    bt_shape s = bt_shape2(B, tr->o.T);
    *idx = bt_from_data(tr->inputs, s, BT_I32, trainer_device(tr));
    *tgt = bt_from_data(tr->targets, s, BT_I32, trainer_device(tr));
    if (tr->par) bt_par_batch(tr->par, tr->inputs, tr->targets, B, tr->o.T, trainer_device(tr), idx, tgt);
}
/* 1 when the model is a tensor-parallel shard (--tp 2 or more) */
static int trainer__tp(const trainer *tr) { return tr->par && tr->par->tp > 1; }
int trainer_data_world(const trainer *tr) { return tr->par ? tr->par->dp : tr->dist ? tr->dist->world : 1; }

/* ---- 3. data parallelism ---- */
/* ZeRO's group: the processes, or with tp/cp the dp x cp ranks of this tp index (they hold the
   same shard of the model, section 7) */
static bt_comm *trainer__zero_comm(const trainer *tr) { return tr->par ? tr->par->dpcp_comm : tr->dist->world_comm; }
static int trainer__param_index(const gpt2 *m, const bt_tensor *p) {
    for (int i = 0; i < m->n_params; i++) if (m->params[i] == p) return i;
    bt_error("trainer: not a parameter of the model");
    return -1;
}
/* GPT-2's tied embedding under data parallelism. wte's gradient is the output layer's (dense,
   final right after that layer's backward, the first of the pass) plus the lookup's rows (added by
   the last op of the pass). All-reduced as one table its bucket goes out last, with nothing left to
   hide it (0.55 ms of a 34 ms step on two H200s). Instead the dense part's bucket goes out as soon
   as the final layernorm's weight gradient is ready (that layernorm's backward follows the output
   layer's), and the rows travel by bt_ddp_add_rows: world x B x T rows of C instead of V x C.
   Taken when the gathered rows are smaller than the fp32 table (few tokens per rank), with plain
   data parallelism and an fp32 gradient buffer (--ddp-rows on|off decides otherwise). */
static void trainer__wte_dense_ready(bt_tensor *leaf, void *user) {
    trainer *tr = (trainer *)user;
    (void)leaf;
    bt_ddp_param_ready(tr->ddp, trainer__param_index(&tr->model, tr->model.wte), NULL);
}
static int trainer__rows_exchange(trainer *tr) {
    const gpt2 *m = &tr->model;
    if (tr->family != TRAINER_GPT2 || tr->par || m->device.type != BT_GPU || m->flat_grad->dtype != BT_F32 || tr->dist->world < 2 || tr->o.B < 1) return 0;
    if (tr->o.ddp_rows >= 0) return tr->o.ddp_rows;
    double gathered = (double)tr->dist->world * tr->o.B * tr->o.T * bt_dtype_size(tr->dt);   /* per column */
    return gathered <= 4.0 * (double)m->wte->shape[0];
}
/* --dp fsdp: the engine over the world, one unit per gpt2_units_bounds or llama_units_bounds (the
   embeddings; each block; the final norm, with a Llama's untied head), this rank's shards cut out
   of the weights every rank holds now (rank 0's, broadcast on GPUs; on CPU ranks every rank made
   the same ones: the same seed or file), and AdamW re-made over the shards' views. Then the model's full buffers go: its gradients (a unit's
   live in its gathered leaf during the backward, then in the shards) and its fp32 weights, whose
   storage keeps no memory (the leaves keep their offsets and shapes, all that GPT2_P and LLAMA_P
   read under units; a read of the data would fault at once). trainer_whole_model gathers the
   weights into a model of their own for the outputs. */
/* the model's compute copy of its weights (flat_lowp): where it lives */
static bt_tensor **trainer__lowp_slot(trainer *tr) { return TRAINER__LLAMA(tr) ? &tr->lm.flat_lowp : &tr->model.flat_lowp; }
static bt_tensor *trainer__fsdp_gather(void *ctx, int u, bt_dtype dt) { return bt_fsdp_gather((bt_fsdp *)ctx, u, dt); }
/* the leaves without gradients, and their buffer *flat_grad freed */
static void trainer__drop_grads(bt_tensor **params, int n, bt_tensor **flat_grad) {
    for (int i = 0; i < n; i++) { bt_release(params[i]->grad); params[i]->grad = NULL; }
    bt_release(*flat_grad);
    *flat_grad = NULL;
}
static void trainer__setup_fsdp(trainer *tr) {
    int llama = TRAINER__LLAMA(tr), n_params;
    bt_tensor *flat = trainer_flat(tr), **params = trainer_params(tr, &n_params);
    bt_comm *c = tr->dist->world_comm;
    bt_device dev = trainer_device(tr);
    if (dev.type == BT_GPU) {
        bt_broadcast(c, bt_data_ptr(flat), bt_data_ptr(flat), trainer_flat_numel(tr), BT_F32, 0, NULL);
        flat->storage->version++;
    }
    int64_t *lo = (int64_t *)malloc(sizeof(int64_t) * ((size_t)trainer_model_config(tr).L + 3));
    if (!lo) bt_error("--dp fsdp: out of host memory");
    int nu = llama ? llama_units_bounds(&tr->lm, lo) : gpt2_units_bounds(&tr->model, lo);
    bt_fsdp_unit *units = (bt_fsdp_unit *)malloc(sizeof(bt_fsdp_unit) * (size_t)nu);
    if (!units) bt_error("--dp fsdp: out of host memory");
    for (int u = 0; u < nu; u++) { units[u].lo = lo[u]; units[u].hi = lo[u + 1]; }
    bt_adamw o = tr->opt;   /* the whole model's AdamW state goes first (a lower peak) */
    bt_adamw_free(&tr->opt);
    tr->fsdp = bt_fsdp_create(c, dev, params, n_params, units, nu, flat, NULL);
    free(lo); free(units);
    trainer__drop_grads(params, n_params, llama ? &tr->lm.flat_grad : &tr->model.flat_grad);   /* trainer_flat_grad is NULL from here */
    bt_storage *st = flat->storage;   /* 4 bytes a parameter back to the allocator */
    bt_free(st->data);
    st->data = NULL; st->external = 1;
    bt_tensor **lowp = trainer__lowp_slot(tr);
    bt_release(*lowp);
    *lowp = NULL;
    int n;
    bt_tensor **p = bt_fsdp_params(tr->fsdp, &n);
    bt_adamw_init_offload(&tr->opt, p, n, o.beta1, o.beta2, o.eps, o.weight_decay, o.max_grad_norm, o.offload_chunk);
    tr->fsdp_units.gather = trainer__fsdp_gather;
    tr->fsdp_units.ctx = tr->fsdp;
    if (llama) llama_set_units(&tr->lm, &tr->fsdp_units);
    else gpt2_set_units(&tr->model, &tr->fsdp_units);
}
/* The data-parallel parts: every rank starts from rank 0's weights, holds (ZeRO) its range of the
   AdamW state and, for zero2, of the summed gradients, and communicates its gradients through the
   bucket engine, whose hooks fire as the backward pass finishes each parameter. */
static void trainer__setup_ddp(trainer *tr) {
    gpt2 *m = &tr->model;   /* GPT-2's leaves for the rows exchange (GPT-2 only) */
    bt_tensor *flat = trainer_flat(tr), *flat_grad = trainer_flat_grad(tr);
    int n_params;
    bt_tensor **params = trainer_params(tr, &n_params);
    int64_t flat_numel = trainer_flat_numel(tr);
    bt_device dev = trainer_device(tr);
    bt_comm *c = trainer__zero_comm(tr);   /* tp/cp: the ranks holding the same shard */
    bt_broadcast(c, bt_data_ptr(flat), bt_data_ptr(flat), flat_numel, BT_F32, 0, NULL);
    flat->storage->version++;
    bt_param_span *spans = (bt_param_span *)malloc(sizeof(bt_param_span) * (size_t)n_params);
    if (!spans || bt_ddp_spans_from_grads(params, n_params, flat_grad, spans)) bt_error("data parallel: %s", bt_dist_error());
    bt_ddp_opts d;
    memset(&d, 0, sizeof d);
    d.bucket_cap_bytes = (size_t)tr->o.bucket_mb << 20;
    d.comm_dtype = !strcmp(tr->o.comm_dtype, "bf16") ? BT_BF16 : flat_grad->dtype;
    d.shard_numel = tr->zero.stage ? tr->zero.shard : 0;
    d.trace = tr->o.timings;
    /* NCCL's host cost per bucket moves off the thread that launches the backward's kernels; not
       with tp/cp, whose collectives during the backward must keep one order on every rank */
    d.launch_thread = !tr->par;
    /* ranks on one host reduce their buckets through the copy engines, not NCCL's kernels (bt_dist.h,
       COPY ENGINES) */
    d.copy_engines = !tr->o.ddp_nccl;
    int rows = trainer__rows_exchange(tr);
    if (rows) d.launch_as_ready = 1;   /* wte's bucket fills first and must not wait for the plan's order */
    tr->ddp = bt_ddp_create(c, bt_data_ptr(flat_grad), flat_grad->dtype, flat_numel, spans, n_params, &d);
    for (int i = 0; i < n_params; i++)
        if (!(rows && params[i] == m->wte)) bt_register_grad_hook(params[i], bt_ddp_grad_hook, bt_ddp_hook_arg(tr->ddp, i));
    if (rows) {
        bt_register_grad_hook(m->lnfw, trainer__wte_dense_ready, tr);
        bt_set_rows_hook(m->wte, bt_ddp_rows_hook, bt_ddp_hook_arg(tr->ddp, trainer__param_index(m, m->wte)));
    }
    free(spans);
    if (dev.type == BT_GPU)
        for (int i = 0; i < 2; i++) tr->comm_ev[i] = bt_event_create_timed(dev);
}
/* the ZeRO stage from --dp, its group's ranges and AdamW's range; then the buckets: with tp/cp
   over the dp x cp group (a group of one, --tp 2 on two GPUs, reduces nothing, and ZeRO's range
   is then the whole buffer); on CPUs tp/cp have no data parallelism */
void trainer_setup_parallel(trainer *tr) {
    if (tr->zero.stage) {
        bt_zero z = tr->zero;
        bt_zero_init(&tr->zero, z.stage, trainer__zero_comm(tr), tr->opt.numel, z.shard, trainer_device(tr));
        bt_adamw_shard(&tr->opt, tr->zero.lo, tr->zero.hi);
    }
    if (tr->dist && !strcmp(tr->o.dp, "fsdp")) trainer__setup_fsdp(tr);
    else if (tr->par ? !tr->par->on_cpu && tr->par->dpcp_comm && tr->par->dpcp_comm->size > 1 : tr->dist != NULL) trainer__setup_ddp(tr);
    if (tr->o.timings && trainer_device(tr).type == BT_GPU)
        for (int i = 0; i < 2; i++) tr->work_ev[i] = bt_event_create_timed(trainer_device(tr));
}
/* The gradient communication the backward pass did not hide: the compute stream's time from the
   end of the backward to the arrival of the last bucket (timed events around bt_ddp_wait; read
   after the step's host sync, so a step with several synced micro-batches reports its last), and
   the buckets that were already on their way when the backward ended. */
void trainer_ddp_wait_timed(trainer *tr) {
    void *s = bt_stream_current(trainer_device(tr));
    tr->comm_early = bt_ddp_get_stats(tr->ddp).launched;
    if (tr->comm_ev[0]) bt_event_record(tr->comm_ev[0], s);
    bt_ddp_wait(tr->ddp, NULL);
    if (tr->comm_ev[1]) bt_event_record(tr->comm_ev[1], s);
}
double trainer_comm_exposed_ms(trainer *tr) {
    return tr->comm_ev[0] ? bt_event_elapsed_ms(tr->comm_ev[0], tr->comm_ev[1]) : NAN;
}
/* With ZeRO each rank holds the reduced gradients of its range only: the ranges' squares are added
   over the group; with tp the replicated tensors' part (the buffer's first W elements, equal on
   every tp rank) counts once and the split part is summed over tp. */
bt_tensor *trainer_grad_norm(trainer *tr) {
    int tp = trainer__tp(tr);
    if (tr->fsdp) return bt_fsdp_grad_norm(tr->fsdp);
    if (tr->zero.stage) {
        int64_t W = tp ? tr->par->lay.whole_numel : trainer_flat_numel(tr);
        bt_tensor *sq = bt_zero_sumsq(&tr->zero, trainer_flat_grad(tr), W);
        if (tp) bt_par_tp_sum(tr->par, bt_narrow(sq, 0, 1, 1));
        return bt_sqrt(bt_add(bt_narrow(sq, 0, 0, 1), bt_narrow(sq, 0, 1, 1)));
    }
    if (tp) return bt_par_grad_norm(tr->par, trainer_flat_grad(tr));
    int n;
    bt_tensor **params = trainer_params(tr, &n);
    return bt_grad_norm(params, n);
}
/* Gradients per unit (bt_optim.h, GRADIENTS THAT HOLD NO MEMORY BETWEEN STEPS): the units are
   fsdp's (gpt2_units_bounds: the embeddings, each block, the final layernorm). Eager steps give the
   memory back after each update, so the next forward's activations take it. A CUDA graph's
   addresses are fixed: with one micro-batch a step the capture takes each unit's memory at its
   first gradient, from the graph's pool, and the zero fill is part of the graph (a replay's
   forward may use those bytes before the backward fills them), so the units stay held and the
   graph zeroes them; with several micro-batches the gradients must outlive the next forward (whose
   peak then holds them whatever is done, as PyTorch's does), so every unit is held before the
   capture (outside the pool: the flat buffer's memory) and zeroed at each step's start. */
int trainer_lazy_grads_allowed(const train_opts *o, int world, int on_gpu) {
    return on_gpu && world == 1 && o->tp * o->cp == 1 && !o->offload && !o->mlir && strcmp(o->dp, "fsdp");
}
void trainer_grads_lazy(trainer *tr) {
    if (!tr->o.grads || strcmp(tr->o.grads, "lazy") || tr->grad_units) return;
    int llama = TRAINER__LLAMA(tr), n;
    bt_tensor **params = trainer_params(tr, &n);
    int64_t *lo = (int64_t *)malloc(sizeof(int64_t) * ((size_t)trainer_model_config(tr).L + 3));
    if (!lo) bt_error("--grads lazy: out of host memory");
    int nu = llama ? llama_units_bounds(&tr->lm, lo) : gpt2_units_bounds(&tr->model, lo);
    tr->grad_units = bt_grads_lazy(params, n, lo, nu);
    tr->n_grad_units = nu;
    free(lo);
    bt_tensor **flat_grad = llama ? &tr->lm.flat_grad : &tr->model.flat_grad;
    bt_release(*flat_grad);   /* trainer_flat_grad is NULL from here */
    *flat_grad = NULL;
    /* its segment goes back to the device now: cached, the next allocations would split it and
       pin it, reserved for the whole run (d48: 2.9 GB) */
    if (trainer_device(tr).type == BT_GPU) bt_alloc_empty_cache(trainer_device(tr));
}
static int trainer__graph_zeroes(const trainer *tr) { return tr->sg.accum == 1 && (tr->sg.graph[0] || tr->sg.graph[1]); }
void trainer_grads_begin(trainer *tr) {
    if (!tr->grad_units) { if (trainer_flat_grad(tr)) bt_zero_(trainer_flat_grad(tr)); return; }
    if (!trainer__graph_zeroes(tr)) bt_grads_zero(tr->grad_units, tr->n_grad_units);
}
void trainer_grads_end(trainer *tr) {
    if (tr->grad_units && !tr->sg.graph[0] && !tr->sg.graph[1]) bt_grads_drop(tr->grad_units, tr->n_grad_units);
}
void trainer_grads_clear(trainer *tr) {
    if (tr->grad_units) bt_grads_drop(tr->grad_units, tr->n_grad_units);
    else bt_zero_(trainer_flat_grad(tr));
}

/* The bf16 weights as the high halves of the fp32 ones (bt_optim.h, THE WEIGHTS IN TWO HALVES): one
   AdamW over the whole flat buffer, as the copy in the update below needs, and nothing else that
   reads the fp32 weights during the steps: one process (ZeRO's and fsdp's all-gathers and shards
   are fp32; plain ddp would work as it is, each rank splitting after the broadcast, but has not
   run on two GPUs), no tp/cp (their shard files) or --mlir; a compute dtype of bf16 (bf16, or fp8
   on a GPU). With --offload adamw the offloaded update streams each chunk's two halves. */
int trainer_halves_allowed(const train_opts *o, int world, int on_gpu) {
    int bf16 = o->precision && (!strcmp(o->precision, "bf16") || (!strcmp(o->precision, "fp8") && on_gpu));
    return bf16 && o->copy_in_update && !o->mlir && o->tp * o->cp == 1 && world == 1;
}
/* In place (a temporary of 2 bytes a parameter, given back to the device with the old copy: the
   steps' peak does not hold them); the model's compute copy is then the high halves, current by
   construction (gpt2_lowp_refresh sees the storage's halves and casts nothing). */
void trainer_weights_split(trainer *tr) {
    if (!tr->o.weight_copy || strcmp(tr->o.weight_copy, "halves") || tr->opt.split) return;
    bt_tensor **lowp = trainer__lowp_slot(tr);
    bt_release(*lowp);
    *lowp = NULL;
    bt_scope_begin();
    *lowp = bt_keep(bt_adamw_split(&tr->opt));
    bt_scope_end();
    if (trainer_device(tr).type == BT_GPU) bt_alloc_empty_cache(trainer_device(tr));
}
void trainer_weights_join(trainer *tr) {
    if (!tr->opt.split) return;
    if (tr->fence_pending) trainer_ckpt_fence(tr);   /* a snapshot's copies read the halves first */
    bt_tensor **lowp = trainer__lowp_slot(tr);
    bt_release(*lowp);
    *lowp = NULL;   /* the next forward casts a copy of its own */
    bt_adamw_join(&tr->opt);
}
/* The model's bf16 copy of its weights when AdamW can write it in its update (bt_adamw_set_copy):
   one update over the whole flat buffer the copy mirrors, so not with ZeRO or fsdp, whose updates
   cover a rank's range (the others' come by the all-gather of fp32 weights, and the cast follows).
   That saves the cast's pass: 4 bytes a parameter read, 1.56B parameters at d48 ~6 GB a step. */
static bt_tensor *trainer__lowp_copy(trainer *tr) {
    bt_tensor *flat = trainer_flat(tr), *lowp = *trainer__lowp_slot(tr);
    const bt_adamw *o = &tr->opt;
    if (o->split || !tr->o.copy_in_update || !lowp || lowp->dtype != BT_BF16 || tr->fsdp || tr->zero.stage || !o->flat_p || !flat) return NULL;
    if (o->flat_p->storage != flat->storage || o->flat_p->offset != flat->offset || o->lo != 0 || o->hi != o->numel ||
        o->numel != bt_numel(flat) || !bt_device_eq(bt_device_of(lowp), bt_device_of(flat)))
        return NULL;
    return lowp;
}
void trainer_update(trainer *tr, double lr, bt_tensor *norm) {
    if (tr->fence_pending) trainer_ckpt_fence(tr);   /* a checkpoint's copies of the weights and state finish first */
    bt_adamw_set_grad_norm(&tr->opt, norm);
    bt_tensor *copy = trainer__lowp_copy(tr);   /* NULL in halves: the update writes the high ones */
    if (copy != tr->opt.copy) bt_adamw_set_copy(&tr->opt, copy);
    bt_adamw_update(&tr->opt, (float)lr, tr->fsdp ? tr->fsdp->grad : tr->zero.grad_sum);
    if (TRAINER__LLAMA(tr)) llama_lowp_written(&tr->lm, copy);   /* the next forward needs no cast */
    else gpt2_lowp_written(&tr->model, copy);
    if (tr->zero.stage) bt_zero_all_gather(&tr->zero, trainer_flat(tr));   /* every rank's updated range to its group */
}

/* ---- 4. the micro-step as a CUDA graph (--cuda-graph) ----
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
static void trainer__graph_free(step_graph *g) {
    int captures = g->captures;
    for (int k = 0; k < 2; k++) bt_graph_free(g->graph[k]);
    bt_release(g->idx); bt_release(g->tgt); bt_release(g->in); bt_release(g->loss_sum);
    free(g->host);
    memset(g, 0, sizeof *g);
    g->captures = captures;
}
/* a change of B, T, accumulation or dtype drops the graph: the next micro-steps warm up and capture anew */
step_graph *trainer_graph_for(trainer *tr, int accum) {
    step_graph *g = &tr->sg;
    int B = tr->o.B, T = tr->o.T;
    if (g->in && g->B == B && g->T == T && g->accum == accum && g->dt == tr->dt) return g;
    trainer__graph_free(g);
    g->B = B; g->T = T; g->accum = accum; g->dt = tr->dt;
    g->host = (int32_t *)malloc(sizeof(int32_t) * 2 * (size_t)accum * B * T);
    if (!g->host) bt_error("--cuda-graph: out of host memory for %d micro-batches of %d x %d tokens", accum, B, T);
    bt_scope_begin();
    g->in = bt_keep(bt_zeros(bt_shape3(2, B, T), BT_I32, trainer_device(tr)));
    g->idx = bt_keep(bt_view(bt_narrow(g->in, 0, 0, 1), bt_shape2(B, T)));
    g->tgt = bt_keep(bt_view(bt_narrow(g->in, 0, 1, 1), bt_shape2(B, T)));
    g->loss_sum = bt_keep(bt_scalar(0, BT_F32, trainer_device(tr)));
    bt_scope_end();
    return g;
}
/* [accum, 2, B, T] in the current scope */
bt_tensor *trainer_graph_tokens(trainer *tr, step_graph *g, int step) {
    size_t n = (size_t)g->B * g->T;
    for (int a = 0; a < g->accum; a++) {
        if (tr->o.overfit && step + a > 0) bt_loader_reset(tr->train);
        trainer_load_batch(tr, tr->train);
        memcpy(g->host + (2 * (size_t)a) * n, tr->inputs, n * sizeof(int32_t));
        memcpy(g->host + (2 * (size_t)a + 1) * n, tr->targets, n * sizeof(int32_t));
    }
    return bt_from_data(g->host, bt_shape4(g->accum, 2, g->B, g->T), BT_I32, trainer_device(tr));
}
/* micro-batch a (of kind k) captured into g->graph[k], in the pool of the step's graphs */
static void trainer__graph_capture(trainer *tr, step_graph *g, int k, int a, trainer_micro_fn micro) {
    bt_device dev = trainer_device(tr);
    if (tr->grad_units) {   /* (Gradients per unit, above) */
        if (g->accum == 1) bt_grads_drop(tr->grad_units, tr->n_grad_units);
        else bt_grads_take(tr->grad_units, tr->n_grad_units);
    }
    bt_alloc_empty_cache(dev);   /* the warm-up's cached blocks go back: the graph's pool takes their place */
    bt_graph *cg = bt_graph_capture_begin(dev);
    if (g->pool) { bt_alloc_pool_pop(dev); bt_alloc_pool_push(dev, g->pool); }   /* the end pops it */
    else g->pool = bt_graph_pool(cg);
    bt_scope_begin();
    micro(tr, g->idx, g->tgt, a, g->accum, g->loss_sum, 1);
    bt_scope_end();
    bt_graph_capture_end(cg);
    g->graph[k] = cg;
    g->captures++;
}
/* FP8 with the delayed recipe: a cast's path (its own amax, or the history's scale) is chosen on
   the host from its state's `primed` bits, which the first optimizer step sets; a graph captured
   before would replay the first step's path for ever. So until every state is primed the
   micro-steps run eagerly (the same kernels), and the capture comes after. */
static int trainer__fp8_unprimed(const trainer *tr) {
    int n;
    const bt_fp8_state *st = trainer__fp8(tr, &n, NULL);
    if (!st || st[0].opts.recipe != BT_FP8_DELAYED) return 0;
    for (int i = 0; i < n; i++)
        if (st[i].primed != (1u << BT_FP8_ROLES) - 1) return 1;
    return 0;
}
void trainer_graph_micro_step(trainer *tr, step_graph *g, bt_tensor *tokens, int a, int k, trainer_micro_fn micro) {
    bt_copy_(g->in, bt_view(bt_narrow(tokens, 0, a, 1), bt_shape3(2, g->B, g->T)));
    trainer_model_lowp_refresh(tr);   /* the bf16 weights after the last update: a copy outside the graph */
    if (!g->graph[k] && trainer__fp8_unprimed(tr)) { micro(tr, g->idx, g->tgt, a, g->accum, g->loss_sum, 1); return; }
    if (!g->graph[k] && !g->warmed[k]) { micro(tr, g->idx, g->tgt, a, g->accum, g->loss_sum, 1); g->warmed[k] = 1; return; }
    if (!g->graph[k]) trainer__graph_capture(tr, g, k, a, micro);
    bt_graph_launch(g->graph[k]);
    /* its collectives were not timed in the capture: the watchdog times the replay */
    if (k) bt_dist_watch(tr->dist->world_comm, "ddp micro-step graph", NULL);
}

/* ---- 5. memory ---- */
#ifdef BT_CUDA
/* peak memory of one forward+backward at micro-batch B (synthetic tokens: memory does not depend on their values) */
static size_t trainer__probe_peak(trainer *tr, int B, int T, bt_dtype dt) {
    bt_device dev = trainer_device(tr);
    bt_alloc_reset_peak(dev);
    int32_t *ids = (int32_t *)calloc((size_t)B * T, sizeof(int32_t));
    if (!ids) bt_error("auto micro-batch: out of host memory");
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(ids, bt_shape2(B, T), BT_I32, dev);
    bt_backward(trainer__loss(tr, idx, idx, dt));
    bt_scope_end();
    free(ids);
    trainer_grads_clear(tr);
    size_t peak = bt_alloc_stats(dev).peak_allocated;
    /* the probe's cached blocks go back: kept, a probe at another B and the run after it would take
       new blocks around them (at d48 B 8, 2.8 GB more reserved at the peak) */
    bt_alloc_empty_cache(dev);
    return peak;
}
#endif
/* Memory of a micro-step at B: activations grow linearly in B, so two probes (B = 1, b2) give the
   fixed part and the part per sequence (with the recomputation set now). The budget keeps 10% of
   the device free for fragmentation and the libraries' own buffers. A larger b2 measures the part
   per sequence closer to a large B's (d12 at T=1024: 372 MiB from B = 1, 2, ~300 MiB seen at B = 64..192). */
typedef struct { size_t fixed, per; double budget; } trainer__mem;
static trainer__mem trainer__probe_memory(trainer *tr, int T, bt_dtype dt, int b2) {
    trainer__mem mm = {0, 1, 0};
#ifdef BT_CUDA
    size_t p1 = trainer__probe_peak(tr, 1, T, dt), p2 = trainer__probe_peak(tr, b2, T, dt), free_b = 0, total_b = 0;
    mm.per = p2 > p1 ? (p2 - p1) / (size_t)(b2 - 1) : 1; mm.fixed = p1 > mm.per ? p1 - mm.per : 0;
    bt_device_memory(trainer_device(tr), &free_b, &total_b);
    mm.budget = 0.9 * (double)(free_b + bt_alloc_stats(trainer_device(tr)).reserved);
#else
    (void)tr; (void)T; (void)dt; (void)b2;
#endif
    return mm;
}
static double trainer__need(trainer__mem mm, int B) { return mm.fixed + (double)mm.per * B; }
/* --recompute's modes, by what GPT-2 keeps per layer (gpt2.h, gpt2__block: units of B T C
   activations): none 16, gelu 11, attn 11, mlp 7, block 1; the work remade grows the same way
   (gelu: two elementwise kernels, GELU and ln2; attn: ~4C^2 + 2TC multiply-adds per token; mlp:
   8C^2; block: both). The default climbs none < gelu < mlp < block and stops at the first that
   fits; attn is left out (what gelu saves for the attention's work: mlp's step is the better one). */
static const struct { const char *name; int flags; } trainer__recompute_modes[] = {
    {"none", 0}, {"norm", BT_RECOMPUTE_NORM}, {"gelu", BT_RECOMPUTE_GELU}, {"attn", BT_RECOMPUTE_ATTN}, {"mlp", BT_RECOMPUTE_MLP},
    {"block", BT_RECOMPUTE_BLOCK}};
int trainer_recompute_parse(const char *name) {
    for (size_t i = 0; i < sizeof trainer__recompute_modes / sizeof trainer__recompute_modes[0]; i++)
        if (!strcmp(name, trainer__recompute_modes[i].name)) return trainer__recompute_modes[i].flags;
    return -1;
}
const char *trainer_recompute_name(int flags) {
    for (size_t i = 0; i < sizeof trainer__recompute_modes / sizeof trainer__recompute_modes[0]; i++)
        if (flags == trainer__recompute_modes[i].flags) return trainer__recompute_modes[i].name;
    return "flags";
}
int trainer_choose_recompute(trainer *tr, int B, int T, bt_dtype dt) {
    static const int gpt2_ladder[] = {0, BT_RECOMPUTE_GELU, BT_RECOMPUTE_MLP, BT_RECOMPUTE_BLOCK};
    static const int llama_ladder[] = {0, BT_RECOMPUTE_MLP, BT_RECOMPUTE_BLOCK};   /* no GELU in a Llama */
    const int *ladder = TRAINER__LLAMA(tr) ? llama_ladder : gpt2_ladder;
    int b2 = B >= 8 ? 8 : 2, old = bt_get_recompute(), k;
    int n = TRAINER__LLAMA(tr) ? (int)(sizeof llama_ladder / sizeof *llama_ladder) : (int)(sizeof gpt2_ladder / sizeof *gpt2_ladder);
    double need[4];
    trainer__mem mm = {0, 1, 0};
    for (k = 0; k < n; k++) {
        bt_set_recompute(ladder[k]);
        mm = trainer__probe_memory(tr, T, dt, b2);
        need[k] = trainer__need(mm, B);
        if (need[k] <= mm.budget) break;
    }
    bt_set_recompute(old);
    if (k == 0) { printf("recompute: none (B %d fits: %.0f of %.0f MiB)\n", B, need[0] / 1048576.0, mm.budget / 1048576.0); return 0; }
    int fits = k < n;
    if (!fits) k = n - 1;
    printf("recompute: %s (B %d needs", trainer_recompute_name(ladder[k]), B);
    for (int i = 0; i <= k; i++) printf("%s %.0f MiB with %s", i ? "," : "", need[i] / 1048576.0, trainer_recompute_name(ladder[i]));
    printf("; %.0f usable%s)\n", mm.budget / 1048576.0, fits ? "" : ": it may not fit even so, give a smaller -b");
    return ladder[k];
}
int trainer_auto_micro_batch(trainer *tr, int T, int total_batch, bt_dtype dt) {
    int best = 1;
#ifdef BT_CUDA
    trainer__mem mm = trainer__probe_memory(tr, T, dt, 2);
    while ((int64_t)best * 2 * T <= total_batch && total_batch % ((int64_t)best * 2 * T) == 0 && trainer__need(mm, best * 2) <= mm.budget) best *= 2;
    printf("auto micro-batch: %.0f MiB per sequence of %d tokens, %.0f MiB fixed, %.0f MiB usable -> B = %d\n",
           mm.per / 1048576.0, T, mm.fixed / 1048576.0, mm.budget / 1048576.0, best);
#else
    (void)tr; (void)T; (void)total_batch; (void)dt;
#endif
    return best;
}

/* ---- 6. checkpoints ----
   A checkpoint (bt_ckpt.h) is one safetensors file, DIR/ckpt_STEP.safetensors, holding
       params    [num_params] f32   the weights in the flat buffer's order (gpt2.h: wte, wpe,
                                    layer 0 .. L-1 with its 12 tensors each, lnfw, lnfb)
       adamw.m   [num_params] f32   AdamW's moments over the same elements
       adamw.v   [num_params] f32
       fp8.state [4 L 3 (2 + n)] f32  --precision fp8 only: the FP8 states (the model's fp8_buf: per
                                    block linear, per tensor x, w, gy: amax, scale, amax history)
   and in its metadata the run: what a resume must share with it (trainer__ckpt_fields: the model,
   the batch, the schedule, the seed, the precision, the data parallelism), the steps done
   (train.step, which is also the learning-rate schedule's position, and adamw.step), every
   rank's data-loader position (loader.RANK), every rank's matmul autotuner choices
   (train.matmul_tuning.RANK) and the device; bt_ckpt.h adds a CRC32C of every tensor and one of
   the header. Only rank 0 writes. With ZeRO each rank holds a range of m and v: at a checkpoint
   the ranges are all-gathered into temporaries, so the file is the same whatever the
   data-parallel mode, and a resume reads its own range out of it. With --tp the weights, m and v
   are gathered over the tp group into the 1-GPU layout the same way, and the loader positions are
   the data-parallel ranks' (a tp or cp group reads one dp index's rows): a checkpoint of --tp 2 or
   --cp 2 is the file one process writes, and resumes in any layout.
   A snapshot costs the loop only the enqueueing of device-to-host copies into pinned memory (on
   a copy stream); the next optimizer update waits for them on the device (trainer_ckpt_fence),
   and a thread checksums and writes the file while training goes on (at most one save in flight).
   The directory belongs to one run: rank 0's saver locks it from before the resume is looked for to
   the end (trainer_ckpt_lock), and checkpoints there that are not this run's history are refused,
   or deleted with --ckpt-overwrite, before anything is written (trainer_ckpt_claim). */

/* signals */
static volatile sig_atomic_t trainer__stop;   /* the first SIGINT/SIGTERM: stop after this step */
static pid_t trainer__launcher;               /* a rank's launcher (its parent process), or 0 */
/* The first SIGINT/SIGTERM asks the loop to finish its step, checkpoint and exit 0; a second one
   ends the process at once, after removing the temporaries of files being written (the previous
   checkpoint stays whole). A launcher (--nproc, torchrun) passes on the Ctrl-C that its ranks got
   from the terminal too: a copy from it does not count as the second. */
static void trainer__on_stop(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (!trainer__stop) { trainer__stop = sig; return; }
    if (trainer__launcher > 0 && info && info->si_code == SI_USER && info->si_pid == trainer__launcher) return;
    bt_atomic_cleanup_exit();
    signal(sig, SIG_DFL);
    raise(sig);                        /* delivered when the handler returns: the default, the end */
}
/* a signal that was ignored when the process started (nohup, `&` in a script) stays ignored */
void trainer_install_stop_signals(void) {
    static const int sigs[2] = {SIGINT, SIGTERM};
    for (int k = 0; k < 2; k++) {
        struct sigaction sa, old;
        if (sigaction(sigs[k], NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = trainer__on_stop;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGINT); sigaddset(&sa.sa_mask, SIGTERM);
        sigaction(sigs[k], &sa, NULL);
    }
}
void trainer_set_launcher(pid_t launcher) { trainer__launcher = launcher; }
int trainer_stop_signal(void) { return trainer__stop; }
/* a MAX over the ranks' flags once per step: ranks that got the signal at different steps stop
   after the same one, and none waits alone */
int trainer_stop_agreed(trainer *tr) {
    int mine = trainer__stop != 0;
    if (!tr->dist) return mine;
    bt_scope_begin();
    bt_tensor *f = bt_full(bt_shape1(1), mine, BT_I32, trainer_device(tr));
    bt_all_reduce(tr->dist->world_comm, bt_data_ptr(f), bt_data_ptr(f), 1, BT_I32, BT_RED_MAX, NULL);
    int any = bt_item(f) != 0;
    bt_scope_end();
    return any;
}

/* What a resumed run must share with the run it resumes (all that changes its losses), as text:
   doubles as %.17g, so equal values give equal text. One table for writing and for checking.
   world is the data-parallel one: --tp and --cp change no loss (beyond rounding), so a
   checkpoint moves between them freely. */
#define TRAINER_MAX_FIELDS 40
typedef struct { const char *key, *flag, *absent; char val[48]; } trainer__field;   /* absent: what a checkpoint older than the key means */
/* the model's fields: GPT-2's gpt2.*, a Llama's llama.* (every llama_config field); the family
   itself is train.model (trainer__meta; absent in older checkpoints, which are GPT-2's) */
static int trainer__ckpt_fields(const train_opts *o, const trainer_config *tc, int world, trainer__field *f) {
    int n = 0;
#define FIELD(k, fl, fmt, v) (f[n].key = (k), f[n].flag = (fl), f[n].absent = NULL, snprintf(f[n].val, sizeof f[n].val, fmt, v), n++)
    if (tc->family == TRAINER_LLAMA) {
        const llama_config *c = &tc->llama;
        FIELD("llama.maxT", "-e", "%d", c->maxT); FIELD("llama.V", "-e", "%d", c->V); FIELD("llama.Vp", "-e", "%d", c->Vp);
        FIELD("llama.L", "-e", "%d", c->L); FIELD("llama.H", "-e", "%d", c->H); FIELD("llama.Hkv", "-e", "%d", c->Hkv);
        FIELD("llama.C", "-e", "%d", c->C); FIELD("llama.F", "-e", "%d", c->F); FIELD("llama.tie", "-e", "%d", c->tie);
        FIELD("llama.eps", "-e", "%.17g", c->eps); FIELD("llama.rope_theta", "-e", "%.17g", c->rope.theta);
        FIELD("llama.rope_factor", "-e", "%.17g", c->rope.factor); FIELD("llama.rope_low_freq_factor", "-e", "%.17g", c->rope.low_freq_factor);
        FIELD("llama.rope_high_freq_factor", "-e", "%.17g", c->rope.high_freq_factor);
        FIELD("llama.rope_original_max_position_embeddings", "-e", "%lld", (long long)c->rope.original_max_position_embeddings);
    } else {
        const gpt2_config *c = &tc->gpt2;
        FIELD("gpt2.maxT", "-e", "%d", c->maxT); FIELD("gpt2.V", "-e", "%d", c->V); FIELD("gpt2.Vp", "-e", "%d", c->Vp);
        FIELD("gpt2.L", "-e", "%d", c->L); FIELD("gpt2.H", "-e", "%d", c->H); FIELD("gpt2.C", "-e", "%d", c->C);
    }
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
    FIELD("train.grad_dtype", "--grad-dtype", "%s", o->grad_dtype ? o->grad_dtype : "f32");
    f[n - 1].absent = "f32";
    if (o->precision && !strcmp(o->precision, "fp8")) {   /* only then: older checkpoints lack them */
        bt_fp8_opts fo = trainer__fp8_opts(o);
        FIELD("train.fp8_recipe", "--fp8-recipe", "%s", fo.recipe == BT_FP8_CURRENT ? "current" : "delayed");
        FIELD("train.fp8_history", "--fp8-history", "%d", fo.history);
        FIELD("train.fp8_accum", "--fp8-accum", "%s", trainer_fp8_accum_name(fo.fast_accum));
        f[n - 1].absent = "split";
        FIELD("train.fp8_head", "--fp8-head", "%s", trainer__fp8_head(o) ? "on" : "off");
        f[n - 1].absent = "off";
    }
#undef FIELD
    return n;
}
/* the family a checkpoint holds: train.model ("gpt2", "llama"; absent: GPT-2, as checkpoints
   written before Llama); -1 for another value */
static int trainer__ckpt_family(const bt_ckpt_meta *meta) {
    const char *v = bt_ckpt_meta_get(meta, "train.model");
    return !v || !strcmp(v, "gpt2") ? TRAINER_GPT2 : !strcmp(v, "llama") ? TRAINER_LLAMA : -1;
}
/* the model's config out of a checkpoint's metadata, checked as a model file's header is */
static int trainer__ckpt_config(const bt_ckpt_meta *meta, const char *path, trainer_config *tc, char *err, size_t errlen) {
    int family = trainer__ckpt_family(meta);
    if (family < 0) { bt_msgf(err, errlen, "%s: train.model \"%s\" is neither gpt2 nor llama", path, bt_ckpt_meta_get(meta, "train.model")); return -1; }
    if (family == TRAINER_LLAMA) {
        static const char *const ik[9] = {"llama.maxT", "llama.V", "llama.Vp", "llama.L", "llama.H", "llama.Hkv", "llama.C", "llama.F", "llama.tie"};
        static const char *const dk[4] = {"llama.eps", "llama.rope_theta", "llama.rope_factor", "llama.rope_low_freq_factor"};
        llama_config c;
        memset(&c, 0, sizeof c);
        int *idst[9] = {&c.maxT, &c.V, &c.Vp, &c.L, &c.H, &c.Hkv, &c.C, &c.F, &c.tie};
        double *ddst[5] = {&c.eps, &c.rope.theta, &c.rope.factor, &c.rope.low_freq_factor, &c.rope.high_freq_factor};
        int64_t v, orig;
        for (int i = 0; i < 9; i++) {
            if (bt_ckpt_meta_get_int(meta, ik[i], INT32_MIN, INT32_MAX, &v)) { bt_msgf(err, errlen, "%s: %s", path, bt_ckpt_error()); return -1; }
            *idst[i] = (int)v;
        }
        for (int i = 0; i < 5; i++)
            if (bt_ckpt_meta_get_f64(meta, i < 4 ? dk[i] : "llama.rope_high_freq_factor", ddst[i])) { bt_msgf(err, errlen, "%s: %s", path, bt_ckpt_error()); return -1; }
        if (bt_ckpt_meta_get_i64(meta, "llama.rope_original_max_position_embeddings", &orig)) { bt_msgf(err, errlen, "%s: %s", path, bt_ckpt_error()); return -1; }
        c.rope.original_max_position_embeddings = orig;
        *tc = trainer_config_llama(c);
        return llama_config_check(&c, path, err, errlen);
    }
    static const char *const keys[6] = {"gpt2.maxT", "gpt2.V", "gpt2.Vp", "gpt2.L", "gpt2.H", "gpt2.C"};
    gpt2_config c;
    int *dst[6] = {&c.maxT, &c.V, &c.Vp, &c.L, &c.H, &c.C};
    for (int i = 0; i < 6; i++) {
        int64_t v;
        if (bt_ckpt_meta_get_int(meta, keys[i], INT32_MIN, INT32_MAX, &v)) { bt_msgf(err, errlen, "%s: %s", path, bt_ckpt_error()); return -1; }
        *dst[i] = (int)v;
    }
    *tc = trainer_config_gpt2(c);
    return gpt2_config_check(&c, path, "gpt2.", err, errlen);
}
int trainer_ckpt_check(const model_source *src, const train_opts *o, const trainer_config *c, int world, char *err, size_t errlen) {
    trainer__field f[TRAINER_MAX_FIELDS];
    const bt_ckpt_meta *meta = bt_ckpt_file_meta(src->file);
    int family = trainer__ckpt_family(meta);
    if (family != c->family) {
        snprintf(err, errlen, "--resume %.500s: the checkpoint holds a %s model, -e %s is %s", src->path,
                 family < 0 ? "unknown" : trainer_family_name(family), o->model ? o->model : "?", trainer_family_name(c->family));
        return -1;
    }
    int n = trainer__ckpt_fields(o, c, world, f);
    for (int i = 0; i < n; i++) {
        const char *v = bt_ckpt_meta_get(meta, f[i].key);
        if (!v) v = f[i].absent;
        if (!v) { snprintf(err, errlen, "--resume %.500s: no \"%s\" in its metadata: not a train_gpt2 checkpoint", src->path, f[i].key); return -1; }
        if (strcmp(v, f[i].val) && (!strncmp(f[i].key, "gpt2.", 5) || !strncmp(f[i].key, "llama.", 6))) {
            trainer_config h;
            if (trainer__ckpt_config(meta, src->path, &h, err, errlen)) return -1;
            bt_msgf(err, errlen, "--resume %.500s: the checkpoint holds a model of L %d H %d C %d maxT %d V %d, -e %s is L %d H %d "
                     "C %d maxT %d V %d%s", src->path, h.L, h.H, h.C, h.maxT, h.V, o->model ? o->model : "?", c->L, c->H, c->C, c->maxT, c->V,
                     c->family == TRAINER_LLAMA ? " (or another llama_config field differs: the checkpoint's llama.* metadata)" : "");
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
static int trainer__meta_tuning(trainer *tr, bt_ckpt_meta *meta) {
    int bad = 0;
#ifdef BT_CUDA
    bt_device dev = trainer_device(tr);
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
/* before the first matmul plans anew; only on the GPU model that made them */
void trainer_ckpt_import_tuning(trainer *tr) {
#ifdef BT_CUDA
    const bt_ckpt_meta *meta = bt_ckpt_file_meta(tr->src.file);
    bt_device dev = trainer_device(tr);
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
/* fp8.primed: each FP8 state's host-side `primed` bits (x 1, w 2, gy 4: which tensors' histories
   hold an amax), one digit 0-7 per state in fp8_buf's order. A resume sets them back, so its casts
   take the paths the uninterrupted run's take. */
static int trainer__fp8_meta_set(const bt_fp8_state *st, int n, bt_ckpt_meta *meta) {
    char *txt = (char *)malloc((size_t)n + 1);
    if (!txt) bt_error("checkpoint: out of host memory");
    for (int i = 0; i < n; i++) txt[i] = (char)('0' + (st[i].primed & 7u));
    txt[n] = 0;
    int bad = bt_ckpt_meta_set(meta, "fp8.primed", txt);
    free(txt);
    return bad;
}
static int trainer__fp8_meta_get(bt_fp8_state *st, int n, const bt_ckpt_meta *meta, const char *path, char *err, size_t errlen) {
    const char *txt = bt_ckpt_meta_get(meta, "fp8.primed");
    if (!txt || (int)strlen(txt) != n || (int)strspn(txt, "01234567") != n) {
        bt_msgf(err, errlen, "--resume %s: fp8.primed is %s (expected %d digits 0-7, one per FP8 linear)", path, txt ? "malformed" : "absent", n);
        return -1;
    }
    for (int i = 0; i < n; i++) { st[i].primed = (unsigned)(txt[i] - '0'); st[i].seen = 0; }
    return 0;
}
/* The checkpoint's metadata (rank 0's; NULL on the others): a collective, as every rank's loader
   state and matmul choices are gathered through the store. The loader positions are the data-
   parallel ranks' (with tp/cp one per dp index: its ranks read the same rows), and the fields
   name the data-parallel world. */
static bt_ckpt_meta *trainer__meta(trainer *tr, int step, double loss) {
    int world = tr->dist ? tr->dist->world : 1, rank = tr->dist ? tr->dist->rank : 0, bad = 0, dworld = trainer_data_world(tr);
    bt_loader_state mine, *all = (bt_loader_state *)calloc((size_t)world, sizeof *all);
    if (!all) bt_error("checkpoint: out of host memory");
    memset(&mine, 0, sizeof mine);
    bt_loader_get_state(tr->train, &mine);
    all[0] = mine;
    if (tr->dist && bt_store_allgather(bt_dist_store(tr->dist), &mine, all, sizeof mine)) bt_error("checkpoint: %s", bt_dist_error());
    bt_ckpt_meta *meta = rank == 0 ? bt_ckpt_meta_new() : NULL;
    bad |= trainer__meta_tuning(tr, meta);
    if (meta) {
        trainer__field f[TRAINER_MAX_FIELDS];
        trainer_config tc = trainer_model_config(tr);
        int n = trainer__ckpt_fields(&tr->o, &tc, dworld, f);
        const train_opts *o = &tr->o;
        for (int i = 0; i < n; i++) bad |= bt_ckpt_meta_set(meta, f[i].key, f[i].val);
        bad |= bt_ckpt_meta_set(meta, "train_gpt2.checkpoint", "1");
        bad |= bt_ckpt_meta_set(meta, "train.model", tr->family == TRAINER_LLAMA ? "llama" : "gpt2");
        bad |= bt_ckpt_meta_set_i64(meta, "train.step", step);
        bad |= bt_ckpt_meta_set_i64(meta, "adamw.step", tr->opt.step);
        bad |= bt_ckpt_meta_set_f64(meta, "train.loss", loss);
        bad |= bt_ckpt_meta_set_f64(meta, "train.lr_next", bt_lr_cosine(step, o->warmup, o->steps, o->lr, o->lr * o->final_lr_frac));
        bad |= bt_ckpt_meta_set(meta, "train.device", bt_device_of(trainer_flat(tr)).type == BT_GPU ? bt_device_name(trainer_device(tr)) : "cpu");
        /* not a field a resume must repeat (another mode only rounds the copy's ties otherwise; a
           resume with several processes cannot have halves): a resume not giving
           --weight-copy takes this one where it applies (main; absent: older, separate) */
        bad |= bt_ckpt_meta_set(meta, "train.weight_copy", tr->opt.split ? "halves" : "separate");
        bad |= bt_ckpt_meta_set_i64(meta, "train.deterministic", o->deterministic);
        bad |= bt_ckpt_meta_set_i64(meta, "train.tp", o->tp);   /* the layout it was made in: not a resume's constraint */
        bad |= bt_ckpt_meta_set_i64(meta, "train.cp", o->cp);
        for (int d = 0; d < dworld; d++) bad |= bt_ckpt_meta_set_loader(meta, d, &all[tr->par ? d * tr->par->cp * tr->par->tp : d]);
        int n8;
        const bt_fp8_state *st8 = trainer__fp8(tr, &n8, NULL);
        if (st8) bad |= trainer__fp8_meta_set(st8, n8, meta);
        if (bad) bt_error("checkpoint: the metadata: %s", bt_ckpt_error());
    }
    free(all);
    return meta;
}
/* m or v for a collective: offloaded (pinned host memory) on a GPU, first copied to the GPU (NCCL
   moves device memory), the copy alive until the fence as the gathered ones */
static bt_tensor *trainer__state_for_comm(trainer *tr, bt_tensor *s, int k) {
    if (!tr->opt.offload || trainer_device(tr).type != BT_GPU) return s;
    return tr->gathered[5 + k] = bt_retain(bt_to(s, trainer_device(tr)));
}
/* AdamW's m and v over all num_params elements in the 1-GPU layout: the optimizer's own, or
   gathered (collectives) into temporaries that live until the fence: with ZeRO every rank's range
   over the ZeRO group, then with tp the tp ranks' buffers into the 1-GPU layout (on rank 0; NULL
   on the others) */
static void trainer__gather_adamw(trainer *tr, bt_tensor **m, bt_tensor **v) {
    if (tr->fsdp) {   /* every rank's shards in the flat layout (a collective) */
        *m = tr->gathered[0] = bt_retain(bt_fsdp_full(tr->fsdp, trainer__state_for_comm(tr, tr->opt.m, 0)));
        *v = tr->gathered[1] = bt_retain(bt_fsdp_full(tr->fsdp, trainer__state_for_comm(tr, tr->opt.v, 1)));
        return;
    }
    if (!tr->zero.stage && !trainer__tp(tr)) { *m = tr->opt.m; *v = tr->opt.v; return; }
    bt_tensor *state[2] = {trainer__state_for_comm(tr, tr->opt.m, 0), trainer__state_for_comm(tr, tr->opt.v, 1)}, **out[2] = {m, v};
    for (int k = 0; k < 2; k++) {
        bt_tensor *x = tr->zero.stage ? (tr->gathered[3 + k] = bt_zero_gather(&tr->zero, state[k])) : state[k];
        *out[k] = trainer__tp(tr) ? (tr->gathered[k] = bt_par_gather_whole(tr->par, x)) : bt_narrow(x, 0, 0, trainer_num_params(tr));
    }
}
static void trainer__release_gathered(trainer *tr) {
    for (size_t k = 0; k < sizeof tr->gathered / sizeof tr->gathered[0]; k++) { bt_release(tr->gathered[k]); tr->gathered[k] = NULL; }
}
/* the device waits there for the snapshot's copies (the host does not); the gathered temporaries
   may then go (later work on the stream comes after them) */
void trainer_ckpt_fence(trainer *tr) {
    bt_ckpt_saver_fence(tr->saver, NULL);
    trainer__release_gathered(tr);
    tr->fence_pending = 0;
}
static double trainer__now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
/* every rank calls it after the same step: the state gathered, rank 0's copies enqueued; the host
   time is the loop's stall. A save that failed is a warning, the run goes on (the previous
   checkpoint is whole). */
void trainer_ckpt_snapshot(trainer *tr, int step, double loss) {
    double t0 = trainer__now();
    if (tr->fence_pending) trainer_ckpt_fence(tr);   /* no update since the last snapshot (skipped ones) */
    bt_scope_begin();
    bt_tensor *m, *v;
    bt_adamw_wait(&tr->opt);   /* offloaded: the last update's stores of m and v */
    trainer__gather_adamw(tr, &m, &v);
    /* the weights in the 1-GPU layout: with tp the shards gathered (rank 0), else the buffer */
    bt_tensor *w = tr->fsdp ? (tr->gathered[2] = bt_retain(bt_fsdp_full(tr->fsdp, tr->fsdp->param)))
                 : trainer__tp(tr) ? (tr->gathered[2] = bt_par_gather_whole(tr->par, trainer_flat(tr)))
                                    : bt_narrow(trainer_flat(tr), 0, 0, trainer_num_params(tr));
    bt_ckpt_meta *meta = trainer__meta(tr, step, loss);
    if (tr->saver) {
        int n8;
        bt_tensor *t[4] = {w, m, v, NULL};
        trainer__fp8(tr, &n8, &t[3]);
        const char *names[4] = {"params", "adamw.m", "adamw.v", "fp8.state"};
        if (bt_ckpt_saver_wait(tr->saver)) fprintf(stderr, "warning: checkpoint: %s\n", bt_ckpt_error());   /* the previous one */
        if (bt_ckpt_saver_snapshot(tr->saver, step, t, names, t[3] ? 4 : 3, meta))
            fprintf(stderr, "warning: the checkpoint of step %d was not taken: %s\n", step, bt_ckpt_error());
        else tr->fence_pending = 1;
    }
    bt_ckpt_meta_free(meta);
    bt_scope_end();
    if (!tr->fence_pending) trainer__release_gathered(tr);
    tr->last_stall_ms = 1e3 * (trainer__now() - t0);
    tr->total_stall_ms += tr->last_stall_ms;
}
/* every --ckpt-every steps and after the last one */
int trainer_ckpt_due(const trainer *tr, int s) {
    return tr->o.ckpt_dir && ((tr->o.ckpt_every && s % tr->o.ckpt_every == 0) || s == tr->o.steps);
}
int trainer_ckpt_report(trainer *tr, char *json, size_t cap) {
    bt_ckpt_saver_stats st;
    if (!tr->saver) return 0;
    while (bt_ckpt_saver_warning(tr->saver)) fprintf(stderr, "warning: %s\n", bt_ckpt_error());   /* a rotation that left a file */
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
   then the host waits for the save. 0, or -1 when that checkpoint is not on disk (said: a failed
   save, or a snapshot that was not taken). The run's other outputs are written all the same. */
int trainer_ckpt_finish(trainer *tr, int step, int saved_step, double loss) {
    if (!tr->o.ckpt_dir || step == tr->start_step) return 0;   /* nothing new to save */
    if (step != saved_step) trainer_ckpt_snapshot(tr, step, loss);
    if (!tr->saver) return 0;
    int r = bt_ckpt_saver_wait(tr->saver);
    if (r) fprintf(stderr, "error: checkpoint: %s\n", bt_ckpt_error());
    char json[256] = "";
    trainer_ckpt_report(tr, json, sizeof json);
    bt_ckpt_saver_stats st;
    bt_ckpt_saver_get_stats(tr->saver, &st);
    if (!r && st.last_step != step) { fprintf(stderr, "error: the checkpoint of step %d was not written (above)\n", step); r = -1; }
    return r;
}

/* rank 0's verdict, rc and its message, to every rank: each decides alike */
static int trainer__agree(bt_dist *dist, int rc, char *err, size_t errlen) {
    struct { int32_t rc; char err[1024]; } msg;
    if (!dist) return rc;
    memset(&msg, 0, sizeof msg);
    msg.rc = rc;
    snprintf(msg.err, sizeof msg.err, "%s", rc ? err : "");
    if (bt_store_broadcast(bt_dist_store(dist), &msg, sizeof msg)) { bt_msgf(err, errlen, "--ckpt-dir: %s", bt_dist_error()); return -1; }
    snprintf(err, errlen, "%s", msg.err);
    return msg.rc;
}
int trainer_ckpt_lock(trainer *tr, const train_opts *o, bt_dist *dist, char *err, size_t errlen) {
    int rc = 0;
    if (!o->ckpt_dir) return 0;
    if (!dist || dist->rank == 0) {
        if (!(tr->saver = bt_ckpt_saver_new(o->ckpt_dir, o->ckpt_keep))) { bt_msgf(err, errlen, "--ckpt-dir: %s", bt_ckpt_error()); rc = -1; }
        else {
            bt_ckpt_saver_stats st;
            bt_ckpt_saver_get_stats(tr->saver, &st);
            if (st.swept) printf("--ckpt-dir %s: removed %lld temporar%s of a killed save\n", o->ckpt_dir, (long long)st.swept, st.swept == 1 ? "y" : "ies");
            while (bt_ckpt_saver_warning(tr->saver)) fprintf(stderr, "warning: %s\n", bt_ckpt_error());   /* no locks there */
        }
    }
    return trainer__agree(dist, rc, err, errlen);
}
/* 1 when the two paths name one directory */
static int trainer__same_dir(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && S_ISDIR(x.st_mode) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}
/* The checkpoints of --ckpt-dir that are not the history of the run continued there, newest first
   (*steps malloc'd), and whose they are (*whose): a new run's, all (0: an earlier run's); --resume
   auto or --resume DIR (that directory itself) goes on with the directory's own run: none;
   --resume FILE of the directory goes back to FILE's step: those after it (1: a history this run
   replaces); FILE from elsewhere: all (2: another run's). Their count, or -1. */
static int trainer__foreign(const trainer *tr, const train_opts *o, int64_t **steps, int *whose, char *err, size_t errlen) {
    int n = bt_ckpt_list(o->ckpt_dir, steps), keep = 0;
    *whose = tr->src.resume ? 2 : 0;
    if (n < 0) { bt_msgf(err, errlen, "--ckpt-dir: %s", bt_ckpt_error()); return -1; }
    if (!tr->src.resume || !n) return n;
    if (!strcmp(o->resume, "auto") || trainer__same_dir(o->resume, o->ckpt_dir)) return 0;
    char dir[4096];
    const char *slash = strrchr(tr->src.path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == tr->src.path ? 1 : (int)(slash - tr->src.path), tr->src.path);
    else snprintf(dir, sizeof dir, ".");
    if (!trainer__same_dir(dir, o->ckpt_dir)) return n;
    *whose = 1;
    while (keep < n && (*steps)[n - 1 - keep] <= tr->start_step) keep++;   /* the resumed one and those before it */
    return n - keep;
}
static int trainer__claim_here(trainer *tr, const train_opts *o, char *err, size_t errlen) {
    int64_t *steps = NULL;
    int whose, n = trainer__foreign(tr, o, &steps, &whose, err, errlen), rc = n < 0 ? -1 : 0;
    char which[96], path[4096];
    const char *d = o->ckpt_dir, *s = n == 1 ? "" : "s";
    if (n > 0) snprintf(which, sizeof which, n == 1 ? "step %lld" : "steps %lld to %lld", (long long)steps[n - 1], (long long)steps[0]);
    if (n > 0 && !o->ckpt_overwrite) {
        rc = -1;
        if (whose == 0)
            snprintf(err, errlen, "--ckpt-dir %.400s holds %d checkpoint%s of an earlier run (%s): --resume auto continues that run; "
                     "--ckpt-overwrite deletes them and starts this one; or give another --ckpt-dir", d, n, s, which);
        else if (whose == 1)
            snprintf(err, errlen, "--ckpt-dir %.400s holds %d checkpoint%s after step %d, the one resumed (%s): a history this run would "
                     "replace; --ckpt-overwrite deletes them; or give another --ckpt-dir", d, n, s, tr->start_step, which);
        else
            snprintf(err, errlen, "--ckpt-dir %.400s holds %d checkpoint%s of another run (%s), not of the one resumed from %.400s: "
                     "--ckpt-overwrite deletes them; --resume auto would continue theirs instead; or give another --ckpt-dir",
                     d, n, s, which, tr->src.path);
    }
    for (int i = 0; n > 0 && !rc && i < n; i++)
        if (bt_ckpt_path(d, steps[i], path, sizeof path) == 0 && remove(path) != 0 && errno != ENOENT) {
            snprintf(err, errlen, "--ckpt-overwrite: cannot delete %.800s: %s", path, strerror(errno));
            rc = -1;
        }
    if (n > 0 && !rc) printf("--ckpt-overwrite: deleted %d checkpoint%s (%s) from %s\n", n, s, which, d);
    free(steps);
    return rc;
}
int trainer_ckpt_claim(trainer *tr, const train_opts *o, bt_dist *dist, char *err, size_t errlen) {
    int rc = 0;
    if (!o->ckpt_dir) return 0;
    if (!dist || dist->rank == 0) rc = trainer__claim_here(tr, o, err, errlen);
    return trainer__agree(dist, rc, err, errlen);
}

/* resuming */
static void trainer__report_bad(const char *path, const char *why, void *user) {
    (void)user;
    (void)path;   /* why names it */
    fprintf(stderr, "warning: --resume: skipping a damaged checkpoint: %s\n", why);
}
/* the file --resume names (on this process): FILE, or the newest checkpoint of DIR (auto:
   --ckpt-dir) that passes every check, each newer one that fails reported and skipped. 0 found,
   1 auto found none (a fresh start), -1 error. */
static int trainer__find_resume_here(const train_opts *o, char *path, size_t n, char *err, size_t errlen) {
    int is_auto = !strcmp(o->resume, "auto");
    const char *dir = is_auto ? o->ckpt_dir : o->resume;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        if (is_auto) return 1;                        /* not made yet: nothing to resume */
        snprintf(path, n, "%s", o->resume);           /* a file: its own checks name any problem */
        return 0;
    }
    int64_t step, *steps = NULL;
    int r = bt_ckpt_find_latest(dir, &step, path, n, trainer__report_bad, NULL);
    if (r == 0) return 0;
    int count = r == 1 ? bt_ckpt_list(dir, &steps) : -1;
    free(steps);
    if (count == 0 && is_auto) return 1;
    if (count == 0) snprintf(err, errlen, "--resume %.500s: no checkpoint (ckpt_STEP.safetensors) in it", dir);
    else if (count > 0) snprintf(err, errlen, "--resume %.500s: none of its %d checkpoints is whole (each is reported above)", dir, count);
    else bt_msgf(err, errlen, "--resume: %s", bt_ckpt_error());
    return -1;
}
/* the same for every rank: rank 0 looks, the others are told */
static int trainer__find_resume(const train_opts *o, bt_dist *dist, char *path, size_t n, char *err, size_t errlen) {
    struct { int32_t rc; char path[4096], err[1024]; } msg;
    memset(&msg, 0, sizeof msg);
    if (!dist || dist->rank == 0) msg.rc = trainer__find_resume_here(o, msg.path, sizeof msg.path, msg.err, sizeof msg.err);
    if (dist && bt_store_broadcast(bt_dist_store(dist), &msg, sizeof msg)) { snprintf(err, errlen, "--resume: %.900s", bt_dist_error()); return -1; }
    snprintf(path, n, "%s", msg.path);
    snprintf(err, errlen, "%s", msg.err);
    return msg.rc;
}
/* 1 when the config.json of a Hugging Face path (in it, a directory; else beside it) says
   model_type "llama"; 0 otherwise (no such file, another type: GPT-2's reader decides) */
static int trainer__hf_is_llama(const char *path) {
    char cj[4200];
    struct stat sb;
    const char *slash = strrchr(path, '/');
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(cj, sizeof cj, "%s/config.json", path);
    else snprintf(cj, sizeof cj, "%.*s%sconfig.json", slash ? (int)(slash - path) : 0, path, slash ? "/" : "");
    uint64_t size = 0;
    int fd = bt_input_open(cj, &size), llama = 0;
    if (fd < 0) return 0;
    char *text = size <= (1u << 20) ? (char *)malloc((size_t)size + 1) : NULL;
    ssize_t got = text ? pread(fd, text, (size_t)size, 0) : -1;
    close(fd);
    bt_json_doc *doc = got == (ssize_t)size ? bt_json_parse(text, (size_t)size, 0) : NULL;
    free(text);
    const bt_json *mt = doc ? bt_json_get(bt_json_root(doc), "model_type") : NULL;
    llama = mt && mt->type == BT_JSON_STRING && !strcmp(mt->str, "llama");
    bt_json_free(doc);
    return llama;
}
int trainer_source_open(const train_opts *o, bt_dist *dist, model_source *src, trainer_config *cfg, char *err, size_t errlen) {
    memset(src, 0, sizeof *src);
    if (!o->resume && o->init_from && trainer__hf_is_llama(o->init_from)) {   /* a LlamaForCausalLM directory (or a file of it) */
        llama_config lc;
        char msg[1024];
        snprintf(src->path, sizeof src->path, "%s", o->init_from);
        src->hf = 1; src->family = TRAINER_LLAMA;
        if (llama_hf_config(src->path, &lc, msg, sizeof msg) || !(src->lhf = llama_hf_open(src->path, msg, sizeof msg))) {
            bt_msgf(err, errlen, "--init-from %s", msg);
            return -1;
        }
        *cfg = trainer_config_llama(lc);
        return 0;
    }
    if (o->resume) {
        int r = trainer__find_resume(o, dist, src->path, sizeof src->path, err, errlen);
        if (r > 0) printf("--resume auto: no checkpoint in %s: starting a new run\n", o->ckpt_dir);
        if (r) return r < 0 ? -1 : 0;
        src->resume = 1;
    } else if (o->init_from) {
        struct stat sb;
        int is_dir = stat(o->init_from, &sb) == 0 && S_ISDIR(sb.st_mode);
        snprintf(src->path, sizeof src->path, "%s%s", o->init_from, is_dir ? "/model.safetensors" : "");
    } else return 0;
    const char *flag = src->resume ? "--resume" : "--init-from";
    if (!(src->file = bt_ckpt_open(src->path, src->resume ? BT_CKPT_REQUIRE_CHECKSUMS : 0))) {
        bt_msgf(err, errlen, "%s: %s", flag, bt_ckpt_error());
        return -1;
    }
    const bt_ckpt_meta *meta = bt_ckpt_file_meta(src->file);
    if (bt_ckpt_meta_get(meta, "train_gpt2.checkpoint")) {
        int r = trainer__ckpt_config(meta, src->path, cfg, err, errlen);
        src->family = cfg->family;
        return r;
    }
    if (src->resume) { snprintf(err, errlen, "--resume %.500s: not a train_gpt2 checkpoint (no train_gpt2.checkpoint in its metadata)", src->path); return -1; }
    src->hf = 1;
    char msg[1024];
    gpt2_config gc;
    if (gpt2_hf_config(src->file, src->path, src->prefix, &gc, msg, sizeof msg)) { bt_msgf(err, errlen, "--init-from %s", msg); return -1; }
    *cfg = trainer_config_gpt2(gc);
    return 0;
}
void trainer_source_close(model_source *src) {
    bt_ckpt_close(src->file);
    llama_hf_close(src->lhf);
    src->file = NULL; src->lhf = NULL;
}
/* a checkpoint's "params" (the weights in the buffer's order) into flat's first n; 0, or -1 and msg */
static int trainer__ckpt_params(model_source *src, bt_tensor *flat, int64_t n, char *msg, size_t msglen) {
    bt_scope_begin();
    int r = bt_ckpt_load(src->file, "params", bt_narrow(flat, 0, 0, n), 0);
    bt_scope_end();
    if (r) snprintf(msg, msglen, "%s", bt_ckpt_error());
    return r;
}
/* the weights from the source into a whole (one-process) model m: a checkpoint's params, or a
   Hugging Face file's tensors */
static int trainer__source_load_into(gpt2 *m, model_source *src, char *err, size_t errlen) {
    char msg[1024];
    int r;
    if (src->hf) r = gpt2_hf_load(m, src->file, src->path, src->prefix, msg, sizeof msg);
    else r = trainer__ckpt_params(src, m->flat, m->num_params, msg, sizeof msg);
    if (r) bt_msgf(err, errlen, "%s: %s", src->resume ? "--resume" : "--init-from", msg);
    return r ? -1 : 0;
}
/* a Llama: a Hugging Face directory's tensors, or a checkpoint's params */
static int trainer__source_load_llama(llama *m, model_source *src, char *err, size_t errlen) {
    char msg[1024];
    int r;
    if (src->lhf) r = llama_hf_load(m, src->lhf, msg, sizeof msg);
    else r = trainer__ckpt_params(src, m->flat, m->num_params, msg, sizeof msg);
    if (r) bt_msgf(err, errlen, "%s: %s", src->resume ? "--resume" : "--init-from", msg);
    return r ? -1 : 0;
}
/* with tp > 1 through a whole model in host memory, this rank's shard of it copied in */
int trainer_source_load(trainer *tr, char *err, size_t errlen) {
    int tp = trainer__tp(tr), r;
    if (tr->family == TRAINER_LLAMA && !tp) return trainer__source_load_llama(&tr->lm, &tr->src, err, errlen);
    if (!tp) return trainer__source_load_into(&tr->model, &tr->src, err, errlen);
    gpt2 whole;
    llama whole_lm;
    bt_tensor *flat;
    if (tr->family == TRAINER_LLAMA) {
        llama_build(&whole_lm, tr->lm.cfg, bt_cpu());
        r = trainer__source_load_llama(&whole_lm, &tr->src, err, errlen);
        flat = whole_lm.flat;
    } else {
        gpt2_build(&whole, tr->model.cfg, bt_cpu());
        r = trainer__source_load_into(&whole, &tr->src, err, errlen);
        flat = whole.flat;
    }
    if (!r) {
        bt_scope_begin();
        bt_copy_(trainer_flat(tr), bt_par_shard_of_whole(tr->par, flat, trainer_flat_numel(tr)));
        bt_scope_end();
    }
    if (tr->family == TRAINER_LLAMA) llama_free(&whole_lm);
    else gpt2_free(&whole);
    return r;
}
/* once the optimizer and the loaders exist: AdamW's state (this rank's range of it), the step
   counts, this rank's data position; then the file is closed */
int trainer_ckpt_restore(trainer *tr, char *err, size_t errlen) {
    const bt_ckpt_meta *meta = bt_ckpt_file_meta(tr->src.file);
    bt_adamw *opt = &tr->opt;
    int64_t step, astep;
    bt_loader_state st;
    if (bt_ckpt_meta_get_int(meta, "train.step", 0, tr->o.steps, &step) || bt_ckpt_meta_get_int(meta, "adamw.step", 0, step, &astep)) {
        bt_msgf(err, errlen, "--resume %s: %s", tr->src.path, bt_ckpt_error());
        return -1;
    }
    int r, tp = trainer__tp(tr);
    bt_scope_begin();
    if (!tp && !tr->fsdp && opt->lo == 0 && opt->hi == trainer_num_params(tr)) {
        r = bt_ckpt_load(tr->src.file, "adamw.m", opt->m, 0) || bt_ckpt_load(tr->src.file, "adamw.v", opt->v, 0);
    } else {   /* ZeRO or tp: the whole state through host memory, this rank's range (or shard) copied in */
        bt_tensor *m = bt_empty(bt_shape1(trainer_num_params(tr)), BT_F32, bt_cpu()), *v = bt_empty(bt_shape1(trainer_num_params(tr)), BT_F32, bt_cpu());
        r = bt_ckpt_load(tr->src.file, "adamw.m", m, 0) || bt_ckpt_load(tr->src.file, "adamw.v", v, 0);
        if (!r && tp) { m = bt_par_shard_of_whole(tr->par, m, trainer_flat_numel(tr)); v = bt_par_shard_of_whole(tr->par, v, trainer_flat_numel(tr)); }
        if (!r && tr->fsdp) {   /* fsdp: this rank's shards of them (the optimizer's index space is the shards') */
            bt_tensor *ms = bt_zeros(bt_shape1(opt->hi - opt->lo), BT_F32, trainer_device(tr)), *vs = bt_zeros(bt_shape1(opt->hi - opt->lo), BT_F32, trainer_device(tr));
            bt_fsdp_load(tr->fsdp, m, ms); bt_fsdp_load(tr->fsdp, v, vs);
            m = ms; v = vs;
        }
        if (!r) bt_adamw_set_state(opt, bt_narrow(m, 0, opt->lo, opt->hi - opt->lo), bt_narrow(v, 0, opt->lo, opt->hi - opt->lo), astep);
    }
    int n8;
    bt_tensor *buf8 = NULL;
    bt_fp8_state *st8 = trainer__fp8(tr, &n8, &buf8);
    if (!r && st8) r = bt_ckpt_load(tr->src.file, "fp8.state", buf8, 0);
    bt_scope_end();
    if (r) { bt_msgf(err, errlen, "--resume: %s", bt_ckpt_error()); return -1; }
    if (st8 && trainer__fp8_meta_get(st8, n8, meta, tr->src.path, err, errlen)) return -1;
    opt->step = astep;
    int drank = tr->par ? tr->par->dp_rank : tr->dist ? tr->dist->rank : 0;   /* tp/cp ranks read their dp index's rows */
    if (bt_ckpt_meta_get_loader(meta, drank, &st)) { bt_msgf(err, errlen, "--resume %s: %s", tr->src.path, bt_ckpt_error()); return -1; }
    if (bt_loader_set_state(tr->train, &st)) { bt_msgf(err, errlen, "--resume: the data position: %s", bt_data_error()); return -1; }
    tr->start_step = (int)step;
    bt_ckpt_close(tr->src.file);
    tr->src.file = NULL;
    return 0;
}

/* ---- 7. tensor and context parallelism: the flags, the layout ---- */
/* 0, or -1 with err naming the flag: --tp, --cp, --sp, --async-tp, --cp-comm against the model,
   the sequence, the processes and the other options */
int trainer_par_check(const train_opts *o, const trainer_config *c, int world, int on_gpu, char *err, size_t errlen) {
    int tp = o->tp, cp = o->cp;
    if (trainer_family_check(o, c, err, errlen)) return -1;
    if (!strcmp(o->dp, "fsdp") && world > 1) {   /* what fsdp does not compose with yet */
        const char *no = tp * cp > 1 ? "--tp/--cp (its shards span all processes; use --dp zero1 or zero2 with --tp/--cp)"
                       : o->cuda_graph == 1 ? "--cuda-graph on (each block's gathers and reduce-scatters run outside a graph; use --cuda-graph off)"
                       : o->eval_only ? "--eval-only (evaluate the same file with --dp ddp)"
                       : o->eval_mc ? "--eval-mc (its ranks score different items, and every fsdp forward is a collective)" : NULL;
        if (no) { snprintf(err, errlen, "--dp fsdp: not with %s", no); return -1; }
    }
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
    if (c->family == TRAINER_LLAMA) {
        if (llama_tp_check(&c->llama, tp, err, errlen)) return -1;
    } else {
        if (c->H % tp) { snprintf(err, errlen, "--tp %d does not divide the model's %d heads", tp, c->H); return -1; }
        if ((4 * c->C) % tp) { snprintf(err, errlen, "--tp %d does not divide the MLP width 4C = %d", tp, 4 * c->C); return -1; }
        if (c->Vp % tp) { snprintf(err, errlen, "--tp %d does not divide the padded vocabulary Vp = %d", tp, c->Vp); return -1; }
    }
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
bt_par_opts trainer_par_opts(const train_opts *o) {
    bt_par_opts p;
    memset(&p, 0, sizeof p);
    p.tp = o->tp; p.cp = o->cp; p.sp = o->sp; p.async_tp = o->async_tp; p.deterministic = o->deterministic;
    p.cp_comm = o->cp_comm; p.B = o->B; p.T = o->T;
    return p;
}
void trainer_par_describe(const bt_par *p, const train_opts *o) {
    printf("model parallel: dp %d x tp %d x cp %d%s%s", p->dp, p->tp, p->cp, p->sp ? ", sequence parallel" : "", o->async_tp ? ", async TP" : "");
    if (p->cp > 1) printf(", K/V by %s, %d tokens per rank", o->cp_comm ? o->cp_comm : "ring", p->Tl);
    if (strcmp(o->dp, "ddp")) printf(", %s: AdamW state%s in %d shards (dp x cp)", o->dp, !strcmp(o->dp, "zero2") ? " and gradients" : "", p->dp * p->cp);
    printf("%s\n", p->on_cpu ? " (CPU: collectives through the TCP store)" : "");
}
/* fsdp: every rank's shards gathered (a collective) into a whole model on rank 0 (fsdp_whole, or a
   Llama's fsdp_whole_lm, which the Llama outputs read: the gpt2 returned then only says "this
   rank"), made at the first call and kept (4 bytes a parameter there from then on, as --tp's);
   NULL on the other ranks */
static gpt2 *trainer__fsdp_whole(trainer *tr) {
    int rank0 = tr->dist->rank == 0, llama = TRAINER__LLAMA(tr);
    bt_tensor **flat = llama ? &tr->fsdp_whole_lm.flat : &tr->fsdp_whole.flat;
    if (rank0 && !*flat) {   /* outside any scope: the model owns its tensors */
        if (llama) {
            llama_build(&tr->fsdp_whole_lm, tr->lm.cfg, trainer_device(tr));
            trainer__drop_grads(tr->fsdp_whole_lm.params, tr->fsdp_whole_lm.n_params, &tr->fsdp_whole_lm.flat_grad);
        } else {
            gpt2_build(&tr->fsdp_whole, tr->model.cfg, trainer_device(tr));
            trainer__drop_grads(tr->fsdp_whole.params, tr->fsdp_whole.n_params, &tr->fsdp_whole.flat_grad);
            tr->fsdp_whole.mlir = tr->model.mlir;
        }
    }
    bt_scope_begin();
    bt_tensor *full = bt_fsdp_full(tr->fsdp, tr->fsdp->param);
    if (rank0) bt_copy_(*flat, full);
    bt_scope_end();
    return rank0 ? &tr->fsdp_whole : NULL;
}
gpt2 *trainer_whole_model(trainer *tr) {
    if (tr->fsdp) return trainer__fsdp_whole(tr);
    if (!trainer__tp(tr)) return &tr->model;
    if (TRAINER__LLAMA(tr)) return llama_par_whole_model(tr->par, &tr->lm, &tr->tp_whole_lm) ? &tr->model : NULL;
    return gpt2_par_whole_model(tr->par, &tr->model, &tr->tp_whole);
}

/* ---- 8. the end of a run ---- */
/* any part may be missing: every exit path comes here. With several processes a failed rank
   aborts the job (the others are waiting in a collective for it), a finished one leaves cleanly
   (a collective: every rank gets here). */
int trainer_end(trainer *tr, int rc) {
    /* first: a save in flight still reads the weights */
    if (tr->saver && bt_ckpt_saver_free(tr->saver)) fprintf(stderr, "warning: checkpoint: %s\n", bt_ckpt_error());
    tr->saver = NULL;
    trainer__release_gathered(tr);
    trainer_source_close(&tr->src);
    trainer__graph_free(&tr->sg);
    if (tr->ddp) bt_ddp_free(tr->ddp);
    for (int i = 0; i < 2; i++) if (tr->comm_ev[i]) bt_event_destroy(tr->comm_ev[i]);
    for (int i = 0; i < 2; i++) if (tr->work_ev[i]) bt_event_destroy(tr->work_ev[i]);
    bt_zero_free(&tr->zero);
    bt_par_free(tr->par);            /* before the communicators go */
    tr->model.par = NULL; tr->lm.par = NULL;
    if (tr->dist) {
        if (rc) bt_dist_abort(tr->dist, "stopped with an error (above)");
        bt_dist_shutdown(tr->dist);
    }
    bt_adamw_free(&tr->opt);
    bt_grads_free(tr->grad_units, tr->n_grad_units);
    tr->grad_units = NULL;
    bt_fsdp_free(tr->fsdp);          /* after the optimizer, whose leaves are its views */
    tr->fsdp = NULL;
    gpt2_free(&tr->fsdp_whole);
    llama_free(&tr->fsdp_whole_lm);
    gpt2_free(&tr->tp_whole);
    llama_free(&tr->tp_whole_lm);
    gpt2_free(&tr->model);
    llama_free(&tr->lm);
    bt_loader_close(tr->train); bt_loader_close(tr->val);
    bt_tokenizer_free(tr->tok);
    bt_mc_free(&tr->mc);
    free(tr->inputs); free(tr->targets);
    memset(tr, 0, sizeof *tr);
    return rc;
}

/* ---- 9. multiple-choice evaluation ---- */
void trainer_mc_free(trainer_mc_result *r) {
    free(r->loss); free(r->tokens); free(r->pred_sum); free(r->pred_mean);
    memset(r, 0, sizeof *r);
}

/* row (item i, ending k) into in/tg [T]: the context (or <|endoftext|> when it is empty) and the
   ending, its last maxT + 1 tokens when longer; targets -1 except at the ending's tokens */
static void trainer__mc_row(const bt_mc_set *s, int64_t i, int k, int T, int32_t *in, int32_t *tg) {
    static const int32_t eot = BT_EOT;
    const int32_t *ctx = s->ctx_len[i] ? s->tokens + s->ctx_off[i] : &eot;
    const int32_t *end = s->tokens + s->end_off[i * s->max_endings + k];
    int64_t lc = s->ctx_len[i] ? s->ctx_len[i] : 1, le = s->end_len[i * s->max_endings + k], n = lc + le;
    int64_t skip = n - 1 > T ? n - 1 - T : 0;   /* tokens dropped from the front */
    for (int t = 0; t < T; t++) { in[t] = BT_EOT; tg[t] = -1; }
    for (int64_t p = skip; p + 1 < n; p++) {   /* position p predicts token p + 1 */
        int64_t q = p + 1;
        in[p - skip] = p < lc ? ctx[p] : end[p - lc];
        if (q >= lc) tg[p - skip] = end[q - lc];
    }
}

int trainer_eval_mc(trainer *tr, trainer_mc_result *r) {
    const bt_mc_set *s = &tr->mc;
    trainer_config cfg = trainer_model_config(tr);
    const trainer_config *c = &cfg;
    bt_device dev = trainer_device(tr);
    int rank = tr->dist ? tr->dist->rank : 0, world = tr->dist ? tr->dist->world : 1, me = s->max_endings;
    memset(r, 0, sizeof *r);
    if (tr->par) { fprintf(stderr, "error: --eval-mc: not with --tp or --cp\n"); return -1; }
    double t0 = trainer__now();
    int64_t cells = s->n_items * me;
    r->n_items = s->n_items; r->max_endings = me;
    r->loss = (double *)calloc((size_t)cells, sizeof(double));
    r->tokens = (int32_t *)calloc((size_t)cells, sizeof(int32_t));
    r->pred_sum = (int32_t *)calloc((size_t)s->n_items, sizeof(int32_t));
    r->pred_mean = (int32_t *)calloc((size_t)s->n_items, sizeof(int32_t));
    /* the positions a row needs, rounded up to 8 (at most maxT); rows a batch: their logits in about
       1 GiB on a GPU, 256 MiB on a CPU (the fp32 [rows, T, Vp] of the head) */
    int T = (int)(s->max_row - 1 < c->maxT ? s->max_row - 1 : c->maxT);
    T = (T + 7) / 8 * 8 < c->maxT ? (T + 7) / 8 * 8 : c->maxT;
    if (T < 1) T = 1;
    double budget = dev.type == BT_GPU ? 1073741824.0 : 268435456.0;
    int64_t R = (int64_t)(budget / ((double)T * c->Vp * 4));
    if (R < 1) R = 1;
    if (R > 512) R = 512;
    int32_t *in = (int32_t *)malloc(sizeof(int32_t) * (size_t)(R * T)), *tg = (int32_t *)malloc(sizeof(int32_t) * (size_t)(R * T));
    float *loss = (float *)malloc(sizeof(float) * (size_t)(R * T));
    int64_t *cell = (int64_t *)malloc(sizeof(int64_t) * (size_t)R);
    if (!r->loss || !r->tokens || !r->pred_sum || !r->pred_mean || !in || !tg || !loss || !cell) {
        fprintf(stderr, "error: --eval-mc: out of host memory\n");
        free(in); free(tg); free(loss); free(cell); trainer_mc_free(r);
        return -1;
    }
    int pool = tr->sg.pool;   /* as validation: the graph's pool is free between launches */
    if (pool) bt_alloc_pool_push(dev, pool);
    int old = bt_set_grad_enabled(0);
    /* this rank's rows in order: items rank, rank + world, ...; every ending of each */
    int64_t item = rank, n = 0;
    int k = 0;
    for (;;) {
        int done = item >= s->n_items;
        if (!done) {
            trainer__mc_row(s, item, k, T, in + n * T, tg + n * T);
            cell[n++] = item * me + k;
            if (++k == s->n_endings[item]) { k = 0; item += world; }
        }
        if (n == R || (done && n)) {
            /* the batch's own width: its longest row rounded up to 8 (rows were laid out T apart) */
            int Tb = 1;
            for (int64_t j = 0; j < n; j++)
                for (int t = T - 1; t >= Tb; t--) if (tg[j * T + t] >= 0) { Tb = t + 1; break; }
            Tb = (Tb + 7) / 8 * 8 < T ? (Tb + 7) / 8 * 8 : T;
            for (int64_t j = 1; j < n; j++) {
                memmove(in + j * Tb, in + j * T, sizeof(int32_t) * (size_t)Tb);
                memmove(tg + j * Tb, tg + j * T, sizeof(int32_t) * (size_t)Tb);
            }
            bt_scope_begin();
            bt_tensor *idx = bt_from_data(in, bt_shape2(n, Tb), BT_I32, dev), *tgt = bt_from_data(tg, bt_shape2(n, Tb), BT_I32, dev);
            bt_tensor *l = bt_cross_entropy_rows(trainer_model_logits(tr, idx), tgt, c->V, -1);
            bt_to_host(l, loss, BT_F32);
            bt_scope_end();
            for (int64_t j = 0; j < n; j++) {
                double sum = 0;
                int cnt = 0;
                for (int t = 0; t < Tb; t++) if (tg[j * Tb + t] >= 0) { sum += loss[j * Tb + t]; cnt++; }
                r->loss[cell[j]] = sum;
                r->tokens[cell[j]] = cnt;
            }
            n = 0;
        }
        if (done) break;
    }
    bt_set_grad_enabled(old);
    if (pool) bt_alloc_pool_pop(dev);
    free(in); free(tg); free(loss); free(cell);
    if (tr->dist && world > 1) {   /* every cell is filled by one rank, 0 elsewhere: a sum gathers them */
        bt_scope_begin();
        bt_tensor *a = bt_from_data(r->loss, bt_shape1(cells), BT_F64, dev), *b = bt_from_data(r->tokens, bt_shape1(cells), BT_I32, dev);
        bt_all_reduce(tr->dist->world_comm, bt_data_ptr(a), bt_data_ptr(a), cells, BT_F64, BT_RED_SUM, NULL);
        bt_all_reduce(tr->dist->world_comm, bt_data_ptr(b), bt_data_ptr(b), cells, BT_I32, BT_RED_SUM, NULL);
        bt_to_host(a, r->loss, BT_F64);
        bt_to_host(b, r->tokens, BT_I32);
        bt_scope_end();
    }
    int64_t right_sum = 0, right_mean = 0;
    for (int64_t i = 0; i < s->n_items; i++) {
        int bs = 0, bm = 0;
        for (int e = 1; e < s->n_endings[i]; e++) {
            int64_t a = i * me + e;
            if (r->loss[a] < r->loss[i * me + bs]) bs = e;
            if (r->loss[a] / r->tokens[a] < r->loss[i * me + bm] / r->tokens[i * me + bm]) bm = e;
        }
        r->pred_sum[i] = bs; r->pred_mean[i] = bm;
        right_sum += bs == s->label[i];
        right_mean += bm == s->label[i];
    }
    r->acc = (double)right_sum / (double)s->n_items;
    r->acc_mean = (double)right_mean / (double)s->n_items;
    r->seconds = trainer__now() - t0;
    return 0;
}

int trainer_mc_write(const trainer *tr, const trainer_mc_result *r, const char *path, char *err, size_t errlen) {
    bt_json_writer w;
    const bt_mc_set *s = &tr->mc;
    bt_atomic_file *f = bt_atomic_open_flags(path, BT_OUTPUT_NOFOLLOW);
    int bad = !f;
    for (int64_t i = 0; i < r->n_items && !bad; i++) {
        size_t len;
        const char *t;
        bt_json_writer_init(&w, 0);
        bt_json_object(&w, NULL);
        bt_json_int(&w, "item", i);
        bt_json_int(&w, "label", s->label[i]);
        bt_json_int(&w, "pred_sum", r->pred_sum[i]);
        bt_json_int(&w, "pred_mean", r->pred_mean[i]);
        bt_json_array(&w, "loss");
        for (int e = 0; e < s->n_endings[i]; e++) bt_json_number(&w, NULL, r->loss[i * r->max_endings + e]);
        bt_json_end(&w);
        bt_json_array(&w, "tokens");
        for (int e = 0; e < s->n_endings[i]; e++) bt_json_int(&w, NULL, r->tokens[i * r->max_endings + e]);
        bt_json_end(&w);
        bt_json_end(&w);
        bad = !(t = bt_json_text(&w, &len)) || bt_atomic_write(f, t, len) || bt_atomic_write(f, "\n", 1);
        bt_json_writer_free(&w);
    }
    if (bad) { bt_msgf(err, errlen, "%s", bt_data_error()); bt_atomic_abort(f); return -1; }
    if (bt_atomic_commit(f)) { bt_msgf(err, errlen, "%s", bt_data_error()); return -1; }
    return 0;
}
#endif /* TRAINER_IMPLEMENTATION_DONE */
#endif /* TRAINER_IMPLEMENTATION */
