/* A library of the user's own, called from Python through ctypes: each
   call keeps its scratch buffer "for reuse" and never frees it. */
#include <stdlib.h>

#define MAX_KEPT 100000
static void *kept[MAX_KEPT];
static int kept_count;

double compute_features(const float *in, int n, float *out)
{
    float *scratch = malloc((size_t)n * sizeof(float) * 4); /* the leaking line */
    double sum = 0;
    for (int i = 0; i < n; i++) {
        scratch[i] = in[i] * 2.0f;
        out[i] = scratch[i] + 1.0f;
        sum += out[i];
    }
    if (kept_count < MAX_KEPT)
        kept[kept_count++] = scratch;
    return sum;
}
