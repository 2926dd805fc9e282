# BluTrain-C - GNU Make only.
#   make            build train_gpt2 (with nvcc when a GPU is present; CUDA=1 or CUDA=0 decides) and tools
#   make run        data + build + the default training run
#   make test       every CPU test, plus the CUDA build and GPU tests (skipped without a GPU)
#   make test-gpu   the GPU suite (tests/gpu_suite.sh: CUDA tests, parity, sanitizer, 2-GPU tests)
#   make test-asan  the CPU tests under ASan + UBSan
#   make data       token shards under data/ (see mk/data.mk)
#   make clean
.DEFAULT_GOAL := all
SHELL := /bin/bash

CC ?= cc
NATIVE ?= 1
CUDA_ARCH ?= 90a
NVCC_PATH := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
# The flavour of `make` (./train_gpt2): CUDA=1 builds with nvcc, CUDA=0 (or CPU=1) with cc; by default
# nvcc when a GPU is present (nvidia-smi lists one) and nvcc exists, else cc. A CUDA binary on a
# machine without a GPU runs on the CPU too, but takes minutes more to build.
ifeq ($(CPU),1)
  CUDA := 0
endif
CUDA ?= $(if $(and $(NVCC_PATH),$(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo 1)),1,0)
FLAVOUR := $(if $(filter 1,$(CUDA)),cuda,cpu)

BUILD := build
ARCHFLAGS := $(if $(filter 1,$(NATIVE)),-march=native,)
CFLAGS ?= -O3
CFLAGS += -std=c11 -Wall -Wextra -fopenmp $(ARCHFLAGS) -I.
LDLIBS := -lm
# nvcc compiles the same C sources as CUDA C++ (-x cu; -x none before object files).
NVFLAGS ?= -O3
# an arch-specific target (90a: wgmma, setmaxnreg) must be named with -gencode; others keep -arch
comma := ,
NVARCH := $(if $(filter %a,$(CUDA_ARCH)),-gencode=arch=compute_$(CUDA_ARCH)$(comma)code=sm_$(CUDA_ARCH),-arch=sm_$(CUDA_ARCH))
NVFLAGS += -std=c++17 -x cu $(NVARCH) -I. -Xcompiler "-fopenmp -Wall -Wextra $(ARCHFLAGS)"
NVLDFLAGS := $(NVARCH)
NVLIBS := -lcublas -lcublasLt -lgomp -lm
ASANFLAGS := -O1 -g -std=c11 -Wall -Wextra -fopenmp -I. -fsanitize=address,undefined -fno-omit-frame-pointer \
             -fno-sanitize-recover=undefined

# the library headers, and the model's and the trainer's that train_gpt2.c composes
HEADERS := $(wildcard bt_*.h bt_*.cuh) gpt2.h gpt2_io.h gpt2_parallel.h llama.h llama_io.h llama_parallel.h trainer.h

.PHONY: all run test test-cpu test-gpu test-asan clean examples FORCE
all: train_gpt2 tools

# ---- every header's implementation, compiled once per flavour (tests/bt_impl.c) ----
# The programs and most tests link it; a file compiled with -DBT_LINKED leaves its own out.
IMPL_CPU := $(BUILD)/cpu/bt_impl.o
IMPL_ASAN := $(BUILD)/asan/bt_impl.o
IMPL_CUDA := $(BUILD)/cuda/bt_impl.o
$(IMPL_CPU): tests/bt_impl.c $(HEADERS) | $(BUILD)/cpu
	$(CC) $(CFLAGS) -c -o $@ $<
$(IMPL_ASAN): tests/bt_impl.c $(HEADERS) | $(BUILD)/asan
	$(CC) $(ASANFLAGS) -c -o $@ $<
$(IMPL_CUDA): tests/bt_impl.c $(HEADERS) | $(BUILD)/cuda
	$(NVCC_PATH) $(NVFLAGS) -c -o $@ $<

# ---- the reference program: ./train_gpt2 is the flavour's build, copied (a change of flavour copies the other) ----
train_gpt2: $(BUILD)/train_gpt2_$(FLAVOUR) FORCE
	@cmp -s $< $@ || { cp $< $@ && echo "train_gpt2: the $(FLAVOUR) build ($<)"; }
$(BUILD)/train_gpt2_cpu: train_gpt2.c $(HEADERS) $(IMPL_CPU) | $(BUILD)
	$(CC) $(CFLAGS) -DBT_LINKED -o $@ $< $(IMPL_CPU) $(LDLIBS)
$(BUILD)/train_gpt2_cuda: train_gpt2.c $(HEADERS) $(IMPL_CUDA) | $(BUILD)
	$(call nvcc_linked,$<,-DBT_LINKED)
FORCE:
# nvcc's -x cu applies to every input file, objects too: a CUDA build that links the implementation
# object compiles its source alone first, then links (nvcc_linked SOURCE,FLAGS)
nvcc_linked = $(NVCC_PATH) $(NVFLAGS) $(2) -c -o $@.o $(1) && $(NVCC_PATH) $(NVLDFLAGS) -o $@ $@.o $(IMPL_CUDA) $(NVLIBS) && rm -f $@.o

$(BUILD) $(BUILD)/tests $(BUILD)/cpu $(BUILD)/asan $(BUILD)/cuda $(BUILD)/examples:
	mkdir -p $@

# ---- tests: every tests/test_*.c is one CPU test binary, every tests/test_*_gpu.cu a CUDA one ----
# Each links its flavour's implementation object, but for these, which compile the implementations
# themselves: white-box tests reading internals (bt__ functions), tests built with other flags (the
# MLIR ones), and those that include a whole program of their own (train_llama.c)
SELF_IMPL_TESTS := test_autograd test_chart test_ckpt test_data test_hf_tokenizer test_dist test_fused test_mlir test_ops test_mlir_gpu test_llama test_gpt2_mlir
# the tests of the program include train_gpt2.c: linked with -DBT_LINKED
PROGRAM_TESTS := test_train_gpt2 test_train_ckpt test_train_fp8 test_train_llama test_tp_gpt2 test_tp_llama test_fsdp_gpt2 test_graph_gpu test_eval
CPU_TEST_SRCS := $(wildcard tests/test_*.c)
GPU_TEST_SRCS := $(wildcard tests/test_*_gpu.cu)
CPU_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(CPU_TEST_SRCS))
ASAN_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/asan_%,$(CPU_TEST_SRCS))
GPU_TESTS := $(patsubst tests/%.cu,$(BUILD)/tests/%,$(GPU_TEST_SRCS))
linked = $(if $(filter $(1),$(SELF_IMPL_TESTS)),,$(if $(filter $(1),$(PROGRAM_TESTS)),-DBT_LINKED) $(2))

TEST_HEADERS := $(wildcard tests/*.h)
$(BUILD)/tests/%: tests/%.c $(HEADERS) $(TEST_HEADERS) $(IMPL_CPU) | $(BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(call linked,$*,$(IMPL_CPU)) $(LDLIBS)
$(BUILD)/tests/asan_%: tests/%.c $(HEADERS) $(TEST_HEADERS) $(IMPL_ASAN) | $(BUILD)/tests
	$(CC) $(ASANFLAGS) -o $@ $< $(call linked,$*,$(IMPL_ASAN)) $(LDLIBS)
$(BUILD)/tests/%_gpu: tests/%_gpu.cu $(HEADERS) $(TEST_HEADERS) $(IMPL_CUDA) | $(BUILD)/tests
	$(if $(filter $*_gpu,$(SELF_IMPL_TESTS)),$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS),$(call nvcc_linked,$<,$(if $(filter $*_gpu,$(PROGRAM_TESTS)),-DBT_LINKED)))
$(BUILD)/tests/test_fused_gpu: tests/test_fused.c

# ---- examples/: the README's programs, built with the README's lines (tests/readme_commands.sh) ----
EXAMPLES := $(BUILD)/examples/hello_tensor $(BUILD)/examples/train_mlp
$(BUILD)/examples/%: examples/%.c $(HEADERS) | $(BUILD)/examples
	$(CC) -O3 -std=c11 -fopenmp -I. -Wall -Wextra -o $@ $< -lm
$(BUILD)/examples/%_cuda: examples/%.c $(HEADERS) | $(BUILD)/examples
	$(NVCC_PATH) -O3 -std=c++17 -x cu $(NVARCH) -Xcompiler -fopenmp -I. -o $@ $< -lcublas -lcublasLt -lgomp -lm
examples: $(EXAMPLES)

# The CUDA build is compiled whenever nvcc exists, GPU or not (a compile break fails make test); its
# tests skip themselves without a GPU.
ifneq ($(NVCC_PATH),)
CUDA_BUILD := $(BUILD)/train_gpt2_cuda $(GPU_TESTS) $(BUILD)/hf_logits_cuda
RUN_GPU_TESTS := $(GPU_TESTS)
endif

# the GPT-2 tests train on Tiny Shakespeare: make its shards first (mk/data.mk)
TEST_DATA := data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe

test: $(CPU_TESTS) $(CUDA_BUILD) $(BUILD)/hf_logits tools $(TEST_DATA)
	@tests/run_all.sh $(CPU_TESTS) $(RUN_GPU_TESTS) tests/readme_commands.sh
test-cpu: $(CPU_TESTS) tools $(TEST_DATA)
	@tests/run_all.sh $(CPU_TESTS) tests/readme_commands.sh
# the GPU suite on a machine with a GPU (tests/gpu_suite.sh): builds what it runs with make -k -j16
# (JOBS=...), runs each part and prints one table. SAN=0: no compute-sanitizer; PARTS="unit resume":
# those parts only (the script lists them); NOBUILD=1: the binaries already in $(BUILD)
test-gpu:
	@BUILD='$(BUILD)' $(strip $(foreach v,SAN PARTS JOBS NOBUILD,$(if $($(v)),$(v)='$($(v))'))) tests/gpu_suite.sh
test-asan: $(ASAN_TESTS) tools $(TEST_DATA)
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 BT_TEST_QUICK=1 tests/run_all.sh $(ASAN_TESTS)

run: data train_gpt2
	./train_gpt2

clean:
	rm -rf $(BUILD) train_gpt2 bt_tokenize bt_chart

# ---- subsystems add their own targets here ----
tools:
include $(wildcard mk/*.mk)
