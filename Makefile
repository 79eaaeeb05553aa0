# `make train` and `make test` install everything they need first (idempotent, fast when done).
PYTHON ?= python3
# The torch that parity is measured with. From PyPI (the default) it is, on Linux x86_64, the CUDA build:
# several GB of nvidia-* wheels, which also runs on a CPU. TORCH_INDEX=https://download.pytorch.org/whl/cpu
# takes the CPU-only build of the same version instead (a few hundred MB).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
PYTEST_ARGS ?=
# Appended to `make train`'s command (later flags win): tests/test_readme.py cuts its steps short with it.
TRAIN_ARGS ?=
# Where `make docs` writes the site.
SITE_DIR ?= site
# The Debian packages that turn every skipped test into a run: system-packages.txt, one `part: packages` a line.
SYSTEM_PACKAGES := $(strip $(shell sed -e 's/\#.*//' -e 's/^[^:]*://' system-packages.txt))
APT_FLAGS ?=

.PHONY: install train test test-all test-orders lint docs bench bench-scale clean system-deps

# pip runs once per Python environment and torch asked for (a stamp under build/ named by both) and again when
# setup.cfg changes: `make docs lint test` (as .ci/run) installs once, not three times (about 15 s each).
INSTALLED := build/installed-$(shell $(PYTHON) -c \
	"import hashlib, sys; print(hashlib.sha1(f'{sys.prefix} {sys.argv[1]}'.encode()).hexdigest()[:16])" "$(TORCH) $(TORCH_INDEX)")

install: $(INSTALLED)

$(INSTALLED): setup.cfg
	$(PYTHON) -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PYTHON) -m pip install -q -e ".[test]"
	@mkdir -p build && touch $@

# The main job: Reacher (gymnasium MuJoCo) with the MLP policy, about 3 minutes on 2 idle cores.
train: install
	$(PYTHON) -m ppo_dict.main_ppo --env gym_Reacher-v2 --model mlp \
		--total_timesteps 500000 --n_envs 8 --n_steps 256 --batch_size 256 --n_epochs 10 \
		--gamma 0.9 --gae_lambda 0.95 --learning_rate 3e-4 --normalize True --seed 0 --log_interval 10 $(TRAIN_ARGS)

# The parity suite's tests shuffled among their places (ORDER_SEED, printed at the end; set it to replay an order): what
# a parity test asserts must not depend on what ran before it in the process. The 25 slowest tests are listed.
ORDER_SEED ?= $(shell date +%s)
# Tests run two at a time (pytest-xdist): most of a test's time is one Python process starting or waiting, which leaves
# the other CPU idle. PYTEST_WORKERS=0 runs them one after another in pytest's own process.
PYTEST_WORKERS ?= 2
test: install
	$(PYTHON) -m pytest -m "not slow" -n $(PYTEST_WORKERS) --order parity-random:$(ORDER_SEED) --durations=25 $(PYTEST_ARGS)

# More orders of the parity suite, outside CI: the whole suite shuffled, with the garbage collected between tests.
test-orders: install
	$(PYTHON) -m pytest tests/parity -m "not slow" --order random:$(ORDER_SEED) --gc-between-tests $(PYTEST_ARGS)

# pyflakes' and pycodestyle's rules at sb3's line length, and the formatter's check (black's style: ruff.toml); CI runs it.
lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

test-all: install
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/) into site/: the speed figure redrawn from docs/figures/speed.csv,
# then every MkDocs warning an error (a broken link or anchor, a missing page, a page left out of the nav).
docs: install
	$(PYTHON) docs/figures/speed.py
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict --site-dir $(SITE_DIR)

bench: install
	$(PYTHON) benchmarks/bench.py
	$(PYTHON) benchmarks/bench_pixels.py
	$(PYTHON) benchmarks/bench_atari.py
	$(PYTHON) benchmarks/bench_masked.py
	$(PYTHON) benchmarks/bench_api.py
	$(PYTHON) benchmarks/bench_recurrent.py
	$(PYTHON) benchmarks/bench_load.py
	$(PYTHON) benchmarks/bench_ranks.py

# Throughput against the worker count: the parts model (a many-core host predicted from parts measured here), emulated
# cores (envs that sleep: any host), the main process's step in parts,
# then the real envs on 1, 2, 4, ... workers and the default layout (a many-core machine; bench_scale.py --help splits it
# into shorter calls; benchmarks/many_core.sh is the short version for a borrowed many-core host).
bench-scale: install
	$(PYTHON) benchmarks/bench_scale.py --parts
	$(PYTHON) benchmarks/bench_scale.py --emulate
	$(PYTHON) benchmarks/bench_scale.py --main_step
	$(PYTHON) benchmarks/bench_scale.py --sb3

# Needs root (`sudo make system-deps`); .ci/run runs it (APT_FLAGS=-qq).
system-deps:
	apt-get update $(APT_FLAGS)
	DEBIAN_FRONTEND=noninteractive apt-get install -y $(APT_FLAGS) --no-install-recommends $(SYSTEM_PACKAGES)

clean:
	rm -rf build dist site *.egg-info .pytest_cache
