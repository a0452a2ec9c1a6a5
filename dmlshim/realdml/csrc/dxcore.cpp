// libdxcore.so stand-in for torch-directml's libdirectml.so on Linux: DXCoreCreateAdapterFactory
// and one adapter, the first Vulkan device, which is the one vkd3d-proton's native build uses
// (realdml README, facts 7 and 8). DirectML asks for D3D12_CORE_COMPUTE adapters, sorts them,
// takes adapter 0, and reads IsHardware (torch-directml skips software adapters), HardwareID,
// DriverDescription (torch_directml.device_name), DriverVersion, memory sizes and the budget.
#include <wsl/winadapter.h>
#include <directx/dxcore.h>
#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr HRESULT kUnsupported = static_cast<HRESULT>(0x887A0004);  // DXGI_ERROR_UNSUPPORTED

// What the adapter reports, read once from the first Vulkan device.
struct Facts {
    std::string name = "no Vulkan device";
    DXCoreHardwareID id{};
    uint64_t driver_version = 0;
    uint64_t dedicated_memory = 0;
    uint64_t shared_memory = 0;
    bool integrated = false;
    // vkd3d-proton's native build gives every device a zero LUID (d3d12core_CreateDevice), and
    // DirectML finds the adapter again by the device's LUID (GetAdapterByLuid).
    LUID luid{0, 0};

    Facts() {
        VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
        app.apiVersion = VK_API_VERSION_1_0;
        VkInstanceCreateInfo create{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
        create.pApplicationInfo = &app;
        VkInstance instance;
        if (vkCreateInstance(&create, nullptr, &instance) != VK_SUCCESS) return;
        uint32_t count = 1;
        VkPhysicalDevice device;
        VkResult listed = vkEnumeratePhysicalDevices(instance, &count, &device);
        if ((listed == VK_SUCCESS || listed == VK_INCOMPLETE) && count) read(device);
        vkDestroyInstance(instance, nullptr);
    }

    void read(VkPhysicalDevice device) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(device, &p);
        const char *override_name = std::getenv("DMLSHIM_REALDML_ADAPTER_NAME");
        name = override_name && *override_name ? override_name : p.deviceName;
        id = {p.vendorID, p.deviceID, 0, 0};
        driver_version = p.driverVersion;
        integrated = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
        VkPhysicalDeviceMemoryProperties memory;
        vkGetPhysicalDeviceMemoryProperties(device, &memory);
        for (uint32_t i = 0; i < memory.memoryHeapCount; ++i)
            (memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT ? dedicated_memory : shared_memory) +=
                memory.memoryHeaps[i].size;
    }
};

const Facts &facts() {
    static const Facts f;
    return f;
}

bool same(REFGUID a, REFGUID b) { return std::memcmp(&a, &b, sizeof(GUID)) == 0; }

// Reference counting and QueryInterface for an object that implements `Interface` (IID `iid`)
// and, where given, the interface it derives from (IID `base_iid`).
template <class Interface, const IID &iid, const IID &base_iid = IID_IUnknown>
class Com : public Interface {
    std::atomic<ULONG> refs_{1};

  public:
    virtual ~Com() = default;
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void **object) override {
        if (!object) return E_POINTER;
        if (same(riid, iid) || same(riid, base_iid) || same(riid, IID_IUnknown)) {
            *object = static_cast<Interface *>(this);
            this->AddRef();
            return S_OK;
        }
        *object = nullptr;
        return E_NOINTERFACE;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        ULONG left = --refs_;
        if (!left) delete this;
        return left;
    }
};

HRESULT new_factory(REFIID riid, void **object);

// Copy `value` into a caller's buffer of `size` bytes.
template <class T>
HRESULT put(const T &value, size_t size, void *data) {
    if (!data || size < sizeof(T)) return E_INVALIDARG;
    std::memcpy(data, &value, sizeof(T));
    return S_OK;
}

class Adapter final : public Com<IDXCoreAdapter, IID_IDXCoreAdapter> {
  public:
    bool STDMETHODCALLTYPE IsValid() override { return true; }
    bool STDMETHODCALLTYPE IsAttributeSupported(REFGUID attribute) override {
        return same(attribute, DXCORE_ADAPTER_ATTRIBUTE_D3D12_CORE_COMPUTE) ||
               same(attribute, DXCORE_ADAPTER_ATTRIBUTE_D3D12_GRAPHICS) ||
               same(attribute, DXCORE_HARDWARE_TYPE_ATTRIBUTE_GPU);
    }
    bool STDMETHODCALLTYPE IsPropertySupported(DXCoreAdapterProperty property) override {
        size_t size;
        return GetPropertySize(property, &size) == S_OK;
    }
    HRESULT STDMETHODCALLTYPE GetProperty(DXCoreAdapterProperty property, size_t size, void *data) override {
        const Facts &f = facts();
        switch (property) {
            case DXCoreAdapterProperty::InstanceLuid: return put(f.luid, size, data);
            case DXCoreAdapterProperty::DriverVersion: return put(f.driver_version, size, data);
            case DXCoreAdapterProperty::DriverDescription:
                if (!data || size < f.name.size() + 1) return E_INVALIDARG;
                std::memcpy(data, f.name.c_str(), f.name.size() + 1);
                return S_OK;
            case DXCoreAdapterProperty::HardwareID: return put(f.id, size, data);
            case DXCoreAdapterProperty::HardwareIDParts:
                return put(DXCoreHardwareIDParts{f.id.vendorID, f.id.deviceID, 0, 0, 0}, size, data);
            case DXCoreAdapterProperty::DedicatedAdapterMemory: return put(f.dedicated_memory, size, data);
            case DXCoreAdapterProperty::DedicatedSystemMemory: return put(uint64_t{0}, size, data);
            case DXCoreAdapterProperty::SharedSystemMemory: return put(f.shared_memory, size, data);
            // Hardware: torch-directml lists no software adapter; a CPU Vulkan driver stands in for a GPU.
            case DXCoreAdapterProperty::IsHardware: return put(true, size, data);
            case DXCoreAdapterProperty::IsIntegrated: return put(f.integrated, size, data);
            case DXCoreAdapterProperty::IsDetachable: return put(false, size, data);
            case DXCoreAdapterProperty::PhysicalAdapterCount: return put(uint32_t{1}, size, data);
            default: return kUnsupported;
        }
    }
    HRESULT STDMETHODCALLTYPE GetPropertySize(DXCoreAdapterProperty property, size_t *size) override {
        if (!size) return E_POINTER;
        switch (property) {
            case DXCoreAdapterProperty::InstanceLuid: *size = sizeof(LUID); return S_OK;
            case DXCoreAdapterProperty::DriverDescription: *size = facts().name.size() + 1; return S_OK;
            case DXCoreAdapterProperty::HardwareID: *size = sizeof(DXCoreHardwareID); return S_OK;
            case DXCoreAdapterProperty::HardwareIDParts: *size = sizeof(DXCoreHardwareIDParts); return S_OK;
            case DXCoreAdapterProperty::DriverVersion:
            case DXCoreAdapterProperty::DedicatedAdapterMemory:
            case DXCoreAdapterProperty::DedicatedSystemMemory:
            case DXCoreAdapterProperty::SharedSystemMemory: *size = sizeof(uint64_t); return S_OK;
            case DXCoreAdapterProperty::IsHardware:
            case DXCoreAdapterProperty::IsIntegrated:
            case DXCoreAdapterProperty::IsDetachable: *size = sizeof(bool); return S_OK;
            case DXCoreAdapterProperty::PhysicalAdapterCount: *size = sizeof(uint32_t); return S_OK;
            default: return kUnsupported;
        }
    }
    bool STDMETHODCALLTYPE IsQueryStateSupported(DXCoreAdapterState state) override {
        return state == DXCoreAdapterState::AdapterMemoryBudget;
    }
    // The budget is the whole heap: the stand-in tracks no usage.
    HRESULT STDMETHODCALLTYPE QueryState(DXCoreAdapterState state, size_t in_size, const void *in,
                                         size_t out_size, void *out) override {
        if (state != DXCoreAdapterState::AdapterMemoryBudget) return kUnsupported;
        if (!in || in_size < sizeof(DXCoreAdapterMemoryBudgetNodeSegmentGroup)) return E_INVALIDARG;
        auto group = static_cast<const DXCoreAdapterMemoryBudgetNodeSegmentGroup *>(in)->segmentGroup;
        uint64_t heap = group == DXCoreSegmentGroup::Local ? facts().dedicated_memory : facts().shared_memory;
        return put(DXCoreAdapterMemoryBudget{heap, 0, heap, 0}, out_size, out);
    }
    bool STDMETHODCALLTYPE IsSetStateSupported(DXCoreAdapterState) override { return false; }
    HRESULT STDMETHODCALLTYPE SetState(DXCoreAdapterState, size_t, const void *, size_t, const void *) override {
        return kUnsupported;
    }
    HRESULT STDMETHODCALLTYPE GetFactory(REFIID riid, void **factory) override { return new_factory(riid, factory); }
};

class AdapterList final : public Com<IDXCoreAdapterList, IID_IDXCoreAdapterList> {
  public:
    HRESULT STDMETHODCALLTYPE GetAdapter(uint32_t index, REFIID riid, void **adapter) override {
        if (!adapter) return E_POINTER;
        *adapter = nullptr;
        if (index != 0) return E_INVALIDARG;
        auto *a = new Adapter;
        HRESULT hr = a->QueryInterface(riid, adapter);
        a->Release();
        return hr;
    }
    uint32_t STDMETHODCALLTYPE GetAdapterCount() override { return 1; }
    bool STDMETHODCALLTYPE IsStale() override { return false; }
    HRESULT STDMETHODCALLTYPE GetFactory(REFIID riid, void **factory) override { return new_factory(riid, factory); }
    HRESULT STDMETHODCALLTYPE Sort(uint32_t, const DXCoreAdapterPreference *) override { return S_OK; }
    bool STDMETHODCALLTYPE IsAdapterPreferenceSupported(DXCoreAdapterPreference) override { return true; }
};

HRESULT new_list(REFIID riid, void **list) {
    if (!list) return E_POINTER;
    auto *l = new AdapterList;
    HRESULT hr = l->QueryInterface(riid, list);
    l->Release();
    return hr;
}

class Factory final : public Com<IDXCoreAdapterFactory1, IID_IDXCoreAdapterFactory1, IID_IDXCoreAdapterFactory> {
  public:
    HRESULT STDMETHODCALLTYPE CreateAdapterList(uint32_t, const GUID *, REFIID riid, void **list) override {
        return new_list(riid, list);
    }
    HRESULT STDMETHODCALLTYPE GetAdapterByLuid(const LUID &luid, REFIID riid, void **adapter) override {
        if (std::memcmp(&luid, &facts().luid, sizeof(LUID)) != 0) return E_INVALIDARG;
        AdapterList list;
        return list.GetAdapter(0, riid, adapter);
    }
    bool STDMETHODCALLTYPE IsNotificationTypeSupported(DXCoreNotificationType) override { return false; }
    HRESULT STDMETHODCALLTYPE RegisterEventNotification(IUnknown *, DXCoreNotificationType,
                                                        PFN_DXCORE_NOTIFICATION_CALLBACK, void *,
                                                        uint32_t *) override {
        return kUnsupported;
    }
    HRESULT STDMETHODCALLTYPE UnregisterEventNotification(uint32_t) override { return kUnsupported; }
    HRESULT STDMETHODCALLTYPE CreateAdapterListByWorkload(DXCoreWorkload, DXCoreRuntimeFilterFlags,
                                                          DXCoreHardwareTypeFilterFlags, REFIID riid,
                                                          void **list) override {
        return new_list(riid, list);
    }
};

HRESULT new_factory(REFIID riid, void **factory) {
    if (!factory) return E_POINTER;
    auto *f = new Factory;
    HRESULT hr = f->QueryInterface(riid, factory);
    f->Release();
    return hr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) HRESULT DXCoreCreateAdapterFactory(REFIID riid, void **factory) {
    return new_factory(riid, factory);
}
