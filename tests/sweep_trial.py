"""A stand-in trial for the sweep tests: answers in a tenth of a second what ppo_dict.main_ppo answers in
seconds, a summary JSON line last (``{"metrics": {"score": ...}}``).

Flags as a wandb agent passes them (``--x=0.5``), plus ``--run_dir DIR`` (it writes ``DIR/pid``):
``--crash=True`` exits 1 with a traceback; ``--sleep_once=FILE`` sleeps for a minute unless FILE
exists (it creates it first), so that the first run of a trial can be killed and its retry completes.
"""

import json
import os
import sys
import time

flags = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--") and "=" in arg)
run_dir = sys.argv[sys.argv.index("--run_dir") + 1]
os.makedirs(run_dir, exist_ok=True)
with open(os.path.join(run_dir, "pid"), "w") as f:
    f.write(str(os.getpid()))
if flags.get("crash") == "True":
    raise RuntimeError("boom")
if "sleep_once" in flags and not os.path.exists(flags["sleep_once"]):
    open(flags["sleep_once"], "w").close()
    time.sleep(60)
x = float(flags.get("x", 0.0))
print(json.dumps({"metrics": {"score": -((x - 0.3) ** 2) + float(flags.get("bonus", 0.0))}, "pid": os.getpid()}))
