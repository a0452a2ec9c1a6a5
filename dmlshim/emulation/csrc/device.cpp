// The emulated DirectML device's C++ half, for a torch without the Python
// PrivateUse1 backend API (torch 2.4.1, torch-directml 0.2.5's pin).
//
// It registers what torch asks of an out-of-tree device (PyTorch's
// test/cpp_extensions/open_registration_extension.cpp at v2.4.1 is the
// model): an allocator, PrivateUse1 hooks and a device guard, plus zero-copy
// aliases between the CPU and the device. The routing and quirk policy stays
// in Python (dmlshim/emulation/_state.py), as per-op Python kernels: the boxed
// fallback below only asks Python to register such a kernel on an op's first
// call, then redispatches to it.
#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>
#include <mutex>
#include <algorithm>
#include <unordered_set>

namespace {

constexpr auto kDevice = c10::DeviceType::PrivateUse1;

// Device memory is CPU memory: arithmetic runs on the CPU kernels underneath.
struct EmulatedAllocator final : at::Allocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* data = c10::alloc_cpu(nbytes);
    return {data, data, &c10::free_cpu, c10::Device(kDevice, 0)};
  }
  at::DeleterFnPtr raw_deleter() const override { return &c10::free_cpu; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

EmulatedAllocator allocator;
REGISTER_ALLOCATOR(kDevice, &allocator);

// One device, index 0, with one stream that is always done: work runs
// synchronously on the CPU, so events and stream syncs have nothing to wait for.
struct EmulatedGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device) const override { return {kDevice, 0}; }
  c10::Device getDevice() const override { return {kDevice, 0}; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmulatedGuard);

// What autograd and storage code ask of a PrivateUse1 backend. No generator:
// DirectML has no Generator API (failure_modes.md #35), so the base class's
// "not implemented" error stands.
struct EmulatedHooks final : at::PrivateUse1HooksInterface {
  at::Device getDeviceFromPtr(void*) const override { return {kDevice, 0}; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    at::DataPtr grown = allocator.allocate(newsize);
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep > 0) std::memcpy(grown.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(grown));
    impl->set_nbytes(newsize);
  }
};

EmulatedHooks hooks;

// The Python callback that registers a per-op kernel: (schema name, overload)
// -> bool. Never freed: a py::object must not be destroyed after Python exits.
py::object* on_first_call = nullptr;
std::mutex refused_lock;
std::unordered_set<const c10::OperatorName*> refused;  // ops Python could not take

bool is_refused(const c10::OperatorName* name) {
  std::lock_guard<std::mutex> lock(refused_lock);
  return refused.count(name) > 0;
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const c10::OperatorName* name = &op.operator_name();  // stable per op
  bool registered = false;
  if (on_first_call != nullptr && !is_refused(name)) {
    py::gil_scoped_acquire gil;
    registered = (*on_first_call)(name->name, name->overload_name).cast<bool>();
    if (!registered) {
      std::lock_guard<std::mutex> lock(refused_lock);
      refused.insert(name);
    }
  }
  if (registered) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);
  } else {
    // An op Python could not take (it refuses Python kernels): run it the way
    // torch-directml runs its CPU_FALLBACK ops.
    at::native::cpu_fallback(op, stack);
  }
}

// A device tensor sharing ``src``'s memory; the alias keeps ``src`` alive.
at::Tensor alias_on(const at::Tensor& src, c10::Device device) {
  auto storage = src.storage();
  return at::from_blob(
      src.data_ptr(), src.sizes(), src.strides(),
      [storage](void*) {}, src.options().device(device));
}

at::Tensor to_device(const at::Tensor& cpu) { return alias_on(cpu, {kDevice, 0}); }

at::Tensor cpu_alias(const at::Tensor& dev) { return alias_on(dev, c10::Device(c10::kCPU)); }

// ``t`` flagged as a wrapped number (the 0.5 of ``x + 0.5``): it then never decides a
// result's dtype within its category, as on the CPU. Python has no way to set the flag.
at::Tensor wrap_number(const at::Tensor& t) {
  at::Tensor out = t.detach();
  out.unsafeGetTensorImpl()->set_wrapped_number(true);
  return out;
}

void set_first_call_hook(py::object fn) {
  at::RegisterPrivateUse1HooksInterface(&hooks);
  if (on_first_call == nullptr) on_first_call = new py::object();
  *on_first_call = std::move(fn);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

// torch-directml registers no autocast kernels: autocast is a no-op
// (failure_modes.md #36).
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("to_device", &to_device, "A device tensor aliasing a CPU tensor's memory (no copy)");
  m.def("cpu_alias", &cpu_alias, "A CPU tensor aliasing a device tensor's memory (no copy)");
  m.def("wrap_number", &wrap_number, "A 0-dim CPU tensor flagged as a wrapped Python number");
  m.def("set_first_call_hook", &set_first_call_hook,
        "Register the hooks and the Python callback (name, overload) -> bool");
}
