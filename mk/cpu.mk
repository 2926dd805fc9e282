# ---- the CPU path: optional BLAS, the CPU GEMM benchmark (bt_tensor.h's matmul section) ----
#   make BLAS=1 ...     route the fp32 CPU products through the system BLAS (Debian: apt-get install
#                       libopenblas-dev), for comparison only: the default build needs none. Make does
#                       not notice a changed BLAS= by itself: rebuild with -B (make -B BLAS=1 train_gpt2).
#   make bench-cpu      build/bench_cpu: our GEMM (and OpenBLAS's when its headers and library are
#                       installed) at the default CPU run's shapes and 1024^3, against the measured
#                       FMA peak; then the default CPU run's wall time to val < 6.0 (bench/bench_cpu_val6.sh,
#                       skipped with CPU_RUN=0). bench/RESULTS.md records what it measured.
# On a machine shared with other busy processes, OpenMP's default wait policy (threads spin for a
# while after each parallel region) loses cores to them: on the 2-core dev machine at load averages
# of 2 to 10, training steps took 3.5-4.6x as long as with OMP_WAIT_POLICY=passive (the environment
# passes through to both targets); at load 1.5 the two were about even.
.PHONY: bench-cpu

ifeq ($(BLAS),1)
  CFLAGS += -DBT_BLAS
  LDLIBS += -lopenblas
  NVFLAGS += -DBT_BLAS
  NVLIBS += -lopenblas
endif

# OpenBLAS for the bench's comparison column, when a program using it links here
BT_HAVE_OPENBLAS := $(shell echo 'int main(void) { return 0; }' | $(CC) -x c -include cblas.h - -lopenblas -o /dev/null 2>/dev/null && echo 1)
BENCH_CPU_BLAS := $(if $(BT_HAVE_OPENBLAS),-DBT_BENCH_OPENBLAS -lopenblas,)

$(BUILD)/bench_cpu: bench/bench_cpu.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(BENCH_CPU_BLAS) $(LDLIBS)

CPU_RUN ?= 1
bench-cpu: $(BUILD)/bench_cpu $(BUILD)/train_gpt2_cpu $(TEST_DATA)
	$(BUILD)/bench_cpu
	@if [ "$(CPU_RUN)" = 1 ]; then bash bench/bench_cpu_val6.sh $(BUILD)/train_gpt2_cpu; fi
