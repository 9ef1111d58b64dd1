"""What the model-server loops share: the refusal to run where compile does
nothing, and the measured cycles."""

import gc
import os
import shutil
import subprocess
import sys

import mlx.core as mx


def refuse_without_compile():
    """On CPU, mx.compile does nothing unless `g++ --version` works; without
    it the leak cannot show, so a run would prove nothing."""
    if os.environ.get("MLX_DISABLE_COMPILE"):
        sys.exit("refusing to run: MLX_DISABLE_COMPILE is set, so mx.compile does nothing")
    if shutil.which("g++") is None or subprocess.run(
        ["g++", "--version"], capture_output=True
    ).returncode != 0:
        sys.exit("refusing to run: `g++ --version` fails, so MLX's CPU backend compiles nothing")


def settle():
    gc.collect()
    mx.synchronize()
    mx.clear_cache()


def measure(cycle, cycles):
    """Runs `cycle(i)` (which returns the digest of its outputs) `cycles`
    times and prints, per cycle, the growth of MLX's active memory:

        cycle <i> retained_bytes <b> total_bytes <t> digest <d>

    `retained_bytes` is that cycle's growth, `total_bytes` the growth since
    the first cycle began."""
    settle()
    start = mx.get_active_memory()
    for i in range(cycles):
        settle()
        before = mx.get_active_memory()
        d = cycle(i)
        settle()
        after = mx.get_active_memory()
        print(
            f"cycle {i} retained_bytes {after - before} "
            f"total_bytes {after - start} digest {d}",
            flush=True,
        )
