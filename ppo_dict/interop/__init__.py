"""Other tools' formats: sb3's zip and ``VecNormalize`` pickle (``sb3``), continuing an sb3 zip
(``trained_agent``), rl-zoo's hyperparameter files (``hyperparams``) and ONNX (``onnx``).
Imports ``algo`` and below.
"""
