/* agent.h — private header of fedrouter-agent, the in-sandbox daemon.
 *
 * One process, one thread, one epoll loop (struct agent). Every fd the loop
 * watches is a struct io embedded in its owner (a connection, a process's
 * pipe, the listener, the signalfd); every deadline is a struct timer
 * embedded the same way. Owners are recovered with container_of.
 *
 * Re-entrancy rules this code keeps:
 *  - An object that may be referenced by events later in the same epoll
 *    batch is never freed inside a callback: conn_close() closes the fd and
 *    marks the conn dead; the struct is freed by agent_collect() after the
 *    batch (Redis freeClientAsync). A connection's producer and body
 *    sink (below) are let go the same way: detached at once, freed by
 *    agent_collect().
 *  - Pipelined requests are parsed from agent_collect(), never from inside
 *    the call that finished the previous response.
 *  - A process is freed only when it has ended and no stream is attached.
 */
#ifndef FR_AGENT_H
#define FR_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <jansson.h>

#define AGENT_VERSION "0.1.0"
/* The envd version we claim (GET /version; the router reports it to the E2B
 * SDK as envdVersion). 0.5.7 turns on in the SDK what we implement: stdin
 * on/off (>= 0.3.0), no implicit "user" (>= 0.4.0), CloseStdin (>= 0.5.2),
 * octet-stream uploads (>= 0.5.7); it keeps off what we do not: file
 * metadata as xattrs (0.6.2) and watch options (0.6.3, 0.6.4), which the SDK
 * then refuses client-side with a clear message. */
#define AGENT_ENVD_VERSION "0.5.7"

#define container_of(ptr, type, member) \
  ((type *)((char *)(ptr) - offsetof(type, member)))

struct agent;

/* ---- growable byte buffer (util.c) ---- */
struct buf {
  char *p;
  size_t off; /* consumed prefix */
  size_t len; /* end of data */
  size_t cap;
};
int buf_append(struct buf *b, const void *data, size_t n);
int buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
size_t buf_size(const struct buf *b);
void buf_consume(struct buf *b, size_t n);
void buf_free(struct buf *b);

/* ---- util.c ---- */
size_t b64_encoded_len(size_t n);
void b64_encode(const unsigned char *in, size_t n, char *out); /* NUL-terminates */
/* Decodes standard or URL-safe base64, padding optional. Returns the length
 * or -EINVAL. <out> must hold 3 * (n / 4) + 3 bytes. */
ssize_t b64_decode(const char *in, size_t n, unsigned char *out);
uint64_t now_ms(void);
bool token_equal(const char *a, const char *b);
/* SHA-256 of <n> bytes at <data> into <out>. */
void sha256(const void *data, size_t n, unsigned char out[32]);
/* Compares <n> bytes in time that depends on <n> only. */
bool bytes_equal(const void *a, const void *b, size_t n);
/* Decodes exactly 2 * <n> hex digits of the string <in> (nothing after
 * them) into <out>: 0 or -EINVAL. */
int hex_decode(const char *in, unsigned char *out, size_t n);
/* Decodes <n> bytes of a query value into <out> (NUL-terminated; a %00
 * is a NUL inside): the decoded length, -EINVAL or -ENAMETOOLONG. */
int percent_decode(const char *in, size_t n, char *out, size_t outcap);
/* A path the agent takes: UTF-8 text without NUL bytes (a NUL would cut
 * it short; a protobuf string cannot carry other bytes). */
bool path_valid(const char *p, size_t n);
/* <n> bytes at <p> for a message (NUL-terminated, valid UTF-8, at most
 * <cap> bytes, cut with "..."): bytes that are not text, and '%', shown
 * as %XX, so "/tmp/a%00b" names the path the client sent. */
void path_show(const char *p, size_t n, char *out, size_t cap);
/* Makes the NUL-terminated <s> valid UTF-8 in place (a byte that is not
 * part of a character becomes '?'): a message cut by a fixed buffer, or
 * holding a name from the disk, still goes into a JSON string. */
void text_fix(char *s);
/* fopen(<path>, "r") of a regular file only, never waiting (a FIFO the
 * sandbox put in place of /etc/passwd is not read). NULL otherwise. */
FILE *fopen_regular(const char *path);
int mkdir_p(const char *path, mode_t mode);
void log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- loop (loop.c) ---- */
struct io;
typedef void (*io_cb)(struct agent *a, struct io *io, uint32_t events);
struct io {
  int fd;
  uint32_t events; /* registered epoll mask, 0 = not registered */
  io_cb cb;
};
int io_start(struct agent *a, struct io *io, uint32_t events);
void io_stop(struct agent *a, struct io *io);

struct timer;
typedef void (*timer_cb)(struct agent *a, struct timer *t);
struct timer {
  uint64_t due;
  timer_cb cb;
  struct timer *prev, *next;
  bool active;
};
void timer_start(struct agent *a, struct timer *t, uint64_t delay_ms, timer_cb cb);
void timer_stop(struct agent *a, struct timer *t);

/* ---- http connections (http.c) ---- */
#define HTTP_MAX_HEAD 16384
#define HTTP_IN_CAP (64 * 1024 + HTTP_MAX_HEAD)
#define HTTP_MAX_CONNS 256
#define HTTP_LOW_WATER (256 * 1024)

enum body_mode { BODY_BUFFER, BODY_SINK };

/* http.c moves bytes; what they mean belongs to the services, which the
 * transport knows only through two interfaces (as HAProxy puts an
 * endpoint descriptor between a stream and its mux): a producer fills a
 * streamed response (a file download in files.c, a process's output in
 * proc.c, a WatchDir stream in watch.c), a body sink takes a request body
 * as it arrives (an upload, files.c). A connection holds at most one of
 * each, from conn_set_producer() / conn_set_sink() until its request ends. */
struct producer;
struct producer_ops {
  /* Queues what the connection may take now (http_stream_write while
   * buf_size(&c->out) < HTTP_LOW_WATER; http_stream_end at the end): 1 if
   * anything was produced, 0 when nothing can be now (it calls
   * conn_service() once it can), -1 when it closed the connection. */
  int (*pump)(struct producer *p);
  /* The connection is done with it: its response ended, or (<peer_gone>)
   * the client left. Called once; afterwards it must not touch p->c. It
   * may stay registered until the end of the epoll batch. */
  void (*detach)(struct producer *p, bool peer_gone);
  /* Releases it, from agent_collect() after the batch, once detached. */
  void (*free)(struct producer *p);
};
struct producer {
  const struct producer_ops *ops;
  struct conn *c;        /* while attached */
  struct producer *next; /* agent.dead_producers, once detached */
};

struct body_sink;
struct body_sink_ops {
  /* <n> > 0 more body bytes: 0, or -1 after answering the request (an
   * error: the rest of the body is not read). */
  int (*feed)(struct body_sink *s, const char *data, size_t n);
  /* The whole body arrived: answer the request. */
  void (*finish)(struct body_sink *s);
  /* Releases it (and what a request that did not finish left behind),
   * from agent_collect() after its request ended or its connection
   * closed. */
  void (*free)(struct body_sink *s);
};
struct body_sink {
  const struct body_sink_ops *ops;
  struct conn *c;         /* valid until freed (a closed conn is freed after it) */
  struct body_sink *next; /* agent.dead_sinks, once its request is done */
};

struct req {
  char method[16];
  char target[4096];
  char path[1024];
  const char *query; /* into target, after '?', or "" */
  bool http10;
  bool keep_alive;
  bool chunked;
  bool expect_continue;
  int64_t content_length; /* -1 when absent */
  char content_type[256];
  char content_encoding[64];
  char token[512];
  bool has_token;
  char bearer[512];
  bool has_bearer;
  int route;             /* set by route_head() */
  char rpc[48];          /* Connect method name */
  bool rpc_stream;       /* enveloped (connect+json) request */
  int keepalive_s;       /* Keepalive-Ping-Interval, 0 = absent */
  int64_t timeout_ms;    /* Connect-Timeout-Ms, 0 = absent */
};

struct conn;
struct proc;
struct sub;
struct watch;

struct conn {
  struct io io;
  struct agent *a;
  struct conn *prev, *next;
  bool dead;
  bool want_parse;  /* pipelined input waits for agent_collect() */
  bool close_after; /* close once the response is written */
  bool rd_shut;     /* the client half-closed after its request: write only */
  enum conn_state { C_HEAD, C_BODY, C_HANDLING } state;
  char in[HTTP_IN_CAP];
  size_t in_len;
  struct req req;
  /* body */
  enum body_mode body_mode;
  struct buf body;
  size_t body_limit;
  int64_t body_left; /* Content-Length bodies */
  int chunk_state;   /* chunked decoder */
  uint64_t chunk_left;
  char chunk_line[32];
  size_t chunk_line_len;
  struct body_sink *sink; /* BODY_SINK: takes the body */
  /* response */
  struct buf out;
  bool streaming;   /* chunked response under way */
  bool raw_body;    /* streamed body with a Content-Length: no chunking */
  bool resp_done;   /* last byte of the response is queued */
  struct producer *prod; /* fills the streamed response, or NULL */
  const char *ka_msg;    /* a stream's keepalive message (JSON text), or NULL */
  struct timer timer;    /* head/body/idle deadlines */
  struct timer ka_timer; /* stream keepalive events */
  struct timer dl_timer; /* Connect-Timeout-Ms of a stream */
  int ka_interval_s;
};

void http_accept(struct agent *a, struct io *io, uint32_t events);
/* Queue a complete response. <body> is copied. */
void http_respond(struct conn *c, int status, const char *ctype,
                  const char *extra_headers, const void *body, size_t len);
void http_respond_json(struct conn *c, int status, json_t *j); /* takes <j> */
/* envd's HTTP error shape: {"code":<status>,"message":...} */
void http_error(struct conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int http_stream_begin(struct conn *c, int status, const char *ctype,
                      const char *extra_headers);
/* A streamed body of known <length> (files): written raw. */
int http_body_begin(struct conn *c, int status, const char *ctype,
                    const char *extra_headers, uint64_t length);
int http_stream_write(struct conn *c, const void *data, size_t len);
void http_stream_end(struct conn *c);
/* Write what is queued and run the connection's producer while the socket
 * takes it. Safe from any callback. */
void conn_service(struct conn *c);
void conn_close(struct conn *c);
/* <p> (with its <ops>; owned by the producer's module until its free)
 * fills <c>'s streamed response from now on. */
void conn_set_producer(struct conn *c, struct producer *p, const struct producer_ops *ops);
/* Detaches <c>'s producer now (the caller ends the stream itself: a
 * deadline); no-op without one. */
void conn_drop_producer(struct conn *c);
/* <s> (with its <ops>) takes <c>'s request body from now on. */
void conn_set_sink(struct conn *c, struct body_sink *s, const struct body_sink_ops *ops);

/* ---- routing and RPC handlers (rpc.c) ---- */
/* Called once the head is parsed: decide how to take the body. */
void route_head(struct conn *c);
/* Called when the whole body has been read (BODY_BUFFER) or sunk. */
void route_body_done(struct conn *c);
/* GET /_fr/held: what the agent holds by its own count (connections,
 * output queued and allocated, bodies, process output rings, stdin
 * backlogs, watcher events), and "total_bytes". */
json_t *agent_held_json(const struct agent *a);
/* Connect error code -> HTTP status (Connect protocol table). */
int connect_http_status(const char *code);
void rpc_error(struct conn *c, bool streaming, const char *code,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Append one Connect envelope (flags, 4-byte big-endian length, JSON). */
int envelope_write(struct conn *c, uint8_t flags, json_t *msg); /* takes msg */

/* ---- files (files.c) ---- */
/* GET /files: answers, or streams the file as <c>'s producer. */
void files_get(struct conn *c, const char *path);
/* POST /files: answers an error, or makes an upload <c>'s body sink. */
int upload_begin(struct conn *c, const char *path);
/* An upload's temporary file is UPLOAD_TMP_PREFIX "<nonce>-<n>", with "-r"
 * when it replaces a file: true for such a <name> of this agent's (a
 * directory entry's name), *<replaces> set. watch.c reports an upload as
 * envd's in-place write shows, not by these names. */
#define UPLOAD_TMP_PREFIX ".fr-upload-"
bool upload_temp_name(const struct agent *a, const char *name, bool *replaces);
/* Filesystem service unary RPCs. */
json_t *fs_entry_json(const char *path, int *err);
void fs_rpc(struct conn *c, const char *method, json_t *req);
/* The absolute path in <field> of <req>, or NULL after answering
 * invalid_argument (naming the path: one with a NUL byte, not absolute,
 * too long) as a unary or, with <streaming>, a stream's error. */
const char *rpc_path(struct conn *c, json_t *req, const char *field, bool streaming);

/* ---- multipart/form-data bodies (multipart.c) ---- */
#define MP_HEAD_MAX 8192          /* one part's headers */
#define MP_NAME_MAX 4096          /* a part's filename, NUL included */
#define MP_BUF (64 * 1024 + 16384) /* one read of the body plus a carry */

struct mp_parser {
  char delim[96]; /* "\r\n--" boundary */
  size_t dlen;
  int state;
  char buf[MP_BUF];
  size_t len;
};

/* Where a parser hands the parts. Each returns 0, or nonzero to stop (the
 * callee has answered the request). <filename> is NULL for a part without
 * one; part_data gets only the bytes of the part begun last, never 0. */
struct mp_sink {
  int (*part_begin)(void *arg, const char *filename);
  int (*part_data)(void *arg, const char *data, size_t n);
  int (*part_end)(void *arg);
};

/* Reads the boundary of <content_type> ("multipart/form-data;
 * boundary=..."). 0, -ENOENT (no boundary) or -EINVAL (not 1-70 chars). */
int mp_init(struct mp_parser *p, const char *content_type);
/* Feeds <n> body bytes, calling <sink> with <arg>. 0; -1 when a sink call
 * stopped it; -EINVAL for a malformed body, with a message in *<err>. */
int mp_feed(struct mp_parser *p, const char *data, size_t n, const struct mp_sink *sink, void *arg,
            const char **err);
/* The closing delimiter has been read. */
bool mp_done(const struct mp_parser *p);

/* ---- directory watchers (watch.c) ---- */
/* WatchDir: validates <req> (borrowed), begins the stream with its start
 * message and attaches the watcher to <c>; 0, or -1 when the error was
 * answered. The caller then starts the stream's timers and services <c>. */
int watch_stream_start(struct conn *c, json_t *req);
/* CreateWatcher, GetWatcherEvents, RemoveWatcher (unary). */
void watch_rpc(struct conn *c, const char *method, json_t *req);
/* Frees the polling watchers closed during the epoll batch (a stream's
 * watcher goes with its connection, through its producer). */
void watch_collect(struct agent *a);
/* For GET /_fr/held: stream watchers not reading because their client
 * lags, and the bytes of events the kernel holds for all watchers. */
void watch_held(const struct agent *a, size_t *paused, size_t *kernel_bytes);
void watch_close_all(struct agent *a);

/* ---- processes (proc.c) ---- */
struct chunk {
  struct chunk *next;
  uint64_t off; /* stream offset of data[0] */
  uint8_t kind; /* 1 stdout, 2 stderr, 3 pty */
  size_t len, cap;
  char data[];
};

struct sub {
  struct producer prod; /* the stream's connection is prod.c */
  struct proc *p;
  struct conn *c;       /* = prod.c while attached */
  struct sub *next;
  uint64_t cursor;
  bool kill_on_disconnect;
  bool is_start; /* Start stream: its deadline kills the process */
  bool end_sent;
  /* Connect without follow: the stream ends at this offset (the output
   * produced at attach), with the end event only if the process had
   * ended then. UINT64_MAX: follow (live output, then the end). */
  uint64_t until;
  bool end_at_attach;
};

struct pipe_io {
  struct io io;
  struct proc *p;
  uint8_t kind;
  bool eof;
};

struct proc {
  struct agent *a;
  struct proc *prev, *next;
  uint64_t id;
  pid_t pid;
  char *tag;
  json_t *config; /* ProcessConfig as the client sent it (cmd,args,envs,cwd) */
  bool pty;
  struct pipe_io out, err; /* err unused for a pty */
  struct io in;            /* stdin pipe (or the pty master), fd -1 if none */
  struct buf in_buf;       /* stdin bytes the pipe did not take yet */
  bool in_close_pending;
  bool stdin_closed;
  size_t stdin_undelivered; /* bytes of SendInput dropped: queued when stdin closed (exit, EPIPE) */
  bool paused; /* not reading: a lagging stream would lose bytes */
  /* output ring */
  struct chunk *head, *tail;
  uint64_t out_end;     /* offset after the last byte ever read */
  uint64_t dropped;     /* bytes dropped from the front */
  size_t buffered;      /* bytes held in chunks (capacity) */
  struct sub *subs;
  /* lifetime */
  bool ended;
  int status; /* waitpid status */
  char end_error[128];
  bool timed_out;
  bool deadline_from_header; /* the timeout came from Connect-Timeout-Ms */
  uint64_t ended_at;
  struct timer timeout; /* timeoutMs extension */
  struct timer expire;  /* forget a finished process */
  char marker[64];      /* FR_AGENT_PROC value */
};

struct start_opts {
  const char *cmd;
  char **argv;     /* NULL-terminated, argv[0] = cmd */
  char **envp;     /* built by the caller */
  const char *cwd;
  bool pty;
  unsigned short cols, rows;
  bool stdin_open;
  const char *tag;
  uint64_t timeout_ms;
  json_t *config; /* borrowed; the proc keeps a reference */
};

int proc_start(struct agent *a, const struct start_opts *o, struct proc **out,
               char *err, size_t errlen);
struct proc *proc_find_pid(struct agent *a, pid_t pid);
struct proc *proc_find_tag(struct agent *a, const char *tag);
/* Makes a stream of <p> from <from> (UINT64_MAX: only new output) the
 * producer of <c>; with <follow> false it ends with the output produced
 * so far (sub.until). NULL when out of memory. */
struct sub *proc_attach(struct proc *p, struct conn *c, uint64_t from, bool follow);
int proc_signal(struct proc *p, int sig);
void proc_kill_all(struct proc *p); /* group + marked escapees, SIGKILL */
int proc_write_stdin(struct proc *p, const void *data, size_t n);
int proc_close_stdin(struct proc *p);
int proc_resize(struct proc *p, unsigned short cols, unsigned short rows);
void proc_reap(struct agent *a);
void proc_shutdown_all(struct agent *a);
void proc_maybe_free(struct proc *p);
void proc_set_timeout(struct proc *p, uint64_t ms);
void proc_free_all(struct agent *a);

/* ---- the agent ---- */
struct agent {
  int epfd;
  struct timer *timers;
  struct io listener;
  struct io sigio;
  struct timer accept_timer; /* listener paused after EMFILE */
  struct rlimit nofile;      /* the limit children get back */
  struct conn *conns;
  int nconns;
  struct proc *procs;
  int nprocs_running;
  int nprocs_done;
  uint64_t next_proc_id;
  uint64_t body_timeout_ms; /* a request body that stalls this long: 408 (--body-timeout) */
  int max_procs;          /* running at once (--max-procs) */
  size_t max_buffer;      /* per process */
  size_t max_total;       /* all processes */
  size_t buffered_total;
  char *token;            /* NULL until the first /init */
  /* Who may /init (rpc.c): with <init_hash_set>, a caller whose token's
   * SHA-256 is <init_sha256> (FR_AGENT_INIT_SHA256 of the pod, made by the
   * router); without, nobody unless <open_init> (--allow-open-init: the
   * first caller, then whoever has the access token). */
  unsigned char init_sha256[32];
  bool init_hash_set;
  bool open_init;
  char **init_env;        /* "K=V", NULL-terminated, from /init */
  size_t init_env_n;
  json_t *init_envs;      /* GET /envs: /init's envVars without its secretNames */
  char *default_workdir;
  char *default_user;
  char nonce[17];
  char home[1024];        /* agent_home() cache */
  /* PID 1 wrapper */
  pid_t main_pid;
  bool main_exited;
  int main_status;
  bool stop;
  bool trace; /* FR_AGENT_TRACE=1: log connection state changes */
  int exit_code;
  struct conn *dead_conns;
  struct producer *dead_producers; /* detached, freed by agent_collect() */
  struct body_sink *dead_sinks;    /* done, freed by agent_collect() */
  struct watch *watches;      /* live watchers, streams and polling */
  int nwatches;
  struct watch *dead_watches; /* freed by agent_collect() */
  uint64_t next_watch_id;
  uint64_t next_upload_id;    /* names uploads' temporary files (files.c) */
  size_t watch_queued;        /* events waiting in all polling watchers */
};

void agent_collect(struct agent *a); /* deferred frees and parses */
const char *agent_home(struct agent *a);

#endif
