// The RL reward loop written the E2B way, run unmodified on fedrouter.
//
// 64 sandboxes from a warm pool (the E2B "template"), each runs one
// candidate program the policy wrote, with a timeout, and is always killed.
// A bad rollout (wrong answer, crash, endless loop, a sandbox that could
// not be made) scores 0; it never throws.
//
//   export E2B_API_URL=http://127.0.0.1:8080/e2b E2B_SANDBOX_URL=http://127.0.0.1:8080/e2b
//   export E2B_API_KEY=demo-token                  # scripts/demo prints the URL and the token
//   node examples/e2b_rl_reward.mjs [ROLLOUTS] [POOL]     # default 64 default
//
// The SDK: `npm install e2b` next to this file, or FR_E2B_NODE_MODULES=
// the node_modules that scripts/lib/e2b_sdk.sh prints. Prints one line per
// rollout and, last, a JSON summary {"rollouts","mean_reward","rewards",
// "errors","seconds","left_running"}.
import { createRequire } from 'node:module'

const { Sandbox, CommandExitError } = process.env.FR_E2B_NODE_MODULES
  ? createRequire(process.env.FR_E2B_NODE_MODULES + '/')('e2b')
  : await import('e2b')

const ROLLOUTS = Number(process.argv[2] || 64)
const POOL = process.argv[3] || 'default'
const RUN = 'rl-' + Math.random().toString(36).slice(2, 10)

// The "policy's" candidates for one task: print the sum of the integers
// in /tmp/task/input. Some are right, some wrong, some misbehave.
const CANDIDATES = [
  ['correct', 'print(sum(map(int, open("/tmp/task/input").read().split())))'],
  ['wrong_answer', 'print(sum(map(int, open("/tmp/task/input").read().split())) + 1)'],
  ['crash', 'raise RuntimeError("policy wrote a bug")'],
  ['endless_loop', 'while True: pass'],
  ['syntax_error', 'print(sum(['],
  ['correct_verbose', 'import sys\nnums = [int(x) for x in open("/tmp/task/input").read().split()]\n' +
    'print("debug", file=sys.stderr)\nprint(sum(nums))']
]

async function rollout (i) {
  const [kind, program] = CANDIDATES[i % CANDIDATES.length]
  let sbx
  try {
    sbx = await Sandbox.create(POOL, { timeoutMs: 600_000, metadata: { run: RUN } })
    await sbx.files.write('/tmp/task/input', '3 4 5\n')
    await sbx.files.write('/tmp/task/candidate.py', program)
    const r = await sbx.commands.run('python3 /tmp/task/candidate.py', { timeoutMs: 5_000 })
    return { i, kind, reward: r.stdout.trim() === '12' ? 1 : 0, error: null }
  } catch (e) {
    // A non-zero exit is CommandExitError; the timeout and everything else
    // (no room, a sandbox gone) are errors of their own: all score 0.
    const error = e instanceof CommandExitError ? 'exit_' + e.exitCode : e.name || 'Error'
    return { i, kind, reward: 0, error }
  } finally {
    if (sbx) await sbx.kill().catch(() => {})
  }
}

const t0 = Date.now()
const results = await Promise.all(Array.from({ length: ROLLOUTS }, (_, i) => rollout(i)))
for (const r of results) console.log(`rollout ${String(r.i).padStart(2)} ${r.kind.padEnd(16)} reward ${r.reward}${r.error ? ' (' + r.error + ')' : ''}`)
const errors = {}
for (const r of results) if (r.error) errors[r.error] = (errors[r.error] || 0) + 1
const left = await Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems()
console.log(JSON.stringify({ rollouts: ROLLOUTS, mean_reward: results.reduce((s, r) => s + r.reward, 0) / ROLLOUTS,
  rewards: results.map((r) => r.reward), errors, seconds: (Date.now() - t0) / 1000, left_running: left.length }))
