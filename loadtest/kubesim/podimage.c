/* podimage.c - what kubesim's "images" hold.
 *
 * kubesim pulls no images: an isolated pod's root is the host's root
 * filesystem seen through an overlay (podinit.c). That userland has python3
 * but no `python` or `pip` of a python:3.12 image, so a sandbox running
 * `python -c ...` would get exit 127 where a real pod works. For the images
 * modelled here, each pod gets the image's commands in /usr/local/bin of
 * its root (where the official images keep them), made in the pod's upper
 * layer before its processes start:
 *   python, pytorch, tensorflow (any tag): python, python3 (links to the
 *                 host's python3), pip, pip3 (python3 -m pip, which Debian's
 *                 python3-pip provides)
 *   node:         node, npm, npx (links to the host's)
 * A command the host lacks becomes a script that says so and exits 127.
 * --image-command PATTERN=PATH adds (or replaces) one command for pods of
 * the images matching PATTERN (a repository name, or "*"): a copy of the
 * host file PATH named after its basename (tests use it for stand-ins).
 *
 * An image is matched by its repository's last component: "python:3.12",
 * "python", "docker.io/library/python:3.12-slim@sha256:..." are python.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define LOG_COMP "kubesim.image"
#define MAX_USER_COMMANDS 16
/* A copied command is read into every pod's upper layer: keep it small. */
#define MAX_COPY_BYTES ((off_t)1 << 20)

struct image_cmd {
  const char *name;
  const char *host;        /* the host command it stands for */
  const char *package;     /* the Debian package that provides it */
  const char *script;      /* instead of a link: this shell script body ("%s": host) */
};

/* pip of the official image installs into the image's Python; Debian's is
 * marked externally managed (PEP 668), which the image's is not. Installs
 * land in the pod's own root. */
#define PIP_SCRIPT "PIP_BREAK_SYSTEM_PACKAGES=1 exec /usr/bin/python3 -m pip \"$@\"\n"

static const struct image_cmd python_cmds[] = {
    {"python", "/usr/bin/python3", "python3", NULL},
    {"python3", "/usr/bin/python3", "python3", NULL},
    {"pip", "/usr/bin/pip3", "python3-pip", PIP_SCRIPT},
    {"pip3", "/usr/bin/pip3", "python3-pip", PIP_SCRIPT},
    {NULL, NULL, NULL, NULL},
};

static const struct image_cmd node_cmds[] = {
    {"node", "/usr/bin/node", "nodejs", NULL},
    {"npm", "/usr/bin/npm", "npm", NULL},
    {"npx", "/usr/bin/npx", "npm", NULL},
    {NULL, NULL, NULL, NULL},
};

static const struct {
  const char *repo;
  const struct image_cmd *cmds;
} models[] = {
    {"python", python_cmds},
    /* pytorch/pytorch, nvcr.io/nvidia/pytorch, tensorflow/tensorflow: a
     * Python of their own too. */
    {"pytorch", python_cmds},
    {"tensorflow", python_cmds},
    {"node", node_cmds},
};

struct user_cmd {
  char *pattern;           /* repository name or "*" */
  char *entry;             /* "NAME=copy:PATH" */
};

struct sim_images {
  /* Per model: its "--image-entry" values, "NAME=link:TARGET" or
   * "NAME=script:BODY", NULL-terminated. */
  char **entries[FR_ARRAY_SIZE(models)];
  struct user_cmd user[MAX_USER_COMMANDS];
  size_t nuser;
};

int image_repo(const char *image, char *out, size_t cap) {
  const char *start, *end;
  size_t n;

  if (image == NULL || *image == '\0')
    return -EINVAL;
  end = strchr(image, '@');
  if (end == NULL)
    end = image + strlen(image);
  /* The last path component, then its tag goes. */
  for (start = end; start > image && start[-1] != '/'; start--)
    ;
  n = (size_t)(end - start);
  if (memchr(start, ':', n) != NULL)
    n = (size_t)((const char *)memchr(start, ':', n) - start);
  if (n == 0 || n >= cap)
    return -EINVAL;
  memcpy(out, start, n);
  out[n] = '\0';
  return 0;
}

/* The "--image-entry" value of command <c> of model <repo> (malloc'd, NULL
 * when out of memory); <*missing>: the host lacks it. */
static char *entry_for(const char *repo, const struct image_cmd *c, int *missing) {
  struct fr_buf b;

  fr_buf_init(&b);
  *missing = access(c->host, X_OK) != 0;
  if (*missing)
    fr_buf_printf(&b, "%s=script:echo \"%s: not installed on this kubesim host (kubesim's %s images "
                  "use the host's %s: Debian package %s)\" >&2; exit 127\n",
                  c->name, c->name, repo, c->host, c->package);
  else if (c->script != NULL)
    fr_buf_printf(&b, "%s=script:%s", c->name, c->script);
  else
    fr_buf_printf(&b, "%s=link:%s", c->name, c->host);
  return fr_buf_detach(&b, NULL);
}

/* Checks one --image-command PATTERN=PATH. */
static int add_user_cmd(struct sim_images *im, const char *arg) {
  const char *eq = strchr(arg, '='), *path, *base;
  struct stat st;
  struct fr_buf b;
  size_t i;

  if (eq == NULL || eq == arg || eq[1] != '/') {
    fprintf(stderr, "kubesim: --image-command %s: expected PATTERN=/ABSOLUTE/PATH\n", arg);
    return -1;
  }
  for (i = 0; arg + i < eq; i++) {
    char c = arg[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
          (c == '*' && eq - arg == 1))) {
      fprintf(stderr, "kubesim: --image-command %s: the pattern is a repository name (python) or *\n", arg);
      return -1;
    }
  }
  path = eq + 1;
  base = strrchr(path, '/') + 1;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_COPY_BYTES || *base == '\0' ||
      access(path, R_OK) != 0) {
    fprintf(stderr, "kubesim: --image-command %s: not a readable file of at most 1 MiB\n", arg);
    return -1;
  }
  if (im->nuser == MAX_USER_COMMANDS) {
    fprintf(stderr, "kubesim: --image-command: at most %d\n", MAX_USER_COMMANDS);
    return -1;
  }
  fr_buf_init(&b);
  fr_buf_printf(&b, "%s=copy:%s", base, path);
  im->user[im->nuser].entry = fr_buf_detach(&b, NULL);
  im->user[im->nuser].pattern = strndup(arg, (size_t)(eq - arg));
  if (im->user[im->nuser].entry == NULL || im->user[im->nuser].pattern == NULL) {
    free(im->user[im->nuser].entry);
    free(im->user[im->nuser].pattern);
    fprintf(stderr, "kubesim: out of memory\n");
    return -1;
  }
  im->nuser++;
  return 0;
}

int images_init(struct sim *s, const char *const *user, size_t nuser) {
  struct sim_images *im = calloc(1, sizeof(*im));
  size_t m, i, n;
  int missing;

  if (im == NULL)
    return -1;
  s->images = im;
  for (m = 0; m < FR_ARRAY_SIZE(models); m++) {
    for (n = 0; models[m].cmds[n].name != NULL; n++)
      ;
    im->entries[m] = calloc(n + 1, sizeof(char *));
    if (im->entries[m] == NULL)
      return -1;
    for (i = 0; i < n; i++) {
      im->entries[m][i] = entry_for(models[m].repo, &models[m].cmds[i], &missing);
      if (im->entries[m][i] == NULL)
        return -1;
      if (missing && s->opts.pod_namespaces)
        FR_INFO(LOG_COMP, "%s images: %s is a stub (this host has no %s; Debian package %s)",
                models[m].repo, models[m].cmds[i].name, models[m].cmds[i].host,
                models[m].cmds[i].package);
    }
  }
  for (i = 0; i < nuser; i++)
    if (add_user_cmd(im, user[i]) != 0)
      return -1;
  return 0;
}

void images_free(struct sim *s) {
  struct sim_images *im = s->images;
  size_t m, i;

  if (im == NULL)
    return;
  for (m = 0; m < FR_ARRAY_SIZE(models); m++) {
    for (i = 0; im->entries[m] != NULL && im->entries[m][i] != NULL; i++)
      free(im->entries[m][i]);
    free(im->entries[m]);
  }
  for (i = 0; i < im->nuser; i++) {
    free(im->user[i].pattern);
    free(im->user[i].entry);
  }
  free(im);
  s->images = NULL;
}

size_t image_entries(struct sim *s, const char *image, const char **out, size_t cap) {
  struct sim_images *im = s->images;
  char repo[256];
  size_t m, i, n = 0;

  if (im == NULL || image_repo(image, repo, sizeof(repo)) != 0)
    return 0;
  for (m = 0; m < FR_ARRAY_SIZE(models); m++) {
    if (strcmp(models[m].repo, repo) != 0)
      continue;
    for (i = 0; im->entries[m][i] != NULL && n < cap; i++)
      out[n++] = im->entries[m][i];
  }
  /* After the built-in ones: the pod makes them in order, a later one of a
   * name replacing an earlier one. */
  for (i = 0; i < im->nuser && n < cap; i++)
    if (strcmp(im->user[i].pattern, "*") == 0 || strcmp(im->user[i].pattern, repo) == 0)
      out[n++] = im->user[i].entry;
  return n;
}
