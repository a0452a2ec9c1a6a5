/* libd3d12.so for torch-directml's libdirectml.so on Linux: the D3D12* entry points with
 * the symbol version VER_1 that the wheel imports (D3D12CreateDevice@VER_1, ...), each
 * forwarded to vkd3d-proton's libvkd3d-proton-d3d12.so in this library's own folder.
 * Link with d3d12_forwarder.map (realdml README, fact 7). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int32_t HRESULT;
#define E_FAIL ((HRESULT)0x80004005)
#define TARGET "libvkd3d-proton-d3d12.so"

/* vkd3d-proton's entry point `name`, loaded once from the folder this library lies in. */
static void *target(const char *name)
{
    static void *lib;
    char path[PATH_MAX];
    Dl_info self;
    void *fn;

    if (!lib && dladdr((void *)target, &self) && strlen(self.dli_fname) < sizeof(path))
    {
        strcpy(path, self.dli_fname);
        snprintf(path + strlen(dirname(path)), sizeof(path) - strlen(path), "/" TARGET);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            fprintf(stderr, "dmlshim realdml: libd3d12.so cannot load %s: %s\n", path, dlerror());
    }
    if (!lib)
        return NULL;
    if (!(fn = dlsym(lib, name)))
        fprintf(stderr, "dmlshim realdml: %s has no %s\n", TARGET, name);
    return fn;
}

#define FORWARD(name, params, args) \
    __attribute__((visibility("default"))) HRESULT name params \
    { \
        HRESULT (*fn) params = (HRESULT (*) params)target(#name); \
        return fn ? fn args : E_FAIL; \
    }

FORWARD(D3D12CreateDevice, (void *adapter, int minimum_feature_level, const void *iid, void **device),
        (adapter, minimum_feature_level, iid, device))
FORWARD(D3D12GetDebugInterface, (const void *iid, void **debug), (iid, debug))
FORWARD(D3D12GetInterface, (const void *clsid, const void *iid, void **object), (clsid, iid, object))
FORWARD(D3D12EnableExperimentalFeatures, (unsigned int count, const void *iids, void *configs, unsigned int *sizes),
        (count, iids, configs, sizes))
FORWARD(D3D12SerializeRootSignature, (const void *desc, int version, void **blob, void **error_blob),
        (desc, version, blob, error_blob))
FORWARD(D3D12SerializeVersionedRootSignature, (const void *desc, void **blob, void **error_blob),
        (desc, blob, error_blob))
FORWARD(D3D12CreateRootSignatureDeserializer, (const void *data, size_t size, const void *iid, void **deserializer),
        (data, size, iid, deserializer))
FORWARD(D3D12CreateVersionedRootSignatureDeserializer,
        (const void *data, size_t size, const void *iid, void **deserializer), (data, size, iid, deserializer))
