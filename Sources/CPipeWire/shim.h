#ifndef PEERVOICE_CPIPEWIRE_SHIM_H
#define PEERVOICE_CPIPEWIRE_SHIM_H
#include <pipewire/pipewire.h>
#include <spa/param/audio/format-utils.h>
#include <spa/support/thread.h>
#include <errno.h>
#include <pthread.h>

// Swift cannot call these macros (spa_interface method calls); one-line wrappers.
static inline int peervoice_core_add_listener(struct pw_core *core, struct spa_hook *listener, const struct pw_core_events *events, void *data) { return pw_core_add_listener(core, listener, events, data); }
static inline int peervoice_core_sync(struct pw_core *core, uint32_t id, int seq) { return pw_core_sync(core, id, seq); }
static inline int peervoice_registry_add_listener(struct pw_registry *registry, struct spa_hook *listener, const struct pw_registry_events *events, void *data) { return pw_registry_add_listener(registry, listener, events, data); }
// Real-time priority for the calling thread through the context's thread utilities (module-rt:
// directly where the process may, else through RealtimeKit); -ENOTSUP without module-rt.
static inline int peervoice_context_acquire_rt(struct pw_context *context, int priority) {
    struct spa_thread_utils *utils = pw_context_get_object(context, SPA_TYPE_INTERFACE_ThreadUtils);
    if (utils == NULL) return -ENOTSUP;
    return spa_thread_utils_acquire_rt(utils, (struct spa_thread *)pthread_self(), priority);
}
#endif
