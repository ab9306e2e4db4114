/* Several threads allocate and free at once; one site leaks in every thread. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define THREADS 4
#define EPOCHS 8
void *volatile sink;
void *leaks[THREADS][EPOCHS * 100];
pthread_barrier_t start_epoch, end_epoch;

__attribute__((noinline)) void thread_leak(int thread, int epoch) {
    for (int i = 0; i < 100; i++) leaks[thread][epoch * 100 + i] = malloc(512);
}

__attribute__((noinline)) void churn(void) {
    void *blocks[64];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 64; i++) blocks[i] = malloc(16 + (i * 37) % 2000);
        for (int i = 0; i < 64; i++) blocks[(i * 7) % 64] = realloc(blocks[(i * 7) % 64], 48), sink = blocks[i];
        for (int i = 0; i < 64; i++) free(blocks[i]);
    }
}

static void *worker(void *arg) {
    int thread = (int)(long)arg;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        pthread_barrier_wait(&start_epoch);
        churn();
        thread_leak(thread, epoch);
        pthread_barrier_wait(&end_epoch);
    }
    return NULL;
}

int main(void) {
    pthread_t threads[THREADS];
    pthread_barrier_init(&start_epoch, NULL, THREADS + 1);
    pthread_barrier_init(&end_epoch, NULL, THREADS + 1);
    for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, worker, (void *)t);
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        pthread_barrier_wait(&start_epoch);
        churn();
        pthread_barrier_wait(&end_epoch);
        mark_epoch(epoch);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    printf("threads: done\n");
    return 0;
}
