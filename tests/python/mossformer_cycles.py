"""The report's recipe on its own model, MossFormer2_SE, one process's worth.

Each cycle builds mlx-audio's MossFormer2_SE network (`TestNet`, 210.8 MiB
of float32 weights) with fresh random weights, evaluates them outside the
compiled forward pass, calls the compiled forward once on a few frames,
evaluates the output, drops everything and collects garbage. It prints one
JSON object per cycle:

    {"cycle": i, "retained_bytes": b, "seconds": s, "live_descs": n}

`retained_bytes` is what the cycle left in MLX's active memory.
`live_descs` is the live ArrayDesc count where the library was built with
the fork's census (patch 0002), else null. Runs are independent only across
processes: the driver (`cargo xtask real-model`) starts many.

The switches are the candidates for what decides a leak:
  --gc-off        Python's collector disabled during a cycle (collected at
                  its end, so the compiled function dies inside gc.collect)
  --erase         the compiled function and its cache entry erased
                  explicitly before the model is dropped
  --slices        each `mx.split` replaced by two slices (the report's
                  ablation; same bits)
  --no-eval       the weights are not evaluated outside the compiled call
  --second-shape FRAMES
                  after the first call, a second at FRAMES frames: a second
                  entry in the compile cache. The record then has
                  `live_one` and `live_two`, MLX's active memory above the
                  cycle's start with one entry and with two, and `weights`
  --fixed-layout STRIDE
                  the main thread's C++ objects at fixed addresses
                  (tests/support/fixed_layout_preload.cpp, which must be
                  preloaded), with STRIDE x (seed of the cycle) bytes between
                  the model and its trace: each cycle its own layout, and a
                  process run again with the same seed repeats every one
"""

import argparse
import ctypes
import gc
import json
import sys
import time

import mlx.core as mx
from mlx.utils import tree_flatten

from serving import refuse_without_compile


def census(symbol="mlx_fork_live_array_descs"):
    """A count the library exports when built with a fork-only debug aid:
    the live ArrayDesc count (patch 0002), or the orphaned groups, else None."""
    for lib in _libmlx():
        fn = getattr(lib, symbol, None)
        if fn is not None:
            fn.restype = ctypes.c_longlong
            return fn()
    return None


_LIBS = None


def _libmlx():
    global _LIBS
    if _LIBS is None:
        _LIBS = []
        with open("/proc/self/maps") as f:
            paths = {l.split()[-1] for l in f if "libmlx" in l and "/" in l}
        for p in sorted(paths):
            try:
                _LIBS.append(ctypes.CDLL(p))
            except OSError:
                pass
    return _LIBS


def use_slices():
    """The report's ablation: `split(x, 2, axis)` as two slices."""

    def two_slices(a, indices_or_sections, axis=0, stream=None):
        if not isinstance(indices_or_sections, int):
            raise NotImplementedError("only equal halves are replaced")
        n = a.shape[axis] // indices_or_sections
        idx = [slice(None)] * a.ndim
        out = []
        for k in range(indices_or_sections):
            idx[axis] = slice(k * n, (k + 1) * n)
            out.append(a[tuple(idx)])
        return out

    mx.split = two_slices


def build(seed):
    from mlx_audio.sts.models.mossformer2_se.mossformer2_se_wrapper import TestNet

    mx.random.seed(seed)
    return TestNet()


def settle():
    gc.collect()
    mx.synchronize()
    mx.clear_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--seed", type=int, default=0, help="first cycle's weight seed")
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--gc-off", action="store_true")
    p.add_argument("--erase", action="store_true")
    p.add_argument("--slices", action="store_true")
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("--fixed-layout", type=int, metavar="STRIDE")
    p.add_argument("--second-shape", type=int, metavar="FRAMES")
    a = p.parse_args()

    layout = None
    if a.fixed_layout is not None:
        layout = ctypes.CDLL(None)
        if not hasattr(layout, "fixed_layout_start"):
            sys.exit("--fixed-layout needs the fixed-layout library preloaded (LD_PRELOAD)")

    refuse_without_compile()
    if a.slices:
        use_slices()
    x = mx.random.normal((1, a.frames, 180), key=mx.random.key(12345))
    mx.eval(x)
    settle()
    for i in range(a.cycles):
        settle()
        before = mx.get_active_memory()
        t0 = time.perf_counter()
        if a.gc_off:
            gc.disable()
        if layout is not None:
            layout.fixed_layout_start()
        net = build(a.seed + i)
        if not a.no_eval:
            mx.eval(net.parameters())
        if layout is not None:
            layout.fixed_layout_pad(ctypes.c_ulong(a.fixed_layout * (a.seed + i)))
        out = net(x)
        if layout is not None:
            layout.fixed_layout_stop()
        mx.eval(out)
        del out
        shapes = {}
        if a.second_shape is not None:
            mx.synchronize()
            shapes["live_one"] = mx.get_active_memory() - before
            x2 = mx.random.normal((1, a.second_shape, 180), key=mx.random.key(54321))
            out = net(x2)
            mx.eval(out)
            del out, x2
            mx.synchronize()
            shapes["live_two"] = mx.get_active_memory() - before
            shapes["weights"] = sum(v.nbytes for _, v in tree_flatten(net.parameters()))
        if a.erase:
            del net._forward_compiled
        del net
        if a.gc_off:
            gc.enable()
        settle()
        after = mx.get_active_memory()
        rec = {
            "cycle": i,
            "retained_bytes": after - before,
            "seconds": round(time.perf_counter() - t0, 3),
            "live_descs": census(),
            "orphaned_groups": census("mlx_fork_orphans_dump"),
            **shapes,
        }
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    sys.exit(main())
