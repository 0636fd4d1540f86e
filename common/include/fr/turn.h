/* fr/turn.h - a loop-wide budget of ready sockets handled per millisecond.
 *
 * One poll phase hands libuv every socket that is ready (up to 48 x 1,024
 * events before it looks at anything else), and a burst of a few thousand
 * exec streams made single loop turns of 140 ms. Socket handlers that can
 * wait (exec streams, curl's sockets) take a unit of the budget first;
 * past FR_TURN_BUDGET units in one millisecond of loop time they stop
 * their poll and re-arm it from the next loop turn (an idle handle), so
 * whatever else is ready (a /healthz, a small request) is served between
 * them. The budget is per loop and resets when the loop's clock moves,
 * which libuv updates after every epoll_wait.
 */
#ifndef FR_TURN_H
#define FR_TURN_H

#include <uv.h>

/* Units per millisecond of loop time: ~128 k socket events a second, far
 * above what a router handles (an exec takes ~6); a turn of 128 of them
 * lasts a few milliseconds. */
#define FR_TURN_BUDGET 128

/* 1: go ahead (a unit was taken); 0: over budget, wait for a later turn. */
int fr_turn_take(uv_loop_t *loop);
/* Bytes of a stream handed on per unit: a stream that delivers <n> bytes
 * takes 1 + n / FR_TURN_BYTES units, so one reading of the loop's clock
 * carries at most about FR_TURN_BUDGET x 2 KiB (256 KiB) of streamed data
 * in all - what the router parses, re-encodes and sends in a few ms -
 * however many streams and however fast their peers. libuv reads the clock
 * twice a loop turn (before the timers, after polling), so one turn hands
 * on at most twice that. */
#define FR_TURN_BYTES 2048
/* fr_turn_take() for <n> bytes of a stream: 1 go ahead (units taken);
 * 0 over budget (nothing taken): the caller pauses the stream and resumes
 * it from a later loop turn. One piece is never refused when the budget
 * is untouched in this turn, so a piece larger than the whole budget still
 * moves. */
int fr_turn_take_bytes(uv_loop_t *loop, size_t n);
/* Units per millisecond from now on (0: FR_TURN_BUDGET); returns the old. */
unsigned fr_turn_set_budget(unsigned units);

#endif
