"""Where logged values go besides the console: a CSV file, Weights & Biases, TensorBoard.

Each is a :data:`ppo_dict.core.logger.Writer`: ``writer(values, step)`` gets every dump of the
:class:`~ppo_dict.core.logger.Logger` (sb3's keys ``rollout/*``, ``time/*``, ``train/*`` and
``eval/*``) with ``step = num_timesteps``. wandb and TensorBoard are imported only when used.
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
import re
from typing import Any, Optional, TextIO

from ppo_dict.core import bounded
from ppo_dict.core.files import append_text, atomic_write
from ppo_dict.core.logger import STDERR
from ppo_dict.core.reading import entry_kind, open_regular, read_capped

STEP = "step"


def scalars(values: dict[str, Any]) -> dict[str, float]:
    """The numeric values of a dump as python numbers (numpy scalars and 0-d arrays included)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            out[key] = value.item() if hasattr(value, "item") else value  # type: ignore[union-attr]
        elif hasattr(value, "ndim") and getattr(value, "ndim") == 0:
            out[key] = value.item()
    return out


class CSVWriter:
    """``progress.csv``: one row per dump, column ``step`` then the keys in sorted order.

    A key first seen later (``train/*`` after the first rollout, ``eval/*``) adds a column: the
    file is rewritten with the wider header, as sb3's ``CSVOutputFormat`` does. A resumed run
    starts from the rows of ``source`` (default: ``path``; a branch's: the run it branched from) up
    to its checkpoint's step, and continues after them.
    """

    def __init__(self, path: str, resume_step: Optional[int] = None, source: Optional[str] = None):
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.keys: list[str] = []
        source = source or path
        if resume_step is not None and entry_kind(source):  # the run's own file: never read through a link
            with open_regular(source, follow=False) as f:
                self.rows = [row for row in progress_rows(io.TextIOWrapper(f, newline=""), source) if row[STEP] <= resume_step]
            self.keys = sorted({k for row in self.rows for k in row} - {STEP})
        self._rewrite()

    def _rewrite(self) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=[STEP, *self.keys], restval="")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write(self.path, lambda f: f.write(buffer.getvalue()), mode="w")

    def __call__(self, values: dict[str, Any], step: int) -> None:
        row = {STEP: step, **scalars(values)}
        self.rows.append(row)
        new_keys = sorted(set(row) - {STEP} - set(self.keys))
        if new_keys:
            self.keys = sorted(set(self.keys) | set(new_keys))
            self._rewrite()
            return
        buffer = io.StringIO()
        csv.DictWriter(buffer, fieldnames=[STEP, *self.keys], restval="").writerow(row)
        append_text(self.path, buffer.getvalue())  # to the file _rewrite made, never through a link put in its place since


def progress_rows(file: Any, where: str) -> list[dict[str, Any]]:
    """The rows of a ``progress.csv`` (``file``: open as text) that have a step, the step read as an int (the
    rest as written), read bounded (``ppo_dict.core.bounded.table``: lines, cells, rows as wide as the header);
    ``ValueError`` names the line of a step that is not a whole number of steps or a cell that is no number."""
    rows, header = [], None
    for n, cells in bounded.table(file, where):
        if header is None:
            header = cells
            continue
        row = dict(zip(header, cells))
        text = row.get(STEP)
        if not text:
            continue
        step = bounded.whole_step(text)
        if step is None:
            raise ValueError(f"{where}: line {n}: the step {text[:40]!r} is not a whole number of steps")
        bad = next((k for k, v in row.items() if v and bounded.number(v) is None), None)
        if bad is not None:
            raise ValueError(f"{where}: line {n}: {bad} is {row[bad][:40]!r}, not a number")
        rows.append({**row, STEP: step})
    return rows


def read_csv(path: str) -> list[dict[str, float]]:
    """Rows of a ``progress.csv`` as floats (empty cells and rows without a step left out), read as
    :func:`progress_rows` reads it (``ValueError`` or ``OSError`` for a file that does not read)."""
    with open_regular(path) as f:
        rows = progress_rows(io.TextIOWrapper(f, newline=""), path)
    return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in rows]


# ----------------------------------------------------------------------------------------------
# Weights & Biases


def wandb_api_key_configured() -> bool:
    """True if wandb would find credentials without asking: ``WANDB_API_KEY`` or a netrc entry.

    Uses wandb's own netrc reader for the configured host (``WANDB_BASE_URL``); no network.
    """
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return read_netrc_auth(host=os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")) is not None
    except Exception:  # an unreadable or malformed netrc means: no usable key
        return False


def resolve_wandb_mode(flag: Optional[str]) -> tuple[Optional[str], str]:
    """``(mode to pass to wandb.init, why)``; None lets wandb read ``WANDB_MODE`` itself."""
    if flag is not None:
        return flag, f"--wandb_mode {flag}"
    if os.environ.get("WANDB_MODE"):
        return None, f"WANDB_MODE={os.environ['WANDB_MODE']}"
    if wandb_api_key_configured():
        return "online", "an API key is configured"
    return "offline", "no W&B API key configured (WANDB_API_KEY or ~/.netrc): logging offline"


#: a wandb run id as ppo_dict writes it (wandb's ``generate_id``: 8 lowercase letters and digits), or one a user set
#: with ``WANDB_RUN_ID`` (wandb refuses ``/``, ``\``, ``#``, ``?``, ``%``, ``:`` in an id): letters, digits, ``_``, ``-``
WANDB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def read_wandb_id(path: str) -> str:
    """The wandb run id in ``path`` (never through a link, at most 256 bytes), checked to be one wandb takes
    (``ValueError`` otherwise: a path or other characters would reach wandb's own file names)."""
    text = read_capped(path, 256, "a wandb_run_id", follow=False).decode(errors="replace").strip()
    if not WANDB_ID.match(text):
        raise ValueError(f"{path}: {text[:40]!r} is not a wandb run id (1 to 64 letters, digits, '_' or '-')")
    return text


class WandbTracker:
    """One wandb run for a training run: config, every dump, eval videos, the sync command.

    The run id is kept in ``RUN_DIR/wandb_run_id`` so that ``--resume`` continues the same run.
    Under a sweep agent (``WANDB_SWEEP_ID``/``WANDB_RUN_ID`` set) wandb.init takes the run id and
    sweep from the environment, so no id is passed and the run joins its sweep.
    """

    ID_FILE = "wandb_run_id"

    def __init__(self, cfg: Any, run_dir: str, resuming: bool, log: TextIO = STDERR):
        import wandb  # only when --project is set

        from ppo_dict.core.files import config_values

        self.wandb, self.log = wandb, log
        mode, why = resolve_wandb_mode(cfg.wandb_mode)
        id_path = os.path.join(run_dir, self.ID_FILE)
        run_id: Optional[str] = None
        if "WANDB_RUN_ID" not in os.environ:
            if resuming and entry_kind(id_path):
                run_id = read_wandb_id(id_path)  # checked before the run took its directory: this reads what was checked
            else:
                from wandb.sdk.lib.runid import generate_id

                run_id = generate_id()
        kwargs: dict[str, Any] = dict(
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group,
            tags=list(cfg.tags) or None,
            name=cfg.run_name or os.path.basename(os.path.normpath(run_dir)),
            config=config_values(cfg),
            dir=os.environ.get("WANDB_DIR") or run_dir,
            id=run_id,
            resume="allow" if run_id else None,
        )
        if mode is not None:
            kwargs["mode"] = mode
        print(f"wandb: {why}", file=log, flush=True)
        self.run = wandb.init(**kwargs)
        if run_id is not None:
            atomic_write(id_path, lambda f: f.write(run_id), mode="w")
        # Every key is plotted against env steps, also across a resume (wandb's own step would restart).
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)

    def __call__(self, values: dict[str, Any], step: int) -> None:
        self.run.log(
            {**{k: v for k, v in scalars(values).items() if not (isinstance(v, float) and math.isnan(v))}, STEP: step}
        )

    def log_video(self, path: str, step: int) -> None:
        self.run.log({"eval/video": self.wandb.Video(path, format="mp4"), STEP: step})

    def finish(self, exit_code: int) -> None:
        offline = self.run.settings.mode == "offline" or getattr(self.run.settings, "_offline", False)
        sync_dir = self.run.settings.sync_dir
        self.run.finish(exit_code=exit_code)
        if offline:
            print(f"wandb: logged offline; upload with:\n  wandb sync {sync_dir}", flush=True)


# ----------------------------------------------------------------------------------------------
# TensorBoard


def next_tensorboard_dir(root: str, name: str = "PPO", reuse_latest: bool = False) -> str:
    """``root/PPO_<n>``: n one more than the newest (sb3's ``get_latest_run_id``), or the newest to continue."""
    pattern = re.compile(rf"^{re.escape(name)}_(\d+)$")
    ids = [int(m.group(1)) for d in (os.listdir(root) if os.path.isdir(root) else []) if (m := pattern.match(d))]
    latest = max(ids, default=0)
    return os.path.join(root, f"{name}_{latest if reuse_latest and latest else latest + 1}")


class TensorBoardWriter:
    """Scalars to TensorBoard event files (``torch.utils.tensorboard``, needs the tensorboard package)."""

    def __init__(self, root: str, resuming: bool):
        from torch.utils.tensorboard import SummaryWriter  # only with --tensorboard_log

        self.log_dir = next_tensorboard_dir(root, reuse_latest=resuming)
        self.writer = SummaryWriter(log_dir=self.log_dir)

    def __call__(self, values: dict[str, Any], step: int) -> None:
        for key, value in scalars(values).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
