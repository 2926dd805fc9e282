# ---- benchmarks: each one command on a fresh checkout (bench/RESULTS.md holds what they measured) ----
# On a machine with a GPU (the data shards: data/ when present, else make data):
#   make bench-kernels   every kernel family of bt_kernels.cuh at GPT-2 shapes (CUDA events), attention
#                        next to PyTorch SDPA (cuDNN, flash) in the same run, then the other families in
#                        PyTorch eager and torch.compile and the joined table (bench_kernels_torch.py,
#                        kernel_ratio.py). ONLY=<group> one group (layernorm, attention, llama, fp8, attention_sweep,
#                        matmul, ...: bench/bench_kernels.cu), TORCH=0 no PyTorch
#   make bench-gpt2      GPT-2 or Llama end to end: train_gpt2 vs PyTorch eager and torch.compile, tokens/s
#                        and peak memory (bench/bench_gpt2.sh: B T PREC MODEL D STEPS ROUNDS RECOMPUTE BIN ARGS
#                        TORCH COMPILE; MODEL=l125m a Llama, RECOMPUTE="none mlp block" a group of rows each,
#                        BIN="a b" times two builds in one run, B=default the default run)
#   make bench-gemm      every GEMM of a GPT-2 micro-step, each of cuBLASLt's candidates timed
#                        (bench/bench_gemm.cu; GEMM_ARGS: its arguments, default micro-batch 128)
#   make bench-gemm-fp8  the FP8 products of a GPT-2 layer (d48 shapes), each candidate timed warm and
#                        cold, per bias alignment (bench/bench_gemm_fp8.cu; GEMM_FP8_ARGS="C rows [all]
#                        [bf16]": all searches every configuration cuBLASLt accepts, bf16 the same products in bf16)
#   make bench-fp8-curve --precision fp8's validation losses against bf16's on WikiText-2, 300 and 3,000
#                        steps (bench/fp8_curve.sh: STEPS B MODEL RECIPES EVERY BIN)
#   make bench-largest   the largest GPT-2-shaped model one GPU trains: PyTorch with activation checkpointing
#                        against train_gpt2 --offload adamw (bench/largest_model.sh: TORCH_LAYERS TORCH_WIDTH OURS
#                        STEPS BIN TORCH)
#   make profile-gpt2    one step's kernels under Nsight Compute, and PyTorch's under torch.profiler
#                        (bench/profile_gpt2.sh: B T PREC MODEL D BIN TORCH)
#   make bench-dist      data parallel on NGPU GPUs (default 2): ddp, zero1, zero2 vs 1 GPU and PyTorch DDP
#                        (bench/bench_dist.sh: NGPU B T MODEL PREC STEPS ROUNDS SWEEP BIN ARGS TORCH)
#   make bench-tpcp      tensor and context parallel on 2 GPUs vs 1 GPU and PyTorch's own
#                        (bench/bench_tpcp.sh: STEPS LONG BIN ARGS TORCH)
#   make bench-llmc      against llm.c's train_gpt2cu, built from LLMC_DIR (a checkout of karpathy/llm.c;
#                        CUDNN_FRONTEND_DIR for its cuDNN attention) (bench/bench_llmc.sh: BS STEPS RECOMPUTE
#                        LLMC_SM BIN)
# Elsewhere: make bench-ckpt (mk/ckpt.mk), bench-cpu (mk/cpu.mk), bench-tokenizer (mk/data.mk),
# bench-mlir (mk/mlir.mk). Logs go to build/bench/<name> (OUT=... elsewhere); each prints its table last.
.PHONY: bench-kernels bench-gpt2 bench-gemm bench-gemm-fp8 profile-gpt2 bench-dist bench-tpcp bench-llmc bench-fp8-curve bench-largest

# the settings given on make's command line or in the environment, as NAME='value' for a script
# (a setting not given is left out: each script has its own defaults)
bench_env = $(strip $(foreach v,$(1),$(if $(filter-out undefined,$(origin $(v))),$(v)='$($(v))')))
# the train_gpt2 to time: BIN when given, else build/train_gpt2_cuda, built first
BENCH_BIN := $(if $(BIN),,$(BUILD)/train_gpt2_cuda)
BENCH_OUT = $(if $(OUT),$(OUT),$(BUILD)/bench/$(1))

$(BUILD)/bench_kernels: bench/bench_kernels.cu $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)

bench-kernels: $(BUILD)/bench_kernels
	@mkdir -p $(call BENCH_OUT,kernels)
	set -o pipefail; $(if $(ONLY),BT_BENCH_ONLY='$(ONLY)') BT_BENCH_TORCH=$(if $(filter 0,$(TORCH)),0,1) $(BUILD)/bench_kernels \
	  | tee $(call BENCH_OUT,kernels)/kernels.txt
	@if [ -z '$(ONLY)' ] && [ '$(TORCH)' != 0 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then \
	  set -o pipefail; python3 bench/bench_kernels_torch.py | tee $(call BENCH_OUT,kernels)/kernels_torch.txt && \
	  python3 bench/kernel_ratio.py $(call BENCH_OUT,kernels)/kernels.txt $(call BENCH_OUT,kernels)/kernels_torch.txt; \
	else echo "bench/bench_kernels_torch.py skipped (ONLY given, TORCH=0, or python3 has no torch with CUDA)"; fi

bench-gpt2: $(BENCH_BIN)
	$(call bench_env,B T PREC MODEL D STEPS ROUNDS RECOMPUTE BIN ARGS TORCH COMPILE OUT) bash bench/bench_gpt2.sh

bench-fp8-curve: $(BENCH_BIN)
	$(call bench_env,STEPS B MODEL RECIPES EVERY BIN OUT) bash bench/fp8_curve.sh

bench-largest: $(BENCH_BIN)
	$(call bench_env,TORCH_LAYERS TORCH_WIDTH OURS STEPS BIN TORCH OUT) bash bench/largest_model.sh

# BT__K_MM_CANDIDATES raised so that the whole heuristic list of cuBLASLt is timed
GEMM_ARGS ?=
$(BUILD)/bench_gemm: bench/bench_gemm.cu $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -DBT__K_MM_CANDIDATES=32 -o $@ $< $(NVLIBS)
bench-gemm: $(BUILD)/bench_gemm
	$(BUILD)/bench_gemm $(GEMM_ARGS)
GEMM_FP8_ARGS ?=
$(BUILD)/bench_gemm_fp8: bench/bench_gemm_fp8.cu $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -DBT__K_MM_CANDIDATES=32 -o $@ $< $(NVLIBS)
bench-gemm-fp8: $(BUILD)/bench_gemm_fp8
	$(BUILD)/bench_gemm_fp8 $(GEMM_FP8_ARGS)

profile-gpt2: $(BENCH_BIN)
	$(call bench_env,B T PREC MODEL D BIN TORCH OUT) bash bench/profile_gpt2.sh

bench-dist: $(BENCH_BIN)
	$(call bench_env,NGPU B T MODEL PREC STEPS ROUNDS SWEEP BIN ARGS TORCH OUT) bash bench/bench_dist.sh

bench-tpcp: $(BENCH_BIN)
	$(call bench_env,STEPS LONG BIN ARGS TORCH OUT) bash bench/bench_tpcp.sh

bench-llmc: $(BENCH_BIN)
	$(call bench_env,LLMC_DIR CUDNN_FRONTEND_DIR BS STEPS RECOMPUTE LLMC_SM BIN REBUILD OUT) bash bench/bench_llmc.sh
