/* Ends in `_exit` from a signal handler that interrupts the main thread
 * wherever it is, most often inside malloc or free with an arena's lock
 * held (blocks too large for the thread cache), as a job's SIGTERM handler
 * may. Exits with status 7. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_t main_thread;
void *volatile sink;

static void on_signal(int sig) {
    (void)sig;
    _exit(7);
}

static void *signaller(void *arg) {
    (void)arg;
    usleep(20000);
    for (;;) {
        pthread_kill(main_thread, SIGUSR1);
        usleep(100);
    }
    return NULL;
}

int main(void) {
    main_thread = pthread_self();
    signal(SIGUSR1, on_signal);
    pthread_t thread;
    pthread_create(&thread, NULL, signaller, NULL);
    void *kept[64] = {0};
    for (unsigned long i = 0;; i++) {
        unsigned k = i % 64;
        free(kept[k]);
        kept[k] = malloc(2000 + (i * 7919) % 60000);
        sink = kept[k];
    }
}
