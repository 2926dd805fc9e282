# ---- distributed (bt_dist.h): NCCL on the CUDA link line ----
#   NVLIBS is expanded when a recipe runs, after every makefile has been read, so appending here
#   reaches train_gpt2, build/train_gpt2_cuda and every CUDA test binary. NCCL's header and library
#   ship with the CUDA toolkit (/usr/local/cuda: nccl.h, libnccl.so; NCCL 2.28 on the dev machine).
#   make NCCL=0 builds the CUDA binaries without NCCL (-DBT_NO_NCCL: one process only).
NCCL ?= 1
ifeq ($(NCCL),1)
NVLIBS += -lnccl -lpthread
else
NVFLAGS += -DBT_NO_NCCL
endif
