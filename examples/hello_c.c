/* The smallest fabkv client in C: put a key, read it back, delete it (docs/client.md).
 * Usage: fabkv-example-hello-c [HOST:PORT] [PROTOCOL] [PROVIDER] */
#include <stdio.h>
#include <string.h>

#include "client/fabkv.h"

int main(int argc, char** argv) {
  char err[256], buf[1024];
  size_t len = 0;
  int s;
  fabkv_client* c;
  fabkv_options o;
  fabkv_options_init(&o);
  if (argc > 1) o.server = argv[1];   /* default 127.0.0.1:7000 */
  if (argc > 2) o.protocol = argv[2]; /* default herd; any of fabkv_protocols() */
  if (argc > 3) o.provider = argv[3]; /* default auto */
  c = fabkv_connect(&o, err, sizeof err);
  if (c == NULL) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  s = fabkv_put(c, "hello", 5, "world", 5);
  if (s == FABKV_OK) s = fabkv_get(c, "hello", 5, buf, sizeof buf, &len);
  if (s == FABKV_OK) printf("hello -> %.*s (ok)\n", (int)len, buf);
  else fprintf(stderr, "%s\n", fabkv_strerror(s));
  fabkv_del(c, "hello", 5);
  fabkv_close(c);
  return s == FABKV_OK ? 0 : 1;
}
