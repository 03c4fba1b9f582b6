/*
 * The QoS benchmark's latency-sensitive task: a fixed CPU-bound step,
 * repeated, timed from inside the sandbox with CLOCK_MONOTONIC.
 *
 *   qos-step <steps> <iterations per step> <think ms between steps>
 *
 * Each step sleeps <think> ms (an agent waiting for the model), then runs
 * <iterations> rounds of a 64-bit LCG whose every round depends on the last
 * (nothing to vectorise or skip), and prints the step's wall time in
 * microseconds, one line per step. Built static by bench/qos.ts, so it runs
 * on the busybox base layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: qos-step <steps> <iterations> <think-ms>\n");
        return 2;
    }
    long steps = atol(argv[1]), iterations = atol(argv[2]), think_ms = atol(argv[3]);
    volatile unsigned long sink = 1;
    for (long step = 0; step < steps; step++) {
        if (think_ms > 0) {
            struct timespec pause = {think_ms / 1000, (think_ms % 1000) * 1000000L};
            nanosleep(&pause, NULL);
        }
        double started = now_us();
        unsigned long value = sink;
        for (long i = 0; i < iterations; i++) value = value * 6364136223846793005UL + 1442695040888963407UL;
        sink = value;
        printf("%.0f\n", now_us() - started);
    }
    return 0;
}
