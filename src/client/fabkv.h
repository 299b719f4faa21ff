/* fabkv's C interface: the C++ client library (client/client.h) behind an opaque handle, for
 * C programs and other languages' foreign-function interfaces. docs/client.md has examples.
 *
 * Every function returns a fabkv_status (0 = FABKV_OK) except fabkv_connect, which returns
 * NULL on failure and writes the reason into err. Nothing here blocks longer than the
 * timeout given to fabkv_connect. A fabkv_client is not thread-safe: use it from one thread
 * at a time (one client per thread). */
#ifndef FABKV_H
#define FABKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fabkv_status {
  FABKV_OK = 0,
  FABKV_NOT_FOUND = 1,         /* get/del: no such key */
  FABKV_TOO_LARGE = 2,         /* key > 250 bytes or value > the server's max_value */
  FABKV_NO_SPACE = 3,          /* the server's store is full */
  FABKV_VERSION_MISMATCH = 4,  /* reserved for a conditional put */
  FABKV_INVALID_KEY = 5,       /* empty key */
  FABKV_SERVER_GONE = 6,       /* the server went away: reconnect */
  FABKV_TIMEOUT = 7,           /* no answer within the timeout */
  FABKV_MALFORMED = 8,         /* the server could not parse the request */
  FABKV_ERROR = 9,             /* any other failure */
  FABKV_BUFFER_TOO_SMALL = 10, /* fabkv_get: the value does not fit; *vlen has its size */
  FABKV_INVALID_ARGUMENT = 11, /* a NULL client or pointer */
  FABKV_CONTENDED = 12         /* a get by READs: the key kept changing under 64; retry later */
} fabkv_status;

typedef struct fabkv_client fabkv_client;

/* How to connect. Zero or NULL in any field means its default, so both
 *   fabkv_options o; fabkv_options_init(&o); o.server = "10.0.0.1:7000";
 * and
 *   fabkv_options o = {0}; o.server = "10.0.0.1:7000";
 * work. */
typedef struct fabkv_options {
  const char* server;     /* control channel "HOST:PORT" of fabkv-server; NULL: "127.0.0.1:7000" */
  const char* protocol;   /* access protocol, one of fabkv_protocols(); NULL: the first of them */
  const char* provider;   /* "auto", "shm", "tcp", "verbs"; NULL: "auto" (the server's) */
  const char* transport;  /* requests by "write" or "send"; NULL: the protocol's (or, where it
                             lets the server choose, the server's --transport) */
  const char* secret;     /* control-channel shared secret; NULL: none */
  int timeout_ms;         /* bound on every request; <= 0: 2000 */
  int connect_timeout_ms; /* bound on connecting; <= 0: timeout_ms if set, else 5000 */
  /* Added after 0.1 (new fields only ever go at the end, zero = default): */
  const char* poll;  /* how blocking calls wait: "spin" or "adaptive"; NULL: "spin" */
  int poll_spin_us;  /* adaptive: polling time before blocking; <= 0: 100 */
  int poll_sleep_us; /* adaptive without a wait object (shm): longest sleep; <= 0: 1000 */
} fabkv_options;

/* Sets every field to its default (all zero/NULL). */
void fabkv_options_init(fabkv_options* o);

/* Connects as `o` says (NULL: all defaults). On failure returns NULL and, if err is not
 * NULL, writes a NUL-terminated reason of at most errlen bytes (an unknown protocol's reason
 * lists the known ones). */
fabkv_client* fabkv_connect(const fabkv_options* o, char* err, size_t errlen);

/* The protocols this library speaks, comma-separated (proto/registry.h): a static string. */
const char* fabkv_protocols(void);
/* The i-th of them (0-based), NULL past the last: a static string. */
const char* fabkv_protocol_name(size_t i);

/* Copies the value of key into buf (cap bytes) and its length into *vlen. A value longer
 * than cap gives FABKV_BUFFER_TOO_SMALL with *vlen = its length and nothing copied. */
int fabkv_get(fabkv_client* c, const void* key, size_t klen, void* buf, size_t cap, size_t* vlen);
int fabkv_put(fabkv_client* c, const void* key, size_t klen, const void* val, size_t vlen);
int fabkv_del(fabkv_client* c, const void* key, size_t klen);
/* A sequencer's next value into *value (a protocol without key-value data,
 * docs/sequencer.md): unique across the server's clients, increasing for this client.
 * FABKV_ERROR from a key-value protocol. */
int fabkv_next(fabkv_client* c, uint64_t* value);

/* The server's largest value in bytes (0 for a NULL client). */
size_t fabkv_max_value(const fabkv_client* c);

/* Closes the connection and frees the client; NULL is allowed. */
void fabkv_close(fabkv_client* c);

/* ---- Many servers (client/cluster.h, docs/cluster.md): each key on the server the ketama ring
 * of memcached's clients gives it (libmemcached's KETAMA_WEIGHTED, as pylibmc and twemproxy),
 * one connection per server, opened at its first key. Same threading rule: one per thread. */
typedef struct fabkv_cluster fabkv_cluster;

/* How to reach the servers. Zero or NULL in any field means its default, as in
 * fabkv_options: `fabkv_cluster_options o = {0}; o.servers = "10.0.0.1:7000,10.0.0.2:7000";` */
typedef struct fabkv_cluster_options {
  /* "HOST:PORT[:WEIGHT][ NAME],...": each server's control address, its weight (default 1)
   * and its ring name (default: "host:port", or "host" for port 11211). Required. */
  const char* servers;
  const char* protocol;     /* NULL: fabkv_options' default (all must serve it) */
  const char* provider;     /* NULL: "auto" */
  const char* secret;       /* control-channel shared secret; NULL: none */
  int timeout_ms;           /* bound on every call to one server, connecting included; <= 0: 2000 */
  int replicas;             /* servers each key is written to; <= 0: 1 (no replicas) */
  int auto_eject_hosts;     /* a failing server: > 0 or 0 (the default) takes it off the ring
                               (its keys go to the next servers); < 0 fails its keys instead */
  int server_failure_limit; /* failures in a row that eject it; <= 0: 2 */
  int retry_timeout_ms;     /* then it is tried again after this; <= 0: 2000 */
} fabkv_cluster_options;

/* fabkv_cluster_server_for_key when no server is left on the ring (all ejected), and for
 * bad arguments. */
#define FABKV_NO_SERVER SIZE_MAX

/* Checks the list (at least one server, no ring name twice, replicas <= servers, a known
 * protocol) and builds the ring; connects to nothing (a server is connected at its first
 * key). On failure returns NULL and writes the reason into err (errlen bytes, NUL-terminated),
 * as fabkv_connect. */
fabkv_cluster* fabkv_cluster_open(const fabkv_cluster_options* o, char* err, size_t errlen);
/* The same from a TOML cluster file (docs/cluster.md): servers = ["HOST:PORT[:WEIGHT][ NAME]",
 * ...] and the options above by the same names. err names the file and the line. */
fabkv_cluster* fabkv_cluster_open_file(const char* path, char* err, size_t errlen);

/* As fabkv_get, fabkv_put and fabkv_del, on the key's server (with replicas: a get reads the
 * first replica that answers, a put or del goes to all of them). FABKV_SERVER_GONE when no
 * server is left on the ring, and for a put or del while fewer than `replicas` are (nothing
 * sent); FABKV_ERROR when the key's server calls itself by another ring name than the list's
 * (fabkv_cluster_server_error says both). */
int fabkv_cluster_get(fabkv_cluster* c, const void* key, size_t klen, void* buf, size_t cap,
                      size_t* vlen);
int fabkv_cluster_put(fabkv_cluster* c, const void* key, size_t klen, const void* val, size_t vlen);
int fabkv_cluster_del(fabkv_cluster* c, const void* key, size_t klen);

/* The number of servers in the list (0 for a NULL cluster). */
size_t fabkv_cluster_size(const fabkv_cluster* c);
/* The index (in the list's order) of the server the key is on now, ejected servers left out;
 * FABKV_NO_SERVER when none is left (or c or key is NULL). Needs no connection. */
size_t fabkv_cluster_server_for_key(fabkv_cluster* c, const void* key, size_t klen);
/* Server i's ring name (the list's NAME, else its ketama name), NULL past the last. Valid
 * until fabkv_cluster_close. */
const char* fabkv_cluster_server_name(const fabkv_cluster* c, size_t i);
/* Why server i's last connection attempt or call failed ("" when none did), NULL past the
 * last. Valid until the next call on c. */
const char* fabkv_cluster_server_error(fabkv_cluster* c, size_t i);

/* Closes every connection and frees the cluster; NULL is allowed. */
void fabkv_cluster_close(fabkv_cluster* c);

/* A static, human-readable text for a status ("not found"). */
const char* fabkv_strerror(int status);

#ifdef __cplusplus
}
#endif

#endif /* FABKV_H */
