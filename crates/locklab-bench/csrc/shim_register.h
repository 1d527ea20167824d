/*
 * Registration of the calling thread with one liburcu flavour, undone when the thread exits (a
 * pthread key destructor), so a grace period never waits for a thread that is gone. Shared by the
 * lab's shims: define LL_REGISTER() and LL_UNREGISTER() (the flavour's calls), then include this.
 * locklab's own code (the workspace's licence).
 */
#include <pthread.h>

static __thread int registered;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void unregister_at_exit(void *unused)
{
	(void)unused;
	if (registered) {
		LL_UNREGISTER();
		registered = 0;
	}
}

static void make_exit_key(void)
{
	pthread_key_create(&exit_key, unregister_at_exit);
}

static inline void ensure_registered(void)
{
	if (__builtin_expect(!registered, 0)) {
		pthread_once(&exit_key_once, make_exit_key);
		LL_REGISTER();
		registered = 1;
		/* Any non-NULL value: the key's destructor runs only for non-NULL values. */
		pthread_setspecific(exit_key, &registered);
	}
}
