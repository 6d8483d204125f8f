/*
 * tcp-pingpong: the loopback floor of a request/answer exchange at one request in flight. A
 * client writes a 64-octet request and reads a --size-octet answer, a server (a forked process)
 * waits in epoll, reads the request and writes the answer, both with TCP_NODELAY: the fewest
 * system calls and no work in between, what any server of the same shape pays on this machine.
 * bench/compare/platform.sh prints it beside make compare's rows: a p99 / p50 that this exchange
 * cannot keep within 2x on this machine is not a program's to keep (docs/BENCH.md, session 7).
 *
 *   tcp-pingpong [--size 16384] [--requests 100000] [--warmup 20000]
 *
 * Output: "size S requests N p50_us A p90_us B p99_us C p999_us D".
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
  long size = 16384, requests = 100000, warmup = 20000;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--size") == 0) size = atol(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--requests") == 0) requests = atol(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0) warmup = atol(argv[++i]);
    else {
      fprintf(stderr, "usage: tcp-pingpong [--size 16384] [--requests 100000] [--warmup 20000]\n");
      return 2;
    }
  }
  if (size < 1 || size > (1 << 30) || requests < 100 || warmup < 0) {
    fprintf(stderr, "tcp-pingpong: --size from 1 to 1 GiB, --requests at least 100, --warmup at least 0\n");
    return 2;
  }
  int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t length = sizeof address;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, (struct sockaddr *)&address, &length) != 0) {
    perror("tcp-pingpong: listen");
    return 1;
  }
  char *buffer = malloc((size_t)size + REQUEST);
  if (buffer == NULL) return 1;
  memset(buffer, 'x', (size_t)size + REQUEST);
  pid_t server = fork();
  if (server == 0) {
    int connection = accept(listener, NULL, NULL), epoll = watched(connection);
    for (;;) {
      if (wait_readable(epoll) != 0 || read_all(connection, buffer, REQUEST) != 0) _exit(0);
      if (write_all(connection, buffer, (size_t)size) != 0) _exit(1);
    }
  }
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, (struct sockaddr *)&address, sizeof address) != 0) {
    perror("tcp-pingpong: connect");
    return 1;
  }
  int epoll = watched(client);
  double *latency = malloc(sizeof(double) * (size_t)requests);
  if (latency == NULL) return 1;
  for (long i = 0; i < warmup + requests; i++) {
    double began = now_us();
    if (write_all(client, buffer, REQUEST) != 0 || wait_readable(epoll) != 0 || read_all(client, buffer, (size_t)size) != 0) {
      fprintf(stderr, "tcp-pingpong: the exchange failed\n");
      return 1;
    }
    if (i >= warmup) latency[i - warmup] = now_us() - began;
  }
  close(client);
  waitpid(server, NULL, 0);
  qsort(latency, (size_t)requests, sizeof latency[0], by_value);
  printf("size %ld requests %ld p50_us %.1f p90_us %.1f p99_us %.1f p999_us %.1f\n", size, requests, latency[requests / 2],
         latency[requests * 9 / 10], latency[requests * 99 / 100], latency[requests * 999 / 1000]);
  return 0;
}
