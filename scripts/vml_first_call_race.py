"""Count how often MKL's vector-math first-call race (pytorch/pytorch#188792) hits a fresh process.

Each of ``--waves`` x ``--width`` fresh processes (``--width`` at a time, to load the CPU as a test
suite does) imports the stages package (the pinned CPU code paths), sets 2 torch threads and, as
its first vector-math call, takes ``torch.sqrt`` of the same 2432 values (AdamW's denominator on
the p405k tied embedding: above 2048 entries the call splits over two threads). With ``--warm`` each
process first runs ``stages.numerics.warm_vector_math`` as every stage now does. It prints how many
processes gave each result and how many of the 2432 roots were not correctly rounded in each half.

    python scripts/vml_first_call_race.py --waves 100 --width 4          # the race, if this MKL has it
    python scripts/vml_first_call_race.py --waves 100 --width 4 --warm   # with the warm-up

A run that shows more than one result without ``--warm`` and one with it is the A/B for the fix.
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import stages, hashlib, sys, numpy as np, torch
torch.set_num_threads(2)
if {warm}:
    from stages.numerics import warm_vector_math
    warm_vector_math()
x = torch.from_numpy((10.0 ** np.random.default_rng(0).uniform(-12, -2, 2432)).astype(np.float32))
y = torch.sqrt(x).numpy()
exact = np.sqrt(x.numpy().astype(np.float64)).astype(np.float32)
off = y != exact
print(hashlib.md5(y.tobytes()).hexdigest()[:8], int(off[:1216].sum()), int(off[1216:].sum()))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waves", type=int, default=50)
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args(argv)
    code = CHILD.format(warm=args.warm)
    counts: collections.Counter[str] = collections.Counter()
    for _ in range(args.waves):
        procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
                 for _ in range(args.width)]
        for p in procs:
            out, _ = p.communicate()
            if p.returncode != 0:
                print(f"error: a child process exited with {p.returncode}", file=sys.stderr)
                return 2
            counts[out.strip()] += 1
    print(f"{sum(counts.values())} processes, warm-up {'on' if args.warm else 'off'}; "
          "result md5, roots not correctly rounded in the first and second half: count")
    for result, n in counts.most_common():
        print(f"  {result}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
