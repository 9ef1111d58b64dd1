"""The report's scenario with each ingredient switchable, through MLX's
Python API: split or two slices, weights evaluated outside or not, compiled
or eager. Weights and input come from fixed PRNG keys (the same as the C++
probe's), so the output digest is comparable across variants and APIs.

    python ablation.py [--cycles N] [--slices] [--no-eval-outside] [--no-compile]

Prints `cycle <i> retained_bytes <n> digest <hex>` per cycle.
"""

import argparse
import gc

import mlx.core as mx

BLOCKS, DIM, BATCH = 24, 512, 8


def digest(a):
    """FNV-1a over the output's float32 bytes, as the C++ probe computes it."""
    h = 1469598103934665603
    for byte in bytes(memoryview(a)):
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def make_forward(weights, split):
    def forward(x):
        for w in weights:
            h = x @ w
            if split:
                a, b = mx.split(h, 2, axis=-1)
            else:
                half = h.shape[-1] // 2
                a, b = h[..., :half], h[..., half:]
            x = mx.concatenate([b, a], axis=-1)
        return x

    return forward


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cycles", type=int, default=10)
    p.add_argument("--slices", action="store_true")
    p.add_argument("--no-eval-outside", action="store_true")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()

    x0 = mx.random.normal((BATCH, DIM), key=mx.random.key(0))
    mx.eval(x0)
    for cycle in range(args.cycles):
        mx.synchronize()
        base = mx.get_active_memory()
        weights = [mx.random.normal((DIM, DIM), key=mx.random.key(1 + i)) for i in range(BLOCKS)]
        fwd = make_forward(weights, not args.slices)
        if not args.no_eval_outside:
            mx.eval(weights)
        fn = fwd if args.no_compile else mx.compile(fwd)
        out = fn(x0)
        mx.eval(out)
        d = digest(out)
        del out, fn, fwd, weights
        gc.collect()
        mx.synchronize()
        print(f"cycle {cycle} retained_bytes {mx.get_active_memory() - base} digest {d:016x}", flush=True)


if __name__ == "__main__":
    main()
