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

int fr_turn_take(uv_loop_t *loop) {
  uint64_t now = uv_now(loop);

  if (turn.loop != loop || turn.ms != now) {
    turn.loop = loop;
    turn.ms = now;
    turn.used = 0;
  }
  if (turn.used >= (turn.budget ? turn.budget : FR_TURN_BUDGET))
    return 0;
  turn.used++;
  return 1;
}
