/* policy_load.c - a libconfig policy file -> validated, immutable,
 * reference-counted policy (the format is in docs/policy.md).
 *
 * The file is read once into memory: its SHA-256 is the policy's version
 * and the same bytes are parsed, so the version always describes what was
 * loaded. Validation is one pass over the libconfig tree in the style of
 * config/src/config.c: each group's keys are checked against the keys known
 * there (a near miss gets a "did you mean"), then each value is type-,
 * range- and name-checked. Every error carries the file and line of the
 * offending setting (of the enclosing group when a key is missing); the
 * load goes on after one where the rest can still be checked (the next
 * key, rule, tier, override or section), so `policy check` lists them all, and
 * keeps the first. Checks that need the whole file (a cluster in two
 * tiers, rules that can never place anything) run at the end, on a file
 * without errors.
 *
 * Names of clusters and regions are checked against the lists the router
 * passes in; when it passes none (NULL), names cannot be checked and any
 * name is accepted.
 */
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fr/cfgread.h"
#include "fr/util.h"
#include "policy_int.h"

/* Defaults (documented in docs/policy.md). */
#define DEFAULT_MAX_AGE_MS 15000.0
#define DEFAULT_W_LATENCY 1.0
#define DEFAULT_W_WARM 0.25
#define DEFAULT_W_CAPACITY 0.25
#define DEFAULT_W_COST 0.0
#define DEFAULT_LATENCY_REF_MS 100.0
#define DEFAULT_COST_REF 0.10
#define DEFAULT_COLD_START_S 10.0
#define DEFAULT_ROUND_TRIPS 1.0

/* Bounds: generous, only there to catch unit mistakes (ms for s). */
#define MAX_AGE_MS 86400000.0       /* a day */
#define MAX_CEILING_MS 600000.0     /* ten minutes */
#define MAX_COLD_START_S 3600.0
#define MAX_ROUND_TRIPS 1000000.0
#define MAX_WEIGHT 1000000.0
#define MAX_FILE_BYTES (16 * 1024 * 1024)
#define NAME_MAX_LEN 63
#define SUGGEST_MAX_DISTANCE 2

/* The policy used when the router names no file. Parsed by the same code as
 * a file, so it is validated like one; its version is the hash of this text. */
static const char builtin_text[] =
    "# fedrouter built-in policy: client region first, then the other regions by\n"
    "# measured latency; fill the best cluster first; a warm pod elsewhere beats a\n"
    "# cold start when the cold start takes longer than the extra latency.\n"
    "split = \"fill_first\";\n"
    "max_state_age_ms = 15000;\n"
    "weights = { latency = 1.0; warm = 0.25; capacity = 0.25; cost = 0.0; };\n"
    "warm = { beats_cold = true; cold_start_s = 10.0; round_trips = 1; };\n";

struct loader {
  struct fr_cfgread cfg;            /* errors go to <err> through it */
  const char *path;                 /* as given: used in messages */
  struct fr_policy_error *err;
  struct fr_policy *p;
  int check_names;                  /* the router gave its clusters */
  const char *const *clusters;
  const char *const *cluster_regions;
  size_t nclusters;
  size_t nrouter_regions;           /* region ids below this came from the router */
  size_t cap_regions;
  struct fr_policy_warning *warn;
  size_t nwarn, cap_warn;
  int untold;                       /* errors that did not fit in err->msg */
};

/* ---- errors ---- */

/* The shared libconfig readers (fr/cfgread.h), on this loader. */
#define type_name fr_cfg_type_name
#define line_of fr_cfg_line
#define setting_path fr_cfg_setting_path
#define bad(l, ...) fr_cfg_bad(&(l)->cfg, __VA_ARGS__)
#define missing(l, ...) fr_cfg_missing(&(l)->cfg, __VA_ARGS__)
#define oom(l) fr_cfg_oom(&(l)->cfg)
#define get_group(l, ...) fr_cfg_get_group(&(l)->cfg, __VA_ARGS__)
#define get_list(l, ...) fr_cfg_get_list(&(l)->cfg, __VA_ARGS__)
#define get_string(l, ...) fr_cfg_get_string(&(l)->cfg, __VA_ARGS__)

/* Adds a warning about <s>: "<path>: <fmt...>". */
__attribute__((format(printf, 3, 4)))
static int warn(struct loader *l, const config_setting_t *s, const char *fmt, ...) {
  struct fr_policy_warning *w;
  char path[256];
  va_list ap;
  size_t n = 0;

  if (l->nwarn == l->cap_warn) {
    size_t cap = l->cap_warn != 0 ? l->cap_warn * 2 : 4;
    struct fr_policy_warning *nw = realloc(l->warn, cap * sizeof(*nw));
    if (nw == NULL)
      return oom(l);
    l->warn = nw;
    l->cap_warn = cap;
  }
  w = &l->warn[l->nwarn++];
  w->line = line_of(s);
  setting_path(s, NULL, path, sizeof(path));
  w->msg[0] = '\0';
  if (path[0] != '\0') {
    int k = snprintf(w->msg, sizeof(w->msg), "%s: ", path);
    n = k > 0 ? (size_t)k : 0;
  }
  va_start(ap, fmt);
  vsnprintf(w->msg + n, sizeof(w->msg) - n, fmt, ap);
  va_end(ap);
  return 0;
}

/* Room kept at the end of err->msg for "; and N more ...". */
#define UNTOLD_ROOM 72

/* An fr_cfg_error_cb for fr_policy_load(): the record holds the first
 * error; every later one is appended to its message as "; <line>: <what>"
 * ("; <file>:<line>: <what>" from another file), so that a caller that
 * keeps only the record (the router's last_reload_error) shows them all.
 * What does not fit is counted and told at the end (errors_joined()). */
static void join_error(void *arg, const char *file, int line, const char *msg) {
  struct loader *l = arg;
  struct fr_policy_error *e = l->err;
  size_t used = strlen(e->msg);
  char piece[sizeof(e->msg)];
  int k;

  if (l->cfg.count <= 1)
    return; /* the first error is the record itself */
  if (strcmp(file, e->file) == 0)
    k = line > 0 ? snprintf(piece, sizeof(piece), "; line %d: %s", line, msg)
                 : snprintf(piece, sizeof(piece), "; %s", msg);
  else
    k = line > 0 ? snprintf(piece, sizeof(piece), "; %s:%d: %s", file, line, msg)
                 : snprintf(piece, sizeof(piece), "; %s: %s", file, msg);
  if (l->untold == 0 && k > 0 && used + (size_t)k + UNTOLD_ROOM < sizeof(e->msg))
    memcpy(e->msg + used, piece, (size_t)k + 1);
  else
    l->untold++;
}

/* Ends err->msg with the count of errors join_error() had no room for. */
static void errors_joined(struct loader *l) {
  size_t used = strlen(l->err->msg);

  if (l->untold > 0)
    snprintf(l->err->msg + used, sizeof(l->err->msg) - used,
             "; and %d more (`fedrouter policy check` lists every error)", l->untold);
}

/* ---- did you mean ---- */

/* The closest of <cands> (<n> of them) to <name>, or NULL when none is
 * within SUGGEST_MAX_DISTANCE edits and fewer edits than the name has
 * characters (so "us" is not taken for a misspelt "eu"). */
static const char *suggest(const char *name, const char *const *cands, size_t n) {
  const char *best = NULL;
  size_t best_d = SIZE_MAX, i, len = strlen(name);

  for (i = 0; i < n; i++) {
    size_t d = fr_edit_distance(name, cands[i]);
    if (d < best_d) {
      best_d = d;
      best = cands[i];
    }
  }
  if (best == NULL || best_d > SUGGEST_MAX_DISTANCE || best_d >= len)
    return NULL;
  return best;
}

/* "a, b, c" of <cands> into <buf> (cut with "..." when long). */
static const char *join(const char *const *cands, size_t n, char *buf, size_t size) {
  size_t len = 0, i;

  buf[0] = '\0';
  for (i = 0; i < n; i++) {
    int w = snprintf(buf + len, size - len, "%s%s", i > 0 ? ", " : "", cands[i]);
    if (w < 0 || (size_t)w >= size - len) {
      if (size > 4)
        memcpy(buf + size - 4, "...", 4);
      break;
    }
    len += (size_t)w;
  }
  return buf;
}

/* Reports every unknown key of <group>; the first error, or 0. */
static int check_keys(struct loader *l, const config_setting_t *group, const char *const *known) {
  int i, n = config_setting_length(group), rc = 0;
  size_t nknown = 0;

  while (known[nknown] != NULL)
    nknown++;
  for (i = 0; i < n; i++) {
    const config_setting_t *m = config_setting_get_elem(group, (unsigned)i);
    const char *name = config_setting_name(m), *best;
    char list[256];
    size_t k;

    for (k = 0; k < nknown; k++)
      if (strcmp(name, known[k]) == 0)
        break;
    if (k < nknown)
      continue;
    best = suggest(name, known, nknown);
    if (best != NULL)
      rc = fr_cfg_first(rc, bad(l, m, "unknown key (did you mean \"%s\"?)", best));
    else
      rc = fr_cfg_first(rc, bad(l, m, "unknown key (known keys here: %s)", join(known, nknown, list, sizeof(list))));
  }
  return rc;
}

/* ---- typed getters ---- */

/* A string or an array (or list) of strings: <*out> is the setting, <*n>
 * the number of strings (str_elem() gets each). Absent: NULL and 0. */
static int get_strings(struct loader *l, const config_setting_t *group, const char *key,
                       const config_setting_t **out, int *n) {
  config_setting_t *s = config_setting_get_member(group, key);
  int i, len;

  *out = NULL;
  *n = 0;
  if (s == NULL)
    return 0;
  if (config_setting_type(s) == CONFIG_TYPE_STRING) {
    len = 1;
  } else if (config_setting_is_array(s) || config_setting_is_list(s)) {
    len = config_setting_length(s);
    if (len == 0)
      return bad(l, s, "empty list (give at least one name, or leave the key out)");
    for (i = 0; i < len; i++) {
      const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
      if (config_setting_type(e) != CONFIG_TYPE_STRING)
        return bad(l, e, "expected a string, got %s (put names in double quotes)",
                   type_name(config_setting_type(e)));
    }
  } else {
    return bad(l, s, "expected a string or an array of strings [\"a\", \"b\"], got %s",
               type_name(config_setting_type(s)));
  }
  for (i = 0; i < len; i++) {
    const config_setting_t *e = len == 1 && config_setting_type(s) == CONFIG_TYPE_STRING
                                    ? s
                                    : config_setting_get_elem(s, (unsigned)i);
    const char *v = config_setting_get_string(e);
    if (v == NULL || v[0] == '\0')
      return bad(l, e, "must not be empty");
  }
  *out = s;
  *n = len;
  return 0;
}

static const config_setting_t *str_elem(const config_setting_t *s, int i) {
  if (config_setting_type(s) == CONFIG_TYPE_STRING)
    return s;
  return config_setting_get_elem(s, (unsigned)i);
}

/* A number (integer or float) in [lo, hi] (lo excluded when <lo_open>);
 * <*out> keeps its default when absent. */
static int get_number(struct loader *l, const config_setting_t *group, const char *key, double lo,
                      int lo_open, double hi, double *out, int *present) {
  const config_setting_t *s;
  double v = 0;
  int rc = fr_cfg_get_number(&l->cfg, group, key, &v, &s);

  if (present != NULL)
    *present = s != NULL;
  if (rc < 0 || s == NULL)
    return rc;
  if (!isfinite(v) || (lo_open ? v <= lo : v < lo))
    return bad(l, s, "must be %s %g, got %g", lo_open ? ">" : ">=", lo, v);
  if (v > hi)
    return bad(l, s, "%g is too large (at most %g)", v, hi);
  *out = v;
  return 0;
}

static int get_bool(struct loader *l, const config_setting_t *group, const char *key, int *out) {
  config_setting_t *s = config_setting_get_member(group, key);

  if (s == NULL)
    return 0;
  if (config_setting_type(s) != CONFIG_TYPE_BOOL)
    return bad(l, s, "expected true or false, got %s", type_name(config_setting_type(s)));
  *out = config_setting_get_bool(s) != 0;
  return 0;
}

/* One of <values> (NULL-terminated); the index goes to <*out>. */
static int get_enum(struct loader *l, const config_setting_t *group, const char *key,
                    const char *const *values, int *out) {
  const config_setting_t *s;
  const char *v, *best;
  char list[128];
  size_t i, n = 0;
  int rc = get_string(l, group, key, 0, "one of the documented values", &v, &s);

  if (rc < 0 || v == NULL)
    return rc;
  while (values[n] != NULL)
    n++;
  for (i = 0; i < n; i++)
    if (strcmp(v, values[i]) == 0) {
      *out = (int)i;
      return 0;
    }
  best = suggest(v, values, n);
  if (best != NULL)
    return bad(l, s, "unknown value \"%s\" (did you mean \"%s\"?)", v, best);
  return bad(l, s, "unknown value \"%s\" (expected one of: %s)", v, join(values, n, list,
                                                                          sizeof(list)));
}

/* ---- names ---- */

static int is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_' || c == '.';
}

/* Region and group names: [A-Za-z0-9._-]{1,63}, like the router config's
 * regions. Cluster, tenant and pool patterns also allow '*' and '?'. */
static int check_token(struct loader *l, const config_setting_t *s, const char *v, int glob,
                       const char *what) {
  size_t i, n = strlen(v);

  if (n > NAME_MAX_LEN)
    return bad(l, s, "\"%s\" is %zu characters long (at most %d)", v, n, NAME_MAX_LEN);
  for (i = 0; i < n; i++)
    if (!is_name_char(v[i]) && !(glob && (v[i] == '*' || v[i] == '?')))
      return bad(l, s, "\"%s\" is not a valid %s (letters, digits, '-', '_', '.'%s)", v, what,
                 glob ? ", and the wildcards '*' and '?'" : "");
  return 0;
}

/* Adds <name> to the policy's region table (unless it is there) and
 * returns its id, or -1 when out of memory. */
static long add_region(struct loader *l, const char *name) {
  struct fr_policy *p = l->p;
  long id = policy_region_id(p, name);

  if (id >= 0)
    return id;
  if (p->nregions == l->cap_regions) {
    size_t cap = l->cap_regions != 0 ? l->cap_regions * 2 : 8;
    char **nr = realloc(p->regions, cap * sizeof(*nr));
    if (nr == NULL)
      return -1;
    p->regions = nr;
    l->cap_regions = cap;
  }
  if ((p->regions[p->nregions] = strdup(name)) == NULL)
    return -1;
  return (long)p->nregions++;
}

static long group_id(const struct fr_policy *p, const char *name) {
  size_t i;

  for (i = 0; i < p->ngroups; i++)
    if (strcmp(p->groups[i].name, name) == 0)
      return (long)i;
  return -1;
}

/* <name> (setting <s>) as a region id into <*region>, or, when
 * <allow_group>, as a group index into <*group> (a name that is both means
 * the group). When the router gave its clusters, a region no cluster is in
 * is an error, with a "did you mean" for near misses: a policy cannot
 * prepare for a region before its first cluster is configured, but neither
 * can a typo in a residency rule (only_regions = "eu-wets") slip through as
 * "never place anything". */
static int resolve_place(struct loader *l, const config_setting_t *s, const char *name,
                         int allow_group, long *group, long *region) {
  struct fr_policy *p = l->p;
  const char **cands;
  const char *best;
  char list[256];
  size_t i, n = 0;
  int rc;

  *group = -1;
  *region = -1;
  if ((rc = check_token(l, s, name, 0, allow_group ? "region or region group" : "region")) < 0)
    return rc;
  if (allow_group && (*group = group_id(p, name)) >= 0)
    return 0;
  if ((*region = policy_region_id(p, name)) >= 0)
    return 0;
  if (!l->check_names) {
    if ((*region = add_region(l, name)) < 0)
      return oom(l);
    return 0;
  }
  cands = malloc((p->nregions + p->ngroups + 1) * sizeof(*cands));
  if (cands == NULL)
    return oom(l);
  for (i = 0; i < l->nrouter_regions; i++)
    cands[n++] = p->regions[i];
  for (i = 0; allow_group && i < p->ngroups; i++)
    cands[n++] = p->groups[i].name;
  best = suggest(name, cands, n);
  if (best != NULL)
    rc = bad(l, s, "unknown %s \"%s\" (did you mean \"%s\"?)",
             allow_group ? "region or region group" : "region", name, best);
  else
    rc = bad(l, s, "unknown %s \"%s\" (known: %s)",
             allow_group ? "region or region group" : "region", name,
             join(cands, n, list, sizeof(list)));
  free(cands);
  return rc;
}
/* Checks a cluster name or glob against the router's clusters: an exact
 * name must be one of them; a glob matching none is a warning. */
static int check_cluster_pattern(struct loader *l, const config_setting_t *s, const char *pat) {
  const char *best;
  char list[256];
  size_t i;
  int rc;

  if ((rc = check_token(l, s, pat, 1, "cluster name or pattern")) < 0)
    return rc;
  if (!l->check_names)
    return 0;
  for (i = 0; i < l->nclusters; i++)
    if (policy_glob_match(pat, l->clusters[i]))
      return 0;
  if (policy_is_glob(pat))
    return warn(l, s, "pattern \"%s\" matches no cluster", pat);
  best = suggest(pat, l->clusters, l->nclusters);
  if (best != NULL)
    return bad(l, s, "unknown cluster \"%s\" (did you mean \"%s\"?)", pat, best);
  return bad(l, s, "unknown cluster \"%s\" (known clusters: %s)", pat,
             join(l->clusters, l->nclusters, list, sizeof(list)));
}

/* Fills <pl> from the strings of <s> (<n> of them): cluster names or globs
 * checked against the router's clusters when <clusters>, otherwise (tenants,
 * pools) only by their character set, <what> naming them in messages. A
 * pattern listed twice is an error. */
static int load_patterns(struct loader *l, const config_setting_t *s, int n, int clusters,
                         const char *what, struct patlist *pl) {
  int i, rc;

  pl->pats = calloc((size_t)n, sizeof(*pl->pats));
  pl->lines = calloc((size_t)n, sizeof(*pl->lines));
  if (pl->pats == NULL || pl->lines == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *e = str_elem(s, i);
    const char *v = config_setting_get_string(e);
    size_t j;

    rc = clusters ? check_cluster_pattern(l, e, v) : check_token(l, e, v, 1, what);
    if (rc < 0)
      return rc;
    for (j = 0; j < pl->n; j++)
      if (strcmp(pl->pats[j], v) == 0)
        return bad(l, e, "\"%s\" is listed twice (first at line %d)", v, pl->lines[j]);
    if ((pl->pats[pl->n] = strdup(v)) == NULL)
      return oom(l);
    pl->lines[pl->n++] = line_of(e);
  }
  return 0;
}

/* ---- sections ---- */

static const char *const root_keys[] = {"split", "max_state_age_ms", "latency_ceiling_ms",
                                        "weights", "warm", "region_groups", "spillover",
                                        "clusters", "rules", "cheaper_region", NULL};
static const char *const weights_keys[] = {"latency", "warm", "capacity", "cost",
                                           "latency_ref_ms", "cost_ref_per_hour", NULL};
static const char *const warm_keys[] = {"beats_cold", "cold_start_s", "round_trips", NULL};
static const char *const cheaper_keys[] = {"min_saving", "max_latency_ms", NULL};
static const char *const group_keys[] = {"name", "regions", "near", NULL};
static const char *const spillover_keys[] = {"order", "tiers", NULL};
static const char *const tier_keys[] = {"name", "clusters", NULL};
static const char *const override_keys[] = {"name", "cold_start_s", "latency_ceiling_ms", NULL};
static const char *const rule_keys[] = {"name", "tenant", "pool", "labels", "pin", "allow",
                                        "deny", "only_regions", "split", NULL};
static const char *const split_values[] = {"fill_first", "spread", NULL};
static const char *const order_values[] = {"tier_first", "region_first", NULL};

static int load_weights(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *g;
  int rc;

  if ((rc = get_group(l, root, "weights", &g)) < 0 || g == NULL)
    return rc;
  /* Every key is checked, whatever the ones before it held. */
  rc = check_keys(l, g, weights_keys);
  rc = fr_cfg_first(rc, get_number(l, g, "latency", 0, 0, MAX_WEIGHT, &p->w_latency, NULL));
  rc = fr_cfg_first(rc, get_number(l, g, "warm", 0, 0, MAX_WEIGHT, &p->w_warm, NULL));
  rc = fr_cfg_first(rc, get_number(l, g, "capacity", 0, 0, MAX_WEIGHT, &p->w_capacity, NULL));
  rc = fr_cfg_first(rc, get_number(l, g, "cost", 0, 0, MAX_WEIGHT, &p->w_cost, NULL));
  rc = fr_cfg_first(rc, get_number(l, g, "latency_ref_ms", 0, 1, MAX_CEILING_MS,
                                   &p->latency_ref_ms, NULL));
  rc = fr_cfg_first(rc, get_number(l, g, "cost_ref_per_hour", 0, 1, 1e6, &p->cost_ref, NULL));
  return rc;
}

static int load_warm(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *g;
  double cold_s = p->cold_start_ms / 1000.0;
  int rc;

  if ((rc = get_group(l, root, "warm", &g)) < 0 || g == NULL)
    return rc;
  rc = check_keys(l, g, warm_keys);
  rc = fr_cfg_first(rc, get_bool(l, g, "beats_cold", &p->beats_cold));
  rc = fr_cfg_first(rc, get_number(l, g, "cold_start_s", 0, 0, MAX_COLD_START_S, &cold_s, NULL));
  rc = fr_cfg_first(rc, get_number(l, g, "round_trips", 0, 0, MAX_ROUND_TRIPS, &p->round_trips,
                                   NULL));
  if (rc < 0)
    return rc;
  p->cold_start_ms = cold_s * 1000.0;
  return 0;
}

/* cheaper_region = { min_saving = 0.25; max_latency_ms = 150; }: both
 * required, since either alone would say nothing about when to move. */
static int load_cheaper(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *g;
  int rc, has_saving = 0, has_lat = 0;

  if ((rc = get_group(l, root, "cheaper_region", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, cheaper_keys)) < 0 ||
      (rc = get_number(l, g, "min_saving", 0, 0, 0.99, &p->cheaper_saving, &has_saving)) < 0 ||
      (rc = get_number(l, g, "max_latency_ms", 0, 1, MAX_CEILING_MS, &p->cheaper_max_ms, &has_lat)) < 0)
    return rc;
  if (!has_saving || !has_lat)
    return bad(l, g, "cheaper_region needs both min_saving (a fraction, 0.25 = 25%% cheaper) and "
                     "max_latency_ms (the latency the cheaper cluster must stay within)");
  p->cheaper = 1;
  return 0;
}

/* Groups first (names and regions), then their near lists, which may name
 * groups defined further down. */
static int load_region_groups(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *list;
  int rc, i, n, keys = 0;
  size_t g, r;

  if ((rc = get_list(l, root, "region_groups", &list)) < 0 || list == NULL)
    return rc;
  n = config_setting_length(list);
  if (n == 0)
    return 0;
  p->groups = calloc((size_t)n, sizeof(*p->groups));
  if (p->groups == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *e = config_setting_get_elem(list, (unsigned)i), *name_s, *regs;
    struct region_group *grp = &p->groups[i];
    const char *name;
    int nr, j;

    /* An unknown key leaves the group usable: the rest is still checked. */
    keys = fr_cfg_first(keys, check_keys(l, e, group_keys));
    if ((rc = get_string(l, e, "name", 1, "every region group needs a name", &name, &name_s)) <
            0 ||
        (rc = check_token(l, name_s, name, 0, "region group name")) < 0)
      return fr_cfg_first(keys, rc);
    if (group_id(p, name) >= 0)
      return fr_cfg_first(keys, bad(l, name_s, "duplicate region group \"%s\" (first defined at "
                                    "line %d)", name, p->groups[group_id(p, name)].line));
    if ((rc = get_strings(l, e, "regions", &regs, &nr)) < 0)
      return fr_cfg_first(keys, rc);
    if (regs == NULL)
      return fr_cfg_first(keys, missing(l, e, "regions", "missing (the regions in this group)"));
    grp->line = line_of(e);
    if ((grp->name = strdup(name)) == NULL)
      return oom(l);
    p->ngroups++; /* from here on policy_free() releases it */
    grp->regions = calloc((size_t)nr, sizeof(*grp->regions));
    if (grp->regions == NULL)
      return oom(l);
    for (j = 0; j < nr; j++) {
      const config_setting_t *rs = str_elem(regs, j);
      const char *rn = config_setting_get_string(rs);
      long gid, rid;
      size_t k;

      if ((rc = resolve_place(l, rs, rn, 0, &gid, &rid)) < 0)
        return rc;
      for (k = 0; k < grp->nregions; k++)
        if (grp->regions[k] == (size_t)rid)
          return bad(l, rs, "region \"%s\" is listed twice in this group", rn);
      for (k = 0; k + 1 < p->ngroups; k++) {
        size_t m;
        for (m = 0; m < p->groups[k].nregions; m++)
          if (p->groups[k].regions[m] == (size_t)rid)
            return bad(l, rs, "region \"%s\" is already in group \"%s\" (line %d); a region "
                       "belongs to one group", rn, p->groups[k].name, p->groups[k].line);
      }
      grp->regions[grp->nregions++] = (size_t)rid;
    }
    /* A group may carry the name of a region only if it holds that region:
     * elsewhere the name would mean two different things. */
    {
      long rid = policy_region_id(p, name);
      size_t k;
      int holds = 0;
      for (k = 0; rid >= 0 && k < grp->nregions; k++)
        holds |= grp->regions[k] == (size_t)rid;
      if (rid >= 0 && !holds)
        return bad(l, name_s, "\"%s\" is also a region outside this group; give the group "
                   "another name", name);
    }
  }

  /* Regions added by near lists (unchecked names) get ids after these; the
   * rank table is sized at the end, so collect ranks per group first. */
  for (i = 0; i < n; i++) {
    const config_setting_t *e = config_setting_get_elem(list, (unsigned)i), *near;
    int nn, j;

    if ((rc = get_strings(l, e, "near", &near, &nn)) < 0)
      return rc;
    for (j = 0; j < nn; j++) {
      const config_setting_t *s = str_elem(near, j);
      long gid, rid;
      if ((rc = resolve_place(l, s, config_setting_get_string(s), 1, &gid, &rid)) < 0)
        return rc;
    }
  }
  /* Later sections may add regions (unchecked names); they are never near. */
  p->near_stride = p->nregions;
  p->near_rank = calloc(p->ngroups * (p->nregions > 0 ? p->nregions : 1), sizeof(int));
  if (p->near_rank == NULL)
    return oom(l);
  for (g = 0; g < p->ngroups; g++) {
    const config_setting_t *e = config_setting_get_elem(list, (unsigned)g), *near;
    int *rank = &p->near_rank[g * p->near_stride];
    int nn, j;

    if ((rc = get_strings(l, e, "near", &near, &nn)) < 0)
      return rc;
    for (r = 0; r < p->groups[g].nregions; r++)
      rank[p->groups[g].regions[r]] = -1; /* own regions: never "near" */
    for (j = 0; j < nn; j++) {
      const config_setting_t *s = str_elem(near, j);
      const char *v = config_setting_get_string(s);
      long gid, rid;
      int added = 0, k;

      if ((rc = resolve_place(l, s, v, 1, &gid, &rid)) < 0)
        return rc;
      for (k = 0; k < j; k++)
        if (strcmp(config_setting_get_string(str_elem(near, k)), v) == 0)
          return bad(l, s, "\"%s\" is listed twice", v);
      if (gid == (long)g || (rid >= 0 && rank[rid] == -1))
        return bad(l, s, "\"%s\" is this group's own %s; it always comes first, leave it out", v,
                   gid >= 0 ? "name" : "region");
      if (gid >= 0) {
        for (r = 0; r < p->groups[gid].nregions; r++)
          if (rank[p->groups[gid].regions[r]] == 0) {
            rank[p->groups[gid].regions[r]] = j + 1;
            added = 1;
          }
        if (!added)
          return bad(l, s, "every region of group \"%s\" is already listed earlier", v);
      } else {
        if (rank[rid] != 0)
          return bad(l, s, "region \"%s\" is already covered by an earlier entry (position %d); "
                     "list it before its group to rank it first", v, rank[rid]);
        rank[rid] = j + 1;
      }
    }
    for (r = 0; r < p->near_stride; r++)
      if (rank[r] < 0)
        rank[r] = 0;
  }
  return keys;
}

static int load_spillover(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *g, *list;
  int rc, i, n, first;

  if ((rc = get_group(l, root, "spillover", &g)) < 0 || g == NULL)
    return rc;
  first = check_keys(l, g, spillover_keys);
  first = fr_cfg_first(first, get_enum(l, g, "order", order_values, &p->order));
  if ((rc = get_list(l, g, "tiers", &list)) < 0 || list == NULL)
    return fr_cfg_first(first, rc);
  n = config_setting_length(list);
  if (n == 0)
    return first;
  p->tiers = calloc((size_t)n, sizeof(*p->tiers));
  if (p->tiers == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *e = config_setting_get_elem(list, (unsigned)i), *name_s, *cl;
    /* A tier that failed before it was counted leaves its slot to the next. */
    struct tier *t = &p->tiers[p->ntiers];
    const char *name;
    size_t k, m, j;
    int nc;

    memset(t, 0, sizeof(*t));
    first = fr_cfg_first(first, check_keys(l, e, tier_keys));
    if ((rc = get_string(l, e, "name", 1, "every tier needs a name", &name, &name_s)) < 0 ||
        (rc = check_token(l, name_s, name, 0, "tier name")) < 0)
      goto next;
    for (k = 0; k < p->ntiers && rc == 0; k++)
      if (strcmp(p->tiers[k].name, name) == 0)
        rc = bad(l, name_s, "duplicate tier \"%s\" (first defined at line %d)", name, p->tiers[k].line);
    if (rc < 0 || (rc = get_strings(l, e, "clusters", &cl, &nc)) < 0)
      goto next;
    if (cl == NULL) {
      rc = missing(l, e, "clusters", "missing (the clusters in this tier, by name or glob)");
      goto next;
    }
    t->line = line_of(e);
    if ((t->name = strdup(name)) == NULL)
      return oom(l);
    p->ntiers++;
    if ((rc = load_patterns(l, cl, nc, 1, "cluster", &t->clusters)) < 0)
      goto next;
    /* The same name in two tiers, checkable without the router's list. */
    for (j = 0; j < t->clusters.n && rc == 0; j++)
      for (k = 0; k + 1 < p->ntiers && rc == 0; k++)
        for (m = 0; m < p->tiers[k].clusters.n && rc == 0; m++)
          if (strcmp(p->tiers[k].clusters.pats[m], t->clusters.pats[j]) == 0)
            rc = bad(l, str_elem(cl, (int)j), "\"%s\" is already in tier \"%s\" (line %d); a "
                     "cluster belongs to one tier", t->clusters.pats[j], p->tiers[k].name,
                     p->tiers[k].clusters.lines[m]);
  next:
    first = fr_cfg_first(first, rc); /* and on to the next tier */
  }
  return first;
}

/* A cluster the router named in two tiers through patterns. */
static int check_tier_overlap(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  size_t c, t, m;

  for (c = 0; c < l->nclusters && p->ntiers > 1; c++) {
    long first = -1;
    int first_line = 0;
    for (t = 0; t < p->ntiers; t++)
      for (m = 0; m < p->tiers[t].clusters.n; m++) {
        if (!policy_glob_match(p->tiers[t].clusters.pats[m], l->clusters[c]))
          continue;
        if (first < 0) {
          first = (long)t;
          first_line = p->tiers[t].clusters.lines[m];
        } else if ((size_t)first != t) {
          const config_setting_t *tiers = config_setting_get_member(
              config_setting_get_member(root, "spillover"), "tiers");
          const config_setting_t *e = config_setting_get_elem(tiers, (unsigned)t);
          const config_setting_t *s = config_setting_get_member(e, "clusters");
          return bad(l, str_elem(s, config_setting_type(s) == CONFIG_TYPE_STRING ? 0 : (int)m),
                     "\"%s\" puts cluster \"%s\" in tier \"%s\", but it is already in tier "
                     "\"%s\" (line %d); a cluster belongs to one tier",
                     p->tiers[t].clusters.pats[m], l->clusters[c], p->tiers[t].name,
                     p->tiers[first].name, first_line);
        }
        break;
      }
  }
  return 0;
}

static int load_overrides(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *list;
  int rc, i, n, first = 0;

  if ((rc = get_list(l, root, "clusters", &list)) < 0 || list == NULL)
    return rc;
  n = config_setting_length(list);
  if (n == 0)
    return 0;
  p->overrides = calloc((size_t)n, sizeof(*p->overrides));
  if (p->overrides == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *e = config_setting_get_elem(list, (unsigned)i), *name_s;
    struct override *o = &p->overrides[p->noverrides];
    const char *name;
    double cold_s = 0;

    memset(o, 0, sizeof(*o));
    /* The name and each setting are checked apart: one error hides none. */
    first = fr_cfg_first(first, check_keys(l, e, override_keys));
    rc = get_string(l, e, "name", 1, "the cluster name or glob these settings apply to", &name,
                    &name_s);
    if (rc == 0)
      rc = check_cluster_pattern(l, name_s, name);
    rc = fr_cfg_first(rc, get_number(l, e, "cold_start_s", 0, 0, MAX_COLD_START_S, &cold_s,
                                     &o->has_cold_start));
    rc = fr_cfg_first(rc, get_number(l, e, "latency_ceiling_ms", 0, 1, MAX_CEILING_MS,
                                     &o->ceiling_ms, &o->has_ceiling));
    if (rc < 0) {
      first = fr_cfg_first(first, rc);
      continue;
    }
    if (!o->has_cold_start && !o->has_ceiling) {
      first = fr_cfg_first(first, bad(l, e, "sets nothing (give cold_start_s and/or latency_ceiling_ms)"));
      continue;
    }
    o->cold_start_ms = cold_s * 1000.0;
    o->line = line_of(e);
    if ((o->pattern = strdup(name)) == NULL)
      return oom(l);
    p->noverrides++;
  }
  return first;
}

/* "key=value-glob" or "key". Keys follow Kubernetes label keys: an
 * optional DNS prefix and '/', then [A-Za-z0-9._-]. */
static int load_labels(struct loader *l, const config_setting_t *s, int n, struct rule *r) {
  int i;

  r->labels = calloc((size_t)n, sizeof(*r->labels));
  if (r->labels == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *e = str_elem(s, i);
    const char *v = config_setting_get_string(e), *eq = strchr(v, '=');
    size_t klen = eq != NULL ? (size_t)(eq - v) : strlen(v), k;
    struct label_cond *c = &r->labels[r->nlabels];

    if (klen == 0)
      return bad(l, e, "\"%s\": missing the label key (write \"key=value\" or \"key\")", v);
    for (k = 0; k < klen; k++)
      if (!is_name_char(v[k]) && v[k] != '/')
        return bad(l, e, "\"%s\": \"%.*s\" is not a valid label key (letters, digits, '-', '_', "
                   "'.', '/')", v, (int)klen, v);
    if (eq != NULL)
      for (k = 1; eq[k] != '\0'; k++)
        if (!is_name_char(eq[k]) && eq[k] != '*' && eq[k] != '?')
          return bad(l, e, "\"%s\": \"%s\" is not a valid label value (letters, digits, '-', "
                     "'_', '.', and the wildcards '*' and '?')", v, eq + 1);
    if ((c->key = strndup(v, klen)) == NULL)
      return oom(l);
    r->nlabels++;
    if (eq != NULL && (c->value = strdup(eq + 1)) == NULL)
      return oom(l);
  }
  return 0;
}

static int load_rules(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *list;
  int rc, i, n, first = 0;

  if ((rc = get_list(l, root, "rules", &list)) < 0 || list == NULL)
    return rc;
  n = config_setting_length(list);
  if (n == 0)
    return 0;
  p->rules = calloc((size_t)n, sizeof(*p->rules));
  if (p->rules == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *e = config_setting_get_elem(list, (unsigned)i), *name_s, *s;
    /* A rule that failed before it was counted leaves its slot to the next. */
    struct rule *r = &p->rules[p->nrules];
    const char *name;
    int ns, j, one;
    char fallback[32];
    size_t k;

    memset(r, 0, sizeof(*r));
    r->split = -1;
    first = fr_cfg_first(first, check_keys(l, e, rule_keys));
    if ((rc = get_string(l, e, "name", 0, "a name for this rule", &name, &name_s)) < 0 ||
        (name != NULL && (rc = check_token(l, name_s, name, 0, "rule name")) < 0))
      goto next;
    for (k = 0; name != NULL && k < p->nrules; k++)
      if (strcmp(p->rules[k].name, name) == 0) {
        rc = bad(l, name_s, "duplicate rule name \"%s\" (first used at line %d)", name, p->rules[k].line);
        goto next;
      }
    snprintf(fallback, sizeof(fallback), "rules.[%d]", i);
    r->line = line_of(e);
    if ((r->name = strdup(name != NULL ? name : fallback)) == NULL)
      return oom(l);
    p->nrules++;

    /* Each field is checked even after an error in another one (a check
     * reports them all); the rule is dropped at the end if any failed. */
    if ((one = get_strings(l, e, "tenant", &s, &ns)) == 0 && s != NULL)
      one = load_patterns(l, s, ns, 0, "tenant name or pattern", &r->tenants);
    rc = fr_cfg_first(rc, one);
    if ((one = get_strings(l, e, "pool", &s, &ns)) == 0 && s != NULL)
      one = load_patterns(l, s, ns, 0, "pool name or pattern", &r->pools);
    rc = fr_cfg_first(rc, one);
    if ((one = get_strings(l, e, "labels", &s, &ns)) == 0 && s != NULL)
      one = load_labels(l, s, ns, r);
    rc = fr_cfg_first(rc, one);
    if ((one = get_strings(l, e, "pin", &s, &ns)) == 0 && s != NULL)
      one = load_patterns(l, s, ns, 1, "cluster", &r->pin);
    rc = fr_cfg_first(rc, one);
    r->has_pin = s != NULL;
    if ((one = get_strings(l, e, "allow", &s, &ns)) == 0 && s != NULL)
      one = load_patterns(l, s, ns, 1, "cluster", &r->allow);
    rc = fr_cfg_first(rc, one);
    r->has_allow = s != NULL;
    if ((one = get_strings(l, e, "deny", &s, &ns)) == 0 && s != NULL)
      one = load_patterns(l, s, ns, 1, "cluster", &r->deny);
    rc = fr_cfg_first(rc, one);
    r->has_deny = s != NULL;
    rc = fr_cfg_first(rc, get_enum(l, e, "split", split_values, &r->split));
    if ((one = get_strings(l, e, "only_regions", &s, &ns)) < 0 || s == NULL) {
      rc = fr_cfg_first(rc, one);
    } else {
      /* Resolve every name first (unchecked names may grow the region
       * table), then size the membership array. */
      for (j = 0; j < ns && one == 0; j++) {
        long gid, rid;
        one = resolve_place(l, str_elem(s, j), config_setting_get_string(str_elem(s, j)), 1, &gid,
                            &rid);
      }
      rc = fr_cfg_first(rc, one);
    }
    if (rc < 0)
      goto next;
    if (s != NULL) {
      r->has_only_regions = 1;
      r->region_ok = calloc(p->nregions > 0 ? p->nregions : 1, 1);
      if (r->region_ok == NULL)
        return oom(l);
      r->nregion_ok = p->nregions;
      for (j = 0; j < ns; j++) {
        long gid, rid;
        (void)resolve_place(l, str_elem(s, j), config_setting_get_string(str_elem(s, j)), 1, &gid,
                            &rid);
        if (gid >= 0) {
          for (k = 0; k < p->groups[gid].nregions; k++)
            r->region_ok[p->groups[gid].regions[k]] = 1;
        } else {
          r->region_ok[rid] = 1;
        }
      }
    }
    if (!r->has_pin && !r->has_allow && !r->has_deny && !r->has_only_regions && r->split < 0)
      rc = bad(l, e, "rule \"%s\" has no action (give pin, allow, deny, only_regions or "
               "split)", r->name);
  next:
    /* Every rule is checked: a check reports them all. */
    first = fr_cfg_first(first, rc);
  }
  return first;
}

/* ---- whole-file checks ---- */

/* Whether every pattern of <r> is covered by one of <e> (so a request that
 * <r> matches on this field is matched by <e> too). Empty <e> matches all. */
static int patterns_implied(const struct patlist *e, const struct patlist *r) {
  size_t i, j;

  if (e->n == 0)
    return 1;
  if (r->n == 0)
    return 0;
  for (i = 0; i < r->n; i++) {
    int found = 0;
    for (j = 0; j < e->n && !found; j++)
      found = strcmp(e->pats[j], r->pats[i]) == 0 ||
              (!policy_is_glob(r->pats[i]) && policy_glob_match(e->pats[j], r->pats[i]));
    if (!found)
      return 0;
  }
  return 1;
}

static int labels_implied(const struct rule *e, const struct rule *r) {
  size_t i, j;

  for (i = 0; i < e->nlabels; i++) {
    int found = 0;
    for (j = 0; j < r->nlabels && !found; j++) {
      const struct label_cond *a = &e->labels[i], *b = &r->labels[j];
      if (strcmp(a->key, b->key) != 0)
        continue;
      found = a->value == NULL ||
              (b->value != NULL && (strcmp(a->value, b->value) == 0 ||
                                    (!policy_is_glob(b->value) &&
                                     policy_glob_match(a->value, b->value))));
    }
    if (!found)
      return 0;
  }
  return 1;
}

/* Whether rule <e> matches every request that rule <r> matches. */
static int rule_implied(const struct rule *e, const struct rule *r) {
  return patterns_implied(&e->tenants, &r->tenants) && patterns_implied(&e->pools, &r->pools) &&
         labels_implied(e, r);
}

/* Warnings for rules that can never place a sandbox (pin or only_regions
 * leave no cluster once the earlier rules that always apply with them have
 * run) and for allows that re-admit nothing. Needs the router's clusters. */
static int check_rules(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  const config_setting_t *list = config_setting_get_member(root, "rules");
  size_t ri, ei, k;
  int rc;

  if (!l->check_names)
    return 0;
  for (ri = 0; ri < p->nrules; ri++) {
    const struct rule *r = &p->rules[ri];
    const config_setting_t *rs = config_setting_get_elem(list, (unsigned)ri);

    if (r->has_pin || r->has_only_regions) {
      int any = 0, alone = 0;
      char blame[200];
      size_t blen = 0;
      uint8_t *blamed = calloc(p->nrules, 1);

      if (blamed == NULL)
        return oom(l);
      for (k = 0; k < p->nknown; k++) {
        const struct known_cluster *kc = &p->known[k];
        int st = ELIG_OK, st_alone = ELIG_OK;
        size_t by = 0, by_alone = 0;

        policy_rule_apply(r, ri, kc->facts.rule_bits[ri], (long)kc->region, &st_alone,
                          &by_alone);
        if (st_alone == ELIG_OK)
          alone = 1;
        for (ei = 0; ei < ri; ei++)
          if (rule_implied(&p->rules[ei], r))
            policy_rule_apply(&p->rules[ei], ei, kc->facts.rule_bits[ei], (long)kc->region, &st,
                              &by);
        policy_rule_apply(r, ri, kc->facts.rule_bits[ri], (long)kc->region, &st, &by);
        if (st == ELIG_OK)
          any = 1;
        else if (st_alone == ELIG_OK && by != ri)
          blamed[by] = 1;
      }
      blame[0] = '\0';
      for (ei = 0; ei < ri; ei++) {
        int w;
        if (!blamed[ei] || blen >= sizeof(blame))
          continue;
        w = snprintf(blame + blen, sizeof(blame) - blen, "%s\"%s\" (line %d)",
                     blen > 0 ? ", " : "", p->rules[ei].name, p->rules[ei].line);
        blen = w < 0 ? sizeof(blame) : blen + (size_t)w;
      }
      free(blamed);
      if (!any && !alone)
        rc = warn(l, rs, "rule \"%s\" can never place a sandbox: %s", r->name,
                  r->has_pin && r->has_only_regions
                      ? "no cluster it pins is in its only_regions"
                      : r->has_pin ? "its pin names no cluster"
                                   : "no cluster is in its only_regions");
      else if (!any)
        rc = warn(l, rs, "rule \"%s\" can never place a sandbox: every cluster it leaves is "
                  "denied or excluded by earlier rules that always apply with it: %s", r->name,
                  blame);
      else
        rc = 0;
      if (rc < 0)
        return rc;
    }
    if (r->has_allow) {
      int effect = 0;
      for (k = 0; k < p->nknown && !effect; k++) {
        const uint8_t *bits = p->known[k].facts.rule_bits;
        if (!(bits[ri] & RULE_ALLOW))
          continue;
        for (ei = 0; ei <= ri && !effect; ei++)
          effect = p->rules[ei].has_deny && (bits[ei] & RULE_DENY);
      }
      if (!effect && p->nknown > 0 &&
          (rc = warn(l, config_setting_get_member(rs, "allow"),
                     "allow in rule \"%s\" has no effect: no earlier rule denies any cluster it "
                     "names (allow only re-admits clusters a deny removed)", r->name)) < 0)
        return rc;
    }
  }
  return 0;
}

/* Precomputes the facts of the router's clusters and the name hash. */
static int build_known(struct loader *l) {
  struct fr_policy *p = l->p;
  size_t i, size = 8;

  if (l->nclusters == 0)
    return 0;
  p->known = calloc(l->nclusters, sizeof(*p->known));
  p->known_bits = calloc(l->nclusters * (p->nrules > 0 ? p->nrules : 1), 1);
  while (size < l->nclusters * 2)
    size *= 2;
  p->hash = calloc(size, sizeof(*p->hash));
  if (p->known == NULL || p->known_bits == NULL || p->hash == NULL)
    return oom(l);
  p->hash_mask = size - 1;
  for (i = 0; i < l->nclusters; i++) {
    struct known_cluster *k;
    size_t h;

    if (policy_find_known(p, l->clusters[i]) != NULL)
      continue; /* a duplicate: the router's config rejects them anyway */
    k = &p->known[p->nknown];
    if ((k->name = strdup(l->clusters[i])) == NULL)
      return oom(l);
    k->region = (size_t)policy_region_id(p, l->cluster_regions[i]);
    policy_compute_facts(p, k->name, &k->facts, p->known_bits + p->nknown * p->nrules);
    for (h = (size_t)policy_hash(k->name) & p->hash_mask; p->hash[h] != 0;
         h = (h + 1) & p->hash_mask)
      ;
    p->hash[h] = (uint32_t)(p->nknown + 1);
    p->nknown++;
  }
  return 0;
}

static int load_root(struct loader *l, const config_setting_t *root) {
  struct fr_policy *p = l->p;
  size_t i;
  int rc;

  /* Each section is checked even after an error in another, so that a
   * check reports them all; the whole-file checks below need every
   * section loaded, so they run only on a file without errors. */
  rc = check_keys(l, root, root_keys);
  rc = fr_cfg_first(rc, get_enum(l, root, "split", split_values, &p->split));
  rc = fr_cfg_first(rc, get_number(l, root, "max_state_age_ms", 0, 1, MAX_AGE_MS, &p->max_age_ms, NULL));
  rc = fr_cfg_first(rc, get_number(l, root, "latency_ceiling_ms", 0, 1, MAX_CEILING_MS, &p->ceiling_ms, NULL));
  rc = fr_cfg_first(rc, load_weights(l, root));
  rc = fr_cfg_first(rc, load_warm(l, root));
  rc = fr_cfg_first(rc, load_cheaper(l, root));
  rc = fr_cfg_first(rc, load_region_groups(l, root));
  rc = fr_cfg_first(rc, load_spillover(l, root));
  rc = fr_cfg_first(rc, load_overrides(l, root));
  rc = fr_cfg_first(rc, load_rules(l, root));
  if (rc < 0 || l->cfg.count > 0)
    return rc < 0 ? rc : -EINVAL;

  p->region_group = malloc((p->nregions > 0 ? p->nregions : 1) * sizeof(*p->region_group));
  if (p->region_group == NULL)
    return oom(l);
  for (i = 0; i < p->nregions; i++)
    p->region_group[i] = -1;
  for (i = 0; i < p->ngroups; i++) {
    size_t k;
    for (k = 0; k < p->groups[i].nregions; k++)
      p->region_group[p->groups[i].regions[k]] = (int)i;
  }
  if ((rc = check_tier_overlap(l, root)) < 0 || (rc = build_known(l)) < 0 ||
      (rc = check_rules(l, root)) < 0)
    return rc;
  return 0;
}

/* ---- entry points ---- */

/* Reads <path> whole into a NUL-terminated buffer. */
static int read_file(struct loader *l, const char *path, char **text, size_t *len) {
  struct stat st;
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t n = 0;
  int rc;

  if (f == NULL) {
    rc = errno == ENOMEM ? oom(l) : (errno != 0 ? -errno : -EIO);
    if (rc != -ENOMEM)
      snprintf(l->err->msg, sizeof(l->err->msg), "cannot open the policy file: %s",
               strerror(-rc));
    return rc;
  }
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    snprintf(l->err->msg, sizeof(l->err->msg), "not a regular file");
    return -EINVAL;
  }
  if (st.st_size > MAX_FILE_BYTES) {
    fclose(f);
    snprintf(l->err->msg, sizeof(l->err->msg), "the file is larger than %d bytes",
             MAX_FILE_BYTES);
    return -EINVAL;
  }
  buf = malloc((size_t)st.st_size + 1);
  if (buf == NULL) {
    fclose(f);
    return oom(l);
  }
  /* Read what is there now (the file may be changing under a reload; the
   * next change notification reloads again). */
  while (n < (size_t)st.st_size) {
    size_t got = fread(buf + n, 1, (size_t)st.st_size - n, f);
    if (got == 0)
      break;
    n += got;
  }
  rc = ferror(f) ? -EIO : 0;
  fclose(f);
  if (rc < 0) {
    free(buf);
    snprintf(l->err->msg, sizeof(l->err->msg), "cannot read the policy file");
    return rc;
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return 0;
}

static struct fr_policy *policy_new(void) {
  struct fr_policy *p = calloc(1, sizeof(*p));

  if (p == NULL)
    return NULL;
  p->refs = 1;
  p->split = SPLIT_FILL_FIRST;
  p->order = ORDER_TIER_FIRST;
  p->max_age_ms = DEFAULT_MAX_AGE_MS;
  p->w_latency = DEFAULT_W_LATENCY;
  p->w_warm = DEFAULT_W_WARM;
  p->w_capacity = DEFAULT_W_CAPACITY;
  p->w_cost = DEFAULT_W_COST;
  p->latency_ref_ms = DEFAULT_LATENCY_REF_MS;
  p->cost_ref = DEFAULT_COST_REF;
  p->beats_cold = 1;
  p->cold_start_ms = DEFAULT_COLD_START_S * 1000.0;
  p->round_trips = DEFAULT_ROUND_TRIPS;
  return p;
}

/* Parses <text> (<len> bytes, NUL-terminated) into <l->p>. <dir> is where
 * @include looks (NULL: the current directory). */
static int parse_text(struct loader *l, const char *text, size_t len, const char *dir) {
  config_t cf;
  size_t i;
  int rc;

  if (memchr(text, '\0', len) != NULL) {
    snprintf(l->err->msg, sizeof(l->err->msg), "the file contains a NUL byte (not a text file?)");
    return -EINVAL;
  }
  /* The router's regions get the first ids, so "known region" is "id below
   * nrouter_regions". */
  for (i = 0; i < l->nclusters; i++)
    if (add_region(l, l->cluster_regions[i]) < 0)
      return oom(l);
  l->nrouter_regions = l->p->nregions;

  config_init(&cf);
  if (dir != NULL)
    config_set_include_dir(&cf, dir);
  if (config_read_string(&cf, text) != CONFIG_TRUE) {
    const char *file = config_error_file(&cf);
    snprintf(l->err->file, sizeof(l->err->file), "%s", file != NULL ? file : l->path);
    l->err->line = config_error_line(&cf);
    snprintf(l->err->msg, sizeof(l->err->msg), "%s%s",
             config_error_type(&cf) == CONFIG_ERR_FILE_IO ? "cannot read: " : "parse error: ",
             config_error_text(&cf) != NULL ? config_error_text(&cf) : "unknown");
    config_destroy(&cf);
    return -EINVAL;
  }
  rc = load_root(l, config_root_setting(&cf));
  config_destroy(&cf);
  return rc;
}

static int load(const char *path, const char *const *clusters, const char *const *regions,
                struct fr_policy **out, struct fr_policy_error *err, struct fr_policy_warning **warnings,
                size_t *nwarnings, fr_cfg_error_cb on_error, void *arg) {
  struct fr_policy_error scratch;
  struct loader l;
  char *text = NULL, *dir = NULL, *real = NULL;
  size_t len = 0;
  int rc;

  memset(&l, 0, sizeof(l));
  if (err == NULL)
    err = &scratch;
  memset(err, 0, sizeof(*err));
  if (warnings != NULL)
    *warnings = NULL;
  if (nwarnings != NULL)
    *nwarnings = 0;
  l.err = err;
  l.path = path != NULL ? path : "";
  l.cfg = FR_CFGREAD_FOR(err, l.path);
  l.cfg.on_error = on_error;
  l.cfg.on_error_arg = arg;
  if (on_error == NULL) {
    /* No listener: the record tells every error, not just the first. */
    l.cfg.on_error = join_error;
    l.cfg.on_error_arg = &l;
  }
  snprintf(err->file, sizeof(err->file), "%s", l.path);
  if (out == NULL || path == NULL || path[0] == '\0') {
    snprintf(err->msg, sizeof(err->msg), "no policy file given");
    rc = -EINVAL;
    goto fail;
  }
  *out = NULL;
  if (clusters != NULL) {
    l.check_names = 1;
    l.clusters = clusters;
    while (clusters[l.nclusters] != NULL)
      l.nclusters++;
    if (regions == NULL) {
      snprintf(err->msg, sizeof(err->msg), "the clusters' regions were not given");
      rc = -EINVAL;
      goto fail;
    }
    l.cluster_regions = regions;
  }
  if ((l.p = policy_new()) == NULL) {
    rc = oom(&l);
    goto fail;
  }
  if ((rc = read_file(&l, path, &text, &len)) < 0)
    goto fail;
  fr_sha256_hex(text, len, l.p->version);
  real = realpath(path, NULL);
  l.p->source = real != NULL ? real : strdup(path);
  if (l.p->source == NULL) {
    rc = oom(&l);
    goto fail;
  }
  {
    const char *slash = strrchr(l.p->source, '/');
    dir = slash != NULL ? strndup(l.p->source, (size_t)(slash - l.p->source) + 1) : NULL;
  }
  if ((rc = parse_text(&l, text, len, dir)) < 0)
    goto fail;
  free(text);
  free(dir);
  *out = l.p;
  if (warnings != NULL) {
    *warnings = l.warn;
    l.warn = NULL;
  }
  if (nwarnings != NULL)
    *nwarnings = l.nwarn;
  free(l.warn);
  return 0;

fail:
  /* Errors before the tree (an unreadable file, a syntax error: libconfig
   * stops there) and out of memory never went through the reader. */
  if (on_error != NULL && l.cfg.count == 0)
    on_error(arg, err->file, err->line, err->msg);
  errors_joined(&l);
  free(text);
  free(dir);
  free(l.warn);
  policy_free(l.p);
  return rc;
}

int fr_policy_load(const char *path, const char *const *clusters, const char *const *regions,
                   struct fr_policy **out, struct fr_policy_error *err,
                   struct fr_policy_warning **warnings, size_t *nwarnings) {
  return load(path, clusters, regions, out, err, warnings, nwarnings, NULL, NULL);
}

int fr_policy_check(const char *path, const char *const *clusters, const char *const *regions,
                    void (*cb)(void *arg, const char *file, int line, const char *msg), void *arg,
                    struct fr_policy_warning **warnings, size_t *nwarnings) {
  struct fr_policy *p = NULL;
  int rc = load(path, clusters, regions, &p, NULL, warnings, nwarnings, cb, arg);

  fr_policy_unref(p);
  return rc;
}

struct fr_policy *fr_policy_default(void) {
  struct fr_policy_error err;
  struct loader l;

  memset(&l, 0, sizeof(l));
  l.err = &err;
  l.path = "(built-in)";
  l.cfg = FR_CFGREAD_FOR(&err, l.path);
  if ((l.p = policy_new()) == NULL)
    return NULL;
  fr_sha256_hex(builtin_text, sizeof(builtin_text) - 1, l.p->version);
  if ((l.p->source = strdup("(built-in)")) == NULL ||
      parse_text(&l, builtin_text, sizeof(builtin_text) - 1, NULL) < 0) {
    /* The text is fixed and tested: only out-of-memory gets here. */
    free(l.warn);
    policy_free(l.p);
    return NULL;
  }
  free(l.warn);
  return l.p;
}
