/* A plugin for lockdep.c's plugin_reload scenario: a static lock of its own, taken with the host's
 * lock in one order: the plugin's first (built as is) or the host's first (built with HOST_FIRST). */
#include <pthread.h>

static pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;

void *plug_lock(void) { return &own; }

void plug_run(pthread_mutex_t *host) {
#ifdef HOST_FIRST
    pthread_mutex_lock(host);
    pthread_mutex_lock(&own);
    pthread_mutex_unlock(&own);
    pthread_mutex_unlock(host);
#else
    pthread_mutex_lock(&own);
    pthread_mutex_lock(host);
    pthread_mutex_unlock(host);
    pthread_mutex_unlock(&own);
#endif
}
