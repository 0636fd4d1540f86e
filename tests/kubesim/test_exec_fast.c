/* test_exec_fast.c - the exec fast path: which commands it takes, and that it
 * produces what the real programs produce; and which exec subprotocol an
 * upgrade offering some gets. */
#include "exec.h"

#include <check.h>
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fr/buf.h"

extern char **environ;

#define ARGV(...) ((char *const[]){__VA_ARGS__, NULL})

/* Commands the fast path takes. */
static char *const *const fast_cases[] = {
    ARGV("echo"),
    ARGV("echo", "hi"),
    ARGV("echo", "hello", "world"),
    ARGV("echo", ""),
    ARGV("echo", "a", "", "b"),
    ARGV("echo", "-n", "no newline"),
    ARGV("echo", "-n", "-n", "twice"),
    ARGV("echo", "-nE", "combined"),
    ARGV("echo", "-e", "no backslash"),
    ARGV("echo", "-E", "a\\nb"),
    ARGV("echo", "a\\nb"),
    ARGV("echo", "-x", "not an option"),
    ARGV("echo", "-", "dash"),
    ARGV("echo", "hi", "-n"),
    ARGV("echo", "--help", "more"),
    ARGV("echo", "$HOME", "*", "'q'"),
    ARGV("/bin/echo", "abs"),
    ARGV("/usr/bin/echo", "usr"),
    ARGV("true"),
    ARGV("true", "ignored"),
    ARGV("/bin/true"),
    ARGV("false"),
    ARGV("/usr/bin/false", "x"),
    ARGV("sh", "-c", "exit 0"),
    ARGV("sh", "-c", "exit 3"),
    ARGV("sh", "-c", "exit 255"),
    ARGV("sh", "-c", "  exit\t7  "),
    ARGV("sh", "-c", "exit"),
    ARGV("/bin/sh", "-c", "exit 42"),
    ARGV("/usr/bin/sh", "-c", "exit 1"),
    ARGV("sh", "-c", "echo"),
    ARGV("sh", "-c", "echo hi"),
    ARGV("sh", "-c", "echo  spaced \t out  "),
    ARGV("sh", "-c", "echo -n hi"),
    ARGV("sh", "-c", "echo a=b c%d e!f x,y"),
    ARGV("sh", "-c", "echo caf\xc3\xa9"),
    ARGV("sh", "-c", "echo hi", "name", "arg1"),
    /* the wrappers fedrouter puts around every exec */
    ARGV("timeout", "-s", "KILL", "60", "echo", "wrapped"),
    ARGV("timeout", "--signal=KILL", "5", "sh", "-c", "exit 4"),
    ARGV("timeout", "10", "false"),
    ARGV("env", "A=b", "C=d", "echo", "env"),
    ARGV("timeout", "-s", "KILL", "60", "env", "X=1", "sh", "-c", "echo both"),
};

/* Commands it must leave to a real process. */
static char *const *const slow_cases[] = {
    ARGV("cat"),
    ARGV("ls", "-l"),
    ARGV("./echo", "hi"),
    ARGV("/opt/bin/echo", "hi"),
    ARGV("/usr/local/bin/true"),
    ARGV(""),
    ARGV("echo", "--help"),
    ARGV("echo", "--version"),
    ARGV("true", "--help"),
    ARGV("false", "--version"),
    ARGV("echo", "-e", "a\\nb"),
    ARGV("echo", "-ne", "tab\\t"),
    ARGV("sh"),
    ARGV("sh", "-c"),
    ARGV("sh", "-x", "exit 1"),
    ARGV("sh", "script.sh"),
    ARGV("bash", "-c", "exit 1"),
    ARGV("sh", "-c", ""),
    ARGV("sh", "-c", "   "),
    ARGV("sh", "-c", "ls"),
    ARGV("sh", "-c", "echohi"),
    ARGV("sh", "-c", "exit 256"),
    ARGV("sh", "-c", "exit -1"),
    ARGV("sh", "-c", "exit 03"),
    ARGV("sh", "-c", "exit 1 2"),
    ARGV("sh", "-c", "exit x"),
    ARGV("sh", "-c", "exit $?"),
    ARGV("sh", "-c", "echo $HOME"),
    ARGV("sh", "-c", "echo 'hi'"),
    ARGV("sh", "-c", "echo \"hi\""),
    ARGV("sh", "-c", "echo `id`"),
    ARGV("sh", "-c", "echo a\\b"),
    ARGV("sh", "-c", "echo a; exit 1"),
    ARGV("sh", "-c", "echo a | cat"),
    ARGV("sh", "-c", "echo a && true"),
    ARGV("sh", "-c", "echo a &"),
    ARGV("sh", "-c", "echo a > f"),
    ARGV("sh", "-c", "echo a < f"),
    ARGV("sh", "-c", "echo *"),
    ARGV("sh", "-c", "echo ?"),
    ARGV("sh", "-c", "echo [ab]"),
    ARGV("sh", "-c", "echo {a,b}"),
    ARGV("sh", "-c", "echo (a)"),
    ARGV("sh", "-c", "echo ~"),
    ARGV("sh", "-c", "echo a # comment"),
    ARGV("sh", "-c", "echo a\nexit 1"),
    ARGV("sh", "-c", "echo a\rb"),
    ARGV("sh", "-c", "echo -e hi"),
    ARGV("sh", "-c", "echo -n -n hi"),
    ARGV("sh", "-c", "echo hi -n"),
    ARGV("sh", "-c", "exit 1; echo"),
    ARGV("timeout", "0", "echo", "disabled timer"),
    ARGV("timeout", "-s", "KILL", "60"),
    ARGV("timeout", "1.5", "true"),
    ARGV("env", "-C", "/tmp", "echo", "cwd"),
    ARGV("env", "-i", "true"),
    ARGV("env", "A=b"),
    ARGV("timeout", "-s", "KILL", "60", "cat"),
};

/* ---- helpers ---- */

/* Runs <argv> for real (PATH lookup like execvp), collecting stdout and the
 * exit code. */
static void run_real(char *const *argv, struct fr_buf *out, int *code) {
  posix_spawn_file_actions_t fa;
  int fds[2], status;
  char buf[4096];
  ssize_t n;
  pid_t pid;

  ck_assert_int_eq(pipe(fds), 0);
  ck_assert_int_eq(posix_spawn_file_actions_init(&fa), 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  ck_assert_int_eq(posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  while ((n = read(fds[0], buf, sizeof(buf))) > 0)
    ck_assert_int_eq(fr_buf_append(out, buf, (size_t)n), 0);
  close(fds[0]);
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status));
  *code = WEXITSTATUS(status);
}

static void expect_output(char *const *argv, const char *want, int want_code) {
  struct fr_buf out;
  int code = -1;

  fr_buf_init(&out);
  ck_assert_int_eq(sim_exec_fast_output(argv, &out, &code), 0);
  ck_assert_uint_eq(out.len, strlen(want));
  ck_assert_mem_eq(out.len ? out.data : "", want, out.len);
  ck_assert_int_eq(code, want_code);
  fr_buf_free(&out);
}

/* ---- classification ---- */

START_TEST(is_fast_simple_commands_true) {
  ck_assert_msg(sim_exec_is_fast(fast_cases[_i]), "case %d (%s %s) should be fast",
                _i, fast_cases[_i][0], fast_cases[_i][1] ? fast_cases[_i][1] : "");
}
END_TEST

START_TEST(is_fast_anything_else_false) {
  ck_assert_msg(!sim_exec_is_fast(slow_cases[_i]), "case %d (%s %s %s) should not be fast",
                _i, slow_cases[_i][0], slow_cases[_i][1] ? slow_cases[_i][1] : "",
                slow_cases[_i][1] && slow_cases[_i][2] ? slow_cases[_i][2] : "");
}
END_TEST

START_TEST(is_fast_null_or_empty_argv_false) {
  char *empty[] = {NULL};

  ck_assert_int_eq(sim_exec_is_fast(NULL), 0);
  ck_assert_int_eq(sim_exec_is_fast(empty), 0);
}
END_TEST

START_TEST(is_fast_long_script_false) {
  char script[2048];
  char *argv[] = {"sh", "-c", script, NULL};

  memcpy(script, "echo ", 5);
  memset(script + 5, 'a', sizeof(script) - 6);
  script[sizeof(script) - 1] = '\0';
  ck_assert_int_eq(sim_exec_is_fast(argv), 0);
}
END_TEST

/* ---- output ---- */

START_TEST(fast_output_echo_joins_args_with_newline) {
  expect_output(ARGV("echo", "hello", "world"), "hello world\n", 0);
  expect_output(ARGV("echo"), "\n", 0);
  expect_output(ARGV("echo", "a", "", "b"), "a  b\n", 0);
}
END_TEST

START_TEST(fast_output_echo_dash_n_no_newline) {
  expect_output(ARGV("echo", "-n", "x"), "x", 0);
  expect_output(ARGV("echo", "-n", "-n", "x"), "x", 0);
  expect_output(ARGV("echo", "-n"), "", 0);
}
END_TEST

START_TEST(fast_output_echo_non_options_printed_verbatim) {
  expect_output(ARGV("echo", "-x", "y"), "-x y\n", 0);
  expect_output(ARGV("echo", "a", "-n"), "a -n\n", 0);
  expect_output(ARGV("echo", "a\\nb"), "a\\nb\n", 0);
  expect_output(ARGV("echo", "--help", "x"), "--help x\n", 0);
}
END_TEST

START_TEST(fast_output_true_false_exit_codes) {
  expect_output(ARGV("true"), "", 0);
  expect_output(ARGV("false"), "", 1);
  expect_output(ARGV("/bin/false", "x"), "", 1);
}
END_TEST

START_TEST(fast_output_sh_exit_n_exit_code) {
  expect_output(ARGV("sh", "-c", "exit 3"), "", 3);
  expect_output(ARGV("sh", "-c", "exit 255"), "", 255);
  expect_output(ARGV("sh", "-c", "exit"), "", 0);
}
END_TEST

START_TEST(fast_output_sh_echo_splits_words) {
  expect_output(ARGV("sh", "-c", "echo  a \t b "), "a b\n", 0);
  expect_output(ARGV("sh", "-c", "echo -n a"), "a", 0);
  expect_output(ARGV("sh", "-c", "echo"), "\n", 0);
}
END_TEST

START_TEST(fast_output_rejected_command_einval_output_untouched) {
  struct fr_buf out;
  int code = 77;

  fr_buf_init(&out);
  ck_assert_int_eq(sim_exec_fast_output(ARGV("cat"), &out, &code), -EINVAL);
  ck_assert_int_eq(sim_exec_fast_output(ARGV("echo", "-e", "a\\tb"), &out, &code),
                   -EINVAL);
  ck_assert_uint_eq(out.len, 0);
  ck_assert_int_eq(code, 77);
  fr_buf_free(&out);
}
END_TEST

START_TEST(fast_output_matches_real_program) {
  char *const *argv = fast_cases[_i];
  struct fr_buf fast, real;
  int fast_code = -1, real_code = -2;

  fr_buf_init(&fast);
  fr_buf_init(&real);
  ck_assert_int_eq(sim_exec_fast_output(argv, &fast, &fast_code), 0);
  run_real(argv, &real, &real_code);
  ck_assert_msg(fast.len == real.len &&
                (fast.len == 0 || memcmp(fast.data, real.data, fast.len) == 0),
                "case %d (%s %s): fast \"%s\" != real \"%s\"", _i, argv[0],
                argv[1] ? argv[1] : "", fast.data ? fast.data : "",
                real.data ? real.data : "");
  ck_assert_int_eq(fast_code, real_code);
  fr_buf_free(&fast);
  fr_buf_free(&real);
}
END_TEST

START_TEST(protocol_v5_anywhere_wins) {
  /* A 1.30+ API server serves any request offering v5 itself. */
  ck_assert_str_eq(sim_exec_protocol("v5.channel.k8s.io"), "v5.channel.k8s.io");
  ck_assert_str_eq(sim_exec_protocol("v4.channel.k8s.io, v5.channel.k8s.io"), "v5.channel.k8s.io");
  ck_assert_str_eq(sim_exec_protocol("v5.channel.k8s.io,v4.channel.k8s.io"), "v5.channel.k8s.io");
}
END_TEST

START_TEST(protocol_first_offered_spoken_one) {
  /* The kubelet's wsstream takes the client's first protocol it knows. */
  ck_assert_str_eq(sim_exec_protocol("v4.channel.k8s.io"), "v4.channel.k8s.io");
  ck_assert_str_eq(sim_exec_protocol("channel.k8s.io"), "channel.k8s.io");
  ck_assert_str_eq(sim_exec_protocol("base64.channel.k8s.io, v4.channel.k8s.io"), "base64.channel.k8s.io");
  ck_assert_str_eq(sim_exec_protocol("x.k8s.io,  v4.base64.channel.k8s.io ,channel.k8s.io"),
                   "v4.base64.channel.k8s.io");
}
END_TEST

START_TEST(protocol_none_offered_is_the_binary_default) {
  ck_assert_str_eq(sim_exec_protocol(NULL), "");
  ck_assert_str_eq(sim_exec_protocol(""), "");
  ck_assert_str_eq(sim_exec_protocol("  "), "");
}
END_TEST

START_TEST(protocol_unknown_or_partial_names_null) {
  ck_assert_ptr_null(sim_exec_protocol("v3.channel.k8s.io"));
  ck_assert_ptr_null(sim_exec_protocol("xv4.channel.k8s.io, v4.channel.k8s.iox"));
  ck_assert_ptr_null(sim_exec_protocol("SPDY/3.1"));
  ck_assert_ptr_null(sim_exec_protocol(","));
}
END_TEST

static Suite *exec_fast_suite(void) {
  Suite *s = suite_create("exec_fast");
  TCase *tc;
  int nfast = (int)(sizeof(fast_cases) / sizeof(fast_cases[0]));
  int nslow = (int)(sizeof(slow_cases) / sizeof(slow_cases[0]));

  tc = tcase_create("classify");
  tcase_add_loop_test(tc, is_fast_simple_commands_true, 0, nfast);
  tcase_add_loop_test(tc, is_fast_anything_else_false, 0, nslow);
  tcase_add_test(tc, is_fast_null_or_empty_argv_false);
  tcase_add_test(tc, is_fast_long_script_false);
  suite_add_tcase(s, tc);

  tc = tcase_create("output");
  tcase_add_test(tc, fast_output_echo_joins_args_with_newline);
  tcase_add_test(tc, fast_output_echo_dash_n_no_newline);
  tcase_add_test(tc, fast_output_echo_non_options_printed_verbatim);
  tcase_add_test(tc, fast_output_true_false_exit_codes);
  tcase_add_test(tc, fast_output_sh_exit_n_exit_code);
  tcase_add_test(tc, fast_output_sh_echo_splits_words);
  tcase_add_test(tc, fast_output_rejected_command_einval_output_untouched);
  suite_add_tcase(s, tc);

  tc = tcase_create("protocol");
  tcase_add_test(tc, protocol_v5_anywhere_wins);
  tcase_add_test(tc, protocol_first_offered_spoken_one);
  tcase_add_test(tc, protocol_none_offered_is_the_binary_default);
  tcase_add_test(tc, protocol_unknown_or_partial_names_null);
  suite_add_tcase(s, tc);

  /* The model against the programs it replaces (coreutils, dash). */
  tc = tcase_create("real");
  tcase_add_loop_test(tc, fast_output_matches_real_program, 0, nfast);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(exec_fast_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
