"""A small Criteo-format TSV file with what real files hold: empty integer
fields, -1 counts, empty categorical fields, and a last line without a
newline. Labels follow a few of the features, so a model can learn them."""
import random

DENSE, CATEGORICAL = 13, 26


def sample_lines(rows, seed=0):
    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        hot = [rng.randrange(4) for _ in range(3)]  # a few ids carry the signal
        label = int(rng.random() < 0.15 + 0.2 * hot[0] / 3 + 0.15 * (hot[1] == 2))
        dense = []
        for i in range(DENSE):
            roll = rng.random()
            dense.append("" if roll < 0.2 else "-1" if i == 1 and roll < 0.35
                         else str(rng.randrange(0, 50 if i else 5000)))
        categorical = [f"{0x1000_0000 + h:08x}" for h in hot]
        for _ in range(CATEGORICAL - len(hot)):
            categorical.append("" if rng.random() < 0.25 else f"{rng.getrandbits(32):08x}")
        lines.append("\t".join([str(label), *dense, *categorical]))
    return lines


def write_sample(path, rows, seed=0):
    """Writes `rows` lines, the last without a newline; returns the path."""
    with open(path, "w") as f:
        f.write("\n".join(sample_lines(rows, seed)))
    return str(path)
