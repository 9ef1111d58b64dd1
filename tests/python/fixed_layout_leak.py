"""crates/probes/cpp/fixed_layout_leak.cpp in Python (finding 013).

A model shaped like MossFormer2_SE's attention block (token shift and the
v/u split, each with `mx.split`) is built, evaluated outside its compiled
forward, run once and dropped, once per layout. The main thread's C++
objects come from a fixed region (tests/support/fixed_layout_preload.cpp,
which must be preloaded), and each layout leaves `pad` more bytes between
the weights and the traced graph. On MLX 0.32.2 the layouts that leak are
the same in every run; on the fork, none leaks.

Output, one line per layout, then a summary:
    layout <pad> retained_bytes <n> digest <hex>
    summary layouts <n> leaked <k> leaked_set <hex> digest <hex>
"""

import argparse
import ctypes
import gc
import hashlib
import sys

import mlx.core as mx

from serving import refuse_without_compile


def halves(h, split):
    if split:
        return mx.split(h, 2, axis=-1)
    n = h.shape[-1] // 2
    return h[..., :n], h[..., n:]


def block(x, w, split):
    shift, keep = halves(x, split)
    b, t, c = shift.shape
    shifted = mx.concatenate([mx.zeros((b, 1, c)), shift[:, :-1, :]], axis=1)
    normed = mx.concatenate([shifted, keep], axis=-1)
    hidden = mx.sigmoid(normed @ w["to_hidden"])
    v, u = halves(hidden, split)
    qk = mx.sigmoid(normed @ w["to_qk"])
    q = qk * w["gamma"] + w["beta"]
    k = qk * w["beta"] + w["gamma"]
    att = mx.sigmoid(q @ mx.swapaxes(k, 1, 2))
    out = ((att @ u) * v) * mx.sigmoid((att @ v) * u)
    return x + out @ w["to_out"]


def weights(blocks, dim):
    ws = []
    for i in range(blocks):
        key = lambda j: mx.random.key(100 * i + j)
        ws.append(
            {
                "to_hidden": mx.random.normal((dim, 2 * dim), key=key(0)) * 0.1,
                "to_qk": mx.random.normal((dim, dim // 2), key=key(1)) * 0.1,
                "to_out": mx.random.normal((dim, dim), key=key(2)) * 0.1,
                "gamma": mx.random.normal((dim // 2,), key=key(3)),
                "beta": mx.random.normal((dim // 2,), key=key(4)),
            }
        )
    return ws


def cycle(layout, a, x, pad):
    layout.fixed_layout_start()
    ws = weights(a.blocks, a.dim)
    layout.fixed_layout_stop()
    mx.eval(ws)
    layout.fixed_layout_start()
    layout.fixed_layout_pad(ctypes.c_ulong(pad))

    def forward(h):
        for w in ws:
            h = block(h, w, not a.slices)
        return h

    fn = mx.compile(forward)
    out = fn(x)
    layout.fixed_layout_stop()
    mx.eval(out)
    d = hashlib.sha256(memoryview(out)).hexdigest()[:16]
    del out, fn, forward, ws
    gc.collect()
    return d


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", type=int, default=64)
    p.add_argument("--stride", type=int, default=16)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--blocks", type=int, default=24)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--slices", action="store_true")
    a = p.parse_args()
    if a.layouts <= 0 or a.stride < 0 or a.first < 0 or a.blocks <= 0:
        sys.exit("layouts and blocks must be positive, stride and first not negative")

    refuse_without_compile()
    layout = ctypes.CDLL(None)
    if not hasattr(layout, "fixed_layout_start"):
        sys.exit("the fixed-layout library is not preloaded (LD_PRELOAD)")
    x = mx.random.normal((1, 8, a.dim), key=mx.random.key(7))
    mx.eval(x)
    # One cycle outside the measured ones, for caches that fill once.
    digest = cycle(layout, a, x, 0)
    leaked, leaked_set = 0, hashlib.sha256()
    for i in range(a.layouts):
        pad = a.first + i * a.stride
        gc.collect()
        mx.synchronize()
        before = mx.get_active_memory()
        d = cycle(layout, a, x, pad)
        gc.collect()
        mx.synchronize()
        retained = mx.get_active_memory() - before
        if d != digest:
            sys.exit(f"layout {pad} computed other bits")
        if retained > 0:
            leaked += 1
            leaked_set.update(f"{pad},".encode())
        print(f"layout {pad} retained_bytes {retained} digest {d}", flush=True)
    print(
        f"summary layouts {a.layouts} leaked {leaked} "
        f"leaked_set {leaked_set.hexdigest()[:16]} digest {digest}",
        flush=True,
    )


if __name__ == "__main__":
    main()
