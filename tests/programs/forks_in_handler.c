/* Forks from a signal handler every 2 ms while its only thread allocates,
 * as a crash reporter or watchdog does: the signal lands in malloc and
 * free, and in the tracer's own work, wherever the thread is. Each child
 * exits at once with status 3; the parent counts those that did not.
 * Prints "forks_in_handler: <n> children failed". */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int forks, failed;

static void on_alarm(int sig) {
    (void)sig;
    pid_t child = fork();
    if (child == 0) {
        _exit(3);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 3) {
        failed++;
    }
    forks++;
}

int main(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_alarm;
    action.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval every_2ms = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_REAL, &every_2ms, NULL);
    void *kept[64] = {0};
    for (unsigned i = 0; forks < 100; i++) {
        unsigned slot = i % 64;
        free(kept[slot]);
        kept[slot] = malloc(16 + (i * 7919u) % 2000);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("forks_in_handler: %d children failed\n", failed);
    return 0;
}
