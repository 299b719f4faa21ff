/* The C interface compiles as C (this file is built by the C compiler) and fails cleanly
 * against a server that is not there. */
#include <stdio.h>
#include <string.h>

#include "client/fabkv.h"

#define CHECK(cond)                                              \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                  \
    }                                                            \
  } while (0)

int main(void) {
  char err[256];
  char buf[16];
  size_t vlen = 0;
  int s;
  fabkv_client* c;
  fabkv_options o;
  size_t i;

  /* Nothing listens on port 1. */
  fabkv_options_init(&o);
  o.server = "127.0.0.1:1";
  o.provider = "tcp";
  o.timeout_ms = 1000;
  err[0] = '\0';
  c = fabkv_connect(&o, err, sizeof err);
  CHECK(c == NULL);
  CHECK(strlen(err) > 0);
  printf("fabkv_connect: %s\n", err);

  /* A malformed address, a tiny error buffer (truncated, still terminated), no buffer. */
  memset(err, 'x', sizeof err);
  o.server = "no port here";
  o.provider = NULL;
  o.secret = "secret";
  o.timeout_ms = 500;
  c = fabkv_connect(&o, err, 8);
  CHECK(c == NULL);
  CHECK(strlen(err) == 7);
  CHECK(fabkv_connect(&o, NULL, 0) == NULL);

  /* Every protocol of the registry is reachable by name; an unknown one is refused before
   * anything is opened, with the list. */
  CHECK(strcmp(fabkv_protocol_name(0), "herd") == 0);
  for (i = 0; fabkv_protocol_name(i) != NULL; ++i)
    CHECK(strstr(fabkv_protocols(), fabkv_protocol_name(i)) != NULL);
  CHECK(i >= 4);
  CHECK(strstr(fabkv_protocols(), "server-reply") != NULL);
  {
    fabkv_options z = {0}; /* zero = defaults, as fabkv_options_init */
    z.server = "127.0.0.1:1";
    z.protocol = "carrier-pigeon";
    c = fabkv_connect(&z, err, sizeof err);
    CHECK(c == NULL);
    CHECK(strstr(err, "carrier-pigeon") != NULL);
    CHECK(strstr(err, "pilaf-vo") != NULL);
    printf("fabkv_connect: %s\n", err);
  }
  {
    /* The poll fields came later, at the end: zero is still the default, and a bad mode is
     * refused at connect with a reason. */
    fabkv_options z = {0};
    CHECK(z.poll == NULL && z.poll_spin_us == 0 && z.poll_sleep_us == 0);
    z.server = "127.0.0.1:1";
    z.poll = "sometimes";
    c = fabkv_connect(&z, err, sizeof err);
    CHECK(c == NULL);
    CHECK(strstr(err, "sometimes") != NULL);
    z.poll = "adaptive";
    z.poll_spin_us = 20;
    z.timeout_ms = 500;
    c = fabkv_connect(&z, err, sizeof err);
    CHECK(c == NULL); /* nothing listens on port 1 */
    CHECK(strstr(err, "adaptive") == NULL);
  }

  /* Every call on a NULL client fails cleanly. */
  CHECK(fabkv_get(NULL, "k", 1, buf, sizeof buf, &vlen) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_put(NULL, "k", 1, "v", 1) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_del(NULL, "k", 1) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_max_value(NULL) == 0);
  fabkv_close(NULL);

  for (s = FABKV_OK; s <= FABKV_CONTENDED; ++s)
    CHECK(strcmp(fabkv_strerror(s), "unknown status") != 0);
  CHECK(strcmp(fabkv_strerror(-1), "unknown status") == 0);
  CHECK(strcmp(fabkv_strerror(FABKV_NOT_FOUND), "not found") == 0);
  return 0;
}
