# tenferrod: one non-recursive Makefile.
#
#   make                  daemon, client library (.so/.a), tenferroctl, tests, benchmarks
#   make quick            the build, the unit suites and the core integration suites side by side
#                         (-j: nproc + 1 unless given), about 2 minutes (docs/testing.md, "Tiers")
#   make test-one T=SUITE [CASE=NAME]  one suite alone (T=operations, T=test-frame, T=python, ...),
#                         CASE: its Check test case (CK_RUN_CASE), or for T=python a pytest -k
#   make run-unit/test-X, run-integration/test-X, run-busy-poll/test-X, run-ring-off/test-X
#                         one run of a suite as make test runs it, log in $(BUILD)/runs/
#   make check            install missing dependencies, run every suite, the shell lint, the Kubernetes
#                         manifests' check, the Slurm test and a short soak, the suites again under
#                         ASan/UBSan and under ThreadSanitizer, the fuzz targets briefly; the four
#                         side by side (-j: nproc + 1 unless given; docs/testing.md)
#   make test-slurm       a private single-node Slurm with tenferrod shares (docs/cluster.md)
#   make check-tsan       the unit, integration and load suites under ThreadSanitizer
#   make soak             the soak: SOAK_SECONDS=N (600) of load with a leak check (docs/soak.md)
#   make demo             start tenferrod on the best device, run the demo's clients at once
#                         against it (a held stage, MPS sweeps, FFT solvers, DMRG in Python),
#                         print a table, stop
#   make bench            benchmarks (CPU backend), BENCH lines on stdout
#   make test-python      the Python package (python/) in a venv ($(BUILD)/pyenv), its pytest suite
#                         against $(BUILD)/tenferrod (docs/python.md)
#   make install          PREFIX=/usr/local DESTDIR=
#   make fuzz             FUZZ_SECONDS=60: builds the libFuzzer targets (tests/fuzz/) into
#                         $(BUILD)-fuzz and runs each that long from its corpus (docs/fuzzing.md)
#
# Knobs: BUILD=dir (output folder), SANITIZE=1 (ASan+UBSan) or thread (TSan), CUDA=auto|0|1,
#        STATIC_DEPS=1 (link libuv, protobuf-c, Check, inih statically, CUDA runtime statically),
#        JOBS=N and CHECK_JOBS=N (the job slots of make quick and make check), SAN_BUILD=dir (build-san) and
#        TSAN_BUILD=dir (build-tsan): make check's sanitizer builds

BUILD ?= build
CUDA ?= auto
STATIC_DEPS ?= 0
SANITIZE ?= 0
PREFIX ?= /usr/local
CC ?= gcc
NVCC ?= nvcc
CUDA_HOME ?= /usr/local/cuda

ifeq ($(CUDA),auto)
  HAVE_CUDA := $(if $(wildcard daemon/backend/cuda/backend.c),$(if $(shell command -v $(NVCC) 2>/dev/null || test -x $(CUDA_HOME)/bin/nvcc && echo y),1,0),0)
else
  HAVE_CUDA := $(CUDA)
endif
ifeq ($(HAVE_CUDA),1)
  NVCC := $(if $(shell command -v $(NVCC) 2>/dev/null),$(NVCC),$(CUDA_HOME)/bin/nvcc)
endif

WARN := -Wall -Wextra -Werror
CFLAGS := -std=c11 -D_GNU_SOURCE -g -O2 -fPIC $(WARN) -I. -Iinclude -I$(BUILD)/gen -MMD -MP
LDFLAGS :=
ifeq ($(SANITIZE),1)
  SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  CFLAGS += $(SANFLAGS)
  LDFLAGS += $(SANFLAGS)
endif
# ThreadSanitizer (make check-tsan; docs/testing.md). -O1 keeps the reports' stacks readable.
ifeq ($(SANITIZE),thread)
  SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
  CFLAGS += $(SANFLAGS) -O1
  LDFLAGS += $(SANFLAGS)
endif

ifeq ($(STATIC_DEPS),1)
  LIB_UV := -l:libuv_a.a -ldl
  LIB_INIH := -l:libinih.a
  LIB_PROTOBUF := -l:libprotobuf-c.a
  LIB_CHECK := -l:libcheck.a -l:libsubunit.a -lrt -lm
else
  LIB_UV := -luv
  LIB_INIH := -linih
  LIB_PROTOBUF := -lprotobuf-c
  LIB_CHECK := -lcheck -lsubunit -lrt -lm
endif
# The fuzz build (FUZZ=1, made by `make fuzz`): clang, libFuzzer's coverage with ASan and UBSan
# in every object, and the protobuf-c runtime compiled from its source (PROTOBUF_C_SRC, fetched
# by scripts/fetch-protobuf-c.sh) so the decoder is instrumented too; without that source the
# system's uninstrumented library is linked.
ifeq ($(FUZZ),1)
  FUZZ_SANFLAGS := -fsanitize=fuzzer-no-link -fsanitize=address,undefined -fno-omit-frame-pointer \
                   -fno-sanitize-recover=undefined
  # glibc defines CMPLX for GCC only; clang has the builtin it stands for.
  CFLAGS += $(FUZZ_SANFLAGS) '-DCMPLX(x,y)=__builtin_complex((double)(x),(double)(y))'
  # The harness's own bookkeeping is not what the fuzzer should learn from: no coverage there.
  $(BUILD)/obj/tests/fuzz/fuzz-daemon.o: CFLAGS := $(filter-out -fsanitize=fuzzer-no-link,$(CFLAGS))
  LDFLAGS += -fsanitize=address,undefined
  ifneq ($(PROTOBUF_C_SRC),)
    PROTOBUF_C_OBJ := $(BUILD)/obj/protobuf-c/protobuf-c.o
    LIB_PROTOBUF :=
  endif
endif
LIB_BLAS := -lopenblas
# FFTW (the CPU backend's FFTs), double and single precision. A static build takes the archives
# when they are installed, so the binary runs where FFTW's shared libraries differ or are absent.
FFTW_ARCHIVES := $(wildcard /usr/lib/x86_64-linux-gnu/libfftw3.a /usr/lib/x86_64-linux-gnu/libfftw3f.a)
ifeq ($(STATIC_DEPS)$(words $(FFTW_ARCHIVES)),12)
  LIB_FFTW := -l:libfftw3.a -l:libfftw3f.a
else
  LIB_FFTW := -lfftw3 -lfftw3f
endif
# libsystemd (sd_notify) stays dynamic in every build: no static archive ships, and the GPU machine has it.
LIB_SYSTEMD := -lsystemd
LIB_SYS := -lpthread -lm

# ---- sources ----
PROTO_C := $(BUILD)/gen/proto/tenferro.pb-c.c
PROTO_H := $(BUILD)/gen/proto/tenferro.pb-c.h

COMMON_SRC := $(wildcard common/*.c)
CLIENT_LIB_SRC := client/connection.c client/session.c client/transfer.c client/view-ops.c \
                  client/completion.c client/wait-spin.c client/mailbox.c client/pinned.c client/staging.c \
                  client/testing.c client/view-einsum.c client/einsum-path.c client/einsum-report.c \
                  client/view-fft.c client/graph.c client/daemon-status.c client/ring.c \
                  client/peer-copy.c client/view-linalg.c
DAEMON_SRC := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
BACKEND_SRC := $(wildcard daemon/backend/*.c daemon/backend/cpu/*.c daemon/backend/cuda/*.c)
CUDA_CU_SRC := $(wildcard daemon/backend/cuda/*.cu)

ifeq ($(HAVE_CUDA),1)
  CFLAGS_DAEMON_DEFS := -DTFD_HAVE_CUDA
  CUDA_OBJ := $(CUDA_CU_SRC:%.cu=$(BUILD)/obj/%.o)
  # The CUDA backend's C files include the runtime and cuBLAS headers (-isystem: no -Werror there).
  $(BUILD)/obj/daemon/backend/cuda/%.o: CFLAGS_DAEMON_DEFS += -isystem $(CUDA_HOME)/include
  ifeq ($(STATIC_DEPS),1)
    LIB_CUDA := -L$(CUDA_HOME)/lib64 -lcusolver -lcublas -lcufft -l:libcudart_static.a -ldl -lrt -lstdc++
  else
    LIB_CUDA := -L$(CUDA_HOME)/lib64 -lcusolver -lcublas -lcufft -lcudart -lstdc++
  endif
else
  BACKEND_SRC := $(filter-out daemon/backend/cuda/%,$(BACKEND_SRC))
  CUDA_OBJ :=
  LIB_CUDA :=
endif

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
PROTO_OBJ := $(BUILD)/obj/gen/tenferro.pb-c.o
COMMON_OBJ := $(call obj,$(COMMON_SRC)) $(PROTO_OBJ)
CLIENT_OBJ := $(call obj,$(CLIENT_LIB_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC)) $(call obj,$(BACKEND_SRC)) $(CUDA_OBJ)

DAEMON_LIBS := $(LIB_UV) $(LIB_INIH) $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_FFTW) $(LIB_CUDA) $(LIB_SYSTEMD) $(LIB_SYS)

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test-*.c))
INTEGRATION_TESTS := $(patsubst tests/integration/%.c,$(BUILD)/tests/%,$(wildcard tests/integration/test-*.c))
TEST_HARNESS := $(call obj,tests/integration/harness.c)
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(filter-out bench/bench-common.c bench/bench-raw.c bench/prepared-chain.c bench/linalg-check.c,$(wildcard bench/*.c)))
# Every examples/*.c is a program but demo-common.c, the demo clients' shared helpers.
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(filter-out examples/demo-common.c,$(wildcard examples/*.c)))
# GPU benchmarks (bench/gpu/, CUDA builds only); gpu-common.c is their shared helper, share-loop.c
# the loop bench-share and bench-multi run, daemon-set.c the daemons bench-multi starts: not benches.
# They live in $(BUILD)/bench/gpu/, which scripts/bench.sh (CPU) does not run.
GPU_BENCH_HELPERS := bench/gpu/gpu-common.c bench/gpu/share-loop.c bench/gpu/daemon-set.c
GPU_BENCHES := $(patsubst bench/gpu/%.c,$(BUILD)/bench/gpu/%,$(filter-out $(GPU_BENCH_HELPERS),$(wildcard bench/gpu/*.c)))

TARGETS := $(BUILD)/tenferrod $(BUILD)/libtenferro-client.a $(BUILD)/tenferroctl \
           $(UNIT_TESTS) $(INTEGRATION_TESTS) $(BENCHES) $(EXAMPLES) $(BUILD)/tests/load \
           $(BUILD)/tests/tenferrod-failalloc $(BUILD)/tests/slurm-client
ifneq ($(STATIC_DEPS),1)
  TARGETS += $(BUILD)/libtenferro-client.so
endif
ifeq ($(HAVE_CUDA),1)
  TARGETS += $(GPU_BENCHES)
endif

# Keep intermediate objects (tests and benches are built through chained rules).
.SECONDARY:

.PHONY: test-python python-package all deps check check-tsan test test-tsan test-unit test-integration test-load load soak test-soak test-install test-hostile test-demo test-abi test-api-doc demo bench install clean build-commit \
        test-slurm test-lint test-kubernetes \
        fuzz fuzz-check fuzz-build fuzz-targets fuzz-corpus
all: $(TARGETS) build-commit

# The commit a build folder was made from, for reports made elsewhere (scripts/gpu-check.sh).
build-commit:
	@mkdir -p $(BUILD)
	@(git rev-parse --short HEAD 2>/dev/null || echo unknown) > $(BUILD)/commit

# ---- generated protocol code ----
$(PROTO_C) $(PROTO_H) &: proto/tenferro.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen $<

$(PROTO_OBJ): $(PROTO_C)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# Every object may include the generated header.
$(BUILD)/obj/%.o: %.c $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CFLAGS_DAEMON_DEFS) -c $< -o $@

$(BUILD)/obj/client/%.o: client/%.c $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -c $< -o $@

$(BUILD)/obj/common/%.o: common/%.c $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -Xcompiler -fPIC,-Wall,-Wextra -MMD -MP -I. -Iinclude -I$(BUILD)/gen \
	  -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -c $< -o $@

# ---- products ----
$(BUILD)/tenferrod: $(call obj,daemon/main.c) $(DAEMON_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(DAEMON_LIBS)

$(BUILD)/libtenferro-client.a: $(CLIENT_OBJ) $(COMMON_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The CPU backend's elementwise loops are vectorized (GCC's -O2 leaves loops of unknown length
# scalar); -O3 changes no floating-point result: no -ffast-math, and ISO C keeps contraction off.
$(BUILD)/obj/daemon/backend/cpu/elementwise.o: CFLAGS += -O3

# The shared library exports the tf_ API only (client/libtenferro-client.map, docs/abi.md); the
# file is named after its soname, and libtenferro-client.so links to it, as installed.
$(BUILD)/libtenferro-client.so: $(CLIENT_OBJ) $(COMMON_OBJ) client/libtenferro-client.map
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libtenferro-client.so.0 \
	  -Wl,--version-script=client/libtenferro-client.map -o $@.0 $(CLIENT_OBJ) $(COMMON_OBJ) \
	  $(LIB_PROTOBUF)
	ln -sf libtenferro-client.so.0 $@

$(BUILD)/tenferroctl: $(call obj,client/tenferroctl.c client/tenferroctl-format.c client/tenferroctl-all.c) \
                     $(BUILD)/libtenferro-client.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF)

# The examples link the client library, and the demo's shared helpers with OpenBLAS and FFTW
# (the in-process side each demo client times and checks against; docs/demo.md).
$(BUILD)/examples/%: $(call obj,examples/%.c) $(call obj,examples/demo-common.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_FFTW) $(LIB_SYS)

# The failure-injection daemon (docs/testing.md): the daemon's objects, CPU backend only (the
# walk starts it hundreds of times; the CUDA libraries alone take a third of a second to load),
# with the item pool off (every executor item is an allocation) and the allocation calls wrapped
# by tests/failalloc/failalloc.c. Test-only: nothing of it is in $(BUILD)/tenferrod.
FAILALLOC_DAEMON := $(BUILD)/tests/tenferrod-failalloc
FAILALLOC_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=aligned_alloc \
                  -Wl,--wrap=posix_memalign,--wrap=free,--wrap=uv_accept
FAILALLOC_OWN_OBJ := $(BUILD)/obj/failalloc/item-pool.o $(BUILD)/obj/failalloc/registry.o \
                     $(call obj,tests/failalloc/failalloc.c)
FAILALLOC_OBJ := $(call obj,daemon/main.c) $(COMMON_OBJ) $(FAILALLOC_OWN_OBJ) \
                 $(filter-out $(call obj,daemon/item-pool.c daemon/backend/registry.c) \
                   $(BUILD)/obj/daemon/backend/cuda/%.o $(CUDA_OBJ),$(DAEMON_OBJ))
$(BUILD)/obj/failalloc/item-pool.o: daemon/item-pool.c $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DTFD_ITEM_POOL_OFF -c $< -o $@
$(BUILD)/obj/failalloc/registry.o: daemon/backend/registry.c $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(FAILALLOC_DAEMON): $(FAILALLOC_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(FAILALLOC_WRAP) -o $@ $^ $(filter-out $(LIB_CUDA),$(DAEMON_LIBS))

# Unit tests link the daemon's modules directly.
$(BUILD)/tests/test-%: $(BUILD)/obj/tests/unit/test-%.o $(DAEMON_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_CHECK) $(DAEMON_LIBS)

# The einsum path's unit test also links the client's path and report modules.
$(BUILD)/tests/test-einsum-path: $(BUILD)/obj/tests/unit/test-einsum-path.o \
                                 $(call obj,client/einsum-path.c client/einsum-report.c) \
                                 $(DAEMON_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_CHECK) $(DAEMON_LIBS)

# Integration tests are clients: they link the client library and start a real daemon.
$(BUILD)/tests/test-%: $(BUILD)/obj/tests/integration/test-%.o $(TEST_HARNESS) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_CHECK) $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_SYS)

# The client the Slurm test's jobs run (tests/slurm/): the public API only, like a user's program.
$(BUILD)/tests/slurm-client: $(call obj,tests/slurm/slurm-client.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_SYS)

# The load test and soak (tests/load/) is a client too: the harness starts its daemon.
LOAD_OBJ := $(call obj,$(wildcard tests/load/*.c))
$(BUILD)/tests/load: $(LOAD_OBJ) $(TEST_HARNESS) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_SYS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(call obj,bench/bench-common.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_SYS)

# bench-held-chain also runs the daemon's CPU kernels in-process as its baseline,
# so it links the CPU backend's objects (the common objects come with the library).
# The FFT files (plan cache, geometry) and the log come with them.
FFT_BACKEND_SRC := daemon/backend/plan-cache.c daemon/backend/fft-layout.c
CPU_BACKEND_OBJ := $(call obj,$(filter daemon/backend/backend.c daemon/backend/cpu/% daemon/backend/contract-%,$(BACKEND_SRC)) \
                     $(FFT_BACKEND_SRC) daemon/log.c)
$(BUILD)/bench/bench-held-chain: $(BUILD)/obj/bench/bench-held-chain.o $(call obj,bench/bench-common.c) \
                                 $(CPU_BACKEND_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_FFTW) $(LIB_SYS)

# bench-fft's baseline is FFTW in this process.
$(BUILD)/bench/bench-fft: $(BUILD)/obj/bench/bench-fft.o $(call obj,bench/bench-common.c) \
                          $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_FFTW) $(LIB_SYS)

# bench-einsum speaks raw frames (bench-raw.c) until the client library queues contractions.
$(BUILD)/bench/bench-einsum: $(BUILD)/obj/bench/bench-einsum.o $(call obj,bench/bench-common.c bench/bench-raw.c) \
                             $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_SYS)

# bench-prepared shares its chain with the GPU one (prepared-chain.c), reads the daemon's cache
# counters through a raw StatusRequest (bench-raw.c) and runs the CPU kernels in-process as a floor.
PREPARED_BENCH_OBJ := $(call obj,bench/prepared-chain.c bench/bench-raw.c)
$(BUILD)/bench/bench-prepared: $(BUILD)/obj/bench/bench-prepared.o $(call obj,bench/bench-common.c) \
                               $(PREPARED_BENCH_OBJ) $(CPU_BACKEND_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_FFTW) $(LIB_SYS)

# bench-linalg checks the daemon's decompositions with linalg-check.c (shared with the GPU
# bench-linalg); its baseline is the LAPACK inside OpenBLAS ($(LIB_BLAS)).
LINALG_CHECK_OBJ := $(call obj,bench/linalg-check.c)
$(BUILD)/bench/bench-linalg: $(BUILD)/obj/bench/bench-linalg.o $(call obj,bench/bench-common.c) \
                             $(LINALG_CHECK_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_SYS)

# GPU benchmarks: the client library plus CUDA and cuBLAS in-process as their baselines.
# --as-needed keeps unused libraries (cuBLAS in bench-first-result, which dlopens it in its
# CUDA child only, and OpenBLAS) out of a benchmark's start-up.
ifeq ($(HAVE_CUDA),1)
$(BUILD)/obj/bench/gpu/%.o: CFLAGS_DAEMON_DEFS += -isystem $(CUDA_HOME)/include
GPU_BENCH_LIBS := -Wl,--as-needed $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_CUDA) -ldl $(LIB_SYS)
GPU_BENCH_OBJ := $(call obj,bench/gpu/gpu-common.c bench/bench-common.c)
$(BUILD)/bench/gpu/%: $(BUILD)/obj/bench/gpu/%.o $(GPU_BENCH_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)

# The GPU bench-einsum speaks raw frames too (bench-raw.c).
$(BUILD)/bench/gpu/bench-einsum: $(BUILD)/obj/bench/gpu/bench-einsum.o $(GPU_BENCH_OBJ) \
                                 $(call obj,bench/bench-raw.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)

# bench-share and bench-multi run the share loop (share-loop.c, which calls cuBLAS: kept out of
# GPU_BENCH_OBJ so that the other benchmarks do not load it); bench-multi starts its own daemons.
SHARE_LOOP_OBJ := $(call obj,bench/gpu/share-loop.c)
$(BUILD)/bench/gpu/bench-share: $(BUILD)/obj/bench/gpu/bench-share.o $(GPU_BENCH_OBJ) $(SHARE_LOOP_OBJ) \
                                $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)

$(BUILD)/bench/gpu/bench-multi: $(BUILD)/obj/bench/gpu/bench-multi.o $(GPU_BENCH_OBJ) $(SHARE_LOOP_OBJ) \
                                $(call obj,bench/gpu/daemon-set.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)

# bench-gpu-chain runs the daemon's CUDA kernels in-process (tfd_cuda_backend) as its baseline.
CUDA_BACKEND_OBJ := $(call obj,daemon/log.c daemon/backend/backend.c daemon/backend/cpu/peer.c \
                      $(FFT_BACKEND_SRC) \
                      $(filter daemon/backend/cuda/% daemon/backend/contract-%,$(BACKEND_SRC))) $(CUDA_OBJ)
$(BUILD)/bench/gpu/bench-gpu-chain: $(BUILD)/obj/bench/gpu/bench-gpu-chain.o $(GPU_BENCH_OBJ) \
                                    $(CUDA_BACKEND_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)

# The GPU bench-prepared: the CPU one's chain, and the daemon's CUDA kernels in-process as the
# CUDA-graph baseline.
$(BUILD)/bench/gpu/bench-prepared: $(BUILD)/obj/bench/gpu/bench-prepared.o $(GPU_BENCH_OBJ) \
                                   $(PREPARED_BENCH_OBJ) $(CUDA_BACKEND_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)

# The GPU bench-linalg: cuSOLVER in-process as its baseline (linked by this benchmark only).
$(BUILD)/bench/gpu/bench-linalg: $(BUILD)/obj/bench/gpu/bench-linalg.o $(GPU_BENCH_OBJ) \
                                 $(LINALG_CHECK_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -L$(CUDA_HOME)/lib64 -lcusolver $(GPU_BENCH_LIBS)

# linalg-routines times cuSOLVER's and cuBLAS's decompositions in-process (no daemon): which
# routine the CUDA backend's table should pick (docs/linalg.md, "Routines").
$(BUILD)/bench/gpu/linalg-routines: $(BUILD)/obj/bench/gpu/linalg-routines.o $(GPU_BENCH_OBJ) \
                                    $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -L$(CUDA_HOME)/lib64 -lcusolver -lcublas $(GPU_BENCH_LIBS)

# probe-layers times the same work at the libraries and at the backend in-process.
$(BUILD)/bench/gpu/probe-layers: $(BUILD)/obj/bench/gpu/probe-layers.o $(GPU_BENCH_OBJ) \
                                 $(CUDA_BACKEND_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)
endif

# The C programs the Python benchmarks compare against (python/bench/*.c): not in $(BUILD)/bench,
# which scripts/bench.sh runs as benchmarks of their own.
$(BUILD)/pybench/%: $(call obj,python/bench/%.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_SYS)

# ---- fuzz targets (FUZZ=1; tests/fuzz/, docs/fuzzing.md) ----
FUZZ_NAMES := frame mailbox ring config einsum graph
FUZZ_BINS := $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz-%)
FUZZ_HARNESS := $(call obj,tests/fuzz/fuzz-daemon.c)

# The protobuf-c runtime as the fuzz build compiles it: its own flags, no warnings of ours, and
# two UBSan checks off for this file only, for undefined behaviour of 1.4.1 itself that UBSan
# would report on nearly every input, hiding everything behind it: shifts of tag bytes as int
# (shift-base; protobuf-c issue #506) and desc->fields + 0 on messages without fields
# (pointer-overflow).
$(BUILD)/obj/protobuf-c/protobuf-c.o: $(PROTOBUF_C_SRC)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu99 -g -O2 -fPIC -w $(FUZZ_SANFLAGS) -fno-sanitize=shift-base,pointer-overflow \
	  -I$(dir $(PROTOBUF_C_SRC)).. -c $< -o $@

$(BUILD)/fuzz/fuzz-%: $(BUILD)/obj/tests/fuzz/fuzz-%.o $(FUZZ_HARNESS) $(DAEMON_OBJ) $(COMMON_OBJ) \
                      $(PROTOBUF_C_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(DAEMON_LIBS)

# Writes the seed corpora (tests/fuzz/corpus/) from frames it encodes itself.
$(BUILD)/fuzz/gen-corpus: $(BUILD)/obj/tests/fuzz/gen-corpus.o $(COMMON_OBJ) $(PROTOBUF_C_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF)

fuzz-targets: $(FUZZ_BINS) $(BUILD)/fuzz/gen-corpus

# ---- fuzzing (make fuzz, make fuzz-check) ----
FUZZ_BUILD ?= $(BUILD)-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CHECK_SECONDS ?= 20

# Fetches the protobuf-c source (cached in the fuzz build folder), then builds with clang.
fuzz-build:
	@pbc=$$(scripts/fetch-protobuf-c.sh $(FUZZ_BUILD)/src) || { pbc=; \
	  echo "make fuzz: WARNING: no protobuf-c source; linking the uninstrumented libprotobuf-c" \
	       "(the fuzzer sees nothing inside the decoder)" >&2; }; \
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) CUDA=0 FUZZ=1 PROTOBUF_C_SRC="$$pbc" fuzz-targets

# Runs every target FUZZ_SECONDS from its corpus (new inputs kept in $(FUZZ_BUILD)/corpus/).
fuzz: deps
	$(MAKE) fuzz-build
	scripts/fuzz.sh run $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_NAMES)

# Replays every regression input, then runs each target FUZZ_CHECK_SECONDS (part of make check).
fuzz-check:
	$(MAKE) fuzz-build
	scripts/fuzz.sh check $(FUZZ_BUILD) $(FUZZ_CHECK_SECONDS) $(FUZZ_NAMES)

# Writes the seed corpora again (tests/fuzz/corpus/) with the generator.
fuzz-corpus:
	$(MAKE) fuzz-build
	$(FUZZ_BUILD)/fuzz/gen-corpus tests/fuzz/corpus

# ---- running ----
deps:
	@scripts/install-deps.sh

# Every suite run is a make target of its own (docs/testing.md, "Tiers"), so that `make -jN`
# runs them side by side: run-unit/NAME, run-integration/NAME, and the reruns
# run-busy-poll/NAME (the daemon polling: transfers through the mailbox) and run-ring-off/NAME
# (every request on the socket: TENFERRO_RING=off), run-load/bounded and run-load/busy-poll.
# scripts/run-suite.sh keeps each run's output in $(RUNS)/LABEL.log and prints one line, PASS
# with its seconds, or FAIL with the whole log.
RUNS := $(BUILD)/runs
RUN_SUITE := scripts/run-suite.sh
SUITE_ENV := TENFERRO_DAEMON=$(BUILD)/tenferrod
INTEGRATION_DEPS := $(BUILD)/tenferrod $(BUILD)/tenferroctl $(FAILALLOC_DAEMON)

UNIT_RUNS := $(patsubst $(BUILD)/tests/%,run-unit/%,$(UNIT_TESTS))
# The hostile campaign (test-hostile-campaign) runs in test-hostile, not in test-integration.
INTEGRATION_RUN := $(filter-out %/test-hostile-campaign,$(INTEGRATION_TESTS))
INTEGRATION_RUNS := $(patsubst $(BUILD)/tests/%,run-integration/%,$(INTEGRATION_RUN))
ALL_INTEGRATION_RUNS := $(patsubst $(BUILD)/tests/%,run-integration/%,$(INTEGRATION_TESTS))
# Suites run a second time with the daemon polling (transfers through the mailbox).
BUSY_POLL_TESTS := test-transfers test-dependent
BUSY_POLL_RUNS := $(BUSY_POLL_TESTS:%=run-busy-poll/%)
# Suites run a second time with every request on the socket: the ring is the default route.
SOCKET_ROUTE_TESTS := test-sessions test-operations test-transfers test-einsum test-prepared test-dependent
RING_OFF_RUNS := $(SOCKET_ROUTE_TESTS:%=run-ring-off/%)
LOAD_RUNS := run-load/bounded run-load/busy-poll

.PHONY: $(UNIT_RUNS) $(ALL_INTEGRATION_RUNS) $(BUSY_POLL_RUNS) $(RING_OFF_RUNS) $(LOAD_RUNS) \
        run-soak/short run-soak/leak-demo quick quick-run quick-serial test-one test-serial \
        check-run check-serial check-plain check-asan check-fuzz

$(UNIT_RUNS): run-unit/%: $(BUILD)/tests/%
	@$(RUN_SUITE) $* $(RUNS)/$*.log $(BUILD)/tests/$*

$(ALL_INTEGRATION_RUNS): run-integration/%: $(BUILD)/tests/% $(INTEGRATION_DEPS)
	@$(SUITE_ENV) TENFERRO_FAILALLOC_DAEMON=$(FAILALLOC_DAEMON) \
	  $(RUN_SUITE) $* $(RUNS)/$*.log $(BUILD)/tests/$*

$(BUSY_POLL_RUNS): run-busy-poll/%: $(BUILD)/tests/% $(INTEGRATION_DEPS)
	@$(SUITE_ENV) TENFERRO_TEST_BUSY_POLL_US=2000 \
	  $(RUN_SUITE) "$*, the daemon polling" $(RUNS)/$*.busy-poll.log $(BUILD)/tests/$*

$(RING_OFF_RUNS): run-ring-off/%: $(BUILD)/tests/% $(INTEGRATION_DEPS)
	@$(SUITE_ENV) TENFERRO_RING=off \
	  $(RUN_SUITE) "$*, TENFERRO_RING=off" $(RUNS)/$*.ring-off.log $(BUILD)/tests/$*

# The longest runs first: make starts prerequisites in their order, and under TSan one
# test-dependent run alone takes three minutes or more.
SLOW_SUITES := test-dependent test-reply-bounds test-transfers test-failalloc test-isolation test-peer-copy
ALL_SUITE_RUNS := $(INTEGRATION_RUNS) $(BUSY_POLL_RUNS) $(RING_OFF_RUNS)
SLOW_RUNS := $(foreach s,$(SLOW_SUITES),$(filter %/$(s),$(ALL_SUITE_RUNS)))

# Suites that fail now and then when other suites run beside them (docs/testing.md, "Tiers"):
# test-prepared (test_cache_across_processes), test-reply-bounds (test_closing_connection_unread,
# under ASan), test-admission-opts (test_shorter_wait), and test-transfers-raw, whose
# test_punched_huge_pages_do_not_kill grows the machine's huge page pool by 4 pages and expects its
# daemon to get them (another daemon's pinned buffers, or another build's run of the same test,
# take them). make quick and make check run them (with SERIAL_LATER=1 their parallel make leaves
# them out) after everything else, one at a time: make test-serial. A plain make test runs them
# with the rest.
SERIAL_SUITES := test-prepared test-reply-bounds test-admission-opts test-transfers-raw
SERIAL_RUNS := $(foreach s,$(SERIAL_SUITES),$(filter %/$(s),$(ALL_SUITE_RUNS)))
DEFERRED_RUNS := $(if $(filter 1,$(SERIAL_LATER)),$(SERIAL_RUNS))
# What they need is built in the parallel make all the same.
DEFERRED_NEEDS := $(if $(DEFERRED_RUNS),$(SERIAL_SUITES:%=$(BUILD)/tests/%) $(INTEGRATION_DEPS))

test-unit: $(UNIT_RUNS)
test-integration: $(filter-out $(DEFERRED_RUNS),$(SLOW_RUNS) $(filter-out $(SLOW_RUNS),$(ALL_SUITE_RUNS))) \
                  $(DEFERRED_NEEDS)
test-serial:
	+@for r in $(SERIAL_RUNS); do $(MAKE) --no-print-directory $$r || exit 1; done

# Bounded load test (tests/load/load.c); `make load` runs the long one.
run-load/bounded: $(BUILD)/tenferrod $(BUILD)/tests/load
	@$(SUITE_ENV) $(RUN_SUITE) "load, 8 clients" $(RUNS)/load.log $(BUILD)/tests/load --clients 8 --seconds 5
run-load/busy-poll: $(BUILD)/tenferrod $(BUILD)/tests/load
	@$(SUITE_ENV) TENFERRO_TEST_BUSY_POLL_US=1000 $(RUN_SUITE) "load, 4 clients, the daemon polling" \
	  $(RUNS)/load.busy-poll.log $(BUILD)/tests/load --clients 4 --seconds 4
test-load: $(LOAD_RUNS)

load: $(BUILD)/tenferrod $(BUILD)/tests/load
	TENFERRO_DAEMON=$(BUILD)/tenferrod $(BUILD)/tests/load --clients 32 --seconds 30

# The soak (docs/soak.md): the load in rounds with killed and hostile clients, residents, a
# sample every 10 s at a quiet point, and the leak rule at the end. `make soak SOAK_SECONDS=N`.
SOAK_SECONDS ?= 600
SOAK_CLIENTS ?= 8
soak: $(BUILD)/tenferrod $(BUILD)/tests/load
	TENFERRO_DAEMON=$(BUILD)/tenferrod $(BUILD)/tests/load --soak --clients $(SOAK_CLIENTS) \
	  --seconds $(SOAK_SECONDS)

# The short soak of `make check`, then the proof that its rule fails: a resident that keeps
# 16 MiB more every round (a client-side leak) must make the soak exit 1 with the gauges flagged.
# Two daemons of their own, so the two run side by side.
test-soak: run-soak/short run-soak/leak-demo
run-soak/short: $(BUILD)/tenferrod $(BUILD)/tests/load
	@$(SUITE_ENV) $(RUN_SUITE) "soak (60 s)" $(RUNS)/soak.log \
	  $(BUILD)/tests/load --soak --clients 6 --seconds 60
	@grep -h '^SOAK' $(RUNS)/soak.log || true
run-soak/leak-demo: $(BUILD)/tenferrod $(BUILD)/tests/load
	@mkdir -p $(RUNS); start=$$(date +%s); \
	  TENFERRO_DAEMON=$(BUILD)/tenferrod $(BUILD)/tests/load --soak --clients 4 --seconds 30 \
	  --sample-seconds 5 --leak-mib 16 > $(BUILD)/soak-leak-demo.log 2>&1; rc=$$?; \
	  if [ $$rc -ne 1 ] || ! grep -q 'rule tensors .*FAIL' $(BUILD)/soak-leak-demo.log || \
	     ! grep -q 'rule device_bytes .*FAIL' $(BUILD)/soak-leak-demo.log; then \
	    grep -E '^(sample|# rule|SOAK)' $(BUILD)/soak-leak-demo.log; \
	    echo "FAIL  soak --leak-mib 16: the leak demo was not flagged (exit $$rc; log $(BUILD)/soak-leak-demo.log)"; exit 1; \
	  fi; echo "PASS  soak --leak-mib 16: the leak demo was flagged, as it must be ($$(( $$(date +%s) - start )) s)"

# Installs into a temporary DESTDIR and checks the unit, pkg-config, the example
# configuration and sd_notify (tests/install/test-install.sh). It runs `make install`
# itself, so it waits for `all`; SANFLAGS go to the program it compiles.
$(BUILD)/tests/notify-listener: $(call obj,tests/install/notify-listener.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

test-install: all $(BUILD)/tests/notify-listener
	@MAKE="$(MAKE)" CC="$(CC)" SANFLAGS="$(SANFLAGS)" \
	  $(RUN_SUITE) test-install $(RUNS)/test-install.log tests/install/test-install.sh $(BUILD)

# The hostile-client campaign first (attackers of three uids against one daemon while a bystander's
# results are checked, then every gauge back: docs/testing.md), then the hostile-load figure
# (bench-hostile): reported, never pass/fail on its timing, so a benchmark, and not run in the
# sanitizer builds (SANITIZE=1 or thread), whose timings mean nothing.
test-hostile: all run-integration/test-hostile-campaign
	@grep -h '^BENCH' $(RUNS)/test-hostile-campaign.log || true
ifeq ($(SANITIZE),0)
	@$(RUN_SUITE) bench-hostile $(RUNS)/bench-hostile.log scripts/bench.sh $(BUILD) bench-hostile
	@grep -h '^BENCH' $(RUNS)/bench-hostile.log || true
else
	@echo "SKIP  bench-hostile  (a benchmark: not run under SANITIZE=$(SANITIZE))"
endif

# The demo as `make demo` runs it, its table checked, and the report's failure verdicts
# (tests/demo/test-demo.sh).
# The DMRG clients are Python (examples/dmrg/): the package too, except in the sanitizer builds,
# whose library cannot be loaded into an interpreter (the demo then skips them and says so).
test-demo: $(BUILD)/tenferrod $(BUILD)/tenferroctl $(EXAMPLES) $(if $(filter 0,$(SANITIZE)),$(BUILD)/pyenv/.installed)
	@$(RUN_SUITE) test-demo $(RUNS)/test-demo.log tests/demo/test-demo.sh $(BUILD)

# The shared library's exports against the headers, its soname, and a user program linked to it.
test-abi: $(BUILD)/tenferrod $(if $(filter 1,$(STATIC_DEPS)),,$(BUILD)/libtenferro-client.so)
	@CC="$(CC) $(SANFLAGS)" $(RUN_SUITE) test-abi $(RUNS)/test-abi.log tests/abi/test-abi.sh $(BUILD)

# docs/api.md is generated from the headers; it must be current.
test-api-doc:
	@$(RUN_SUITE) test-api-doc $(RUNS)/test-api-doc.log scripts/gen-api-doc.sh --check

test: test-integration test-hostile test-unit test-load test-install test-demo test-abi test-api-doc

# The Python package (python/, docs/python.md): a venv under $(BUILD)/pyenv with numpy, pytest,
# hypothesis and `pip install ./python` built against this build's libtenferro-client.a, then its
# pytest suite against $(BUILD)/tenferrod on a private socket. Not part of the sanitizer runs (an
# ASan library inside a Python extension would need the runtime preloaded into the interpreter).
# PYTEST_K=EXPR passes -k EXPR (make test-one T=python CASE=EXPR).
PYTHON ?= python3
PYENV := $(BUILD)/pyenv
PY_SRC := $(wildcard python/src/tenferro/*.c python/src/tenferro/*.h python/src/tenferro/*.py \
            python/src/tenferro/*.pyi) python/setup.py python/pyproject.toml
$(PYENV)/.installed: $(PY_SRC) $(BUILD)/libtenferro-client.a
	@test -x $(PYENV)/bin/python || $(PYTHON) -m venv $(PYENV)
	@$(PYENV)/bin/python -m pip install -q --disable-pip-version-check numpy pytest hypothesis setuptools wheel
	@rm -rf python/build
	TENFERRO_BUILD=$(abspath $(BUILD)) $(PYENV)/bin/python -m pip install -q --disable-pip-version-check \
	  --no-build-isolation --force-reinstall --no-deps ./python
	@touch $@

python-package: $(PYENV)/.installed

test-python: $(BUILD)/tenferrod $(BUILD)/tenferroctl $(PYENV)/.installed
	@cd python && TENFERRO_DAEMON=$(abspath $(BUILD))/tenferrod \
	  ../$(RUN_SUITE) "test-python (pytest$(if $(PYTEST_K), -k '$(PYTEST_K)'))" $(abspath $(RUNS))/test-python.log \
	  ../$(PYENV)/bin/python -m pytest -q -p no:cacheprovider $(if $(PYTEST_K),-k '$(PYTEST_K)') tests

# A real single-node Slurm (munged, slurmctld, slurmd from Debian's packages, a private
# configuration under /tmp) with two daemons standing in for two GPUs: shares as gres/shard,
# contrib/slurm/'s TaskProlog and Epilog, jobs that run a client (tests/slurm/test-slurm.sh,
# docs/cluster.md). About 25 s once the packages are installed; needs root.
test-slurm: $(BUILD)/tenferrod $(BUILD)/tenferroctl $(BUILD)/tests/slurm-client
	@scripts/install-deps.sh slurm
	@$(RUN_SUITE) test-slurm $(RUNS)/test-slurm.log tests/slurm/test-slurm.sh $(BUILD)

# Every shell script of the tree through shellcheck (scripts, tests, contrib, CI), and the README's
# source map against the tree (scripts/check-source-map.sh).
SHELL_SCRIPTS := $(wildcard scripts/*.sh tests/*/*.sh contrib/*/*.sh) .ci/run \
                 contrib/slurm/tenferro-task-prolog contrib/slurm/tenferro-epilog
test-lint:
	@scripts/install-deps.sh lint
	@$(RUN_SUITE) "test-lint (shellcheck, $(words $(SHELL_SCRIPTS)) scripts)" $(RUNS)/test-lint.log \
	  shellcheck $(SHELL_SCRIPTS)
	@$(RUN_SUITE) "test-lint (the README's source map)" $(RUNS)/source-map.log scripts/check-source-map.sh

# contrib/kubernetes/: the manifests against the API schemas (kubernetes-validate from PyPI, in
# a virtual environment under $(BUILD)), the kustomization, the DaemonSet's entry point run with
# the real daemon (tests/kubernetes/test-manifests.sh).
test-kubernetes: $(BUILD)/tenferrod $(BUILD)/tenferroctl
	@scripts/install-deps.sh lint
	@$(RUN_SUITE) test-kubernetes $(RUNS)/test-kubernetes.log tests/kubernetes/test-manifests.sh $(BUILD)

# ThreadSanitizer: the daemon, the client library and every suite built with -fsanitize=thread
# (BUILD=$(TSAN_BUILD), CUDA=0), then the unit, integration and bounded load suites run against the
# TSan daemon (docs/testing.md). A report fails the run twice over: the process that saw the race
# exits 66 (the harness's daemon stop fails the test), and every report is also written under
# $(TSAN_BUILD)/tsan-reports/, which must stay empty (this catches processes whose exit status
# nobody checks: a daemon a test kills, a forked client).
SAN_BUILD ?= build-san
TSAN_BUILD ?= build-tsan
TSAN_SUPP := $(abspath tests/tsan.supp)
TSAN_REPORTS = $(abspath $(BUILD))/tsan-reports
# What test-tsan runs (make check's serial phase: TSAN_SUITES=test-serial).
TSAN_SUITES ?= test-integration test-unit test-load
# Alone (make check-tsan) it runs its suites side by side too (-j$(JOBS) unless -j is given), then
# the SERIAL_SUITES one at a time; inside make check (SERIAL_LATER=1) check-serial runs those.
TSAN_MAKE = $(MAKE) --no-print-directory BUILD=$(TSAN_BUILD) SANITIZE=thread CUDA=0
check-tsan:
	+@$(call PROTO_ONCE,$(TSAN_BUILD)) && \
	  $(call TIER_MAKE,$(JOBS)) BUILD=$(TSAN_BUILD) SANITIZE=thread CUDA=0 test-tsan SERIAL_LATER=1 \
	  $(if $(filter 1,$(SERIAL_LATER)),,&& $(TSAN_MAKE) test-tsan TSAN_SUITES=test-serial)

# The suites' make builds what each run needs as it goes, so the longest runs start as soon as
# their own programs are linked.
test-tsan:
	@rm -rf $(TSAN_REPORTS) && mkdir -p $(TSAN_REPORTS)
	+@start=$$(date +%s); \
	TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 log_path=$(TSAN_REPORTS)/report suppressions=$(TSAN_SUPP)" \
	  $(MAKE) --no-print-directory $(TSAN_SUITES); rc=$$?; \
	echo "check-tsan: the suites took $$(( $$(date +%s) - start )) s"; \
	if [ -n "$$(ls -A $(TSAN_REPORTS))" ]; then \
	  echo "check-tsan: ThreadSanitizer reports (one file per process, $(TSAN_REPORTS)):"; \
	  grep -h '^SUMMARY' $(TSAN_REPORTS)/* | sort | uniq -c; \
	  for f in $(TSAN_REPORTS)/*; do echo "---- $$f"; cat "$$f"; done | head -400; \
	  exit 1; \
	fi; \
	exit $$rc

# ---- tiers (docs/testing.md, "Tiers") ----
# `make quick` and `make check` run a make of their own with --output-sync and job slots of their
# own, unless -j was given (make -jN check uses N): quick -j$(JOBS), the CPUs plus one (suites spend
# much of their time waiting on their daemons); check -j$(CHECK_JOBS), three more, because each of
# its sanitizer and fuzz makes holds one slot for as long as it runs. JOBS=1 CHECK_JOBS=1 runs
# everything one after another.
NPROC := $(shell nproc 2>/dev/null || echo 1)
JOBS ?= $(shell echo $$(( $(NPROC) + 1 )))
CHECK_JOBS ?= $(shell echo $$(( $(NPROC) + 4 )))
TIER_MAKE = $(MAKE) --no-print-directory -Otarget \
            $$(case " $$MAKEFLAGS " in *" -j"*) ;; *) echo "-j$(1)" ;; esac)
# The generated protocol code of each build folder given, made first and alone: its rule names
# the .c and the .h as two targets of one protoc-c run, which a parallel make may run twice,
# rewriting the header while objects that include it compile (and leaving them older than it, so
# that a later make, such as test-install's `make install`, rebuilds and relinks under suites
# that are running).
PROTO_ONCE = for b in $(1); do $(MAKE) --no-print-directory BUILD=$$b $$b/gen/proto/tenferro.pb-c.h \
               >/dev/null || exit 1; done

# The integration suites of `make quick`: every suite once, but the four long ones (the dependent
# consumers, the reply bounds, the allocation-failure walk, the peer copies: about 55 s of the
# plain suites' 125 s), the hostile campaign and the reruns (busy-poll, TENFERRO_RING=off).
QUICK_SKIP := test-dependent test-reply-bounds test-failalloc test-peer-copy
QUICK_RUNS := $(filter-out $(QUICK_SKIP:%=run-integration/%),$(INTEGRATION_RUNS))

# Build (all), the unit suites and the core integration suites, side by side: about a minute on a
# fresh clone of a 2-CPU machine (docs/testing.md).
quick:
	+@start=$$(date +%s); $(call PROTO_ONCE,$(BUILD)) && $(call TIER_MAKE,$(JOBS)) quick-run SERIAL_LATER=1 && \
	  $(MAKE) --no-print-directory quick-serial || exit 1; \
	  echo "make quick: passed in $$(( $$(date +%s) - start )) s (the whole gate is make check)"
quick-run: all $(filter-out $(DEFERRED_RUNS),$(filter $(SLOW_RUNS),$(QUICK_RUNS)) $(UNIT_RUNS) \
                 $(filter-out $(SLOW_RUNS),$(QUICK_RUNS)))
quick-serial:
	+@for r in $(filter $(SERIAL_RUNS),$(QUICK_RUNS)); do $(MAKE) --no-print-directory $$r || exit 1; done

# One suite alone, its output as it comes: make test-one T=operations (or T=test-operations; a
# unit or integration suite, or python, load, soak, hostile, install, demo, abi, api-doc, slurm,
# lint, kubernetes) [CASE=NAME]: the Check test case (CK_RUN_CASE, a tcase_create name) or, for
# T=python, a pytest -k expression. It builds what the suite needs.
ONE := $(patsubst test-%,%,$(notdir $(T)))
ONE_SUITE := $(filter $(BUILD)/tests/test-$(ONE),$(UNIT_TESTS) $(INTEGRATION_TESTS))
ONE_TARGETS := test-python test-load test-soak test-hostile test-install test-demo test-abi \
               test-api-doc test-slurm test-lint test-kubernetes
ONE_RUN := $(strip $(if $(ONE_SUITE),$(if $(filter $(ONE_SUITE),$(UNIT_TESTS)),run-unit,run-integration)/test-$(ONE), \
             $(filter test-$(ONE),$(ONE_TARGETS))))
test-one:
	@if [ -z "$(T)" ] || [ -z "$(ONE_RUN)" ]; then \
	  echo "make test-one: T=SUITE names a suite: $(if $(T),no suite '$(T)'; )one of" \
	       "$(patsubst $(BUILD)/tests/test-%,%,$(UNIT_TESTS) $(INTEGRATION_TESTS)) $(ONE_TARGETS:test-%=%)" >&2; \
	  exit 2; fi
	+@$(call PROTO_ONCE,$(BUILD)) && TF_RUN_VERBOSE=1 $(if $(CASE),CK_RUN_CASE='$(CASE)') \
	  $(MAKE) --no-print-directory $(ONE_RUN) $(if $(CASE),PYTEST_K='$(CASE)') || { \
	  if [ -n "$(CASE)" ] && [ -n "$(ONE_SUITE)" ] && grep -q 'Checks: 0,' $(RUNS)/test-$(ONE).log; then \
	    echo "make test-one: $(T) has no test case '$(CASE)'; its cases:" \
	         "$$(grep -ho 'tcase_create("[^"]*")' tests/*/test-$(ONE).c | sed 's/tcase_create(\(.*\))/\1/' | tr '\n' ' ')" >&2; \
	  fi; exit 1; }

# The full gate (CI: .ci/run). deps first, then the dependencies of the Slurm test and the lint;
# then, side by side (-j$(CHECK_JOBS)): the plain build and its suites, the Python package, the lint,
# the Kubernetes manifests, Slurm and the short soak (check-plain); the ASan/UBSan build and its
# suites (check-asan); the ThreadSanitizer build and its suites (check-tsan); the fuzz build, its
# regression inputs and each target briefly (check-fuzz). Each of the four is independent of the
# others; they share the job slots. Last, alone and one at a time, the SERIAL_SUITES of the three
# builds (check-serial).
check: deps
	@scripts/install-deps.sh slurm
	@scripts/install-deps.sh lint
	+@start=$$(date +%s); $(call PROTO_ONCE,$(BUILD) $(SAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)) && \
	  $(call TIER_MAKE,$(CHECK_JOBS)) check-run SERIAL_LATER=1 && \
	  $(MAKE) --no-print-directory check-serial || { \
	  echo "make check: FAILED after $$(( $$(date +%s) - start )) s (each failed suite's log is above)"; exit 1; }; \
	  echo "make check: all suites passed (plain, ASan/UBSan and TSan), and the fuzz targets found" \
	       "nothing, in $$(( $$(date +%s) - start )) s"
check-run: check-tsan check-asan check-fuzz check-plain

# The runs of fixed length first (the soak, the campaign, Slurm), so they overlap the rest.
check-plain: test-soak test-hostile test-slurm test-kubernetes test-python test test-lint all

check-asan:
	+@$(call PROTO_ONCE,$(SAN_BUILD)) && $(MAKE) --no-print-directory BUILD=$(SAN_BUILD) SANITIZE=1 CUDA=0 test

check-fuzz: fuzz-check

check-serial:
	+@$(MAKE) --no-print-directory test-serial
	+@$(MAKE) --no-print-directory BUILD=$(SAN_BUILD) SANITIZE=1 CUDA=0 test-serial
	+@$(TSAN_MAKE) test-tsan TSAN_SUITES=test-serial

demo: deps
	$(MAKE) all
	$(MAKE) python-package
	scripts/demo.sh $(BUILD)

bench: deps
	$(MAKE) all
	$(MAKE) python-package $(BUILD)/pybench/first-result $(BUILD)/pybench/held-chain $(BUILD)/pybench/pinned-upload
	scripts/bench.sh $(BUILD)

install: all
	scripts/install.sh "$(BUILD)" "$(DESTDIR)" "$(PREFIX)"

clean:
	rm -rf build build-san build-tsan build-gpu build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
