"""A recipe screen on a GPU: which changes to the ``batch_norm`` recipe buy accuracy per CPU second.

    python bench/recipe_screen.py --round 3 --out screen-3.jsonl      # on a CUDA machine
    python bench/recipe_screen.py --summary bench/results/2026-12-04-recipe-screen.json

Why it exists: on the 2-core CPU one full-budget training takes 4-7 minutes, so a recipe
search there tries a few recipes an hour. On one GPU the same network trains in 17-90 s, and
many run side by side (``--procs`` processes sharing the device), so a round of 14 recipes x 3
seeds takes 2-4 minutes. What a round measures is **accuracy only**; each recipe's cost on the
CPU is measured apart (single-process images/s per architecture, docs/results.md), and the
recipe kept is then measured by ``bench/train_bench.py`` with the real trainers.

What runs is a **re-implementation, not the trainers**: the ``batch_norm`` network in PyTorch
with knobs (``stem``, ``k1``, ``c1``, ``c2``, ``c3``, ``d``), the pixel constants of
:mod:`training.models`, Keras' batch-norm epsilon and momentum, Glorot-uniform weights, the
augmentation of :func:`training.train.augment` written for tensors on the GPU, Adam
(``eps=1e-7``, Keras') with a linear warm-up then cosine (or linear) decay, label smoothing,
and each batch split in 2 for batch norm (``ghost``) as 2 replicas normalise their halves.
It differs from the trainers in its random streams, one process instead of 2 replicas, GPU
kernels, and in two details of the recipe: the warm-up starts near 0 and the cosine decays to 0
(the trainers: from and to 0.1x and 0.01x the peak, ``training.train.make_schedule``), and
each half's forward pass updates the batch-norm running statistics (two updates per step; each
replica of the trainers updates once and the export holds their mean). The 2026-12-04 screen
read 0.0-0.3 points below the trainers for the same recipe (docs/results.md), so rounds
compare recipes with each other.

Each run reports test accuracy on all 10,000 test images **after a JPEG round trip** (Pillow,
quality 95, as :func:`training.data.encode_images` sends them), with and without mirror
averaging (what the serving signature does for models trained with flips) and, from round 4,
over 10 views (the image and its mirror, each also shifted by one pixel up, down, left and
right: what a test-time-augmented signature would cost 5x the mirror-averaged compute for),
for the trained weights and for an exponential moving average of them (``ema``).

Input: ``--data`` an ``.npz`` with ``xtr, ytr`` (uint8 train images and labels), ``xte_jpeg``
(the test images after the JPEG round trip) and ``yte``, made by ``--make-data`` from the
Fashion-MNIST files (``$MIRROR_DIR/data/fashion-mnist`` or ``--raw``). Output: one JSON line
per run (the recipe, ``train_s``, ``raw``/``ema_acc`` accuracies). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import io
import json
import math
import os
import sys
import time
from pathlib import Path

MEAN, STD = 0.2860, 0.3530  # training.models.PIXEL_MEAN / PIXEL_STD (no TF import on the GPU box)
BN = {"eps": 1e-3, "momentum": 0.1}  # Keras BatchNormalization(momentum=0.9), in torch's terms

# Rounds 1-3 as they ran on 2026-12-04 (3 seeds each): every recipe is its round's base with
# the changes named; keys: epochs, batch (global), lr (peak), aug, ls (label smoothing), opt
# (adam, adamw, sgd), wd, sched (cosine, linear), warmup (epochs), arch (Net's knobs).
# Round 4 (changes to the kept S8_16 recipe at its cost, and 10-view scoring) was prepared
# the same night and has NOT run: no GPU machine was lent to that session (docs/results.md).
ROUNDS = {
    1: (
        {"ema": 0.995},
        {
            "base32": {"epochs": 32},
            "base48": {"epochs": 48},
            "base22": {"epochs": 22},
            "sf22": {"epochs": 22, "aug": "shift-flip"},
            "ls0_22": {"epochs": 22, "ls": 0.0},
            "lr01_22": {"epochs": 22, "lr": 0.01},
            "b512_22": {"epochs": 22, "batch": 512},
            "adamw22": {"epochs": 22, "opt": "adamw", "wd": 0.05},
            "sgd22": {"epochs": 22, "opt": "sgd", "lr": 0.1, "wd": 5e-4},
            "w64_22": {"epochs": 22, "arch": {"c1": 64, "c2": 128}},
            "w32_32": {"epochs": 32, "arch": {"c1": 32, "c2": 64}},
            "stem16_22": {"epochs": 22, "arch": {"stem": 16}},
            "c3_16": {"epochs": 16, "arch": {"c3": 96}},
            "lin22": {"epochs": 22, "sched": "linear"},
            "d512_22": {"epochs": 22, "arch": {"d": 512}},
            "sgd22b": {"epochs": 22, "opt": "sgd", "lr": 0.05, "wd": 5e-4},
        },
    ),
    2: (
        {"ema": 0.995},
        {
            "b512_20": {"epochs": 20, "batch": 512},
            "b512_18": {"epochs": 18, "batch": 512},
            "b512_lr01_20": {"epochs": 20, "batch": 512, "lr": 0.01},
            "b512_lr0025_20": {"epochs": 20, "batch": 512, "lr": 0.0025},
            "k5_20": {"epochs": 20, "arch": {"k1": 5}},
            "k5_b512_20": {"epochs": 20, "batch": 512, "arch": {"k1": 5}},
            "k5_b512_18": {"epochs": 18, "batch": 512, "arch": {"k1": 5}},
            "k5_lr01_20": {"epochs": 20, "lr": 0.01, "arch": {"k1": 5}},
            "k5c64_b512_18": {"epochs": 18, "batch": 512, "arch": {"k1": 5, "c1": 64}},
            "b512_sf_20": {"epochs": 20, "batch": 512, "aug": "shift-flip"},
            "b512_w03_20": {"epochs": 20, "batch": 512, "warmup": 0.3},
            "b256_16": {"epochs": 16, "batch": 256},
            "k5_b512_22": {"epochs": 22, "batch": 512, "arch": {"k1": 5}},
            "stem8_b512_16": {"epochs": 16, "batch": 512, "arch": {"stem": 8}},
        },
    ),
    3: (
        {"ema": 0.995, "lr": 0.01, "aug": "shift-flip"},
        {
            "S8_16": {"epochs": 16, "arch": {"stem": 8}},
            "S16_14": {"epochs": 14, "arch": {"stem": 16}},
            "plain_22": {"epochs": 22},
            "S8_b512_14": {"epochs": 14, "batch": 512, "arch": {"stem": 8}},
            "plain_ls0_22": {"epochs": 22, "ls": 0.0},
            "S16_16": {"epochs": 16, "arch": {"stem": 16}},
            "plain_lr015_22": {"epochs": 22, "lr": 0.015},
            "S8_18": {"epochs": 18, "arch": {"stem": 8}},
        },
    ),
    4: (
        {"ema": 0.995, "lr": 0.01, "aug": "shift-flip", "epochs": 16, "arch": {"stem": 8}},
        {
            "S8_16_r4": {},  # round 3's S8_16 again, scored over 10 views too
            "S8_d512_16": {"arch": {"stem": 8, "d": 512}},
            "S8x2_16": {"arch": {"stem": 8, "stem2": 8}},
            "S12_16": {"arch": {"stem": 12}},
            "S8k5_16": {"arch": {"stem": 8, "stem_k": 5}},
            "S8_silu_16": {"arch": {"stem": 8, "act": "silu"}},
            "S8_ddrop_16": {"arch": {"stem": 8, "ddrop": 0.3}},
            "S8_ls02_16": {"ls": 0.2},
            "S8_b512_16": {"batch": 512},
            "S8_lr02_16": {"lr": 0.02},
            "S8_c56_16": {"arch": {"stem": 8, "c1": 56, "c2": 112}},
            "S8_erase_16": {"aug": "shift-flip-erase"},
            "S8_14": {"epochs": 14},
        },
    ),
}
SEEDS = (1, 2, 3)


def round_configs(number: int) -> list[dict]:
    """The run configurations of round ``number`` (:data:`ROUNDS`), one per recipe and seed.

    Raises:
        KeyError: no such round.
    """
    base, recipes = ROUNDS[number]
    return [
        {**base, "name": name, "seed": seed, **change}
        for name, change in recipes.items()
        for seed in SEEDS
    ]


def build_net(c1=48, c2=96, d=256, stem=0, c3=0, k1=3, stem2=0, stem_k=3, act="relu", ddrop=0.0):
    """The ``batch_norm`` network with knobs, NCHW float32 0..255 in, logits out.

    ``stem``: filters of a stride-1 convolution at 28x28 (``stem_k`` x ``stem_k``, 3x3 by
    default) before the first stride-2 one (0: none, the network of 2026-12-04 morning);
    ``stem2``: filters of a second stride-1 3x3 one after it (0: none); ``k1``: the first
    stride-2 convolution's kernel; ``c1``, ``c2``: the stride-2 convolutions' filters; ``c3``:
    a stride-1 convolution at 7x7 (0: none); ``d``: dense units; ``act``: ``relu`` or
    ``silu`` after every convolution and the dense layer; ``ddrop``: dropout after the dense
    layer (0: none). Paddings are Keras' "same". The defaults are rounds 1-3's network.
    """
    import torch.nn.functional as F
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            cin = 1
            self.stem = None
            if stem:
                self.stem = nn.Conv2d(1, stem, stem_k, padding=stem_k // 2, bias=False)
                self.stem_bn, cin = nn.BatchNorm2d(stem, **BN), stem
            self.stem2 = nn.Conv2d(cin, stem2, 3, padding=1, bias=False) if stem2 else None
            if stem2:
                self.stem2_bn, cin = nn.BatchNorm2d(stem2, **BN), stem2
            self.conv1 = nn.Conv2d(cin, c1, k1, stride=2, bias=False)
            total = 13 * 2 + k1 - 28  # Keras "same", stride 2, 28 -> 14: odd padding after
            self.pad1 = (total // 2, total - total // 2) * 2
            self.bn1 = nn.BatchNorm2d(c1, **BN)
            self.conv2 = nn.Conv2d(c1, c2, 3, stride=2, bias=False)
            self.bn2 = nn.BatchNorm2d(c2, **BN)
            self.conv3 = nn.Conv2d(c2, c3, 3, padding=1, bias=False) if c3 else None
            if c3:
                self.bn3 = nn.BatchNorm2d(c3, **BN)
            self.dense = nn.Linear((c3 or c2) * 49, d, bias=False)
            self.dbn = nn.BatchNorm1d(d, **BN)
            self.logits = nn.Linear(d, 10)
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

        def forward(self, x):
            f = F.silu if act == "silu" else F.relu
            x = (x / 255.0 - MEAN) / STD
            if self.stem is not None:
                x = f(self.stem_bn(self.stem(x)))
            if self.stem2 is not None:
                x = f(self.stem2_bn(self.stem2(x)))
            x = f(self.bn1(self.conv1(F.pad(x, self.pad1))))
            x = f(self.bn2(self.conv2(F.pad(x, (0, 1, 0, 1)))))
            if self.conv3 is not None:
                x = f(self.bn3(self.conv3(x)))
            x = f(self.dbn(self.dense(x.flatten(1))))
            return self.logits(F.dropout(x, ddrop, self.training) if ddrop else x)

    return Net()


def augment(x, kind: str, generator):
    """:func:`training.train.augment` for float ``[B, 1, 28, 28]`` on any device: shift by up
    to 2 px (zero padding), then a left-right flip (``flip``), then half of the time a 10x10
    square of 0 (``erase``)."""
    import torch
    import torch.nn.functional as F

    if kind == "none":
        return x
    n, dev, pad = x.shape[0], x.device, 2
    side = torch.arange(28, device=dev)
    corner = torch.randint(0, 2 * pad + 1, (n, 2), device=dev, generator=generator)
    rows = (corner[:, :1] + side)[:, None, :, None].expand(n, 1, 28, 28 + 2 * pad)
    x = torch.gather(F.pad(x, (pad,) * 4), 2, rows)
    x = torch.gather(x, 3, (corner[:, 1:] + side)[:, None, None, :].expand(n, 1, 28, 28))
    if "flip" in kind:
        mirror = torch.rand(n, device=dev, generator=generator) < 0.5
        x = torch.where(mirror[:, None, None, None], x.flip(3), x)
    if "erase" in kind:
        centre = torch.randint(0, 28, (n, 2), device=dev, generator=generator)
        r, c = side - centre[:, :1] + 5, side - centre[:, 1:] + 5
        r, c = (r >= 0) & (r < 10), (c >= 0) & (c < 10)
        on = torch.rand(n, device=dev, generator=generator) < 0.5
        x = x.masked_fill((r[:, :, None] & c[:, None, :] & on[:, None, None])[:, None], 0)
    return x


def train_and_score(cfg: dict, data, device: str) -> dict:
    """Train one recipe (``cfg``: see :data:`ROUNDS`) and score it.

    Args:
        data: ``(xtr float32 [60000, 1, 28, 28], ytr int64, xte float32 [10000, 1, 28, 28]
            after the JPEG round trip, yte int64)``, on ``device``.

    Returns:
        ``cfg`` with ``train_s`` (seconds) and ``raw`` / ``ema_acc``: ``{"jpeg": accuracy,
        "jpeg_tta": accuracy with mirror averaging, "jpeg_tta10": over 10 views}``
        (fractions).
    """
    import torch
    import torch.nn.functional as F

    torch.manual_seed(cfg["seed"])
    gen = torch.Generator(device=device)
    gen.manual_seed(cfg["seed"])
    xtr, ytr, xte, yte = data
    model = build_net(**cfg.get("arch", {})).to(device)
    epochs, batch, lr = cfg["epochs"], cfg.get("batch", 1024), cfg.get("lr", 0.005)
    steps = xtr.shape[0] // batch  # whole batches, as the trainers
    total, warm = epochs * steps, cfg.get("warmup", 1.0) * steps
    opt = cfg.get("opt", "adam")
    if opt == "adam":
        optim = torch.optim.Adam(model.parameters(), lr=lr, eps=1e-7)
    elif opt == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=lr, eps=1e-7, weight_decay=cfg["wd"])
    else:
        optim = torch.optim.SGD(
            model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=cfg["wd"]
        )

    def factor(step):
        if step < warm:
            return (step + 1) / warm
        t = (step - warm) / max(1, total - warm)
        return 1 - t if cfg.get("sched") == "linear" else 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(optim, factor)
    decay = cfg.get("ema", 0.0)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if decay else None
    start, step = time.time(), 0
    for _ in range(epochs):
        order = torch.randperm(xtr.shape[0], device=device, generator=gen)
        for i in range(steps):
            idx = order[i * batch : (i + 1) * batch]
            x = augment(xtr[idx], cfg.get("aug", "shift-flip-erase"), gen)
            logits = torch.cat([model(c) for c in x.chunk(cfg.get("ghost", 2))])
            loss = F.cross_entropy(logits, ytr[idx], label_smoothing=cfg.get("ls", 0.1))
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
            sched.step()
            step += 1
            if ema is not None:
                with torch.no_grad():
                    d = min(decay, (1 + step) / (10 + step))
                    for k, v in model.state_dict().items():
                        if v.dtype.is_floating_point:
                            ema[k].mul_(d).add_(v, alpha=1 - d)
                        else:
                            ema[k].copy_(v)
    out = {**cfg, "train_s": round(time.time() - start, 1)}

    def score():
        model.eval()
        with torch.no_grad():
            p = torch.cat([F.softmax(model(c), 1) for c in xte.split(2000)])
            pm = torch.cat([F.softmax(model(c.flip(3)), 1) for c in xte.split(2000)])
            # round 4: mirror x one-pixel shifts (10 views), zero padding as in augment()
            ps = p + pm
            for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
                for c in (xte, xte.flip(3)):
                    s = F.pad(c, (1, 1, 1, 1))[:, :, 1 + dy : 29 + dy, 1 + dx : 29 + dx]
                    ps += torch.cat([F.softmax(model(b), 1) for b in s.split(2000)])
        return {
            "jpeg": (p.argmax(1) == yte).float().mean().item(),
            "jpeg_tta": ((p + pm).argmax(1) == yte).float().mean().item(),
            "jpeg_tta10": (ps.argmax(1) == yte).float().mean().item(),
        }

    out["raw"] = score()
    if ema is not None:
        model.load_state_dict(ema)
        out["ema_acc"] = score()
    return out


def _worker(cfgs: list[dict], data_path: str, out_path: str, device: str) -> None:
    import numpy as np
    import torch

    torch.backends.cudnn.allow_tf32 = False  # float32 arithmetic, as on the CPU
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    z = np.load(data_path)

    def tensor(a, dtype):
        return torch.tensor(a, dtype=dtype, device=device)

    data = (
        tensor(z["xtr"], torch.float32)[:, None],
        tensor(z["ytr"], torch.int64),
        tensor(z["xte_jpeg"], torch.float32)[:, None],
        tensor(z["yte"], torch.int64),
    )
    for cfg in cfgs:
        try:
            row = train_and_score(cfg, data, device)
        except Exception as e:  # a failed recipe is a row too  # noqa: BLE001
            row = {**cfg, "error": repr(e)}
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def make_data(raw: Path, out: Path) -> None:
    """Write the ``.npz`` the screen reads from the 4 Fashion-MNIST ``.gz`` files in ``raw``."""
    import numpy as np
    from PIL import Image

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from training.data import encode_images

    def read(name, offset, shape):
        return np.frombuffer(gzip.open(raw / name).read(), np.uint8, offset=offset).reshape(shape)

    xte = read("t10k-images-idx3-ubyte.gz", 16, (-1, 28, 28))
    jpeg = [np.array(Image.open(io.BytesIO(b)).convert("L")) for b in encode_images(xte)]
    np.savez_compressed(
        out,
        xtr=read("train-images-idx3-ubyte.gz", 16, (-1, 28, 28)),
        ytr=read("train-labels-idx1-ubyte.gz", 8, (-1,)),
        xte_jpeg=np.stack(jpeg),
        yte=read("t10k-labels-idx1-ubyte.gz", 8, (-1,)),
    )


def summary(rows: list[dict]) -> str:
    """A markdown table: per recipe, the seeds' accuracies sorted (percent), plain and
    mirror-averaged, and one run's GPU seconds (a shared GPU: not a cost); failed runs are
    counted apart."""
    by_name = collections.defaultdict(list)
    failed = collections.Counter(r["name"] for r in rows if "error" in r)
    for r in rows:
        if "error" not in r:
            by_name[r["name"]].append(r)
    lines = [
        "| recipe | accuracy | mirror-averaged | mirror x shifts (10 views) | GPU s |",
        "|---|---|---|---|---|",
    ]
    for name, runs in by_name.items():
        plain, mirrored, views10 = (
            " / ".join(f"{100 * v:.2f}" for v in sorted(r["raw"][key] for r in runs))
            if all(key in r["raw"] for r in runs)
            else "-"
            for key in ("jpeg", "jpeg_tta", "jpeg_tta10")
        )
        lines.append(f"| {name} | {plain} | {mirrored} | {views10} | {runs[0]['train_s']} |")
    lines += [f"| {name} | failed x{n} | | | |" for name, n in failed.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/recipe_screen.py", description=__doc__)
    p.add_argument("--round", type=int, choices=sorted(ROUNDS))
    p.add_argument("--out", type=Path, help="JSON lines, appended to")
    p.add_argument("--data", type=Path, default=Path("fmnist-screen.npz"))
    p.add_argument("--procs", type=int, default=12, help="processes sharing the device")
    p.add_argument("--device", default="cuda")
    p.add_argument("--make-data", action="store_true", help="write --data and stop")
    p.add_argument(
        "--raw",
        type=Path,
        default=Path(os.environ.get("MIRROR_DIR", "../shared")) / "data" / "fashion-mnist",
    )
    p.add_argument(
        "--summary",
        type=Path,
        help="print the table of a results file (the JSON of bench/results, or --out's JSON "
        "lines) and stop",
    )
    args = p.parse_args(argv)
    if args.summary:
        text = args.summary.read_text()
        try:
            doc = json.loads(text)  # a results file of bench/results
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "runs" in doc:
            rows = doc["runs"]
        else:  # --out's JSON lines
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        print(summary(rows))
        return 0
    if args.make_data:
        make_data(args.raw, args.data)
        return 0
    if args.round is None or args.out is None:
        p.error("--round and --out are needed to run a round")
    import torch.multiprocessing as mp

    cfgs = round_configs(args.round)
    mp.set_start_method("spawn")
    procs = [
        mp.Process(
            target=_worker, args=(cfgs[i :: args.procs], str(args.data), str(args.out), args.device)
        )
        for i in range(args.procs)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
