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
//
// A device call whose fixes would all pass it through need not enter Python either.  Each
// gate holds a Watch, set from Python (_gate.Watch: the union of what its overload's fixes
// look at): the cheap tests of the arguments under which some fix may act (an integer or
// bool tensor, tensors of different dtypes, an empty one, a view, a memory_format ...).  A
// device call that meets none of them is redispatched below at once, as a CPU call is; the
// rest go to the Python kernel.  A new gate watches everything (every device call to Python)
// until Python says what its fixes look at.
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <torch/csrc/Dtype.h>
#include <structmember.h>

#include <atomic>
#include <bitset>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <string>
#include <unordered_map>

// The kernel an operator's dispatch table holds for a key, copied: what a backend gate
// (below) calls once it stands in for that kernel.  The table sits behind OperatorHandle's
// private OperatorDef, and OperatorHandle befriends every std::hash (for its own hash);
// this specialization is that door, and nothing hashes with it.  torch 2.9 has
// getComputedKernelForDispatchKey, but boxed only and bound to the table's current entry.
struct KernelAt {
  const c10::OperatorHandle& op;
  c10::DispatchKey key;
};

template <>
struct std::hash<KernelAt> {
  c10::KernelFunction operator()(const KernelAt& at) const {
    return at.op.operatorDef_->op.lookup(c10::DispatchKeySet(at.key));   // throws where none is
  }
};

namespace {

using c10::DispatchKey;
using c10::DispatchKeySet;

constexpr DispatchKey kTrampoline = DispatchKey::FPGA;
const DispatchKeySet kBelow(DispatchKeySet::FULL_AFTER, DispatchKey::BackendSelect);

// What a gate's fixes look at on a device call (_gate.Watch has the meaning of each bit).
enum : uint32_t {
  kAlways = 1u << 0,      // every device call goes to Python
  kMixed = 1u << 1,       // tensors of rank > 0 of different dtypes
  kEmpty = 1u << 2,       // a tensor with no element
  kView = 1u << 3,        // self anchored (Anchored), or a normal tensor in inference mode
  kOffTarget = 1u << 4,   // tensors on two devices (not wrapped numbers): the CPU, another adapter
  kDeviceArg = 1u << 5,   // a device= argument
  kCatch = 1u << 6,       // an error of the call goes to Python (its retry)
  kFormat = 1u << 7,      // a memory_format= other than preserve_format
  kSetBool = 1u << 8,     // a bool argument that is true (convolution's transposed)
  kMarked = 1u << 9,      // a tensor Python marked (Marked), or a view of one
};

struct Watch {
  std::atomic<uint32_t> flags{kAlways};
  std::atomic<uint64_t> dtypes[2] = {0, 0};   // tensor dtypes and dtype= values watched
  std::atomic<uint64_t> numbers[2] = {0, 0};  // the dtypes of Python numbers (wrapped) watched
  std::atomic<uint64_t> ranks{0};             // tensor ranks watched (bit 63: 63 and more)
  // int_range's law of this overload that the gate applies itself (Law; kNoLaw: none), and
  // what the overload's other fixes look at (a typed gate's; null for the boxed Gate)
  std::atomic<int> law{0};
  std::shared_ptr<Watch> others;

  static bool has(const std::atomic<uint64_t>* bits, c10::ScalarType type) {
    const auto i = static_cast<size_t>(type);
    return i < 128 && ((bits[i / 64].load(std::memory_order_relaxed) >> (i % 64)) & 1u);
  }
  bool dtype(c10::ScalarType type) const { return has(dtypes, type); }
  bool number(c10::ScalarType type) const { return has(numbers, type); }
  bool rank(int64_t dim) const { return (ranks.load(std::memory_order_relaxed) >> std::min<int64_t>(dim, 63)) & 1u; }
};

// A side table keyed by TensorImpl, one Value per tensor, held as long as the tensor lives.
// An entry's weak pointer keeps the TensorImpl's memory (not its storage), so no other
// tensor takes that address while the entry lives; entries whose tensor has gone are swept
// every 4,096 additions.  Thread-safe (a mutex): the autograd engine's threads call kernels.
template <class Value>
class TensorTable {
 public:
  void add(const at::TensorBase& t, Value value) {
    std::lock_guard<std::mutex> guard(lock_);
    if (++added_ % 4096 == 0) {
      for (auto it = entries_.begin(); it != entries_.end();) it = it->second.first.expired() ? entries_.erase(it) : std::next(it);
    }
    entries_.insert_or_assign(t.unsafeGetTensorImpl(), std::make_pair(Weak(t.getIntrusivePtr()), std::move(value)));
  }
  // t's value, or nullopt for a tensor not here
  std::optional<Value> find(const at::TensorBase& t) {
    std::lock_guard<std::mutex> guard(lock_);
    if (entries_.empty()) return std::nullopt;
    const auto found = entries_.find(t.unsafeGetTensorImpl());
    if (found == entries_.end() || found->second.first.expired()) return std::nullopt;
    return found->second.second;
  }
  void remove(const at::TensorBase& t) {
    std::lock_guard<std::mutex> guard(lock_);
    entries_.erase(t.unsafeGetTensorImpl());
  }
  void clear() {
    std::lock_guard<std::mutex> guard(lock_);
    entries_.clear();
  }

 private:
  using Weak = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  std::mutex lock_;
  std::unordered_map<const c10::TensorImpl*, std::pair<Weak, Value>> entries_;
  size_t added_ = 0;
};

// The views whose offset DirectML keeps inside them (patches/offset_views.py: a view op of
// one must be made from its anchor, in Python): view -> its anchor (weakly: the Python fix
// falls back on the view's base) and its offset there, in elements.  Python marks the views
// it makes (mark_anchored), the as_strided gate those it passes on.
struct Anchor {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> anchor;
  int64_t offset;
};

TensorTable<Anchor>& anchored() {
  static auto* table = new TensorTable<Anchor>();   // never destroyed: kernels may run during exit
  return *table;
}

int64_t anchored_offset(const at::Tensor& t) {
  const auto found = anchored().find(t);
  return found ? found->offset : 0;
}

void record_anchor(const at::Tensor& view, const at::Tensor& anchor, int64_t offset) {
  anchored().add(view, Anchor{c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(anchor.getIntrusivePtr()),
                              offset});
}

// The tensors Python marked (mark): a floating tensor whose whole-number span int_range keeps
// (patches/int_range.py), so a sum of it goes to Python while other float sums stay here; a
// mark outlives writes (Python checks the version).
TensorTable<bool>& marked() {
  static auto* table = new TensorTable<bool>();     // never destroyed: kernels may run during exit
  return *table;
}

// t marked or, for a view, its base
bool is_marked(const at::Tensor& t) {
  return marked().find(t) || (t.is_view() && marked().find(t._base()));
}

// The value ranges of integer device tensors (dmlshim/ranges.py keeps each one here too, as
// it keeps it in Python): least, greatest, whether they are the values' own (not a bound),
// and the tensor's version then (a write moves it, and the span is gone).
struct Span {
  int64_t lo, hi;
  bool exact;
  int64_t version;
};

TensorTable<Span>& spans() {
  static auto* table = new TensorTable<Span>();
  return *table;
}

// t's span while its version has not moved; none for an inference tensor (no version)
std::optional<Span> known(const at::Tensor& t) {
  if (t.is_inference()) return std::nullopt;
  auto found = spans().find(t);
  if (!found || found->version != t._version()) return std::nullopt;
  return found;
}

void keep(const at::Tensor& t, int64_t lo, int64_t hi, bool exact) {
  if (t.defined() && !t.is_inference()) spans().add(t, Span{lo, hi, exact, t._version()});
}

// int_range's laws (patches/int_range.py, laws/integers.py) for the integer calls a decode
// loop makes most, decided here where Python would pass the call on unchanged, with the span
// Python would keep (docs/defects.md, int_range).  Any other case (a span not kept, a value
// past the law's exact span, a view, a float or bool number) goes to Python, which reads,
// moves the call or computes it otherwise.
//   kSum, kDifference, kProduct: x + n * alpha, x - n * alpha, x * n, computed in float32 by
//     DirectML (exact within 2**24);
//   kCompare: lt/le/gt/ge with a number, and kUnchanged: clone (int64 reads 32 bits);
//   kOutForm: an out= overload (add.out) that the device's functional kernel (add.Tensor's on
//     the real binary) calls while the gate passes that call on: measured already, it passes
//     too (int_range's _PASSING);
//   kFill: fill_ with a number (the real binary's comparison with one fills a tensor).
enum Law : int { kNoLaw = 0, kSum, kDifference, kProduct, kCompare, kUnchanged, kOutForm, kFill };
constexpr int64_t kFloatExact = int64_t{1} << 24;
constexpr int64_t kBits32 = int64_t{1} << 31;

bool within(int64_t lo, int64_t hi, int64_t bound) { return -bound < lo && hi < bound; }

// the call passes; its result's span kept where record
struct Ruling {
  bool record;
  int64_t lo = 0, hi = 0;
  bool exact = false;       // the values' own span (a fill's), not a bound
};

// a Python int: the wrapped number it became in a Tensor slot, or a Scalar (not a bool,
// float or symbolic one)
std::optional<int64_t> integer(const at::Tensor& t) {
  if (!t.defined() || !t.unsafeGetTensorImpl()->is_wrapped_number() || t.scalar_type() != at::kLong)
    return std::nullopt;
  return *t.const_data_ptr<int64_t>();
}

std::optional<int64_t> integer(const c10::Scalar& s) {
  if (s.isSymbolic() || s.type() != at::kLong) return std::nullopt;
  return s.toLong();
}

// self as the laws take it: a tensor of the target device, not a view (Python keeps a view's
// span apart: ranges.remember_region) and not a wrapped number
bool plain(const at::Tensor& t, c10::DeviceType target) {
  return t.defined() && t.device().type() == target && !t.is_view() &&
         !t.unsafeGetTensorImpl()->is_wrapped_number() && !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

// x + n * alpha, x - n * alpha, x * n of an int32/int64 x: the float32 law (int_range._guarded
// with _number_of's number and integers.assess by the spans kept)
std::optional<Ruling> arithmetic(int law, c10::DeviceType target, const at::Tensor& x, std::optional<int64_t> n,
                                 std::optional<int64_t> alpha) {
  if (!n || !alpha || !plain(x, target) || (x.scalar_type() != at::kInt && x.scalar_type() != at::kLong))
    return std::nullopt;
  const auto span = known(x);
  if (!span || !within(span->lo, span->hi, kFloatExact) || !within(*n, *n, kFloatExact) ||
      !within(*alpha, *alpha, kFloatExact))
    return std::nullopt;
  int64_t lo, hi;
  if (law == kProduct) {
    lo = std::min(span->lo * *n, span->hi * *n);
    hi = std::max(span->lo * *n, span->hi * *n);
  } else {
    const int64_t shift = (law == kSum ? 1 : -1) * *alpha * *n;
    lo = span->lo + shift;
    hi = span->hi + shift;
  }
  if (!within(lo, hi, kFloatExact)) return std::nullopt;
  return Ruling{true, lo, hi};
}

// lt/le/gt/ge of an integer x and a number: int64 reads 32 bits (a span kept within them
// passes; Python casts an unknown one to float32), int32 keeps every bit; a bool result
// keeps no span
std::optional<Ruling> compare(c10::DeviceType target, const at::Tensor& x, std::optional<int64_t> n) {
  if (!n || !plain(x, target)) return std::nullopt;
  if (x.scalar_type() == at::kInt) return Ruling{false};
  const auto span = x.scalar_type() == at::kLong ? known(x) : std::nullopt;
  if (!span || !within(span->lo, span->hi, kBits32) || !within(*n, *n, kBits32)) return std::nullopt;
  return Ruling{false};
}

// clone: int64 reads 32 bits, int32 keeps every bit; the copy's span is its self's (a bound)
std::optional<Ruling> unchanged(c10::DeviceType target, const at::Tensor& x) {
  if (!plain(x, target)) return std::nullopt;
  const auto span = known(x);
  if (x.scalar_type() == at::kInt) return span ? Ruling{true, span->lo, span->hi} : Ruling{false};
  if (x.scalar_type() != at::kLong || !span || !within(span->lo, span->hi, kBits32)) return std::nullopt;
  return Ruling{true, span->lo, span->hi};
}

// fill_ of an int32/int64 tensor with a number it holds: every value that number
// (int_range._spanned's exact span)
std::optional<Ruling> filled(c10::DeviceType target, const at::Tensor& x, std::optional<int64_t> n) {
  if (!n || !plain(x, target)) return std::nullopt;
  const bool fits = x.scalar_type() == at::kLong ||
                    (x.scalar_type() == at::kInt && *n >= std::numeric_limits<int32_t>::min() &&
                     *n <= std::numeric_limits<int32_t>::max());
  if (!fits) return std::nullopt;
  return Ruling{true, *n, *n, true};
}

// The law's ruling on a typed call, by its signature; none (Python) for any other
template <class... A>
std::optional<Ruling> rule(int, c10::DeviceType, const A&...) { return std::nullopt; }

std::optional<Ruling> rule(int law, c10::DeviceType target, const at::Tensor& self, const at::Tensor& other,
                           const c10::Scalar& alpha) {      // add.Tensor, sub.Tensor
  if (law != kSum && law != kDifference) return std::nullopt;
  return arithmetic(law, target, self, integer(other), integer(alpha));
}

std::optional<Ruling> rule(int law, c10::DeviceType target, const at::Tensor& self, const c10::Scalar& other,
                           const c10::Scalar& alpha) {      // add.Scalar, sub.Scalar
  if (law != kSum && law != kDifference) return std::nullopt;
  return arithmetic(law, target, self, integer(other), integer(alpha));
}

std::optional<Ruling> rule(int law, c10::DeviceType target, const at::Tensor& self, const at::Tensor& other) {
  if (law == kProduct) return arithmetic(law, target, self, integer(other), int64_t{1});   // mul.Tensor
  return law == kCompare ? compare(target, self, integer(other)) : std::nullopt;          // lt.Tensor ...
}

std::optional<Ruling> rule(int law, c10::DeviceType target, const at::Tensor& self, const c10::Scalar& other) {
  if (law == kFill) return filled(target, self, integer(other));                         // fill_.Scalar
  if (law == kProduct) return arithmetic(law, target, self, integer(other), int64_t{1});   // mul.Scalar
  return law == kCompare ? compare(target, self, integer(other)) : std::nullopt;          // lt.Scalar ...
}

std::optional<Ruling> rule(int law, c10::DeviceType target, const at::Tensor& self,
                           const std::optional<c10::MemoryFormat>&) {                     // clone
  return law == kUnchanged ? unchanged(target, self) : std::nullopt;
}

// the operator (aten::add) whose functional call this thread's gate is passing on by its law
thread_local const c10::OperatorName* passing = nullptr;

struct Passing {
  const c10::OperatorName* before;
  explicit Passing(const c10::OperatorName* name) : before(passing) { passing = name; }
  ~Passing() { passing = before; }
};

// One pass over a device call's arguments: whether Python must see it.
struct Scan {
  const Watch& watch;
  uint32_t flags;
  c10::DeviceType target;
  bool python = false;
  bool first = true;              // the next tensor is self
  c10::SymInt self_offset{0};
  c10::SymInt delta{0};           // as_strided's storage_offset less self's (kView)
  bool self_inference = false;
  std::optional<c10::Device> device;   // the first tensor's (kOffTarget)
  int8_t dtype = -1;              // the dtype of the tensors of rank > 0 so far (kMixed)

  void tensor(const at::Tensor& t) {
    if (python || !t.defined()) return;
    const auto* impl = t.unsafeGetTensorImpl();
    if (impl->has_symbolic_sizes_strides()) { python = true; return; }   // a tracer's: Python decides
    const bool self = first;
    first = false;
    const auto type = t.scalar_type();
    if (impl->is_wrapped_number()) {                       // a Python number: no device operand
      if (watch.number(type)) python = true;
      return;
    }
    if (watch.dtype(type) || watch.rank(t.dim())) { python = true; return; }
    if ((flags & kMarked) && is_marked(t)) { python = true; return; }
    if (flags & kOffTarget) {
      if (!device) device = t.device();
      else if (t.device() != *device) { python = true; return; }
      if (t.device().type() != target) { python = true; return; }
    }
    if ((flags & kEmpty) && t.numel() == 0) { python = true; return; }
    if ((flags & kMixed) && t.dim() > 0) {
      if (dtype < 0) dtype = static_cast<int8_t>(type);
      else if (dtype != static_cast<int8_t>(type)) { python = true; return; }
    }
    if ((flags & kView) && self) {
      // inference_mode's case (a normal tensor's view in inference mode), offset_views' (a
      // view of an anchored tensor)
      self_inference = t.is_inference();
      if ((!self_inference && c10::InferenceMode::is_enabled()) || anchored_offset(t) != 0) {
        python = true;
        return;
      }
      self_offset = t.sym_storage_offset();
    }
  }
  void visit(const at::Tensor& t) { tensor(t); }
  void visit(const std::optional<at::Tensor>& t) { if (t) tensor(*t); }
  void visit(const at::ITensorListRef& list) { for (const auto& t : list) tensor(t); }
  void visit(const std::optional<c10::SymInt>& offset) {     // as_strided's storage_offset
    if ((flags & kView) && offset) delta = *offset - self_offset;
  }
  void visit(const std::optional<c10::MemoryFormat>& format) {
    if ((flags & kFormat) && format && *format != c10::MemoryFormat::Preserve) python = true;
  }
  void visit(bool value) { if ((flags & kSetBool) && value) python = true; }
  void visit(const std::optional<c10::ScalarType>& type) {   // a dtype= (_to_copy's)
    if (type && watch.dtype(*type)) python = true;
  }
  void visit(const std::optional<c10::Device>& device) {     // a device= (_to_copy's)
    if (device && (flags & kDeviceArg)) python = true;
  }
  template <class T>
  void visit(const T&) {}

  // a boxed call's arguments (schema positions of dtype and memory_format: -1 for none)
  void boxed(const torch::jit::Stack& stack, size_t base, size_t n, int dtype_at, int format_at, int offset_at) {
    for (size_t i = 0; i < n && !python; ++i) {
      const auto& value = stack[base + i];
      const int at = static_cast<int>(i);
      if (value.isTensor()) tensor(value.toTensor());
      else if (value.isTensorList()) { for (const auto& t : value.toTensorVector()) tensor(t); }
      else if (value.isList()) {
        for (const auto& item : value.toListRef()) if (item.isTensor()) tensor(item.toTensor());
      }
      else if (value.isDevice()) { if (flags & kDeviceArg) python = true; }
      else if (at == dtype_at && value.isInt()) {
        if (watch.dtype(static_cast<c10::ScalarType>(value.toInt()))) python = true;
      }
      else if (at == format_at && value.isInt()) {
        if ((flags & kFormat) && value.toInt() != static_cast<int64_t>(c10::MemoryFormat::Preserve)) python = true;
      }
      else if (value.isBool()) visit(value.toBool());
      else if (at == offset_at && !value.isNone() && (flags & kView)) python = true;
    }
  }
};

// What a device call of these typed arguments needs: Python, or (as_strided) the offset
// its view gets inside DirectML's tensor, to be marked.
struct Verdict {
  bool python;
  c10::SymInt delta;
};

// A typed call's self: its first argument where that is a tensor (as_strided's, the views'),
// else nullptr.
template <class First, class... Rest>
const at::Tensor* self_of(const First& first, const Rest&...) {
  if constexpr (std::is_same_v<First, at::Tensor>) return &first;
  else return nullptr;
}

template <class... A>
Verdict verdict(const Watch& watch, c10::DeviceType target, DispatchKeySet ks, const A&... a) {
  const auto flags = watch.flags.load(std::memory_order_relaxed);
  if (flags & kAlways) return {true, 0};
  Scan scan{watch, flags, target};
  (scan.visit(a), ...);
  // a view at an offset is recorded with its self as anchor, held weakly, and the view's
  // base as the Python fix's second choice: an inference tensor's has none, so Python makes it
  if (!scan.python && scan.delta != 0 && (scan.delta.is_heap_allocated() || scan.self_inference))
    return {true, 0};
  return {scan.python, scan.delta};
}

bool writes_an_argument(const c10::FunctionSchema& schema) {
  for (const auto& argument : schema.arguments())
    if (argument.alias_info() && argument.alias_info()->isWrite()) return true;
  return false;
}

int position(const c10::FunctionSchema& schema, const char* name) {
  const auto index = schema.argumentIndexWithName(name);
  return index ? static_cast<int>(*index) : -1;
}

struct Gate final : c10::OperatorKernel {
  Gate(const c10::FunctionSchema& schema, c10::DeviceType device_type, bool always, bool stands_in,
       std::shared_ptr<Watch> watch)
      : backend(c10::toBackendComponent(c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(device_type)))),
        device_type(device_type), always(always),
        stands_in(stands_in), arguments(schema.arguments().size()),
        dtype(position(schema, "dtype")), layout(position(schema, "layout")),
        device(position(schema, "device")), memory_format(position(schema, "memory_format")),
        storage_offset(position(schema, "storage_offset")), writes(writes_an_argument(schema)),
        watch(std::move(watch)) {}

  void operator()(const c10::OperatorHandle& op, DispatchKeySet ks, torch::jit::Stack* stack) {
    const auto base = stack->size() - arguments;
    if (always || ((ks.has_backend(backend) || device_is_target(*stack, base)) && to_python(*stack, base))) {
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

  bool to_python(const torch::jit::Stack& stack, size_t base) const {
    const auto flags = watch->flags.load(std::memory_order_relaxed);
    if (flags & (kAlways | kCatch)) return true;      // a boxed call's arguments are gone after an error
    // in place or out=: the real binary's kernel rebinds the argument it writes to a new tensor
    // (failure_modes.md #65), which reaches the caller only through an unboxed call; the
    // stack here holds a copy, so the Python kernel's written() copies the result back
    if (writes) return true;
    Scan scan{*watch, flags, device_type};
    scan.boxed(stack, base, arguments, dtype, memory_format, storage_offset);
    return scan.python;
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
  int dtype, layout, device, memory_format, storage_offset;
  bool writes;
  std::shared_ptr<Watch> watch;
};

// One registration: destroy() (or the object's end) removes the kernel; watch() sets what
// its fixes look at on a device call.
struct Registration {
  std::unique_ptr<torch::Library> library;
  std::shared_ptr<Watch> watching;
  void destroy() { library.reset(); }
  void watch(uint32_t flags, const py::iterable& dtypes, const py::iterable& numbers, const py::iterable& ranks);
  void ranged(int law, uint32_t flags, const py::iterable& dtypes, const py::iterable& numbers,
              const py::iterable& ranks);
};

struct Quiet final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

Registration gate(const std::string& op_name, const std::string& overload, const std::string& device_type,
                  bool always) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op_name.c_str(), overload.c_str());
  const bool stands_in = handle.hasKernelForDispatchKey(DispatchKey::BackendSelect);
  auto watch = std::make_shared<Watch>();
  auto kernel = std::make_unique<Gate>(handle.schema(), c10::Device(device_type).type(), always, stands_in, watch);
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
  return Registration{std::move(library), std::move(watch)};
}

// The typed gate: the same routing as Gate, unboxed, for the overloads that CPU models
// reach most.  The boxed Gate boxes every call into a Stack and the CPU kernel unboxes it
// again (about 0.15 us a call); this one passes the arguments on as they came, so a CPU
// call pays one more kernel call and a typed redispatch.
template <class Sig>
struct Typed;

template <class R, class... A>
struct Typed<R(A...)> {
  static torch::CppFunction kernel(const c10::OperatorHandle& handle, c10::BackendComponent backend,
                                   c10::DeviceType target, std::shared_ptr<Watch> watch) {
    // typed<>() checks the signature against the operator's C++ one (throws if it differs)
    auto op = handle.typed<R(A...)>();
    c10::OperatorName name(handle.schema().name(), "");     // the operator, whatever the overload
    return torch::CppFunction([op, name, backend, target, watch](DispatchKeySet ks, A... a) -> R {
      const auto below = ks & kBelow;
      if (!ks.has_backend(backend)) return op.redispatch(below, a...);
      const auto python = below | DispatchKeySet(kTrampoline);
      const auto found = verdict(*watch, target, ks, a...);
      if (found.python) {
        // int_range's law decided here, where no other fix of the overload looks at the call
        const int law = watch->law.load(std::memory_order_relaxed);
        if (law != kNoLaw && !verdict(*watch->others, target, ks, a...).python) {
          if constexpr (std::is_same_v<R, at::Tensor>) {
            if (const auto ruling = rule(law, target, a...)) {
              Passing guard(&name);
              auto result = op.redispatch(below, a...);
              if (ruling->record) keep(result, ruling->lo, ruling->hi, false);
              return result;
            }
          } else if constexpr (std::is_same_v<R, at::Tensor&>) {
            if (law == kOutForm && passing && *passing == name) return op.redispatch(below, a...);
            if (law == kFill) {
              if (const auto ruling = rule(law, target, a...)) {
                auto& result = op.redispatch(below, a...);
                keep(result, ruling->lo, ruling->hi, ruling->exact);   // gone once a caller's write moves the version
                return result;
              }
            }
          }
        }
        return op.redispatch(python, a...);
      }
      if constexpr (std::is_same_v<R, at::Tensor>) {
        if (found.delta != 0) {   // as_strided at an offset: the view marked (offset_views)
          auto view = op.redispatch(below, a...);
          record_anchor(view, *self_of(a...), found.delta.guard_int(__FILE__, __LINE__));
          return view;
        }
      }
      if (!(watch->flags.load(std::memory_order_relaxed) & kCatch)) return op.redispatch(below, a...);
      try {
        return op.redispatch(below, a...);
      } catch (const std::exception&) {   // the Python kernel's retry (refused: on the CPU) or its error
        return op.redispatch(python, a...);
      }
    });
  }
};

using at::Tensor;
using c10::Scalar;
using c10::SymIntArrayRef;
using Register = torch::CppFunction (*)(const c10::OperatorHandle&, c10::BackendComponent, c10::DeviceType,
                                        std::shared_ptr<Watch>);

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
using ScalarOut = Tensor&(const Tensor&, const Scalar&, Tensor&);

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
      // the out= kernels the real binary's comparisons with a number reach (int_range's out form)
      {"aten::lt.Scalar_out", typed<ScalarOut>()}, {"aten::le.Scalar_out", typed<ScalarOut>()},
      {"aten::gt.Scalar_out", typed<ScalarOut>()}, {"aten::ge.Scalar_out", typed<ScalarOut>()},
      {"aten::add.Scalar", typed<WithScalarAlpha>()}, {"aten::sub.Scalar", typed<WithScalarAlpha>()},
      {"aten::rsub.Scalar", typed<WithScalarAlpha>()},
      {"aten::mul_.Tensor", typed<InPlace>()}, {"aten::add_.Tensor", typed<InPlaceAlpha>()},
      // the out= kernels torch-directml's structured mul/add/sub/mm/bmm reach: unboxed, so the
      // real binary's rebinding of out (failure_modes.md #65) reaches its caller
      {"aten::mul.out", typed<Tensor&(const Tensor&, const Tensor&, Tensor&)>()},
      {"aten::add.out", typed<Tensor&(const Tensor&, const Tensor&, const Scalar&, Tensor&)>()},
      {"aten::sub.out", typed<Tensor&(const Tensor&, const Tensor&, const Scalar&, Tensor&)>()},
      {"aten::mm.out", typed<Tensor&(const Tensor&, const Tensor&, Tensor&)>()},
      {"aten::bmm.out", typed<Tensor&(const Tensor&, const Tensor&, Tensor&)>()},
      {"aten::sub_.Tensor", typed<InPlaceAlpha>()},
      // the fills torch.ones/zeros/full end in: typed, so a float fill that no fix watches
      // stays in C++ (a boxed gate sends every in-place device call to Python, above)
      {"aten::fill_.Scalar", typed<Tensor&(Tensor&, const Scalar&)>()}, {"aten::zero_", typed<Tensor&(Tensor&)>()},
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

Registration registered(const std::string& op_name, const std::string& overload, torch::CppFunction kernel,
                        std::shared_ptr<Watch> watch) {
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", std::nullopt, __FILE__, __LINE__);
  const auto name = overload.empty() ? op_name.substr(6) : op_name.substr(6) + "." + overload;
  library->impl(name.c_str(), torch::dispatch(DispatchKey::BackendSelect, std::move(kernel)));
  return Registration{std::move(library), std::move(watch)};
}

// The typed gate of op for device_type, or None where it has none (then gate()).
// _to_copy's typed gate (every .to(), .cpu(), .half() ...): it stands in for torch's own
// BackendSelect kernel, so a call it passes on gets what that kernel adds, the key of its
// dtype/layout/device (torch's generated RegisterBackendSelect.cpp does the same).
using ToCopy = Tensor(const Tensor&, std::optional<c10::ScalarType>, std::optional<c10::Layout>,
                      std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>);

torch::CppFunction to_copy_gate(const c10::OperatorHandle& handle, c10::BackendComponent backend,
                                c10::DeviceType target, std::shared_ptr<Watch> watch) {
  auto op = handle.typed<ToCopy>();
  return torch::CppFunction([op, backend, target, watch](
                                DispatchKeySet ks, const Tensor& self, std::optional<c10::ScalarType> dtype,
                                std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                std::optional<bool> pin, bool non_blocking,
                                std::optional<c10::MemoryFormat> format) -> Tensor {
    const bool mine = ks.has_backend(backend) || (device && device->type() == target);
    if (mine && verdict(*watch, target, ks, self, dtype, layout, device, pin, non_blocking, format).python)
      return op.redispatch((ks & kBelow) | DispatchKeySet(kTrampoline), self, dtype, layout, device, pin,
                           non_blocking, format);
    const auto keys = (ks | DispatchKeySet(c10::computeDispatchKey(dtype, layout, device))) -
                      c10::impl::tls_local_dispatch_key_set().excluded_;
    return op.redispatch(keys & kBelow, self, dtype, layout, device, pin, non_blocking, format);
  });
}

std::optional<Registration> typed_gate(const std::string& op_name, const std::string& overload,
                                       const std::string& device_type) {
  const auto name = overload.empty() ? op_name : op_name + "." + overload;
  const auto found = typed_gates().find(name);
  const bool to_copy = name == "aten::_to_copy";
  if (found == typed_gates().end() && !to_copy) return std::nullopt;
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op_name.c_str(), overload.c_str());
  const bool stands_in = handle.hasKernelForDispatchKey(DispatchKey::BackendSelect);
  if (stands_in && !to_copy) return std::nullopt;          // stands in for torch's own: boxed
  const auto target = c10::Device(device_type).type();
  const auto backend = c10::toBackendComponent(c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(target)));
  auto watch = std::make_shared<Watch>();
  watch->others = std::make_shared<Watch>();     // before the kernel exists: never changed after
  auto kernel = to_copy ? to_copy_gate(handle, backend, target, watch) : found->second(handle, backend, target, watch);
  static Quiet quiet;                                      // torch's kernel comes back with destroy()
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  return registered(op_name, overload, std::move(kernel), watch);
}

// The backend gate: where every fix of an overload acts only on the device's own calls
// (offset_views' and inference_mode's view fixes), the gate stands in for the device's kernel
// at its backend key (PrivateUse1) instead of sitting at BackendSelect, which every device's
// calls pass: a CPU or CUDA call of the overload then meets nothing of dmlshim's.  It holds
// the kernel it replaced (KernelAt) and calls it for a call none of the fixes watches; the rest
// go to the Python kernel at the trampoline, and that kernel's redispatch below comes back
// here, so a call sent to Python is remembered (InPython) and its own redispatch runs the
// kernel replaced.  destroy() puts that kernel back.
struct InPython {
  static thread_local const InPython* current;
  size_t op;
  const c10::TensorImpl* self;
  const InPython* outer;
  InPython(size_t op, const c10::TensorImpl* self) : op(op), self(self), outer(current) { current = this; }
  ~InPython() { current = outer; }
  // the call below is the one Python holds: its redispatch past the fixes
  static bool below(size_t op, const c10::TensorImpl* self) {
    return current != nullptr && current->op == op && current->self == self;
  }
};
thread_local const InPython* InPython::current = nullptr;

template <class Sig>
struct AtBackend;

template <class R, class... A>
struct AtBackend<R(A...)> {
  static torch::CppFunction kernel(const c10::OperatorHandle& handle, c10::KernelFunction replaced,
                                   c10::DeviceType target, std::shared_ptr<Watch> watch) {
    auto op = handle.typed<R(A...)>();
    const size_t id = std::hash<c10::OperatorHandle>{}(handle);
    return torch::CppFunction([op, replaced, id, target, watch](DispatchKeySet ks, A... a) -> R {
      const auto* first = self_of(a...);
      const auto* self = first ? first->unsafeGetTensorImpl() : nullptr;
      if (InPython::below(id, self)) return replaced.template call<R, A...>(op, ks, a...);
      const auto found = verdict(*watch, target, ks, a...);
      if (found.python) {
        InPython held(id, self);
        return op.redispatch(ks | DispatchKeySet(kTrampoline), a...);
      }
      if constexpr (std::is_same_v<R, at::Tensor>) {
        if (found.delta != 0) {   // as_strided at an offset: the view marked (offset_views)
          auto view = replaced.template call<R, A...>(op, ks, a...);
          record_anchor(view, *self_of(a...), found.delta.guard_int(__FILE__, __LINE__));
          return view;
        }
      }
      return replaced.template call<R, A...>(op, ks, a...);
    });
  }
};

// The boxed backend gate: the overloads with no typed one (split's list of views, unfold).
struct BoxedAtBackend final : c10::OperatorKernel {
  BoxedAtBackend(const c10::FunctionSchema& schema, c10::KernelFunction replaced, c10::DeviceType target,
                 std::shared_ptr<Watch> watch)
      : replaced(std::move(replaced)), target(target), arguments(schema.arguments().size()),
        storage_offset(position(schema, "storage_offset")), watch(std::move(watch)) {}

  void operator()(const c10::OperatorHandle& op, DispatchKeySet ks, torch::jit::Stack* stack) {
    const auto base = stack->size() - arguments;
    const auto& first = (*stack)[base];
    const auto* self = first.isTensor() ? first.toTensor().unsafeGetTensorImpl() : nullptr;
    const size_t id = std::hash<c10::OperatorHandle>{}(op);
    if (!InPython::below(id, self) && to_python(*stack, base)) {
      InPython held(id, self);
      op.redispatchBoxed(ks | DispatchKeySet(kTrampoline), stack);
      return;
    }
    replaced.callBoxed(op, ks, stack);
  }

  bool to_python(const torch::jit::Stack& stack, size_t base) const {
    const auto flags = watch->flags.load(std::memory_order_relaxed);
    if (flags & (kAlways | kCatch)) return true;
    Scan scan{*watch, flags, target};
    scan.boxed(stack, base, arguments, -1, -1, storage_offset);
    return scan.python;
  }

  c10::KernelFunction replaced;
  c10::DeviceType target;
  size_t arguments;
  int storage_offset;
  std::shared_ptr<Watch> watch;
};

using AtBackendRegister = torch::CppFunction (*)(const c10::OperatorHandle&, c10::KernelFunction, c10::DeviceType,
                                                 std::shared_ptr<Watch>);

template <class Sig>
AtBackendRegister at_backend() {
  return &AtBackend<Sig>::kernel;
}

// the view family's typed backend gates (the calls CPU models make most); the rest boxed
const std::unordered_map<std::string, AtBackendRegister>& typed_backend_gates() {
  static const std::unordered_map<std::string, AtBackendRegister> gates{
      {"aten::view", at_backend<Sizes>()}, {"aten::_unsafe_view", at_backend<Sizes>()},
      {"aten::_reshape_alias", at_backend<Strided>()},
      {"aten::as_strided",
       at_backend<Tensor(const Tensor&, SymIntArrayRef, SymIntArrayRef, std::optional<c10::SymInt>)>()},
  };
  return gates;
}

// The backend gate of op for device_type, or None where the device has no kernel of its own
// for it: a backend fallback or a composite serves it there, and a kernel in its place would
// change that (a CompositeImplicitAutograd op's autograd key, a fallback that registers a
// kernel on an op's first call over the gate: the emulator's).
std::optional<Registration> backend_gate(const std::string& op_name, const std::string& overload,
                                         const std::string& device_type) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op_name.c_str(), overload.c_str());
  const auto target = c10::Device(device_type).type();
  const auto key = c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(target));
  if (!handle.hasKernelForDispatchKey(key)) return std::nullopt;
  c10::KernelFunction replaced;
  try {
    replaced = std::hash<KernelAt>{}(KernelAt{handle, key});
  } catch (const c10::Error&) {
    return std::nullopt;
  }
  auto watch = std::make_shared<Watch>();
  const auto name = overload.empty() ? op_name : op_name + "." + overload;
  const auto typed = typed_backend_gates().find(name);
  auto kernel = typed != typed_backend_gates().end()
                    ? typed->second(handle, std::move(replaced), target, watch)
                    : torch::CppFunction::makeFromBoxedFunctor(
                          std::make_unique<BoxedAtBackend>(handle.schema(), std::move(replaced), target, watch));
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", std::nullopt, __FILE__, __LINE__);
  static Quiet quiet;                                      // the device's kernel comes back with destroy()
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  library->impl(name.substr(6).c_str(), torch::dispatch(key, std::move(kernel)));
  return Registration{std::move(library), std::move(watch)};
}

// The front: the compiled counterpart of dmlshim's Python-level wrappers (torch.cat,
// Tensor.__mul__, auto's 2,700 ...).  Every one of them acts only on a call that holds a
// tensor off the CPU, a CPU island (a Tensor subclass), a dtype the device cannot hold, or
// an argument that names a device (a str, a torch.device); a call whose arguments are all
// plain CPU values (CPU tensors of held dtypes, numbers, None, held dtypes, tuples and
// lists of these) is passed through by each.  The front tests that in C and calls the
// original under every dmlshim layer; any other call goes to the Python wrapper.  A wrapper
// that also passes through device tensors of the target device unless they are of some
// dtypes or empty (its select: mul's looks for a bool, cat's for an empty input) gives its
// front a device mode: such a call runs the original too, under the wrapper's guard.
using Invoke = PyObject* (*)(PyObject*, PyObject* const*, size_t, PyObject*);

struct Front {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fast;     // the original: what a plain call runs
  // fast's C function where fast is a builtin (METH_FASTCALL | METH_KEYWORDS, torch's
  // generated bindings): called at once, as CPython's specialized call of it does
  Invoke invoke;
  PyObject* owner;    // a function's __self__ (its module), a method's class (its self's check)
  PyObject* slow;     // dmlshim's Python wrapper: every other call
  // device mode (None/NULL without): a call whose only other values are tensors of the
  // target device that its wrapper would pass through runs the original too, under the
  // wrapper's guard (auto's: its memo sends every call to the wrapper once it holds
  // something; an error in catch goes to failed(original, args, kwargs, error))
  PyObject* device;   // the Python spec (target, flags, dtypes, memo, catch, failed), or None
  PyObject* memo;
  PyObject* catches;
  PyObject* failed;
  int target;         // the device type of device mode, -1: none
  uint32_t flags;     // kEmpty
  std::bitset<128> dtypes;   // a device tensor of one of these: the wrapper's call
  PyObject* weakrefs;        // a function can be weakly referenced (torch._dynamo's guards do)
};

std::bitset<128> special_dtypes;   // the dtypes a plain call holds none of (islands.SPECIAL)

enum Kind { kPlain, kDevice, kOther };

// A CPU value every wrapper passes through (kPlain), a device tensor the front's wrapper
// passes through in device mode (kDevice), or anything else (kOther).
Kind kind(const Front* front, PyObject* x, int depth) {
  if (THPVariable_CheckExact(x)) {
    const auto& t = THPVariable_Unpack(x);
    if (t.layout() != c10::kStrided) return kOther;
    const auto type = static_cast<size_t>(t.scalar_type());
    if (special_dtypes.test(type)) return kOther;
    if (t.is_cpu()) return kPlain;
    if (static_cast<int>(t.device().type()) != front->target || front->dtypes.test(type)) return kOther;
    if ((front->flags & kEmpty) && t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return kOther;
    if ((front->flags & kEmpty) && t.numel() == 0) return kOther;
    return kDevice;
  }
  if (x == Py_None || PyLong_CheckExact(x) || PyFloat_CheckExact(x) || PyBool_Check(x)) return kPlain;
  if (THPDtype_Check(x)) return special_dtypes.test(static_cast<size_t>(((THPDtype*)x)->scalar_type)) ? kOther : kPlain;
  if ((PyTuple_Check(x) || PyList_Check(x)) && depth < 2) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
    PyObject** items = PySequence_Fast_ITEMS(x);
    Kind all = kPlain;
    for (Py_ssize_t i = 0; i < n; ++i) {
      const Kind k = kind(front, items[i], depth + 1);
      if (k == kOther) return kOther;
      if (k == kDevice) all = kDevice;
    }
    return all;
  }
  return kOther;
}

// kind()'s commonest plain values, tested inline: an int, or an exact CPU strided tensor of
// a held dtype (a call through kind() for each costs a CPU view about 0.015 us).
inline bool plain_at_a_glance(PyObject* x) {
  const PyTypeObject* type = Py_TYPE(x);
  if (type == &PyLong_Type) return true;
  if (type != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return false;
  const auto* impl = THPVariable_Unpack(x).unsafeGetTensorImpl();
  return impl->is_cpu() && impl->layout() == c10::kStrided &&
         !special_dtypes.test(static_cast<size_t>(c10::typeMetaToScalarType(impl->dtype())));
}

// An error of a device call the guard handles: failed(original, args, kwargs, error).
PyObject* guarded_failure(Front* front, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (!PyErr_ExceptionMatches(front->catches)) return nullptr;
  PyObject *type, *error, *traceback;
  PyErr_Fetch(&type, &error, &traceback);
  PyErr_NormalizeException(&type, &error, &traceback);
  if (traceback) PyException_SetTraceback(error, traceback);
  const auto n = PyVectorcall_NARGS(nargsf);
  PyObject* positional = PyTuple_New(n);
  PyObject* keywords = PyDict_New();
  PyObject* result = nullptr;
  if (positional && keywords) {
    for (Py_ssize_t i = 0; i < n; ++i) PyTuple_SET_ITEM(positional, i, Py_NewRef(args[i]));
    bool ok = true;
    for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames) && ok; ++i)
      ok = PyDict_SetItem(keywords, PyTuple_GET_ITEM(kwnames, i), args[n + i]) == 0;
    if (ok) result = PyObject_CallFunctionObjArgs(front->failed, front->fast, positional, keywords, error, nullptr);
  }
  Py_XDECREF(positional);
  Py_XDECREF(keywords);
  Py_XDECREF(type);
  Py_XDECREF(error);
  Py_XDECREF(traceback);
  return result;
}

// An out= keyword: out_resize's (a device out= sized before the call), in every device mode.
bool has_out(PyObject* kwnames) {
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); ++i)
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "out") == 0) return true;
  return false;
}

// The original, called as CPython's specialized call of a builtin or method descriptor
// does (no second vectorcall, no recursion check): a CPU view's front 0.033 -> 0.013 us.
PyObject* call_fast(Front* front, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (front->invoke) return front->invoke(reinterpret_cast<PyObject*>(front), args, nargsf, kwnames);
  return PyObject_Vectorcall(front->fast, args, nargsf, kwnames);
}

using FastWithKeywords = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*);

PyObject* invoke_function(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* front = reinterpret_cast<Front*>(self);
  auto meth = reinterpret_cast<FastWithKeywords>(reinterpret_cast<void*>(PyCFunction_GET_FUNCTION(front->fast)));
  return meth(front->owner, args, PyVectorcall_NARGS(nargsf), kwnames);
}

PyObject* invoke_method(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* front = reinterpret_cast<Front*>(self);
  const auto n = PyVectorcall_NARGS(nargsf);
  // the descriptor's own check of its self (a tensor); anything else gets its error
  if (n < 1 || !PyObject_TypeCheck(args[0], reinterpret_cast<PyTypeObject*>(front->owner)))
    return PyObject_Vectorcall(front->fast, args, nargsf, kwnames);
  auto* def = reinterpret_cast<PyMethodDescrObject*>(front->fast)->d_method;
  return reinterpret_cast<FastWithKeywords>(reinterpret_cast<void*>(def->ml_meth))(args[0], args + 1, n - 1, kwnames);
}

// How the front calls fast: at once where it is a builtin or method descriptor of the
// fast-with-keywords convention, else by vectorcall (nullptr).
Invoke invoker(PyObject* fast, PyObject** owner) {
  constexpr int kConvention = METH_FASTCALL | METH_KEYWORDS;
  if (PyCFunction_CheckExact(fast) && (PyCFunction_GET_FLAGS(fast) & (kConvention | METH_METHOD)) == kConvention) {
    *owner = PyCFunction_GET_SELF(fast);
    return invoke_function;
  }
  if (Py_IS_TYPE(fast, &PyMethodDescr_Type)) {
    auto* descr = reinterpret_cast<PyMethodDescrObject*>(fast);
    if ((descr->d_method->ml_flags & (kConvention | METH_METHOD | METH_CLASS | METH_STATIC)) == kConvention) {
      *owner = reinterpret_cast<PyObject*>(PyDescr_TYPE(descr));
      return invoke_method;
    }
  }
  return nullptr;
}

PyObject* front_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* front = reinterpret_cast<Front*>(self);
  const auto n = PyVectorcall_NARGS(nargsf) + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  bool device = false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (plain_at_a_glance(args[i])) continue;
    const Kind k = kind(front, args[i], 0);
    if (k == kOther) return PyObject_Vectorcall(front->slow, args, nargsf, kwnames);
    device = device || k == kDevice;
  }
  if (!device) return call_fast(front, args, nargsf, kwnames);
  if (front->target < 0 || has_out(kwnames)) return PyObject_Vectorcall(front->slow, args, nargsf, kwnames);
  if (front->memo) {                         // auto's memo: some calls of the op go to the CPU
    const int remembers = PyObject_IsTrue(front->memo);
    if (remembers != 0) return remembers < 0 ? nullptr : PyObject_Vectorcall(front->slow, args, nargsf, kwnames);
  }
  PyObject* result = call_fast(front, args, nargsf, kwnames);
  if (result || !front->failed) return result;
  return guarded_failure(front, args, nargsf, kwnames);
}

void set_bits(std::bitset<128>& bits, PyObject* dtypes) {
  PyObject* items = PySequence_Fast(dtypes, "Front: dtypes must be a sequence");
  if (!items) throw py::error_already_set();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); ++i) {
    PyObject* dtype = PySequence_Fast_GET_ITEM(items, i);
    if (THPDtype_Check(dtype)) bits.set(static_cast<size_t>(((THPDtype*)dtype)->scalar_type));
  }
  Py_DECREF(items);
}

// Front(fast, slow[, device]): device = (target device type str, flags, dtypes, memo, catch,
// failed), or None.
PyObject* front_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *fast, *slow, *device = Py_None;
  if (!PyArg_ParseTuple(args, "OO|O:Front", &fast, &slow, &device)) return nullptr;
  const char* target = nullptr;
  unsigned int flags = 0;
  PyObject *dtypes = nullptr, *memo = nullptr, *catches = nullptr, *failed = nullptr;
  if (device != Py_None && !PyArg_ParseTuple(device, "sIOOOO:Front device", &target, &flags, &dtypes, &memo,
                                             &catches, &failed))
    return nullptr;
  auto* front = reinterpret_cast<Front*>(type->tp_alloc(type, 0));
  if (!front) return nullptr;
  new (&front->dtypes) std::bitset<128>();
  front->vectorcall = front_call;
  front->fast = Py_NewRef(fast);
  front->owner = nullptr;
  front->invoke = invoker(fast, &front->owner);   // owner borrowed: fast holds it
  front->slow = Py_NewRef(slow);
  front->device = Py_NewRef(device);
  front->target = -1;
  if (target) {
    try {
      front->target = static_cast<int>(c10::Device(target).type());
      set_bits(front->dtypes, dtypes);
    } catch (...) {
      Py_DECREF(front);
      PyErr_SetString(PyExc_ValueError, "Front: a device type and a sequence of dtypes expected");
      return nullptr;
    }
    front->flags = flags;
    front->memo = memo == Py_None ? nullptr : Py_NewRef(memo);
    front->catches = catches == Py_None ? nullptr : Py_NewRef(catches);
    front->failed = failed == Py_None || !front->catches ? nullptr : Py_NewRef(failed);
  }
  return reinterpret_cast<PyObject*>(front);
}

int front_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* front = reinterpret_cast<Front*>(self);
  Py_VISIT(front->fast);
  Py_VISIT(front->slow);
  Py_VISIT(front->device);
  Py_VISIT(front->memo);
  Py_VISIT(front->catches);
  Py_VISIT(front->failed);
  return 0;
}

int front_clear(PyObject* self) {
  auto* front = reinterpret_cast<Front*>(self);
  Py_CLEAR(front->fast);
  Py_CLEAR(front->slow);
  Py_CLEAR(front->device);
  Py_CLEAR(front->memo);
  Py_CLEAR(front->catches);
  Py_CLEAR(front->failed);
  return 0;
}

void front_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  if (reinterpret_cast<Front*>(self)->weakrefs) PyObject_ClearWeakRefs(self);
  front_clear(self);
  Py_TYPE(self)->tp_free(self);
}

// Bound like a Python function: Tensor.mul on a tensor is a method of it.
PyObject* front_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

// The wrapper's attributes are the front's (__name__, __wrapped__, __doc__, ...), __class__
// too: a front reads as the Python function it stands in front of (isinstance() and
// inspect.isfunction() are True: torch._dynamo's substitute_in_graph wants a function);
// its own few are its type's.
bool own(PyObject* name) {
  static const char* const names[] = {"__dmlshim_fast__", "__dmlshim_slow__", "__dmlshim_device__", "__reduce__",
                                      "__reduce_ex__"};
  for (const char* own_name : names)
    if (PyUnicode_CompareWithASCIIString(name, own_name) == 0) return true;
  return false;
}

PyObject* front_getattro(PyObject* self, PyObject* name) {
  if (own(name)) return PyObject_GenericGetAttr(self, name);
  return PyObject_GetAttr(reinterpret_cast<Front*>(self)->slow, name);
}

int front_setattro(PyObject* self, PyObject* name, PyObject* value) {
  return PyObject_SetAttr(reinterpret_cast<Front*>(self)->slow, name, value);
}

PyObject* front_repr(PyObject* self) { return PyObject_Repr(reinterpret_cast<Front*>(self)->slow); }

// pickled as the original is (a builtin: by its name, which then finds the front)
PyObject* front_reduce(PyObject* self, PyObject*) {
  return PyObject_CallMethod(reinterpret_cast<Front*>(self)->fast, "__reduce__", nullptr);
}

PyMemberDef front_members[] = {
    {"__dmlshim_fast__", T_OBJECT, offsetof(Front, fast), READONLY, nullptr},
    {"__dmlshim_slow__", T_OBJECT, offsetof(Front, slow), READONLY, nullptr},
    {"__dmlshim_device__", T_OBJECT, offsetof(Front, device), READONLY, nullptr},
    {nullptr}};
PyMethodDef front_methods[] = {{"__reduce__", front_reduce, METH_NOARGS, nullptr}, {nullptr}};

PyTypeObject FrontType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* front_type() {
  if (FrontType.tp_name == nullptr) {
    FrontType.tp_name = "dmlshim.Front";
    FrontType.tp_basicsize = sizeof(Front);
    FrontType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                         Py_TPFLAGS_METHOD_DESCRIPTOR;
    FrontType.tp_vectorcall_offset = offsetof(Front, vectorcall);
    FrontType.tp_weaklistoffset = offsetof(Front, weakrefs);
    FrontType.tp_call = PyVectorcall_Call;
    FrontType.tp_new = front_new;
    FrontType.tp_dealloc = front_dealloc;
    FrontType.tp_traverse = front_traverse;
    FrontType.tp_clear = front_clear;
    FrontType.tp_descr_get = front_get;
    FrontType.tp_getattro = front_getattro;
    FrontType.tp_setattro = front_setattro;
    FrontType.tp_repr = front_repr;
    FrontType.tp_members = front_members;
    FrontType.tp_methods = front_methods;
    if (PyType_Ready(&FrontType) < 0) throw py::error_already_set();
  }
  return reinterpret_cast<PyObject*>(&FrontType);
}

void set_special(const py::iterable& dtypes) {
  special_dtypes.reset();
  for (const auto& dtype : dtypes) {
    if (!THPDtype_Check(dtype.ptr())) throw py::type_error("special dtypes: torch.dtype expected");
    special_dtypes.set(static_cast<size_t>(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type));
  }
}

void set_bits(std::atomic<uint64_t>* bits, const py::iterable& dtypes) {
  uint64_t set[2] = {0, 0};
  for (const auto& dtype : dtypes) {
    if (!THPDtype_Check(dtype.ptr())) throw py::type_error("watch: torch.dtype expected");
    const auto i = static_cast<size_t>(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
    if (i >= 128) throw py::value_error("watch: dtype index past 127");
    set[i / 64] |= uint64_t{1} << (i % 64);
  }
  bits[0].store(set[0]);
  bits[1].store(set[1]);
}

void set_watch(Watch& watch, uint32_t flags, const py::iterable& dtypes, const py::iterable& numbers,
               const py::iterable& ranks) {
  uint64_t rank_bits = 0;
  for (const auto& rank : ranks) rank_bits |= uint64_t{1} << std::min<int64_t>(rank.cast<int64_t>(), 63);
  watch.flags.store(kAlways);                      // every call to Python while the rest changes
  set_bits(watch.dtypes, dtypes);
  set_bits(watch.numbers, numbers);
  watch.ranks.store(rank_bits);
  watch.flags.store(flags);
}

void Registration::watch(uint32_t flags, const py::iterable& dtypes, const py::iterable& numbers,
                         const py::iterable& ranks) {
  set_watch(*watching, flags, dtypes, numbers, ranks);
}

// A typed gate's int_range law and what the overload's other fixes look at (the boxed Gate
// has neither: nothing to set)
void Registration::ranged(int law, uint32_t flags, const py::iterable& dtypes, const py::iterable& numbers,
                          const py::iterable& ranks) {
  if (!watching->others) return;
  if (law < kNoLaw || law > kFill) throw py::value_error("ranged: law out of range");
  watching->law.store(kNoLaw);                    // no law while the others' watch changes
  set_watch(*watching->others, flags, dtypes, numbers, ranks);
  watching->law.store(law);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Registration>(m, "Registration")
      .def("destroy", &Registration::destroy)
      .def("watch", &Registration::watch, "What the fixes look at on a device call: flags (_gate.Watch), dtypes, numbers' dtypes")
      .def("ranged", &Registration::ranged,
           "int_range's law the gate applies itself (0: none), and what the other fixes look at (as watch)");
  m.def("gate", &gate, "Register the gate at op's BackendSelect key for device_type");
  m.def("typed_gate", &typed_gate, "Register op's typed gate at BackendSelect for device_type, or None");
  m.def("backend_gate", &backend_gate,
        "Register op's gate at device_type's backend key, in place of the kernel there, or None");
  m.attr("Front") = py::handle(front_type());
  m.def("mark_anchored", [](const at::Tensor& view, const at::Tensor& anchor, int64_t offset) {
          record_anchor(view, anchor, offset);
        }, "Mark view as holding offset (elements) of anchor inside DirectML's tensor (offset_views)");
  m.def("mark", [](const at::Tensor& t) { marked().add(t, true); },
        "Mark t: a watch with kMarked sends a device call of it (or of a view of it) to Python");
  m.def("anchored", [](const at::Tensor& t) {
          const auto found = anchored().find(t);
          auto anchor = found ? found->anchor.lock() : c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>();
          const int64_t offset = found ? found->offset : 0;
          return std::make_tuple(anchor ? py::cast(at::Tensor(std::move(anchor))) : py::none(), offset);
        }, "(anchor or None where it has gone, offset) that mark_anchored or the as_strided gate gave t; offset 0: none");
  m.def("set_special", &set_special, "The dtypes a plain call (the front's fast path) holds none of");
  m.def("span_set", [](const at::Tensor& t, int64_t lo, int64_t hi, bool exact) { keep(t, lo, hi, exact); },
        "Keep t's span (least, greatest; exact: its values' own) until its version moves (ranges.remember)");
  m.def("span_get", [](const at::Tensor& t) -> py::object {
          const auto span = known(t);
          if (!span) return py::none();
          return py::make_tuple(py::make_tuple(span->lo, span->hi), span->exact);
        }, "((least, greatest), exact) kept for t at its version, or None");
  m.def("span_drop", [](const at::Tensor& t) { spans().remove(t); }, "Drop t's span");
  m.def("span_clear", [] { spans().clear(); }, "Drop every span");
  m.def("below", [] { return kBelow - DispatchKeySet(kTrampoline); },
        "The keys under BackendSelect but the trampoline: a Python kernel's redispatch");
}
