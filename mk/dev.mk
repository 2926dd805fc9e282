# ---- dev/cuda: kernel ladders and microbenchmarks (on a machine with a GPU; dev/cuda/README.md) ----
#   make dev    every dev/cuda/*.cu into build/dev/ (never part of the default build or make test)
.PHONY: dev

DEV_SRCS := $(wildcard dev/cuda/*.cu)
DEV_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/dev/%,$(DEV_SRCS))

dev: $(DEV_BINS)

$(BUILD)/dev:
	mkdir -p $@
$(BUILD)/dev/%: dev/cuda/%.cu dev/cuda/common.cuh $(HEADERS) | $(BUILD)/dev
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)
