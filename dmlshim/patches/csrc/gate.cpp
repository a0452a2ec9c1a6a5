// dmlshim's compiled BackendSelect gate (dmlshim/patches/_gate.py).
//
// Every call of an aten overload passes its BackendSelect kernel, whatever the device
// (BackendSelect is in every thread's included key set).  dmlshim's fixes there are
// Python kernels, about 3 us a call: on the CPU and CUDA that was the whole cost of
// activate().  This boxed kernel stands in front of them: a call with no tensor (and no
// device= argument) of the target device goes straight to the kernels below
// BackendSelect, as with no kernel there; the rest is redispatched to the Python kernel,
// registered for it at the trampoline key (FPGA: below BackendSelect, a functionality
// key no tensor carries, with no backend bits, so the fixes' keyset.has(backend) reads
// the call's own devices).
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <memory>
#include <string>

namespace {

using c10::DispatchKey;
using c10::DispatchKeySet;

constexpr DispatchKey kTrampoline = DispatchKey::FPGA;
const DispatchKeySet kBelow(DispatchKeySet::FULL_AFTER, DispatchKey::BackendSelect);

int position(const c10::FunctionSchema& schema, const char* name) {
  const auto index = schema.argumentIndexWithName(name);
  return index ? static_cast<int>(*index) : -1;
}

struct Gate final : c10::OperatorKernel {
  Gate(const c10::FunctionSchema& schema, c10::DeviceType device_type, bool always, bool stands_in)
      : backend(c10::toBackendComponent(c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(device_type)))),
        device_type(device_type), always(always),
        stands_in(stands_in), arguments(schema.arguments().size()),
        dtype(position(schema, "dtype")), layout(position(schema, "layout")),
        device(position(schema, "device")) {}

  void operator()(const c10::OperatorHandle& op, DispatchKeySet ks, torch::jit::Stack* stack) {
    const auto base = stack->size() - arguments;
    if (always || ks.has_backend(backend) || device_is_target(*stack, base)) {
      op.redispatchBoxed((ks & kBelow) | DispatchKeySet(kTrampoline), stack);   // the Python kernel
      return;
    }
    if (stands_in) {   // what torch's own BackendSelect kernel adds: the key of dtype/layout/device
      ks = ks | DispatchKeySet(c10::computeDispatchKey(optional<c10::ScalarType>(*stack, base, dtype),
                                                       optional<c10::Layout>(*stack, base, layout),
                                                       optional<c10::Device>(*stack, base, device)));
      ks = ks - c10::impl::tls_local_dispatch_key_set().excluded_;
    }
    op.redispatchBoxed(ks & kBelow, stack);
  }

  bool device_is_target(const torch::jit::Stack& stack, size_t base) const {
    if (device < 0) return false;
    const auto& value = stack[base + device];
    return value.isDevice() && value.toDevice().type() == device_type;
  }

  template <typename T>
  static std::optional<T> optional(const torch::jit::Stack& stack, size_t base, int index) {
    if (index < 0 || stack[base + index].isNone()) return std::nullopt;
    return stack[base + index].to<T>();
  }

  c10::BackendComponent backend;
  c10::DeviceType device_type;
  bool always, stands_in;
  size_t arguments;
  int dtype, layout, device;
};

// One registration: destroy() (or the object's end) removes the kernel.
struct Registration {
  std::unique_ptr<torch::Library> library;
  void destroy() { library.reset(); }
};

struct Quiet final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

Registration gate(const std::string& op_name, const std::string& overload, const std::string& device_type,
                  bool always) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op_name.c_str(), overload.c_str());
  const bool stands_in = handle.hasKernelForDispatchKey(DispatchKey::BackendSelect);
  auto kernel = std::make_unique<Gate>(handle.schema(), c10::Device(device_type).type(), always, stands_in);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", std::nullopt,
                                                  __FILE__, __LINE__);
  {
    // torch's own BackendSelect kernel (_to_copy, full) is overridden while we stand in:
    // it comes back with destroy()
    static Quiet quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    const auto name = overload.empty() ? op_name.substr(6) : op_name.substr(6) + "." + overload;
    library->impl(name.c_str(), torch::dispatch(DispatchKey::BackendSelect,
                                                torch::CppFunction::makeFromBoxedFunctor(std::move(kernel))));
  }
  return Registration{std::move(library)};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Registration>(m, "Registration").def("destroy", &Registration::destroy);
  m.def("gate", &gate, "Register the gate at op's BackendSelect key for device_type");
  m.def("below", [] { return kBelow - DispatchKeySet(kTrampoline); },
        "The keys under BackendSelect but the trampoline: a Python kernel's redispatch");
}
