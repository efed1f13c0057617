# `make test` and `make demo` set everything up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CC_SOURCES := $(shell find cc_ops -name '*.cc' -o -name '*.h')
# The plain C++ cores of each area, with the shared status and hashing.
CORE_SOURCES := cc_ops/common/status.h cc_ops/common/hashing.h cc_ops/common/named_choice.h \
  cc_ops/common/parallel.h \
  $(wildcard cc_ops/embedding/core/*.cc cc_ops/embedding/core/*.h \
             cc_ops/data/core/*.cc cc_ops/data/core/*.h \
             cc_ops/schedule/core/*.cc cc_ops/schedule/core/*.h)
CORE_TEST_SOURCES := $(wildcard cc_ops/common/tests/*.cc cc_ops/common/tests/*.h \
  cc_ops/embedding/core/tests/*.cc cc_ops/embedding/core/tests/*.h \
  cc_ops/data/core/tests/*.cc cc_ops/data/core/tests/*.h \
  cc_ops/schedule/core/tests/*.cc)
# Debian's bazel-bootstrap (4.2.3, offline) installs bazel-4; elsewhere
# `bazel` is bazelisk, which reads .bazelversion.
BAZEL ?= $(shell command -v bazel-4 || echo bazel)
# Compiled actions are kept by content outside the repo, so a clean clone
# (CI's) rebuilds only what changed.
HET_TF_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/het_tf
BAZEL_FLAGS := --repo_env=PYTHON_BIN_PATH=$(abspath $(PY)) --disk_cache=$(HET_TF_CACHE)/bazel-actions

# Compiles go through ccache when it is there (tools/system_deps.sh installs
# it), its cache kept outside the repo by content, so a clean clone (CI's)
# recompiles only the files that changed; paths are hashed relative to the
# tree, wherever it is cloned.
CCACHE = $$(command -v ccache)
export CCACHE_DIR := $(HET_TF_CACHE)/ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: setup build test lint fuzz soak conformance demo bench core-tests cc-test sanitize bazel-build clean \
  setup-tf2.21 test-tf2.21

setup: $(VENV)/.deps

$(VENV)/.deps: requirements.txt tools/horovod_wheel.sh tools/system_deps.sh
	bash tools/system_deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements.txt
	bash tools/horovod_wheel.sh $(PY)
	touch $@

# The op library, compiled by setup.py against the venv's TensorFlow.
het_tf/_het_ops.so: $(VENV)/.deps $(CC_SOURCES) setup.py
	CXX="$(CCACHE) g++" $(PIP) install -q --no-build-isolation --no-deps -e .
	@test -f $@ || { echo "the build did not produce $@"; exit 1; }

build: het_tf/_het_ops.so

# The plain C++ core's own tests: no TensorFlow involved. Each file is its
# own object, so that the three builds below compile in parallel
# (core-tests) and a cached object is reused.
CORE_CC := $(filter %.cc,$(CORE_SOURCES) $(CORE_TEST_SOURCES))
CORE_HEADERS := $(filter %.h,$(CORE_SOURCES) $(CORE_TEST_SOURCES))
CORE_FLAGS := -std=c++17 -O3 -fno-math-errno -g -Wall -Wextra -I.
# The core's tests under AddressSanitizer + UndefinedBehaviorSanitizer, and
# under ThreadSanitizer (the concurrent push/pull test among them).
SANITIZE_FLAGS := -std=c++17 -O1 -g -fno-omit-frame-pointer -I.
ASAN_FLAGS := $(SANITIZE_FLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all
TSAN_FLAGS := $(SANITIZE_FLAGS) -fsanitize=thread

build/obj/core/%.o: %.cc $(CORE_HEADERS)
	@mkdir -p $(@D)
	$(CCACHE) g++ $(CORE_FLAGS) -c $< -o $@
build/obj/asan/%.o: %.cc $(CORE_HEADERS)
	@mkdir -p $(@D)
	$(CCACHE) clang++ $(ASAN_FLAGS) -c $< -o $@
build/obj/tsan/%.o: %.cc $(CORE_HEADERS)
	@mkdir -p $(@D)
	$(CCACHE) clang++ $(TSAN_FLAGS) -c $< -o $@

build/core_tests: $(CORE_CC:%.cc=build/obj/core/%.o)
	g++ $(CORE_FLAGS) $^ -o $@ -lpthread
build/core_tests_asan: $(CORE_CC:%.cc=build/obj/asan/%.o)
	clang++ $(ASAN_FLAGS) $^ -o $@ -lpthread
build/core_tests_tsan: $(CORE_CC:%.cc=build/obj/tsan/%.o)
	clang++ $(TSAN_FLAGS) $^ -o $@ -lpthread

# The three builds of the core's tests, and the table's timing tool (built
# so that it keeps compiling), a file on each core at a time (unless make
# was given its own -j).
core-tests: $(VENV)/.deps
	+$(MAKE) $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc)) \
	  build/core_tests build/core_tests_asan build/core_tests_tsan build/table_speed

# The table's Gather and Push timed alone, with no TensorFlow: make
# build/table_speed && ./build/table_speed (tools/table_speed.cc).
TABLE_SPEED_OBJS := $(patsubst %.cc,build/obj/core/%.o,$(filter %.cc,$(CORE_SOURCES)))
build/table_speed: tools/table_speed.cc $(TABLE_SPEED_OBJS) $(CORE_HEADERS)
	g++ $(CORE_FLAGS) $(filter-out %.h,$^) -o $@ -lpthread

cc-test: build/core_tests
	./build/core_tests

sanitize: $(VENV)/.deps build/core_tests_asan build/core_tests_tsan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 ./build/core_tests_asan
	TSAN_OPTIONS=halt_on_error=1 ./build/core_tests_tsan

bazel-build: $(VENV)/.deps
	$(BAZEL) build $(BAZEL_FLAGS) //cc_ops:all

# Style: ruff (pyproject.toml) for Python, clang-format (.clang-format) for C++.
CLANG_FORMAT ?= $(shell command -v clang-format-14 || echo clang-format)
lint: $(VENV)/.deps
	$(VENV)/bin/ruff check .
	$(CLANG_FORMAT) --dry-run --Werror $(CC_SOURCES)

test: lint build core-tests cc-test sanitize bazel-build
	$(PY) -m pytest -q --durations=15 -m "not long" tests

# The second stack, TensorFlow 2.21 with tf-keras 2.21, in its own venv, with
# its own op library (the loader finds it by HET_TF_OPS_LIBRARY) and Horovod
# wheel; the tree's default build is left alone. Its suite is every test but
# lint, the Bazel build and the benchmark (TFRA's row), fuzz, concurrency,
# link and checkpoint-kill tests, and the Python above the ops that the
# conformance cells run on 2.21 too (the settings' combinations, the
# lookahead's and hot block's own tests, the models and the training
# inputs), which run on 2.16.2.
TF221_VENV := .venv-tf2.21
TF221_PY := $(TF221_VENV)/bin/python
TF221_LIBRARY := $(CURDIR)/build/tf2.21/_het_ops.so
TF221_TESTS := tests/test_cli.py tests/test_loader.py tests/test_layering.py \
  tests/test_ops_reference.py tests/test_ops_errors.py tests/test_exactly_once.py \
  tests/test_keras_layer.py tests/test_keras_contract.py \
  tests/test_conformance.py \
  tests/test_deprecated_aliases.py \
  tests/test_embedding_behaviours.py \
  tests/test_hot_rows.py \
  tests/test_checkpoint_export.py tests/test_model_saving.py \
  tests/test_checkpoint_memory.py tests/test_incremental_checkpoints.py \
  tests/test_data.py \
  tests/test_cluster.py tests/test_hybrid.py \
  tests/test_herald.py tests/test_train_command.py tests/test_stack.py
# Besides the long runs (`-m "not long"`): runs that check numbers the
# default stack checks too (the flush after unbounded staleness), more
# variants of a mode this stack already runs once (the lookahead and FAE's
# hot rows in a cluster, which this stack runs in one process; the masked
# sequence model in a cluster; hybrid mode's sequence models; the hybrid
# mode of `het-tf train`, which test_hybrid.py runs; `het-tf train`'s tsv
# input and its eviction at --max-rows, the same Python on both stacks),
# the recovery runs after a lost task (the same processes and checkpoints
# as the runs this stack keeps), the parser's fuzzing (its op's C++ is the
# same), and the longest repeats of a guarantee this stack checks once
# already (saves while workers train, besides the cluster's other
# checkpoints; Herald's allocation, besides its plan; the hybrid
# exactly-once run, besides the cluster's and the runs with faults in one
# process; 2 hybrid ranks' dense weights, besides the ranks' connection and
# allreduce; the conformance matrix's cells under ParameterServerStrategy,
# besides its cells in one process and in hybrid mode; a restore onto 3 PS
# tasks and an incremental chain's, besides the restore onto 1; `het-tf
# train`'s local run and its failed export, besides its run on a small
# file): the second stack checks that everything works, not every figure
# again.
TF221_SKIPPED := \
  tests/test_herald.py::test_a_rank_lost_mid_step_fails_the_job_and_it_resumes \
  tests/test_cluster.py::test_a_lost_ps_task_fails_the_chief_and_a_relaunch_resumes \
  tests/test_cluster.py::test_training_finishes_when_a_worker_dies \
  tests/test_cluster.py::test_a_masked_sequence_model_trains_and_its_export_masks \
  tests/test_data.py::test_fuzzed_lines_match_the_reference_parser \
  tests/test_train_command.py::test_train_hybrid_mode_starts_and_stops_its_own_cluster \
  tests/test_train_command.py::test_one_workers_flush_moves_nothing_its_cache_had_not_made \
  tests/test_hybrid.py::test_sequence_models_train_in_hybrid_mode \
  tests/test_cluster.py::test_the_lookahead_prefetches_on_every_worker_and_loses_no_update \
  tests/test_cluster.py::test_hot_rows_stay_pinned_in_every_workers_cache \
  tests/test_exactly_once.py::test_checkpoints_saved_while_the_workers_train_are_consistent_cuts \
  tests/test_herald.py::test_allocation_and_plan_agree_on_every_rank_and_lose_no_sample \
  "tests/test_hybrid.py::test_ranks_share_tables_and_keep_dense_weights_identical[2]" \
  tests/test_train_command.py::test_train_ps_mode_starts_and_stops_its_own_cluster \
  tests/test_train_command.py::test_train_reads_tsv_and_counts_malformed_lines \
  tests/test_train_command.py::test_train_keeps_every_table_within_max_rows_by_eviction \
  "tests/test_exactly_once.py::test_hybrid_ranks_end_at_the_data[1-repeated]" \
  tests/test_conformance.py::test_every_read_under_parameter_server_strategy_equals_keras_embedding \
  tests/test_conformance.py::test_every_export_under_parameter_server_strategy_serves_without_het_tf \
  "tests/test_cluster.py::test_checkpoint_restores_onto_another_number_of_ps_tasks[3]" \
  tests/test_incremental_checkpoints.py::test_a_cluster_chain_restores_onto_one_shard \
  tests/test_train_command.py::test_train_local_writes_a_run_that_serves_without_het_tf \
  tests/test_train_command.py::test_a_failed_export_keeps_the_checkpoint_and_metrics_json

setup-tf2.21: $(TF221_VENV)/.deps

$(TF221_VENV)/.deps: requirements-tf2.21.txt tools/horovod_wheel.sh tools/system_deps.sh
	bash tools/system_deps.sh
	test -x $(TF221_PY) || $(PYTHON) -m venv $(TF221_VENV)
	$(TF221_PY) -m pip install -q -r requirements-tf2.21.txt
	bash tools/horovod_wheel.sh $(TF221_PY)
	touch $@

$(TF221_LIBRARY): $(TF221_VENV)/.deps $(CC_SOURCES) setup.py
	CXX="$(CCACHE) g++" HET_TF_OPS_LIBRARY=$@ $(TF221_PY) -m pip install -q --no-build-isolation --no-deps -e .
	@test -f $@ || { echo "the build did not produce $@"; exit 1; }

# The loader's Bazel check loads Bazel's build, which is made for the default stack.
test-tf2.21: $(TF221_LIBRARY)
	HET_TF_OPS_LIBRARY=$(TF221_LIBRARY) $(TF221_PY) -m pytest -q --durations=15 -m "not long" $(TF221_TESTS) \
	  --deselect tests/test_loader.py::test_bazel_built_library_runs_the_ops \
	  $(addprefix --deselect ,$(TF221_SKIPPED))

# The fuzz tests of every op and of HetEmbedding, and the runs with faults
# of tests/test_exactly_once.py, with many more examples
# than `make test` runs (docs/reliability.md).
FUZZ_EXAMPLES ?= 1000
fuzz: build
	HET_TF_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q --timeout=0 tests/test_fuzz.py \
		tests/test_exactly_once.py \
		tests/test_ops_reference.py::test_faults_leave_the_ops_as_the_reference_that_models_them

# Workers killed and restarted while a 2-PS, 2-worker cluster trains; the
# clocks and the final checkpoint are checked after. Then two workers train
# one table on 2 PS tasks through dropped answers, refused steps and
# replayed rounds, and every row is checked against the data
# (docs/reliability.md). Last, the tests marked long (docs/testing.md).
soak: build
	rm -rf $(CURDIR)/build/soak
	$(PY) tools/fault_soak.py --out $(CURDIR)/build/soak
	$(PY) tools/fault_soak.py --lookahead --out $(CURDIR)/build/soak/lookahead
	$(PY) tools/exactly_once_soak.py --out $(CURDIR)/build/soak/exactly-once
	$(PY) tools/exactly_once_soak.py --evict --out $(CURDIR)/build/soak/exactly-once-evict
	$(PY) tools/exactly_once_soak.py --sync check --staleness 0 \
		--out $(CURDIR)/build/soak/exactly-once-check
	$(PY) tools/exactly_once_soak.py --optimizer adagrad --staleness 3 \
		--out $(CURDIR)/build/soak/exactly-once-adagrad
	$(PY) tools/exactly_once_soak.py --optimizer adam --sync check --staleness 1 \
		--out $(CURDIR)/build/soak/exactly-once-adam
	$(PY) -m pytest -q -m long tests

# The whole conformance matrix (tests/conformance.py): every route, cache
# size, number of calls and optimizer, in one process and under
# ParameterServerStrategy, each read against Keras' own Embedding. `make
# test` runs a reduced matrix (one optimizer a cell).
conformance: build
	HET_TF_CONFORMANCE=full $(PY) -m pytest -q tests/test_conformance.py

# The main job on the default data: WDL on synthetic Criteo-like data, in
# ParameterServerStrategy mode on a local cluster (1 PS, 2 workers); then the
# exported SavedModel scores a few held-out rows in a process without het_tf.
DEMO_RUN := $(CURDIR)/build/demo-run
demo: build
	rm -rf $(DEMO_RUN)
	$(VENV)/bin/het-tf train --mode ps --ps 1 --workers 2 --model wdl --data synthetic \
	  --samples 2000000 --run-dir $(DEMO_RUN)
	@# The serving check imports stock TensorFlow without het-tf's quiet start:
	@# errors-only keeps its output to the scores.
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) examples/serve_export.py $(DEMO_RUN)

# The benchmark at its default (reduced) size; results in build/bench.
bench: build
	$(VENV)/bin/het-tf bench --out $(CURDIR)/build/bench

clean:
	rm -rf build het_tf/_het_ops.so *.egg-info
	-$(BAZEL) clean
