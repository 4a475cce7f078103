# The two commands of the README:
#   make demo   installs what is missing, builds, and trains a character-level GPT with ZeRO-3
#               on 4 ranks (threads, then processes over libfabric under zerorun)
#   make test   installs what is missing, builds, and runs the whole suite: a release build,
#               the same suite under AddressSanitizer+UBSan, the comm tests under TSan, and
#               the optimizer kernels built for aarch64 and run under qemu (test-arm)
# Other targets: build, bench, install (PREFIX=...), clean.
BUILD      ?= build
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
CMAKE_ARGS ?=
# Sanitizer builds skip CUDA (its runtime and the sanitizers do not mix) and the benchmarks.
SAN_ARGS    = -DZS_WITH_CUDA=OFF -DZS_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug

.PHONY: setup build demo test test-release test-asan test-tsan test-arm bench bench-plot install clean

setup:
	@scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

DEMO_CONFIG = examples/train_gpt/configs/zero3.json
demo: build
	@echo "== train_gpt: ZeRO-3, 4 ranks as threads (local backend) =="
	$(BUILD)/bin/train_gpt --config $(DEMO_CONFIG) --world 4 --steps 150 --report $(BUILD)/train_gpt_report.json
	@echo "== train_gpt: ZeRO-3, 4 ranks as processes over libfabric, started by zerorun =="
	$(BUILD)/bin/zerorun -n 4 --backend fabric -- $(BUILD)/bin/train_gpt --config $(DEMO_CONFIG) --steps 20 --print-every 5

test: test-release test-asan test-tsan test-arm
	@echo "zerostack: all test suites passed (release, asan+ubsan, tsan, aarch64 under qemu)"

test-release: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: setup
	cmake -S . -B $(BUILD)-asan -DZS_SANITIZE=address $(SAN_ARGS) $(CMAKE_ARGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -LE no_asan

test-tsan: setup
	cmake -S . -B $(BUILD)-tsan -DZS_SANITIZE=thread $(SAN_ARGS) $(CMAKE_ARGS)
	cmake --build $(BUILD)-tsan -j $(JOBS) --target zs_tsan_tests
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) -L tsan

# The optimizer kernels, codecs and kernels' CPU references cross-built for aarch64 (NEON, and
# SVE/SVE2 where a file compiles them) and run under qemu-aarch64, so every Arm target is pinned
# in turn as on a real machine (cmake/aarch64-linux-gnu.cmake): once per SVE vector length, 512
# bits (SVE, SVE2), 256 (SVE_256) and 128 (SVE2_128). Death tests are left out (they run
# natively): the threadsafe ones re-execute the binary, which the host cannot exec.
ARM_CPUS = max max,sve-default-vector-length=32 max,sve-default-vector-length=16
# On an aarch64 host the release build runs these tests natively, on the targets its CPU has.
# SKIP_ARM=1 leaves them out (no root, or apt sources without arm64 packages).
HOST_ARCH := $(shell uname -m)
SKIP_ARM  ?= 0
test-arm: setup
ifeq ($(HOST_ARCH),aarch64)
	@echo "test-arm: skipped on an aarch64 host (test-release ran them on this CPU's Arm targets)"
else ifeq ($(SKIP_ARM),1)
	@echo "test-arm: skipped (SKIP_ARM=1)"
else
	@scripts/setup.sh --arm
	cmake -S . -B $(BUILD)-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DZS_KERNELS_ONLY=ON -DZS_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DZS_TEST_TIMEOUT_SCALE=10 $(CMAKE_ARGS)
	cmake --build $(BUILD)-arm -j $(JOBS)
	cd $(BUILD)-arm && for cpu in $(ARM_CPUS); do \
	  echo "== aarch64 under qemu, QEMU_CPU=$$cpu"; \
	  QEMU_CPU=$$cpu GTEST_FILTER='-*DeathTest*' ctest --output-on-failure -j $(JOBS) || exit 1; \
	done
endif

bench: build
	$(BUILD)/bin/bench_comm
	$(BUILD)/bin/bench_zero --benchmark_counters_tabular=true --benchmark_format=json --benchmark_out=$(BUILD)/bench_zero.json
	$(BUILD)/bin/bench_optimizers --benchmark_counters_tabular=true --benchmark_format=json --benchmark_out=$(BUILD)/bench_optimizers.json

# docs/zero_memory.png from the last `make bench` (matplotlib is installed for the user if missing).
bench-plot:
	python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install --user --break-system-packages matplotlib
	python3 scripts/plot_zero_memory.py $(BUILD)/bench_zero.json docs/zero_memory.png

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-arm
