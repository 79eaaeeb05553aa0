#!/usr/bin/env bash
# The CUDA path on a GPU host (issue 40): does the GPU make rollouts and updates faster? One command, from the
# repository root, about 5 minutes on a 16-core H100 host; rows are appended to perf_log.md:
#
#   bash benchmarks/gpu.sh             # on the GPU host
#   bash benchmarks/gpu.sh --fetch     # beforehand, on a machine that reaches PyPI: the wheels into .whl/
#   DEVICE=cpu bash benchmarks/gpu.sh  # a dry run of every line on the CPU (rows to /tmp, not perf_log.md)
#
# It runs the CUDA path's tests (tests/test_cuda_path.py: the GPU-only ones run where torch sees a GPU, here the
# graph-captured step against the eager one), a short training with --device auto and with --device cuda (their
# measured-device lines), then benchmarks/bench_gpu.py: Reacher-v5 rollouts at 64 and 256 envs (cpu, cuda,
# cuda --cuda_graphs), Reacher-v5 training at 8 envs with minibatch 64 and 10 epochs (cpu, cuda, sb3 on cuda),
# test_dummy + cnn at 32 envs (rollouts against the policy step alone, training against sb3 on cuda).
# The learning rows (CartPole, 3 seeds on each device) take longer: add LEARNING=1.
#
# What it needs: python3 with a CUDA build of torch (the host's own: no wheel of it is fetched); the rest it installs
# from .whl/ when that folder exists, without the network: gymnasium, Farama-Notifications, mujoco (with
# mujoco-core, mujoco-studio, glfw, PyOpenGL, websockets), stable-baselines3 and pytest (with pluggy, iniconfig),
# for CPython 3.12 on x86_64 (WHEEL_PYTHON to change). numpy, cloudpickle, pandas, matplotlib, PyYAML, packaging,
# tensorboard and opencv-python-headless it expects to find. MUJOCO_GL is left alone: nothing here renders.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(gymnasium==1.4.0 farama-notifications==0.0.4 mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 glfw==2.11.0
        PyOpenGL==3.1.10 websockets==17.4 stable-baselines3==2.9.2 pytest==9.0.3 pluggy==1.6.0 iniconfig==2.3.0)
DEVICE="${DEVICE:-cuda}"

source benchmarks/wheels.sh
if [ "${1:-}" = "--fetch" ]; then
    fetch_wheels "${WHEELS[@]}"
fi
use_wheels /tmp/gpu_site
if [ "$DEVICE" = "cpu" ]; then  # the dry run: every line, small, on the CPU, its rows kept out of the ledger
    BENCH=(--quick --device cpu --log /tmp/gpu_dry_perf_log.md)
    AUTO_STEPS=256
else
    nvidia-smi -L || true
    python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda); sys.exit(0 if torch.cuda.is_available() else 'no CUDA device for torch here (DEVICE=cpu for a dry run)')"
    BENCH=(--device "$DEVICE")
    AUTO_STEPS=4096
fi
nproc
python3 -m pytest tests/test_cuda_path.py -q -p no:cacheprovider -rs
for device in auto "$DEVICE"; do  # the measured-device line (auto's choice, or what a forced cuda costs an MLP)
    python3 -m ppo_dict.main_ppo --env gym_Reacher-v5 --n_envs 64 --n_steps 32 --batch_size 512 --n_epochs 1 --device "$device" \
        --total_timesteps "$AUTO_STEPS" --verbose 0 --run_dir "/tmp/gpu_sh_runs/$device" --overwrite True --progress none --plot False \
        > "/tmp/gpu_sh_$device.txt"
    grep -E "^(device|note)" "/tmp/gpu_sh_$device.txt" || echo "--device $device: no device line (no CUDA device: the cpu, as before)"
done
python3 benchmarks/bench_gpu.py "${BENCH[@]}" ${LEARNING:+--learning}
