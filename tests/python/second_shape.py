"""The report's side note: does a second compiled input shape for the same
function cost another copy of the captured weights? The report's forward
pass over 24 MiB of evaluated weights, compiled, called with one batch size
and then with a second one; active memory while the model is alive, then
after it is dropped.

    python second_shape.py [--shapes N] [--cycles N]

Prints, per cycle, `cycle <i> live_one <bytes> live_all <bytes> cache_one
<bytes> cache_all <bytes> traces <n> retained_bytes <bytes>`: the active
memory after the first shape's call and after every shape's call, MLX's
buffer cache (freed buffers kept for reuse, which a process footprint
counts and active memory does not) at the same two points, how many times
the function was traced, and what the cycle left behind once everything was
dropped.
"""

import argparse
import gc

import mlx.core as mx

BLOCKS, DIM, BATCH = 24, 512, 8


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", type=int, default=2)
    p.add_argument("--cycles", type=int, default=3)
    args = p.parse_args()

    inputs = [mx.random.normal((BATCH * (i + 1), DIM), key=mx.random.key(0)) for i in range(args.shapes)]
    mx.eval(inputs)
    for cycle in range(args.cycles):
        mx.clear_cache()
        mx.synchronize()
        base = mx.get_active_memory()
        weights = [mx.random.normal((DIM, DIM), key=mx.random.key(1 + i)) for i in range(BLOCKS)]
        mx.eval(weights)
        traces = [0]

        def forward(x):
            traces[0] += 1
            for w in weights:
                a, b = mx.split(x @ w, 2, axis=-1)
                x = mx.concatenate([b, a], axis=-1)
            return x

        fn = mx.compile(forward)
        live, cache = [], []
        for x in inputs:
            out = fn(x)
            mx.eval(out)
            del out
            mx.synchronize()
            live.append(mx.get_active_memory() - base)
            cache.append(mx.get_cache_memory())
        # Each shape again: replayed from its cache entry, not traced again.
        for x in inputs:
            mx.eval(fn(x))
        del fn, forward, weights
        gc.collect()
        mx.synchronize()
        retained = mx.get_active_memory() - base
        print(
            f"cycle {cycle} live_one {live[0]} live_all {live[-1]} cache_one {cache[0]} cache_all {cache[-1]} "
            f"traces {traces[0]} retained_bytes {retained}",
            flush=True,
        )


if __name__ == "__main__":
    main()
