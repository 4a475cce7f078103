# The two commands of the README:
#   make demo   installs what is missing, builds, and runs the 4-rank demo
#   make test   installs what is missing, builds, and runs the whole suite: a release build,
#               the same suite under AddressSanitizer+UBSan, and the comm tests under TSan
# Other targets: build, bench, install (PREFIX=...), clean.
BUILD      ?= build
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
CMAKE_ARGS ?=
# Sanitizer builds skip CUDA (its runtime and the sanitizers do not mix) and the benchmarks.
SAN_ARGS    = -DZS_WITH_CUDA=OFF -DZS_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug

.PHONY: setup build demo test test-release test-asan test-tsan bench install clean

setup:
	@scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@echo "== 4 ranks as threads (local backend) =="
	$(BUILD)/bin/zs_demo --world 4
	@echo "== 4 ranks as processes over libfabric shm, started by zerorun =="
	$(BUILD)/bin/zerorun -n 4 --backend fabric $(BUILD)/bin/zs_demo

test: test-release test-asan test-tsan
	@echo "zerostack: all test suites passed (release, asan+ubsan, tsan)"

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

bench: build
	$(BUILD)/bin/bench_comm

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
