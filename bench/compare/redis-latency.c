/*
 * redis-latency: the latency of a Redis request as kbtp bench measures a kbtp one, from the
 * request's first write to the LAST octet of its reply.
 *
 * redis-benchmark stops its clock at the first read event of a reply (src/redis-benchmark.c,
 * readHandler: "Calculate latency only for the first read event ... Parsing overhead is not part
 * of the latency"), so for a 1 MiB GET it times the first 16 KiB read, not the reply. This client
 * is shaped like redis-benchmark so that the two compare in throughput too: one thread, one epoll
 * loop, --clients connections, --pipeline requests written together per connection (as -P),
 * every reply parsed completely (RESP: +OK, $<len> bulk strings; any other answer is an error),
 * one key ("key:__rand_int__", redis-benchmark's without -r) holding a value of 'x' octets.
 *
 *   redis-latency --port P [--host 127.0.0.1] [--tests set,get] [--size 16384] [--clients 1]
 *                 [--requests 10000] [--pipeline 1]
 *
 * Output, per test in the order given (bench/compare/tools.ts parses it):
 *   test GET requests N elapsed_ns E cpu_ns C
 *   (C: this client's CPU time over the test, user and system, from CLOCK_THREAD_CPUTIME_ID: the
 *   client's cost per request beside the server's, as make compare reports kbtp's client's)
 *   then N lines "<complete_ns> <first_read_ns>": each request's latency to its reply's last
 *   octet, and to the first read event after its write (what redis-benchmark reports).
 * Errors go to standard error with exit status 1 (2 for usage).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KEY "key:__rand_int__"
#define READ_BUFFER (512 * 1024)
#define LINE_MAX_OCTETS 64

enum parse_state { AWAIT_LINE, IN_BULK, AWAIT_BULK_END };

struct connection {
  int fd;
  /* The batch being written: `batch` commands of the test, from `out`. */
  size_t out_length;
  size_t written;
  int batch;
  int answered;
  int wants_write;
  uint64_t start_ns;
  uint64_t first_read_ns;
  /* Reply parser. */
  enum parse_state state;
  size_t bulk_left;
  int bulk_end_seen;
  char line[LINE_MAX_OCTETS];
  size_t line_length;
};

static const char *host = "127.0.0.1";
static int port = 0;
static size_t value_size = 16384;
static int clients = 1;
static long requests = 10000;
static int pipeline = 1;

static int epoll_fd = -1;
static char *read_buffer;
static uint64_t *complete_ns;
static uint64_t *first_ns;
static long issued;
static long finished;
/* The test running: its command repeated `pipeline` times, and whether its reply is a bulk string. */
static const char *test_name;
static char *commands;
static size_t command_length;
static int expect_bulk;

static void die(const char *format, const char *detail) {
  fprintf(stderr, "redis-latency: ");
  fprintf(stderr, format, detail);
  fprintf(stderr, "\n");
  exit(1);
}

static uint64_t clock_ns(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static void *checked_malloc(size_t length) {
  void *memory = malloc(length);
  if (memory == NULL) die("out of memory (%s)", "allocation");
  return memory;
}

/* "*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$<size>\r\nxxx...\r\n" or the GET without a value. */
static size_t format_command(char *into, int is_set) {
  size_t length;
  if (is_set) {
    length = (size_t)sprintf(into, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(KEY), KEY, value_size);
    memset(into + length, 'x', value_size);
    length += value_size;
    memcpy(into + length, "\r\n", 2);
    length += 2;
  } else {
    length = (size_t)sprintf(into, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(KEY), KEY);
  }
  return length;
}

static void prepare_test(int is_set) {
  char *one = checked_malloc(value_size + 128);
  command_length = format_command(one, is_set);
  free(commands);
  commands = checked_malloc(command_length * (size_t)pipeline);
  for (int i = 0; i < pipeline; i++) memcpy(commands + (size_t)i * command_length, one, command_length);
  free(one);
  test_name = is_set ? "SET" : "GET";
  expect_bulk = !is_set;
}

static void watch(struct connection *c, int want_write) {
  struct epoll_event event = { .events = EPOLLIN | (want_write ? EPOLLOUT : 0), .data.ptr = c };
  if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &event) != 0) die("epoll_ctl: %s", strerror(errno));
  c->wants_write = want_write;
}

static void write_some(struct connection *c) {
  while (c->written < c->out_length) {
    ssize_t n = write(c->fd, commands + c->written, c->out_length - c->written);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (!c->wants_write) watch(c, 1);
        return;
      }
      die("write to Redis: %s", strerror(errno));
    }
    c->written += (size_t)n;
  }
  if (c->wants_write) watch(c, 0);
}

/* Writes the connection's next batch, if requests remain to issue. */
static void issue(struct connection *c) {
  long left = requests - issued;
  if (left <= 0) return;
  c->batch = left < pipeline ? (int)left : pipeline;
  issued += c->batch;
  c->answered = 0;
  c->out_length = command_length * (size_t)c->batch;
  c->written = 0;
  c->first_read_ns = 0;
  c->start_ns = now_ns();
  write_some(c);
}

static void reply_done(struct connection *c, uint64_t at) {
  /* The k-th reply of a batch may come while later commands are still being written, not earlier. */
  if (c->written < command_length * (size_t)(c->answered + 1)) die("Redis answered a %s before it was written", test_name);
  complete_ns[finished] = at - c->start_ns;
  first_ns[finished] = c->first_read_ns - c->start_ns;
  finished++;
  if (++c->answered == c->batch) issue(c);
}

static void reply_line(struct connection *c, uint64_t at) {
  char *line = c->line;
  if (c->line_length < 3 || line[c->line_length - 2] != '\r') die("malformed reply line from Redis: %s", line);
  line[c->line_length - 2] = '\0';
  if (line[0] == '-') die("Redis answered an error: %s", line + 1);
  if (!expect_bulk) {
    if (strcmp(line, "+OK") != 0) die("Redis answered SET with %s (expected +OK)", line);
    reply_done(c, at);
    return;
  }
  if (line[0] != '$') die("Redis answered GET with %s (expected a bulk string)", line);
  char *end;
  errno = 0;
  long long length = strtoll(line + 1, &end, 10);
  if (errno != 0 || *end != '\0' || end == line + 1) die("malformed bulk length from Redis: %s", line);
  if (length < 0) die("Redis has no value for the key (GET answered %s)", line);
  if ((size_t)length != value_size) die("Redis answered GET with a value of another length: %s", line);
  c->state = IN_BULK;
  c->bulk_left = (size_t)length;
}

/* Consumes one read's octets, completing as many replies as they finish. */
static void parse(struct connection *c, const char *p, const char *end, uint64_t at) {
  while (p < end) {
    if (c->state == IN_BULK) {
      size_t take = (size_t)(end - p) < c->bulk_left ? (size_t)(end - p) : c->bulk_left;
      p += take;
      c->bulk_left -= take;
      if (c->bulk_left == 0) {
        c->state = AWAIT_BULK_END;
        c->bulk_end_seen = 0;
      }
      continue;
    }
    if (c->state == AWAIT_BULK_END) {
      if (*p != "\r\n"[c->bulk_end_seen]) die("a bulk string from Redis does not end in CRLF (%s)", test_name);
      p++;
      if (++c->bulk_end_seen == 2) {
        c->state = AWAIT_LINE;
        reply_done(c, at);
      }
      continue;
    }
    const char *newline = memchr(p, '\n', (size_t)(end - p));
    size_t take = (size_t)((newline != NULL ? newline + 1 : end) - p);
    if (c->line_length + take >= LINE_MAX_OCTETS) die("a reply line from Redis is longer than %s octets", "63");
    memcpy(c->line + c->line_length, p, take);
    c->line_length += take;
    c->line[c->line_length] = '\0';
    p += take;
    if (newline != NULL) {
      reply_line(c, at);
      c->line_length = 0;
    }
  }
}

static void readable(struct connection *c) {
  for (;;) {
    ssize_t n = read(c->fd, read_buffer, READ_BUFFER);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      die("read from Redis: %s", strerror(errno));
    }
    if (n == 0) die("Redis closed the connection during %s", test_name);
    uint64_t at = now_ns();
    if (c->first_read_ns == 0) c->first_read_ns = at;
    parse(c, read_buffer, read_buffer + n, at);
    /* A full buffer may leave more queued: read again rather than wait for the next epoll turn. */
    if (n < READ_BUFFER) return;
  }
}

static int connect_to_redis(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket: %s", strerror(errno));
  struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  if (inet_pton(AF_INET, host, &address.sin_addr) != 1) die("--host %s is not an IPv4 address", host);
  if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) die("cannot connect to Redis: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* as hiredis, redis-benchmark's client */
  return fd;
}

/* One request on a blocking connection before the timed GETs, so that the key holds the value. */
static void store_value(int fd) {
  prepare_test(1);
  for (size_t done = 0; done < command_length;) {
    ssize_t n = write(fd, commands + done, command_length - done);
    if (n <= 0) die("write to Redis: %s", strerror(errno));
    done += (size_t)n;
  }
  char answer[5];
  for (size_t got = 0; got < sizeof answer;) {
    ssize_t n = read(fd, answer + got, sizeof answer - got);
    if (n <= 0) die("Redis did not answer the SET that stores the value (%s)", n == 0 ? "closed" : strerror(errno));
    got += (size_t)n;
  }
  if (memcmp(answer, "+OK\r\n", 5) != 0) die("Redis did not answer +OK to the SET that stores the %s", "value");
}

static void run_test(int is_set, struct connection *connections) {
  prepare_test(is_set);
  issued = 0;
  finished = 0;
  uint64_t start = now_ns();
  uint64_t cpu_start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  for (int i = 0; i < clients; i++) issue(&connections[i]);
  struct epoll_event events[64];
  while (finished < requests) {
    int count = epoll_wait(epoll_fd, events, 64, 10000);
    if (count < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait: %s", strerror(errno));
    }
    if (count == 0) die("no answer from Redis for 10 s during %s", test_name);
    for (int i = 0; i < count; i++) {
      struct connection *c = events[i].data.ptr;
      if (events[i].events & EPOLLOUT) write_some(c);
      if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) readable(c);
    }
  }
  uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
  uint64_t elapsed = now_ns() - start;
  printf("test %s requests %ld elapsed_ns %llu cpu_ns %llu\n", test_name, requests, (unsigned long long)elapsed, (unsigned long long)cpu);
  for (long i = 0; i < requests; i++) printf("%llu %llu\n", (unsigned long long)complete_ns[i], (unsigned long long)first_ns[i]);
}

static void usage(const char *problem) {
  if (problem != NULL) fprintf(stderr, "redis-latency: %s\n", problem);
  fprintf(stderr,
          "usage: redis-latency --port P [--host 127.0.0.1] [--tests set,get] [--size 16384] [--clients 1]\n"
          "                     [--requests 10000] [--pipeline 1]\n"
          "Redis SET/GET latency from a request's first write to its reply's last octet (bench/compare).\n");
  exit(problem != NULL ? 2 : 0);
}

static long number(const char *option, const char *text, long min, long max) {
  char *end;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || end == text || value < min || value > max) {
    static char problem[160];
    snprintf(problem, sizeof problem, "%s must be an integer from %ld to %ld, not '%s'", option, min, max, text);
    usage(problem);
  }
  return value;
}

int main(int argc, char **argv) {
  const char *tests = "set,get";
  for (int i = 1; i < argc; i++) {
    const char *option = argv[i];
    if (strcmp(option, "--help") == 0 || strcmp(option, "-h") == 0) usage(NULL);
    if (i + 1 >= argc) usage("every option takes a value");
    const char *value = argv[++i];
    if (strcmp(option, "--host") == 0) host = value;
    else if (strcmp(option, "--port") == 0) port = (int)number(option, value, 1, 65535);
    else if (strcmp(option, "--tests") == 0) tests = value;
    else if (strcmp(option, "--size") == 0) value_size = (size_t)number(option, value, 0, 512L * 1024 * 1024);
    else if (strcmp(option, "--clients") == 0) clients = (int)number(option, value, 1, 10000);
    else if (strcmp(option, "--requests") == 0) requests = number(option, value, 1, 100000000);
    else if (strcmp(option, "--pipeline") == 0) pipeline = (int)number(option, value, 1, 10000);
    else {
      static char problem[160];
      snprintf(problem, sizeof problem, "unknown option %s", option);
      usage(problem);
    }
  }
  if (port == 0) usage("--port is required");
  if (strcmp(tests, "set") != 0 && strcmp(tests, "get") != 0 && strcmp(tests, "set,get") != 0 && strcmp(tests, "get,set") != 0)
    usage("--tests is set, get, set,get or get,set");

  read_buffer = checked_malloc(READ_BUFFER);
  complete_ns = checked_malloc(sizeof(uint64_t) * (size_t)requests);
  first_ns = checked_malloc(sizeof(uint64_t) * (size_t)requests);
  epoll_fd = epoll_create1(0);
  if (epoll_fd < 0) die("epoll_create1: %s", strerror(errno));
  struct connection *connections = calloc((size_t)clients, sizeof *connections);
  if (connections == NULL) die("out of memory (%s)", "connections");
  for (int i = 0; i < clients; i++) {
    connections[i].fd = connect_to_redis();
    if (i == 0 && strncmp(tests, "get", 3) == 0) store_value(connections[i].fd);
    if (fcntl(connections[i].fd, F_SETFL, fcntl(connections[i].fd, F_GETFL) | O_NONBLOCK) != 0) die("fcntl: %s", strerror(errno));
    struct epoll_event event = { .events = EPOLLIN, .data.ptr = &connections[i] };
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, connections[i].fd, &event) != 0) die("epoll_ctl: %s", strerror(errno));
  }
  run_test(strncmp(tests, "set", 3) == 0, connections);
  if (strlen(tests) > 3) run_test(strncmp(tests + 4, "set", 3) == 0, connections);
  if (fflush(stdout) != 0) die("write to standard output: %s", strerror(errno));
  return 0;
}
