"""Command lines for the fuzz tests, drawn from the config's own metadata: each field's parser, range
and choices give its good values and its bad ones (negative, zero, huge, wrong type, empty,
malformed schedules and architectures, unknown env ids and packages, contradictory layouts,
absurd sizes).

:func:`command_lines` draws a command line (a list of flags); :func:`run_in_process` runs
``main_ppo.main`` on it in this process and says what it returned and printed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import multiprocessing
import os
import signal
import stat
import threading
import warnings
import zipfile
from typing import Any, Callable, Optional

from hypothesis import strategies as st

from ppo_dict.core.config import FIELDS, RECURRENT_MODELS, problem_setting
from ppo_dict.core.fields import reads_bool
from ppo_dict.core.parse import parse_kwargs, parse_lstm_kwargs, parse_packages, parse_schedule
from ppo_dict.run.cli import COMMAND_LINE_FLAGS

#: Cheap envs to build (a probe builds one), with packages that register some; and names that are not envs.
GOOD_ENVS = ("gym_CartPole-v1", "gym_Pendulum-v1", "Acrobot-v1", "test_dummy", "gym_PPODictToy-v0", "PPODictMaskedJump-v0")
BAD_ENVS = (
    "gym_Hoper-v5",
    "gym_CartPole-v9",
    "",
    "gym_",
    "Hoper-v5",
    "gym_ALE/NoSuchGame-v5",
    "godot",
    "gym_NoSuchEnv-v0",
    "no_module:Env-v0",
)
GOOD_PACKAGES = ("ppo_dict.envs.toy", "ppo_dict.envs.masked", "ppo_dict.envs.goal")
BAD_PACKAGES = ("no_such_package_xyz", "ppo_dict.no_such_module", "1bad name")
#: Fields not drawn: the env (drawn apart), and what would reach outside this machine or block
#: (``project`` starts a wandb run; the path fields are drawn as paths under a temporary folder).
NOT_DRAWN = ("env", "gym_packages", "project", "entity", "group", "run_name")
PATH_FIELDS = ("save_path", "export_sb3", "hyperparams", "run_dir", "resume", "trained_agent", "tensorboard_log")
#: Settings that make a real run slow or large: kept small when a run is started for real.
SMALL = {
    "n_steps": (8, 256),
    "n_envs": (1, 8),
    "num_workers": (0, 4),
    "envs_per_worker": (1, 4),
    "batch_size": (2, 256),
    "n_epochs": (1, 4),
    "total_timesteps": (64, 5000),
    "frame_stack": (1, 4),
    "eval_episodes": (1, 2),
    "video_length": (1, 50),
    "keep_checkpoints": (1, 3),
    "torch_threads": (1, 2),
    "update_threads": (1, 2),
    "lstm_hidden_size": (1, 64),
    "n_lstm_layers": (1, 2),
}
#: The flags of a recurrent run (the config's "recurrent" group), drawn together with a recurrent model a quarter of the time.
LSTM_FIELDS = tuple(name for name, f in FIELDS.items() if f.metadata["group"] == "recurrent")

WRONG_TYPE = ("abc", "", " ", "1.5", "1e3", "nan", "inf", "-inf", "True", "None", "0x10", "1,2", "[1]", "{", "'", "\\")
HUGE = (10**6, 10**9, 10**12, 10**30, 2**63, -(10**9))


def number_values(name: str, lo: float, hi: float, integer: bool, good_only: bool) -> st.SearchStrategy[str]:
    """Text for a bounded number: inside the range (small where a real run must stay small), on its
    edges, just outside, and (unless ``good_only``) huge, negative and not numbers at all."""
    if name in SMALL:
        lo, hi = max(lo, SMALL[name][0]), min(hi, SMALL[name][1])
    top = hi if math.isfinite(hi) else (lo if math.isfinite(lo) else 0) + 1000
    bottom = lo if math.isfinite(lo) else -1000
    good = st.integers(int(math.ceil(bottom)), int(top)) if integer else st.floats(bottom, top, allow_nan=False)
    if good_only:
        return good.map(str)
    edges = [bottom - 1, bottom, top, top + 1, 0, -1] if integer else [bottom - 0.5, bottom, top, top + 0.5, 0.0, -1.0, 1e308]
    return st.one_of(
        good.map(str), st.sampled_from(edges).map(str), st.sampled_from(HUGE).map(str), st.sampled_from(WRONG_TYPE)
    )


def field_values(f: dataclasses.Field, folder: str, good_only: bool = False) -> st.SearchStrategy[Optional[str]]:
    """Text for ``--<field>`` (None: the flag alone, as a boolean may be given), from its metadata."""
    parse, bounds, choices = f.metadata["parse"], f.metadata["range"], f.metadata["choices"]
    if f.name in PATH_FIELDS:
        return path_values(f.name, folder, good_only)
    if reads_bool(parse):
        good = st.sampled_from([None, "True", "False", "true", "0", "1", "yes"] + (["None"] if f.default is None else []))
        return good if good_only else st.one_of(good, st.sampled_from(["maybe", "", "2", "Truee", "none"]))
    if choices:
        good = st.sampled_from(choices + (("None",) if f.default is None else ()))
        return good if good_only else st.one_of(good, st.sampled_from(["", "bogus", choices[0].upper(), choices[0] + " "]))
    if f.name == "net_arch":
        return net_arch_values(good_only)
    if parse is parse_schedule or getattr(parse, "__name__", "") == "parse_schedule":
        return schedule_values(f.name, bounds, good_only)
    if parse is parse_kwargs:
        return kwargs_values(good_only)
    if parse is parse_lstm_kwargs:  # its keys refused out of a recurrent model: empty ones are the good values anywhere
        good = st.sampled_from(["{}", "dict()"])
        return (
            good
            if good_only
            else st.one_of(good, st.sampled_from(["dict(dropout=0.1)", "dict(bidirectional=True)", "dict(dropout=2)", "[1]"]))
        )
    if parse is parse_packages:
        good = st.sampled_from(["", "is_success", "distance", "a,b"])
        return good if good_only else st.one_of(good, st.sampled_from(["r", "a,a", "l,t", ",", "x y x"]))
    if f.name == "device":
        good = st.sampled_from(["auto", "cpu"])
        return (
            good
            if good_only
            else st.one_of(good, st.sampled_from(["cuda", "cuda:0", "cuda:x", "gpu", "", "cpu:0", "cuda:99"]))
        )
    if bounds is not None:
        integer = (
            isinstance(f.default, int) and not isinstance(f.default, bool) or (f.default is None and "int" in str(f.type))
        )
        values = number_values(f.name, bounds[0], bounds[1], integer, good_only)
        return st.one_of(values, st.just("None")) if f.default is None else values
    return st.sampled_from(["0", "1", "2", "-3", "abc", ""]) if not good_only else st.sampled_from(["0", "1"])


#: Inputs :func:`prepare_folder` writes: YAML files that attack the reader (an alias bomb, an alias inside its own
#: anchor, a document nested 5000 deep, a policy that is a list), a finished run's directory, a directory without write
#: permission; and the file and folder cases of issue 50: a FIFO (opened for reading, it waits for a writer), a zip
#: whose data entry declares far more than a model holds, and run directories whose own files lead elsewhere or hang.
YAML_FILES = ("bad.yml", "bomb.yml", "recursive.yml", "deep.yml", "policy_list.yml")
EARLIER_RUN, READ_ONLY = "earlier_run", "read_only"
FIFO, BOMB_ZIP, VICTIM = "a_fifo", "bomb.zip", "victim.txt"
#: run directories no run may write: a FIFO .lock, a .lock linked to a file outside, a .lock that is a folder, an earlier
#: run whose checkpoints/ is a link to another folder and whose progress.csv is linked to a file outside
HOSTILE_RUNS = ("fifo_lock_run", "symlink_lock_run", "dir_lock_run", "linked_run")


def path_values(name: str, folder: str, good_only: bool) -> st.SearchStrategy[str]:
    """Paths under ``folder``: not there yet (fine for outputs), a file where a folder goes, missing inputs,
    and the file-system cases: an earlier run's directory, a folder without write permission, a name
    longer than the file system takes, a path under a file, hostile YAML."""
    outputs = ("save_path", "run_dir", "tensorboard_log")
    fresh = st.sampled_from([f"{folder}/{name}_new", f"{folder}/nested/{name}"])
    if good_only:
        return fresh if name in outputs else st.just("None")
    return st.one_of(fresh, st.sampled_from(hostile_paths(name, folder)))


def hostile_paths(name: str, folder: str) -> list[str]:
    """The file-system cases :func:`path_values` draws for the path setting ``name`` (the inputs
    :func:`prepare_folder` makes under ``folder``)."""
    bad = [
        f"{folder}/a_file",
        f"{folder}/missing.zip",
        "",
        "None",
        f"{folder}",
        f"{folder}/a_file/below",
        f"{folder}/{'x' * 300}",
        f"{folder}/{READ_ONLY}/{name}",
        f"{folder}/{EARLIER_RUN}",
        f"{folder}/{FIFO}",
    ]
    if name == "resume":
        bad += ["auto", f"{folder}/{EARLIER_RUN}/checkpoints/checkpoint_000000000064.pt"]
    if name in ("resume", "run_dir"):
        bad += [f"{folder}/{run}" for run in HOSTILE_RUNS]
    if name == "trained_agent":
        bad += [f"{folder}/{BOMB_ZIP}"]
    if name == "hyperparams":
        bad += ["rl_zoo3", *(f"{folder}/{file}" for file in YAML_FILES)]
    return bad


#: The path fields a run reads (the rest it writes).
INPUT_FIELDS = ("hyperparams", "resume", "trained_agent")


def unusable_paths(argv: list[str], folder: str) -> list[str]:
    """``setting=path`` for each path in ``argv`` that no run can use, whatever else it is given, so that
    its command line must be refused: a path below a file, a name longer than the file system takes,
    and for a file the run reads also one that is missing, one that is not what it should be (a plain
    text file, a checkpoint that is not one) and hostile or broken YAML (:func:`path_values` draws them)."""
    always = {f"{folder}/a_file/below", f"{folder}/{'x' * 300}"}
    unreadable = {
        f"{folder}/missing.zip",
        f"{folder}/a_file",
        f"{folder}/{EARLIER_RUN}/checkpoints/checkpoint_000000000064.pt",
        *(f"{folder}/{file}" for file in YAML_FILES),
        f"{folder}/{FIFO}",
        f"{folder}/{BOMB_ZIP}",
    }
    unwritable = {f"{folder}/{run}" for run in HOSTILE_RUNS} | {f"{folder}/{FIFO}"}  # as a run directory
    found = []
    for flag, value in zip(argv, argv[1:]):
        name = flag[2:]
        if (
            flag.startswith("--")
            and name in PATH_FIELDS
            and (
                value in always
                or (name in INPUT_FIELDS and value in unreadable)
                or (name in ("run_dir", "resume") and value in unwritable)
            )
        ):
            found.append(f"{name}={value}")
    return found


def net_arch_values(good_only: bool) -> st.SearchStrategy[str]:
    good = st.sampled_from(["64,64", "32", "pi=32,32;vf=16", "[16, 16]", "dict(pi=[8], vf=[8])", "[]", "None", "pi=;vf=8"])
    if good_only:
        return good
    bad = st.sampled_from(
        [
            "64,,64",
            "64,64,",
            ",64",
            "0",
            "-1",
            "64,abc",
            "[",
            "pi=1;pi=2",
            "dict(pi=64)",
            "[True]",
            "100000,100000",
            "1000000",
            "qf=32",
            "64;64",
            "{'pi': [8], 'vf': 8}",
            "__import__('os')",
        ]
    )
    widths = st.lists(st.integers(-2, 10**7), min_size=0, max_size=4).map(lambda sizes: ",".join(map(str, sizes)))
    return st.one_of(good, bad, widths)


def schedule_values(name: str, bounds: Optional[tuple], good_only: bool) -> st.SearchStrategy[str]:
    good = st.sampled_from(["3e-4", "lin_3e-4", "0.1", "lin_0.2", "1e-5"])
    if good_only:
        return good
    return st.one_of(
        good,
        st.sampled_from(
            [
                "lin_",
                "lin_abc",
                "lin_-1",
                "lin_nan",
                "lin_inf",
                "-0.1",
                "0",
                "nan",
                "abc",
                "lin-0.1",
                "LIN_0.1",
                "",
                "lin_1e999",
            ]
        ),
    )


def kwargs_values(good_only: bool) -> st.SearchStrategy[str]:
    good = st.sampled_from(["{}", "dict()", ""])
    if good_only:
        return good
    return st.one_of(
        good,
        st.sampled_from(
            [
                "{",
                "dict(",
                "{1: 2}",
                "dict(no_such_option=1)",
                "[]",
                "None",
                "dict(a=)",
                "x",
                "dict(image_size=8)",
                "dict(image_size=-1)",
                "{'a' 1}",
                "[" * 300,
            ]
        ),
    )


@st.composite
def command_lines(draw: Callable, folder: str, good_only: bool = False, max_flags: int = 8) -> list[str]:
    """A command line: an env, packages, and up to ``max_flags`` other flags of the config. Unless
    ``good_only``, a third of the lines hold only good values and the rest a bad value in one draw of five."""
    bad_odds = 0 if good_only or draw(st.integers(0, 2)) == 0 else 5

    def bad() -> bool:
        return bad_odds > 0 and draw(st.integers(1, bad_odds)) == 1

    env = draw(st.sampled_from(BAD_ENVS if bad() else GOOD_ENVS))
    argv = ["--env", env]
    if env.removeprefix("gym_").startswith("PPODict") or draw(st.booleans()):
        argv += ["--gym_packages", *(p for p in GOOD_PACKAGES if p.rsplit(".", 1)[1] in ("toy", "masked"))]
    if bad():
        argv += ["--gym_packages", draw(st.sampled_from(BAD_PACKAGES))]
    names = draw(st.lists(st.sampled_from([n for n in FIELDS if n not in NOT_DRAWN]), max_size=max_flags, unique=True))
    if draw(st.integers(0, 3)) == 0:  # a recurrent run: its model, and its LSTM flags (bad ones too: given with another model)
        model = draw(st.sampled_from(RECURRENT_MODELS + (("mlp",) if bad() else ())))
        argv += ["--model", model]
        names = [n for n in names if n != "model"] + [
            n for n in draw(st.lists(st.sampled_from(LSTM_FIELDS), unique=True)) if n not in names
        ]
    for name in names:
        value = draw(field_values(FIELDS[name], folder, good_only=not bad()))
        argv += [f"--{name}"] + ([] if value is None else [value])
    return argv


def prepare_folder(folder: str) -> None:
    """The inputs :func:`path_values` names: a plain file, YAML files that are not rl-zoo's (one broken,
    three hostile: :data:`YAML_FILES`), an earlier run's directory (its config, log and a checkpoint
    that is not one) and a folder without write permission (refused unless the tests run as root)."""
    os.makedirs(folder, exist_ok=True)
    laughs = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
    texts = {
        "a_file": "not a directory\n",
        "bad.yml": "CartPole-v1: [unclosed\n",
        "bomb.yml": "\n".join(laughs) + "\nCartPole-v1:\n  n_steps: *i\nPendulum-v1:\n  policy_kwargs: *i\ndefault:\n"
        "  gamma: *i\n",
        "recursive.yml": "CartPole-v1: &loop\n  n_steps: 8\n  again: [*loop]\ndefault: &d [*d]\n",
        "deep.yml": "default: " + "[" * 5000 + "]" * 5000 + "\n",
        f"{EARLIER_RUN}/config.json": "{}\n",
        f"{EARLIER_RUN}/progress.csv": "step\n64\n",
        f"{EARLIER_RUN}/checkpoints/checkpoint_000000000064.pt": "not a checkpoint\n",
        "policy_list.yml": "CartPole-v1:\n  policy: [MlpPolicy]\n  n_steps: [8]\n",
        VICTIM: "someone's file\n",
        "dir_lock_run/.lock/x": "",
        "linked_run/config.json": "{}\n",
    }
    for name, text in texts.items():
        os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    os.makedirs(os.path.join(folder, READ_ONLY), exist_ok=True)
    os.chmod(os.path.join(folder, READ_ONLY), 0o555)
    os.mkfifo(os.path.join(folder, FIFO))
    os.makedirs(os.path.join(folder, "fifo_lock_run"))
    os.mkfifo(os.path.join(folder, "fifo_lock_run", ".lock"))
    os.makedirs(os.path.join(folder, "symlink_lock_run"))
    os.symlink(os.path.join(folder, VICTIM), os.path.join(folder, "symlink_lock_run", ".lock"))
    os.symlink(os.path.join(folder, EARLIER_RUN, "checkpoints"), os.path.join(folder, "linked_run", "checkpoints"))
    os.symlink(os.path.join(folder, VICTIM), os.path.join(folder, "linked_run", "progress.csv"))
    with zipfile.ZipFile(os.path.join(folder, BOMB_ZIP), "w") as archive:  # 80 MiB of zeros, deflated to 80 KiB
        with archive.open(deflated("data"), "w", force_zip64=True) as f:
            for _ in range(80):
                f.write(bytes(2**20))


def deflated(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def folder_bytes(folder: str) -> dict[str, Any]:
    """``{relative path: its bytes, or its mode for a folder, a FIFO or a link (and where the link leads)}`` for
    everything under ``folder``, no link followed and no FIFO opened: a command refused or dry-run changes none of it."""
    found: dict[str, Any] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    found[os.path.relpath(path, folder)] = f.read()
            else:
                found[os.path.relpath(path, folder)] = (
                    info.st_mode,
                    os.readlink(path) if stat.S_ISLNK(info.st_mode) else None,
                )
    return found


@dataclasses.dataclass
class Outcome:
    code: Any
    out: str
    err: str


def resident_mb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


class MemoryGuard:
    """Ends this process (SIGKILL, after naming ``what`` on stderr) if its resident memory grows by
    more than ``limit_mb`` while the guard is on: a command line that makes the check itself allocate
    without bound must fail the test, not bring the machine's OOM killer."""

    def __init__(self, what: Any, limit_mb: int = 3000):
        self.what, self.limit = what, resident_mb() + limit_mb
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self.done.wait(0.01):
            if resident_mb() > self.limit:
                os.write(2, f"\nmemory guard: over {self.limit} MB resident while checking {self.what}\n".encode())
                os.kill(os.getpid(), signal.SIGKILL)

    def __enter__(self) -> "MemoryGuard":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.done.set()
        self.thread.join()


def run_in_process(argv: list[str], seconds: int = 60) -> Outcome:
    """``main_ppo.main(argv)`` here, with its output captured, a deadline (SIGALRM: a hang fails) and
    a :class:`MemoryGuard`."""
    from ppo_dict import main_ppo

    def hung(signum: int, frame: Any) -> None:
        raise TimeoutError(f"main did not return within {seconds} s: {argv}")

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        with MemoryGuard(argv), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sb3's truncated-minibatch warning and gymnasium's notes
            try:
                code: Any = main_ppo.main(argv)
            except SystemExit as exc:  # argparse: an unknown flag, a flag without its value
                code = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return Outcome(code, out.getvalue(), err.getvalue())


def refusal_problems(err: str) -> list[str]:
    """The problem lines of a ConfigError's message (``  - setting=...: why``)."""
    return [line[4:] for line in err.splitlines() if line.startswith("  - ")]


def assert_clean_outcome(outcome: Outcome, argv: list[str], unusable: tuple[str, ...] = ()) -> None:
    """Refused with exit 2 and a message naming settings, or accepted by --dry_run with exit 0; never a traceback.
    ``unusable``: paths in ``argv`` no run can use (:func:`unusable_paths`): then only a refusal will do."""
    text = outcome.out + outcome.err
    assert "Traceback" not in text, f"{argv}\n{text}"
    assert outcome.code in (0, 2), f"exit {outcome.code!r} for {argv}\n{text}"
    assert not (outcome.code == 0 and unusable), f"accepted though no run can use {unusable}: {argv}\n{text}"
    if outcome.code == 0:  # (the first run to record video in this process says which OpenGL backend it chose, first)
        plan = outcome.out.split("\n", 1)[1] if outcome.out.startswith("rendering with MUJOCO_GL=") else outcome.out
        assert plan.startswith("dry run: the config passes every check"), f"{argv}\n{text}"
        return
    if "error: argument --" in outcome.err or "unrecognized arguments" in outcome.err:
        return  # argparse's one line, naming the flag
    problems = refusal_problems(outcome.err)
    # before the refusal: only warnings (a checkpoint that does not load)
    said = outcome.err.partition("error: ")[0].splitlines()
    assert "error: " in outcome.err and all(line.startswith("warning: ") for line in said) and problems, f"{argv}\n{text}"
    unnamed = [
        p
        for p in problems
        if problem_setting(p) not in FIELDS
        and problem_setting(p) not in COMMAND_LINE_FLAGS
        and problem_setting(p) != "dry_run"
    ]
    assert not unnamed, f"problems that name no setting: {unnamed}\nfor {argv}"


def child_processes() -> list[int]:
    """This process's live children (multiprocessing's helpers aside: they exit with it)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if (
            int(fields[1]) == os.getpid()
            and fields[0] != "Z"
            and b"forkserver" not in cmdline
            and b"resource_tracker" not in cmdline
        ):
            found.append(int(pid))
    return found + [p.pid for p in multiprocessing.active_children() if p.pid not in found]
