/*
 * vcpu-stalls: how often, and for how long, this machine takes the CPU away from a thread that
 * never sleeps. A busy loop reads CLOCK_MONOTONIC for --seconds and records every gap above
 * --threshold-us between two readings: time in which the thread did not run although it was
 * runnable (an interrupt, another task, or, in a virtual machine, the host running something else
 * on this vCPU, which the guest does not see as steal time). bench/compare/platform.sh runs it
 * on each CPU. A request that meets such a gap is late by its length: at one request in flight
 * this, not the program, can set the p99 (docs/BENCH.md, session 7).
 *
 *   vcpu-stalls [--seconds 2] [--threshold-us 5]
 *
 * Output: one summary line: gaps, their total, the median gap, the median time between gaps of
 * at least 20 us and the share of those within 2 % of one period (regular stalls).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  double seconds = 2, threshold_us = 5;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--threshold-us") == 0) threshold_us = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: vcpu-stalls [--seconds 2] [--threshold-us 5]\n");
      return 2;
    }
  }
  if (seconds <= 0 || seconds > 60 || threshold_us <= 0) {
    fprintf(stderr, "vcpu-stalls: --seconds from 0 to 60, --threshold-us above 0\n");
    return 2;
  }
  enum { MAX_GAPS = 1 << 20 };
  static uint64_t at[MAX_GAPS], gap[MAX_GAPS], sorted[MAX_GAPS], between[MAX_GAPS];
  const uint64_t threshold = (uint64_t)(threshold_us * 1000), start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
  uint64_t last = start, total = 0;
  size_t gaps = 0;
  for (;;) {
    uint64_t t = now_ns();
    if (t - last > threshold && gaps < MAX_GAPS) {
      at[gaps] = t;
      gap[gaps] = t - last;
      total += t - last;
      gaps++;
    }
    last = t;
    if (t > end) break;
  }
  memcpy(sorted, gap, gaps * sizeof gap[0]);
  qsort(sorted, gaps, sizeof sorted[0], by_value);
  // Gaps of 20 us and more: how regular are they?
  size_t large = 0, regular = 0;
  uint64_t previous = 0;
  for (size_t i = 0; i < gaps; i++) {
    if (gap[i] < 20000) continue;
    if (previous != 0) between[large++] = at[i] - previous;
    previous = at[i];
  }
  qsort(between, large, sizeof between[0], by_value);
  uint64_t period = large > 0 ? between[large / 2] : 0;
  for (size_t i = 0; i < large; i++)
    if (period > 0 && (between[i] > period ? between[i] - period : period - between[i]) * 50 <= period) regular++;
  printf("%zu gaps over %.0f us in %.1f s, %.2f ms in all (%.2f %% of the time); median gap %.1f us; gaps of 20 us or more: %zu, median %.3f ms apart, %.0f %% of them within 2 %% of that\n",
         gaps, threshold_us, seconds, total / 1e6, total / (seconds * 1e7), gaps ? sorted[gaps / 2] / 1e3 : 0.0, large + (previous != 0),
         period / 1e6, large ? 100.0 * regular / large : 0.0);
  return 0;
}
