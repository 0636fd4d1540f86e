// The official Kubernetes JavaScript client (npm @kubernetes/client-node,
// pinned in scripts/lib/kube_js_client.sh), unmodified, against kubesim over
// TLS with a bearer token, through the kubeconfig kubesim writes.
// Run by kube_js_client.sh, which starts kubesim (two nodes, the stand-in
// agent, --min-request-timeout 1 so watches without timeoutSeconds end after
// 1-2 s, as an API server's do after 30-60 min) and passes:
//   FR_KUBE_JS_NODE_MODULES  the node_modules holding the client
//   KUBESIM_KUBECONFIG       the kubeconfig kubesim wrote
// Every check runs, failures do not stop the run; prints "ok <check>" or
// "FAIL <check>: why" per check and "kube js client: N checks, M failed"
// last; exits 1 when any failed.
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import https from 'node:https'
import { Readable, Writable } from 'node:stream'

const require = createRequire(process.env.FR_KUBE_JS_NODE_MODULES + '/')
const main = require.resolve('@kubernetes/client-node')
const k8s = await import(pathToFileURL(main).href)
// Not re-exported by the package index; Exec takes one to choose the socket.
const { WebSocketHandler } = await import(pathToFileURL(main.replace(/index\.js$/, 'web-socket-handler.js')).href)
const { ApiException, PatchStrategy, setHeaderOptions } = k8s

const NS = 'jsc'
const kc = new k8s.KubeConfig()
kc.loadFromFile(process.env.KUBESIM_KUBECONFIG)
const core = kc.makeApiClient(k8s.CoreV1Api)
const apps = kc.makeApiClient(k8s.AppsV1Api)

const failures = []
let checks = 0

function must (cond, why) {
  if (!cond) throw new Error(why)
}
function eq (got, want, what) {
  const g = JSON.stringify(got)
  const w = JSON.stringify(want)
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`)
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
async function waitFor (what, fn, ms = 5000) {
  const end = Date.now() + ms
  let last
  for (;;) {
    try {
      last = await fn()
      if (last) return last
    } catch (e) {
      last = e
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last})`)
    await sleep(50)
  }
}
async function check (name, fn) {
  const t0 = Date.now()
  checks++
  let timer
  try {
    await Promise.race([fn(), new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new Error('check timed out after 20 s')), 20000)
    })])
    console.log(`ok   ${name} (${Date.now() - t0} ms)`)
  } catch (e) {
    failures.push(name)
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`)
  } finally {
    clearTimeout(timer)
  }
}
// The call must fail with the client's ApiException <code> whose body is a
// Status with <reason>; returns the parsed Status.
async function apiError (fn, code, reason, what) {
  let err
  try {
    await fn()
  } catch (e) {
    err = e
  }
  must(err !== undefined, `${what}: did not fail`)
  must(err instanceof ApiException, `${what}: ${err && err.constructor.name}, not ApiException: ${err}`)
  eq(err.code, code, `${what}: ApiException.code`)
  let st
  try {
    st = typeof err.body === 'string' ? JSON.parse(err.body) : err.body
  } catch (e) {
    throw new Error(`${what}: the body is not JSON: ${err.body}`)
  }
  must(st && st.kind === 'Status' && st.apiVersion === 'v1' && st.status === 'Failure' && st.code === code &&
    st.reason === reason && typeof st.message === 'string',
  `${what}: body is not a ${code} ${reason} Status: ${JSON.stringify(st)}`)
  return st
}
// A request to kubesim outside the client (the admin API), with the
// client's own TLS settings and token.
async function admin (path, body) {
  const opts = {}
  await kc.applyToHTTPSOptions(opts)
  const url = new URL(kc.getCurrentCluster().server + path)
  return new Promise((resolve, reject) => {
    const req = https.request(url, { ...opts, method: 'POST', headers: { ...opts.headers, 'Content-Type': 'application/json' } },
      (res) => {
        let data = ''
        res.on('data', (c) => { data += c })
        res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(data)) : reject(new Error(`${path}: ${res.statusCode} ${data}`))))
      })
    req.on('error', reject)
    req.end(JSON.stringify(body || {}))
  })
}
function collector () {
  const chunks = []
  const stream = new Writable({
    write (chunk, enc, cb) {
      chunks.push(Buffer.from(chunk))
      cb()
    }
  })
  return { stream, text: () => Buffer.concat(chunks).toString() }
}
function podBody (name, labels, extra = {}) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels },
    spec: {
      containers: [{
        name: 'main',
        image: 'busybox:1.36',
        command: ['sleep', '3600'],
        env: [{ name: 'GREETING', value: 'hello' }],
        ports: [{ name: 'http', containerPort: 8080 }]
      }],
      ...extra
    }
  }
}
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch)
const strategicPatch = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch)
const readPod = (name) => core.readNamespacedPod({ namespace: NS, name })
const running = (name) => waitFor(`${name} Running`, async () => {
  const p = await readPod(name)
  return p.status.phase === 'Running' && p
})

// ------------------------------------------------------------------ setup
await check('kubeconfig: loadFromFile gives the https server, the CA and the token', async () => {
  eq(kc.getCurrentContext(), 'js', 'current context')
  const cl = kc.getCurrentCluster()
  must(/^https:\/\/127\.0\.0\.1:\d+$/.test(cl.server), 'server ' + cl.server)
  must(cl.caData && !cl.skipTLSVerify, 'the cluster has no certificate-authority-data')
  must(kc.getCurrentUser().token, 'the user has no token')
})

await check('VersionApi.getCode and 401 as ApiException with a wrong token', async () => {
  const v = await kc.makeApiClient(k8s.VersionApi).getCode()
  eq([v.major, v.minor, v.gitVersion], ['1', '32', 'v1.32.0'], 'version')
  const bad = new k8s.KubeConfig()
  bad.loadFromString(JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'c', cluster: { server: kc.getCurrentCluster().server, 'certificate-authority-data': kc.getCurrentCluster().caData } }],
    users: [{ name: 'u', user: { token: 'wrong' } }],
    contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
    'current-context': 'x'
  }))
  let err
  try {
    await bad.makeApiClient(k8s.CoreV1Api).listNamespace()
  } catch (e) {
    err = e
  }
  must(err instanceof ApiException && err.code === 401, `wrong token: ${err}`)
})

await check('Health: livez and readyz', async () => {
  const h = new k8s.Health(kc)
  eq([await h.livez({}), await h.readyz({})], [true, true], 'livez, readyz')
})

// ------------------------------------------------------------------ namespaces
await check('namespaces: create, read, list, merge-patch, delete', async () => {
  const ns = await core.createNamespace({ body: { metadata: { name: NS, labels: { suite: 'js' } } } })
  must(ns instanceof k8s.V1Namespace, 'create returned ' + ns.constructor.name)
  eq(ns.status.phase, 'Active', 'phase')
  must(ns.metadata.uid && ns.metadata.resourceVersion && ns.metadata.creationTimestamp instanceof Date,
    'metadata ' + JSON.stringify(ns.metadata))
  eq((await core.readNamespace({ name: NS })).metadata.uid, ns.metadata.uid, 'read uid')
  const list = await core.listNamespace({ labelSelector: 'suite=js' })
  eq(list.items.map((n) => n.metadata.name), [NS], 'list by label')
  must(list.metadata.resourceVersion, 'list has no resourceVersion')
  const p = await core.patchNamespace({ name: NS, body: { metadata: { labels: { extra: 'yes' } } } }, mergePatch)
  eq(p.metadata.labels, { suite: 'js', extra: 'yes' }, 'labels after the merge patch')
  await core.createNamespace({ body: { metadata: { name: 'jsc-gone' } } })
  await core.deleteNamespace({ name: 'jsc-gone' })
  await waitFor('jsc-gone deleted', async () => {
    try {
      await core.readNamespace({ name: 'jsc-gone' })
      return false
    } catch (e) {
      return e.code === 404
    }
  })
})

// ------------------------------------------------------------------ pods
let p1
await check('pods: create returns the Pod (201), read and list see it Running', async () => {
  p1 = await core.createNamespacedPod({ namespace: NS, body: podBody('p1', { app: 'js', tier: 'a' }) })
  must(p1 instanceof k8s.V1Pod, 'create returned ' + p1.constructor.name)
  eq([p1.metadata.namespace, p1.kind, p1.apiVersion], [NS, 'Pod', 'v1'], 'namespace, kind, apiVersion')
  must(p1.metadata.uid && p1.metadata.resourceVersion, 'uid and resourceVersion')
  await core.createNamespacedPod({ namespace: NS, body: podBody('p2', { app: 'js', tier: 'b' }) })
  await core.createNamespacedPod({ namespace: NS, body: podBody('p3', { app: 'js', tier: 'b' }) })
  await core.createNamespacedPod({ namespace: NS, body: podBody('p4', { app: 'other' }) })
  const r = await running('p1')
  must(r.status.podIP && r.spec.nodeName, 'podIP and nodeName ' + JSON.stringify(r.status))
  const ready = r.status.conditions.find((c) => c.type === 'Ready')
  must(ready && ready.status === 'True' && ready.lastTransitionTime instanceof Date, 'Ready ' + JSON.stringify(ready))
  eq(r.status.containerStatuses[0].name, 'main', 'container status name')
  must(r.status.containerStatuses[0].state.running.startedAt instanceof Date, 'running.startedAt')
  for (const n of ['p2', 'p3', 'p4']) await running(n)
  const list = await core.listNamespacedPod({ namespace: NS })
  eq(list.items.map((p) => p.metadata.name), ['p1', 'p2', 'p3', 'p4'], 'names')
  eq(list.kind, 'PodList', 'list kind')
  const all = await core.listPodForAllNamespaces({ labelSelector: 'app=js' })
  eq(all.items.length, 3, 'pods for all namespaces with app=js')
})

await check('selectors: label (=, !=, in, notin, exists) and field selectors', async () => {
  const names = async (q) => (await core.listNamespacedPod({ namespace: NS, ...q })).items.map((p) => p.metadata.name)
  eq(await names({ labelSelector: 'app=js,tier!=a' }), ['p2', 'p3'], 'app=js,tier!=a')
  eq(await names({ labelSelector: 'tier in (a,b)' }), ['p1', 'p2', 'p3'], 'tier in (a,b)')
  eq(await names({ labelSelector: 'app,tier notin (b)' }), ['p1', 'p4'], 'app,tier notin (b)')
  eq(await names({ labelSelector: '!tier' }), ['p4'], '!tier')
  eq(await names({ fieldSelector: 'metadata.name=p3' }), ['p3'], 'metadata.name=p3')
  eq(await names({ fieldSelector: 'status.phase=Running,metadata.name!=p1', labelSelector: 'app=js' }), ['p2', 'p3'],
    'status.phase=Running,metadata.name!=p1')
  const st = await apiError(() => core.listNamespacedPod({ namespace: NS, fieldSelector: 'spec.nope=x' }), 400,
    'BadRequest', 'unknown field selector')
  must(/not a known field selector/.test(st.message), 'message ' + st.message)
})

await check('pagination: limit and continue, one resourceVersion across pages', async () => {
  const a = await core.listNamespacedPod({ namespace: NS, limit: 3 })
  eq(a.items.map((p) => p.metadata.name), ['p1', 'p2', 'p3'], 'page 1')
  must(a.metadata._continue, 'page 1 has no continue token: ' + JSON.stringify(a.metadata))
  // A pod created between the pages is not on the second page.
  await core.createNamespacedPod({ namespace: NS, body: podBody('p5', { app: 'late' }) })
  const b = await core.listNamespacedPod({ namespace: NS, limit: 3, _continue: a.metadata._continue })
  eq(b.items.map((p) => p.metadata.name), ['p4'], 'page 2')
  must(!b.metadata._continue, 'the last page has a continue token')
  eq(b.metadata.resourceVersion, a.metadata.resourceVersion, 'resourceVersion of page 2')
  await apiError(() => core.listNamespacedPod({ namespace: NS, limit: 3, _continue: 'bm90LWEtdG9rZW4' }), 400,
    'BadRequest', 'bogus continue token')
})

await check('patch: json-patch (the client default), merge-patch, strategic-merge-patch', async () => {
  // json-patch: what the generated patch methods send unless told otherwise.
  let p = await core.patchNamespacedPod({
    namespace: NS,
    name: 'p1',
    body: [{ op: 'test', path: '/metadata/labels/tier', value: 'a' },
      { op: 'add', path: '/metadata/annotations', value: { by: 'json-patch' } },
      { op: 'replace', path: '/metadata/labels/tier', value: 'c' }]
  })
  eq([p.metadata.labels, p.metadata.annotations], [{ app: 'js', tier: 'c' }, { by: 'json-patch' }], 'after json-patch')
  // merge-patch: null removes a key.
  p = await core.patchNamespacedPod({ namespace: NS, name: 'p1', body: { metadata: { labels: { tier: null, x: 'y' } } } },
    mergePatch)
  eq(p.metadata.labels, { app: 'js', x: 'y' }, 'labels after merge-patch')
  // strategic-merge-patch: containers merge by name (kubectl set image), so
  // only the image changes; env merges by name too.
  p = await core.patchNamespacedPod({
    namespace: NS,
    name: 'p1',
    body: { metadata: { annotations: { by: 'smp' } }, spec: { containers: [{ name: 'main', image: 'busybox:1.37' }] } }
  }, strategicPatch)
  eq(p.spec.containers.length, 1, 'containers after the strategic merge patch')
  eq([p.spec.containers[0].image, p.spec.containers[0].command, p.spec.containers[0].env],
    ['busybox:1.37', ['sleep', '3600'], [{ name: 'GREETING', value: 'hello' }]], 'container after smp')
  eq(p.metadata.annotations, { by: 'smp' }, 'annotations after smp')
  // The same body as a merge patch replaces the list: the API server's
  // validation refuses the pod update (422).
  await apiError(() => core.patchNamespacedPod({
    namespace: NS, name: 'p1', body: { spec: { containers: [{ name: 'main', image: 'busybox:1.38' }] } }
  }, mergePatch), 422, 'Invalid', 'merge-patch replacing the containers list')
  // Failed json-patch test op: 422; stale resourceVersion: 409 Conflict.
  await apiError(() => core.patchNamespacedPod({ namespace: NS, name: 'p1', body: [{ op: 'test', path: '/metadata/labels/app', value: 'no' }] }),
    422, 'Invalid', 'failing json-patch test op')
  const st = await apiError(() => core.patchNamespacedPod({
    namespace: NS, name: 'p1', body: { metadata: { resourceVersion: p1.metadata.resourceVersion, labels: { z: '1' } } }
  }, mergePatch), 409, 'Conflict', 'merge-patch with a stale resourceVersion')
  eq([st.details.name, st.details.kind], ['p1', 'pods'], 'Conflict details')
})

await check('patch: json-patch move and copy, dryRun=All, the status subresource merges conditions by type', async () => {
  let p = await core.patchNamespacedPod({
    namespace: NS,
    name: 'p3',
    body: [{ op: 'copy', from: '/metadata/labels/tier', path: '/metadata/labels/copied' },
      { op: 'add', path: '/metadata/annotations', value: {} },
      { op: 'move', from: '/metadata/labels/app', path: '/metadata/annotations/app' }]
  })
  eq([p.metadata.labels, p.metadata.annotations], [{ tier: 'b', copied: 'b' }, { app: 'js' }], 'move/copy')
  p = await core.patchNamespacedPod({
    namespace: NS,
    name: 'p3',
    body: [{ op: 'move', from: '/metadata/annotations/app', path: '/metadata/labels/app' },
      { op: 'remove', path: '/metadata/annotations' }]
  })
  eq([p.metadata.labels, p.metadata.annotations], [{ tier: 'b', copied: 'b', app: 'js' }, undefined], 'moved back')
  const rv = p.metadata.resourceVersion
  const dry = await core.patchNamespacedPod({ namespace: NS, name: 'p3', dryRun: 'All', body: { metadata: { labels: { dry: 'run' } } } },
    mergePatch)
  eq(dry.metadata.labels.dry, 'run', 'the dry-run answer')
  const after = await readPod('p3')
  eq([after.metadata.labels.dry, after.metadata.resourceVersion], [undefined, rv], 'nothing stored by the dry run')
  // A condition of our own, added by a strategic merge patch of pods/status:
  // the kubelet's conditions stay (a merge patch would replace the list).
  const before = after.status.conditions.map((c) => c.type)
  const st = await core.patchNamespacedPodStatus({
    namespace: NS,
    name: 'p3',
    body: { status: { conditions: [{ type: 'example.com/Checked', status: 'True' }] } }
  }, strategicPatch)
  eq(st.status.conditions.map((c) => c.type), ['example.com/Checked', ...before], 'conditions after the smp')
  eq((await core.readNamespacedPodStatus({ namespace: NS, name: 'p3' })).status.phase, 'Running', 'phase')
})

await check('replace: PUT with the current resourceVersion, 409 when stale, 422 for a spec change', async () => {
  const cur = await readPod('p2')
  cur.metadata.labels.replaced = 'yes'
  const r = await core.replaceNamespacedPod({ namespace: NS, name: 'p2', body: cur })
  eq(r.metadata.labels.replaced, 'yes', 'label after replace')
  must(Number(r.metadata.resourceVersion) > Number(cur.metadata.resourceVersion), 'resourceVersion did not move')
  cur.metadata.labels.again = 'no'
  await apiError(() => core.replaceNamespacedPod({ namespace: NS, name: 'p2', body: cur }), 409, 'Conflict',
    'replace with a stale resourceVersion')
  r.spec.containers[0].command = ['sleep', '1']
  const st = await apiError(() => core.replaceNamespacedPod({ namespace: NS, name: 'p2', body: r }), 422, 'Invalid',
    'replace changing the container command')
  must(/Forbidden: pod updates may not change fields/.test(st.message), 'message ' + st.message)
})

await check('errors: 404 NotFound, 409 AlreadyExists, 422 Invalid with causes, as ApiException', async () => {
  let st = await apiError(() => readPod('nope'), 404, 'NotFound', 'read of a missing pod')
  eq([st.message, st.details.name, st.details.kind], ['pods "nope" not found', 'nope', 'pods'], '404 Status')
  await apiError(() => core.deleteNamespacedPod({ namespace: NS, name: 'nope' }), 404, 'NotFound', 'delete of a missing pod')
  st = await apiError(() => core.createNamespacedPod({ namespace: NS, body: podBody('p1', {}) }), 409, 'AlreadyExists',
    'create of an existing pod')
  eq(st.message, 'pods "p1" already exists', '409 message')
  st = await apiError(() => core.createNamespacedPod({ namespace: NS, body: podBody('Bad_Name', {}) }), 422, 'Invalid',
    'create with an invalid name')
  must(st.details.causes.some((c) => c.field === 'metadata.name'), 'causes ' + JSON.stringify(st.details))
  await apiError(() => core.createNamespacedPod({ namespace: 'no-such-ns', body: podBody('x', {}) }), 404, 'NotFound',
    'create in a missing namespace')
  st = await apiError(() => core.deleteNamespacedPod({ namespace: NS, name: 'p3', body: { preconditions: { uid: 'not-the-uid' } } }),
    409, 'Conflict', 'delete with a wrong uid precondition')
  must(/Precondition failed: UID in precondition: not-the-uid/.test(st.message), 'message ' + st.message)
})

// ------------------------------------------------------------------ watch
// Starts a Watch; events land in <events> as [type, object].
async function startWatch (path, query) {
  const events = []
  let resolveDone
  const done = new Promise((resolve) => { resolveDone = resolve })
  const w = new k8s.Watch(kc)
  const controller = await w.watch(path, query, (type, obj) => events.push([type, obj]), (err) => resolveDone(err))
  return { events, done, controller }
}
const podsPath = `/api/v1/namespaces/${NS}/pods`

await check('Watch: ADDED, MODIFIED, DELETED with whole objects; resume from a resourceVersion', async () => {
  const from = (await core.listNamespacedPod({ namespace: NS, limit: 1 })).metadata.resourceVersion
  const w = await startWatch(podsPath, { resourceVersion: from, labelSelector: 'w=1' })
  await core.createNamespacedPod({ namespace: NS, body: podBody('w1', { w: '1' }) })
  await core.patchNamespacedPod({ namespace: NS, name: 'w1', body: { metadata: { annotations: { a: 'b' } } } }, mergePatch)
  await core.deleteNamespacedPod({ namespace: NS, name: 'w1', gracePeriodSeconds: 0 })
  await waitFor('DELETED on the watch', () => w.events.some(([t]) => t === 'DELETED'))
  w.controller.abort()
  // ADDED, MODIFIED (scheduled, started, the patch, deletion), DELETED.
  const types = w.events.map(([t]) => t)
  eq(types[0], 'ADDED', 'first event')
  eq(types[types.length - 1], 'DELETED', 'last event')
  must(types.slice(1, -1).every((t) => t === 'MODIFIED'), 'events ' + types)
  must(w.events.every(([, o]) => o.kind === 'Pod' && o.metadata.name === 'w1'), 'objects are Pod w1')
  must(w.events.some(([t, o]) => t === 'MODIFIED' && o.metadata.annotations && o.metadata.annotations.a === 'b'),
    'no MODIFIED carries the patched object')
  const rvs = w.events.map(([, o]) => Number(o.metadata.resourceVersion))
  must(rvs.every((v, i) => i === 0 || v > rvs[i - 1]), 'resourceVersions do not increase: ' + rvs)
  // Resume after the ADDED: the rest again, nothing before.
  const again = await startWatch(podsPath, { resourceVersion: w.events[0][1].metadata.resourceVersion, labelSelector: 'w=1' })
  await waitFor('the replay', () => again.events.length === w.events.length - 1)
  again.controller.abort()
  eq(again.events.map(([t]) => t), types.slice(1), 'replayed events')
})

await check('Watch: an expired resourceVersion is an ERROR event with a 410 Expired Status, then the end', async () => {
  const old = (await core.listNamespacedPod({ namespace: NS, limit: 1 })).metadata.resourceVersion
  await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'bump' }, data: { a: 'b' } } })
  await admin('/_sim/compact')
  const w = await startWatch(podsPath, { resourceVersion: old })
  const err = await w.done
  eq(err, null, 'done() error after the expired watch')
  eq(w.events.length, 1, 'events')
  const [type, st] = w.events[0]
  eq(type, 'ERROR', 'event type')
  must(st.kind === 'Status' && st.code === 410 && st.reason === 'Expired' && /too old resource version/.test(st.message),
    'ERROR object ' + JSON.stringify(st))
})

await check('Watch: a request error reaches done() with the HTTP status', async () => {
  const w = await startWatch(podsPath, { resourceVersion: 'abc' })
  const err = await w.done
  must(err && err.statusCode === 400, 'done(err) ' + err)
})

await check('Watch: without timeoutSeconds the server ends the watch cleanly, as an API server does', async () => {
  const w = await startWatch(podsPath, {})
  const t0 = Date.now()
  const err = await w.done
  eq(err, null, 'done() error')
  const ms = Date.now() - t0
  must(ms >= 900 && ms < 4000, `the watch lasted ${ms} ms, want 1-2 s (--min-request-timeout 1)`)
  must(w.events.length >= 5 && w.events.every(([t]) => t === 'ADDED'), 'the synthetic ADDED events')
})

// ------------------------------------------------------------------ informer
await check('makeInformer: list+watch, add/update/delete, resumes after the watch ends, relists after 410', async () => {
  const seen = []
  let lists = 0
  let connects = 0
  const errors = []
  const listFn = () => {
    lists++
    return core.listNamespacedPod({ namespace: NS, labelSelector: 'inf=1' })
  }
  await core.createNamespacedPod({ namespace: NS, body: podBody('i0', { inf: '1' }) })
  const inf = k8s.makeInformer(kc, podsPath, listFn, 'inf=1')
  inf.on('add', (o) => seen.push(['add', o.metadata.name]))
  inf.on('update', (o) => seen.push(['update', o.metadata.name, o.metadata.labels.v]))
  inf.on('delete', (o) => seen.push(['delete', o.metadata.name]))
  inf.on('connect', () => connects++)
  inf.on('error', (e) => {
    // stop() aborts the watch request, which the informer reports.
    if (!e || e.name !== 'AbortError') errors.push(String(e))
  })
  const has = (...ev) => () => seen.some((s) => JSON.stringify(s) === JSON.stringify(ev))
  try {
    await inf.start()
    await waitFor('add i0 from the list', has('add', 'i0'))
    eq(inf.list(NS).map((o) => o.metadata.name), ['i0'], 'informer cache')
    await core.createNamespacedPod({ namespace: NS, body: podBody('i1', { inf: '1' }) })
    await waitFor('add i1', has('add', 'i1'))
    await core.patchNamespacedPod({ namespace: NS, name: 'i1', body: { metadata: { labels: { v: '2' } } } }, mergePatch)
    await waitFor('update i1', has('update', 'i1', '2'))
    await core.deleteNamespacedPod({ namespace: NS, name: 'i1', gracePeriodSeconds: 0 })
    await waitFor('delete i1', has('delete', 'i1'))
    // The server ends the watch after 1-2 s; the informer watches again
    // from where it was, without a new list.
    const c0 = connects
    await waitFor('a reconnect after the watch ended', () => connects > c0, 5000)
    eq(lists, 1, 'lists after a clean watch end')
    await core.createNamespacedPod({ namespace: NS, body: podBody('i2', { inf: '1' }) })
    await waitFor('add i2 after the reconnect', has('add', 'i2'))
    // Stopped while things change, then the history compacted: the watch
    // from its resourceVersion gets 410, it relists, and reports what it
    // missed (i0 gone, i3 new).
    await inf.stop()
    await core.deleteNamespacedPod({ namespace: NS, name: 'i0', gracePeriodSeconds: 0 })
    await core.createNamespacedPod({ namespace: NS, body: podBody('i3', { inf: '1' }) })
    await admin('/_sim/compact')
    await inf.start()
    await waitFor('delete i0 and add i3 after the relist', () => has('delete', 'i0')() && has('add', 'i3')())
    eq(lists, 2, 'lists after the 410')
    eq(inf.list(NS).map((o) => o.metadata.name).sort(), ['i2', 'i3'], 'informer cache after the relist')
    eq(errors, [], 'informer errors')
  } finally {
    await inf.stop()
  }
})

// ------------------------------------------------------------------ exec
async function runExec (pod, command, { stdin = null, handler = null, tty = false, container = 'main' } = {}) {
  const out = collector()
  const err = collector()
  let status
  const exec = new k8s.Exec(kc, handler)
  const ws = await exec.exec(NS, pod, container, command, out.stream, err.stream, stdin, tty, (s) => { status = s })
  const protocol = ws.protocol
  await new Promise((resolve) => {
    if (ws.readyState === ws.CLOSED) resolve()
    else ws.on('close', resolve)
  })
  return { protocol, stdout: out.text(), stderr: err.text(), status }
}

await check('Exec: v5.channel.k8s.io, stdout and stderr apart, Success status', async () => {
  const r = await runExec('p1', ['sh', '-c', 'echo "to out"; echo "to err" >&2; echo "$GREETING"'])
  eq(r.protocol, 'v5.channel.k8s.io', 'negotiated subprotocol')
  eq([r.stdout, r.stderr], ['to out\nhello\n', 'to err\n'], 'stdout, stderr')
  eq(r.status, { metadata: {}, status: 'Success' }, 'status')
})

await check('Exec: a non-zero exit is a V1Status NonZeroExitCode with the code', async () => {
  const r = await runExec('p1', ['sh', '-c', 'echo bye; exit 3'])
  eq(r.stdout, 'bye\n', 'stdout')
  const s = r.status
  must(s && s.status === 'Failure' && s.reason === 'NonZeroExitCode', 'status ' + JSON.stringify(s))
  eq(s.details.causes, [{ reason: 'ExitCode', message: '3' }], 'causes')
})

await check('Exec: stdin from a stream, ended with the v5 close signal', async () => {
  const r = await runExec('p1', ['sh', '-c', 'wc -c; cat'], { stdin: Readable.from([Buffer.from('hello '), Buffer.from('world')]) })
  eq(r.stdout, '11\n', 'stdout (wc read to EOF)')
  eq(r.status && r.status.status, 'Success', 'status')
})

await check('Exec: a missing command and a missing pod', async () => {
  const r = await runExec('p1', ['no-such-command'])
  must(r.status && r.status.status === 'Failure' && r.status.reason === 'InternalError' &&
    /executable file not found in \$PATH/.test(r.status.message), 'status ' + JSON.stringify(r.status))
  let err
  try {
    await runExec('nope', ['true'])
  } catch (e) {
    err = e
  }
  must(err, 'exec into a missing pod did not fail')
})

await check('Exec: the server takes v4.channel.k8s.io when the client offers only that', async () => {
  const handler = new WebSocketHandler(kc, (uri, protocols, opts) => new (require('ws'))(uri, ['v4.channel.k8s.io'], opts))
  const r = await runExec('p1', ['sh', '-c', 'echo v4; exit 2'], { handler })
  eq(r.protocol, 'v4.channel.k8s.io', 'negotiated subprotocol')
  eq(r.stdout, 'v4\n', 'stdout')
  eq(r.status && r.status.details && r.status.details.causes, [{ reason: 'ExitCode', message: '2' }], 'status')
})

await check('Exec: with a tty the command\'s stderr comes on stdout, as the kubelet bypasses stderr', async () => {
  const r = await runExec('p1', ['sh', '-c', 'echo one; echo two >&2'], { tty: true })
  // Two pipes in kubesim, one terminal on a node: compare the lines as a set.
  eq([r.stdout.replace(/\r/g, '').split('\n').sort(), r.stderr], [['', 'one', 'two'], ''], 'stdout, stderr')
  eq(r.status && r.status.status, 'Success', 'status')
})

// cpFromPod is not checked: in 1.4.0 the client pipes `tar zcf` output into
// an extractor that does not gunzip (kubernetes-client/javascript#2663).
await check('Cp: cpToPod (tar through exec, stdin without stdout)', async () => {
  const fs = await import('node:fs')
  const os = await import('node:os')
  const path = await import('node:path')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kube-js-cp-'))
  try {
    fs.writeFileSync(path.join(dir, 'hello.txt'), 'copied in\n')
    // The client does not wait for the copy: poll for the file.
    await new k8s.Cp(kc).cpToPod(NS, 'p1', 'main', dir, '.')
    await waitFor('hello.txt in the pod', async () => (await runExec('p1', ['cat', 'hello.txt'])).stdout === 'copied in\n')
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

// ------------------------------------------------------------------ logs
await check('Log: tailLines, follow until the container ends, 404 for a missing pod', async () => {
  const body = podBody('lg', { app: 'log' })
  body.spec.containers[0].command = ['fedrouter-agent', '--', 'sh', '-c',
    'echo l1; echo l2; echo l3; while [ ! -e go ]; do sleep 0.05; done; echo l4; echo e1 >&2']
  body.spec.restartPolicy = 'Never'
  await core.createNamespacedPod({ namespace: NS, body })
  await running('lg')
  const log = new k8s.Log(kc)
  const read = async (opts) => {
    const c = collector()
    await log.log(NS, 'lg', 'main', c.stream, opts)
    await new Promise((resolve) => c.stream.on('finish', resolve))
    return c.text()
  }
  await waitFor('l3 in the log', async () => (await read({})).includes('l3\n'))
  eq(await read({ tailLines: 2 }), 'l2\nl3\n', 'tailLines=2')
  const f = collector()
  const finished = new Promise((resolve) => f.stream.on('finish', resolve))
  await log.log(NS, 'lg', 'main', f.stream, { follow: true })
  await waitFor('l1-l3 on the follow stream', () => f.text() === 'l1\nl2\nl3\n')
  const go = await runExec('lg', ['touch', 'go'])
  eq(go.status && go.status.status, 'Success', 'touch go')
  await waitFor('the follow stream to end with the container', () => finished.then(() => true), 8000)
  // stdout and stderr are two pipes: their lines may interleave either way.
  must(f.text().startsWith('l1\nl2\nl3\n'), 'followed log ' + JSON.stringify(f.text()))
  eq(f.text().slice(9).split('\n').sort(), ['', 'e1', 'l4'], 'the lines after "go"')
  eq((await waitFor('lg Succeeded', async () => {
    const p = await readPod('lg')
    return p.status.phase === 'Succeeded' && p
  })).status.phase, 'Succeeded', 'phase')
  let err
  try {
    await log.log(NS, 'nope', 'main', collector().stream, {})
  } catch (e) {
    err = e
  }
  must(err instanceof ApiException && err.code === 404, 'log of a missing pod: ' + err)
})

// ------------------------------------------------------------------ apps/v1
const rsBody = (name, replicas) => ({
  apiVersion: 'apps/v1',
  kind: 'ReplicaSet',
  metadata: { name },
  spec: {
    replicas,
    selector: { matchLabels: { rs: name } },
    template: { metadata: { labels: { rs: name } }, spec: podBody('x', {}).spec }
  }
})
const rsPods = async (name) => (await core.listNamespacedPod({ namespace: NS, labelSelector: 'rs=' + name })).items
  .filter((p) => !p.metadata.deletionTimestamp)

await check('AppsV1Api: ReplicaSet create, read, status, scale (read, json-patch, replace), delete', async () => {
  const rs = await apps.createNamespacedReplicaSet({ namespace: NS, body: rsBody('rs1', 2) })
  must(rs instanceof k8s.V1ReplicaSet && rs.metadata.uid, 'create returned ' + JSON.stringify(rs.metadata))
  await waitFor('2 ready replicas', async () =>
    (await apps.readNamespacedReplicaSet({ namespace: NS, name: 'rs1' })).status.readyReplicas === 2)
  const pods = await rsPods('rs1')
  eq(pods.length, 2, 'pods')
  must(pods.every((p) => p.metadata.ownerReferences[0].uid === rs.metadata.uid && p.metadata.ownerReferences[0].controller),
    'ownerReferences')
  let sc = await apps.readNamespacedReplicaSetScale({ namespace: NS, name: 'rs1' })
  must(sc instanceof k8s.V1Scale, 'scale is ' + sc.constructor.name)
  eq([sc.kind, sc.apiVersion, sc.spec.replicas, sc.status.replicas, sc.status.selector],
    ['Scale', 'autoscaling/v1', 2, 2, 'rs=rs1'], 'scale')
  sc = await apps.patchNamespacedReplicaSetScale({ namespace: NS, name: 'rs1', body: [{ op: 'replace', path: '/spec/replicas', value: 3 }] })
  eq(sc.spec.replicas, 3, 'spec.replicas after the json-patch')
  await waitFor('3 pods', async () => (await rsPods('rs1')).length === 3)
  sc = await apps.patchNamespacedReplicaSetScale({ namespace: NS, name: 'rs1', body: { spec: { replicas: 2 } } }, mergePatch)
  eq(sc.spec.replicas, 2, 'spec.replicas after the merge patch')
  // The controller writes status meanwhile: a Scale read earlier is stale.
  const stale = sc
  stale.spec.replicas = 1
  await waitFor('a status update', async () => (await apps.readNamespacedReplicaSet({ namespace: NS, name: 'rs1' }))
    .metadata.resourceVersion !== stale.metadata.resourceVersion)
  await apiError(() => apps.replaceNamespacedReplicaSetScale({ namespace: NS, name: 'rs1', body: stale }), 409,
    'Conflict', 'replace of a stale Scale')
  sc = await apps.readNamespacedReplicaSetScale({ namespace: NS, name: 'rs1' })
  sc.spec.replicas = 1
  sc = await apps.replaceNamespacedReplicaSetScale({ namespace: NS, name: 'rs1', body: sc })
  eq(sc.spec.replicas, 1, 'spec.replicas after replace')
  await waitFor('1 pod', async () => (await rsPods('rs1')).length === 1)
  await apiError(() => apps.patchNamespacedReplicaSetScale({ namespace: NS, name: 'rs1', body: { spec: { replicas: -1 } } }, mergePatch),
    422, 'Invalid', 'negative replicas')
  const list = await apps.listNamespacedReplicaSet({ namespace: NS })
  eq(list.items.map((r) => r.metadata.name), ['rs1'], 'list')
  await apps.deleteNamespacedReplicaSet({ namespace: NS, name: 'rs1' })
  await waitFor('the pods to go with the ReplicaSet', async () => (await rsPods('rs1')).length === 0)
})

await check('AppsV1Api: Deployment create, read, strategic-merge-patch of the template, scale, delete', async () => {
  const body = rsBody('d1', 2)
  body.kind = 'Deployment'
  body.spec.template.spec.containers.push({ name: 'side', image: 'busybox:1.36', command: ['sleep', '3600'] })
  const d = await apps.createNamespacedDeployment({ namespace: NS, body })
  must(d instanceof k8s.V1Deployment && d.metadata.generation === 1, 'create ' + JSON.stringify(d.metadata))
  // kubectl set image: a strategic merge patch keyed by container name.
  const p = await apps.patchNamespacedDeployment({
    namespace: NS,
    name: 'd1',
    body: { spec: { template: { spec: { containers: [{ name: 'side', image: 'busybox:1.37' }] } } } }
  }, strategicPatch)
  eq(p.spec.template.spec.containers.map((c) => [c.name, c.image]), [['main', 'busybox:1.36'], ['side', 'busybox:1.37']],
    'containers after set image')
  eq(p.metadata.generation, 2, 'generation')
  // $patch: delete removes one element by its key.
  const q = await apps.patchNamespacedDeployment({
    namespace: NS,
    name: 'd1',
    body: { spec: { template: { spec: { containers: [{ name: 'side', $patch: 'delete' }] } } } }
  }, strategicPatch)
  eq(q.spec.template.spec.containers.map((c) => c.name), ['main'], 'containers after $patch: delete')
  let sc = await apps.readNamespacedDeploymentScale({ namespace: NS, name: 'd1' })
  eq([sc.kind, sc.spec.replicas, sc.status.selector], ['Scale', 2, 'rs=d1'], 'deployment scale')
  sc = await apps.patchNamespacedDeploymentScale({ namespace: NS, name: 'd1', body: [{ op: 'replace', path: '/spec/replicas', value: 5 }] })
  eq(sc.spec.replicas, 5, 'scale after json-patch')
  eq((await apps.readNamespacedDeployment({ namespace: NS, name: 'd1' })).spec.replicas, 5, 'deployment spec.replicas')
  await apps.deleteNamespacedDeployment({ namespace: NS, name: 'd1' })
  await apiError(() => apps.readNamespacedDeployment({ namespace: NS, name: 'd1' }), 404, 'NotFound', 'read after delete')
})

// ------------------------------------------------------------------ generic
await check('KubernetesObjectApi: create, read, patch (strategic by default), list, delete by discovery', async () => {
  const client = k8s.KubernetesObjectApi.makeApiClient(kc)
  const spec = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS }, data: { a: '1' } }
  const c = await client.create(spec)
  eq(c.data, { a: '1' }, 'created')
  const p = await client.patch({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS }, data: { b: '2' } })
  eq(p.data, { a: '1', b: '2' }, 'patched')
  const r = await client.read({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS } })
  eq(r.metadata.uid, c.metadata.uid, 'read')
  const l = await client.list('v1', 'ConfigMap', NS)
  must(l.items.some((i) => i.metadata.name === 'generic'), 'list')
  await client.delete({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS } })
  let err
  try {
    await client.read({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'generic', namespace: NS } })
  } catch (e) {
    err = e
  }
  must(err instanceof ApiException && err.code === 404, 'read after delete: ' + err)
})

// ------------------------------------------------------------------ delete
await check('delete: a pod, a collection by label, then the namespace', async () => {
  const d = await core.deleteNamespacedPod({ namespace: NS, name: 'p4' })
  eq(d.metadata && d.metadata.name, 'p4', 'delete answers with the pod')
  await apiError(() => readPod('p4'), 404, 'NotFound', 'read after delete')
  await core.deleteCollectionNamespacedPod({ namespace: NS, labelSelector: 'app=js' })
  eq((await core.listNamespacedPod({ namespace: NS, labelSelector: 'app=js' })).items.length, 0, 'app=js pods left')
  await core.deleteNamespace({ name: NS })
  await waitFor('the namespace gone', async () => {
    try {
      await core.readNamespace({ name: NS })
      return false
    } catch (e) {
      return e.code === 404
    }
  })
})

console.log(`kube js client: ${checks} checks, ${failures.length} failed`)
for (const f of failures) console.log(`  - ${f}`)
process.exit(failures.length ? 1 : 0)
