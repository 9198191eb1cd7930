# What a bench level sends and when: the prompts of a dataset (random ids, ranged lengths, shared-prefix
# groups, a file's prompts) and the arrival times of an open loop (Poisson / gamma with a burstiness, or
# constant). Every prompt is a function of (dataset, seed, index), so a level can draw as many as its duration
# needs and two runs with the same seed send the same prompts (output identity across runs relies on it).
# Standard library only.
import random


def gaps(rate, arrival, burstiness, seed):
    """Endless inter-arrival gaps in seconds: constant 1/rate, or gamma with shape `burstiness` and mean
    1/rate (burstiness 1 = Poisson; < 1 burstier, > 1 smoother), as SGLang's bench_serving draws them."""
    rng = random.Random(seed)
    mean = 1.0 / float(rate)
    while True:
        if arrival == "constant":
            yield mean
        else:
            yield rng.gammavariate(float(burstiness), mean / float(burstiness))


def trace_gaps(items, speed):
    """The gaps between a trace's requests (their `t`, seconds from the first), `speed` times faster."""
    last = 0.0
    for item in items:
        yield (float(item["t"]) - last) / float(speed)
        last = float(item["t"])


def _length(rng, fixed, span):
    """A length: `fixed`, or uniform in the inclusive span [lo, hi]."""
    if span:
        return rng.randint(int(span[0]), int(span[1]))
    return int(fixed)


class Prompts:
    """prompt_at(i) -> (prompt: ids or text, output length) for a level's i-th request.

    `draw(seed, n)` gives n random ordinary ids of the
    model (the client's prompt_ids over its token space)."""

    def __init__(self, dataset, draw, seed, level_seed, in_len, out_len):
        self.d = dataset or {"kind": "random"}
        self.draw, self.seed, self.level_seed = draw, int(seed), int(level_seed)
        self.in_len, self.out_len = int(in_len), int(out_len)
        self.kind = self.d.get("kind", "random")
        self._prefixes = {}
        self._blocks = {}

    def _prefix(self, g):
        # the same prefixes for every level and repeat: the radix cache keeps them
        if g not in self._prefixes:
            n = int(self.d.get("prefix_len") or self.d.get("system") or 0)
            self._prefixes[g] = self.draw(self.seed * 1000003 + 70000019 + g * 7919, n)
        return self._prefixes[g]

    def _block(self, h):
        """A trace's hash id -> its block of ids: the same for every request of this repeat naming it (the
        trace's prefix sharing), another set for the next repeat (its cache does not serve the next
        replay)."""
        if h not in self._blocks:
            self._blocks[h] = self.draw(
                self.level_seed * 1000003 + 90000049 + int(h) * 7919, int(self.d["block"])
            )
        return self._blocks[h]

    def system(self):
        """A sessions dataset's system prompt: the same ids for
        every session, level and repeat (as shared prefixes)."""
        n = int(self.d.get("system") or 0)
        return self._prefix(0)[:n] if n else []

    def turn_len(self, s, t):
        """Session s's turn t's output length."""
        rng = random.Random(self.level_seed * 31 + s * 4099 + t)
        return _length(rng, self.out_len, self.d.get("output"))

    def turn(self, s, t):
        """Session s's turn t: its new ids (its own, per repeat) and its output length."""
        ids = self.draw(self.level_seed * 1000003 + 60000013 + s * 4099 + t, int(self.d["new"]))
        return ids, self.turn_len(s, t)

    def _trace_item(self, i):
        items = self.d["items"]
        if i >= len(items):
            return None
        item = items[i]
        if item.get("ids") is not None:
            return item["ids"], int(item["out"])
        n = int(item["in"])
        ids = [x for h in item.get("blocks") or [] for x in self._block(h)][:n]
        # the tail no block names: the request's own ids
        if len(ids) < n:
            ids += self.draw(self.level_seed * 31 + 50000017 + i, n - len(ids))
        return ids, int(item["out"])

    def prompt_at(self, i):
        if self.kind == "trace":
            return self._trace_item(i)
        rng = random.Random(self.level_seed * 31 + i)
        out_len = _length(rng, self.out_len, self.d.get("output"))
        if self.kind == "prompts":
            item = self.d["items"][i % len(self.d["items"])]
            prompt = item.get("input_ids") if item.get("input_ids") is not None else item["text"]
            return prompt, int(item.get("output_len") or out_len)
        in_len = _length(rng, self.in_len, self.d.get("input"))
        # the seeds of the fixed random set, unchanged
        ids = self.draw(self.level_seed + i, in_len)
        if self.kind == "shared_prefix":
            return self._prefix(i % int(self.d["groups"])) + ids, out_len
        return ids, out_len
