import gc
import mlx.core as mx

BLOCKS, DIM, BATCH = 24, 512, 8          # 24 MiB of "weights"
x0 = mx.random.normal((BATCH, DIM)); mx.eval(x0)

def make_forward(weights):
    def forward(x):
        for w in weights:
            h = x @ w
            a, b = mx.split(h, 2, axis=-1)          # <-- multi-output primitive
            x = mx.concatenate([b, a], axis=-1)
        return x
    return forward

for cycle in range(10):
    mx.synchronize(); base = mx.get_active_memory()

    weights = [mx.random.normal((DIM, DIM)) for _ in range(BLOCKS)]
    fwd = make_forward(weights)

    mx.eval(weights)                                # <-- evaluated OUTSIDE the compiled function

    fn = mx.compile(fwd)
    out = fn(x0); mx.eval(out); del out

    del fn, fwd, weights
    gc.collect()

    mx.synchronize()
    print(cycle, (mx.get_active_memory() - base) // (1024 * 1024), "MiB retained")
