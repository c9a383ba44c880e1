"""A long fuzzing campaign against ``txnmodel serve``, beside the official client as a canary.

The test suite runs the same campaign for a minute (``tests/engine/serve/test_fuzz.py``); this runs
it for as long as asked, over several seeds, optionally with serve's own faults on, and reports
what it ran (frames, connections, seconds), what the server answered, every internal error it
logged (a crash contained is one: each is a bug to fix), and whether the canary lost anything.

Usage: python benchmarks/serve_fuzz.py [--seconds 600] [--seeds 3] [--first-seed 31] [--faults SPEC]
       [--ledger memory|file] [--out out/serve_fuzz]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage() + (f" ({record.exc_info[1]!r})" if record.exc_info else ""))


def campaign(seed: int, seconds: float, faults: str | None, ledger: str) -> dict[str, Any]:
    from runners.serve import finish, start
    from tests.engine.serve.fuzzing import Campaign
    from tests.engine.serve.test_fuzz import Canary

    errors = _Errors()
    logger = logging.getLogger("runners.serve")
    logger.addHandler(errors)
    data = tempfile.mkdtemp(prefix="serve-fuzz-") if ledger == "file" else None
    handle = start(ledger=ledger, data=data, faults=faults)
    canary = Canary(handle.url)
    try:
        canary.start()
        began = time.monotonic()
        stats = Campaign(handle.url, seed).run(seconds, stop=lambda: not handle.thread.is_alive())
        elapsed = time.monotonic() - began
        canary.finish()
    finally:
        handle.stop()
        finish(handle)
        logger.removeHandler(errors)
    lost = sorted(canary.acked - canary.received)
    return {
        "seed": seed,
        "seconds": elapsed,
        "frames": stats.frames,
        "connections": stats.connections,
        "closed_by_server": stats.closed_by_server,
        "answers": stats.answers,
        "by_answer": dict(sorted(stats.by_answer.items(), key=lambda kv: -kv[1])),
        "internal_errors": errors.records,
        "canary_acknowledged": len(canary.acked),
        "canary_lost": lost[:20],
        "canary_errors": canary.errors[:20],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="per seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=31)
    parser.add_argument("--faults", help="serve's --faults spec (faults on: crashes and reloads are expected)")
    parser.add_argument("--ledger", choices=("memory", "file"), default="memory")
    parser.add_argument("--out", default="out/serve_fuzz")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    load_before = os.getloadavg()
    rows = [
        campaign(seed, args.seconds, args.faults, args.ledger)
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]
    load_after = os.getloadavg()
    clean = True
    for row in rows:
        ok = not row["internal_errors"] and not row["canary_lost"] and not row["canary_errors"]
        clean = clean and ok
        print(
            f"seed {row['seed']}: {row['frames']} frames over {row['connections']} connections in "
            f"{row['seconds']:.0f} s ({row['closed_by_server']} closed by the server, {row['answers']} answers); "
            f"{len(row['internal_errors'])} internal errors; canary {row['canary_acknowledged']} acknowledged, "
            f"{len(row['canary_lost'])} lost, {len(row['canary_errors'])} errors: {'clean' if ok else 'NOT clean'}"
        )
        for line in row["internal_errors"][:10]:
            print(f"  {line}")
    print(f"load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_fuzz.json").write_text(json.dumps({"load": [load_before, load_after], "rows": rows}, indent=1))
    print(f"wrote {out / 'serve_fuzz.json'}")
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
