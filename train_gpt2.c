/* train_gpt2.c - GPT-2 (or a Llama) trained end to end with the BluTrain-C headers: the reference program.

   make && ./train_gpt2            default run: GPT-2 124M on a GPU, a small GPT on a CPU,
                                   on Tiny Shakespeare (make data makes the shards)
   ./train_gpt2 -h                 every flag

   The same file builds two ways: `cc` gives a CPU binary; `nvcc -x cu` a CUDA one, which runs on
   the CPU when no GPU is present. It is the composition; the parts are headers:
     gpt2.h           the model: parameters, the forward pass, generation
     gpt2_io.h        model files: llm.c's layout, Hugging Face's
     gpt2_parallel.h  the model under tensor and context parallelism
     llama.h, llama_io.h, llama_parallel.h  a Llama model, its Hugging Face files, its tp/cp: -e l125m, --init-from DIR (the same loop)
     trainer.h        the run's state: data, data parallelism, CUDA graphs, memory, checkpoints
   Read top to bottom:
     1. the command line
     2. a step: forward, backward, the update; validation
     3. logging
     4. a run: from the flags to the saved model
   The backward pass is the autograd engine's (bt_autograd.h); each op's math sits in bt_tensor.h. */
#define _POSIX_C_SOURCE 200809L   /* before any #include: bt_data.h uses pread, readlink, sigaction */
#ifndef BT_LINKED                 /* every header's implementation here, or from one object linked in (make) */
#define BT_ALL_IMPLEMENTATION
#endif
#include "bt_all.h"                /* the bt_ headers, the models and their _io.h, _parallel.h (bt_mlir.h with MLIR=1) */
#define TRAINER_IMPLEMENTATION
#include "trainer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

/* a usage error is its reason and this, exit code 2 */
#define SEE_H "(see train_gpt2 -h)"

/* ============================================================================================
   1. the command line (the options: trainer.h's train_opts)
   ============================================================================================ */
static void usage(FILE *f) {
    fprintf(f,
        "usage: train_gpt2 [options]\n"
        "  -i GLOB   train shards (default data/tinyshakespeare_train.bin)\n"
        "  -j GLOB   val shards (default data/tinyshakespeare_val.bin)\n"
        "  -e NAME   model: a GPT-2 preset (d12 d24 d36 d48 s6 s4 s2; d12_32k, d48_64k: d12, d48 with maxT 32768, 65536;\n"
        "            dLwC: L layers of width C, heads of 128, e.g. d40w5120, GPT-3 13B's shape),\n"
        "            a Llama preset (l125m l125m_128k llama3.2-1b llama3-8b llama3.1-8b ls4 ls2: docs/llama.md) or a model\n"
        "            file (llm.c layout, fp32) (default: d12 on a GPU, s4 on a CPU)\n"
        "  -b N      micro-batch size B (default: the largest power of two that fits on a GPU; 8 on a CPU)\n"
        "  -t N      sequence length T (default 1024 on a GPU, 64 on a CPU; at most the model's context)\n"
        "  -d N      total batch in tokens, reached by gradient accumulation (default 524288 GPU, B*T CPU)\n"
        "  -l LR     peak learning rate (default 6e-4 GPU, 2e-3 CPU)\n"
        "  -u N      warmup steps (default 10%% of the steps, at most 700)\n"
        "  -q F      final learning rate as a fraction of the peak (default 0.1)\n"
        "  -c WD     AdamW weight decay of the matrices (default 0.1)\n"
        "  -x N      training steps (default 20 GPU, 300 CPU)\n"
        "  -v N      validate every N steps (and at the end; 0 = never, -j unused) (default 25 CPU, 10 GPU)\n"
        "  -m N      validation batches (default 20; --eval-only: all of -j)\n"
        "  -s N      sample every N steps (and at the end; 0 = only at the end)\n"
        "  -g N      tokens to sample (default 64)\n"
        "  -o DIR    write DIR/log.jsonl (one JSON object per step; DIR is made if missing)\n"
        "  --save PATH   write the trained model (llm.c layout) at the end, before the last sample\n"
        "  --precision fp32|tf32|bf16|fp8   (default bf16 on a GPU, fp32 on a CPU); fp8: GPT-2's block linears (qkv,\n"
        "            attention projection, MLP fc and projection; a Llama's wqkv, wo, w13, w2) in FP8, e4m3 forward\n"
        "            and e5m2 gradients with per-tensor scales (Ada/Hopper GPUs; on a CPU emulated, the rest fp32),\n"
        "            the rest as bf16 (docs/fp8.md)\n"
        "  --fp8-recipe current|delayed   with fp8: scales from each tensor's own amax, or from the amax history\n"
        "            of the last --fp8-history steps (default delayed)\n"
        "  --fp8-history N   with fp8: the delayed recipe's amax history, 1 to 1024 steps (default 16)\n"
        "  --fp8-accum split|fast|fast-dx   with fp8: which products keep the tensor cores' partial sums in their\n"
        "            own precision (faster) rather than promote them to fp32 as they go (split): fast the forward\n"
        "            products, fast-dx those and the block linears' input gradients; the weight gradients and the\n"
        "            head's input gradient always split (default fast-dx; a resume keeps the checkpoint's, split\n"
        "            where it has none)\n"
        "  --fp8-head on|off   with fp8: the classifier's products (logits, their gradient) in FP8 too\n"
        "            (default on; a resume keeps the checkpoint's, off where it has none)\n"
        "  --weight-copy halves|separate   the bf16 weights a bf16 or fp8 run computes with: the fp32 weights' high\n"
        "            halves, which hold them with their low halves in the fp32 bytes (2 bytes a parameter less; ties\n"
        "            round away from zero), or a copy of their own (ties to even). halves: one process, no --tp/--cp\n"
        "            or --mlir (default halves where that holds; a resume keeps the checkpoint's)\n"
        "  --grads lazy|flat   lazy: each block's gradients take memory when the backward writes them and give it\n"
        "            back after the update, so the forward's activations use it (PyTorch's set-to-None); flat: one\n"
        "            buffer held throughout. lazy: one process on a GPU, no --tp/--cp, --dp fsdp, --offload or --mlir\n"
        "            (default lazy where that holds; the same values either way)\n"
        "  --grad-dtype auto|f32|bf16   the gradient buffer; bf16: 2 bytes a parameter less, for a bf16 or fp8 run on\n"
        "            one GPU with one micro-batch a step (-d = B*T: each gradient written once, no sum); auto: bf16 where\n"
        "            that holds and -b is given (or resumed), else f32; a resume of an f32 run stays f32 (default auto)\n"
        "  --offload none|adamw   adamw: AdamW's m and v in pinned host memory, streamed through the GPU at each\n"
        "            update (8 bytes a parameter off the GPU, or this rank's shard with zero1, zero2, fsdp, tp;\n"
        "            the same bits)\n"
        "  --device auto|cpu|cuda|cuda:N  (default auto: cuda:0 when there is a GPU)\n"
        "  --seed N  --topk N  --temp T  --clip C (0 = no clipping)\n"
        "  --tokenizer DIR   encoder.json and vocab.bpe (default data; without them samples print as ids)\n"
        "  --quiet           print only validation, checkpoint and last steps (the log keeps every step)\n"
        "  --eval-mc FILE    score a multiple-choice set in HellaSwag's JSON lines (ctx, endings, label) at each\n"
        "            validation and at the end: accuracy by each ending's summed loss and by its mean per token\n"
        "  --eval-only       evaluate the model (-e, --init-from or --resume) without training: the validation loss\n"
        "            over -j (unless -v 0) and --eval-mc; with -o DIR, DIR/eval.json (and DIR/eval_mc.jsonl: each\n"
        "            item's per-ending losses)\n"
        "  --overfit         train on the first batch only (a check that the model can learn)\n"
        "  --deterministic   the same bits on every run: no float atomics, no matmul autotuning\n"
        "  -n, --nproc N     start N processes on this node, one per GPU (data parallel; -d stays the global batch)\n"
        "  --dp ddp|zero1|zero2|fsdp   with several processes (this, torchrun, srun or mpirun): all-reduced\n"
        "            gradients (ddp, default), + sharded AdamW state (zero1), + sharded gradients (zero2);\n"
        "            with --tp/--cp over the dp x cp ranks of each tp index (GPUs only); fsdp: weights,\n"
        "            gradients and AdamW state sharded, each block gathered before its forward and again\n"
        "            for its backward (GPT-2; not with --tp/--cp or --cuda-graph on; CPU ranks too)\n"
        "  --bucket-mb N     DDP gradient bucket size (default 25)\n"
        "  --head-chunk MB   the classifier's logits made at most MB MiB of rows at a time inside the loss (default 1024;\n"
        "            less: a lower peak for more passes over its fp32 weight gradient)\n"
        "  --comm-dtype fp32|bf16   gradients on the wire (default fp32)\n"
        "  --nccl-timeout S  abort the run when a collective takes longer (default 600)\n"
        "  --ddp-rows auto|on|off   the tied embedding's gradient sent as the batch's rows, not the whole table\n"
        "            (default auto: when the gathered rows are smaller)\n"
        "  --ddp-transport auto|nccl   buckets of ranks on one host through the copy engines where the GPUs\n"
        "            allow it (auto, default), or always through NCCL's kernels\n"
        "  --nccl-blocking auto|on|off   blocking NCCL communicators (default auto: on with --tp, --cp or a\n"
        "            CUDA graph, whose many collectives each save the wait for ncclInProgress)\n"
        "  --timings         forward + backward time on each step's line; after the last, each DDP bucket's\n"
        "            timeline (ready, start, end)\n"
        "  --ckpt-dir DIR    checkpoints (weights, AdamW state, data position) go to DIR/ckpt_STEP.safetensors:\n"
        "            after the last step, on SIGINT/SIGTERM, and every --ckpt-every steps\n"
        "  --ckpt-every N    a checkpoint every N steps, written while training goes on (default 0: none)\n"
        "  --ckpt-keep K     keep the newest K checkpoints (default 3; 0 keeps all)\n"
        "  --ckpt-overwrite  start over in a --ckpt-dir that holds another run's checkpoints: delete them (without\n"
        "            it such a directory is refused; --resume auto continues its run instead)\n"
        "  --resume FILE|DIR|auto   continue a run from a checkpoint (DIR: its newest valid one; auto: that of\n"
        "            --ckpt-dir, or a fresh start when it has none), bit for bit; give the run's options again\n"
        "  --init-from PATH  start from a Hugging Face GPT-2 model.safetensors (or its directory), a Hugging Face\n"
        "            Llama directory (config.json's model_type \"llama\"), or from a\n"
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
        "  --recompute none|norm|gelu|attn|mlp|block   activations remade in the backward instead of kept: the\n"
        "            norms' outputs (not before FP8 linears); gelu(h) and ln2's output (the MLP's); the attention\n"
        "            or the MLP sublayer of each block, or the whole block,\n"
        "            from its input (the same bits as none; block: ~1/3 more work per step; attn, mlp and\n"
        "            block not with --tp or --cp; a Llama: attn, mlp, block) (default: the first of none, gelu\n"
        "            (not for a Llama), mlp, block with which -b fits; none with the measured -b or several\n"
        "            processes)\n"
        "  -h        this help\n"
        "Each step prints its loss, learning rate, gradient norm (before clipping), time, tokens/s, MFU (GPUs\n"
        "of known peak), and mem: the device memory its tensors hold after the step (bt_alloc's allocated\n"
        "bytes); the run ends with peak memory, the most they held at once.\n");
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

/* v's index in names (NULL-terminated), or -1 with err "FLAG must be a, b or c, got 'v'" */
static int parse_choice(const char *flag, const char *v, const char *const *names, char *err, size_t errlen) {
    int n = 0;
    for (; names[n]; n++) if (!strcmp(v, names[n])) return n;
    size_t k = (size_t)snprintf(err, errlen, "%s must be ", flag);
    for (int i = 0; i < n && k < errlen; i++) k += (size_t)snprintf(err + k, errlen - k, "%s%s", names[i], i + 2 < n ? ", " : i + 2 == n ? " or " : "");
    if (k < errlen) snprintf(err + k, errlen - k, ", got '%s'", v);
    return -1;
}

/* the options that take a value, as parse_args reads them: a name not here (nor a switch) is an
   unknown option, wherever it stands, even last with no value after it */
static int takes_value(const char *a) {
    static const char *const names[] = {"-i", "-j", "-o", "-e", "--save", "--tokenizer", "-b", "-t", "-d", "-x", "-v", "-m",
        "-s", "-g", "-u", "--topk", "-l", "-q", "-c", "--clip", "--temp", "--seed", "-n", "--nproc", "--bucket-mb", "--head-chunk",
        "--nccl-timeout", "--ckpt-dir", "--ckpt-every", "--ckpt-keep", "--resume", "--init-from", "--export-hf", "--tp", "--cp",
        "--cp-comm", "--recompute", "--cuda-graph", "--ddp-rows", "--nccl-blocking", "--ddp-transport", "--dp", "--comm-dtype",
        "--precision", "--device", "--eval-mc", "--fp8-recipe", "--fp8-history", "--fp8-accum", "--fp8-head", "--grad-dtype", "--offload",
        "--weight-copy", "--grads"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) if (!strcmp(a, names[i])) return 1;
    return 0;
}

/* 0 ok, 1 help asked, -1 error (err says which flag and why); CHOICE: the flag a's value v among these */
#define CHOICE(...) parse_choice(a, v, (const char *const[]){__VA_ARGS__, NULL}, err, errlen)
static int parse_args(int argc, char **argv, train_opts *o, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--overfit")) { o->overfit = 1; continue; }
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!strcmp(a, "--deterministic")) { o->deterministic = 1; continue; }
        if (!strcmp(a, "--skip-nonfinite")) { o->skip_nonfinite = 1; continue; }
        if (!strcmp(a, "--ckpt-overwrite")) { o->ckpt_overwrite = 1; continue; }
        if (!strcmp(a, "--eval-only")) { o->eval_only = 1; continue; }
        if (!strcmp(a, "--mlir")) {
#ifndef BT_MLIR
            snprintf(err, errlen, "--mlir: this binary was built without MLIR; make MLIR=1 (needs libmlir-19-dev)"); return -1;
#endif
            o->mlir = 1; continue;
        }
        if (!strcmp(a, "--sp")) { o->sp = 1; continue; }
        if (!strcmp(a, "--timings")) { o->timings = 1; continue; }
        if (!strcmp(a, "--async-tp")) { o->async_tp = 1; continue; }
        if (!takes_value(a)) { snprintf(err, errlen, "unknown option '%s'", a); return -1; }
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
        else if (!strcmp(a, "-m")) { bad = parse_int(v, 1, 1 << 20, &o->val_batches); o->given_m = 1; }
        else if (!strcmp(a, "--eval-mc")) o->eval_mc = v;
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
        else if (!strcmp(a, "--head-chunk")) bad = parse_int(v, 1, 1 << 20, &o->head_chunk_mb);
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
            o->recompute = trainer_recompute_parse(v);
            if (o->recompute < 0) { snprintf(err, errlen, "--recompute must be none, norm, gelu, attn, mlp or block, got '%s'", v); return -1; }
        }
        else if (!strcmp(a, "--cuda-graph")) { int k = CHOICE("on", "off"); if (k < 0) return -1; o->cuda_graph = k == 0; }
        else if (!strcmp(a, "--ddp-rows") || !strcmp(a, "--nccl-blocking")) {
            int k = CHOICE("auto", "on", "off");
            if (k < 0) return -1;
            *(!strcmp(a, "--ddp-rows") ? &o->ddp_rows : &o->nccl_blocking) = k == 0 ? -1 : k == 1;
        }
        else if (!strcmp(a, "--ddp-transport")) { if ((o->ddp_nccl = CHOICE("auto", "nccl")) < 0) return -1; }
        else if (!strcmp(a, "--dp")) { o->dp = v; if (CHOICE("ddp", "zero1", "zero2", "fsdp") < 0) return -1; }
        else if (!strcmp(a, "--comm-dtype")) { o->comm_dtype = v; if (CHOICE("fp32", "bf16") < 0) return -1; }
        else if (!strcmp(a, "--precision")) { o->precision = v; if (CHOICE("fp32", "tf32", "bf16", "fp8") < 0) return -1; }
        else if (!strcmp(a, "--fp8-recipe")) { o->fp8_recipe = v; if (CHOICE("current", "delayed") < 0) return -1; }
        else if (!strcmp(a, "--fp8-history")) bad = parse_int(v, 1, 1024, &o->fp8_history);
        else if (!strcmp(a, "--fp8-accum")) { o->fp8_accum = v; if (CHOICE("split", "fast", "fast-dx") < 0) return -1; }
        else if (!strcmp(a, "--fp8-head")) { o->fp8_head = v; if (CHOICE("on", "off") < 0) return -1; }
        else if (!strcmp(a, "--grad-dtype")) { o->grad_dtype = v; if (CHOICE("auto", "f32", "bf16") < 0) return -1; }
        else if (!strcmp(a, "--grads")) { o->grads = v; if (CHOICE("lazy", "flat") < 0) return -1; }
        else if (!strcmp(a, "--weight-copy")) { o->weight_copy = v; if (CHOICE("halves", "separate") < 0) return -1; }
        else if (!strcmp(a, "--offload")) { if ((o->offload = CHOICE("none", "adamw")) < 0) return -1; }
        else if (!strcmp(a, "--device")) {
            o->device = v;
            int n;
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda") && (strncmp(v, "cuda:", 5) || parse_int(v + 5, 0, BT_MAX_GPUS - 1, &n))) {
                snprintf(err, errlen, "--device must be auto, cpu, cuda or cuda:N, got '%s'", v); return -1;
            }
        } else { snprintf(err, errlen, "unknown option '%s'", a); return -1; }
        if (bad) { snprintf(err, errlen, "bad value '%s' for %s", v, a); return -1; }
    }
    int fp8 = o->precision && !strcmp(o->precision, "fp8");
    const char *clash = (o->fp8_recipe || o->fp8_history || o->fp8_accum || o->fp8_head) && !fp8
            ? "--fp8-recipe, --fp8-history, --fp8-accum and --fp8-head need --precision fp8"
        : fp8 && o->mlir ? "--precision fp8 and --mlir exclude each other (--mlir's fused kernels are bf16 ones)"
        : fp8 && (o->tp > 1 || o->cp > 1) ? "--precision fp8: not with --tp or --cp yet (their split linears are gpt2_parallel.h's and llama_parallel.h's, not FP8)"
        : o->ckpt_every && !o->ckpt_dir ? "--ckpt-every needs --ckpt-dir DIR (where the checkpoints go)"
        : o->resume && !strcmp(o->resume, "auto") && !o->ckpt_dir ? "--resume auto needs --ckpt-dir DIR (where to look)"
        : o->ckpt_overwrite && !o->ckpt_dir ? "--ckpt-overwrite needs --ckpt-dir DIR (whose old checkpoints it deletes)"
        : o->resume && o->init_from ? "--resume and --init-from exclude each other (--init-from starts a new run from a model's weights)"
        : o->init_from && o->model ? "-e and --init-from exclude each other (both say where the model comes from)"
        : o->eval_only && (o->save_path || o->export_hf || o->ckpt_every || o->ckpt_overwrite)
            ? "--eval-only trains nothing and writes no model: drop --save, --export-hf, --ckpt-every and --ckpt-overwrite"
        : o->eval_only && (o->tp > 1 || o->cp > 1) ? "--eval-only: not with --tp or --cp (evaluate the checkpoint with data parallelism)"
        : o->eval_mc && (o->tp > 1 || o->cp > 1) ? "--eval-mc: not with --tp or --cp"
        : o->recompute > 0 && (o->recompute & ~(BT_RECOMPUTE_GELU | BT_RECOMPUTE_NORM)) && (o->tp > 1 || o->cp > 1)
            ? "--recompute attn, mlp or block: not with --tp or --cp (their split blocks' collectives are not remade; use none or gelu)"
        : o->recompute > 0 && (o->recompute & BT_RECOMPUTE_NORM) && (o->tp > 1 || o->cp > 1)
            ? "--recompute norm: not with --tp or --cp (the split blocks' products keep their norms' outputs; use none or gelu)" : NULL;
    if (clash) { snprintf(err, errlen, "%s", clash); return -1; }
    return 0;
}
#undef CHOICE

/* the host's available memory in bytes (MemAvailable: free plus what the page cache gives back), or
   -1 when unknown */
static double host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f)) if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024.0;
}
/* One process without tp/cp: the state kept whatever B is must fit where it lives, said before
   anything is allocated (rather than a failed allocation deep in the build, or, on a host that
   overcommits, the kernel's OOM killer during the init). Bytes a parameter: the fp32 weights 4,
   their bf16 copy 2 (bf16, fp8 on a GPU; 0 with --weight-copy halves), the gradients 4 (2 with
   --grad-dtype bf16), AdamW's m and v 8 (not for --eval-only; in host memory with --offload adamw).
   Activations come on top. */
static int check_static_memory(const train_opts *o, int64_t n, int on_gpu, bt_device dev, bt_dtype dt, int grad_bf16, char *err,
                               size_t errlen) {
    double p = (double)n, state = o->eval_only ? 0 : 8;
    int copy = dt != BT_F32 && !(o->weight_copy && !strcmp(o->weight_copy, "halves") && !o->eval_only) ? 2 : 0;
    double dev_b = p * (4 + copy + (grad_bf16 ? 2 : 4) + (o->offload && on_gpu ? 0 : state));
    double host_b = on_gpu ? (o->offload ? p * state : 0) : dev_b, avail = host_available_bytes();
    if (on_gpu) {
        size_t free_b = 0, total_b = 0;
        bt_device_memory(dev, &free_b, &total_b);
        if (dev_b > (double)free_b) {
            snprintf(err, errlen, "%.2fB parameters need %.1f GB on the GPU before any activation (fp32 weights 4 bytes a parameter, "
                     "their bf16 copy %d, gradients %d, AdamW's m and v %d), and %.1f of its %.1f GB are free: %s", p / 1e9, dev_b / 1e9,
                     copy, grad_bf16 ? 2 : 4, o->offload || o->eval_only ? 0 : 8, free_b / 1e9, total_b / 1e9,
                     !grad_bf16 && dt != BT_F32 && !o->eval_only ? "--grad-dtype bf16 keeps 2 bytes a parameter less, --offload adamw 8"
                     : !o->offload && !o->eval_only ? "--offload adamw moves m and v (8 bytes a parameter) to host memory"
                     : "a smaller model, or --dp fsdp over several GPUs");
            return -1;
        }
    }
    if (host_b > 0 && avail > 0 && host_b > 0.95 * avail) {
        snprintf(err, errlen, "%.2fB parameters need %.1f GB of %s memory (%s), and %.1f GB are available here: a smaller model%s",
                 p / 1e9, host_b / 1e9, on_gpu ? "pinned host" : "host",
                 on_gpu ? "--offload adamw: AdamW's m and v, 8 bytes a parameter" : "weights, gradients, m and v: 16 bytes a parameter",
                 avail / 1e9, on_gpu ? ", or without --offload" : "");
        return -1;
    }
    return 0;
}

/* fill what the flags left open from the machine, then check the combination */
static int resolve_opts(train_opts *o, int on_gpu, const trainer_config *cfg, char *err, size_t errlen) {
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
    if (!on_gpu && strcmp(o->precision, "fp32") && strcmp(o->precision, "fp8")) {
        snprintf(err, errlen, "--precision %s needs a GPU (the CPU path computes in fp32; fp8 is emulated there)", o->precision); return -1;
    }
    int grad_bf16 = o->grad_dtype && !strcmp(o->grad_dtype, "bf16");
    if (grad_bf16 && (!on_gpu || (strcmp(o->precision, "bf16") && strcmp(o->precision, "fp8")))) {
        snprintf(err, errlen, "--grad-dtype bf16 needs --precision bf16 or fp8 on a GPU (its products write bf16 gradients; %s)",
                 on_gpu ? "fp32 and tf32 runs compute them in fp32" : "a CPU run computes in fp32");
        return -1;
    }
    /* fp8's recipe by default: delayed scaling (Transformer Engine's default recipe): one read of
       each tensor per cast (the amax measured in the same pass), where current scaling reads it
       twice; the scales lag the tensors by a step, which the history's maximum covers. History 16
       (bt_fp8_default_opts'; TE's is 1024): a large amax (the first steps') holds the scales down
       for 16 steps, not 1024, and a state is 216 bytes per linear, not 12 KB (docs/fp8.md) */
    if (!strcmp(o->precision, "fp8")) {
        if (!o->fp8_recipe) o->fp8_recipe = "delayed";
        if (!o->fp8_history) o->fp8_history = 16;
        /* fast accumulation for the products whose sums run over a layer's width: the forward's
           (torchao's default for the output product too) and the block linears' input gradients; the
           weight gradients (sums over the tokens) and the head's dx (over the vocabulary) split. The
           curves and speeds behind it: docs/fp8.md. A resume not giving it: main() took the checkpoint's */
        if (!o->fp8_accum) o->fp8_accum = "fast-dx";
        if (!o->fp8_head) o->fp8_head = "on";   /* its curves: docs/fp8.md; a resume not giving it: main() took the checkpoint's */
        /* cuBLASLt's FP8 operands have 16-byte rows: the B T rows, C, 3C and 4C multiples of 16 */
        const llama_config *lc = &cfg->llama;   /* a Llama's qkv width (H + 2 Hkv) D and MLP width F too */
        int llama = cfg->family == TRAINER_LLAMA, qkv = llama ? (lc->H + 2 * lc->Hkv) * (lc->C / lc->H) : 0;
        const char *what = o->T % 16 ? "-t" : cfg->C % 16 ? "the model's width C" : llama && lc->F % 16 ? "the MLP width F"
                         : llama && qkv % 16 ? "the qkv width (H + 2 Hkv) D" : NULL;
        if (on_gpu && what) {
            snprintf(err, errlen, "--precision fp8 on a GPU: %s %d is not a multiple of 16 (the FP8 products' operands need 16-byte rows)",
                     what, o->T % 16 ? o->T : cfg->C % 16 ? cfg->C : lc->F % 16 ? lc->F : qkv);
            return -1;
        }
    }
    if (o->B < 0) {
        /* measured once the model exists (auto_micro_batch), and so after its gradient buffer: auto
           cannot know yet whether a step is one micro-batch */
        if (!strcmp(o->grad_dtype, "auto")) o->grad_dtype = "f32";
        if (on_gpu) return 0;
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
    /* bf16 gradients are exact as products' outputs (each weight's gradient one product, rounded
       once, as PyTorch's autocast makes them), not as a sum over micro-batches or ranks. auto takes
       them where that holds: a bf16 or fp8 run on one GPU (no tp, cp or --mlir) with one micro-batch
       a step; elsewhere f32 */
    if (!strcmp(o->grad_dtype, "auto")) {
        int lowp = !strcmp(o->precision, "bf16") || !strcmp(o->precision, "fp8");
        o->grad_dtype = on_gpu && lowp && o->total_batch == bt && o->nproc <= 1 && o->tp * o->cp <= 1 && !o->mlir ? "bf16" : "f32";
    }
    if (grad_bf16 && o->total_batch != bt) {
        snprintf(err, errlen, "--grad-dtype bf16 needs one micro-batch a step: -d %d is %lld micro-batches of -b %d x -t %d (the "
                 "gradients would be summed in bf16); give -d %lld, or --grad-dtype f32", o->total_batch, (long long)(o->total_batch / bt),
                 o->B, o->T, (long long)bt);
        return -1;
    }
    return 0;
}

/* --cuda-graph: on by default on GPUs, one or several processes of data parallelism (the
   micro-step's graph then holds the gradient buckets' collectives: bit-identical to eager and
   0.5-1.2% faster on two H200s, bench/RESULTS.md); tp/cp's collectives and --mlir's kernels are
   not captured (an error when asked for); no GPU: ignored */
static int resolve_graph(train_opts *o, int on_gpu, char *err, size_t errlen) {
    const char *why = o->tp * o->cp > 1 ? "--tp or --cp" : o->mlir ? "--mlir" : !strcmp(o->dp, "fsdp") ? "--dp fsdp" : NULL;
    if (on_gpu && why && o->cuda_graph == 1) { snprintf(err, errlen, "--cuda-graph on: not supported with %s; use --cuda-graph off", why); return -1; }
    o->cuda_graph = on_gpu && !why && o->cuda_graph != 0;
    return 0;
}

/* ============================================================================================
   2. a step
   ============================================================================================ */
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }

/* One micro-batch: the forward pass, the backward of loss / accum (the gradients average over the
   micro-batches) and loss / accum added into loss_sum (f32 on the device) */
static void micro_step(trainer *tr, bt_tensor *idx, bt_tensor *tgt, int accum, bt_tensor *loss_sum) {
    if (tr->par) bt_par_stage_mark(tr->par, trainer_device(tr), 0);
    bt_tensor *loss = trainer_model_loss(tr, idx, tgt);
    if (tr->par) bt_par_stage_mark(tr->par, trainer_device(tr), 1);
    bt_backward(bt_scale(loss, 1.0 / accum));
    if (tr->par) bt_par_stage_mark(tr->par, trainer_device(tr), 2);
    int old = bt_set_grad_enabled(0);
    bt_add_(loss_sum, bt_cast(loss, BT_F32), 1.0 / accum);
    bt_set_grad_enabled(old);
}

/* does micro-batch a of accum communicate its gradients? ddp, zero1: the step's last; zero2:
   every one (its reduced range is then added to the step's sum) */
static int dp_sync(const trainer *tr, int a, int accum) { return tr->zero.stage == 2 || a == accum - 1; }

/* micro-batch a with its data-parallel part: the buckets' collectives during the backward (a
   synced one), the compute stream's wait for them, zero2's fold. graphed: run for (or inside) a
   CUDA graph, so no timing events: the eager path times the step's last backward and its wait. */
static void dp_micro_step(trainer *tr, bt_tensor *idx, bt_tensor *tgt, int a, int accum, bt_tensor *loss_sum, int graphed) {
    int sync = dp_sync(tr, a, accum);
    if (tr->ddp) bt_ddp_set_sync(tr->ddp, sync);
    micro_step(tr, idx, tgt, accum, loss_sum);
    if (!graphed && tr->work_ev[1] && a == accum - 1) bt_event_record(tr->work_ev[1], bt_stream_current(trainer_device(tr)));
    if (tr->ddp && sync) {
        if (graphed) bt_ddp_wait(tr->ddp, NULL);
        else trainer_ddp_wait_timed(tr);
    }
    if (tr->zero.stage == 2) bt_zero_accumulate(&tr->zero, trainer_flat_grad(tr));
}

/* One optimizer step over total_batch tokens (this rank's share of it with several processes).
   The mean loss and the global gradient norm are read (one host sync) before the update, which is
   made only when both are finite: returns 1 when it was made (*grad_norm is the pre-clipping norm),
   0 when it was not (the weights are unchanged). With data parallelism every rank sees the same
   reduced loss and norm, so every rank decides alike. */
static int train_step(trainer *tr, int step, double lr, double *loss, double *grad_norm) {
    double t0 = now_s();
    int accum = tr->o.total_batch / (tr->o.B * tr->o.T * trainer_data_world(tr));
    trainer_grads_begin(tr);
    if (tr->zero.grad_sum) bt_zero_(tr->zero.grad_sum);
    if (tr->fsdp) bt_fsdp_zero_grad(tr->fsdp);
    bt_scope_begin();
    step_graph *g = tr->o.cuda_graph == 1 ? trainer_graph_for(tr, accum) : NULL;
    bt_tensor *loss_sum = g ? g->loss_sum : bt_scalar(0, BT_F32, trainer_device(tr)), *tokens = NULL;
    if (g) { bt_zero_(loss_sum); tokens = trainer_graph_tokens(tr, g, step); }
    tr->comm_early = -1;   /* no timed wait (yet) in this step */
    if (tr->work_ev[0]) bt_event_record(tr->work_ev[0], bt_stream_current(trainer_device(tr)));
    for (int a = 0; a < accum; a++) {
        bt_scope_begin();
        if (g) {
            trainer_graph_micro_step(tr, g, tokens, a, tr->ddp && dp_sync(tr, a, accum), dp_micro_step);
            if (tr->work_ev[1] && a == accum - 1) bt_event_record(tr->work_ev[1], bt_stream_current(trainer_device(tr)));
        } else {
            bt_tensor *idx, *tgt;
            if (tr->o.overfit && step + a > 0) bt_loader_reset(tr->train);
            trainer_next_batch(tr, tr->train, tr->o.B, &idx, &tgt);
            dp_micro_step(tr, idx, tgt, a, accum, loss_sum, 0);
        }
        bt_scope_end();
    }
    if (tr->par) { bt_par_reduce_grads(tr->par, trainer_flat_grad(tr), &tr->zero); bt_par_mean(tr->par, loss_sum); }
    else if (tr->fsdp) bt_fsdp_mean(tr->fsdp, loss_sum);   /* CPU ranks too: through the store */
    else if (tr->dist) bt_all_reduce(tr->dist->world_comm, bt_data_ptr(loss_sum), bt_data_ptr(loss_sum), 1, BT_F32, BT_RED_AVG, NULL);
    bt_tensor *norm = trainer_grad_norm(tr);
    tr->host_ms = (now_s() - t0) * 1e3;
    *loss = bt_item(loss_sum);
    *grad_norm = bt_item(norm);
    int finite = isfinite(*loss) && isfinite(*grad_norm);
    if (finite) trainer_update(tr, lr, norm);
    trainer_grads_end(tr);   /* --grads lazy: the memory back until the next backward */
    trainer_fp8_update(tr);   /* the step's amaxes into the histories, skipped update or not; the next step's scales */
    bt_scope_end();
    return finite;
}

/* the mean loss of val_batches validation batches (every rank's mean averaged) */
static double evaluate(trainer *tr) {
    /* the graph's pool is free between launches: validation borrows it instead of reserving more */
    int pool = tr->sg.pool;
    if (pool) bt_alloc_pool_push(trainer_device(tr), pool);
    int old = bt_set_grad_enabled(0);
    bt_loader_reset(tr->val);
    int n = tr->o.val_batches;
    if ((size_t)n > bt_loader_num_batches(tr->val)) n = (int)bt_loader_num_batches(tr->val);
    bt_scope_begin();
    bt_tensor *sum = bt_scalar(0, BT_F32, trainer_device(tr));
    for (int i = 0; i < n; i++) {
        bt_scope_begin();
        bt_tensor *idx, *tgt;
        trainer_next_batch(tr, tr->val, tr->val_B, &idx, &tgt);
        bt_add_(sum, bt_cast(trainer_model_loss(tr, idx, tgt), BT_F32), 1.0);
        bt_scope_end();
    }
    if (tr->par) bt_par_mean(tr->par, sum);
    else if (tr->fsdp) bt_fsdp_mean(tr->fsdp, sum);
    else if (tr->dist) bt_all_reduce(tr->dist->world_comm, bt_data_ptr(sum), bt_data_ptr(sum), 1, BT_F32, BT_RED_AVG, NULL);
    double loss = bt_item(sum) / (n ? n : 1);
    bt_scope_end();
    bt_set_grad_enabled(old);
    if (pool) bt_alloc_pool_pop(trainer_device(tr));
    return loss;
}

/* 1 when every weight of m is finite. x * 0 is 0 for a finite x and NaN for an infinite or NaN
   one, so the products sum to 0 exactly when all are (a sum of squares would overflow for finite
   weights above 1.8e19); in chunks of 2^24, so the temporaries stay small. One host sync. */
static int weights_finite(trainer *tr) {
    int old = bt_set_grad_enabled(0);
    int64_t numel = trainer_flat_numel(tr);
    bt_scope_begin();
    bt_tensor *sum = bt_scalar(0, BT_F32, trainer_device(tr));
    for (int64_t at = 0, chunk = (int64_t)1 << 24; at < numel; at += chunk) {
        int64_t n = numel - at < chunk ? numel - at : chunk;
        bt_add_(sum, bt_sum(bt_scale(bt_narrow(trainer_flat(tr), 0, at, n), 0.0), NULL, 0, 0), 1.0);
    }
    int finite = bt_item(sum) == 0;
    bt_scope_end();
    bt_set_grad_enabled(old);
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

/* ============================================================================================
   3. logging
   ============================================================================================ */
/* dense peak FLOP/s of a GPU in a precision, for MFU, looked up by the GPU's name (datasheet
   figures, without sparsity); 0 when the GPU is not in the table. fp8 counts against the bf16
   peak: most of its work is still bf16 (attention, the classifier), and the gain then shows as MFU */
static double peak_flops(const char *gpu, const char *precision) {
    static const struct { const char *name; double bf16, tf32, fp32; } table[] = {
        {"H100 PCIe", 756e12, 378e12, 51e12},
        {"H100", 989e12, 495e12, 67e12},     /* SXM (HBM3) */
        {"H200", 989e12, 495e12, 67e12},
        {"A100", 312e12, 156e12, 19.5e12},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(gpu, table[i].name))
            return !strcmp(precision, "bf16") || !strcmp(precision, "fp8") ? table[i].bf16 : !strcmp(precision, "tf32") ? table[i].tf32 : table[i].fp32;
    return 0;
}

/* a JSON number (fmt), or null for a non-finite one: JSON has no nan or inf */
static const char *json_num(char *buf, size_t n, const char *fmt, double x) {
    if (!isfinite(x)) return "null";
    snprintf(buf, n, fmt, x);
    return buf;
}

/* seconds as h:mm:ss, or m:ss under an hour */
static const char *hms(char *b, size_t n, double s) {
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(b, n, "%ld:%02ld", t / 60, t % 60);
    return b;
}
/* The step line's end: the time since the first step and the run's ETA, at the pace of the steps
   after the first (their validations and checkpoints included); the next validation and checkpoint
   too when they are more than a minute away. done: steps finished; start: the run's first step. */
static void print_eta(const train_opts *o, int done, int start, double elapsed, double since_first) {
    char a[32], b[32];
    printf(" | %s", hms(a, sizeof a, elapsed));
    if (done - start < 2 || done >= o->steps) return;
    double pace = since_first / (done - start - 1);
    printf(", eta %s", hms(b, sizeof b, pace * (o->steps - done)));
    int every[2] = {o->val_every, o->ckpt_dir ? o->ckpt_every : 0};
    static const char *const what[2] = {"val", "checkpoint"};
    for (int i = 0; i < 2; i++) {
        if (every[i] <= 0) continue;
        int next = (done / every[i] + 1) * every[i];
        if (next < o->steps && pace * (next - done) > 60) printf(", %s in %s", what[i], hms(b, sizeof b, pace * (next - done)));
    }
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
static void log_json(trainer *tr, int step, double loss, double lr, double norm, double ms, double tps, double elapsed_s,
                     const double *val, const char *extra) {
    if (!tr->log) return;
    char a[32], b[32], c[32];
    bt_alloc_stats_t st = bt_alloc_stats(trainer_device(tr));
    errno = 0;
    /* tokens: trained after this step (the same count on a resumed run); elapsed_s: this process's
       time since its first step (a resumed run starts again at 0) */
    int bad = fprintf(tr->log, "{\"step\": %d, \"tokens\": %lld, \"train_loss\": %s, \"lr\": %.6e, \"grad_norm\": %s, \"ms\": %.3f, "
                      "\"host_ms\": %.3f, \"tok_per_s\": %.1f, \"elapsed_s\": %.3f, \"mem_mib\": %.1f, \"peak_allocated_mib\": %.1f, "
                      "\"peak_reserved_mib\": %.1f",
                      step, (long long)step * tr->o.total_batch, json_num(a, sizeof a, "%.6f", loss), lr, json_num(b, sizeof b, "%.6f", norm),
                      ms, tr->host_ms, tps, elapsed_s, st.allocated / 1048576.0, st.peak_allocated / 1048576.0, st.peak_reserved / 1048576.0) < 0;
    if (val) bad |= fprintf(tr->log, ", \"val_loss\": %s", json_num(c, sizeof c, "%.6f", *val)) < 0;
    bad |= fprintf(tr->log, "%s}\n", extra) < 0;
    bad |= fflush(tr->log) != 0;
    if (bad) log_close(tr, errno ? errno : EIO, "the log stops here, the run goes on");
}

/* -o DIR: DIR/loss.svg redrawn from DIR/log.jsonl (bt_chart.h; it rereads the log: 0.1 s at 100,000
   steps). A chart that cannot be written is a warning, once: charting stops, the run goes on. */
static void draw_chart(trainer *tr) {
    if (!tr->log || tr->chart_off) return;
    char lp[4200], sp[4200], err[1024];
    snprintf(lp, sizeof lp, "%s/log.jsonl", tr->o.out_dir);
    snprintf(sp, sizeof sp, "%s/loss.svg", tr->o.out_dir);
    const char *logs[1] = {lp};
    if (bt_chart_svg(logs, NULL, 1, sp, NULL, err, sizeof err)) {
        fprintf(stderr, "warning: -o: %s: no more charts, the run goes on\n", err);
        tr->chart_off = 1;
    }
}

/* The tokenizer for samples. One given with --tokenizer must load; the default one may be
   absent (samples then print as token ids). */
static int load_tokenizer(trainer *tr, char *err, size_t errlen) {
    char enc[4096], bpe[4096];
    snprintf(enc, sizeof enc, "%s/encoder.json", tr->o.tok_dir); snprintf(bpe, sizeof bpe, "%s/vocab.bpe", tr->o.tok_dir);
    tr->tok = bt_tokenizer_load(enc, bpe);
    if (tr->tok) return 0;
    if (tr->o.given_tok) { bt_msgf(err, errlen, "--tokenizer: %s", bt_data_error()); return -1; }
    fprintf(stderr, "note: no tokenizer (%s); samples print as token ids\n", bt_data_error());
    return 0;
}

/* --eval-mc: the set read and encoded (it needs the tokenizer), every token inside the model's vocabulary */
static int load_mc(trainer *tr, const trainer_config *cfg, char *err, size_t errlen) {
    if (!tr->tok) { bt_msgf(err, errlen, "--eval-mc %s: no tokenizer to encode it (--tokenizer DIR with encoder.json and vocab.bpe)", tr->o.eval_mc); return -1; }
    if (bt_mc_load(&tr->mc, tr->o.eval_mc, tr->tok)) { bt_msgf(err, errlen, "--eval-mc: %s", bt_data_error()); return -1; }
    for (int64_t i = 0; i < tr->mc.n_tokens; i++)
        if (tr->mc.tokens[i] < 0 || tr->mc.tokens[i] >= cfg->V) {
            bt_msgf(err, errlen, "--eval-mc %s: token %d is outside the model's vocabulary of %d", tr->o.eval_mc, tr->mc.tokens[i], cfg->V);
            return -1;
        }
    return 0;
}

/* Every output of the run, checked before anything is built or trained: a bad --save or -o
   path must not cost a run. -o DIR is made here when missing. The files the program names in
   the directories it is given (-o DIR's log.jsonl, --ckpt-dir's checkpoints, --export-hf DIR's
   two files) are never written through symbolic links; --save PATH is the user's own name, and a
   link there is written through. */
static int check_outputs(const train_opts *o, char *err, size_t errlen) {
    if (o->save_path && bt_output_check(o->save_path)) { bt_msgf(err, errlen, "--save: %s", bt_data_error()); return -1; }
    if (o->out_dir) {
        char path[4096];
        static const char *const files[2] = {"log.jsonl", "loss.svg"};
        for (int i = 0; i < 2; i++) {
            if (snprintf(path, sizeof path, "%s/%s", o->out_dir, files[i]) >= (int)sizeof path) { snprintf(err, errlen, "-o: the directory name is too long"); return -1; }
            if (bt_output_dir(o->out_dir) || bt_output_check_flags(path, BT_OUTPUT_NOFOLLOW)) { bt_msgf(err, errlen, "-o: %s", bt_data_error()); return -1; }
        }
    }
    if (o->ckpt_dir) {   /* made here; a checkpoint's name in it must be writable */
        char path[4096];
        if (bt_ckpt_path(o->ckpt_dir, 0, path, sizeof path)) { snprintf(err, errlen, "--ckpt-dir: the directory name is too long"); return -1; }
        if (bt_output_dir(o->ckpt_dir) || bt_output_check_flags(path, BT_OUTPUT_NOFOLLOW)) { bt_msgf(err, errlen, "--ckpt-dir: %s", bt_data_error()); return -1; }
    }
    if (o->export_hf) {
        static const char *const files[2] = {"model.safetensors", "config.json"};
        for (int i = 0; i < 2; i++) {
            char path[4096];
            if (snprintf(path, sizeof path, "%s/%s", o->export_hf, files[i]) >= (int)sizeof path) { snprintf(err, errlen, "--export-hf: the directory name is too long"); return -1; }
            if (bt_output_dir(o->export_hf) || bt_output_check_flags(path, BT_OUTPUT_NOFOLLOW)) { bt_msgf(err, errlen, "--export-hf: %s", bt_data_error()); return -1; }
        }
    }
    return 0;
}

/* A resumed run's log: its entries of the steps after the checkpoint's (the steps a killed run
   made past its last checkpoint, which this run makes again) are cut, and a last line a kill left
   half-written, so that the log has one entry per step. fd: the log opened for appending. */
static void log_cut_after(int fd, const char *path, int step) {
    int rfd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    FILE *f = rfd >= 0 ? fdopen(rfd, "r") : NULL;
    struct stat a, b;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    off_t at = 0, cut = -1;
    if (f && fstat(fd, &a) == 0 && fstat(rfd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
        while (cut < 0 && (len = getline(&line, &cap, f)) > 0) {
            int s;
            if (line[len - 1] != '\n' || (sscanf(line, "{\"step\": %d", &s) == 1 && s > step)) cut = at;
            at += len;
        }
    else fprintf(stderr, "warning: -o: %s: cannot read it to cut the entries after step %d (%s): they stay\n", path, step, strerror(errno));
    if (cut >= 0 && ftruncate(fd, cut) != 0) fprintf(stderr, "warning: -o: %s: cannot cut it after step %d: %s\n", path, step, strerror(errno));
    free(line);
    if (f) fclose(f); else if (rfd >= 0) close(rfd);
}
/* -o DIR: DIR/log.jsonl, created or truncated now (after check_outputs), never through a link; a
   resumed run appends, after the entries of the steps it makes again are cut */
static int open_log(trainer *tr, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/log.jsonl", tr->o.out_dir);
    int fd = bt_output_open_flags(path, tr->src.resume, BT_OUTPUT_NOFOLLOW);
    if (fd >= 0 && tr->src.resume) log_cut_after(fd, path, tr->start_step);
    if (fd < 0 || !(tr->log = fdopen(fd, "w"))) {
        bt_msgf(err, errlen, "-o: %s", fd < 0 ? bt_data_error() : strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return 0;
}

/* frees what the trainer holds (any part may be missing: every exit path comes here); rc passes
   through. With several processes a failed rank aborts the job (the others are waiting in a
   collective for it), a finished one leaves cleanly (a collective: every rank gets here). */

/* the end of a run, every exit path: the log closed, MLIR's counts, then the trainer freed */
static int run_end(trainer *tr, int rc) {
    log_close(tr, 0, "the log is incomplete");
#ifdef BT_MLIR
    if (tr->o.mlir && !rc && (!tr->dist || tr->dist->rank == 0)) {
        bt_mlir_stats_t st = bt_mlir_stats();
        printf("mlir: %llu fused calls, %llu fused backwards, %llu fallbacks; %llu compiles (%.0f ms), %llu disk hits (cache %s)\n",
               (unsigned long long)st.fused_calls, (unsigned long long)st.fused_backwards, (unsigned long long)st.fallbacks,
               (unsigned long long)st.compiles, st.compile_ms, (unsigned long long)st.disk_hits, *bt_mlir_cache_dir() ? bt_mlir_cache_dir() : "off");
    }
    bt_mlir_shutdown();
#endif
    return trainer_end(tr, rc);
}

/* The default paths (data/...) are the repository's: run from another directory, a default that
   is not there is taken beside the program (make puts train_gpt2 at the repository's root). */
static const char *beside_program(const char *rel, char *buf, size_t n) {
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!access(rel, F_OK) || rel[0] == '/' || k <= 0) return rel;
    exe[k] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return rel;
    *slash = 0;
    snprintf(buf, n, "%.2000s/%.2000s", exe, rel);
    return access(buf, F_OK) ? rel : buf;
}
/* what to do about shards that did not open: make data for the defaults, bt_tokenize for text */
static const char *data_hint(int given, const char *flag) {
    static char hint[512];
    const char *e = bt_data_error();
    if (strstr(e, "not a token shard"))
        snprintf(hint, sizeof hint, "(%s takes token shards: ./bt_tokenize TEXT OUT.bin makes one from a text file; make bt_tokenize builds it)\n", flag);
    else if (!given)
        snprintf(hint, sizeof hint, "(the default shards: make data builds them in the repository's data/; from elsewhere give %s PATH)\n", flag);
    else hint[0] = 0;
    return hint;
}

/* --eval-only: the model as loaded, evaluated and nothing else: the validation loss over all of -j
   (or -m batches) unless -v 0, and --eval-mc's accuracy. -o DIR gets DIR/eval.json and, with
   --eval-mc, DIR/eval_mc.jsonl (each item's per-ending losses); its log.jsonl is left as it is.
   Returns the exit code. */
static int eval_only(trainer *tr, train_opts *o, const trainer_config *cfg, int on_gpu, const char *what) {
    char err[1024];
    bt_dist *dist = tr->dist;
    int rank = dist ? dist->rank : 0, world = dist ? dist->world : 1;
    if (o->B < 0) o->B = on_gpu ? 16 : 8;   /* no backward: the training probe's B is not needed */
    tr->o = *o;
    double val = NAN;
    int nb = 0;
    if (o->val_every != 0) {
        for (tr->val_B = o->B; !(tr->val = bt_loader_open(o->val_glob, tr->val_B, o->T, rank, world, 0, 0)) && tr->val_B > 1;) tr->val_B /= 2;
        if (!tr->val || bt_loader_check_vocab(tr->val, cfg->V)) {
            fprintf(stderr, "error: val data (-j %s): %s\n%s(-v 0 evaluates without it)\n", o->val_glob, bt_data_error(), data_hint(o->given_j, "-j"));
            return 1;
        }
        size_t all = bt_loader_num_batches(tr->val);
        if (!o->given_m) tr->o.val_batches = all < (size_t)INT32_MAX ? (int)all : INT32_MAX;
        nb = (size_t)tr->o.val_batches < all ? tr->o.val_batches : (int)all;
        tr->inputs = (int32_t *)malloc(sizeof(int32_t) * (size_t)tr->val_B * o->T);
        tr->targets = (int32_t *)malloc(sizeof(int32_t) * (size_t)tr->val_B * o->T);
        if (!tr->inputs || !tr->targets) { fprintf(stderr, "error: out of host memory for a batch of %d x %d tokens\n", tr->val_B, o->T); return 1; }
    }
    printf("eval-only: %s%s: L %d H %d C %d V %d, %.2fM parameters on %s, precision %s\n", what,
           cfg->family == TRAINER_LLAMA ? " (Llama)" : "", cfg->L, cfg->H, cfg->C, cfg->V, trainer_num_params(tr) / 1e6, on_gpu ? bt_device_name(trainer_device(tr)) : "cpu", o->precision);
    fflush(stdout);
    double t0 = now_s();
    if (tr->val) {
        val = evaluate(tr);
        printf("val loss %.6f over %d batches of %d x %d tokens per process (%s), %.1f s\n", val, nb, tr->val_B, o->T, o->val_glob, now_s() - t0);
    }
    trainer_mc_result mc;
    memset(&mc, 0, sizeof mc);
    if (tr->mc.n_items) {
        if (trainer_eval_mc(tr, &mc)) return 1;
        printf("%s: %lld items, accuracy %.4f by summed loss, %.4f by mean loss per token, %.1f s\n", o->eval_mc,
               (long long)mc.n_items, mc.acc, mc.acc_mean, mc.seconds);
    }
    int rc = 0;
    if (o->out_dir && rank == 0) {
        char path[4200];
        bt_json_writer w;
        bt_json_writer_init(&w, 2);
        bt_json_object(&w, NULL);
        bt_json_string(&w, "model", what);
        bt_json_string(&w, "precision", o->precision);
        if (tr->val) {
            bt_json_string(&w, "val", o->val_glob);
            if (isfinite(val)) bt_json_number(&w, "val_loss", val); else bt_json_null(&w, "val_loss");
            bt_json_int(&w, "val_tokens", (int64_t)nb * tr->val_B * o->T * world);
        }
        if (tr->mc.n_items) {
            bt_json_string(&w, "mc", o->eval_mc);
            bt_json_int(&w, "mc_items", mc.n_items);
            bt_json_number(&w, "mc_acc", mc.acc);
            bt_json_number(&w, "mc_acc_mean", mc.acc_mean);
        }
        bt_json_end(&w);
        snprintf(path, sizeof path, "%s/eval.json", o->out_dir);
        if (bt_json_save_flags(&w, path, BT_OUTPUT_NOFOLLOW)) { fprintf(stderr, "error: -o: %s\n", bt_data_error()); rc = 1; }
        else printf("wrote %s\n", path);
        bt_json_writer_free(&w);
        snprintf(path, sizeof path, "%s/eval_mc.jsonl", o->out_dir);
        if (tr->mc.n_items && trainer_mc_write(tr, &mc, path, err, sizeof err)) { fprintf(stderr, "error: -o: %s\n", err); rc = 1; }
        else if (tr->mc.n_items) printf("wrote %s\n", path);
    }
    trainer_mc_free(&mc);
    return rc;
}

/* ============================================================================================
   4. a run: from the flags to the saved model
   ============================================================================================ */
static int train_main(train_opts *o) {
    char err[1024];
    static char paths[3][4096];   /* the defaults found beside the program: they outlive the run's options */
    if (!o->given_i) o->train_glob = beside_program(o->train_glob, paths[0], sizeof paths[0]);
    if (!o->given_j) o->val_glob = beside_program(o->val_glob, paths[1], sizeof paths[1]);
    if (!o->given_tok) o->tok_dir = beside_program(o->tok_dir, paths[2], sizeof paths[2]);
    /* several processes (--nproc, torchrun, srun, mpirun): one GPU each; rank 0 prints */
    bt_dist *dist = NULL;
    bt_dist_env env;
    if (bt_dist_env_read(&env)) { fprintf(stderr, "error: %s\n", bt_dist_error()); return 1; }
    /* several processes on CPUs: every collective through the TCP store (bt_dist.h, section 7) */
    int cpu_ranks = env.world > 1 && (!strcmp(o->device, "cpu") || bt_cuda_device_count() == 0);
    if (env.world > 1) {
        bt_dist_opts dop;
        memset(&dop, 0, sizeof dop);
        dop.nccl_timeout_s = o->nccl_timeout;
        dop.store_only = cpu_ranks;
        /* tp/cp issue hundreds of collectives a step on the critical path: blocking communicators
           spare each one the host's wait for ncclInProgress (bt_dist.h, FAULTS). --cuda-graph on
           captures the buckets' collectives from this thread: a blocking communicator enqueues
           them on it (a non-blocking one hands the launch to a thread of NCCL's, untried inside a
           capture) */
        dop.blocking_comms = o->nccl_blocking >= 0 ? o->nccl_blocking : o->tp * o->cp > 1 || o->cuda_graph == 1;
        dist = bt_dist_init(&dop);
        trainer_set_launcher(getppid());   /* its copies of a Ctrl-C are not a second signal */
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
    trainer_config cfg;   /* the family (GPT-2 or Llama) and its config, chosen here for the run */
    memset(&cfg, 0, sizeof cfg);
    const char *model = o->model ? o->model : (on_gpu ? "d12" : "s4");
    if (trainer_ckpt_lock(&tr, o, dist, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    if (trainer_source_open(o, dist, &tr.src, &cfg, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    int from_file = 0, have_src = tr.src.file || tr.src.lhf;
    if (!have_src || o->model) {   /* with --resume, -e names the model the checkpoint must hold */
        gpt2_config gc;
        from_file = trainer_config_preset(model, &cfg) != 0;   /* GPT-2's presets, then Llama's */
        if (from_file && gpt2_read_header(model, &gc, err, sizeof err)) {
            fprintf(stderr, "error: -e %s is neither a preset nor a readable model file: %s " SEE_H "\n", model, err);
            return run_end(&tr, 2);
        }
        if (from_file) cfg = trainer_config_gpt2(gc);   /* llm.c's files are GPT-2's */
    }
    if (have_src) from_file = 0;
    if (tr.src.resume && o->B < 0) {  /* -b omitted: the checkpoint's, not one measured anew */
        int64_t b;
        if (!bt_ckpt_meta_get_i64(bt_ckpt_file_meta(tr.src.file), "train.B", &b) && b >= 1 && b <= (1 << 20)) o->B = (int)b;
    }
    if (tr.src.resume && o->precision && !strcmp(o->precision, "fp8")) {   /* not given: the resumed run's (absent: older, head off, split) */
        const bt_ckpt_meta *meta = bt_ckpt_file_meta(tr.src.file);
        const char *h = bt_ckpt_meta_get(meta, "train.fp8_head"), *a = bt_ckpt_meta_get(meta, "train.fp8_accum");
        if (!o->fp8_head) o->fp8_head = h && !strcmp(h, "on") ? "on" : "off";
        if (!o->fp8_accum) o->fp8_accum = trainer_fp8_accum_name(trainer_fp8_accum_bits(a));
    }
    if (!strcmp(o->grad_dtype, "auto")) {   /* f32 where ranks sum their gradients, or a resumed run's were f32 (absent: older, f32) */
        const char *g = tr.src.resume ? bt_ckpt_meta_get(bt_ckpt_file_meta(tr.src.file), "train.grad_dtype") : NULL;
        if (world > 1 || (tr.src.resume && (!g || !strcmp(g, "f32")))) o->grad_dtype = "f32";
    }
    if (resolve_opts(o, on_gpu, &cfg, err, sizeof err)) { fprintf(stderr, "error: %s " SEE_H "\n", err); return run_end(&tr, 2); }
    /* --weight-copy not given: halves where the run allows them; a resume takes the checkpoint's (absent: older, separate) */
    if (!o->weight_copy) {
        const char *w = tr.src.resume ? bt_ckpt_meta_get(bt_ckpt_file_meta(tr.src.file), "train.weight_copy") : "halves";
        o->weight_copy = w && !strcmp(w, "halves") && trainer_halves_allowed(o, world, on_gpu) ? "halves" : "separate";
    } else if (!strcmp(o->weight_copy, "halves") && !trainer_halves_allowed(o, world, on_gpu)) {
        fprintf(stderr, "error: --weight-copy halves needs a bf16 compute dtype (--precision bf16, or fp8 on a GPU) and one optimizer over "
                "all the weights: one process, without --tp/--cp or --mlir " SEE_H "\n");
        return run_end(&tr, 2);
    }
    if (!o->grads) o->grads = trainer_lazy_grads_allowed(o, world, on_gpu) ? "lazy" : "flat";
    else if (!strcmp(o->grads, "lazy") && !trainer_lazy_grads_allowed(o, world, on_gpu)) {
        fprintf(stderr, "error: --grads lazy needs one process on a GPU, without --tp/--cp, --dp fsdp, --offload adamw or --mlir " SEE_H "\n");
        return run_end(&tr, 2);
    }
    if (check_outputs(o, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    if (trainer_par_check(o, &cfg, world, on_gpu, err, sizeof err)) { fprintf(stderr, "error: %s " SEE_H "\n", err); return run_end(&tr, 2); }
    if (tr.src.resume && !o->eval_only && trainer_ckpt_check(&tr.src, o, &cfg, world / (o->tp * o->cp), err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    if (resolve_graph(o, on_gpu, err, sizeof err)) { fprintf(stderr, "error: %s " SEE_H "\n", err); return run_end(&tr, 2); }

    tr.o = *o;
    tr.dist = dist;
    if (load_tokenizer(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    if (o->eval_mc && load_mc(&tr, &cfg, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    int fp8 = !strcmp(o->precision, "fp8");   /* the block linears in FP8, the rest bf16 (CPU: f32) */
    tr.dt = !strcmp(o->precision, "bf16") || (fp8 && on_gpu) ? BT_BF16 : BT_F32;
    bt_set_matmul_precision(!strcmp(o->precision, "tf32") ? BT_MATMUL_TF32 : BT_MATMUL_FP32);
    if (o->deterministic) bt_set_deterministic(1);
    tr.zero.stage = !dist ? 0 : !strcmp(o->dp, "zero1") ? 1 : !strcmp(o->dp, "zero2") ? 2 : 0;
    if (o->tp * o->cp > 1) { bt_par_opts po = trainer_par_opts(o); tr.par = bt_par_open(&po, dist, on_gpu); }
    /* ZeRO's group: the processes, or with tp/cp the dp x cp ranks of this tp index */
    int zworld = tr.par ? tr.par->dp * tr.par->cp : world;
    int64_t local = cfg.family == TRAINER_LLAMA ? llama_local_numel(&cfg.llama, o->tp, NULL) : gpt2_local_numel(&cfg.gpt2, o->tp, NULL);
    tr.zero.shard = tr.zero.stage ? bt_shard_numel(local, zworld, 64) : 0;
    int64_t pad_to = tr.zero.stage ? tr.zero.shard * zworld : 1;
    int grad_bf16 = !strcmp(o->grad_dtype, "bf16");   /* resolve_opts: a bf16 or fp8 GPU run, one micro-batch a step */
    if (grad_bf16 && world > 1) {
        fprintf(stderr, "error: --grad-dtype bf16 with %d processes: not yet (data parallelism sums the ranks' gradients in the "
                "buffer's dtype; --dp zero2 keeps one micro-batch's gradients in bf16 already) " SEE_H "\n", world);
        return run_end(&tr, 2);
    }
    bt_dtype grad_dt = tr.zero.stage == 2 || grad_bf16 ? tr.dt : BT_F32;
    if (world == 1 && o->tp * o->cp == 1 &&
        check_static_memory(o, cfg.family == TRAINER_LLAMA ? llama_num_params(&cfg.llama) : gpt2_num_params(&cfg.gpt2), on_gpu, dev,
                            tr.dt, grad_bf16, err, sizeof err)) {
        fprintf(stderr, "error: the model (%s): %s " SEE_H "\n", have_src ? tr.src.path : model, err);
        return run_end(&tr, 1);
    }
    if (o->tp > 1 && cfg.family == TRAINER_LLAMA) { tr.family = TRAINER_LLAMA; llama_build_tp(&tr.lm, cfg.llama, dev, o->tp, tr.par->tp_rank, pad_to, grad_dt); }
    else if (o->tp > 1) gpt2_build_tp(&tr.model, cfg.gpt2, dev, o->tp, tr.par->tp_rank, pad_to, grad_dt);
    else trainer_model_build(&tr, &cfg, dev, pad_to, grad_dt);
    if (tr.par && cfg.family == TRAINER_LLAMA) llama_par_attach(tr.par, &tr.lm);
    else if (tr.par) gpt2_par_attach(tr.par, &tr.model);
    tr.model.mlir = o->mlir;
    if (fp8) trainer_fp8_enable(&tr);   /* before the memory probes, so they measure the FP8 path */
    if (tr.src.resume) trainer_ckpt_import_tuning(&tr);   /* before any matmul chooses its algorithm */
    /* weights from a file are checked once: NaN or Inf there is the file's fault, not the learning rate's */
    const char *weights_flag = tr.src.resume ? "--resume" : have_src ? "--init-from" : from_file ? "-e" : NULL;
    const char *weights_path = have_src ? tr.src.path : model;
    if (have_src) {
        if (trainer_source_load(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
        if (!tr.src.resume) trainer_source_close(&tr.src);
    } else if (from_file) {
        if (gpt2_load_weights(&tr.model, model, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    } else trainer_model_init(&tr, o->seed);
    if (weights_flag && !weights_finite(&tr)) {
        fprintf(stderr, "error: %s %s: its weights are not all finite (NaN or Inf): a damaged file, or one saved from a run that "
                "diverged; nothing is trained\n", weights_flag, weights_path);
        return run_end(&tr, 1);
    }
    if (o->eval_only) return run_end(&tr, eval_only(&tr, o, &cfg, on_gpu, weights_flag ? weights_path : model));
    int n_params;
    bt_tensor **params = trainer_params(&tr, &n_params);
    bt_adamw_init_offload(&tr.opt, params, n_params, 0.9f, 0.95f, 1e-8f, (float)o->weight_decay, (float)o->clip,
                          o->offload ? BT_ADAMW_OFFLOAD_CHUNK : 0);
    trainer_weights_split(&tr);   /* --weight-copy halves: before the probes, whose peak is the steps' */
    trainer_grads_lazy(&tr);      /* --grads lazy: the same */
    if (o->recompute >= 0) bt_set_recompute(o->recompute);   /* before the probes: auto B counts with it */
    bt_linear_cross_entropy_chunk((size_t)o->head_chunk_mb << 20);
    int auto_b = o->B < 0;
    if (o->B < 0) {                                  /* the GPU default: the largest that fits */
        if (o->total_batch < 0) o->total_batch = 524288;
        o->B = trainer_auto_micro_batch(&tr, o->T, o->total_batch / world, tr.dt);
        if (dist) {                                  /* every rank takes the smallest */
            bt_scope_begin();
            bt_tensor *b = bt_full(bt_shape1(1), o->B, BT_I32, dev);
            bt_all_reduce(dist->world_comm, bt_data_ptr(b), bt_data_ptr(b), 1, BT_I32, BT_RED_MIN, NULL);
            o->B = (int)bt_item(b);
            bt_scope_end();
        }
        if (resolve_opts(o, on_gpu, &cfg, err, sizeof err)) { fprintf(stderr, "error: %s " SEE_H "\n", err); return run_end(&tr, 2); }
    }
    /* --recompute by default: none with the measured B (it fits by construction) or several processes */
    if (o->recompute < 0) o->recompute = on_gpu && !auto_b && world == 1 ? trainer_choose_recompute(&tr, o->B, o->T, tr.dt) : 0;
    bt_set_recompute(o->recompute);
    tr.o = *o;
    if (fp8) trainer_fp8_enable(&tr);   /* the probes' casts recorded amaxes: the states start again (a resume then loads its own) */
    int dworld = trainer_data_world(&tr);   /* the data-parallel ranks: world / (tp cp) */
    if (o->total_batch % ((int64_t)o->B * o->T * dworld)) {
        fprintf(stderr, "error: -d %d is not a multiple of B*T*%s = %d*%d*%d\n", o->total_batch, tr.par ? "data-parallel ranks" : "processes", o->B, o->T, dworld);
        return run_end(&tr, 1);
    }
    trainer_setup_parallel(&tr);
    int rank = dist ? dist->rank : 0, drank = tr.par ? tr.par->dp_rank : rank;
    /* every token of every shard is checked against the vocabulary now, not at step 5000 */
    tr.train = bt_loader_open(o->train_glob, o->B, o->T, drank, dworld, 1, o->seed);
    if (!tr.train || bt_loader_check_vocab(tr.train, cfg.V)) {
        fprintf(stderr, "error: train data (-i %s): %s\n%s", o->train_glob, bt_data_error(), data_hint(o->given_i, "-i"));
        return run_end(&tr, 1);
    }
    if (o->val_every > 0) {   /* -v 0: no validation, -j unused */
        /* a large (auto) micro-batch can outgrow a small validation set: halve B for validation */
        for (tr.val_B = o->B; !(tr.val = bt_loader_open(o->val_glob, tr.val_B, o->T, drank, dworld, 0, 0)) && tr.val_B > 1;) tr.val_B /= 2;
        if (!tr.val || bt_loader_check_vocab(tr.val, cfg.V)) {
            fprintf(stderr, "error: val data (-j %s): %s\n%s(-v 0 trains without validation)\n", o->val_glob, bt_data_error(), data_hint(o->given_j, "-j"));
            return run_end(&tr, 1);
        }
    }
    tr.inputs = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * o->T);
    tr.targets = (int32_t *)malloc(sizeof(int32_t) * (size_t)o->B * o->T);
    if (!tr.inputs || !tr.targets) { fprintf(stderr, "error: out of host memory for a batch of -b %d x -t %d tokens\n", o->B, o->T); return run_end(&tr, 1); }
    if (tr.src.resume) {   /* the checkpoint's fp32 weights go into fp32 bytes: joined for the load, split again */
        trainer_weights_join(&tr);
        if (trainer_ckpt_restore(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
        trainer_weights_split(&tr);
    }
    /* the staging of periodic snapshots (weights, m, v: fp32) is allocated before the first step,
       so no snapshot stalls on it (pinned memory takes ~0.3 s per GB to allocate) */
    size_t fp8_bytes = tr.model.fp8_buf ? sizeof(float) * (size_t)bt_numel(tr.model.fp8_buf) : 0;
    if (tr.saver && o->ckpt_every > 0 && bt_ckpt_saver_reserve(tr.saver, (size_t)3 * sizeof(float) * (size_t)trainer_num_params(&tr) + fp8_bytes, on_gpu)) {
        fprintf(stderr, "error: --ckpt-every: %s\n", bt_ckpt_error()); return run_end(&tr, 1);
    }
    /* the last check, before the log is cut or truncated: --ckpt-dir holds no other run's checkpoints (or they go) */
    if (trainer_ckpt_claim(&tr, o, dist, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }
    if (o->out_dir && rank == 0 && open_log(&tr, err, sizeof err)) { fprintf(stderr, "error: %s\n", err); return run_end(&tr, 1); }

    int accum = o->total_batch / (o->B * o->T * dworld);
    /* 6 N + 12 L C T for both families: N counts the embedding (GPT-2's wte and wpe, a Llama's emb and
       head); the attention's QK^T and AV are 12 L C T whatever GQA's key/value heads (H D = C) */
    double flops_per_token = 6.0 * trainer_num_params(&tr) + 12.0 * cfg.L * cfg.C * o->T;
    double peak = on_gpu ? peak_flops(bt_device_name(dev), o->precision) : 0;   /* 0: MFU not shown */
    const char *mname = have_src || tr.src.resume ? tr.src.path : model;
    if (cfg.family == TRAINER_LLAMA)
        printf("model %s (Llama): L %d H %d (kv %d) C %d F %d maxT %d V %d (padded %d)%s, %.2fM parameters on %s\n", mname, cfg.L, cfg.H,
               cfg.llama.Hkv, cfg.C, cfg.llama.F, cfg.maxT, cfg.V, cfg.Vp, cfg.llama.tie ? ", tied" : "", trainer_num_params(&tr) / 1e6,
               on_gpu ? bt_device_name(dev) : "cpu");
    else printf("model %s: L %d H %d C %d maxT %d V %d (padded %d), %.2fM parameters on %s\n", mname, cfg.L, cfg.H, cfg.C,
                cfg.maxT, cfg.V, cfg.Vp, trainer_num_params(&tr) / 1e6, on_gpu ? bt_device_name(dev) : "cpu");
    char fp8_what[160] = "";
    if (fp8) snprintf(fp8_what, sizeof fp8_what, " (block linears%s in FP8: %s scaling, history %d, %s accumulation%s)",
                      !strcmp(o->fp8_head, "on") ? " and the head" : "", o->fp8_recipe, o->fp8_history,
                      !strcmp(o->fp8_accum, "fast-dx") ? "forward and dx products' fast" : o->fp8_accum,
                      on_gpu ? "" : "; emulated, the rest fp32");
    printf("B %d T %d, total batch %d tokens (%d micro-batches), %d steps, lr %.2e warmup %d, precision %s%s%s%s%s\n",
           o->B, o->T, o->total_batch, accum, o->steps, o->lr, o->warmup, o->precision, fp8_what, grad_bf16 ? ", bf16 gradients" : "",
           o->recompute ? ", recompute " : "", o->recompute ? trainer_recompute_name(o->recompute) : "");
    if (on_gpu) printf("cuda graph: %s\n", !o->cuda_graph ? "off" : dist && dworld > 1
                       ? "on (each kind of micro-step, accumulating or communicating, is captured with its collectives after one eager run, then replayed)"
                       : "on (the micro-step is captured after one eager micro-step, then replayed)");
    if (tr.fsdp) printf("data parallel: %d processes (%s), fsdp: weights, gradients and AdamW state in %d shards of %d units "
                        "(each block gathered for its forward and again for its backward)%s\n", dworld, bt_launcher_name(dist->env.launcher),
                        dworld, tr.fsdp->n_units, on_gpu ? "" : " (CPU: collectives through the TCP store)");
    else if (dist && dworld > 1) printf("data parallel: %d processes (%s), %s, buckets of %d MB, gradients on the wire in %s%s\n", dworld,
                     bt_launcher_name(dist->env.launcher), o->dp, o->bucket_mb, o->comm_dtype,
                     !on_gpu ? " (CPU: collectives through the TCP store)" : tr.ddp && bt_ddp_get_stats(tr.ddp).copy_engines ? " (copy engines)" : " (NCCL)");
    if (tr.par) trainer_par_describe(tr.par, o);
    if (tr.opt.offload) printf("offload: AdamW's m and v in %s host memory (%.2f GB), streamed through the %s in chunks of %lld at each update\n",
                           on_gpu ? "pinned" : "plain", 8e-9 * (double)(tr.opt.hi - tr.opt.lo), on_gpu ? "GPU" : "CPU's buffers",
                           (long long)tr.opt.offload_chunk);
    printf("train %zu batches/epoch (%s), ", bt_loader_num_batches(tr.train), o->train_glob);
    if (tr.val) printf("val %zu batches of %d rows (%s)\n", bt_loader_num_batches(tr.val), tr.val_B, o->val_glob);
    else printf("no validation (-v 0)\n");
    if (tr.src.resume) printf("resumed from %s after step %d\n", tr.src.path, tr.start_step);
    else if (tr.src.hf) printf("initialized from %s (Hugging Face %s)\n", tr.src.path, trainer_family_name(cfg.family));
    fflush(stdout);

    double t_start = now_s(), t_first = 0, last_val = NAN, last_loss = NAN;
    int rc = 0, step = tr.start_step, saved_step = tr.start_step, stopped = 0;
    for (; step < o->steps; step++) {
        if (trainer_stop_agreed(&tr)) { stopped = 1; break; }   /* SIGINT/SIGTERM: this many steps are done */
        double lr = bt_lr_cosine(step, o->warmup, o->steps, o->lr, o->lr * o->final_lr_frac);
        double t0 = now_s(), loss = 0, norm = 0;
        int updated = train_step(&tr, step, lr, &loss, &norm);
        last_loss = loss;
        double dt_s = now_s() - t0, tps = o->total_batch / dt_s;
        double mfu = peak > 0 ? 100.0 * flops_per_token * tps / world / peak : 0;   /* per GPU */
        int last = step == o->steps - 1, validated = updated && tr.val && ((step + 1) % o->val_every == 0 || last);
        double val = validated ? (last_val = evaluate(&tr)) : NAN;
        char extra[512] = "";        /* the log line's multiple-choice and checkpoint figures */
        trainer_mc_result mc;
        int mc_ok = validated && tr.mc.n_items && !trainer_eval_mc(&tr, &mc);
        if (validated && tr.mc.n_items && !mc_ok) { rc = 1; break; }
        double mc_acc = mc_ok ? mc.acc : NAN, mc_acc_mean = mc_ok ? mc.acc_mean : NAN;
        if (mc_ok) {
            snprintf(extra, sizeof extra, ", \"mc_acc\": %.6f, \"mc_acc_mean\": %.6f", mc_acc, mc_acc_mean);
            trainer_mc_free(&mc);
        }
        if (step == tr.start_step) t_first = now_s();   /* the first step (warm-up, captures) is not the pace */
        int snap = trainer_ckpt_due(&tr, step + 1) && (updated || o->skip_nonfinite);   /* not of a run about to stop */
        if (snap) {
            trainer_ckpt_snapshot(&tr, step + 1, loss);
            saved_step = step + 1;
            size_t at = strlen(extra);
            snprintf(extra + at, sizeof extra - at, ", \"ckpt_stall_ms\": %.3f, \"ckpt_stall_total_ms\": %.3f", tr.last_stall_ms, tr.total_stall_ms);
        }
        if (tr.par) bt_par_stage_report(tr.par, extra, sizeof extra);
        if (!o->quiet || last || validated || !updated || snap) {
            printf("step %4d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s", step + 1, o->steps, loss, lr, norm, dt_s * 1e3, tps);
            if (peak > 0) printf(" | MFU %.1f%%", mfu);
            printf(" | mem %.0f MiB", bt_alloc_stats(dev).allocated / 1048576.0);
            if (validated) printf(" | val %.4f", val);
            if (mc_ok) printf(" | mc %.4f (mean %.4f)", mc_acc, mc_acc_mean);
            if (tr.ddp && tr.comm_ev[0] && tr.comm_early >= 0)
                printf(" | comm %.2f ms exposed, %d/%d buckets early", trainer_comm_exposed_ms(&tr), tr.comm_early, bt_ddp_get_stats(tr.ddp).buckets);
            if (tr.work_ev[0]) printf(" | fwd+bwd %.2f ms", bt_event_elapsed_ms(tr.work_ev[0], tr.work_ev[1]));
            if (snap) printf(" | checkpoint stall %.1f ms", tr.last_stall_ms);
            if (tr.par && tr.par->stage_ev[0]) printf(" | fwd %.1f ms bwd %.1f ms", tr.par->fwd_ms, tr.par->bwd_ms);
            print_eta(o, step + 1, tr.start_step, now_s() - t_start, now_s() - t_first);
            printf("\n");
            if (last && tr.ddp) bt_ddp_print_trace(tr.ddp, stdout);
            fflush(stdout);
        }
        trainer_ckpt_report(&tr, extra, sizeof extra);
        log_json(&tr, step + 1, loss, lr, norm, dt_s * 1e3, tps, now_s() - t_start, validated ? &val : NULL, extra);
        if (validated || last) draw_chart(&tr);
        if (!updated && on_nonfinite_step(&tr, step + 1, loss)) { rc = 1; break; }
        gpt2 *sm = o->sample_every && (step + 1) % o->sample_every == 0 && !last ? trainer_whole_model(&tr) : NULL;
        if (sm && rank == 0) {   /* tp: the shards gathered on rank 0 (a collective: every rank took part) */
            printf("--- sample (greedy) ---\n");
            trainer_model_sample(&tr, sm, o->gen_len, 1, 0, o->seed + (uint64_t)step);
            printf("--- sample (top-%d, temperature %.2f) ---\n", o->topk, o->temp);
            trainer_model_sample(&tr, sm, o->gen_len, o->topk, o->temp, o->seed + (uint64_t)step);
            printf("---\n");
        }
    }
    if (stopped) draw_chart(&tr);
    if (rc) return run_end(&tr, rc);
    /* every output asked for is attempted: a checkpoint that failed (a full disk there) does not
       cost the model file or the export; each failure is said, and the exit status is 1 */
    int failed = trainer_ckpt_finish(&tr, step, saved_step, last_loss) != 0;
    if (stopped) printf("stopped by %s after step %d of %d%s\n", trainer_stop_signal() == SIGTERM ? "SIGTERM" : "SIGINT", step, o->steps,
                        o->ckpt_dir ? "" : " (no --ckpt-dir: no checkpoint written)");
    if (tr.sg.captures) printf("cuda graph: %d captures\n", tr.sg.captures);
    printf("done: %d steps in %.1f s, ", step - tr.start_step, now_s() - t_start);
    if (tr.skipped) printf("%d updates skipped (not finite), ", tr.skipped);
    if (last_val == last_val) printf("final val loss %.4f, ", last_val);
    printf("peak memory %.0f MiB\n", bt_alloc_stats(dev).peak_allocated / 1048576.0);
    trainer_weights_join(&tr);   /* the model file, the export and the sample read fp32 weights */
    /* with --tp or --dp fsdp the outputs come from the shards gathered into a whole model on rank 0 (a collective) */
    gpt2 *out = (tr.par || tr.fsdp) && (o->save_path || o->export_hf || (o->gen_len > 0 && !stopped)) ? trainer_whole_model(&tr) : &tr.model;
    /* the model is saved before the last sample: a slow or interrupted sample cannot lose it */
    if (rank == 0 && o->save_path && gpt2_save(out, o->save_path, err, sizeof err)) { fprintf(stderr, "error: --save: %s\n", err); failed = 1; }
    else if (o->save_path) printf("saved %s\n", o->save_path);
    if (rank == 0 && o->export_hf && trainer_model_export_hf(&tr, out, o->export_hf, err, sizeof err)) { fprintf(stderr, "error: --export-hf: %s\n", err); failed = 1; }
    else if (o->export_hf) printf("exported %s/model.safetensors and config.json (Hugging Face %s)\n", o->export_hf, trainer_family_name(tr.family));
    if (o->gen_len > 0 && rank == 0 && !stopped && !trainer_stop_signal()) {
        uint64_t seed = o->seed + (uint64_t)(o->steps > 0 ? o->steps - 1 : 0);
        printf("--- sample (greedy) ---\n");
        trainer_model_sample(&tr, out, o->gen_len, 1, 0, seed);
        printf("--- sample (top-%d, temperature %.2f) ---\n", o->topk, o->temp);
        trainer_model_sample(&tr, out, o->gen_len, o->topk, o->temp, seed);
        printf("---\n");
    }
    if (failed) fprintf(stderr, "error: not every output was written (each failure above)\n");
    return run_end(&tr, failed);
}

/* the program: flags, the launcher, signals, a run (the tests of the program call it too) */
int train_gpt2_main(int argc, char **argv) {
    train_opts o;
    train_default_opts(&o);
    char err[1024];
    int r = parse_args(argc, argv, &o, err, sizeof err);
    if (r == 1) { usage(stdout); return 0; }
    if (r < 0) { fprintf(stderr, "error: %s " SEE_H "\n", err); return 2; }
#if !BT_DIST_NCCL
    if (o.nproc > 1) {   /* the store path needs ranks started by a launcher */
        fprintf(stderr, "error: --nproc %d: this build has no NCCL; several processes on CPUs run as processes started with RANK, WORLD_SIZE, "
                "LOCAL_RANK and MASTER_ADDR set (torchrun, srun, mpirun or by hand: README)\n", o.nproc);
        return 2;
    }
#endif
    bt_dist_launch(o.nproc);   /* --nproc N: the parent supervises N ranks; each returns here */
    trainer_install_stop_signals();   /* SIGINT/SIGTERM: finish the step, checkpoint, exit 0; a second one: at once */
    return train_main(&o);
}

#ifndef TRAIN_GPT2_NO_MAIN
int main(int argc, char **argv) { return train_gpt2_main(argc, argv); }
#endif
