"""How far each arm's answers are from a reference run's, question by question.

Two builds that round differently disagree with each other; agreement between them cannot say which one is
closer to the model. This tool sets each arm against a fixed reference run instead: the reference server's
CUDA-graph arm (benchmarks/reference_server.py) answered the bench checkpoint with the same bytes on two
machine starts (session 14). Because of that, a stored reference run serves later calls too, when manifest
and checkpoint match.

    python -m benchmarks.ref_distance REF_RUN NAME=RUN[,RUN...] [NAME=RUN...]

REF_RUN is one run directory of bench.py. An arm with several traversals must answer the same in each (the
tool checks), and its first traversal is used. Per arm it prints, over all questions answered by both:
- the mean, p95 and max of |dp| (a question's largest probability difference to the reference);
- the number of decisions equal to the reference's.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks import bench


def distances(ref: tuple, arm: tuple) -> dict:
    (_, manifest, ref_records), (_, _, records) = ref, arm
    dps, same, worst = [], 0, None
    for rid, qid, qtype, a_ref, a_arm in bench.paired_answers(manifest, ref_records, records):
        equal, dp = bench.question_difference(qtype, a_ref, a_arm)
        same += int(equal)
        if not dps or dp > max(dps):
            worst = f"{rid}/{qid}"
        dps.append(dp)
    if not dps:
        raise SystemExit("no question was answered by both the reference and the arm")
    return {"questions": len(dps), "mean_dp": statistics.fmean(dps), "p95_dp": bench.nearest_rank(dps, 0.95),
            "max_dp": max(dps), "worst": worst, "same_decision": same}


def load_arm(spec: str) -> tuple[str, tuple]:
    name, sep, dirs = spec.partition("=")
    if not sep or not name or not dirs:
        raise SystemExit(f"an arm is NAME=RUN[,RUN...], got {spec!r}")
    runs = [bench.read_run(d) for d in dirs.split(",") if d]
    first = runs[0]
    for d, run in zip(dirs.split(",")[1:], runs[1:], strict=True):
        if run[0].get("manifest_sha256") != first[0].get("manifest_sha256"):
            raise SystemExit(f"arm {name}: {d} ran another manifest")
        if bench.agreement(first[1], first[2], run[2])["max_probability_diff"] != 0:
            raise SystemExit(f"arm {name}: {d} answered differently from its first traversal")
    return name, first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ref_distance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reference", help="one bench.py run directory: the reference answers")
    ap.add_argument("arms", nargs="+", help="NAME=RUN[,RUN...]: an arm's run directories (traversals)")
    args = ap.parse_args(argv)
    ref = bench.read_run(args.reference)
    ref_meta = ref[0].get("metadata", {})
    print(f"reference {args.reference} (arm {ref_meta.get('arm')}, commit {ref_meta.get('commit')})")
    for spec in args.arms:
        name, arm = load_arm(spec)
        if arm[0].get("manifest_sha256") != ref[0].get("manifest_sha256"):
            raise SystemExit(f"arm {name} ran another manifest than the reference")
        ck_ref, ck_arm = ref_meta.get("checkpoint_revision"), arm[0].get("metadata", {}).get("checkpoint_revision")
        if ck_ref and ck_arm and ck_ref != ck_arm:
            raise SystemExit(f"arm {name} ran another checkpoint than the reference")
        d = distances(ref, arm)
        print(f"{name:>10}  {d['questions']} questions  |dp| mean {d['mean_dp']:.5f}  p95 {d['p95_dp']:.5f}  "
              f"max {d['max_dp']:.4f} ({d['worst']})  same decision as the reference {d['same_decision']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
