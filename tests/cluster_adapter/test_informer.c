/* test_informer.c - the list+watch cache against a real kubesim: initial
 * paginated list, live events (including objects leaving the selector),
 * recovery from dropped watches, relist with a correct diff after a
 * 410 Expired, and read-your-own-writes (fr_informer_observe). */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fr/informer.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"

static uv_loop_t *loop;
static pid_t sim_pid;
static char dir[256];
static struct fr_kube_client *api, *admin;

/* ---- events seen ---- */
struct seen {
  int added, modified, deleted, synced;
  int saw_v2;                /* a1 was delivered with label v=2 */
  char last_deleted[128];
  char last_added[128];
};
static struct seen ev;

static void on_event(struct fr_informer *inf, enum fr_informer_event e, json_t *obj, json_t *old,
                     void *arg) {
  const char *name = obj ? json_string_value(json_object_get(json_object_get(obj, "metadata"), "name")) : NULL;

  (void)inf;
  (void)arg;
  switch (e) {
  case FR_INF_ADDED:
    ev.added++;
    snprintf(ev.last_added, sizeof(ev.last_added), "%s", name);
    break;
  case FR_INF_MODIFIED:
    ck_assert_ptr_nonnull(old);
    ev.modified++;
    if (name != NULL && strcmp(name, "a1") == 0 &&
        json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), "v") != NULL &&
        strcmp(json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), "v")),
               "2") == 0)
      ev.saw_v2++;
    break;
  case FR_INF_DELETED:
    ev.deleted++;
    snprintf(ev.last_deleted, sizeof(ev.last_deleted), "%s", name);
    break;
  case FR_INF_SYNCED:
    ev.synced++;
    break;
  }
}

/* ---- synchronous helpers over the async client ---- */
struct sync_call {
  int done;
  int status;
  char body[4096];
};

static void on_resp(const struct fr_kube_response *r, void *arg) {
  struct sync_call *c = arg;

  c->done = 1;
  c->status = r->status;
  snprintf(c->body, sizeof(c->body), "%s", r->body ? r->body : "");
}

static int run_until(int *flag, int want, int timeout_ms) {
  uint64_t end = uv_now(loop) + (uint64_t)timeout_ms;

  while (*flag < want && uv_now(loop) < end) {
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(2000);
    uv_update_time(loop);
  }
  return *flag >= want;
}

static int call(struct fr_kube_client *c, const char *method, const char *path, const char *ctype,
                const char *body) {
  struct sync_call sc = {0};

  ck_assert_int_eq(fr_kube_request(c, method, path, ctype, body, body ? strlen(body) : 0, 0, NULL,
                                   on_resp, &sc, NULL), 0);
  ck_assert_msg(run_until(&sc.done, 1, 10000), "%s %s did not complete", method, path);
  return sc.status;
}

/* The response body of a successful write, parsed. */
static json_t *call_json(const char *method, const char *path, const char *ctype, const char *body, int want) {
  struct sync_call sc = {0};

  ck_assert_int_eq(fr_kube_request(api, method, path, ctype, body, strlen(body), 0, NULL, on_resp, &sc, NULL), 0);
  ck_assert_msg(run_until(&sc.done, 1, 10000), "%s %s did not complete", method, path);
  ck_assert_int_eq(sc.status, want);
  return json_loads(sc.body, 0, NULL);
}

static const char *label_v(struct fr_informer *inf, const char *name) {
  json_t *o = fr_informer_get(inf, "default", name);

  return json_string_value(json_object_get(json_object_get(json_object_get(o, "metadata"), "labels"), "v"));
}

static const char *rv_of(json_t *o) {
  return json_string_value(json_object_get(json_object_get(o, "metadata"), "resourceVersion"));
}

static void create_pod(const char *name, const char *app) {
  char body[512];

  snprintf(body, sizeof(body),
           "{\"metadata\":{\"name\":\"%s\",\"labels\":{\"app\":\"%s\"}},"
           "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}", name, app);
  ck_assert_int_eq(call(api, "POST", "/api/v1/namespaces/default/pods", "application/json", body), 201);
}

static void relabel(const char *name, const char *app) {
  char path[256], body[128];

  snprintf(path, sizeof(path), "/api/v1/namespaces/default/pods/%s", name);
  snprintf(body, sizeof(body), "{\"metadata\":{\"labels\":{\"app\":\"%s\"}}}", app);
  ck_assert_int_eq(call(api, "PATCH", path, "application/merge-patch+json", body), 200);
}

static void delete_pod(const char *name) {
  char path[256];

  snprintf(path, sizeof(path), "/api/v1/namespaces/default/pods/%s", name);
  ck_assert_int_eq(call(api, "DELETE", path, NULL, NULL), 200);
}

static void faults(const char *json) {
  ck_assert_int_eq(call(admin, "POST", "/_sim/faults", "application/json", json), 200);
}

/* ---- kubesim ---- */
static int read_port(const char *file) {
  char path[512], buf[16] = {0};
  FILE *f;
  int i;

  snprintf(path, sizeof(path), "%s/%s", dir, file);
  for (i = 0; i < 200; i++) {
    f = fopen(path, "r");
    if (f != NULL) {
      size_t n = fread(buf, 1, sizeof(buf) - 1, f);
      fclose(f);
      if (n > 0)
        return (int)strtol(buf, NULL, 10);
    }
    usleep(25000);
  }
  return -1;
}

static void setup(void) {
  char port_file[300], aport_file[300], kcfg[300], wd[300], err[512];
  char *argv[] = {(char *)KUBESIM_PATH, "--tls", "--token", "inf-token", "--name", "inf",
                  "--port-file", port_file, "--admin-listen", "127.0.0.1:0",
                  "--admin-port-file", aport_file, "--write-kubeconfig", kcfg,
                  "--workdir", wd, "--history", "100", "--bookmark-ms", "0",
                  "--log-level", "warn", NULL};
  struct fr_kube_creds *creds, adm;
  int aport;
  char server[64];

  snprintf(dir, sizeof(dir), "/tmp/test-informer-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(port_file, sizeof(port_file), "%s/port", dir);
  snprintf(aport_file, sizeof(aport_file), "%s/aport", dir);
  snprintf(kcfg, sizeof(kcfg), "%s/kubeconfig", dir);
  snprintf(wd, sizeof(wd), "%s/wd", dir);
  sim_pid = fork();
  ck_assert_int_ge(sim_pid, 0);
  if (sim_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* no simulator outlives a failed or killed test */
    execv(KUBESIM_PATH, argv);
    _exit(127);
  }
  ck_assert_int_gt(read_port("port"), 0);
  aport = read_port("aport");
  ck_assert_int_gt(aport, 0);
  loop = uv_default_loop();
  ck_assert_int_eq(fr_kubeconfig_load(kcfg, NULL, &creds, err, sizeof(err)), 0);
  ck_assert_int_eq(fr_kube_client_new(loop, creds, NULL, &api), 0);
  fr_kube_creds_free(creds);
  memset(&adm, 0, sizeof(adm));
  snprintf(server, sizeof(server), "http://127.0.0.1:%d", aport);
  adm.server = server;
  adm.token = "inf-token";
  ck_assert_int_eq(fr_kube_client_new(loop, &adm, NULL, &admin), 0);
  memset(&ev, 0, sizeof(ev));
}

static void on_client_freed(void *arg) {
  (*(int *)arg)++;
}

static void teardown(void) {
  int freed = 0, status = 0;
  char cmd[300];

  fr_kube_client_free(api, on_client_freed, &freed);
  fr_kube_client_free(admin, on_client_freed, &freed);
  run_until(&freed, 2, 5000);
  while (uv_run(loop, UV_RUN_NOWAIT) != 0)
    ;
  ck_assert_int_eq(uv_loop_close(loop), 0);
  kill(sim_pid, SIGTERM);
  waitpid(sim_pid, &status, 0);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "kubesim exit status %d", status);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(informer_lists_then_follows_changes_and_recovers) {
  struct fr_informer *inf;
  struct fr_informer_stats st;
  char name[32];
  int i;

  /* More matching pods than one list page (500), plus non-matching ones. */
  for (i = 0; i < 520; i++) {
    snprintf(name, sizeof(name), "x%03d", i);
    create_pod(name, "x");
  }
  create_pod("y1", "y");
  ck_assert_int_eq(fr_informer_new(api, "/api/v1/namespaces/default/pods", "app=x", on_event, NULL, &inf), 0);
  ck_assert_int_eq(fr_informer_start(inf), 0);
  ck_assert_msg(run_until(&ev.synced, 1, 10000), "no SYNCED");
  ck_assert_int_eq(ev.added, 520);
  ck_assert_int_eq(json_object_size(fr_informer_items(inf)), 520);
  ck_assert_ptr_null(fr_informer_get(inf, "default", "y1"));
  ck_assert_ptr_nonnull(fr_informer_get(inf, "default", "x007"));
  ck_assert_int_eq(fr_informer_healthy(inf), 1);

  /* Live: a new match, a non-match (ignored), one leaving the selector,
   * one deleted. */
  create_pod("x900", "x");
  ck_assert(run_until(&ev.added, 521, 5000));
  ck_assert_str_eq(ev.last_added, "x900");
  create_pod("y2", "y");
  relabel("x001", "z");
  ck_assert(run_until(&ev.deleted, 1, 5000));
  ck_assert_str_eq(ev.last_deleted, "x001");
  delete_pod("x002");
  ck_assert(run_until(&ev.deleted, 2, 5000));
  ck_assert_str_eq(ev.last_deleted, "x002");
  ck_assert_int_eq(ev.added, 521); /* y2 never showed up */
  ck_assert_int_eq(json_object_size(fr_informer_items(inf)), 519);

  /* Dropped watch: resumed from the last resourceVersion, nothing lost. */
  fr_informer_stats(inf, &st);
  faults("{\"drop_watches\":true}");
  create_pod("x901", "x");
  ck_assert(run_until(&ev.added, 522, 10000));
  ck_assert_ptr_nonnull(fr_informer_get(inf, "default", "x901"));
  {
    struct fr_informer_stats st2;
    fr_informer_stats(inf, &st2);
    ck_assert_uint_gt(st2.watches, st.watches);
    ck_assert_uint_eq(st2.lists, 1);
  }

  /* Changes while no watch can be established, then a compaction: the
   * resumed watch gets 410 and the relist delivers exactly the diff. */
  faults("{\"reject_watches\":true,\"drop_watches\":true}");
  create_pod("x902", "x");
  relabel("x003", "z");
  delete_pod("x004");
  relabel("y1", "x"); /* enters the selector */
  ck_assert_int_eq(call(admin, "POST", "/_sim/compact", "application/json", "{}"), 200);
  ev.added = ev.deleted = ev.modified = 0;
  faults("{\"reject_watches\":false}");
  ck_assert_msg(run_until(&ev.deleted, 2, 15000), "relist diff: deleted=%d", ev.deleted);
  ck_assert(run_until(&ev.added, 2, 5000));
  ck_assert_int_eq(ev.added, 2);   /* x902 and y1 */
  ck_assert_int_eq(ev.deleted, 2); /* x003 and x004 */
  ck_assert_ptr_nonnull(fr_informer_get(inf, "default", "y1"));
  ck_assert_ptr_null(fr_informer_get(inf, "default", "x003"));
  ck_assert_int_eq(json_object_size(fr_informer_items(inf)), 520); /* 520 + x902 + y1 - x003 - x004 */
  fr_informer_stats(inf, &st);
  ck_assert_uint_ge(st.expired, 1);
  ck_assert_uint_eq(st.lists, 2);
  ck_assert_uint_ge(st.failures, 1); /* the rejected watches */
  ck_assert_int_eq(fr_informer_synced(inf), 1);
  fr_informer_free(inf);
}
END_TEST

START_TEST(informer_observe_reads_own_writes) {
  struct fr_informer *inf;
  json_t *w2, *w3, *made, *listed;
  const char *patch = "/api/v1/namespaces/default/pods/a1";

  create_pod("a1", "x");
  ck_assert_int_eq(fr_informer_new(api, "/api/v1/namespaces/default/pods", "app=x", on_event, NULL, &inf), 0);
  ck_assert_int_eq(fr_informer_start(inf), 0);
  ck_assert_msg(run_until(&ev.synced, 1, 10000), "no SYNCED");
  listed = json_deep_copy(fr_informer_get(inf, "default", "a1"));
  ck_assert_ptr_nonnull(listed);

  /* The watch is down (ended; new ones refused): writes are invisible to
   * it, but observed writes show at once. */
  faults("{\"reject_watches\":true,\"drop_watches\":true}");
  w2 = call_json("PATCH", patch, "application/merge-patch+json", "{\"metadata\":{\"labels\":{\"v\":\"2\"}}}", 200);
  w3 = call_json("PATCH", patch, "application/merge-patch+json", "{\"metadata\":{\"labels\":{\"v\":\"3\"}}}", 200);
  made = call_json("POST", "/api/v1/namespaces/default/pods", "application/json",
                   "{\"metadata\":{\"name\":\"a2\",\"labels\":{\"app\":\"x\"}},"
                   "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}", 201);
  ck_assert_ptr_null(label_v(inf, "a1"));
  ev.added = ev.modified = 0;
  fr_informer_observe(inf, w3);
  ck_assert_str_eq(label_v(inf, "a1"), "3");
  ck_assert_int_eq(ev.modified, 1);
  fr_informer_observe(inf, made);
  ck_assert_ptr_nonnull(fr_informer_get(inf, "default", "a2"));
  ck_assert_int_eq(ev.added, 1);
  /* Older versions than the cache holds change nothing. */
  fr_informer_observe(inf, w2);
  fr_informer_observe(inf, listed);
  fr_informer_observe(inf, w3);
  ck_assert_str_eq(label_v(inf, "a1"), "3");
  ck_assert_str_eq(rv_of(fr_informer_get(inf, "default", "a1")), rv_of(w3));
  ck_assert_int_eq(ev.modified, 1);

  /* The watch resumes from before the writes and replays v=2: the older
   * event must not undo the observed v=3. */
  ev.saw_v2 = 0;
  faults("{\"reject_watches\":false}");
  ck_assert_msg(run_until(&ev.modified, 3, 15000), "replayed events: modified=%d", ev.modified);
  ck_assert_int_eq(ev.saw_v2, 0);
  ck_assert_str_eq(label_v(inf, "a1"), "3");
  ck_assert_int_eq(json_object_size(fr_informer_items(inf)), 2);
  ck_assert_int_eq(fr_informer_healthy(inf), 1);
  json_decref(w2);
  json_decref(w3);
  json_decref(made);
  json_decref(listed);
  fr_informer_free(inf);
}
END_TEST

/* The watch event of a write the informer observed (same resourceVersion)
 * is dropped before it is parsed, and tells the owner nothing; writes it
 * did not observe still arrive. */
static struct fr_informer_stats st_now(struct fr_informer *inf) {
  struct fr_informer_stats st;

  fr_informer_stats(inf, &st);
  return st;
}


START_TEST(informer_drops_echoes_of_observed_writes) {
  struct fr_informer *inf;
  json_t *w;
  const char *patch = "/api/v1/namespaces/default/pods/e1";
  uint64_t ev0;
  int i;

  faults("{\"reject_watches\":false,\"drop_watches\":false}"); /* what earlier tests left */
  create_pod("e1", "echo");
  ck_assert_int_eq(fr_informer_new(api, "/api/v1/namespaces/default/pods", "app=echo", on_event, NULL, &inf), 0);
  ck_assert_int_eq(fr_informer_start(inf), 0);
  ck_assert_msg(run_until(&ev.synced, 1, 10000), "no SYNCED");
  /* Writes while the watch is down, each observed: the watch that comes
   * back replays all three, every one an echo of the cache. */
  faults("{\"reject_watches\":true,\"drop_watches\":true}");
  ev.modified = 0;
  for (i = 0; i < 3; i++) {
    char body[128];
    snprintf(body, sizeof(body), "{\"metadata\":{\"labels\":{\"v\":\"%d\"}}}", i);
    w = call_json("PATCH", patch, "application/merge-patch+json", body, 200);
    fr_informer_observe(inf, w);
    json_decref(w);
  }
  ck_assert_int_eq(ev.modified, 3);
  faults("{\"reject_watches\":false,\"drop_watches\":false}");
  for (i = 0; i < 500 && st_now(inf).echoes < 3; i++) {
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(10000);
    uv_update_time(loop);
  }
  ck_assert_uint_eq(st_now(inf).echoes, 3);
  ck_assert_int_eq(ev.modified, 3);
  /* a write it did not observe is a real event */
  ev0 = st_now(inf).events;
  ck_assert_int_eq(call(api, "PATCH", patch, "application/merge-patch+json",
                        "{\"metadata\":{\"labels\":{\"v\":\"9\"}}}"), 200);
  ck_assert_msg(run_until(&ev.modified, 4, 10000), "the unobserved write never came");
  ck_assert_str_eq(label_v(inf, "e1"), "9");
  ck_assert_uint_eq(st_now(inf).echoes, 3);
  ck_assert_uint_gt(st_now(inf).events, ev0);
  fr_informer_free(inf);
}
END_TEST

/* fr_informer_set_keep: list pages and watch events become trees of the
 * kept fields only, with the same values (escapes decoded), and the
 * informer works as before on them. */
static const struct fr_informer_keep k_meta[] = {{"name", NULL}, {"namespace", NULL}, {"resourceVersion", NULL},
                                                 {"labels", NULL}, {"annotations", NULL}, {NULL, NULL}};
static const struct fr_informer_keep k_container[] = {{"name", NULL}, {NULL, NULL}};
static const struct fr_informer_keep k_spec[] = {{"containers", k_container}, {NULL, NULL}};
static const struct fr_informer_keep k_pod[] = {{"metadata", k_meta}, {"spec", k_spec}, {NULL, NULL}};

static void check_kept(json_t *o, const char *app) {
  json_t *meta = json_object_get(o, "metadata"), *c;

  ck_assert_ptr_nonnull(o);
  ck_assert_uint_eq(json_object_size(o), 2);                 /* metadata, spec: no status, kind, ... */
  ck_assert_uint_eq(json_object_size(meta), 5);              /* no uid, creationTimestamp, ... */
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(meta, "labels"), "app")), app);
  /* escapes decoded as a full parse would */
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(meta, "annotations"), "x.io/q")),
                   "v\xc3\xa9\n\"x");
  c = json_array_get(json_object_get(json_object_get(o, "spec"), "containers"), 0);
  ck_assert_uint_eq(json_object_size(c), 1);                 /* name only, not image */
  ck_assert_str_eq(json_string_value(json_object_get(c, "name")), "c");
}

START_TEST(informer_keep_builds_only_the_kept_fields) {
  struct fr_informer *inf;
  const char *body = "{\"metadata\":{\"name\":\"k1\",\"labels\":{\"app\":\"keep\"},"
                     "\"annotations\":{\"x.io/q\":\"v\\u00e9\\n\\\"x\"}},"
                     "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}";

  faults("{\"reject_watches\":false,\"drop_watches\":false}");
  ck_assert_int_eq(call(api, "POST", "/api/v1/namespaces/default/pods", "application/json", body), 201);
  ck_assert_int_eq(fr_informer_new(api, "/api/v1/namespaces/default/pods", "app in (keep,kept)", on_event, NULL,
                                   &inf), 0);
  fr_informer_set_keep(inf, k_pod);
  ck_assert_int_eq(fr_informer_start(inf), 0);
  ck_assert_msg(run_until(&ev.synced, 1, 10000), "no SYNCED");
  check_kept(fr_informer_get(inf, "default", "k1"), "keep");   /* from a list page */
  ev.modified = 0;
  relabel("k1", "kept");
  ck_assert_msg(run_until(&ev.modified, 1, 10000), "no MODIFIED");
  check_kept(fr_informer_get(inf, "default", "k1"), "kept");   /* from a watch event */
  ev.deleted = 0;
  delete_pod("k1");
  ck_assert_msg(run_until(&ev.deleted, 1, 10000), "no DELETED");
  ck_assert_ptr_null(fr_informer_get(inf, "default", "k1"));
  fr_informer_free(inf);
}
END_TEST

/* ---- an owner-kept store: name -> resourceVersion ---- */
static json_t *owned;

static void on_owned(struct fr_informer *inf, enum fr_informer_event e, json_t *obj, json_t *old, void *arg) {
  json_t *meta = obj ? json_object_get(obj, "metadata") : NULL;
  const char *name = json_string_value(json_object_get(meta, "name"));

  ck_assert_ptr_null(old); /* the informer keeps nothing to pass */
  if (e == FR_INF_ADDED || e == FR_INF_MODIFIED) {
    /* ADDED exactly when the owner did not have it */
    ck_assert_int_eq(e == FR_INF_ADDED, json_object_get(owned, name) == NULL);
    json_object_set(owned, name, json_object_get(meta, "resourceVersion"));
  } else if (e == FR_INF_DELETED) {
    ck_assert_ptr_nonnull(json_object_get(owned, name));
    json_object_del(owned, name);
  }
  on_event(inf, e, obj, e == FR_INF_MODIFIED ? obj : NULL, arg);
}

static const char *owned_rv(void *arg, const char *ns, const char *name) {
  (void)arg;
  (void)ns;
  return json_string_value(json_object_get(owned, name));
}

static void owned_each(void *arg, void (*fn)(const char *ns, const char *name, const char *rv, void *fn_arg),
                       void *fn_arg) {
  const char *k;
  json_t *v;

  (void)arg;
  json_object_foreach(owned, k, v) fn("default", k, json_string_value(v), fn_arg);
}

START_TEST(informer_owner_store_lists_and_relists) {
  struct fr_informer *inf;
  char name[32];
  int i;

  owned = json_object();
  for (i = 0; i < 620; i++) {
    snprintf(name, sizeof(name), "o%03d", i);
    create_pod(name, "x");
  }
  ck_assert_int_eq(fr_informer_new(api, "/api/v1/namespaces/default/pods", "app=x", on_owned, NULL, &inf), 0);
  fr_informer_set_owner_store(inf, owned_rv, owned_each, NULL);
  ck_assert_int_eq(fr_informer_start(inf), 0);
  ck_assert_msg(run_until(&ev.synced, 1, 10000), "no SYNCED");
  ck_assert_int_eq(ev.added, 620); /* two pages */
  ck_assert_int_eq(json_object_size(owned), 620);
  ck_assert_ptr_null(fr_informer_items(inf));
  ck_assert_ptr_null(fr_informer_get(inf, "default", "o001"));

  /* Changes the watch cannot see, then a compaction: the relist applies
   * the changes and sweeps what went, through the owner's store. */
  faults("{\"reject_watches\":true,\"drop_watches\":true}");
  relabel("o001", "z");
  delete_pod("o002");
  delete_pod("o600"); /* on the second page */
  create_pod("o900", "x");
  relabel("o003", "x2");
  relabel("o003", "x"); /* changed, still matching */
  ck_assert_int_eq(call(admin, "POST", "/_sim/compact", "application/json", "{}"), 200);
  ev.added = ev.deleted = ev.modified = 0;
  faults("{\"reject_watches\":false}");
  ck_assert_msg(run_until(&ev.deleted, 3, 15000), "relist sweep: deleted=%d", ev.deleted);
  ck_assert_int_eq(ev.added, 1);
  ck_assert_int_ge(ev.modified, 1);
  ck_assert_int_eq(json_object_size(owned), 620 - 3 + 1);
  ck_assert_ptr_null(json_object_get(owned, "o001"));
  ck_assert_ptr_null(json_object_get(owned, "o600"));
  ck_assert_ptr_nonnull(json_object_get(owned, "o900"));
  {
    struct fr_informer_stats st;
    fr_informer_stats(inf, &st);
    ck_assert_uint_eq(st.lists, 2); /* it was the relist, not a resumed watch */
  }
  fr_informer_free(inf);
  json_decref(owned);
}
END_TEST

int main(void) {
  Suite *s = suite_create("informer");
  TCase *tc = tcase_create("kubesim");
  SRunner *sr;
  int failed;

  signal(SIGPIPE, SIG_IGN);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, informer_lists_then_follows_changes_and_recovers);
  tcase_add_test(tc, informer_observe_reads_own_writes);
  tcase_add_test(tc, informer_drops_echoes_of_observed_writes);
  tcase_add_test(tc, informer_keep_builds_only_the_kept_fields);
  tcase_add_test(tc, informer_owner_store_lists_and_relists);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
