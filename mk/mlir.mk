# ---- MLIR (bt_mlir.h): fused kernels compiled through MLIR's C API ----
#   make MLIR=1         every build with BT_MLIR, linked against the MLIR C API (Debian: apt-get install
#                       libmlir-19-dev). Without MLIR=1 nothing changes and nothing links against LLVM.
#   make test           builds tests/test_mlir.c against MLIR whenever libmlir-19-dev is installed (else
#                       without: its compiler tests report skipped); tests/test_mlir_gpu.cu is a plain
#                       nvcc build (the ahead-of-time path) unless MLIR=1
#   make mlir-aot       PTX of the GPU tests' chains into $(MLIR_AOT_DIR): a cache directory and
#                       bt_mlir_aot.c, which test_mlir_gpu compiles in when it exists (needs MLIR here,
#                       not on the GPU machine)
#
# The C API is in static archives (libMLIRCAPI*.a) whose undefined symbols resolve against libMLIR.so,
# libLLVM.so.19.1 and libstdc++, all three named on the link line (../shared/notes/mlir-capi.md).

LLVM_DIR ?= /usr/lib/llvm-19
MLIR_FOUND := $(wildcard $(LLVM_DIR)/include/mlir-c/IR.h)
MLIR_CFLAGS := -DBT_MLIR -I$(LLVM_DIR)/include
MLIR_LIBNAMES := -lMLIRCAPIRegisterEverything -lMLIRCAPIExecutionEngine -lMLIRCAPIGPU -lMLIRCAPIIR -lMLIR -lLLVM-19 -lstdc++
MLIR_LIBS := -L$(LLVM_DIR)/lib -Wl,-rpath,$(LLVM_DIR)/lib $(MLIR_LIBNAMES)
MLIR_NVLIBS := -L$(LLVM_DIR)/lib -Xlinker -rpath -Xlinker $(LLVM_DIR)/lib $(MLIR_LIBNAMES)
MLIR_AOT_DIR ?= $(BUILD)/mlir_aot

ifeq ($(MLIR),1)
  ifeq ($(MLIR_FOUND),)
    $(error MLIR=1: $(LLVM_DIR)/include/mlir-c/IR.h is missing (apt-get install libmlir-19-dev, or set LLVM_DIR))
  endif
  CFLAGS += $(MLIR_CFLAGS)
  LDLIBS += $(MLIR_LIBS)
  ASANFLAGS += $(MLIR_CFLAGS)
  NVFLAGS += $(MLIR_CFLAGS)
  NVLIBS += $(MLIR_NVLIBS)
endif

# test_mlir: against MLIR whenever it is installed (MLIR=1 or not)
ifneq ($(MLIR_FOUND),)
  ifneq ($(MLIR),1)
    TEST_MLIR_FLAGS := $(MLIR_CFLAGS)
    TEST_MLIR_LIBS := $(MLIR_LIBS)
  endif
endif
$(BUILD)/tests/test_mlir: tests/test_mlir.c tests/test_mlir_chains.h $(HEADERS) tests/bt_test.h | $(BUILD)/tests
	$(CC) $(CFLAGS) $(TEST_MLIR_FLAGS) -o $@ $< $(LDLIBS) $(TEST_MLIR_LIBS)
$(BUILD)/tests/asan_test_mlir: tests/test_mlir.c tests/test_mlir_chains.h $(HEADERS) tests/bt_test.h | $(BUILD)/tests
	$(CC) $(ASANFLAGS) $(TEST_MLIR_FLAGS) -o $@ $< $(LDLIBS) $(TEST_MLIR_LIBS)

# the programs' --mlir tests (train_gpt2, examples/train_llama.c): against MLIR whenever it is installed
$(BUILD)/tests/test_gpt2_mlir: tests/test_gpt2_mlir.c train_gpt2.c $(HEADERS) tests/bt_test.h | $(BUILD)/tests
	$(CC) $(CFLAGS) $(TEST_MLIR_FLAGS) -o $@ $< $(LDLIBS) $(TEST_MLIR_LIBS)
$(BUILD)/tests/asan_test_gpt2_mlir: tests/test_gpt2_mlir.c train_gpt2.c $(HEADERS) tests/bt_test.h | $(BUILD)/tests
	$(CC) $(ASANFLAGS) $(TEST_MLIR_FLAGS) -o $@ $< $(LDLIBS) $(TEST_MLIR_LIBS)

# test_mlir_gpu: compiles in the ahead-of-time kernels when make mlir-aot has written them
MLIR_AOT_SRC := $(wildcard $(MLIR_AOT_DIR)/bt_mlir_aot.c)
$(BUILD)/tests/test_mlir_gpu: tests/test_mlir_gpu.cu tests/test_mlir_chains.h $(HEADERS) tests/bt_test.h $(MLIR_AOT_SRC) | $(BUILD)/tests
	$(NVCC_PATH) $(NVFLAGS) $(if $(MLIR_AOT_SRC),-DBT_MLIR_AOT_SOURCE='"$(MLIR_AOT_SRC)"') -o $@ $< $(NVLIBS)

.PHONY: mlir-aot
mlir-aot: $(BUILD)/tests/test_mlir
	$(BUILD)/tests/test_mlir --aot $(MLIR_AOT_DIR)

# ---- benchmark (GPU): make bench-mlir ----
#   build/bench_mlir: the fused chains against the unfused ops and the hand-written kernels, compile
#   times (bench/bench_mlir.cu); bench/bench_mlir_torch.py: the same chains in PyTorch eager and
#   torch.compile, when python3 has torch; with MLIR=1 (make bench-mlir MLIR=1 BUILD=build/mlir) also
#   train_gpt2 and train_llama without and with --mlir (bench/bench_mlir_train.sh).
#   BENCH_MLIR_ARGS: bench_mlir's and the torch script's arguments (--quick, --dtype bf16|f32)
.PHONY: bench-mlir
BENCH_MLIR_ARGS ?=
$(BUILD)/bench_mlir: bench/bench_mlir.cu tests/test_mlir_chains.h $(HEADERS) | $(BUILD)
	@if [ -z "$(MLIR_FOUND)" ]; then echo "bench_mlir needs MLIR: apt-get install libmlir-19-dev" >&2; exit 1; fi
	$(NVCC_PATH) $(NVFLAGS) $(TEST_MLIR_FLAGS) -o $@ $< $(NVLIBS) $(if $(TEST_MLIR_FLAGS),$(MLIR_NVLIBS))
bench-mlir: $(BUILD)/bench_mlir $(if $(filter 1,$(MLIR)),$(BUILD)/train_gpt2_cuda $(BUILD)/train_llama_cuda)
	$(BUILD)/bench_mlir $(BENCH_MLIR_ARGS)
	@if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then \
	  echo "python3 bench/bench_mlir_torch.py $(BENCH_MLIR_ARGS)"; python3 bench/bench_mlir_torch.py $(BENCH_MLIR_ARGS); \
	else echo "python3 has no torch with CUDA: bench/bench_mlir_torch.py skipped"; fi
	@if [ "$(MLIR)" = 1 ]; then bash bench/bench_mlir_train.sh $(BUILD); \
	else echo "train_gpt2 / train_llama with --mlir: make bench-mlir MLIR=1 BUILD=build/mlir"; fi
