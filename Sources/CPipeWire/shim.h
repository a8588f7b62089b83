#ifndef PEERVOICE_CPIPEWIRE_SHIM_H
#define PEERVOICE_CPIPEWIRE_SHIM_H
#include <pipewire/pipewire.h>
#include <spa/param/audio/format-utils.h>
#include <spa/support/thread.h>
#include <spa/param/route.h>
#include <spa/pod/parser.h>
#include <errno.h>
#include <pthread.h>

// Swift cannot call these macros (spa_interface method calls); one-line wrappers.
static inline int peervoice_core_add_listener(struct pw_core *core, struct spa_hook *listener, const struct pw_core_events *events, void *data) { return pw_core_add_listener(core, listener, events, data); }
static inline int peervoice_core_sync(struct pw_core *core, uint32_t id, int seq) { return pw_core_sync(core, id, seq); }
static inline int peervoice_registry_add_listener(struct pw_registry *registry, struct spa_hook *listener, const struct pw_registry_events *events, void *data) { return pw_registry_add_listener(registry, listener, events, data); }
static inline int peervoice_node_add_listener(struct pw_node *node, struct spa_hook *listener, const struct pw_node_events *events, void *data) { return pw_node_add_listener(node, listener, events, data); }
static inline int peervoice_device_add_listener(struct pw_device *device, struct spa_hook *listener, const struct pw_device_events *events, void *data) { return pw_device_add_listener(device, listener, events, data); }
static inline int peervoice_device_enum_routes(struct pw_device *device, int seq) { return pw_device_enum_params(device, seq, SPA_PARAM_Route, 0, UINT32_MAX, NULL); }
// A Route param (spa_pod_parse_object is variadic): its direction (enum spa_direction), the index
// of the profile device it serves (-1: not said) and its info, a Struct of an Int count then key
// and value Strings (NULL: none). 0, or a negative errno for another kind of pod.
static inline int peervoice_route_parse(const struct spa_pod *param, uint32_t *direction, int32_t *device, struct spa_pod **info) {
    *device = -1;
    *info = NULL;
    return spa_pod_parse_object(param, SPA_TYPE_OBJECT_ParamRoute, NULL, SPA_PARAM_ROUTE_direction, SPA_POD_Id(direction),
                                SPA_PARAM_ROUTE_device, SPA_POD_OPT_Int(device), SPA_PARAM_ROUTE_info, SPA_POD_OPT_Pod(info));
}
// The Strings of a Struct pod (a route's info: its keys and values, in order), at most `max`; how many.
static inline int peervoice_pod_struct_strings(const struct spa_pod *pod, const char **strings, int max) {
    int count = 0;
    struct spa_pod *item;
    if (pod == NULL || !spa_pod_is_struct(pod)) return 0;
    SPA_POD_STRUCT_FOREACH(pod, item) {
        const char *value;
        if (count < max && spa_pod_get_string(item, &value) == 0) strings[count++] = value;
    }
    return count;
}
// Real-time priority for the calling thread through the context's thread utilities (module-rt:
// directly where the process may, else through RealtimeKit); -ENOTSUP without module-rt.
static inline int peervoice_context_acquire_rt(struct pw_context *context, int priority) {
    struct spa_thread_utils *utils = pw_context_get_object(context, SPA_TYPE_INTERFACE_ThreadUtils);
    if (utils == NULL) return -ENOTSUP;
    return spa_thread_utils_acquire_rt(utils, (struct spa_thread *)pthread_self(), priority);
}
#endif
