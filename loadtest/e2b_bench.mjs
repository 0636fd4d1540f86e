// Sandboxes/s and commands/s through the E2B endpoint (the official JS SDK,
// unmodified) vs the v1 API (plain fetch, keep-alive), in one run against
// one router.
//
// For each way, with the warm pool full again before it starts:
//   create   N sandboxes from the pool, C at a time       -> sandboxes/s
//   command  M commands (`echo hi`) spread over them, C at a time -> commands/s
//   kill     the N sandboxes, C at a time                 -> kills/s
// and prints a table plus one JSON line. Everything it creates is killed.
//
//   export FEDROUTER_URL=http://127.0.0.1:8080 FEDROUTER_TOKEN=demo-token   # scripts/demo
//   FR_E2B_NODE_MODULES=$(bash scripts/lib/e2b_sdk.sh) \
//     node loadtest/e2b_bench.mjs [-n 32] [-m 400] [-c 8] [--pool default] [--first e2b|v1]
import { createRequire } from 'node:module'

const { Sandbox } = process.env.FR_E2B_NODE_MODULES
  ? createRequire(process.env.FR_E2B_NODE_MODULES + '/')('e2b')
  : await import('e2b')

const opt = { n: 32, m: 400, c: 8, pool: 'default', first: 'e2b' }
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^-+/, '')] = process.argv[i + 1]
const N = Number(opt.n); const M = Number(opt.m); const C = Number(opt.c); const POOL = opt.pool
const URL_ = process.env.FEDROUTER_URL; const TOKEN = process.env.FEDROUTER_TOKEN
if (!URL_ || !TOKEN) throw new Error('set FEDROUTER_URL and FEDROUTER_TOKEN')
const e2bOpts = { apiUrl: URL_ + '/e2b', sandboxUrl: URL_ + '/e2b', apiKey: TOKEN }
const H = { Authorization: 'Bearer ' + TOKEN, 'Content-Type': 'application/json' }

async function v1 (method, path, body) {
  const r = await fetch(URL_ + path, { method, headers: H, body: body ? JSON.stringify(body) : undefined })
  const text = await r.text()
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text.slice(0, 200)}`)
  return text ? JSON.parse(text) : null
}

// Runs fn(0..count-1), <conc> at a time; returns the seconds it took.
async function pool (count, conc, fn) {
  let next = 0
  const t0 = performance.now()
  await Promise.all(Array.from({ length: Math.min(conc, count) }, async () => {
    while (next < count) await fn(next++)
  }))
  return (performance.now() - t0) / 1000
}

async function poolFull () {
  const t0 = Date.now()
  while (Date.now() - t0 < 120_000) {
    const cl = await v1('GET', '/v1/clusters')
    let ready = 0; let target = 0
    for (const c of cl.clusters) for (const p of c.pools) if (p.name === POOL) { ready += p.ready; target += p.target }
    if (target < N) throw new Error(`pool ${POOL} holds ${target} pods; -n ${N} needs that many (PATCH /v1/pools/${POOL})`)
    if (ready >= N) return
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  throw new Error('the pool did not refill in 120 s')
}

const ways = {
  e2b: {
    create: async () => Sandbox.create(POOL, Object.assign({ timeoutMs: 600_000 }, e2bOpts)),
    run: async (s) => { const r = await s.commands.run('echo hi'); if (r.stdout !== 'hi\n') throw new Error('output') },
    kill: async (s) => s.kill()
  },
  v1: {
    create: async () => (await v1('POST', '/v1/sandboxes', { pool: POOL, name: 'bench' })).sandboxes[0].id,
    run: async (id) => {
      const r = await v1('POST', `/v1/sandboxes/${id}/exec`, { argv: ['echo', 'hi'] })
      if (r.stdout !== 'hi\n') throw new Error('output')
    },
    kill: async (id) => v1('DELETE', `/v1/sandboxes/${id}`)
  }
}

const report = { n: N, m: M, c: C, pool: POOL }
const order = opt.first === 'v1' ? ['v1', 'e2b'] : ['e2b', 'v1']
for (const name of order) {
  const w = ways[name]
  await poolFull()
  const sbs = []
  try {
    const tc = await pool(N, C, async () => { sbs.push(await w.create()) })
    const tr = await pool(M, C, async (i) => w.run(sbs[i % sbs.length]))
    const tk = await pool(sbs.length, C, async (i) => w.kill(sbs[i]))
    sbs.length = 0
    report[name] = { sandboxes_per_s: N / tc, commands_per_s: M / tr, kills_per_s: N / tk }
  } finally {
    for (const s of sbs) await w.kill(s).catch(() => {})
  }
}
const row = (k, l) => `${l.padEnd(14)} ${report.e2b[k].toFixed(1).padStart(10)} ${report.v1[k].toFixed(1).padStart(10)} ${(report.e2b[k] / report.v1[k]).toFixed(2).padStart(8)}`
console.log(`E2B endpoint vs v1: ${N} sandboxes from pool ${POOL}, ${M} commands, concurrency ${C}`)
console.log(`${''.padEnd(14)} ${'e2b'.padStart(10)} ${'v1'.padStart(10)} ${'e2b/v1'.padStart(8)}`)
console.log(row('sandboxes_per_s', 'sandboxes/s'))
console.log(row('commands_per_s', 'commands/s'))
console.log(row('kills_per_s', 'kills/s'))
console.log(JSON.stringify(report))
