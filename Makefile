# `make train` and `make test` install everything they need first (idempotent, fast when done).
PYTHON ?= python3
# The CPU build: a bare `torch` would pull several GB of CUDA packages on a machine without a GPU.
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=
# The Debian packages that turn every skipped test into a run: system-packages.txt, one `part: packages` a line.
SYSTEM_PACKAGES := $(strip $(shell sed -e 's/\#.*//' -e 's/^[^:]*://' system-packages.txt))
APT_FLAGS ?=

.PHONY: install train test test-all bench bench-scale clean system-deps

install:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[test]"

# The main job: Reacher (gymnasium MuJoCo) with the MLP policy, a few minutes on 2 cores.
train: install
	$(PYTHON) -m ppo_dict.main_ppo --env gym_Reacher-v2 --model mlp \
		--total_timesteps 500000 --n_envs 8 --n_steps 256 --batch_size 256 --n_epochs 10 \
		--gamma 0.9 --gae_lambda 0.95 --learning_rate 3e-4 --normalize True --seed 0 --log_interval 10

test: install
	$(PYTHON) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: install
	$(PYTHON) -m pytest $(PYTEST_ARGS)

bench: install
	$(PYTHON) benchmarks/bench.py
	$(PYTHON) benchmarks/bench_pixels.py
	$(PYTHON) benchmarks/bench_atari.py
	$(PYTHON) benchmarks/bench_masked.py
	$(PYTHON) benchmarks/bench_api.py

# Throughput against the worker count (for a many-core machine; bench_scale.py --help splits it into shorter calls).
bench-scale: install
	$(PYTHON) benchmarks/bench_scale.py --sb3

# Needs root (`sudo make system-deps`); .ci/run runs it (APT_FLAGS=-qq).
system-deps:
	apt-get update $(APT_FLAGS)
	DEBIAN_FRONTEND=noninteractive apt-get install -y $(APT_FLAGS) --no-install-recommends $(SYSTEM_PACKAGES)

clean:
	rm -rf build dist *.egg-info .pytest_cache
