# BluTrain-C - GNU Make only.
#   make            build train_gpt2 (CUDA when nvcc exists; CPU=1 forces the CPU build) and tools
#   make run        data + build + the default training run
#   make test       every CPU test, plus the CUDA build and GPU tests (skipped without a GPU)
#   make test-gpu   the GPU suite (tests/gpu_suite.sh: CUDA tests, parity, sanitizer, 2-GPU tests)
#   make test-asan  the CPU tests under ASan + UBSan
#   make data       token shards under data/ (see mk/data.mk)
#   make clean
.DEFAULT_GOAL := all
SHELL := /bin/bash

CC ?= cc
CPU ?= 0
NATIVE ?= 1
CUDA_ARCH ?= 90a
NVCC_PATH := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CPU),1)
  NVCC :=
else
  NVCC ?= $(NVCC_PATH)
endif

BUILD := build
ARCHFLAGS := $(if $(filter 1,$(NATIVE)),-march=native,)
CFLAGS ?= -O3
CFLAGS += -std=c11 -Wall -Wextra -fopenmp $(ARCHFLAGS) -I.
LDLIBS := -lm
# nvcc compiles the same C sources as CUDA C++ (-x cu).
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
HEADERS := $(wildcard bt_*.h bt_*.cuh) gpt2.h gpt2_io.h gpt2_parallel.h trainer.h

.PHONY: all run test test-cpu test-gpu test-asan clean cuda-build
all: train_gpt2 tools

# ---- the reference program ----
ifneq ($(NVCC),)
train_gpt2: train_gpt2.c $(HEADERS)
	$(NVCC) $(NVFLAGS) -o $@ $< $(NVLIBS)
else
train_gpt2: train_gpt2.c $(HEADERS)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
endif
$(BUILD)/train_gpt2_cpu: train_gpt2.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
$(BUILD)/train_gpt2_cuda: train_gpt2.c $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)

$(BUILD) $(BUILD)/tests:
	mkdir -p $@

# ---- tests: every tests/test_*.c is one CPU test binary, every tests/test_*_gpu.cu a CUDA one ----
CPU_TEST_SRCS := $(wildcard tests/test_*.c)
GPU_TEST_SRCS := $(wildcard tests/test_*_gpu.cu)
CPU_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(CPU_TEST_SRCS))
ASAN_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/asan_%,$(CPU_TEST_SRCS))
GPU_TESTS := $(patsubst tests/%.cu,$(BUILD)/tests/%,$(GPU_TEST_SRCS))

TEST_HEADERS := $(wildcard tests/*.h)
$(BUILD)/tests/%: tests/%.c $(HEADERS) $(TEST_HEADERS) | $(BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
$(BUILD)/tests/asan_%: tests/%.c $(HEADERS) $(TEST_HEADERS) | $(BUILD)/tests
	$(CC) $(ASANFLAGS) -o $@ $< $(LDLIBS)
$(BUILD)/tests/%_gpu: tests/%_gpu.cu $(HEADERS) $(TEST_HEADERS) | $(BUILD)/tests
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)
$(BUILD)/tests/test_fused_gpu: tests/test_fused.c

# The CUDA build is compiled whenever nvcc exists; its tests skip themselves without a GPU.
ifneq ($(NVCC_PATH),)
CUDA_BUILD := $(BUILD)/train_gpt2_cuda $(GPU_TESTS)
endif

# the GPT-2 tests train on Tiny Shakespeare: make its shards first (mk/data.mk)
TEST_DATA := data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe

test: $(CPU_TESTS) $(CUDA_BUILD) tools $(TEST_DATA)
	@tests/run_all.sh $(CPU_TESTS) $(GPU_TESTS)
test-cpu: $(CPU_TESTS) tools $(TEST_DATA)
	@tests/run_all.sh $(CPU_TESTS)
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
	rm -rf $(BUILD) train_gpt2 bt_tokenize

# ---- subsystems add their own targets here ----
tools:
include $(wildcard mk/*.mk)
