"""Every frame an env's own: rendering envs created, rendered, closed and collected in many orders
in one process (``tests/envs/render_orders.py``), on every GL backend this host has. Before
``envs/gl_guard.py``, closing or collecting one MuJoCo renderer freed its MuJoCo context inside
another live renderer's GL context, and that renderer drew black frames from then on (and under
glfw, gymnasium's ``close`` terminated glfw, and the next frame of another env crashed the process)."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.envs.render_orders import ORDERS
from tests.system_parts import needs

BACKENDS = [
    pytest.param("egl", (), marks=needs("egl"), id="egl"),
    # make test-all: the other backends tear down the same envs (make test: EGL, the one a machine with a GPU driver picks)
    pytest.param("osmesa", (), marks=[needs("osmesa"), pytest.mark.slow], id="osmesa"),
    pytest.param("glfw", ("xvfb-run", "-a"), marks=[needs("glfw"), pytest.mark.slow], id="glfw-xvfb"),
]


@pytest.mark.parametrize("backend, prefix", BACKENDS)
def test_every_remaining_env_draws_its_own_frames(backend: str, prefix: tuple) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DISPLAY", "PYOPENGL_PLATFORM")},
        "PYTHONPATH": ROOT,
        "MUJOCO_GL": backend,
    }
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "tests.envs.render_orders"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == {*ORDERS, "closed_before_the_watched_drew", "worker_pool_beside_others"}
    for order, counts in results.items():
        assert counts["frames"] >= 18, (order, counts)
        assert counts["differ"] == 0 and counts["one_colour"] == 0, (order, counts)
