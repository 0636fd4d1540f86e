// The official E2B Code Interpreter JS SDK (npm @e2b/code-interpreter,
// pinned in scripts/lib/code_interpreter_sdk.sh), unmodified, against
// deploy/code-interpreter/server.py itself: a Sandbox object whose
// sandboxUrl (what E2B_SANDBOX_URL sets) is the server, so runCode and the
// context calls go through the SDK's own HTTP code to it, with the headers
// the router would see (E2b-Sandbox-Id, E2b-Sandbox-Port: 49999).
// Run by test_codeint_sdk.py, which starts the server (FR_CI_URL) and gives
// the SDK's node_modules (FR_CI_NODE_MODULES); and by test_codeint_router.py
// through fedrouter's /e2b (no FR_CI_URL): Sandbox.create() with the
// default template, every call relayed by the router to port 49999 of a
// kubesim pod that runs the server.
// Prints "ok <step>" per step; the first failure prints "FAIL <step>: why"
// and exits 1.
import { createRequire } from 'node:module'
const require = createRequire(process.env.FR_CI_NODE_MODULES + '/')
const { Sandbox, NotFoundError, InvalidArgumentError, SandboxError, TimeoutError } = require('@e2b/code-interpreter')

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
function ok (name) {
  console.log(`ok ${name}`)
}

try {
  // Against the server itself (FR_CI_URL): Sandbox.create() would ask
  // E2B_API_URL for a sandbox; the object it returns is built by this
  // constructor from the create's answer. Through fedrouter (no
  // FR_CI_URL; E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set): the real
  // Sandbox.create() with the SDK's default template.
  step = 'create'
  const direct = !!process.env.FR_CI_URL
  const sbx = direct
    ? new Sandbox({ sandboxId: 'local-sandbox', sandboxUrl: process.env.FR_CI_URL,
      envdAccessToken: 'token', apiKey: 'unused', envdVersion: '0.5.7' })
    : await Sandbox.create({ metadata: { run: 'codeint-bb' } })
  if (!direct) {
    must(/^[a-z0-9-]+$/.test(sbx.sandboxId) && sbx.sandboxId.length <= 57, `sandbox id ${sbx.sandboxId}`)
    must(typeof sbx.trafficAccessToken === 'string' && sbx.trafficAccessToken.length === 64, 'trafficAccessToken')
    console.log(`sandbox ${sbx.sandboxId}`)
  }
  ok(step)

  step = 'state'
  const a = await sbx.runCode('x = 1')
  const b = await sbx.runCode('x += 1\nx')
  must(b.text === '2', `text ${b.text}`)
  must(b.executionCount === a.executionCount + 1, `counts ${a.executionCount} ${b.executionCount}`)
  must(b.results.length === 1 && b.results[0].isMainResult === true, JSON.stringify(b.results))
  ok(step)

  step = 'logs'
  const seen = []
  const c = await sbx.runCode('import sys\nprint("o1", flush=True)\nprint("e1", file=sys.stderr, flush=True)\nprint("o2", flush=True)', {
    onStdout: (m) => seen.push(['out', m.line, m.error]),
    onStderr: (m) => seen.push(['err', m.line, m.error])
  })
  must(JSON.stringify(seen) === JSON.stringify([['out', 'o1\n', false], ['err', 'e1\n', true], ['out', 'o2\n', false]]),
    `callbacks ${JSON.stringify(seen)}`)
  must(JSON.stringify(c.logs) === JSON.stringify({ stdout: ['o1\n', 'o2\n'], stderr: ['e1\n'] }), JSON.stringify(c.logs))
  ok(step)

  step = 'png'
  const results = []
  const p = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 4])\nplt.show()',
    { onResult: (r) => results.push(r) })
  must(results.length === 1 && p.results.length === 1, `results ${p.results.length}`)
  const png = Buffer.from(p.results[0].png, 'base64')
  must(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'PNG signature')
  must(png.length > 2000 && png.readUInt32BE(16) >= 200, `PNG ${png.length} bytes, width ${png.readUInt32BE(16)}`)
  must(p.results[0].formats().includes('png') && p.results[0].isMainResult === false, p.results[0].formats())
  ok(step)

  step = 'error'
  let onErr = null
  const e = await sbx.runCode('1 / 0', { onError: (err) => { onErr = err } })
  must(e.error && e.error.name === 'ZeroDivisionError' && e.error.value === 'division by zero', JSON.stringify(e.error))
  must(typeof e.error.traceback === 'string' && e.error.traceback.includes('ZeroDivisionError'), 'traceback')
  must(onErr && onErr.name === 'ZeroDivisionError', 'onError')
  ok(step)

  step = 'envs'
  const env = await sbx.runCode('import os\nos.environ.get("FR_SDK_ENV")', { envs: { FR_SDK_ENV: 'set' } })
  must(env.text === 'set', `envs ${env.text}`)
  const after = await sbx.runCode('repr(os.environ.get("FR_SDK_ENV"))')
  must(after.text === 'None', `after ${after.text}`)
  ok(step)

  step = 'contexts'
  const ctx = await sbx.createCodeContext({ cwd: '/tmp', language: 'python' })
  must(typeof ctx.id === 'string' && ctx.cwd === '/tmp' && ctx.language === 'python', JSON.stringify(ctx))
  const cw = await sbx.runCode('import os\nos.getcwd()', { context: ctx })
  must(cw.text === '/tmp', `cwd ${cw.text}`)
  const list = await sbx.listCodeContexts()
  must(list.some((x) => x.id === ctx.id) && list.length === 2, JSON.stringify(list))
  await sbx.runCode('z = 5', { context: ctx })
  await sbx.restartCodeContext(ctx)
  const gone = await sbx.runCode('z', { context: ctx })
  must(gone.error && gone.error.name === 'NameError', `after restart ${JSON.stringify(gone.error)}`)
  ok(step)

  step = 'language'
  const py = await sbx.runCode('x', { language: 'python' })
  must(py.text === '2', `language python uses the default context: ${py.text}`)
  await throwsLike(() => sbx.runCode('1', { language: 'r' }), (x) => x instanceof SandboxError && /400/.test(x.message),
    'language r')
  await throwsLike(() => sbx.runCode('1', { language: 'python', context: ctx }), (x) => x instanceof InvalidArgumentError,
    'context and language')
  ok(step)

  step = 'timeout interrupts'
  await sbx.runCode('n = 0', { context: ctx })
  await throwsLike(() => sbx.runCode('import time\nwhile True:\n    n += 1\n    time.sleep(0.001)', { context: ctx, timeoutMs: 1500 }),
    (x) => x instanceof TimeoutError, 'timeoutMs')
  const n = await sbx.runCode('n > 0', { context: ctx })
  must(n.text === 'True', `state after the interrupt ${n.text} ${JSON.stringify(n.error)}`)
  ok(step)

  step = 'remove'
  await sbx.removeCodeContext(ctx.id)
  await throwsLike(() => sbx.runCode('1', { context: ctx }), (x) => x instanceof NotFoundError, 'removed context')
  await throwsLike(() => sbx.removeCodeContext(ctx), (x) => x instanceof NotFoundError, 'remove twice')
  await throwsLike(() => sbx.restartCodeContext('nope'), (x) => x instanceof NotFoundError, 'restart unknown')
  must((await sbx.listCodeContexts()).length === 1, 'one context left')
  ok(step)
  if (!direct) {
    step = 'kill'
    await sbx.kill()
    must(!(await sbx.isRunning()), 'still running after kill')
    ok(step)
  }
  console.log('PASS')
  // runCode calls that threw (404, 400) leave the SDK's request timer
  // (requestTimeoutMs, 60 s) armed, which would keep node up that long.
  process.exit(0)
} catch (e) {
  console.log(`FAIL ${step}: ${e && e.stack ? e.stack : e}`)
  process.exit(1)
}
