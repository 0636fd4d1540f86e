/* turn.c - see fr/turn.h. */
#include "fr/turn.h"

/* One loop at a time is the common case (the router's); another loop
 * simply starts its own count. */
static struct {
  uv_loop_t *loop;
  uint64_t ms;
  unsigned used;
  unsigned budget;   /* 0: FR_TURN_BUDGET */
} turn;

unsigned fr_turn_set_budget(unsigned units) {
  unsigned old = turn.budget ? turn.budget : FR_TURN_BUDGET;

  turn.budget = units;
  return old;
}

static void turn_sync(uv_loop_t *loop) {
  uint64_t now = uv_now(loop);

  if (turn.loop != loop || turn.ms != now) {
    turn.loop = loop;
    turn.ms = now;
    turn.used = 0;
  }
}

int fr_turn_take(uv_loop_t *loop) {
  turn_sync(loop);
  if (turn.used >= (turn.budget ? turn.budget : FR_TURN_BUDGET))
    return 0;
  turn.used++;
  return 1;
}

int fr_turn_take_bytes(uv_loop_t *loop, size_t n) {
  unsigned budget = turn.budget ? turn.budget : FR_TURN_BUDGET;
  size_t units = 1 + n / FR_TURN_BYTES;

  turn_sync(loop);
  if (turn.used > 0 && turn.used + units > budget)
    return 0;
  turn.used = turn.used + units > budget ? budget : turn.used + (unsigned)units;
  return 1;
}
