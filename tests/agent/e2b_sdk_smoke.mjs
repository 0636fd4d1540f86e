// The official E2B JS SDK (npm e2b, 2.x; read and checked with 2.51.0)
// against fedrouter-agent directly: sandboxUrl points at the agent, the
// access token is the one /init set. Run by test_agent.py when
// FR_E2B_NODE_MODULES names a node_modules holding e2b; skipped otherwise.
// Usage: node e2b_sdk_smoke.mjs PORT TOKEN DIR   (exit 0 = all good)
import { createRequire } from 'node:module'
const require = createRequire(process.env.FR_E2B_NODE_MODULES + '/')
const { Sandbox, CommandExitError } = require('e2b')

const [port, token, dir] = process.argv.slice(2)
const fail = (m) => { console.error('FAIL ' + m); process.exit(1) }
const must = (c, m) => { if (!c) fail(m) }

const sbx = new Sandbox({ sandboxId: 'agent-smoke', envdAccessToken: token, envdVersion: '0.5.7',
  sandboxUrl: `http://127.0.0.1:${port}`, apiKey: 'unused' })

const chunks = []
const r = await sbx.commands.run('echo hi; echo err >&2; sleep 0.5; echo bye', { onStdout: (d) => chunks.push(d) })
must(r.exitCode === 0 && r.stdout === 'hi\nbye\n' && r.stderr === 'err\n', 'run ' + JSON.stringify(r))
must(chunks.length === 2, 'onStdout chunks ' + JSON.stringify(chunks))
try {
  await sbx.commands.run('exit 3')
  fail('exit 3 did not throw')
} catch (e) {
  must(e instanceof CommandExitError && e.exitCode === 3, 'CommandExitError ' + e)
}
const bg = await sbx.commands.run('cat', { background: true, stdin: true })
await sbx.commands.sendStdin(bg.pid, 'via stdin\n')
await sbx.commands.closeStdin(bg.pid)
must((await bg.wait()).stdout === 'via stdin\n', 'stdin')
const sl = await sbx.commands.run('sleep 30', { background: true })
must((await sbx.commands.list()).some((p) => p.pid === sl.pid && p.cmd === '/bin/bash'), 'list')
must(await sbx.commands.kill(sl.pid) === true, 'kill')
try {
  await sbx.commands.run('sleep 20', { timeoutMs: 800 })
  fail('timeoutMs did not end the command')
} catch (e) { /* the SDK reports its own timeout; the agent killed the command */ }
await sbx.files.write(dir + '/a.txt', 'text content')
must(await sbx.files.read(dir + '/a.txt') === 'text content', 'text round trip')
const bin = new Uint8Array(300000).map((_, i) => (i * 7) & 255)
await sbx.files.write(dir + '/b.bin', bin.buffer)
const back = await sbx.files.read(dir + '/b.bin', { format: 'bytes' })
must(back.length === bin.length && back.every((v, i) => v === bin[i]), 'bytes round trip')
must(await sbx.files.exists(dir + '/a.txt') && !(await sbx.files.exists(dir + '/nope')), 'exists')
must(await sbx.files.makeDir(dir + '/d') === true && await sbx.files.makeDir(dir + '/d') === false, 'makeDir')
const ls = await sbx.files.list(dir)
must(ls.map((e) => e.name).sort().join() === 'a.txt,b.bin,d' && ls.find((e) => e.name === 'd').type === 'dir', 'list ' + JSON.stringify(ls))
must((await sbx.files.rename(dir + '/a.txt', dir + '/c.txt')).path === dir + '/c.txt', 'rename')
await sbx.files.remove(dir + '/d')
must(!(await sbx.files.exists(dir + '/d')), 'remove')
try {
  await sbx.files.read(dir + '/missing')
  fail('read of a missing file succeeded')
} catch (e) { must(e.constructor.name === 'FileNotFoundError', 'missing file error ' + e.constructor.name) }
let ptyOut = ''
const pty = await sbx.pty.create({ cols: 91, rows: 17, onData: (d) => { ptyOut += new TextDecoder().decode(d) } })
await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit 0\n'))
await pty.wait().catch(() => {})
must(ptyOut.includes('17 91'), 'pty ' + JSON.stringify(ptyOut))
const c = await sbx.commands.run('echo again; sleep 0.3; echo done', { background: true })
const c2 = await sbx.commands.connect(c.pid)
must((await c2.wait()).stdout.endsWith('done\n'), 'connect')
console.log('e2b sdk ok')
