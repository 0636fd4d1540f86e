/* files.c — envd's /files (download and upload as byte streams) and the
 * filesystem.Filesystem Connect service (Stat, MakeDir, Move, ListDir,
 * Remove).
 *
 * Paths are absolute (relative ones are refused: the agent has no notion of
 * "the user's home" a caller could rely on). Downloads read 64 KiB at a time
 * only while the socket takes them; uploads write each piece of the body as
 * it arrives, so memory stays flat at any file size. A multipart upload is
 * parsed as a stream (multipart.c): only a delimiter's length of bytes is
 * ever carried from one read to the next.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define FILE_CHUNK 65536
#define LIST_MAX 100000

static int status_for(int err) {
  switch (err) {
  case ENOENT: return 404;
  case EACCES: case EPERM: case EROFS: return 403;
  case ENOSPC: case EDQUOT: return 507;
  case ENOTDIR: case EISDIR: case ENAMETOOLONG: case EINVAL: return 400;
  default: return 500;
  }
}

/* ---- download ---- */

void files_get(struct conn *c, const char *path) {
  if (path[0] != '/') {
    http_error(c, 400, "path must be absolute: %s", path);
    return;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      http_error(c, 404, "path not found: %s", path);
    else
      http_error(c, status_for(e), "open %s: %s", path, strerror(e));
    return;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    http_error(c, 400, "not a regular file: %s", path);
    return;
  }
  c->file_fd = fd;
  c->file_left = (uint64_t)st.st_size;
  http_body_begin(c, 200, "application/octet-stream", NULL, (uint64_t)st.st_size);
  if (c->file_left == 0) {
    close(fd);
    c->file_fd = -1;
    http_stream_end(c);
  }
  conn_service(c);
}

int files_pump(struct conn *c) {
  char tmp[FILE_CHUNK];
  size_t want = c->file_left < sizeof(tmp) ? (size_t)c->file_left : sizeof(tmp);
  ssize_t n;
  do {
    n = read(c->file_fd, tmp, want);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    /* The file shrank under us: the promised length cannot be kept, and
     * only a close tells the client the body is short. */
    log_msg("download cut short: %s", n == 0 ? "file shrank" : strerror(errno));
    conn_close(c);
    return -1;
  }
  http_stream_write(c, tmp, (size_t)n);
  c->file_left -= (uint64_t)n;
  if (c->file_left == 0) {
    close(c->file_fd);
    c->file_fd = -1;
    http_stream_end(c);
  }
  return 1;
}

/* ---- upload ---- */

struct upload {
  bool multipart;
  struct mp_parser mp;
  char qpath[4096];
  bool have_qpath;
  int fd;
  char cur[4096];
  json_t *results;
};

void upload_free(struct upload *up) {
  if (up == NULL)
    return;
  if (up->fd >= 0)
    close(up->fd);
  json_decref(up->results);
  free(up);
}

static int open_target(struct upload *up, const char *path, char *msg, size_t cap) {
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s", path);
  char *d = dirname(dir);
  int rc = mkdir_p(d, 0755);
  if (rc != 0) {
    snprintf(msg, cap, "create directory %.400s: %s", d, strerror(-rc));
    return rc == -ENOTDIR ? -ENOTDIR : rc;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) {
    rc = -errno;
    snprintf(msg, cap, "open %.400s: %s", path, strerror(errno));
    return rc;
  }
  up->fd = fd;
  snprintf(up->cur, sizeof(up->cur), "%s", path);
  return 0;
}

static void fail(struct conn *c, int err, const char *msg) {
  upload_free(c->up);
  c->up = NULL;
  http_error(c, status_for(-err), "%s", msg);
}

static int write_all(struct conn *c, const char *d, size_t n) {
  struct upload *up = c->up;
  if (up->fd < 0)
    return 0; /* a part without a filename: skipped */
  while (n > 0) {
    ssize_t w = write(up->fd, d, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      char msg[512];
      int e = errno;
      snprintf(msg, sizeof(msg), "write %.400s: %s", up->cur, strerror(e));
      fail(c, -e, msg);
      return -1;
    }
    d += w;
    n -= (size_t)w;
  }
  return 0;
}

static void add_result(struct upload *up) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s", up->cur);
  json_array_append_new(up->results, json_pack("{s:s,s:s,s:s}", "name", basename(tmp),
                                               "type", "file", "path", up->cur));
}

static int close_target(struct conn *c) {
  struct upload *up = c->up;
  if (up->fd < 0)
    return 0;
  int rc = close(up->fd);
  up->fd = -1;
  if (rc != 0) {
    char msg[512];
    int e = errno;
    snprintf(msg, sizeof(msg), "close %.400s: %s", up->cur, strerror(e));
    fail(c, -e, msg);
    return -1;
  }
  add_result(up);
  return 0;
}

int upload_begin(struct conn *c, const char *path) {
  struct upload *up = calloc(1, sizeof(*up));
  if (up == NULL) {
    http_error(c, 503, "out of memory");
    return -ENOMEM;
  }
  up->fd = -1;
  up->results = json_array();
  if (path) {
    if (path[0] != '/') {
      upload_free(up);
      http_error(c, 400, "path must be absolute: %s", path);
      return -EINVAL;
    }
    snprintf(up->qpath, sizeof(up->qpath), "%s", path);
    up->have_qpath = true;
  }
  const char *ct = c->req.content_type;
  if (strncasecmp(ct, "multipart/form-data", 19) == 0) {
    int rc = mp_init(&up->mp, ct);
    if (rc != 0) {
      upload_free(up);
      http_error(c, 400, rc == -ENOENT ? "multipart body without a boundary" : "bad multipart boundary");
      return -EINVAL;
    }
    up->multipart = true;
  } else {
    if (!up->have_qpath) {
      upload_free(up);
      http_error(c, 400, "path parameter required for a raw upload");
      return -EINVAL;
    }
    char msg[512];
    int rc = open_target(up, up->qpath, msg, sizeof(msg));
    if (rc != 0) {
      upload_free(up);
      http_error(c, status_for(-rc), "%s", msg);
      return rc;
    }
  }
  c->up = up;
  c->body_mode = BODY_SINK;
  return 0;
}

/* The multipart parser's sink: each part with a filename goes to the
 * query's path, or to its own absolute filename without one; a part
 * without a filename is skipped. */
static int part_begin(void *arg, const char *filename) {
  struct conn *c = arg;
  struct upload *up = c->up;
  char msg[512];

  if (filename == NULL)
    return 0;
  const char *target = up->have_qpath ? up->qpath : filename;
  if (target[0] != '/') {
    snprintf(msg, sizeof(msg), "path must be absolute: %.400s", target);
    fail(c, -EINVAL, msg);
    return -1;
  }
  int rc = open_target(up, target, msg, sizeof(msg));
  if (rc != 0) {
    fail(c, rc, msg);
    return -1;
  }
  return 0;
}

static int part_data(void *arg, const char *data, size_t n) {
  return write_all(arg, data, n);
}

static int part_end(void *arg) {
  return close_target(arg);
}

static const struct mp_sink part_sink = {part_begin, part_data, part_end};

int upload_feed(struct conn *c, const char *data, size_t n) {
  struct upload *up = c->up;
  const char *err = NULL;
  if (up == NULL)
    return -1;
  if (!up->multipart)
    return write_all(c, data, n);
  int rc = mp_feed(&up->mp, data, n, &part_sink, c, &err);
  if (rc == -EINVAL)
    fail(c, -EINVAL, err);
  return rc == 0 ? 0 : -1;
}

void upload_finish(struct conn *c) {
  struct upload *up = c->up;
  if (up == NULL) {
    http_error(c, 500, "upload state lost");
    return;
  }
  if (!up->multipart) {
    if (close_target(c) != 0)
      return;
  } else if (!mp_done(&up->mp)) {
    fail(c, -EINVAL, "multipart body ended before its closing delimiter");
    return;
  }
  if (json_array_size(up->results) == 0) {
    fail(c, -EINVAL, "no file part in the upload");
    return;
  }
  json_t *res = json_incref(up->results);
  upload_free(up);
  c->up = NULL;
  http_respond_json(c, 200, res);
}

/* ---- filesystem.Filesystem ---- */

struct names {
  uid_t uid;
  gid_t gid;
  char user[64], group[64];
  bool have_u, have_g;
};

/* Name of an id from /etc/passwd or /etc/group (no NSS: static binary). */
static void id_name(const char *file, unsigned id, char *out, size_t cap) {
  snprintf(out, cap, "%u", id);
  FILE *f = fopen(file, "re");
  if (f == NULL)
    return;
  char line[1024];
  while (fgets(line, sizeof(line), f)) {
    char *name = line, *p1 = strchr(line, ':');
    if (p1 == NULL)
      continue;
    char *p2 = strchr(p1 + 1, ':');
    if (p2 == NULL)
      continue;
    char *end;
    unsigned long v = strtoul(p2 + 1, &end, 10);
    if (end != p2 + 1 && *end == ':' && v == id) {
      *p1 = '\0';
      snprintf(out, cap, "%.63s", name);
      break;
    }
  }
  fclose(f);
}

static void perm_string(mode_t m, char out[11]) {
  out[0] = S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'L' : S_ISFIFO(m) ? 'p' : S_ISSOCK(m) ? 'S'
         : S_ISCHR(m) ? 'c' : S_ISBLK(m) ? 'D' : '-';
  const char *rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++)
    out[i + 1] = (m & (1u << (8 - i))) ? rwx[i] : '-';
  out[10] = '\0';
}

static json_t *entry_json(const char *path, const struct stat *st, struct names *nm) {
  char tmp[4096], perms[11], mtime[64], size[32];
  snprintf(tmp, sizeof(tmp), "%s", path);
  const char *type = S_ISDIR(st->st_mode) ? "FILE_TYPE_DIRECTORY"
                     : S_ISREG(st->st_mode) ? "FILE_TYPE_FILE"
                     : S_ISLNK(st->st_mode) ? "FILE_TYPE_SYMLINK" : "FILE_TYPE_UNSPECIFIED";
  perm_string(st->st_mode, perms);
  struct tm tm;
  gmtime_r(&st->st_mtim.tv_sec, &tm);
  size_t ml = strftime(mtime, sizeof(mtime), "%Y-%m-%dT%H:%M:%S", &tm);
  if (st->st_mtim.tv_nsec)
    snprintf(mtime + ml, sizeof(mtime) - ml, ".%09ldZ", (long)st->st_mtim.tv_nsec);
  else
    snprintf(mtime + ml, sizeof(mtime) - ml, "Z");
  if (!nm->have_u || nm->uid != st->st_uid) {
    nm->uid = st->st_uid;
    id_name("/etc/passwd", st->st_uid, nm->user, sizeof(nm->user));
    nm->have_u = true;
  }
  if (!nm->have_g || nm->gid != st->st_gid) {
    nm->gid = st->st_gid;
    id_name("/etc/group", st->st_gid, nm->group, sizeof(nm->group));
    nm->have_g = true;
  }
  /* int64 is a string in protobuf JSON */
  snprintf(size, sizeof(size), "%lld", (long long)st->st_size);
  json_t *e = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:s,s:s}", "name",
                        strcmp(path, "/") == 0 ? "/" : basename(tmp), "type", type, "path", path,
                        "size", size, "mode", (int)(st->st_mode & 07777), "permissions", perms,
                        "owner", nm->user, "group", nm->group, "modifiedTime", mtime);
  if (e && S_ISLNK(st->st_mode)) {
    char target[4096];
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n >= 0) {
      target[n] = '\0';
      json_object_set_new(e, "symlinkTarget", json_string(target));
    }
  }
  return e;
}

json_t *fs_entry_json(const char *path, int *err) {
  struct stat st;
  struct names nm = {0};
  if (lstat(path, &st) != 0) {
    *err = -errno;
    return NULL;
  }
  *err = 0;
  return entry_json(path, &st, &nm);
}

static const char *err_code(int err) {
  switch (err) {
  case -ENOENT: return "not_found";
  case -EACCES: case -EPERM: case -EROFS: return "permission_denied";
  case -EEXIST: case -ENOTEMPTY: return "already_exists";
  case -ENOSPC: return "resource_exhausted";
  case -ENOTDIR: case -EISDIR: case -EINVAL: case -ENAMETOOLONG: return "invalid_argument";
  case -EXDEV: return "failed_precondition";
  default: return "internal";
  }
}

static void fs_fail(struct conn *c, int err, const char *what, const char *path) {
  if (err == -ENOENT)
    rpc_error(c, false, "not_found", "path not found: %s", path);
  else
    rpc_error(c, false, err_code(err), "%s %s: %s", what, path, strerror(-err));
}

static const char *abs_path(struct conn *c, json_t *req, const char *field) {
  json_t *j = json_object_get(req, field);
  const char *p = json_string_value(j);
  if (p == NULL || strlen(p) != json_string_length(j) || p[0] != '/' || strlen(p) >= 4096) {
    rpc_error(c, false, "invalid_argument", "%s must be an absolute path", field);
    return NULL;
  }
  return p;
}

static int list_dir(const char *dir, unsigned depth, unsigned level, json_t *arr,
                    struct names *nm) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return -errno;
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s%s%s", dir,
                         dir[strlen(dir) - 1] == '/' ? "" : "/", de->d_name) >= sizeof(path))
      continue;
    struct stat st;
    if (lstat(path, &st) != 0)
      continue; /* removed while we listed */
    if (json_array_size(arr) >= LIST_MAX) {
      rc = -E2BIG;
      break;
    }
    json_array_append_new(arr, entry_json(path, &st, nm));
    if (S_ISDIR(st.st_mode) && level + 1 < depth) {
      rc = list_dir(path, depth, level + 1, arr, nm);
      if (rc == -EACCES)
        rc = 0; /* an unreadable subdirectory is listed, not entered */
      if (rc != 0)
        break;
    }
  }
  closedir(d);
  return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  int rc = flag == FTW_DP ? rmdir(path) : unlink(path);
  return rc != 0 && errno != ENOENT ? -errno : 0;
}

void fs_rpc(struct conn *c, const char *method, json_t *req) {
  int err;
  if (strcmp(method, "Stat") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    json_t *e = fs_entry_json(path, &err);
    if (e == NULL)
      fs_fail(c, err, "stat", path);
    else
      http_respond_json(c, 200, json_pack("{s:o}", "entry", e));
  } else if (strcmp(method, "MakeDir") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    struct stat st;
    if (stat(path, &st) == 0) {
      if (S_ISDIR(st.st_mode))
        rpc_error(c, false, "already_exists", "directory already exists: %s", path);
      else
        rpc_error(c, false, "invalid_argument", "path already exists but is not a directory: %s", path);
      return;
    }
    err = mkdir_p(path, 0755);
    json_t *e = err == 0 ? fs_entry_json(path, &err) : NULL;
    if (e == NULL)
      fs_fail(c, err, "mkdir", path);
    else
      http_respond_json(c, 200, json_pack("{s:o}", "entry", e));
  } else if (strcmp(method, "Move") == 0) {
    const char *src = abs_path(c, req, "source");
    if (src == NULL)
      return;
    const char *dst = abs_path(c, req, "destination");
    if (dst == NULL)
      return;
    struct stat st;
    if (lstat(src, &st) != 0) {
      fs_fail(c, -errno, "move", src);
      return;
    }
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", dst);
    err = mkdir_p(dirname(dir), 0755);
    if (err == 0 && rename(src, dst) != 0)
      err = -errno;
    json_t *e = err == 0 ? fs_entry_json(dst, &err) : NULL;
    if (e == NULL)
      fs_fail(c, err, "move to", dst);
    else
      http_respond_json(c, 200, json_pack("{s:o}", "entry", e));
  } else if (strcmp(method, "ListDir") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    json_t *dj = json_object_get(req, "depth");
    json_int_t depth = json_is_integer(dj) ? json_integer_value(dj) : 1;
    if (dj && !json_is_integer(dj) && !json_is_null(dj)) {
      rpc_error(c, false, "invalid_argument", "depth must be an integer");
      return;
    }
    if (depth < 1)
      depth = 1;
    if (depth > 64)
      depth = 64;
    struct stat st;
    if (stat(path, &st) != 0) {
      fs_fail(c, -errno, "list", path);
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      rpc_error(c, false, "invalid_argument", "path is not a directory: %s", path);
      return;
    }
    json_t *arr = json_array();
    struct names nm = {0};
    err = list_dir(path, (unsigned)depth, 0, arr, &nm);
    if (err == -E2BIG) {
      json_decref(arr);
      /* Not worth retrying, unlike the other resource_exhausted answers. */
      rpc_error(c, false, "out_of_range", "more than %d entries under %s", LIST_MAX, path);
    } else if (err != 0) {
      json_decref(arr);
      fs_fail(c, err, "list", path);
    } else {
      http_respond_json(c, 200, json_pack("{s:o}", "entries", arr));
    }
  } else if (strcmp(method, "Remove") == 0) {
    const char *path = abs_path(c, req, "path");
    if (path == NULL)
      return;
    struct stat st;
    if (lstat(path, &st) != 0) {
      fs_fail(c, -errno, "remove", path);
      return;
    }
    if (strcmp(path, "/") == 0) {
      rpc_error(c, false, "invalid_argument", "refusing to remove /");
      return;
    }
    err = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
    if (err != 0)
      fs_fail(c, err < 0 ? err : -EIO, "remove", path);
    else
      http_respond_json(c, 200, json_object());
  } else {
    rpc_error(c, false, "unimplemented", "filesystem.Filesystem/%s is not implemented by fedrouter-agent", method);
  }
}
