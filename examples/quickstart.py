#!/usr/bin/env python3
"""The sky.sandbox quickstart snippets on fedrouter: the same code with the
import changed (`from fedrouter import sandbox` instead of
`import sky.sandbox`, then `sandbox.` for `sky.sandbox.`).

    export FEDROUTER_URL=http://127.0.0.1:8080 FEDROUTER_TOKEN=demo-token
    python3 examples/quickstart.py

Uses the router's `default` warm pool (scripts/demo makes one) and creates
and deletes a template (pool) named `ml-gpu`. Batch sizes are smaller than
in the SkyPilot docs so it runs on a laptop-sized demo; docs/sdk-python.md
has the snippets at full size.
"""
import asyncio

from fedrouter import sandbox

# --- Quickstart: create, exec, terminate -----------------------------------
# Create a sandbox from the built-in `default` template.
sb = sandbox.create(name='dev')

# Run a command (argv tokens, no implicit shell); get
# stdout / stderr / exit_code back.
result = sb.exec('python', '-c', 'print(2 ** 10)')
print(result['stdout'])  # 1024

# Tear it down.
sb.terminate()

# --- Or use the context manager to terminate automatically -----------------
with sandbox.create(name='dev') as sb:
    r = sb.exec('python', '-c', 'import sys; print(sys.version_info[0])')
    print('exit', r.exit_code, 'stdout', r.stdout.strip())
# Sandbox is terminated on exit.

# --- Templates & warm pools --------------------------------------------------
# Create a template with warm pods kept idle and ready.
sandbox.create_template(
    name='ml-gpu',
    image='nvcr.io/nvidia/pytorch:24.05-py3',
    cpus=8,
    memory_gb=64,
    pool_replicas=2,
)
# Scale the warm pool up or down at any time.
sandbox.set_pool_size('ml-gpu', replicas=3)

# --- Batch ---------------------------------------------------------------------
sandboxes = sandbox.create(
    name='rollout',
    template='ml-gpu',
    num_sandboxes=4,
)
for sb in sandboxes:
    print(sb.name, sb.exec('python', '-c', 'print(6 * 7)').stdout.strip())
sandboxes.terminate()
sandbox.delete_template('ml-gpu')


# --- Async fan-out -------------------------------------------------------------
async def main():
    sandboxes = await sandbox.create.aio(
        name='rollout', num_sandboxes=10)
    try:
        results = await asyncio.gather(
            *(sb.exec.aio('python', '-c', 'print(2 + 2)') for sb in sandboxes))
        print('async results:', [r.stdout.strip() for r in results])
    finally:
        # Always tear down, even if an exec raises.
        await asyncio.gather(*(sb.terminate.aio() for sb in sandboxes))
        await sandbox.aclose()  # release the shared session

asyncio.run(main())
print('quickstart done')
