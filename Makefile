# fabkv: the two set-up commands of the README, plus the build they share.
#   make        build everything into build/ (executables in build/bin/)
#   make demo   the main job: a local fabkv-server on shm, memcached and redis, a short
#               fabkv-bench matrix against all three, the summary table and a report with plots
#   make figures  the seed papers' figures run here, each beside the paper's numbers and the
#               NIC model's prediction (docs/figures.md): reports/figures-<timestamp>/, ~11 min;
#               QUICK=1: fewer points, shorter runs (~2 min); OUT=DIR to choose the folder
#   make test   check the format (make format-check), build, run every test, then again under
#               ASan+UBSan (clang) with a short fuzz run (the provider-parameterised tests on shm
#               only: the tcp cases run the same fabkv code and double the time), and the
#               threaded parts under TSan
#   make format apply .clang-format to the tracked C/C++ sources
# Each target first installs missing Debian packages (scripts/install-deps.sh).

BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS       ?= $(shell nproc)
CMAKE_GEN  := -G Ninja
# libfabric 2.x built by scripts/install-libfabric.sh (absent when the system has >= 2).
export PKG_CONFIG_PATH := $(CURDIR)/.deps/libfabric/lib/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))

.PHONY: all deps build demo figures format format-check test test-release test-asan test-tsan clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFABKV_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@BUILD=$(CURDIR)/$(BUILD) scripts/demo-bench.sh

# The runner needs fabkv-bench, fabkv-server and fabkv-perf; Debian's python3 has matplotlib.
figures: deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFABKV_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target fabkv-bench fabkv-server fabkv-perf
	@/usr/bin/python3 python/fabkv/figures.py run --build $(CURDIR)/$(BUILD) \
	  $(if $(QUICK),--quick) $(if $(OUT),--out $(OUT))

# Every tracked C/C++ file, tests and fuzzers included: they are read as much as the library.
SOURCES = $(shell git ls-files '*.cc' '*.h' '*.c')
# The version matters: another clang-format may lay out the same code differently, and the code
# follows the one Debian installs (scripts/install-deps.sh).
CLANG_FORMAT ?= clang-format

# Seconds, so it runs first: a layout slip fails before half an hour of tests. clang-format's
# ColumnLimit reflows code and comments, but not a token longer than the limit (a URL, a raw
# string), hence the second check.
format-check: deps
	@$(CLANG_FORMAT) --dry-run -Werror $(SOURCES)
	@awk 'length($$0) > 100 { print FILENAME ":" FNR ": over 100 columns"; bad = 1 } \
	  END { exit bad }' $(SOURCES)

format: deps
	@$(CLANG_FORMAT) -i $(SOURCES)

test: format-check test-release test-asan test-tsan

test-release: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DFABKV_SANITIZE=ON -DFABKV_FUZZ=ON -DFABKV_BENCH=OFF -DFABKV_WERROR=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 -E '/"?tcp'

# The threaded parts (control channel server thread, op log writer and rewriter threads, the
# memcached front end's forwarding between workers, answers held for the op log, in the server
# processes its tests start) under ThreadSanitizer. Not the soak of memcached's clients, their
# 100,000-key multi-gets, nor answers_test.py's long line and steady readers: their clients'
# timeouts and rates are set for a server at full speed (they run in the release and ASan passes).
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DFABKV_TSAN=ON -DFABKV_BENCH=OFF -DFABKV_WERROR=ON >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target fabkv_control_server_test fabkv_control_wire_test fabkv_oplog_test
	@cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -L control -E fuzz --timeout 300
	@cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R '^OpLogTest\.' --timeout 300
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target fabkv-server fabkv_memcached_text_test fabkv_memcached_frontend_test \
	  fabkv_memcached_conns_test fabkv_memcached_durability_test fabkv_memcached_tools_test \
	  fabkv_memcached_limits_test fabkv_durability_test
	@cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -L memcached \
	  -E 'fuzz|memccapable_w1|memcached_soak|memcached_clients|memcached_answers_[lsr]' --timeout 600
	@cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 FABKV_DURABILITY_RUNS=1 ctest --output-on-failure -j $(JOBS) -R '/Durability' --timeout 600

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
