# tenferrod: one non-recursive Makefile.
#
#   make                  daemon, client library (.so/.a), tenferroctl, tests, benchmarks
#   make check            install missing dependencies, run every suite, then again under ASan/UBSan
#   make demo             start tenferrod on the best device, run the example client, stop
#   make bench            benchmarks (CPU backend), BENCH lines on stdout
#   make install          PREFIX=/usr/local DESTDIR=
#
# Knobs: BUILD=dir (output folder), SANITIZE=1 (ASan+UBSan), CUDA=auto|0|1,
#        STATIC_DEPS=1 (link libuv, protobuf-c, Check, inih statically, CUDA runtime statically)

BUILD ?= build
CUDA ?= auto
STATIC_DEPS ?= 0
SANITIZE ?= 0
PREFIX ?= /usr/local
CC ?= gcc
NVCC ?= nvcc
CUDA_HOME ?= /usr/local/cuda

ifeq ($(CUDA),auto)
  HAVE_CUDA := $(if $(wildcard daemon/backend/cuda-backend.c),$(if $(shell command -v $(NVCC) 2>/dev/null || test -x $(CUDA_HOME)/bin/nvcc && echo y),1,0),0)
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
                  client/completion.c client/mailbox.c client/pinned.c client/staging.c \
                  client/view-fft.c
DAEMON_SRC := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
BACKEND_SRC := $(wildcard daemon/backend/*.c)
CUDA_CU_SRC := $(wildcard daemon/backend/*.cu)

ifeq ($(HAVE_CUDA),1)
  CFLAGS_DAEMON_DEFS := -DTFD_HAVE_CUDA
  CUDA_OBJ := $(CUDA_CU_SRC:%.cu=$(BUILD)/obj/%.o)
  # The CUDA backend's C files include the runtime and cuBLAS headers (-isystem: no -Werror there).
  $(BUILD)/obj/daemon/backend/cuda-%.o: CFLAGS_DAEMON_DEFS += -isystem $(CUDA_HOME)/include
  ifeq ($(STATIC_DEPS),1)
    LIB_CUDA := -L$(CUDA_HOME)/lib64 -lcublas -lcufft -l:libcudart_static.a -ldl -lrt -lstdc++
  else
    LIB_CUDA := -L$(CUDA_HOME)/lib64 -lcublas -lcufft -lcudart -lstdc++
  endif
else
  BACKEND_SRC := $(filter-out daemon/backend/cuda-%,$(BACKEND_SRC))
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
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(filter-out bench/bench-common.c,$(wildcard bench/*.c)))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
# GPU benchmarks (bench/gpu/, CUDA builds only); gpu-common.c is their shared helper, not a bench.
# They live in $(BUILD)/bench/gpu/, which scripts/bench.sh (CPU) does not run.
GPU_BENCHES := $(patsubst bench/gpu/%.c,$(BUILD)/bench/gpu/%,$(filter-out bench/gpu/gpu-common.c,$(wildcard bench/gpu/*.c)))

TARGETS := $(BUILD)/tenferrod $(BUILD)/libtenferro-client.a $(BUILD)/tenferroctl \
           $(UNIT_TESTS) $(INTEGRATION_TESTS) $(BENCHES) $(EXAMPLES) $(BUILD)/tests/load
ifneq ($(STATIC_DEPS),1)
  TARGETS += $(BUILD)/libtenferro-client.so
endif
ifeq ($(HAVE_CUDA),1)
  TARGETS += $(GPU_BENCHES)
endif

# Keep intermediate objects (tests and benches are built through chained rules).
.SECONDARY:

.PHONY: all deps check test test-unit test-integration test-load load test-install test-hostile demo bench install clean build-commit
all: $(TARGETS) build-commit

# The commit a build folder was made from, for reports made elsewhere (scripts/gpu-check.sh).
build-commit:
	@mkdir -p $(BUILD)
	@(git rev-parse --short HEAD 2>/dev/null || echo unknown) > $(BUILD)/commit

# ---- generated protocol code ----
$(PROTO_C) $(PROTO_H): proto/tenferro.proto
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

$(BUILD)/libtenferro-client.so: $(CLIENT_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libtenferro-client.so.0 -o $@ $^ $(LIB_PROTOBUF)

$(BUILD)/tenferroctl: $(call obj,client/tenferroctl.c client/tenferroctl-format.c) $(BUILD)/libtenferro-client.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF)

$(BUILD)/examples/%: $(call obj,examples/%.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) -lm

# Unit tests link the daemon's modules directly.
$(BUILD)/tests/test-%: $(BUILD)/obj/tests/unit/test-%.o $(DAEMON_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_CHECK) $(DAEMON_LIBS)

# Integration tests are clients: they link the client library and start a real daemon.
$(BUILD)/tests/test-%: $(BUILD)/obj/tests/integration/test-%.o $(TEST_HARNESS) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_CHECK) $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_SYS)

# The load test (tests/load/load.c) is a client too: the harness starts its daemon.
$(BUILD)/tests/load: $(BUILD)/obj/tests/load/load.o $(TEST_HARNESS) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_SYS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(call obj,bench/bench-common.c) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_PROTOBUF) $(LIB_BLAS) $(LIB_SYS)

# bench-held-chain also runs the daemon's CPU kernels in-process as its baseline,
# so it links the CPU backend's objects (the common objects come with the library).
# The FFT files (plan cache, geometry) and the log come with them.
FFT_BACKEND_SRC := daemon/backend/plan-cache.c daemon/backend/fft-layout.c
CPU_BACKEND_OBJ := $(call obj,$(filter daemon/backend/backend.c daemon/backend/cpu-%,$(BACKEND_SRC)) \
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

# bench-gpu-chain runs the daemon's CUDA kernels in-process (tfd_cuda_backend) as its baseline.
CUDA_BACKEND_OBJ := $(call obj,daemon/log.c daemon/backend/backend.c $(FFT_BACKEND_SRC) \
                      $(filter daemon/backend/cuda-%,$(BACKEND_SRC))) $(CUDA_OBJ)
$(BUILD)/bench/gpu/bench-gpu-chain: $(BUILD)/obj/bench/gpu/bench-gpu-chain.o $(GPU_BENCH_OBJ) \
                                    $(CUDA_BACKEND_OBJ) $(BUILD)/libtenferro-client.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(GPU_BENCH_LIBS)
endif

# ---- running ----
deps:
	@scripts/install-deps.sh

test-unit: $(UNIT_TESTS)
	@for t in $(UNIT_TESTS); do echo "== $$t"; $$t || exit 1; done

test-integration: $(BUILD)/tenferrod $(BUILD)/tenferroctl $(INTEGRATION_TESTS)
	@for t in $(INTEGRATION_TESTS); do echo "== $$t"; \
	  TENFERRO_DAEMON=$(BUILD)/tenferrod $$t || exit 1; done
	@echo "== $(BUILD)/tests/test-transfers, the daemon polling (transfers through the mailbox)"
	@TENFERRO_DAEMON=$(BUILD)/tenferrod TENFERRO_TEST_BUSY_POLL_US=2000 $(BUILD)/tests/test-transfers

# Bounded load test (tests/load/load.c); `make load` runs the long one.
test-load: $(BUILD)/tenferrod $(BUILD)/tests/load
	@echo "== $(BUILD)/tests/load"; TENFERRO_DAEMON=$(BUILD)/tenferrod $(BUILD)/tests/load --clients 8 --seconds 5
	@echo "== $(BUILD)/tests/load, the daemon polling (transfers through the mailbox)"; \
	  TENFERRO_DAEMON=$(BUILD)/tenferrod TENFERRO_TEST_BUSY_POLL_US=1000 $(BUILD)/tests/load --clients 4 --seconds 4

load: $(BUILD)/tenferrod $(BUILD)/tests/load
	TENFERRO_DAEMON=$(BUILD)/tenferrod $(BUILD)/tests/load --clients 32 --seconds 30

# Installs into a temporary DESTDIR and checks the unit, pkg-config, the example
# configuration and sd_notify (tests/install/test-install.sh). It runs `make install`
# itself, so it waits for `all`; SANFLAGS go to the program it compiles.
$(BUILD)/tests/notify-listener: $(call obj,tests/install/notify-listener.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

test-install: all $(BUILD)/tests/notify-listener
	MAKE="$(MAKE)" CC="$(CC)" SANFLAGS="$(SANFLAGS)" tests/install/test-install.sh $(BUILD)

# The hostile-load figure (bench-hostile): reported, never pass/fail on its timing.
test-hostile: all
	@echo "== bench-hostile (a client's round trips while others flood the daemon)"
	@scripts/bench.sh $(BUILD) bench-hostile

test: test-unit test-integration test-load test-install test-hostile

check: deps
	$(MAKE) all
	$(MAKE) test
	$(MAKE) BUILD=build-san SANITIZE=1 CUDA=0 test
	@echo "make check: all suites passed (plain and ASan/UBSan)"

demo: deps
	$(MAKE) all
	scripts/demo.sh $(BUILD)

bench: deps
	$(MAKE) all
	scripts/bench.sh $(BUILD)

install: all
	scripts/install.sh "$(BUILD)" "$(DESTDIR)" "$(PREFIX)"

clean:
	rm -rf build build-san build-gpu

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
