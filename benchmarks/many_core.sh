#!/usr/bin/env bash
# The scale table on a many-core host: does the rollout grow with the cores, and does the default layout use them?
# One command, from the repository root, about 6 minutes on a 16-core host; rows are appended to perf_log.md:
#
#   bash benchmarks/many_core.sh           # on the many-core host
#   bash benchmarks/many_core.sh --fetch   # beforehand, on a machine that reaches PyPI: the wheels into .whl/
#
# It runs, exact and --double_buffer, Reacher-v5 at 256 envs on 1, 4, 8 and 16 workers and on the default layout
# (every usable CPU), beside sb3's SubprocVecEnv and one raw env (bench_scale.py), then the emulated-core rows at
# 4, 16 and 32 workers (bench_scale.py --emulate) and the main process's step in parts (--main_step), and prints
# the layout the default chooses (--dry_run).
#
# What it needs: python3 with torch (any build: the rollouts run on the CPU); the rest it installs from .whl/ when
# that folder exists, without the network: gymnasium, Farama-Notifications, mujoco (with mujoco-core, mujoco-studio,
# glfw, PyOpenGL, websockets) and stable-baselines3, for CPython 3.12 on x86_64 (WHEEL_PYTHON to change). numpy, cloudpickle,
# pandas, matplotlib, PyYAML, tensorboard and opencv-python-headless it expects to find. MUJOCO_GL is left alone:
# nothing here renders.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(gymnasium==1.4.0 farama-notifications==0.0.4 mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 glfw==2.11.0
        PyOpenGL==3.1.10 websockets==17.4 stable-baselines3==2.9.2)

source benchmarks/wheels.sh
if [ "${1:-}" = "--fetch" ]; then
    fetch_wheels "${WHEELS[@]}"
fi
use_wheels /tmp/many_core_site
nproc
python3 -c "from ppo_dict.core.machine import physical_cores, usable_cpus; print('usable CPUs', usable_cpus(), '| physical cores', physical_cores())"
python3 -m ppo_dict.main_ppo --env gym_Reacher-v5 --model mlp --n_envs 256 --dry_run True | grep -i "layout" || true
python3 benchmarks/bench_scale.py --env_ids Reacher-v5 --envs 256 --workers 1,4,8,16,default --n_steps 64 --sb3 --quick --plot ""
python3 benchmarks/bench_scale.py --emulate --quick
python3 benchmarks/bench_scale.py --main_step --env_ids Reacher-v5 --quick
