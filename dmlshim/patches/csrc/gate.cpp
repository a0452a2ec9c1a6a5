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

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

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

// The typed gate: the same routing as Gate, unboxed, for the overloads that CPU models
// reach most.  The boxed Gate boxes every call into a Stack and the CPU kernel unboxes it
// again (about 0.15 us a call); this one passes the arguments on as they came, so a CPU
// call pays one more kernel call and a typed redispatch.
template <class Sig>
struct Typed;

template <class R, class... A>
struct Typed<R(A...)> {
  static torch::CppFunction kernel(const c10::OperatorHandle& handle, c10::BackendComponent backend) {
    // typed<>() checks the signature against the operator's C++ one (throws if it differs)
    auto op = handle.typed<R(A...)>();
    return torch::CppFunction([op, backend](DispatchKeySet ks, A... a) -> R {
      const auto below = ks.has_backend(backend) ? (ks & kBelow) | DispatchKeySet(kTrampoline) : ks & kBelow;
      return op.redispatch(below, a...);
    });
  }
};

using at::Tensor;
using c10::Scalar;
using c10::SymIntArrayRef;
using Register = torch::CppFunction (*)(const c10::OperatorHandle&, c10::BackendComponent);

template <class Sig>
Register typed() {
  return &Typed<Sig>::kernel;
}

using Unary = Tensor(const Tensor&);
using Binary = Tensor(const Tensor&, const Tensor&);
using BinaryAlpha = Tensor(const Tensor&, const Tensor&, const Scalar&);
using WithScalar = Tensor(const Tensor&, const Scalar&);
using WithScalarAlpha = Tensor(const Tensor&, const Scalar&, const Scalar&);
using InPlace = Tensor&(Tensor&, const Tensor&);
using InPlaceAlpha = Tensor&(Tensor&, const Tensor&, const Scalar&);
using Sizes = Tensor(const Tensor&, SymIntArrayRef);
using Strided = Tensor(const Tensor&, SymIntArrayRef, SymIntArrayRef);
using MatAdd = Tensor(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&);

// overload -> its typed gate; every other overload gets the boxed Gate
const std::unordered_map<std::string, Register>& typed_gates() {
  static const std::unordered_map<std::string, Register> gates{
      {"aten::mul.Tensor", typed<Binary>()}, {"aten::div.Tensor", typed<Binary>()},
      {"aten::mm", typed<Binary>()}, {"aten::bmm", typed<Binary>()},
      {"aten::eq.Tensor", typed<Binary>()}, {"aten::ne.Tensor", typed<Binary>()},
      {"aten::lt.Tensor", typed<Binary>()}, {"aten::le.Tensor", typed<Binary>()},
      {"aten::gt.Tensor", typed<Binary>()}, {"aten::ge.Tensor", typed<Binary>()},
      {"aten::maximum", typed<Binary>()}, {"aten::minimum", typed<Binary>()},
      {"aten::atan2", typed<Binary>()},
      {"aten::add.Tensor", typed<BinaryAlpha>()}, {"aten::sub.Tensor", typed<BinaryAlpha>()},
      {"aten::mul.Scalar", typed<WithScalar>()}, {"aten::lt.Scalar", typed<WithScalar>()},
      {"aten::le.Scalar", typed<WithScalar>()}, {"aten::gt.Scalar", typed<WithScalar>()},
      {"aten::ge.Scalar", typed<WithScalar>()}, {"aten::pow.Tensor_Scalar", typed<WithScalar>()},
      {"aten::add.Scalar", typed<WithScalarAlpha>()}, {"aten::sub.Scalar", typed<WithScalarAlpha>()},
      {"aten::rsub.Scalar", typed<WithScalarAlpha>()},
      {"aten::mul_.Tensor", typed<InPlace>()}, {"aten::add_.Tensor", typed<InPlaceAlpha>()},
      {"aten::sub_.Tensor", typed<InPlaceAlpha>()},
      {"aten::neg", typed<Unary>()},
      {"aten::view", typed<Sizes>()}, {"aten::_unsafe_view", typed<Sizes>()},
      {"aten::_reshape_alias", typed<Strided>()},
      {"aten::as_strided", typed<Tensor(const Tensor&, SymIntArrayRef, SymIntArrayRef, std::optional<c10::SymInt>)>()},
      {"aten::cat", typed<Tensor(const at::ITensorListRef&, int64_t)>()},
      {"aten::addmm", typed<MatAdd>()}, {"aten::baddbmm", typed<MatAdd>()},
      {"aten::convolution", typed<Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, SymIntArrayRef,
                                         SymIntArrayRef, SymIntArrayRef, bool, SymIntArrayRef, c10::SymInt)>()},
      {"aten::clone", typed<Tensor(const Tensor&, std::optional<c10::MemoryFormat>)>()},
      {"aten::_local_scalar_dense", typed<Scalar(const Tensor&)>()},
  };
  return gates;
}

Registration registered(const std::string& op_name, const std::string& overload, torch::CppFunction kernel) {
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", std::nullopt, __FILE__, __LINE__);
  const auto name = overload.empty() ? op_name.substr(6) : op_name.substr(6) + "." + overload;
  library->impl(name.c_str(), torch::dispatch(DispatchKey::BackendSelect, std::move(kernel)));
  return Registration{std::move(library)};
}

// The typed gate of op for device_type, or None where it has none (then gate()).
std::optional<Registration> typed_gate(const std::string& op_name, const std::string& overload,
                                       const std::string& device_type) {
  const auto found = typed_gates().find(overload.empty() ? op_name : op_name + "." + overload);
  if (found == typed_gates().end()) return std::nullopt;
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op_name.c_str(), overload.c_str());
  if (handle.hasKernelForDispatchKey(DispatchKey::BackendSelect)) return std::nullopt;   // stands in: boxed
  const auto backend = c10::toBackendComponent(
      c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(device_type)));
  return registered(op_name, overload, found->second(handle, backend));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Registration>(m, "Registration").def("destroy", &Registration::destroy);
  m.def("gate", &gate, "Register the gate at op's BackendSelect key for device_type");
  m.def("typed_gate", &typed_gate, "Register op's typed gate at BackendSelect for device_type, or None");
  m.def("below", [] { return kBelow - DispatchKeySet(kTrampoline); },
        "The keys under BackendSelect but the trampoline: a Python kernel's redispatch");
}
