"""Writes what the Rust port of MossFormer2_SE is compared against, from
mlx-audio's own model: its parameters under mlx-audio's names, an input, and
the mask mlx-audio's compiled forward pass gives for it.

    mossformer_export.py OUT_DIR [--seed S] [--frames F] [--slices]

OUT_DIR receives `weights.safetensors` (mlx-audio 0.6.2's TestNet built
after `mx.random.seed(S)`), `features.safetensors` (`features`, [1, F, 180])
and `mask.safetensors` (`mask`, [1, F, 961]). No hub is reachable here, so
the weights are a fixed-seed draw of the real model's parameters rather than
its trained checkpoint: the same names, shapes and bytes.
"""

import argparse
import os
import sys

import mlx.core as mx
from mlx.utils import tree_flatten

from mossformer_cycles import build, use_slices
from serving import refuse_without_compile


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--slices", action="store_true")
    a = p.parse_args()
    refuse_without_compile()
    if a.slices:
        use_slices()
    os.makedirs(a.out, exist_ok=True)
    net = build(a.seed)
    params = dict(tree_flatten(net.parameters()))
    mx.eval(params)
    mx.save_safetensors(os.path.join(a.out, "weights.safetensors"), params)
    x = mx.random.normal((1, a.frames, 180), key=mx.random.key(12345))
    mx.save_safetensors(os.path.join(a.out, "features.safetensors"), {"features": x})
    (mask,) = net(x)
    mx.eval(mask)
    mx.save_safetensors(os.path.join(a.out, "mask.safetensors"), {"mask": mask})
    print(f"parameters {sum(v.size for v in params.values())} bytes {sum(v.nbytes for v in params.values())} mask {tuple(mask.shape)}")


if __name__ == "__main__":
    sys.exit(main())
