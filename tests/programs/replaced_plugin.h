/* The body of first_plugin.c and second_plugin.c: two plugins alike but
 * for the name of their leaking function (PLUGIN_LEAK), so that the one
 * loaded second is as large as the first and takes its addresses. */
#include <stdlib.h>
#include <string.h>

static void *kept[4096];
static int count;

__attribute__((noinline)) void PLUGIN_LEAK(void) {
    for (int i = 0; i < 20; i++) {
        char *block = malloc(1500); /* the plugin's leak */
        memset(block, 1, 1500);
        if (count < 4096) kept[count++] = block;
    }
}
