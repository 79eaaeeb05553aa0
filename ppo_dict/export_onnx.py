"""Export a trained model's deterministic policy to ONNX and check it against ppo_dict.

``python -m ppo_dict.export_onnx RUN_DIR|FILE``; the graph is ``ppo_dict.interop.onnx``'s. The file is
written atomically: Ctrl-C / SIGTERM ends the export cleanly at any point (``ppo_dict.run.startup``: exit
130 / 143, one line, no traceback) and leaves an existing ``--out`` as it was.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

from ppo_dict.run import startup

#: what a stop signal does to an export (``ppo_dict.run.startup``)
STOPPED = "while exporting: stopped; nothing was written"

if __name__ == "__main__":  # before the imports below take their seconds: a stop signal then ends the start cleanly
    startup.exit_on_stop_signals(STOPPED)

import torch  # noqa: E402 (after the start-up signal handlers)

from ppo_dict.algo.model import Model
from ppo_dict.core.errors import CheckpointError, ExportError
from ppo_dict.core.files import output_problem
from ppo_dict.interop.onnx import OPSET, check_onnx, export_onnx
from ppo_dict.run.checkpoint import model_file
from ppo_dict.run.cli import Option, command_parser


def main(argv: Optional[list[str]] = None) -> int:
    startup.imported()
    parser = command_parser(
        "python -m ppo_dict.export_onnx",
        __doc__,
        [
            Option(
                ("source",),
                "a run directory (its best model, else its newest checkpoint), or a model file",
                kwargs={"metavar": "RUN_DIR|FILE"},
            ),
            Option(("--model",), "in a run directory: best | last", "best"),
            Option(("--out",), "the ONNX file to write", None, "None: RUN_DIR/policy.onnx, or FILE with .onnx"),
            Option(("--opset",), "ONNX opset version", OPSET, kwargs={"type": int}),
            Option(
                ("--check",),
                "compare with ppo_dict on this many sampled observations (with random masks for a model trained "
                "with --action_masks, random LSTM states and episode starts for a recurrent one; 0: no check)",
                256,
                kwargs={"type": int},
            ),
        ],
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        if os.path.isdir(args.source):
            path, default_out = model_file(args.source, args.model), os.path.join(args.source, "policy.onnx")
        else:
            path, default_out = args.source, os.path.splitext(args.source)[0] + ".onnx"
        out = args.out or default_out
        problem = output_problem("out", out, directory=False)
        if problem:  # judged before the model is loaded: nothing is written where it cannot be
            raise ExportError(problem)
        model = Model.from_file(path)  # loaded once, for the export and the check
        export_onnx(path, out, args.opset, model=model)
    except (CheckpointError, ExportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result: dict[str, Any] = {"model": path, "onnx": out, "opset": args.opset}
    if args.check > 0:
        try:
            result["check"] = check_onnx(out, model, args.check)
        except ImportError:
            result["check"] = "skipped: onnxruntime is not installed"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
