"""A model server's load/unload loop on mlx-lm's own model classes.

Each cycle builds one of mlx-lm's models with random weights (no download),
evaluates its parameters, runs one cell's workload, and drops everything.
It prints, per cycle, what the cycle left behind in MLX's active memory:

    cycle <i> retained_bytes <b> total_bytes <t> digest <d>

`retained_bytes` is this cycle's growth, `total_bytes` the growth since the
first measured cycle began. As CPython's leak hunter does, it runs one cycle
first without measuring it, so caches that fill once (mlx-lm's module-level
compiled helpers, MLX's kernels) are not counted.

Cells (see `mlx_patched::ServerCell` for what each must show):
  quantized-prefill  a compiled prefill into a fresh QuantizedKVCache, whose
                     update calls mx.quantize (a multi-output op), returning
                     the logits and the cache's arrays
  kv-prefill         the same into a plain KVCache
  compiled-model     mx.compile(model), called on a prompt
  generate-step      mlx_lm.generate.generate_step for a few tokens
  trainer            mlx_lm.tuner.trainer.train for two steps

`--numerics` instead prints the digests of eager and compiled logits and
their largest difference. `--bench generate|prefill --iters N` prints the
nanoseconds N tokens of `generate_step`, or N compiled prefills, took after
a warm-up (the benchmark `cargo bench --bench variants` reads it).
"""

import argparse
import contextlib
import hashlib
import importlib
import os
import sys
import tempfile

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from loaded_libmlx import loaded_libmlx
from serving import measure, refuse_without_compile

ARCHS = ("phi3", "llama")
CELLS = (
    "quantized-prefill",
    "kv-prefill",
    "compiled-model",
    "generate-step",
    "trainer",
)

# head_dim 64, so the quantized cache's group size (64) divides it.
SIZES = {
    # About 12 MiB of float32 weights.
    "small": dict(
        hidden_size=256,
        num_hidden_layers=2,
        intermediate_size=1024,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=2048,
    ),
    # About 210 MiB, the report's model.
    "report": dict(
        hidden_size=768,
        num_hidden_layers=7,
        intermediate_size=2048,
        num_attention_heads=12,
        num_key_value_heads=12,
        vocab_size=6144,
    ),
}

PROMPT_TOKENS = 32


def build(arch, size, seed):
    module = importlib.import_module(f"mlx_lm.models.{arch}")
    config = dict(SIZES[size], model_type=arch, rms_norm_eps=1e-5)
    mx.random.seed(seed)
    # mlx-lm's trainer shuffles its batches with NumPy's global generator.
    np.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    return model


def prompt(vocab):
    return mx.random.randint(0, vocab, (1, PROMPT_TOKENS), key=mx.random.key(7))


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        mx.eval(a)
        h.update(memoryview(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a))
    return h.hexdigest()[:16]


def prefill(model, tokens, make_cache):
    """A compiled prefill that fills a fresh prompt cache and returns the
    logits and the cache's arrays, as a server's prompt-processing step."""
    from mlx_lm.models.cache import QuantizedKVCache

    def step(tokens):
        cache = [make_cache() for _ in model.layers]
        logits = model(tokens, cache=cache)
        if isinstance(cache[0], QuantizedKVCache):
            arrays = [(c.keys, c.values) for c in cache]
        else:
            arrays = [c.state for c in cache]
        return logits, arrays

    logits, arrays = mx.compile(step)(tokens)
    mx.eval(logits, arrays)
    return digest(logits)


def run_cell(cell, model, vocab, workdir):
    tokens = prompt(vocab)
    if cell == "quantized-prefill":
        from mlx_lm.models.cache import QuantizedKVCache

        return prefill(model, tokens, lambda: QuantizedKVCache(group_size=64, bits=8))
    if cell == "kv-prefill":
        from mlx_lm.models.cache import KVCache

        return prefill(model, tokens, KVCache)
    if cell == "compiled-model":
        logits = mx.compile(model)(tokens)
        return digest(logits)
    if cell == "generate-step":
        from mlx_lm.generate import generate_step

        out = [t for (t, _), _ in zip(generate_step(tokens[0], model, max_tokens=8), range(8))]
        return digest(mx.array(out))
    if cell == "trainer":
        import mlx.optimizers as optim
        from mlx_lm.tuner.trainer import TrainingArgs, train

        rows = mx.random.randint(0, vocab, (4, 24), key=mx.random.key(11)).tolist()
        args = TrainingArgs(
            batch_size=2,
            iters=2,
            val_batches=0,
            steps_per_report=1000,
            steps_per_eval=1000,
            steps_per_save=1000,
            max_seq_length=64,
            adapter_file=os.path.join(workdir, "adapters.safetensors"),
        )
        # The trainer reports progress on stdout: keep it off the records.
        with contextlib.redirect_stdout(sys.stderr):
            train(model, optim.Adam(learning_rate=1e-3), [(r, 0) for r in rows], args=args)
        return digest(model.layers[0].mlp.down_proj.weight)
    raise SystemExit(f"unknown cell {cell!r}: one of {', '.join(CELLS)}")


def numerics(arch, size):
    """Eager against compiled logits of one model: digests and difference."""
    from mlx_lm.models.cache import KVCache

    model = build(arch, size, seed=0)
    tokens = prompt(model.args.vocab_size)
    eager = model(tokens, cache=[KVCache() for _ in model.layers])
    compiled = mx.compile(lambda t: model(t, cache=[KVCache() for _ in model.layers]))(tokens)
    diff = mx.abs(eager - compiled).max().item()
    print(
        f"numerics {arch} eager {digest(eager)} compiled {digest(compiled)} "
        f"max_abs_diff {diff:.3e}"
    )


def bench(arch, what, iters):
    """Times `iters` units of a server's work on one model, warm."""
    import time

    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import KVCache

    model = build(arch, "small", seed=0)
    tokens = prompt(model.args.vocab_size)
    if what == "generate":

        def run(n):
            for _ in zip(generate_step(tokens[0], model, max_tokens=n), range(n)):
                pass

    else:

        def step(t):
            return model(t, cache=[KVCache() for _ in model.layers])

        compiled = mx.compile(step)

        def run(n):
            for _ in range(n):
                mx.eval(compiled(tokens))

    run(2)
    start = time.perf_counter_ns()
    run(iters)
    print(time.perf_counter_ns() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=ARCHS, default="phi3")
    p.add_argument("--cell", choices=CELLS, default="quantized-prefill")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--cycles", type=int, default=5)
    p.add_argument("--numerics", action="store_true")
    p.add_argument("--bench", choices=("generate", "prefill"))
    p.add_argument("--iters", type=int, default=16)
    a = p.parse_args()

    refuse_without_compile()
    if a.bench:
        bench(a.arch, a.bench, a.iters)
        return
    for path in loaded_libmlx():
        print(f"libmlx {path}")
    if a.numerics:
        numerics(a.arch, a.size)
        return
    with tempfile.TemporaryDirectory() as workdir:

        def cycle(i):
            model = build(a.arch, a.size, seed=i)
            d = run_cell(a.cell, model, model.args.vocab_size, workdir)
            return d, sum(v.nbytes for _, v in tree_flatten(model.parameters()))

        _, weights = cycle(0)
        print(f"weights {weights} arch {a.arch} cell {a.cell}")
        measure(lambda i: cycle(i)[0], a.cycles)


if __name__ == "__main__":
    main()
