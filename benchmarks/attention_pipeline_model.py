"""A model of the two-head wgmma attention's pipelined key loop (LEVERS 96), checked for every tile count. The loop
is the one lever 96's patch wrote (`git show 66e940f:benchmarks/prepared/96-attention-pipelined.patch`); that lever
was refused in session 38, so main's kernel runs its phases one after the other. Kept as the check to reuse for the
next schedule of that loop.

    python3 -m benchmarks.attention_pipeline_model [--max-tiles 69]

The kernel's schedule, written as the events it issues in program order: cp.async loads of K and V tiles into two
stages, commits of cp.async groups, `cp.async.wait_group` counts, wgmma groups that read a stage, their waits, and
block barriers. For each tile count n it checks that every wgmma reads the tile it wants from a stage whose load group
a wait has completed (and a barrier has published), and that no load overwrites a stage before every wgmma that read
its previous tile has completed and a barrier has passed. A wrong wait count or a load moved before its barrier
fails here on the CPU; on the GPU it would be a race that a test may pass by luck.
"""

import argparse


class Schedule:
    def __init__(self, n: int):
        self.n = n
        self.groups: list[set] = []  # committed cp.async groups, in order
        self.current: set = set()  # loads issued since the last commit
        self.complete = 0  # groups a wait has completed
        self.stage: dict = {}  # (kind, stage) -> tile held
        self.in_use: dict = {}  # (kind, stage) -> a wgmma read it and no barrier after its completion has passed
        self.wgmma: list[list] = []  # wgmma groups in flight: the stages each reads
        self.finished: list = []  # stages of completed wgmma groups, released at the next barrier

    def load(self, kind: str, tile: int):
        at = (kind, tile % 2)
        assert not self.in_use.get(at), f"n={self.n}: {kind}{tile} overwrites a stage still being read"
        self.stage[at] = tile
        self.current.add((kind, tile))

    def commit(self):
        self.groups.append(self.current)
        self.current = set()

    def cp_wait(self, pending: int):
        self.complete = max(self.complete, len(self.groups) - pending)

    def barrier(self):
        for at in self.finished:
            self.in_use[at] = False
        self.finished.clear()

    def mma(self, *reads):  # one committed wgmma group reading these (kind, tile)
        landed = set().union(*self.groups[: self.complete])
        for kind, tile in reads:
            assert self.stage.get((kind, tile % 2)) == tile, f"n={self.n}: {kind}{tile} is not in its stage"
            assert (kind, tile) in landed, f"n={self.n}: {kind}{tile} read before its group was waited for"
            self.in_use[(kind, tile % 2)] = True
        self.wgmma.append([(kind, tile % 2) for kind, tile in reads])

    def mma_wait(self, pending: int):
        while len(self.wgmma) > pending:
            self.finished.extend(self.wgmma.pop(0))


def pipelined_loop(n: int) -> None:
    """The loop of gated_attention_wgmma_kernel<2, 2> as lever 96 writes it (native/attention.cu, STAGES == 2)."""
    s = Schedule(n)
    for st in range(2):  # prologue: [Q + K0] [V0] [K1] [V1]
        if st < n:
            s.load("K", st)
        s.commit()
        if st < n:
            s.load("V", st)
        s.commit()

    def landed():
        s.cp_wait(1)
        s.barrier()

    def tiles_done(kt: int):
        s.barrier()
        if kt + 2 < n:
            s.load("K", kt + 2)
        if kt >= 1 and kt + 1 < n:
            s.load("V", kt + 1)
        s.commit()

    landed()
    s.mma(("K", 0))
    s.mma_wait(0)
    tiles_done(0)
    for kt in range(1, n):
        landed()
        s.mma(("K", kt))
        s.mma(("V", kt - 1))
        s.mma_wait(1)
        s.mma_wait(0)
        tiles_done(kt)
    landed()
    s.mma(("V", n - 1))
    s.mma_wait(0)
    tiles_done(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-tiles", type=int, default=69, help="check every key-tile count 1..N (default 69)")
    args = ap.parse_args()
    for n in range(1, args.max_tiles + 1):
        pipelined_loop(n)
    print(f"ok: every tile count 1..{args.max_tiles}")


if __name__ == "__main__":
    main()
