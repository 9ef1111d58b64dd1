"""A speech-enhancement server's load/unload loop on mlx-audio's MossFormer2_SE.

MossFormer2_SE is the model of the original report: about 210 MiB of float32
weights, whose forward pass mlx-audio compiles (`mx.compile`) and whose
attention calls `mx.split`. Each cycle builds the model at its real size with
random weights (no download), evaluates them outside the compiled function,
enhances a fixed clip through mlx-audio's `generate`, and drops
everything. Per cycle it prints what the cycle left in MLX's active memory:

    cycle <i> retained_bytes <b> total_bytes <t> digest <d>

The digest is of the enhanced audio's bits. One cycle runs first unmeasured,
so that caches which fill once (MLX's kernels, mlx-audio's window cache) are
not counted.
"""

import argparse
import hashlib

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from loaded_libmlx import loaded_libmlx
from serving import measure, refuse_without_compile

# The clip: half a second at the model's 48 kHz, so a cycle stays short
# while every layer runs.
CLIP_SECONDS = 0.5


def clip(sample_rate):
    rng = np.random.default_rng(7)
    n = int(sample_rate * CLIP_SECONDS)
    return (0.1 * rng.standard_normal((1, n))).astype(np.float32)


def build(seed):
    from mlx_audio.sts.models.mossformer2_se.config import MossFormer2SEConfig
    from mlx_audio.sts.models.mossformer2_se.model import MossFormer2SEModel

    mx.random.seed(seed)
    model = MossFormer2SEModel(MossFormer2SEConfig())
    # The third ingredient: the weights are evaluated outside the compiled
    # forward pass, as loading them from a file would.
    mx.eval(model.parameters())
    return model


def weight_bytes(model):
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=3)
    a = p.parse_args()

    refuse_without_compile()
    for path in loaded_libmlx():
        print(f"libmlx {path}", flush=True)

    def cycle(i):
        # Every cycle the same seed: the same weights, so the same bits.
        model = build(seed=0)
        audio = clip(model.config.sample_rate)
        # mlx-audio's speech-to-speech interface, as its server calls it.
        out = np.asarray(model.generate(audio, sample_rate=model.config.sample_rate).audio)
        d = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
        return d, weight_bytes(model)

    _, weights = cycle(-1)
    print(f"weights {weights} model mossformer2_se", flush=True)
    measure(lambda i: cycle(i)[0], a.cycles)

if __name__ == "__main__":
    main()
