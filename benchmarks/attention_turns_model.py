"""A model of the two-head wgmma attention's synchronization (gated_attention_wgmma_pair_kernel), checked over random
interleavings for every tile count up to a bound. Two schedules:
- `turns` (lever 101, main): a head's turn is S(kt), then, after its softmax, P V(kt);
- `bundles` (lever 104, refused in session 42; branch `exp/s41-104`): S(0) alone, then a head's turn is
  P V(kt) with S(kt + 1).

    python3 -m benchmarks.attention_turns_model [--schedule turns|bundles] [--max-tiles 8] [--trials 2000]

Each warpgroup is one agent (its 128 threads reach every barrier together). The events are the kernel's, in program
order: its share of a K or V tile's copies (counted on the stage's "full" mbarrier), waits on "full" and "empty"
mbarriers, its arrivals on "empty" once its MMAs that read a stage have completed, and the named barriers that hand
the tensor cores over (bar.sync by the head whose turn comes, bar.arrive by the other). The checker interleaves the
two heads, the copies' landing and the MMAs' completion at random and fails on: a deadlock; an arrival on a named
barrier before the other head has synced on its previous instance (two arrivals would complete one instance); a copy
into a stage before both heads released its previous tile; an MMA that issues before both shares of its tile landed,
or whose tile a later copy overwrote before it completed; a barrier left with an unmatched arrival at the end.
"""

import argparse
import random

K, V = "K", "V"
STAGES = 2


def program(schedule: str, wg: int, n: int) -> list[tuple]:
    """The events of warpgroup wg for n key tiles, in program order."""
    my_turn, their_turn = (2, 1) if wg == 0 else (1, 2)  # named barrier ids: "head 1 may issue", "head 0 may"
    ops: list[tuple] = [("load", K, 0), ("load", V, 0)]
    if n > 1:
        ops += [("load", K, 1), ("load", V, 1)]
    if schedule == "turns":
        for kt in range(n):
            ops += [("wait_full", K, kt)]
            if wg == 1 or kt > 0:
                ops += [("sync", my_turn)]
            ops += [("mma", ((K, kt),)), ("arrive", their_turn)]
            if kt >= 1 and kt + 1 < n:
                ops += [("wait_empty", V, kt - 1), ("load", V, kt + 1)]
            ops += [("wait_mma",), ("release", K, kt)]
            ops += [("wait_full", V, kt), ("sync", my_turn), ("mma", ((V, kt),))]
            if wg == 0 or kt + 1 < n:
                ops += [("arrive", their_turn)]
            if kt + STAGES < n:
                ops += [("wait_empty", K, kt), ("load", K, kt + STAGES)]
            ops += [("wait_mma",), ("release", V, kt)]
        return ops
    if schedule != "bundles":
        raise ValueError(schedule)
    ops += [("wait_full", K, 0)]
    if wg == 1:
        ops += [("sync", my_turn)]
    ops += [("mma", ((K, 0),)), ("arrive", their_turn), ("wait_mma",), ("release", K, 0)]
    for kt in range(n - 1):
        ops += [("wait_full", V, kt), ("wait_full", K, kt + 1), ("sync", my_turn),
                ("mma", ((V, kt), (K, kt + 1))), ("arrive", their_turn)]
        if kt >= 1:
            ops += [("wait_empty", V, kt - 1), ("load", V, kt + 1)]
        if kt + STAGES < n:
            ops += [("wait_empty", K, kt), ("load", K, kt + STAGES)]
        ops += [("wait_mma",), ("release", V, kt), ("release", K, kt + 1)]
    ops += [("wait_full", V, n - 1), ("sync", my_turn), ("mma", ((V, n - 1),))]
    if wg == 0:
        ops += [("arrive", their_turn)]
    return ops + [("wait_mma",)]


class Block:
    """The shared state of one block: stages, mbarriers, named barriers, MMAs and copies in flight."""

    def __init__(self, programs: list[list[tuple]]):
        self.programs = programs
        self.pc = [0, 0]
        self.in_flight: list[tuple] = []  # copies issued, not landed: (kind, tile, wg)
        self.landed: set = set()  # (kind, tile, wg)
        self.released: dict = {}  # (kind, tile) -> the heads whose MMAs that read it have completed
        self.holds: dict = {}  # (kind, stage) -> the tile whose copies went there last
        self.mma: list = [None, None]  # per head: the tiles its MMAs in flight read
        self.arrivals = {1: [0, 0], 2: [0, 0]}  # per named barrier, per head
        self.syncs = {1: [0, 0], 2: [0, 0]}

    def done(self) -> bool:
        at_end = all(pc == len(p) for pc, p in zip(self.pc, self.programs, strict=True))
        return at_end and not self.in_flight and self.mma == [None, None]

    def both_landed(self, kind: str, tile: int) -> bool:
        return (kind, tile, 0) in self.landed and (kind, tile, 1) in self.landed

    def step(self, rng: random.Random) -> None:
        """One event that can happen now, chosen at random; AssertionError on a violation or a deadlock."""
        moves = [("land", i) for i in range(len(self.in_flight))]
        moves += [("complete", w) for w in (0, 1) if self.mma[w] is not None]
        moves += [("op", w) for w in (0, 1) if self.pc[w] < len(self.programs[w])]
        rng.shuffle(moves)
        for what, i in moves:
            if what == "land":
                self.landed.add(self.in_flight.pop(i))
                return
            if what == "complete":
                for kind, tile in self.mma[i]:
                    assert self.holds[(kind, tile % STAGES)] == tile, f"{kind}{tile} overwritten while read"
                self.mma[i] = None
                return
            if self.try_op(i):
                self.pc[i] += 1
                return
        waiting = [self.programs[w][self.pc[w]] if self.pc[w] < len(self.programs[w]) else "end" for w in (0, 1)]
        raise AssertionError(f"deadlock: head 0 at {waiting[0]}, head 1 at {waiting[1]}")

    def try_op(self, w: int) -> bool:
        op, other = self.programs[w][self.pc[w]], 1 - w
        kind = op[0]
        if kind == "load":
            _, k, tile = op
            if tile >= STAGES:
                assert self.released.get((k, tile - STAGES)) == {0, 1}, f"{k}{tile} copied before its stage was free"
            self.holds[(k, tile % STAGES)] = tile
            self.in_flight.append((k, tile, w))
            return True
        if kind == "wait_full":
            return self.both_landed(op[1], op[2])
        if kind == "wait_empty":
            return self.released.get((op[1], op[2])) == {0, 1}
        if kind == "sync":
            n = self.syncs[op[1]][w] + 1
            if self.arrivals[op[1]][other] < n:
                return False
            self.syncs[op[1]][w] = n
            return True
        if kind == "arrive":
            n = self.arrivals[op[1]][w] + 1
            assert self.syncs[op[1]][other] >= n - 1, f"barrier {op[1]}: head {w}'s arrival {n} joins an open instance"
            self.arrivals[op[1]][w] = n
            return True
        if kind == "mma":
            for k, tile in op[1]:
                assert self.both_landed(k, tile) and self.holds[(k, tile % STAGES)] == tile, f"MMA on {k}{tile} early"
            self.mma[w] = op[1]
            return True
        if kind == "wait_mma":
            return self.mma[w] is None
        if kind == "release":
            self.released.setdefault((op[1], op[2]), set()).add(w)
            return True
        raise ValueError(op)


def check(schedule: str, n: int, trials: int, seed: int = 0) -> None:
    """Every one of `trials` random interleavings of n key tiles runs to the end without a violation."""
    rng = random.Random(seed * 1000 + n)
    for _ in range(trials):
        block = Block([program(schedule, 0, n), program(schedule, 1, n)])
        for _ in range(100 * (n + 4)):
            if block.done():
                break
            block.step(rng)
        assert block.done(), f"n={n}: no end after {100 * (n + 4)} events"
        assert block.arrivals[1][0] == block.syncs[1][1] and block.arrivals[2][1] == block.syncs[2][0], \
            f"n={n}: unmatched named-barrier arrivals {block.arrivals} against syncs {block.syncs}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedule", choices=("turns", "bundles"), default="turns")
    ap.add_argument("--max-tiles", type=int, default=8, help="check n = 1 .. this many key tiles (default 8)")
    ap.add_argument("--trials", type=int, default=2000, help="random interleavings per tile count (default 2000)")
    args = ap.parse_args(argv)
    for n in range(1, args.max_tiles + 1):
        check(args.schedule, n, args.trials)
    print(f"{args.schedule}: n = 1..{args.max_tiles}, {args.trials} interleavings each: no violation")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
