/* A thread cancelled while it allocates and marks epochs: its cancellation
 * is pending before it starts, and acted on at its own cancellation point,
 * pthread_testcancel, after 1000 allocations and 10 marks. The tracer's
 * writes at each mark must not act on it (glibc aborts a cancellation
 * unwound through the tracer's frames). Prints the steps the thread took
 * and whether it was cancelled. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "mark.h"

static atomic_int ready, cancelled, steps;
static void *kept[1000];

static void *worker(void *arg) {
    (void)arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    atomic_store(&ready, 1);
    while (!atomic_load(&cancelled)) {
        sched_yield();
    }
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    for (int i = 0; i < 1000; i++) {
        kept[i] = malloc(64 + i);
        if (i % 100 == 99) {
            mark_epoch(i / 100);
        }
        atomic_store(&steps, i + 1);
    }
    pthread_testcancel();
    return NULL;
}

int main(void) {
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    while (!atomic_load(&ready)) {
        sched_yield();
    }
    pthread_cancel(thread);
    atomic_store(&cancelled, 1);
    void *result = NULL;
    pthread_join(thread, &result);
    printf("cancelled_thread: %d steps, %s\n", atomic_load(&steps), result == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
    return 0;
}
