/* The C interface compiles as C (this file is built by the C compiler) and fails cleanly
 * against a server that is not there; the cluster calls open, refuse bad lists and place keys
 * without any server (python/tests/test_cluster.py runs them against real ones). */
#include <stdio.h>
#include <string.h>

#include "client/fabkv.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

#define NKEYS 3000

/* key i as text into buf; its length */
static size_t key_of(char* buf, size_t cap, int i) {
  return (size_t)snprintf(buf, cap, "key-%d", i);
}

static fabkv_cluster* open_list(const char* servers, char* err, size_t errlen) {
  fabkv_cluster_options o = {0};
  o.servers = servers;
  return fabkv_cluster_open(&o, err, errlen);
}

/* Keys placed on each server of c (counts[0..n-1]). */
static void count_keys(fabkv_cluster* c, size_t* counts, size_t n) {
  char k[32];
  size_t i, len, s;
  for (i = 0; i < n; ++i) counts[i] = 0;
  for (i = 0; i < NKEYS; ++i) {
    len = key_of(k, sizeof k, (int)i);
    s = fabkv_cluster_server_for_key(c, k, len);
    if (s < n) ++counts[s];
  }
}

static int cluster_checks(void) {
  char err[256], k[32], buf[16];
  size_t counts[3], vlen = 0, i, len, a, b;
  int s;
  fabkv_cluster* c;
  fabkv_cluster* d;
  fabkv_cluster_options o;
  FILE* f;
  const char* file = "c_api_test_cluster.toml";

  /* Refused before anything is opened, each with its reason. */
  CHECK(fabkv_cluster_open(NULL, err, sizeof err) == NULL);
  CHECK(strstr(err, "at least one server") != NULL);
  CHECK(open_list("127.0.0.1:7000,no-port-here", err, sizeof err) == NULL);
  CHECK(strstr(err, "no-port-here") != NULL && strstr(err, "HOST:PORT") != NULL);
  CHECK(open_list("127.0.0.1:7000:0", err, sizeof err) == NULL);
  CHECK(strstr(err, "weight") != NULL);
  CHECK(open_list("[::1:7000", err, sizeof err) == NULL);
  CHECK(strstr(err, "']'") != NULL);
  CHECK(open_list("127.0.0.1:7000 a,127.0.0.1:7001 a", err, sizeof err) == NULL);
  CHECK(strstr(err, "two servers named 'a'") != NULL);
  printf("fabkv_cluster_open: %s\n", err);
  memset(&o, 0, sizeof o);
  o.servers = "127.0.0.1:7000,127.0.0.1:7001";
  o.replicas = 3;
  CHECK(fabkv_cluster_open(&o, err, sizeof err) == NULL);
  CHECK(strstr(err, "replicas") != NULL);
  o.replicas = 2;
  o.protocol = "carrier-pigeon";
  CHECK(fabkv_cluster_open(&o, err, sizeof err) == NULL);
  CHECK(strstr(err, "carrier-pigeon") != NULL && strstr(err, "pilaf-vo") != NULL);
  o.protocol = "seq-rpc"; /* a sequencer holds no keys */
  CHECK(fabkv_cluster_open(&o, err, sizeof err) == NULL);
  CHECK(strstr(err, "seq-rpc") != NULL);
  o.protocol = "pilaf";
  c = fabkv_cluster_open(&o, err, sizeof err);
  CHECK(c != NULL && err[0] == '\0');
  fabkv_cluster_close(c);

  /* Names: the list's, else the ketama name ("host" for memcached's port 11211). No server
   * listens on ports 1 to 6: placement needs none. */
  c = open_list("127.0.0.1:1 x, 127.0.0.1:2 y ,127.0.0.1:3 z", err, sizeof err);
  CHECK(c != NULL);
  CHECK(fabkv_cluster_size(c) == 3);
  CHECK(strcmp(fabkv_cluster_server_name(c, 1), "y") == 0);
  CHECK(fabkv_cluster_server_name(c, 3) == NULL);
  CHECK(strcmp(fabkv_cluster_server_error(c, 0), "") == 0);
  d = open_list("127.0.0.1:11211,127.0.0.1:4:2", err, sizeof err);
  CHECK(d != NULL);
  CHECK(strcmp(fabkv_cluster_server_name(d, 0), "127.0.0.1") == 0);
  CHECK(strcmp(fabkv_cluster_server_name(d, 1), "127.0.0.1:4") == 0);
  fabkv_cluster_close(d);

  /* The ring hashes names, not addresses: the same names elsewhere place every key alike. */
  d = open_list("127.0.0.1:4 x,127.0.0.1:5 y,127.0.0.1:6 z", err, sizeof err);
  CHECK(d != NULL);
  for (i = 0; i < NKEYS; ++i) {
    len = key_of(k, sizeof k, (int)i);
    a = fabkv_cluster_server_for_key(c, k, len);
    CHECK(a < 3);
    CHECK(a == fabkv_cluster_server_for_key(d, k, len));
  }
  fabkv_cluster_close(d);
  /* Equal weights: about a third each. */
  count_keys(c, counts, 3);
  for (i = 0; i < 3; ++i) CHECK(counts[i] > NKEYS / 5 && counts[i] < NKEYS / 2);
  /* Consistent hashing: without y, only y's keys move. */
  d = open_list("127.0.0.1:1 x,127.0.0.1:3 z", err, sizeof err);
  CHECK(d != NULL);
  for (i = 0; i < NKEYS; ++i) {
    len = key_of(k, sizeof k, (int)i);
    a = fabkv_cluster_server_for_key(c, k, len);
    b = fabkv_cluster_server_for_key(d, k, len);
    if (a != 1) CHECK(b == (a == 0 ? 0u : 1u));
  }
  fabkv_cluster_close(d);
  /* Weights 1/2/1: the middle one about half. */
  d = open_list("127.0.0.1:1 x,127.0.0.1:2:2 y,127.0.0.1:3 z", err, sizeof err);
  CHECK(d != NULL);
  count_keys(d, counts, 3);
  CHECK(counts[1] > NKEYS * 2 / 5 && counts[1] < NKEYS * 3 / 5);
  fabkv_cluster_close(d);

  /* NULL arguments fail cleanly. */
  CHECK(fabkv_cluster_get(NULL, "k", 1, buf, sizeof buf, &vlen) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_cluster_get(c, "k", 1, buf, sizeof buf, NULL) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_cluster_put(NULL, "k", 1, "v", 1) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_cluster_put(c, "k", 1, NULL, 1) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_cluster_del(NULL, "k", 1) == FABKV_INVALID_ARGUMENT);
  CHECK(fabkv_cluster_server_for_key(NULL, "k", 1) == FABKV_NO_SERVER);
  CHECK(fabkv_cluster_server_for_key(c, NULL, 1) == FABKV_NO_SERVER);
  CHECK(fabkv_cluster_size(NULL) == 0);
  CHECK(fabkv_cluster_server_name(NULL, 0) == NULL);
  CHECK(fabkv_cluster_server_error(NULL, 0) == NULL);
  fabkv_cluster_close(c);
  fabkv_cluster_close(NULL);

  /* A server nobody listens on fails its key, with the reason kept; at the failure limit it
   * leaves the ring, and with no server left no key has one. */
  memset(&o, 0, sizeof o);
  o.servers = "127.0.0.1:1";
  o.provider = "tcp";
  o.timeout_ms = 1000;
  o.server_failure_limit = 1;
  o.retry_timeout_ms = 60000;
  c = fabkv_cluster_open(&o, err, sizeof err);
  CHECK(c != NULL);
  CHECK(fabkv_cluster_server_for_key(c, "k", 1) == 0);
  s = fabkv_cluster_put(c, "k", 1, "v", 1);
  CHECK(s == FABKV_SERVER_GONE || s == FABKV_TIMEOUT);
  CHECK(strlen(fabkv_cluster_server_error(c, 0)) > 0);
  printf("fabkv_cluster_put: %s: %s\n", fabkv_strerror(s), fabkv_cluster_server_error(c, 0));
  CHECK(fabkv_cluster_server_for_key(c, "k", 1) == FABKV_NO_SERVER);
  CHECK(fabkv_cluster_get(c, "k", 1, buf, sizeof buf, &vlen) == FABKV_SERVER_GONE);
  fabkv_cluster_close(c);
  /* auto_eject_hosts < 0: it stays on the ring, its keys fail. */
  o.auto_eject_hosts = -1;
  c = fabkv_cluster_open(&o, err, sizeof err);
  CHECK(c != NULL);
  s = fabkv_cluster_del(c, "k", 1);
  CHECK(s == FABKV_SERVER_GONE || s == FABKV_TIMEOUT);
  CHECK(fabkv_cluster_server_for_key(c, "k", 1) == 0);
  CHECK(fabkv_cluster_get(c, "k", 1, buf, sizeof buf, &vlen) == FABKV_SERVER_GONE);
  fabkv_cluster_close(c);

  /* A cluster file (docs/cluster.md); its errors name the file and the line. */
  f = fopen(file, "w");
  CHECK(f != NULL);
  fputs(
      "servers = [\"127.0.0.1:1 x\", \"127.0.0.1:2:2 y\", \"127.0.0.1:3 z\"]\n"
      "replicas = 2\ntimeout_ms = 500\n",
      f);
  fclose(f);
  c = fabkv_cluster_open_file(file, err, sizeof err);
  CHECK(c != NULL);
  CHECK(fabkv_cluster_size(c) == 3 && strcmp(fabkv_cluster_server_name(c, 2), "z") == 0);
  d = open_list("127.0.0.1:1 x,127.0.0.1:2:2 y,127.0.0.1:3 z", err, sizeof err);
  for (i = 0; i < 100; ++i) {
    len = key_of(k, sizeof k, (int)i);
    CHECK(fabkv_cluster_server_for_key(c, k, len) == fabkv_cluster_server_for_key(d, k, len));
  }
  fabkv_cluster_close(d);
  fabkv_cluster_close(c);
  f = fopen(file, "w");
  CHECK(f != NULL);
  fputs("servers = [\"127.0.0.1:1\"]\nreplicas = 1\ncolour = \"blue\"\n", f);
  fclose(f);
  CHECK(fabkv_cluster_open_file(file, err, sizeof err) == NULL);
  CHECK(strstr(err, file) != NULL && strstr(err, ":3:") != NULL && strstr(err, "colour") != NULL);
  printf("fabkv_cluster_open_file: %s\n", err);
  remove(file);
  CHECK(fabkv_cluster_open_file(file, err, sizeof err) == NULL);
  CHECK(strstr(err, file) != NULL);
  /* A list entry with nothing before its name (read as the empty address). */
  f = fopen(file, "w");
  CHECK(f != NULL);
  fputs("servers = [\" 127.0.0.1:1\"]\n", f);
  fclose(f);
  CHECK(fabkv_cluster_open_file(file, err, sizeof err) == NULL);
  CHECK(strstr(err, "HOST:PORT") != NULL);
  remove(file);
  CHECK(fabkv_cluster_open_file(NULL, err, sizeof err) == NULL);
  return 0;
}

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
  return cluster_checks();
}
