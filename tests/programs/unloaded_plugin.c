/* A plugin that leaks: its caller loads it, calls it and unloads it
 * within one epoch, every epoch. */
#include <stdlib.h>
#include <string.h>

static void *kept[4096];
static int count;

__attribute__((noinline)) void unloaded_plugin_leak(void) {
    for (int i = 0; i < 20; i++) {
        char *block = malloc(1500); /* the plugin's leak */
        memset(block, 1, 1500);
        if (count < 4096) kept[count++] = block;
    }
}
