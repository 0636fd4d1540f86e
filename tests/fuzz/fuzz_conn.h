/* fuzz_conn.h - feeding one fuzz input to a real fr_http_server as one
 * client connection, for the harnesses that go through the HTTP core.
 *
 * The server runs on the harness's uv loop, listening on 127.0.0.1:0. The
 * client is a plain non-blocking socket on the same thread: connect() to a
 * listening loopback socket completes in the kernel, so no second thread
 * is needed. fuzz_conn_feed() then alternates non-blocking loop turns with
 * client I/O (write the input, read and discard what comes back) until the
 * server has closed the connection or nothing has moved for QUIET_TURNS
 * turns with the whole input written (the server waits for more bytes, or
 * a handler answers later); then it resets the connection (SO_LINGER 0: no
 * TIME_WAIT, so thousands of runs a second never exhaust ports) and turns
 * the loop until the server has closed its side. So every input ends with
 * the server back to no connections, and whatever it left running
 * (timers of deferred answers) is the harness's to settle.
 *
 * Header-only, for tests/fuzz only.
 */
#ifndef FR_FUZZ_CONN_H
#define FR_FUZZ_CONN_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "fr/http.h"

/* Loop turns without progress after which the exchange counts as over. A
 * zero-delay timer (the server's "resume" of pipelined input) runs one turn
 * after it was started, so a few turns cover every synchronous chain. */
#define QUIET_TURNS 4
/* Safety bound on one exchange; far above what any input needs. */
#define MAX_TURNS 200000

struct fuzz_conn_stats {
  size_t sent;      /* input bytes the server's socket took */
  size_t received;  /* response bytes */
  int server_closed;
};

/* Sends <data> to <srv> (listening on 127.0.0.1:<port>, on <loop>) and
 * waits as described above. <progress> (may be NULL) is read every turn;
 * a change counts as progress (a handler count, say). Aborts when the
 * server never lets go of the connection: that is a finding too. */
static void fuzz_conn_feed(uv_loop_t *loop, struct fr_http_server *srv, int port, const uint8_t *data,
                           size_t size, const unsigned *progress, struct fuzz_conn_stats *st) {
  struct sockaddr_in a;
  struct linger lg = {1, 0};
  char buf[65536];
  unsigned last = progress ? *progress : 0;
  int fd, seen = 0, quiet = 0, turns = 0;

  memset(st, 0, sizeof(*st));
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    perror("fuzz: socket");
    abort();
  }
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* Non-blocking from the start: libFuzzer's timers send signals, and a
   * blocking connect() they interrupt (EINTR) cannot simply be retried.
   * The kernel completes a loopback handshake against the listen backlog
   * without the server's help, so waiting for it here is safe. */
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    struct pollfd pfd = {fd, POLLOUT, 0};
    int e = 0;
    socklen_t elen = sizeof(e);

    if (errno != EINPROGRESS && errno != EINTR) {
      perror("fuzz: connect");
      abort();
    }
    while (poll(&pfd, 1, 10000) < 0 && errno == EINTR)
      ;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0 || e != 0 || !(pfd.revents & POLLOUT)) {
      fprintf(stderr, "fuzz: connect: %s\n", strerror(e ? e : ETIMEDOUT));
      abort();
    }
  }

  for (;;) {
    int moved = 0;
    ssize_t n;

    uv_run(loop, UV_RUN_NOWAIT);
    if (fr_http_server_nconns(srv) > 0)
      seen = 1;
    if (st->sent < size) {
      n = send(fd, data + st->sent, size - st->sent, MSG_NOSIGNAL);
      if (n > 0) {
        st->sent += (size_t)n;
        moved = 1;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        st->server_closed = 1; /* reset by the server */
      }
    }
    for (;;) {
      n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        st->received += (size_t)n;
        moved = 1;
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
        st->server_closed = 1;
      break;
    }
    if (progress != NULL && *progress != last) {
      last = *progress;
      moved = 1;
    }
    if (st->server_closed || ++turns > MAX_TURNS)
      break;
    if (moved || !seen || st->sent < size)
      quiet = 0;
    else if (++quiet >= QUIET_TURNS)
      break;
  }

  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
  for (turns = 0; fr_http_server_nconns(srv) > 0 || (!seen && !st->server_closed); turns++) {
    uv_run(loop, UV_RUN_NOWAIT);
    if (fr_http_server_nconns(srv) > 0)
      seen = 1;
    if (turns > MAX_TURNS) {
      fprintf(stderr, "fuzz: the server kept a reset connection open (%zu conns)\n",
              fr_http_server_nconns(srv));
      abort();
    }
  }
  /* The closed connection's handles close on the next turn. */
  uv_run(loop, UV_RUN_NOWAIT);
}

#endif
