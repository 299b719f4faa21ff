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
  FABKV_CONTENDED = 12         /* pilaf get: the key kept changing under 64 READs; retry later */
} fabkv_status;

typedef struct fabkv_client fabkv_client;

/* How to connect. Zero or NULL in any field means its default, so both
 *   fabkv_options o; fabkv_options_init(&o); o.server = "10.0.0.1:7000";
 * and
 *   fabkv_options o = {0}; o.server = "10.0.0.1:7000";
 * work. */
typedef struct fabkv_options {
  const char* server;     /* control channel "HOST:PORT" of fabkv-server; NULL: "127.0.0.1:7000" */
  const char* protocol;   /* access protocol, one of fabkv_protocols(); NULL: "herd" */
  const char* provider;   /* "auto", "shm", "tcp", "verbs"; NULL: "auto" (must match the server) */
  const char* transport;  /* requests by "write" or "send"; NULL: the protocol's (herd: the
                             server's --transport) */
  const char* secret;     /* control-channel shared secret; NULL: none */
  int timeout_ms;         /* bound on every request; <= 0: 2000 */
  int connect_timeout_ms; /* bound on connecting; <= 0: timeout_ms if set, else 5000 */
  /* Added after 0.1 (new fields only ever go at the end, zero = default): */
  const char* poll;       /* how blocking calls wait: "spin" or "adaptive"; NULL: "spin" */
  int poll_spin_us;       /* adaptive: polling time before blocking; <= 0: 100 */
  int poll_sleep_us;      /* adaptive without a wait object (shm): longest sleep; <= 0: 1000 */
} fabkv_options;

/* Sets every field to its default (all zero/NULL). */
void fabkv_options_init(fabkv_options* o);

/* Connects as `o` says (NULL: all defaults). On failure returns NULL and, if err is not
 * NULL, writes a NUL-terminated reason of at most errlen bytes (an unknown protocol's reason
 * lists the known ones). */
fabkv_client* fabkv_connect(const fabkv_options* o, char* err, size_t errlen);

/* The protocols this library speaks, comma-separated ("herd, server-reply, pilaf, pilaf-vo"):
 * a static string. */
const char* fabkv_protocols(void);
/* The i-th of them (0-based), NULL past the last: a static string. */
const char* fabkv_protocol_name(size_t i);

/* Copies the value of key into buf (cap bytes) and its length into *vlen. A value longer
 * than cap gives FABKV_BUFFER_TOO_SMALL with *vlen = its length and nothing copied. */
int fabkv_get(fabkv_client* c, const void* key, size_t klen, void* buf, size_t cap,
              size_t* vlen);
int fabkv_put(fabkv_client* c, const void* key, size_t klen, const void* val, size_t vlen);
int fabkv_del(fabkv_client* c, const void* key, size_t klen);
/* A sequencer's next value into *value (protocol seq-rpc or seq-atomic, docs/sequencer.md):
 * unique across the server's clients, increasing for this client. FABKV_ERROR from a
 * key-value protocol. */
int fabkv_next(fabkv_client* c, uint64_t* value);

/* The server's largest value in bytes (0 for a NULL client). */
size_t fabkv_max_value(const fabkv_client* c);

/* Closes the connection and frees the client; NULL is allowed. */
void fabkv_close(fabkv_client* c);

/* A static, human-readable text for a status ("not found"). */
const char* fabkv_strerror(int status);

#ifdef __cplusplus
}
#endif

#endif /* FABKV_H */
