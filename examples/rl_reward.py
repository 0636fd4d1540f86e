#!/usr/bin/env python3
"""The seed's RL reward loop on fedrouter.

Claim a batch of sandboxes from a warm pool, run each candidate program the
policy wrote in its own sandbox, concurrently under asyncio and with a
timeout, compute a reward from the exit code and the output, and always
terminate the sandboxes. A bad rollout (a crash, an endless loop, a flood
of output, a sandbox that vanished) scores 0; it never raises.

    export FEDROUTER_URL=http://127.0.0.1:8080 FEDROUTER_TOKEN=demo-token
    python3 examples/rl_reward.py --rollouts 16 --pool default

Prints one line per rollout and, last, a JSON summary:
{"rollouts": N, "rewards": [...], "mean_reward": x, "errors": {...}, "seconds": s}.
Needs only the fedrouter package (pip install ./sdk/python, or
PYTHONPATH=sdk/python).
"""
import argparse
import asyncio
import json
import sys
import time
import uuid

from fedrouter import sandbox

# The "policy's" candidate programs for one task: print the sum of the
# integers on stdin. Some are right, some are wrong, some misbehave.
TASK_STDIN = "3 4 5\n"
EXPECTED = "12"
CANDIDATES = [
    ("correct", "import sys; print(sum(map(int, sys.stdin.read().split())))"),
    ("wrong_answer", "import sys; print(sum(map(int, sys.stdin.read().split())) + 1)"),
    ("crash", "raise RuntimeError('policy wrote a bug')"),
    ("endless_loop", "while True: pass"),
    ("output_flood", "import sys\nwhile True: sys.stdout.write('x' * 65536)"),
    ("syntax_error", "print(sum(["),
    ("correct_verbose", "import sys\nnums = [int(x) for x in sys.stdin.read().split()]\nprint('debug', file=sys.stderr)\nprint(sum(nums))"),
    ("sandbox_gone", None),  # its sandbox is terminated before the exec: the call fails, the reward is 0
]


def reward(result) -> float:
    """1.0 for the right answer with exit 0, 0.1 for a clean exit with a
    wrong answer, 0 for everything else."""
    if result["timed_out"] or result["exit_code"] != 0:
        return 0.0
    return 1.0 if result["stdout"].strip() == EXPECTED else 0.1


async def rollout(sb, name, program, timeout_s, errors):
    """One rollout: run the candidate in its sandbox; never raises."""
    try:
        if program is None:
            await sb.terminate.aio()  # simulate a sandbox lost mid-run
            program = "print(12)"
        r = await sb.exec.aio("python3", "-c", program, stdin=TASK_STDIN, timeout=timeout_s,
                              max_output_bytes=1 << 16)
        rw = reward(r)
        what = "timed out" if r.timed_out else f"exit {r.exit_code}"
        if r.stdout_truncated:
            what += ", output truncated"
        return rw, what
    except sandbox.FedrouterError as e:  # typed API and transport errors
        errors[e.code] = errors.get(e.code, 0) + 1
        return 0.0, f"error {e.code}"
    except Exception as e:  # a bug here must not kill the whole batch
        errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
        return 0.0, f"error {type(e).__name__}"


async def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rollouts", type=int, default=len(CANDIDATES))
    ap.add_argument("--pool", default="default")
    ap.add_argument("--timeout", type=int, default=2, help="seconds per candidate program")
    args = ap.parse_args(argv)
    run = "rl-" + uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    errors = {}
    sbs = []
    results = []
    try:
        sbs = await sandbox.create.aio(name="rollout", pool=args.pool, num_sandboxes=args.rollouts,
                                       labels={"run": run}, timeout_s=600)
        jobs = [CANDIDATES[i % len(CANDIDATES)] for i in range(args.rollouts)]
        results = await asyncio.gather(*(rollout(sb, name, prog, args.timeout, errors)
                                         for sb, (name, prog) in zip(sbs, jobs)))
        for (name, _), sb, (rw, what) in zip(jobs, sbs, results):
            print(f"{sb.name:<14} {name:<16} reward {rw:.1f}  ({what})", flush=True)
    finally:
        # Always terminate: the batch, and anything else this run labelled.
        await asyncio.gather(*(sb.terminate.aio(missing_ok=True) for sb in sbs), return_exceptions=True)
        try:
            await sandbox.terminate_many.aio(label={"run": run})
        except sandbox.FedrouterError:
            pass
        await sandbox.aclose()
    rewards = [rw for rw, _ in results]
    print(json.dumps({"rollouts": len(rewards), "rewards": rewards,
                      "mean_reward": round(sum(rewards) / max(len(rewards), 1), 4),
                      "errors": errors, "seconds": round(time.monotonic() - t0, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
