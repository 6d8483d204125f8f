/*
 * tcp-pingpong: the loopback floor of a request/answer exchange at one request in flight. A
 * client writes a 64-octet request and reads a --size-octet answer, a server (a forked process)
 * waits in epoll, reads the request and writes the answer, both with TCP_NODELAY: the fewest
 * system calls and no work in between, what any server of the same shape pays on this machine.
 * bench/compare/platform.sh prints it beside make compare's rows: a p99 / p50 that this exchange
 * cannot keep within 2x on this machine is not a program's to keep (docs/BENCH.md, session 7).
 *
 * With --in-flight K (make compare's 8-in-flight rows' kernel reference, since session 14 of
 * 2026-12-02) the client writes K requests at once and reads all K answers before the next batch,
 * as redis-benchmark -P and kbtp bench's batched rows do; the server answers every request a read
 * brought with one write. Each request's latency is its batch's.
 *
 *   tcp-pingpong [--size 16384] [--requests 100000] [--warmup 20000] [--in-flight 1]
 *
 * Output: "size S requests N p50_us A p90_us B p99_us C p999_us D"; with --in-flight K > 1
 * "size S in_flight K requests N seconds T p50_us A p90_us B p99_us C p999_us D" (N requests,
 * a whole number of batches, in T seconds of measured exchange).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { REQUEST = 64 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int read_all(int fd, char *buffer, size_t length) {
  size_t got = 0;
  while (got < length) {
    ssize_t n = read(fd, buffer + got, length - got);
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static int write_all(int fd, const char *buffer, size_t length) {
  size_t sent = 0;
  while (sent < length) {
    ssize_t n = write(fd, buffer + sent, length - sent);
    if (n <= 0) return -1;
    sent += (size_t)n;
  }
  return 0;
}

static int wait_readable(int epoll) {
  struct epoll_event event;
  return epoll_wait(epoll, &event, 1, -1) == 1 ? 0 : -1;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int watched(int fd) {
  int one = 1, epoll = epoll_create1(0);
  struct epoll_event event = {.events = EPOLLIN};
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (epoll < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) != 0) {
    perror("tcp-pingpong: epoll");
    exit(1);
  }
  return epoll;
}

int main(int argc, char **argv) {
  long size = 16384, requests = 100000, warmup = 20000, in_flight = 1;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--size") == 0) size = atol(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--requests") == 0) requests = atol(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0) warmup = atol(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--in-flight") == 0) in_flight = atol(argv[++i]);
    else {
      fprintf(stderr, "usage: tcp-pingpong [--size 16384] [--requests 100000] [--warmup 20000] [--in-flight 1]\n");
      return 2;
    }
  }
  if (size < 1 || size > (1 << 30) || requests < 100 || warmup < 0 || in_flight < 1 || in_flight > 64 || size * in_flight > (1L << 30)) {
    fprintf(stderr, "tcp-pingpong: --size from 1 to 1 GiB, --requests at least 100, --warmup at least 0, --in-flight from 1 to 64 (at most 1 GiB a batch)\n");
    return 2;
  }
  /* Whole batches, at least 100 of them measured. */
  long batches = requests / in_flight < 100 ? 100 : requests / in_flight, warmup_batches = warmup / in_flight;
  requests = batches * in_flight;
  int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t length = sizeof address;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, (struct sockaddr *)&address, &length) != 0) {
    perror("tcp-pingpong: listen");
    return 1;
  }
  size_t batch_octets = (size_t)size * (size_t)in_flight, request_octets = (size_t)REQUEST * (size_t)in_flight;
  char *buffer = malloc(batch_octets + request_octets);
  if (buffer == NULL) return 1;
  memset(buffer, 'x', batch_octets + request_octets);
  pid_t server = fork();
  if (server == 0) {
    int connection = accept(listener, NULL, NULL), epoll = watched(connection);
    if (in_flight == 1) {
      for (;;) {
        if (wait_readable(epoll) != 0 || read_all(connection, buffer, REQUEST) != 0) _exit(0);
        if (write_all(connection, buffer, (size_t)size) != 0) _exit(1);
      }
    }
    /* Every whole request one read brought, answered with one write; a partial one waits. */
    size_t have = 0;
    char *requests_in = buffer + batch_octets;
    for (;;) {
      if (wait_readable(epoll) != 0) _exit(0);
      ssize_t n = read(connection, requests_in + have, request_octets - have);
      if (n <= 0) _exit(0);
      have += (size_t)n;
      size_t whole = have / REQUEST;
      have -= whole * REQUEST;
      if (whole > 0 && write_all(connection, buffer, whole * (size_t)size) != 0) _exit(1);
    }
  }
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, (struct sockaddr *)&address, sizeof address) != 0) {
    perror("tcp-pingpong: connect");
    return 1;
  }
  int epoll = watched(client);
  double *latency = malloc(sizeof(double) * (size_t)batches);
  if (latency == NULL) return 1;
  double measured_from = 0;
  for (long i = 0; i < warmup_batches + batches; i++) {
    if (i == warmup_batches) measured_from = now_us();
    double began = now_us();
    if (write_all(client, buffer + batch_octets, request_octets) != 0 || wait_readable(epoll) != 0 || read_all(client, buffer, batch_octets) != 0) {
      fprintf(stderr, "tcp-pingpong: the exchange failed\n");
      return 1;
    }
    if (i >= warmup_batches) latency[i - warmup_batches] = now_us() - began;
  }
  double seconds = (now_us() - measured_from) / 1e6;
  close(client);
  waitpid(server, NULL, 0);
  qsort(latency, (size_t)batches, sizeof latency[0], by_value);
  if (in_flight == 1)
    printf("size %ld requests %ld p50_us %.1f p90_us %.1f p99_us %.1f p999_us %.1f\n", size, requests, latency[batches / 2],
           latency[batches * 9 / 10], latency[batches * 99 / 100], latency[batches * 999 / 1000]);
  else
    printf("size %ld in_flight %ld requests %ld seconds %.6f p50_us %.1f p90_us %.1f p99_us %.1f p999_us %.1f\n", size, in_flight, requests, seconds,
           latency[batches / 2], latency[batches * 9 / 10], latency[batches * 99 / 100], latency[batches * 999 / 1000]);
  return 0;
}
