// The official E2B JS SDK (npm e2b, pinned in scripts/lib/e2b_sdk.sh),
// unmodified, against fedrouter's /e2b endpoint: E2B_API_URL and
// E2B_SANDBOX_URL point at <router>/e2b, E2B_API_KEY is a tenant token.
// Run by test_e2b.py, which starts the router, the kubesim cluster with the
// real agent, and a warm pool named in E2B_TEST_POOL.
// Prints "ok <step>" per step; the first failure prints "FAIL <step>: why"
// and exits 1. Every sandbox it makes is killed before it exits.
import { createRequire } from 'node:module'
const require = createRequire(process.env.FR_E2B_NODE_MODULES + '/')
const { Sandbox, CommandExitError, SandboxNotFoundError, NotFoundError, FileNotFoundError, InvalidArgumentError,
  TimeoutError } = require('e2b')

const POOL = process.env.E2B_TEST_POOL
const OTHER_KEY = process.env.E2B_TEST_OTHER_KEY
const BASE = process.env.E2B_API_URL
const made = []
let step = 'start'

function must (cond, why) {
  if (!cond) throw new Error(why)
}
async function throwsLike (fn, pred, why) {
  try {
    await fn()
  } catch (e) {
    must(pred(e), `${why}: wrong error ${e && e.constructor && e.constructor.name}: ${e && e.message}`)
    return e
  }
  throw new Error(`${why}: did not throw`)
}
// getInfo reads the router's cache, which shows a new expiry once the
// cluster's watch delivers it: ms to live until <ok>, for up to 2 s.
async function endAtSoon (sbx, ok) {
  let left
  for (let i = 0; i < 20; i++) {
    left = (await sbx.getInfo()).endAt.getTime() - Date.now()
    if (ok(left)) break
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return left
}
async function run (name, fn) {
  step = name
  const t0 = Date.now()
  await fn()
  console.log(`ok   ${name} (${Date.now() - t0} ms)`)
}

try {
  let sbx
  await run('create', async () => {
    sbx = await Sandbox.create(POOL, { timeoutMs: 120_000, metadata: { run: 'e2b-bb', who: 'first' },
      envs: { GREETING: 'hello from create' } })
    made.push(sbx)
    // One DNS label of at most 57 characters (so getHost(port) fits one):
    // the pod name, "p-" for "fr-pool-", then the owning cluster's code.
    must(/^[a-z0-9][a-z0-9-]*-[a-z0-9]{4}$/.test(sbx.sandboxId) && sbx.sandboxId.length <= 57,
      'sandbox id ' + sbx.sandboxId)
  })
  await run('getInfo', async () => {
    const info = await sbx.getInfo()
    must(info.sandboxId === sbx.sandboxId && info.templateId === POOL, 'info ' + JSON.stringify(info))
    must(info.metadata.run === 'e2b-bb' && info.metadata.who === 'first', 'metadata ' + JSON.stringify(info.metadata))
    must(info.state === 'running' && info.envdVersion === '0.5.7', 'state/envd ' + JSON.stringify(info))
    const left = info.endAt.getTime() - Date.now()
    must(left > 90_000 && left <= 121_000, 'endAt not ~120 s ahead: ' + left)
  })
  await run('setTimeout', async () => {
    await sbx.setTimeout(600_000)
    let left = await endAtSoon(sbx, (l) => l > 500_000 && l <= 601_000)
    must(left > 500_000 && left <= 601_000, 'endAt after setTimeout: ' + left)
    await sbx.setTimeout(300_000)
    left = await endAtSoon(sbx, (l) => l > 250_000 && l <= 301_000)
    must(left > 250_000 && left <= 301_000, 'endAt after a shorter setTimeout: ' + left)
  })
  await run('commands.run env and exit codes', async () => {
    const r = await sbx.commands.run('echo "$GREETING"; echo oops >&2')
    must(r.exitCode === 0 && r.stdout === 'hello from create\n' && r.stderr === 'oops\n', 'run ' + JSON.stringify(r))
    const e = await throwsLike(() => sbx.commands.run('echo partial; exit 3'), (e) => e instanceof CommandExitError,
      'exit 3')
    must(e.exitCode === 3 && e.stdout === 'partial\n', 'CommandExitError fields ' + e.exitCode + ' ' + e.stdout)
  })
  await run('onStdout streams before the end', async () => {
    const t0 = Date.now()
    const seen = []
    const r = await sbx.commands.run('echo a; sleep 1.2; echo b', { onStdout: (d) => seen.push([Date.now() - t0, d]) })
    must(r.stdout === 'a\nb\n' && seen.length === 2, 'chunks ' + JSON.stringify(seen))
    must(seen[0][0] < 1000 && Date.now() - t0 >= 1200, 'first chunk at ' + seen[0][0] + ' ms: not streamed')
    console.log(`     first chunk after ${seen[0][0]} ms, end after ${Date.now() - t0} ms`)
  })
  await run('background, list, kill', async () => {
    const h = await sbx.commands.run('sleep 300', { background: true })
    must((await sbx.commands.list()).some((p) => p.pid === h.pid && p.args.join(' ').includes('sleep 300')), 'not listed')
    must(await sbx.commands.kill(h.pid) === true, 'kill')
    await h.wait().catch(() => {})
    must(!(await sbx.commands.list()).some((p) => p.pid === h.pid), 'still listed after kill')
  })
  await run('timeoutMs kills the command', async () => {
    const t0 = Date.now()
    await throwsLike(() => sbx.commands.run('sleep 37', { timeoutMs: 800 }), (e) => !(e instanceof CommandExitError),
      'timeoutMs')
    must(Date.now() - t0 < 5000, 'timeoutMs took ' + (Date.now() - t0) + ' ms')
    const gone = async () => !(await sbx.commands.list()).some((p) => p.args && p.args.join(' ').includes('sleep 37'))
    let ok = false
    for (let i = 0; i < 20 && !(ok = await gone()); i++) await new Promise((resolve) => setTimeout(resolve, 100))
    must(ok, 'the command outlived its timeoutMs')
  })
  await run('sendStdin', async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'via stdin\n')
    await sbx.commands.closeStdin(h.pid)
    const r = await h.wait()
    must(r.stdout === 'via stdin\n', 'stdin echo ' + JSON.stringify(r.stdout))
  })
  await run('files text and binary', async () => {
    await sbx.files.write('/tmp/e2b/a.txt', 'text content ü')
    must(await sbx.files.read('/tmp/e2b/a.txt') === 'text content ü', 'text round trip')
    const bin = new Uint8Array(2_500_000).map((_, i) => (i * 7 + (i >> 9)) & 255)
    await sbx.files.write('/tmp/e2b/b.bin', bin.buffer)
    const back = await sbx.files.read('/tmp/e2b/b.bin', { format: 'bytes' })
    must(back.length === bin.length && back.every((v, i) => v === bin[i]), 'binary round trip')
    const r = await sbx.commands.run('wc -c < /tmp/e2b/b.bin')
    must(r.stdout.trim() === String(bin.length), 'size in the sandbox ' + r.stdout)
    await throwsLike(() => sbx.files.read('/tmp/e2b/missing'), (e) => e instanceof FileNotFoundError || e instanceof NotFoundError,
      'missing file')
  })
  await run('files list, exists, makeDir, rename, remove', async () => {
    must(await sbx.files.exists('/tmp/e2b/a.txt') && !(await sbx.files.exists('/tmp/e2b/nope')), 'exists')
    must(await sbx.files.makeDir('/tmp/e2b/d') === true && await sbx.files.makeDir('/tmp/e2b/d') === false, 'makeDir')
    const ls = await sbx.files.list('/tmp/e2b')
    must(ls.map((e) => e.name).sort().join() === 'a.txt,b.bin,d' && ls.find((e) => e.name === 'd').type === 'dir',
      'list ' + JSON.stringify(ls.map((e) => [e.name, e.type])))
    must((await sbx.files.rename('/tmp/e2b/a.txt', '/tmp/e2b/c.txt')).path === '/tmp/e2b/c.txt', 'rename')
    must(!(await sbx.files.exists('/tmp/e2b/a.txt')) && await sbx.files.exists('/tmp/e2b/c.txt'), 'after rename')
    await sbx.files.remove('/tmp/e2b/d')
    must(!(await sbx.files.exists('/tmp/e2b/d')), 'remove')
  })
  await run('files.watchDir', async () => {
    const dir = '/tmp/e2b-watch'
    await sbx.files.makeDir(dir + '/pre')
    // The agent is the parent of every command's shell: its inotify
    // instances are one per live watcher.
    const watches = async () => Number((await sbx.commands.run(
      'n=0; for f in /proc/$PPID/fd/*; do [ "$(readlink $f)" = anon_inode:inotify ] && n=$((n+1)); done; echo $n')).stdout.trim())
    const seen = (evs, name, type) => evs.some((e) => e.name === name && e.type === type)
    const waitFor = async (evs, want, what) => {
      for (let i = 0; i < 100 && !want.every(([n, t]) => seen(evs, n, t)); i++) await new Promise((r) => setTimeout(r, 50))
      must(want.every(([n, t]) => seen(evs, n, t)), what + ': got ' + JSON.stringify(evs.map((e) => [e.name, e.type])))
    }
    const waitWatches = async (n, what) => {
      let got
      for (let i = 0; i < 40 && (got = await watches()) !== n; i++) await new Promise((r) => setTimeout(r, 100))
      must(got === n, what + ': the agent holds ' + got + ' inotify instances, not ' + n)
    }
    await waitWatches(0, 'before watching')
    const evs = []
    const h = await sbx.files.watchDir(dir, (e) => { evs.push(e) })
    await waitWatches(1, 'while watching')
    await sbx.files.write(dir + '/a.txt', 'hello')
    await waitFor(evs, [['a.txt', 'create'], ['a.txt', 'write']], 'files.write')
    await sbx.commands.run(`mv ${dir}/a.txt ${dir}/b.txt && chmod 600 ${dir}/b.txt`)
    await waitFor(evs, [['a.txt', 'rename'], ['b.txt', 'create'], ['b.txt', 'chmod']], 'mv and chmod')
    await sbx.files.rename(dir + '/b.txt', dir + '/c.txt')
    await waitFor(evs, [['b.txt', 'rename'], ['c.txt', 'create']], 'files.rename')
    await sbx.files.remove(dir + '/c.txt')
    await sbx.files.makeDir(dir + '/sub')
    await sbx.files.write(dir + '/sub/x', 'below: not reported without recursive')
    await sbx.files.write(dir + '/pre/y', 'below: not reported without recursive')
    await sbx.files.write(dir + '/marker', 'm')
    await waitFor(evs, [['c.txt', 'remove'], ['sub', 'create'], ['marker', 'create']], 'remove, makeDir')
    must(!evs.some((e) => e.name.includes('/')), 'non-recursive watch reported ' + JSON.stringify(evs.map((e) => e.name)))
    must(evs.every((e) => e.entry === undefined), 'entry without includeEntry')
    await h.stop()
    await waitWatches(0, 'after stop()')

    const rev = []
    let exitErr = 'not yet'
    const r = await sbx.files.watchDir(dir, (e) => { rev.push(e) }, { recursive: true, onExit: (e) => { exitErr = e } })
    await sbx.files.write(dir + '/pre/y2', 'y')
    await waitFor(rev, [['pre/y2', 'create'], ['pre/y2', 'write']], 'recursive: existing subdirectory')
    await sbx.commands.run(`mkdir -p ${dir}/n1/n2 && echo z > ${dir}/n1/n2/z`)
    await waitFor(rev, [['n1', 'create'], ['n1/n2', 'create'], ['n1/n2/z', 'create']], 'recursive: new subdirectories')
    await sbx.files.write(dir + '/n1/n2/later', 'l')
    await waitFor(rev, [['n1/n2/later', 'create'], ['n1/n2/later', 'write']], 'recursive: watched as it appeared')
    await sbx.files.remove(dir + '/n1')
    await waitFor(rev, [['n1/n2/later', 'remove'], ['n1/n2', 'remove'], ['n1', 'remove']], 'recursive: remove')
    await r.stop()
    await waitWatches(0, 'after the recursive stop()')

    // timeoutMs ends the watch (envd's deadline): onExit gets the SDK's TimeoutError
    const t0 = Date.now()
    exitErr = 'not yet'
    await sbx.files.watchDir(dir, () => {}, { timeoutMs: 1500, onExit: (e) => { exitErr = e } })
    for (let i = 0; i < 100 && exitErr === 'not yet'; i++) await new Promise((r) => setTimeout(r, 50))
    must(exitErr instanceof TimeoutError, 'onExit after timeoutMs: ' + exitErr)
    must(Date.now() - t0 < 4500, 'the 1.5 s watch ended after ' + (Date.now() - t0) + ' ms')
    await waitWatches(0, 'after timeoutMs')

    await throwsLike(() => sbx.files.watchDir(dir + '/missing', () => {}), (e) => e instanceof FileNotFoundError,
      'watching a missing directory')
    await throwsLike(() => sbx.files.watchDir(dir + '/marker', () => {}),
      (e) => e instanceof InvalidArgumentError && /not a directory/.test(e.message), 'watching a file')
    await waitWatches(0, 'after the refused watches')
  })
  await run('pty', async () => {
    let out = ''
    const pty = await sbx.pty.create({ cols: 91, rows: 17, onData: (d) => { out += new TextDecoder().decode(d) } })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit 0\n'))
    await pty.wait().catch(() => {})
    must(out.includes('17 91'), 'pty output ' + JSON.stringify(out))
  })
  let second
  await run('list with metadata and pagination', async () => {
    second = await Sandbox.create(POOL, { timeoutMs: 120_000, metadata: { run: 'e2b-bb', who: 'second' } })
    made.push(second)
    const all = await Sandbox.list({ query: { metadata: { run: 'e2b-bb' } } }).nextItems()
    const ids = all.map((s) => s.sandboxId).sort()
    must(ids.join() === [sbx.sandboxId, second.sandboxId].sort().join(), 'list ' + ids)
    const only = await Sandbox.list({ query: { metadata: { who: 'second' } } }).nextItems()
    must(only.length === 1 && only[0].sandboxId === second.sandboxId && only[0].metadata.who === 'second', 'filter')
    const pager = Sandbox.list({ limit: 1, query: { metadata: { run: 'e2b-bb' } } })
    const p1 = await pager.nextItems()
    must(p1.length === 1 && pager.hasNext, 'page 1 ' + p1.length + ' ' + pager.hasNext)
    const p2 = await pager.nextItems()
    must(p2.length === 1 && p2[0].sandboxId !== p1[0].sandboxId && !pager.hasNext, 'page 2')
    const byTemplate = await Sandbox.list({ query: { template: POOL, metadata: { run: 'e2b-bb' } } }).nextItems()
    must(byTemplate.length === 2, 'template filter ' + byTemplate.length)
    must((await Sandbox.list({ query: { template: 'other-pool' } }).nextItems()).length === 0, 'other template')
    const later = await Sandbox.list({ query: { startedAfter: new Date(Date.now() + 3_600_000) } }).nextItems()
    must(later.length === 0, 'startedAfter an hour from now: ' + later.length)
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    must(paused.length === 0, 'paused list not empty')
  })
  await run('connect', async () => {
    const again = await Sandbox.connect(second.sandboxId)
    const r = await again.commands.run('echo connected')
    must(r.stdout === 'connected\n', 'run after connect')
    // A connect's timeout only lengthens the sandbox's life (E2B's rule).
    await Sandbox.connect(second.sandboxId, { timeoutMs: 10_000 })
    let left = (await again.getInfo()).endAt.getTime() - Date.now()
    must(left > 90_000, 'a shorter connect timeout shortened the life: ' + left)
    await Sandbox.connect(second.sandboxId, { timeoutMs: 900_000 })
    left = await endAtSoon(again, (l) => l > 850_000 && l <= 901_000)
    must(left > 850_000 && left <= 901_000, 'a longer connect timeout: ' + left)
  })
  await run('another tenant gets nothing', async () => {
    await throwsLike(() => Sandbox.getInfo(sbx.sandboxId, { apiKey: OTHER_KEY }), (e) => e instanceof SandboxNotFoundError,
      'getInfo by another tenant')
    await throwsLike(() => Sandbox.connect(sbx.sandboxId, { apiKey: OTHER_KEY }), (e) => e instanceof SandboxNotFoundError,
      'connect by another tenant')
    must(await Sandbox.kill(sbx.sandboxId, { apiKey: OTHER_KEY }) === false, 'kill by another tenant')
    const theirs = await Sandbox.list({ apiKey: OTHER_KEY }).nextItems()
    must(!theirs.some((s) => s.sandboxId === sbx.sandboxId), 'listed for another tenant')
    // In-sandbox: the real access token with another tenant's key, and a
    // guessed token, both find nothing.
    const call = (headers) => fetch(BASE + '/filesystem.Filesystem/ListDir', { method: 'POST',
      headers: Object.assign({ 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId }, headers),
      body: JSON.stringify({ path: '/tmp', depth: 1 }) })
    let r = await call({ 'X-Access-Token': sbx.envdAccessToken, 'X-API-Key': OTHER_KEY })
    must(r.status === 404 && (await r.json()).code === 404, 'other tenant in-sandbox ' + r.status)
    r = await call({ 'X-Access-Token': 'f'.repeat(64) })
    must(r.status === 404, 'guessed token ' + r.status)
    r = await call({ 'X-Access-Token': sbx.envdAccessToken })
    must(r.status === 200, 'the owner\'s token ' + r.status)
    // The agent's /init (its token and env) is never reachable.
    r = await fetch(BASE + '/init', { method: 'POST', headers: { 'E2b-Sandbox-Id': sbx.sandboxId,
      'X-Access-Token': sbx.envdAccessToken, 'Content-Type': 'application/json' }, body: '{"accessToken":"x"}' })
    must(r.status === 501, '/init reachable: ' + r.status)
  })
  await run('unsupported calls answer at once', async () => {
    const t0 = Date.now()
    // A sandbox made without lifecycle.onTimeout 'pause' has no workspace.
    const e = await throwsLike(() => sbx.pause(), (e) => /lifecycle.onTimeout/.test(e.message), 'pause')
    await throwsLike(() => sbx.createSnapshot(), (e) => /fedrouter does not support/.test(e.message), 'snapshot')
    await throwsLike(() => Sandbox.create('no-such-pool-x'), (e) => /no pool named/.test(e.message), 'unknown template')
    must(Date.now() - t0 < 5000, 'unsupported calls took ' + (Date.now() - t0) + ' ms')
    console.log('     pause says: ' + e.message)
  })
  await run('betaPause, list paused, connect resumes', async () => {
    const p = await Sandbox.create(POOL, { timeoutMs: 120_000, metadata: { run: 'e2b-pause' },
      envs: { KEPT: 'env kept' }, lifecycle: { onTimeout: 'pause' } })
    made.push(p)
    let info = await p.getInfo()
    must(info.lifecycle && info.lifecycle.onTimeout === 'pause' && info.lifecycle.autoResume === false,
      'lifecycle ' + JSON.stringify(info.lifecycle))
    await p.commands.run('echo precious > /home/user/f')
    must(await p.betaPause() === true, 'betaPause')
    info = await Sandbox.getInfo(p.sandboxId)
    must(info.state === 'paused', 'state after pause ' + info.state)
    must(await Sandbox.betaPause(p.sandboxId) === false, 'a second pause finds it paused')
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    must(paused.length === 1 && paused[0].sandboxId === p.sandboxId && paused[0].state === 'paused' &&
      paused[0].metadata.run === 'e2b-pause', 'paused list ' + JSON.stringify(paused))
    const running = await Sandbox.list({ query: { state: ['running'], metadata: { run: 'e2b-pause' } } }).nextItems()
    must(running.length === 0, 'running list holds the paused one')
    const both = await Sandbox.list({ query: { state: ['running', 'paused'], metadata: { run: 'e2b-pause' } } }).nextItems()
    must(both.length === 1, 'running+paused list ' + both.length)
    const back = await Sandbox.connect(p.sandboxId)
    must(back.sandboxId === p.sandboxId, 'same id after resume ' + back.sandboxId)
    const r = await back.commands.run('cat /home/user/f; echo "$KEPT"')
    must(r.stdout === 'precious\nenv kept\n', 'after resume: ' + JSON.stringify(r.stdout))
    must((await back.getInfo()).state === 'running', 'running after connect')
    await back.kill()
    await throwsLike(() => Sandbox.getInfo(p.sandboxId), (e) => e instanceof SandboxNotFoundError, 'getInfo after kill')
  })
  await run('autoResume: a call into a paused sandbox resumes it', async () => {
    const p = await Sandbox.create(POOL, { timeoutMs: 120_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    made.push(p)
    must((await p.getInfo()).lifecycle.autoResume === true, 'autoResume recorded')
    await p.commands.run('echo auto > /home/user/a')
    must(await p.betaPause() === true, 'betaPause')
    must((await Sandbox.getInfo(p.sandboxId)).state === 'paused', 'paused')
    // No connect: the same object's next calls resume it.
    const r = await p.commands.run('cat /home/user/a')
    must(r.stdout === 'auto\n', 'command after auto-resume: ' + JSON.stringify(r.stdout))
    must((await Sandbox.getInfo(p.sandboxId)).state === 'running', 'running after the call')
    must(await p.betaPause() === true, 'betaPause again')
    must(await p.files.read('/home/user/a') === 'auto\n', 'files.read resumes it too')
    await p.kill()
  })
  await run('onTimeout pause', async () => {
    const t = await Sandbox.create(POOL, { timeoutMs: 3_000, lifecycle: { onTimeout: 'pause' } })
    made.push(t)
    await t.commands.run('echo timed > /home/user/t')
    let state = 'running'
    for (let i = 0; i < 100 && state !== 'paused'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      state = (await Sandbox.getInfo(t.sandboxId)).state
    }
    must(state === 'paused', 'not paused at its timeout: ' + state)
    const back = await Sandbox.connect(t.sandboxId, { timeoutMs: 60_000 })
    const r = await back.commands.run('cat /home/user/t')
    must(r.stdout === 'timed\n', 'after the timeout pause: ' + JSON.stringify(r.stdout))
    await back.kill()
  })
  await run('kill', async () => {
    await sbx.kill()
    await throwsLike(() => Sandbox.getInfo(sbx.sandboxId), (e) => e instanceof SandboxNotFoundError, 'getInfo after kill')
    must(await Sandbox.kill(sbx.sandboxId) === false, 'second kill finds it gone')
    const left = await Sandbox.list({ query: { metadata: { run: 'e2b-bb' } } }).nextItems()
    must(left.length === 1 && left[0].sandboxId === second.sandboxId, 'list after kill')
  })
  console.log('e2b sdk ok')
} catch (e) {
  console.log(`FAIL ${step}: ${e && e.stack ? e.stack : e}`)
  process.exitCode = 1
} finally {
  for (const s of made) await s.kill().catch(() => {})
}
