// ttpipe_bridge_ttnn.cpp: the C ABI of ../ttpipe_bridge.h over TTNN (tt-metal), for Tenstorrent hardware.
//
// One short function per ABI entry; each calls the TTNN op that does the job. Tensors are TTNN mesh
// tensors on a submesh (a MeshDevice from create_submeshes): TTNN's shape of a mesh tensor is the
// per-device shape, which is the ABI's local shape, and TTNN ops run SPMD on every device, as the ABI
// requires. Where a kernel needs per-device data the ops cannot derive (vocab-parallel offsets, causal
// masks and rope tables over a sharded sequence, the dropout mask of the logical index), it is built on
// the host, one shard per device, and sent with from_host_shards. README.md lists what stays on the host.
//
// Compile-checked (not linked, not run) against tt-metal 79925a3f05fa5d970f4ae3c837aa32ca09f13eaf and
// 622c6fb9c08b88e8fe05eb8a8194974c05fff618's headers with g++ 12 and clang 19, outside ttpipe's CI (which has
// no tt-metal): see README.md for what was checked and what was not. The reference implementation
// (../reference) is the executable specification: on hardware, run ttpipe's contract suite against this
// library (-Dttpipe.bridge.library=...) before trusting it.
//
// Errors: every entry runs under guarded(), which turns TTNN's exceptions (TT_FATAL, TT_THROW) into a
// status and a thread-local message; nothing escapes into the JVM. One mutex serialises the entries
// (host-side dispatch only; the devices still run asynchronously); ttpipe_socket_recv waits on it.
//
// All or nothing: an entry computes every result first (stage(): TTNN ops, dtype casts, reshapes, shape
// checks, handles issued) and only then writes them into the caller's outputs (publish(): ttnn::assign of
// tensors already of the output's shape and dtype), so an exception thrown on the host leaves the outputs
// as they were.

#include "../ttpipe_bridge.h"

#ifndef TTPIPE_TT_METAL_DESCRIBE
#define TTPIPE_TT_METAL_DESCRIBE "tt-metal, revision unknown"
#endif
#ifndef TTPIPE_SOCKET_FIFO_BYTES
#define TTPIPE_SOCKET_FIFO_BYTES (64 * 1024)
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <tt-metalium/experimental/sockets/mesh_socket.hpp>
#include "ttnn/distributed/api.hpp"
#include "ttnn/distributed/distributed_tensor.hpp"
#include "ttnn/operations/ccl/all_gather/all_gather.hpp"
#include "ttnn/operations/ccl/all_reduce/all_reduce.hpp"
#include "ttnn/operations/ccl/reduce_scatter/reduce_scatter.hpp"
#include "ttnn/operations/copy/typecast/typecast.hpp"
#include "ttnn/operations/core/core.hpp"
#include "ttnn/operations/creation/creation.hpp"
#include "ttnn/operations/data_movement/copy/copy.hpp"
#include "ttnn/operations/data_movement/permute/permute.hpp"
#include "ttnn/operations/data_movement/reshape_view/reshape.hpp"
#include "ttnn/operations/eltwise/binary/binary.hpp"
#include "ttnn/operations/eltwise/ternary/ternary.hpp"
#include "ttnn/operations/eltwise/unary/unary.hpp"
#include "ttnn/operations/eltwise/unary_backward/unary_backward.hpp"
#include "ttnn/operations/embedding/embedding.hpp"
#include "ttnn/operations/embedding_backward/embedding_backward.hpp"
#include "ttnn/operations/matmul/matmul.hpp"
#include "ttnn/operations/moreh/moreh_layer_norm/moreh_layer_norm.hpp"
#include "ttnn/operations/moreh/moreh_layer_norm_backward/moreh_layer_norm_backward.hpp"
#include "ttnn/operations/normalization/softmax/softmax.hpp"
#include "ttnn/operations/reduction/generic/generic_reductions.hpp"
#include "ttnn/tensor/tensor.hpp"
#include "ttnn/tensor/tensor_ops.hpp"

// Three headers that tt-metal 79925a3f does not install with the TT-NN package (repeat_interleave.hpp goes
// only to the JIT kernel tree under libexec; send_async.hpp and recv_async.hpp are in no FILE_SET), though
// _ttnncpp.so defines the functions: CMakeLists.txt puts the source checkout's ttnn/cpp on the include path
// for them (TTPIPE_TT_METAL_SOURCE_DIR, by default $TT_METAL_HOME).
#include "ttnn/operations/data_movement/repeat_interleave/repeat_interleave.hpp"
#include "ttnn/operations/experimental/ccl/send_recv_async/send_async/send_async.hpp"
#include "ttnn/operations/experimental/ccl/send_recv_async/recv_async/recv_async.hpp"

namespace {

using ttnn::Tensor;
using MeshDevice = tt::tt_metal::distributed::MeshDevice;
using MeshSocket = tt::tt_metal::distributed::MeshSocket;

// ---- errors and the entry guard ------------------------------------------------------------------

struct Submesh;

thread_local std::string t_error;
thread_local const char* t_fn = "ttpipe";
thread_local int64_t t_oom[4] = {-1, -1, -1, -1};
thread_local Submesh* t_submesh;                      // where the entry allocates: for ttpipe_last_oom
thread_local std::unique_lock<std::mutex>* t_lock;    // the entry's hold on g_mutex (ttpipe_socket_recv waits)
std::mutex g_mutex;
std::condition_variable g_socket_changed;  // a tensor was sent, or a socket or mesh closed

struct BridgeError : std::runtime_error {
    int status;
    BridgeError(int s, const std::string& m) : std::runtime_error(m), status(s) {}
};

[[noreturn]] void fail(int status, const std::string& message) { throw BridgeError(status, message); }

void require(bool ok, const std::string& message) {
    if (!ok) fail(TTPIPE_E_INVALID_ARGUMENT, message);
}

void record_oom(const std::string& what);

template <class F>
int32_t guarded(const char* fn, F&& body) {
    std::unique_lock<std::mutex> lock(g_mutex);
    t_fn = fn;
    t_submesh = nullptr;
    t_lock = &lock;
    int32_t status = TTPIPE_OK;
    try {
        body();
    } catch (const BridgeError& e) {
        t_error = std::string(fn) + ": " + e.what();
        status = e.status;
    } catch (const std::exception& e) {
        std::string what = e.what();
        bool oom = what.find("Out of Memory") != std::string::npos || what.find("out of memory") != std::string::npos;
        if (oom) record_oom(what);
        t_error = std::string(fn) + ": " + what.substr(0, 2000);
        status = oom ? TTPIPE_E_OUT_OF_MEMORY : TTPIPE_E_INTERNAL;
    } catch (...) {
        t_error = std::string(fn) + ": unknown C++ exception";
        status = TTPIPE_E_INTERNAL;
    }
    t_lock = nullptr;
    return status;
}

// ---- objects and the handle table (kind | generation | slot, as the reference) --------------------

enum Kind : uint64_t { K_MESH = 1, K_SUBMESH = 2, K_TENSOR = 3, K_SOCKET = 4 };

struct Mesh;
struct Submesh {
    Mesh* mesh;
    std::shared_ptr<MeshDevice> device;
    int32_t row0, col0, rows, cols;
};
struct Mesh {
    std::shared_ptr<MeshDevice> device;
    int32_t rows, cols;
    std::vector<int64_t> peak;
    std::vector<std::unique_ptr<Submesh>> submeshes;
};
struct TensorObj {
    Submesh* sub;
    int32_t dtype;
    std::vector<int32_t> dims;  // local shape
    Tensor value;               // views share the device buffer (ttnn::reshape of a row-major tensor)
};
struct Spec {
    int32_t dtype;
    std::vector<int32_t> dims;
};
struct SocketObj {
    Submesh* from;
    Submesh* to;
    MeshSocket sender, receiver;
    std::deque<Spec> in_flight;  // what was sent, for the receiver to allocate (MeshSocket carries data only)
};

struct Slot {
    uint32_t gen = 1;
    uint64_t kind = 0;
    void* obj = nullptr;
};
std::vector<Slot> g_slots;
std::vector<uint32_t> g_free;
int64_t g_live = 0;

uint64_t issue(Kind k, void* obj) {
    uint32_t index;
    if (!g_free.empty()) {
        index = g_free.back();
        g_free.pop_back();
    } else {
        require(g_slots.size() < (1u << 24), "handle table full");
        index = static_cast<uint32_t>(g_slots.size());
        g_slots.emplace_back();
    }
    g_slots[index].kind = k;
    g_slots[index].obj = obj;
    g_live++;
    return (static_cast<uint64_t>(k) << 56) | (static_cast<uint64_t>(g_slots[index].gen) << 24) | (index + 1);
}

// The object behind h, or null when h is not a live handle of kind k.
template <class T>
T* find(uint64_t h, Kind k) {
    uint64_t index1 = h & 0xFFFFFF;
    if (h == 0 || (h >> 56) != k || index1 == 0 || index1 > g_slots.size()) return nullptr;
    Slot& s = g_slots[index1 - 1];
    return s.kind == k && s.gen == static_cast<uint32_t>(h >> 24) ? static_cast<T*>(s.obj) : nullptr;
}

template <class T>
T* get(uint64_t h, Kind k, const char* what) {
    if (h == 0) fail(TTPIPE_E_INVALID_HANDLE, std::string(what) + " is the null handle");
    uint64_t index1 = h & 0xFFFFFF;
    if ((h >> 56) != k) fail(TTPIPE_E_INVALID_HANDLE, std::string(what) + " is a handle of another kind");
    if (index1 == 0 || index1 > g_slots.size()) fail(TTPIPE_E_INVALID_HANDLE, std::string(what) + " was never issued");
    T* obj = find<T>(h, k);
    if (!obj) fail(TTPIPE_E_INVALID_HANDLE, std::string(what) + " is stale: already freed (or its mesh was closed)");
    return obj;
}

void release(uint64_t h) {
    uint32_t index = static_cast<uint32_t>(h & 0xFFFFFF) - 1;
    g_slots[index].kind = 0;
    g_slots[index].obj = nullptr;
    g_slots[index].gen = g_slots[index].gen == UINT32_MAX ? 1 : g_slots[index].gen + 1;
    g_free.push_back(index);
    g_live--;
}

// A handle for an object still owned by p: p lets go only once the handle exists (issue may throw).
template <class T>
uint64_t issue_owned(Kind k, std::unique_ptr<T>& p) {
    uint64_t h = issue(k, p.get());
    p.release();
    return h;
}

// The first submesh an entry resolves is where it allocates (outputs come first in the ABI's argument lists):
// ttpipe_last_oom reports its figures.
Submesh* on_submesh(Submesh* s) {
    if (!t_submesh) t_submesh = s;
    return s;
}

Submesh* S_(uint64_t h, const char* what) { return on_submesh(get<Submesh>(h, K_SUBMESH, what)); }

TensorObj* T_(uint64_t h, const char* what) {
    TensorObj* t = get<TensorObj>(h, K_TENSOR, what);
    on_submesh(t->sub);
    return t;
}

// ---- shapes, dtypes, layouts ------------------------------------------------------------------------

ttnn::DataType data_type(int32_t dtype) {
    switch (dtype) {
        case TTPIPE_FP32: return ttnn::DataType::FLOAT32;
        case TTPIPE_BF16: return ttnn::DataType::BFLOAT16;
        case TTPIPE_INT32: return ttnn::DataType::INT32;  // signed: the -100 ignore index reads back as -100
        default: fail(TTPIPE_E_INVALID_ARGUMENT, "dtype " + std::to_string(dtype) + " is not a TTPIPE dtype");
    }
}

ttnn::Shape shape_of(const std::vector<int32_t>& dims) {
    ttsl::SmallVector<uint32_t> d;
    for (int32_t x : dims) d.push_back(static_cast<uint32_t>(x));
    if (d.empty()) d.push_back(1);
    return ttnn::Shape(d);
}

std::vector<int32_t> dims_of(int32_t rank, const int32_t* dims) {
    require(rank >= 0 && rank <= TTPIPE_MAX_RANK && (rank == 0 || dims != nullptr), "rank or dims out of range");
    std::vector<int32_t> v(dims, dims + rank);
    for (int32_t x : v) require(x >= 0, "negative dimension");
    return v;
}

int64_t numel(const std::vector<int32_t>& dims) {
    int64_t n = 1;
    for (int32_t x : dims) n *= x;
    return n;
}

// Float tensors in TILE layout (what matmul, norms and softmax want), ids in ROW_MAJOR, all in DRAM.
tt::tt_metal::TensorSpec spec(const std::vector<int32_t>& dims, int32_t dtype) {
    auto layout = dtype == TTPIPE_INT32 ? ttnn::Layout::ROW_MAJOR : ttnn::Layout::TILE;
    return tt::tt_metal::TensorSpec(
        shape_of(dims),
        tt::tt_metal::TensorLayout(data_type(dtype), tt::tt_metal::PageConfig(layout), ttnn::DRAM_MEMORY_CONFIG));
}

// A result ready to be written into an output: already of the output's dtype and local shape, so that writing
// it (publish) has nothing left to check. Every output of an entry is staged before any is published.
struct Staged {
    Tensor value;
    TensorObj* out;
};

Staged stage(const Tensor& result, TensorObj* out) {
    Tensor r = result.dtype() == out->value.dtype() ? result : ttnn::typecast(result, out->value.dtype());
    r = ttnn::reshape(r, shape_of(out->dims));
    require(r.logical_shape() == out->value.logical_shape(), "a result's shape differs from its output's");
    return Staged{r, out};
}

void publish(std::initializer_list<Staged> outputs) {
    for (const Staged& s : outputs) ttnn::assign(s.value, s.out->value);
}

// Writes an op's one result into its preallocated output (the ABI's outputs are passed in).
void store(const Tensor& result, TensorObj* out) { publish({stage(result, out)}); }

int32_t devices(const Submesh* s) { return s->rows * s->cols; }
int32_t coord_along(const Submesh* s, int32_t d, int32_t axis) { return axis == 0 ? d / s->cols : d % s->cols; }
int32_t axis_size(const Submesh* s, int32_t axis) { return axis == 0 ? s->rows : s->cols; }
int32_t axis_of_dim(int32_t p0, int32_t p1, int32_t dim) { return p0 == dim ? 0 : p1 == dim ? 1 : -1; }

// One host shard of ints per device (row-major in the submesh), as an INT32 mesh tensor still on the host.
Tensor int_shards_on_host(const Submesh* s, const std::vector<std::vector<int32_t>>& shards, const std::vector<int32_t>& dims) {
    std::vector<Tensor> host;
    for (const auto& piece : shards) host.push_back(Tensor::from_vector(piece, spec(dims, TTPIPE_INT32)));
    return ttnn::distributed::from_host_shards(host, s->device->shape());
}

// One host shard per device (row-major in the submesh), as a mesh tensor of `dtype` on the submesh; floats
// become INT32 as the ABI converts them (truncated toward zero, saturating, NaN to 0).
Tensor shards_to_device(Submesh* s, const std::vector<std::vector<float>>& shards, const std::vector<int32_t>& dims,
                        int32_t dtype) {
    if (dtype == TTPIPE_INT32) {
        std::vector<std::vector<int32_t>> ints;
        for (const auto& piece : shards) {
            std::vector<int32_t> v(piece.size());
            for (size_t i = 0; i < piece.size(); i++) {
                float f = piece[i];
                v[i] = f != f ? 0 : f >= 2147483647.0f ? INT32_MAX : f <= -2147483648.0f ? INT32_MIN : static_cast<int32_t>(f);
            }
            ints.push_back(std::move(v));
        }
        return int_shards_on_host(s, ints, dims).to_device(s->device.get());
    }
    std::vector<Tensor> host;
    for (const auto& piece : shards) host.push_back(Tensor::from_vector(piece, spec(dims, dtype)));
    return ttnn::distributed::from_host_shards(host, s->device->shape()).to_device(s->device.get());
}

std::vector<std::vector<int32_t>> device_to_int_shards(const TensorObj* t) {
    std::vector<std::vector<int32_t>> out;
    for (const Tensor& shard : ttnn::distributed::get_device_tensors(t->value.cpu())) out.push_back(shard.to_vector<int32_t>());
    return out;
}

// Every device's piece as fp32 on the host (INT32 converted by value).
std::vector<std::vector<float>> device_to_shards(const TensorObj* t) {
    std::vector<std::vector<float>> out;
    if (t->dtype == TTPIPE_INT32) {
        for (const auto& ints : device_to_int_shards(t)) out.emplace_back(ints.begin(), ints.end());
        return out;
    }
    for (const Tensor& shard : ttnn::distributed::get_device_tensors(t->value.cpu())) {
        Tensor f = shard.dtype() == ttnn::DataType::FLOAT32 ? shard : ttnn::typecast(shard, ttnn::DataType::FLOAT32);
        out.push_back(f.to_vector<float>());
    }
    return out;
}

// One number per device: the first element of each device's piece of a device-side reduction (a total computed
// on the device: only these few bytes cross to the host).
std::vector<double> per_device_scalars(const Tensor& totals) {
    std::vector<double> out;
    for (const Tensor& shard : ttnn::distributed::get_device_tensors(totals.cpu())) {
        Tensor f = shard.dtype() == ttnn::DataType::FLOAT32 ? shard : ttnn::typecast(shard, ttnn::DataType::FLOAT32);
        std::vector<float> v = f.to_vector<float>();
        out.push_back(v.empty() ? 0.0 : static_cast<double>(v[0]));
    }
    return out;
}

// A tensor's elements as FLOAT32 in TILE layout on its devices (what the eltwise and reduction ops take); INT32
// values are exact below 2^24.
Tensor as_float_tiles(const Tensor& t) {
    Tensor f = t.dtype() == ttnn::DataType::FLOAT32 ? t : ttnn::typecast(t, ttnn::DataType::FLOAT32);
    return f.layout() == ttnn::Layout::TILE ? f : ttnn::to_layout(f, ttnn::Layout::TILE);
}

// Where device d's piece sits in the logical tensor, row by row (the reference's lpiece).
struct Piece {
    std::vector<int64_t> local, stride;
    int64_t base = 0, rows = 0, row_length = 1;
    int64_t row(int64_t r) const {
        int64_t g = base;
        for (int64_t d = static_cast<int64_t>(local.size()) - 1; d >= 0; d--) {
            g += (r % local[d]) * stride[d];
            r /= local[d];
        }
        return g;
    }
};

Piece piece(const std::vector<int32_t>& logical, const std::vector<int32_t>& local, int32_t p0, int32_t p1,
            const Submesh* s, int32_t d) {
    Piece p;
    int32_t rank = static_cast<int32_t>(logical.size());
    std::vector<int64_t> off(rank, 0);
    for (int32_t k = 0; k < rank; k++) {
        int32_t axis = axis_of_dim(p0, p1, k);
        off[k] = axis < 0 ? 0 : static_cast<int64_t>(coord_along(s, d, axis)) * local[k];
    }
    int64_t stride = rank == 0 ? 1 : logical[rank - 1];
    p.base = rank == 0 ? 0 : off[rank - 1];
    p.local.assign(std::max(rank - 1, 0), 0);
    p.stride.assign(std::max(rank - 1, 0), 0);
    for (int32_t k = rank - 2; k >= 0; k--) {
        p.local[k] = local[k];
        p.stride[k] = stride;
        p.base += off[k] * stride;
        stride *= logical[k];
    }
    p.row_length = rank == 0 ? 1 : local[rank - 1];
    p.rows = p.row_length == 0 ? 0 : numel(local) / p.row_length;
    return p;
}

void check_logical(const TensorObj* t, const std::vector<int32_t>& logical, int32_t p0, int32_t p1) {
    require(logical.size() == t->dims.size(), "logical rank differs from the tensor's");
    for (size_t k = 0; k < logical.size(); k++) {
        int32_t axis = axis_of_dim(p0, p1, static_cast<int32_t>(k));
        int32_t parts = axis < 0 ? 1 : axis_size(t->sub, axis);
        require(logical[k] % parts == 0 && logical[k] / parts == t->dims[k], "logical shape does not fit the local one");
    }
}

bool distinct(const Submesh* s, int32_t p0, int32_t p1, int32_t d) {
    return !(p0 == TTPIPE_REPLICATE && coord_along(s, d, 0) != 0) && !(p1 == TTPIPE_REPLICATE && coord_along(s, d, 1) != 0);
}

// b reshaped to a's rank with leading 1s: TTNN broadcasts rank-aligned shapes.
Tensor broadcastable(const Tensor& b, const TensorObj* a, const TensorObj* bo) {
    std::vector<int32_t> d(a->dims.size() - bo->dims.size(), 1);
    d.insert(d.end(), bo->dims.begin(), bo->dims.end());
    return ttnn::reshape(b, shape_of(d));
}

Tensor with_trailing_one(const Tensor& t, const TensorObj* like) {  // like's local shape + [1] (unsqueeze(t, -1))
    std::vector<int32_t> d(like->dims);
    d.push_back(1);
    return ttnn::reshape(t, shape_of(d));
}

Tensor keep_last_as_one(const Tensor& stats, const TensorObj* x) {  // [rows...] -> [rows..., 1] (moreh's stats)
    std::vector<int32_t> d(x->dims.begin(), x->dims.end() - 1);
    d.push_back(1);
    return ttnn::reshape(stats, shape_of(d));
}

// ---- embedding and loss helpers: ids checked and one-hot rows built on the device --------------------------

// The slow path of check_ids: the ids are read to the host to name the first one out of range.
[[noreturn]] void fail_first_outside(const TensorObj* ids, int64_t v, bool allow_ignore, int32_t ignore, const char* what) {
    auto shards = device_to_int_shards(ids);
    for (size_t d = 0; d < shards.size(); d++) {
        for (size_t i = 0; i < shards[d].size(); i++) {
            int32_t id = shards[d][i];
            if ((id < 0 || id >= v) && !(allow_ignore && id == ignore)) {
                fail(TTPIPE_E_OUT_OF_RANGE, std::string(what) + " " + std::to_string(id) + " at element " +
                                                std::to_string(i) + " of device " + std::to_string(d) +
                                                " is outside [0, " + std::to_string(v) + ")" +
                                                (allow_ignore ? " and is not the ignore index " + std::to_string(ignore) : ""));
            }
        }
    }
    fail(TTPIPE_E_INTERNAL, std::string(what) + "s: the device counted ids outside [0, " + std::to_string(v) +
                                ") that the host does not find");
}

// Ids must lie in [0, V) on every device (the ABI checks before anything is written): the device counts those
// outside (as floats: exact for |id| < 2^24, and an id beyond that stays outside [0, V) when V < 2^24), one
// number per device comes back; the ids themselves cross to the host only when one is out of range.
void check_ids(const TensorObj* ids, int64_t v, bool allow_ignore, int32_t ignore, const char* what) {
    require(v < (1 << 24), "a vocabulary of 2^24 or more ids");
    if (numel(ids->dims) == 0) return;
    Tensor f = as_float_tiles(ids->value);
    Tensor outside = ttnn::logical_or(ttnn::lt(f, 0.0f), ttnn::ge(f, static_cast<float>(v)));
    if (allow_ignore) outside = ttnn::logical_and(outside, ttnn::ne(f, static_cast<float>(ignore)));
    for (double n : per_device_scalars(ttnn::sum(outside))) {
        if (n != 0.0) fail_first_outside(ids, v, allow_ignore, ignore, what);
    }
}

// For the embedding kernels, which read UINT32 indices: each device's ids (already checked to be in range, so
// non-negative) as UINT32, shifted into its row range for a vocab-parallel table, and a 0/1 mask of the ids the
// device holds (empty when the table is not sharded).
std::pair<Tensor, Tensor> local_ids(const TensorObj* ids, const TensorObj* table, int32_t p0, int32_t p1) {
    int32_t axis = axis_of_dim(p0, p1, 0);
    if (axis < 0) return {ttnn::typecast(ids->value, ttnn::DataType::UINT32), Tensor()};
    int64_t rows = table->dims[0];
    std::vector<std::vector<float>> offsets;
    for (int32_t d = 0; d < devices(ids->sub); d++) {
        offsets.push_back({static_cast<float>(coord_along(ids->sub, d, axis) * rows)});
    }
    Tensor off = shards_to_device(ids->sub, offsets, {1}, TTPIPE_FP32);
    Tensor shifted = ttnn::subtract(ttnn::typecast(ids->value, ttnn::DataType::FLOAT32), off);
    Tensor mask = ttnn::logical_and(ttnn::ge(shifted, 0.0f), ttnn::lt(shifted, static_cast<float>(rows)));
    Tensor clamped = ttnn::where(mask, shifted, 0.0f);
    return {ttnn::typecast(clamped, ttnn::DataType::UINT32), mask};
}

// For cross-entropy over logits [..., V]: the one-hot rows of the targets [..., V] (target == column index, from
// ttnn::arange) and the rows kept [..., 1] (target != ignore), both 0/1 FLOAT32 on the device.
std::pair<Tensor, Tensor> one_hot_and_rows(const TensorObj* logits, const TensorObj* targets, int32_t ignore) {
    int32_t v = logits->dims.back();
    check_ids(targets, v, true, ignore, "target");
    std::vector<int32_t> row_dims(logits->dims.begin(), logits->dims.end() - 1), column(logits->dims.size(), 1);
    row_dims.push_back(1);
    column.back() = v;
    Tensor t = as_float_tiles(ttnn::reshape(targets->value, shape_of(row_dims)));                       // [..., 1]
    Tensor iota = ttnn::arange(0, v, 1, ttnn::DataType::FLOAT32, std::ref(*logits->sub->device));      // [V]
    Tensor columns = as_float_tiles(ttnn::reshape(iota, shape_of(column)));                           // [1.., V]
    return {ttnn::eq(t, columns), ttnn::ne(t, static_cast<float>(ignore))};
}

// ---- device memory and out-of-memory details ---------------------------------------------------------------

// A device's bytes in use and capacity for one buffer type, from one MeshDevice's allocator. TTNN's allocator
// statistics are per bank (an interleaved buffer puts the same share in every bank), so a device's figures are
// the bank's times the banks. Each MeshDevice (the mesh and each submesh) has an allocator of its own.
struct MemoryFigures {
    int64_t in_use = 0, capacity = 0;
};

MemoryFigures figures(const MeshDevice& device, tt::tt_metal::BufferType type) {
    const auto& allocator = device.allocator();
    auto stats = allocator->get_statistics(type);
    auto banks = static_cast<int64_t>(allocator->get_num_banks(type));
    return {static_cast<int64_t>(stats.total_allocated_bytes) * banks,
            static_cast<int64_t>(stats.total_allocatable_size_bytes) * banks};
}

bool holds(const Submesh* s, int32_t mesh_device) {
    int32_t r = mesh_device / s->mesh->cols, c = mesh_device % s->mesh->cols;
    return r >= s->row0 && r < s->row0 + s->rows && c >= s->col0 && c < s->col0 + s->cols;
}

int32_t first_device(const Submesh* s) { return s->row0 * s->mesh->cols + s->col0; }

// DRAM of one device of the mesh: what the mesh's own allocator and those of the submeshes holding the device
// have allocated (ttpipe allocates on submeshes), against one device's DRAM.
MemoryFigures device_dram(const Mesh* m, int32_t device) {
    MemoryFigures total = figures(*m->device, tt::tt_metal::BufferType::DRAM);
    for (const auto& s : m->submeshes) {
        if (holds(s.get(), device)) total.in_use += figures(*s->device, tt::tt_metal::BufferType::DRAM).in_use;
    }
    return total;
}

// TTNN's out-of-memory exception (TT_FATAL in bank_manager.cpp) names the bytes asked for and the buffer type,
// "Out of Memory: Not enough space to allocate <bytes> B <DRAM|L1> buffer across <n> banks, ...", not the device.
// Allocation on a MeshDevice is in lockstep, so the device reported is the first of the submesh the entry
// allocates on, and in use and capacity are that submesh allocator's. What the message does not give stays -1.
void record_oom(const std::string& what) {
    t_oom[0] = t_oom[1] = t_oom[2] = t_oom[3] = -1;
    long long bytes = -1;
    char word[16] = "DRAM";
    size_t at = what.find("allocate ");
    if (at != std::string::npos && std::sscanf(what.c_str() + at, "allocate %lld B %15[A-Z0-9_]", &bytes, word) >= 1) {
        t_oom[1] = bytes;
    }
    if (!t_submesh) return;
    t_oom[0] = first_device(t_submesh);
    std::string type = word;
    auto buffer_type = type == "L1"         ? tt::tt_metal::BufferType::L1
                       : type == "L1_SMALL" ? tt::tt_metal::BufferType::L1_SMALL
                       : type == "TRACE"    ? tt::tt_metal::BufferType::TRACE
                                            : tt::tt_metal::BufferType::DRAM;
    try {
        MemoryFigures f = figures(*t_submesh->device, buffer_type);
        t_oom[2] = f.in_use;
        t_oom[3] = f.capacity;
    } catch (const std::exception&) {
        // the figures stay -1: the allocator could not say
    }
}

}  // namespace

// ================================================================================================
extern "C" {

// ---- library ---------------------------------------------------------------------------------------

TTPIPE_API int32_t ttpipe_abi_version(void) { return TTPIPE_ABI_VERSION; }

TTPIPE_API const char* ttpipe_implementation(void) { return "ttnn (" TTPIPE_TT_METAL_DESCRIBE ")"; }

TTPIPE_API const char* ttpipe_last_error(void) { return t_error.c_str(); }

// The calling thread's last TTPIPE_E_OUT_OF_MEMORY, as record_oom read it (-1 where TTNN did not say).
TTPIPE_API int32_t ttpipe_last_oom(int64_t* out) {
    if (!out) {
        t_error = "ttpipe_last_oom: out is null";
        return TTPIPE_E_INVALID_ARGUMENT;
    }
    std::memcpy(out, t_oom, sizeof t_oom);
    return TTPIPE_OK;
}

TTPIPE_API int32_t ttpipe_noop(void) { return TTPIPE_OK; }

TTPIPE_API int64_t ttpipe_live_handles(void) {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_live;
}

TTPIPE_API int64_t ttpipe_host_bytes(void) { return 0; }

// ---- mesh, submeshes, devices ---------------------------------------------------------------------

TTPIPE_API int32_t ttpipe_mesh_open(int32_t rows, int32_t cols, int64_t capacity, ttpipe_mesh* out) {
    return guarded("ttpipe_mesh_open", [&] {
        require(out && rows >= 1 && cols >= 1, "bad mesh shape or null out");
        (void) capacity;  // the devices' DRAM is what it is
        auto m = std::make_unique<Mesh>();
        m->device = ttnn::distributed::open_mesh_device(ttnn::MeshShape(rows, cols), DEFAULT_L1_SMALL_SIZE,
                                                        DEFAULT_TRACE_REGION_SIZE, 1, tt::tt_metal::DispatchCoreConfig{});
        m->rows = rows;
        m->cols = cols;
        m->peak.assign(rows * cols, 0);
        try {
            *out = issue_owned(K_MESH, m);
        } catch (...) {
            ttnn::distributed::close_mesh_device(m->device);
            throw;
        }
    });
}

TTPIPE_API int32_t ttpipe_mesh_close(ttpipe_mesh handle) {
    return guarded("ttpipe_mesh_close", [&] {
        Mesh* m = get<Mesh>(handle, K_MESH, "mesh");
        for (size_t i = 0; i < g_slots.size(); i++) {  // free everything of this mesh first
            Slot& s = g_slots[i];
            uint64_t h = (s.kind << 56) | (static_cast<uint64_t>(s.gen) << 24) | (i + 1);
            if (s.kind == K_TENSOR && static_cast<TensorObj*>(s.obj)->sub->mesh == m) {
                delete static_cast<TensorObj*>(s.obj);
                release(h);
            } else if (s.kind == K_SOCKET && static_cast<SocketObj*>(s.obj)->from->mesh == m) {
                delete static_cast<SocketObj*>(s.obj);
                release(h);
            } else if (s.kind == K_SUBMESH && static_cast<Submesh*>(s.obj)->mesh == m) {
                release(h);
            }
        }
        g_socket_changed.notify_all();  // a ttpipe_socket_recv waiting on a socket of this mesh returns CLOSED
        ttnn::distributed::close_mesh_device(m->device);
        release(handle);
        delete m;
    });
}

TTPIPE_API int32_t ttpipe_mesh_create_submeshes(ttpipe_mesh handle, int32_t rows, int32_t cols, ttpipe_submesh* out,
                                               int32_t capacity, int32_t* count) {
    return guarded("ttpipe_mesh_create_submeshes", [&] {
        Mesh* m = get<Mesh>(handle, K_MESH, "mesh");
        require(out && count && rows >= 1 && cols >= 1 && m->rows % rows == 0 && m->cols % cols == 0,
                "the submesh shape does not tile the mesh");
        auto subs = m->device->create_submeshes(ttnn::MeshShape(rows, cols));  // row-major tiles
        require(static_cast<int32_t>(subs.size()) <= capacity, "out is too short");
        std::vector<std::unique_ptr<Submesh>> made;
        std::vector<uint64_t> handles;
        try {  // every handle first: a full table releases those issued, and out and the mesh stay as they were
            for (size_t i = 0; i < subs.size(); i++) {
                int32_t per_row = m->cols / cols;
                made.push_back(std::make_unique<Submesh>(Submesh{m, subs[i], static_cast<int32_t>(i / per_row) * rows,
                                                                 static_cast<int32_t>(i % per_row) * cols, rows, cols}));
                handles.push_back(issue(K_SUBMESH, made.back().get()));
            }
        } catch (...) {
            for (uint64_t h : handles) release(h);
            throw;
        }
        for (size_t i = 0; i < made.size(); i++) {
            out[i] = handles[i];
            m->submeshes.push_back(std::move(made[i]));
        }
        *count = static_cast<int32_t>(handles.size());
    });
}

TTPIPE_API int32_t ttpipe_submesh_info(ttpipe_submesh handle, int32_t* out) {
    return guarded("ttpipe_submesh_info", [&] {
        Submesh* s = S_(handle, "submesh");
        require(out, "out is null");
        out[0] = s->row0, out[1] = s->col0, out[2] = s->rows, out[3] = s->cols;
    });
}

TTPIPE_API int32_t ttpipe_submesh_synchronize(ttpipe_submesh handle) {
    return guarded("ttpipe_submesh_synchronize", [&] {
        tt::tt_metal::distributed::Synchronize(S_(handle, "submesh")->device.get(), std::nullopt);
    });
}

// Lockstep allocation: every device of a MeshDevice holds the same buffers, so an allocator's DRAM figures
// are each of its devices' (device_dram). The high-water mark is the largest figure seen by these calls.
TTPIPE_API int32_t ttpipe_device_memory(ttpipe_mesh handle, int32_t device, int64_t* out) {
    return guarded("ttpipe_device_memory", [&] {
        Mesh* m = get<Mesh>(handle, K_MESH, "mesh");
        if (device < 0 || device >= m->rows * m->cols) fail(TTPIPE_E_OUT_OF_RANGE, "device out of range");
        require(out, "out is null");
        MemoryFigures f = device_dram(m, device);
        m->peak[device] = std::max(m->peak[device], f.in_use);
        out[0] = f.in_use;
        out[1] = m->peak[device];
        out[2] = f.capacity;
    });
}

TTPIPE_API int32_t ttpipe_device_reset_peak(ttpipe_mesh handle, int32_t device) {
    return guarded("ttpipe_device_reset_peak", [&] {
        Mesh* m = get<Mesh>(handle, K_MESH, "mesh");
        if (device < 0 || device >= m->rows * m->cols) fail(TTPIPE_E_OUT_OF_RANGE, "device out of range");
        m->peak[device] = device_dram(m, device).in_use;  // the mark becomes the bytes in use
    });
}

// ---- tensors ----------------------------------------------------------------------------------------

TTPIPE_API int32_t ttpipe_tensor_alloc(ttpipe_submesh submesh, int32_t dtype, int32_t rank, const int32_t* dims,
                                       ttpipe_tensor* out) {
    return guarded("ttpipe_tensor_alloc", [&] {
        Submesh* s = S_(submesh, "submesh");
        require(out, "out is null");
        auto d = dims_of(rank, dims);
        auto t = std::make_unique<TensorObj>(
            TensorObj{s, dtype, d, tt::tt_metal::create_device_tensor(spec(d, dtype), s->device.get())});
        *out = issue_owned(K_TENSOR, t);
    });
}

TTPIPE_API int32_t ttpipe_tensor_free(ttpipe_tensor handle) {
    return guarded("ttpipe_tensor_free", [&] {
        delete T_(handle, "tensor");  // the device buffer goes when its last view goes (shared ownership)
        release(handle);
    });
}

TTPIPE_API int32_t ttpipe_tensor_view(ttpipe_tensor handle, int32_t rank, const int32_t* dims, ttpipe_tensor* out) {
    return guarded("ttpipe_tensor_view", [&] {
        TensorObj* t = T_(handle, "tensor");
        auto d = dims_of(rank, dims);
        require(out && numel(d) == numel(t->dims), "a view must keep the element count");
        auto v = std::make_unique<TensorObj>(TensorObj{t->sub, t->dtype, d, ttnn::reshape(t->value, shape_of(d))});
        *out = issue_owned(K_TENSOR, v);
    });
}

TTPIPE_API int32_t ttpipe_tensor_info(ttpipe_tensor handle, int32_t* out, int32_t capacity) {
    return guarded("ttpipe_tensor_info", [&] {
        TensorObj* t = T_(handle, "tensor");
        require(out && capacity >= 2 + static_cast<int32_t>(t->dims.size()), "out is too short");
        out[0] = t->dtype;
        out[1] = static_cast<int32_t>(t->dims.size());
        std::copy(t->dims.begin(), t->dims.end(), out + 2);
    });
}

// Host to device through TTNN's mesh mapper (Replicate / Shard(dim) per mesh axis).
TTPIPE_API int32_t ttpipe_tensor_write(ttpipe_tensor handle, int32_t rank, const int32_t* dims, int32_t p0, int32_t p1,
                                       const float* data, int64_t count) {
    return guarded("ttpipe_tensor_write", [&] {
        TensorObj* t = T_(handle, "tensor");
        auto logical = dims_of(rank, dims);
        check_logical(t, logical, p0, p1);
        require(data && count == numel(logical) && p0 != TTPIPE_PARTIAL && p1 != TTPIPE_PARTIAL, "bad data or layout");
        require(t->dtype != TTPIPE_INT32, "an INT32 tensor takes int data (ttpipe_tensor_write_ints)");
        using Config = tt::tt_metal::distributed::MeshMapperConfig;
        auto placement = [](int32_t p) -> Config::Placement {
            if (p >= 0) return Config::Shard{p};
            return Config::Replicate{};
        };
        auto mapper = ttnn::distributed::create_mesh_mapper(*t->sub->device, Config{.placements = {placement(p0), placement(p1)}});
        Tensor host = Tensor::from_vector(std::vector<float>(data, data + count), spec(logical, t->dtype));
        tt::tt_metal::copy_to_device(ttnn::distributed::distribute_tensor(host, *mapper), t->value);
    });
}

TTPIPE_API int32_t ttpipe_tensor_write_ints(ttpipe_tensor handle, int32_t rank, const int32_t* dims, int32_t p0,
                                            int32_t p1, const int32_t* data, int64_t count) {
    return guarded("ttpipe_tensor_write_ints", [&] {
        TensorObj* t = T_(handle, "tensor");
        auto logical = dims_of(rank, dims);
        check_logical(t, logical, p0, p1);
        require(t->dtype == TTPIPE_INT32 && data && count == numel(logical), "bad data");
        std::vector<std::vector<int32_t>> ids(devices(t->sub));  // cut per device (Replicate / Shard), signed
        for (int32_t d = 0; d < devices(t->sub); d++) {
            Piece p = piece(logical, t->dims, p0, p1, t->sub, d);
            for (int64_t r = 0; r < p.rows; r++) {
                ids[d].insert(ids[d].end(), data + p.row(r), data + p.row(r) + p.row_length);
            }
        }
        tt::tt_metal::copy_to_device(int_shards_on_host(t->sub, ids, t->dims), t->value);
    });
}

// Rare (Partial addends built on the host): reads every piece, replaces one, writes all back.
TTPIPE_API int32_t ttpipe_tensor_write_local(ttpipe_tensor handle, int32_t device, const float* data, int64_t count) {
    return guarded("ttpipe_tensor_write_local", [&] {
        TensorObj* t = T_(handle, "tensor");
        if (device < 0 || device >= devices(t->sub)) fail(TTPIPE_E_OUT_OF_RANGE, "device out of range");
        require(data && count == numel(t->dims), "bad data");
        auto shards = device_to_shards(t);
        shards[device].assign(data, data + count);
        store(shards_to_device(t->sub, shards, t->dims, t->dtype), t);
    });
}

// Device to host: every device's piece, assembled as the mesh composer would (concatenating shards,
// reading replicas once) and summing Partial addends, which no TTNN composer does.
TTPIPE_API int32_t ttpipe_tensor_read(ttpipe_tensor handle, int32_t rank, const int32_t* dims, int32_t p0, int32_t p1,
                                      float* out, int64_t count) {
    return guarded("ttpipe_tensor_read", [&] {
        TensorObj* t = T_(handle, "tensor");
        auto logical = dims_of(rank, dims);
        check_logical(t, logical, p0, p1);
        require(out && count == numel(logical), "bad out");
        std::fill(out, out + count, 0.0f);
        auto shards = device_to_shards(t);
        for (int32_t d = 0; d < devices(t->sub); d++) {
            if (!distinct(t->sub, p0, p1, d)) continue;
            Piece p = piece(logical, t->dims, p0, p1, t->sub, d);
            for (int64_t r = 0; r < p.rows; r++) {
                for (int64_t j = 0; j < p.row_length; j++) out[p.row(r) + j] += shards[d][r * p.row_length + j];
            }
        }
    });
}

TTPIPE_API int32_t ttpipe_tensor_read_ints(ttpipe_tensor handle, int32_t rank, const int32_t* dims, int32_t p0,
                                           int32_t p1, int32_t* out, int64_t count) {
    return guarded("ttpipe_tensor_read_ints", [&] {
        TensorObj* t = T_(handle, "tensor");
        auto logical = dims_of(rank, dims);
        check_logical(t, logical, p0, p1);
        require(t->dtype == TTPIPE_INT32 && out && count == numel(logical), "bad out");
        auto shards = device_to_int_shards(t);
        for (int32_t d = 0; d < devices(t->sub); d++) {
            if (!distinct(t->sub, p0, p1, d)) continue;
            Piece p = piece(logical, t->dims, p0, p1, t->sub, d);
            for (int64_t r = 0; r < p.rows; r++) {
                std::copy_n(shards[d].begin() + r * p.row_length, p.row_length, out + p.row(r));
            }
        }
    });
}

TTPIPE_API int32_t ttpipe_tensor_read_local(ttpipe_tensor handle, int32_t device, float* out, int64_t count) {
    return guarded("ttpipe_tensor_read_local", [&] {
        TensorObj* t = T_(handle, "tensor");
        if (device < 0 || device >= devices(t->sub)) fail(TTPIPE_E_OUT_OF_RANGE, "device out of range");
        require(out && count == numel(t->dims), "bad out");
        auto shards = device_to_shards(t);
        std::copy(shards[device].begin(), shards[device].end(), out);
    });
}

TTPIPE_API int32_t ttpipe_tensor_fill(ttpipe_tensor handle, float value) {
    return guarded("ttpipe_tensor_fill", [&] {
        TensorObj* t = T_(handle, "tensor");
        ttnn::fill(t->value, value, std::nullopt, t->value);  // ttnn::fill(input, value, memory_config, output)
    });
}

TTPIPE_API int32_t ttpipe_tensor_copy(ttpipe_tensor dst, ttpipe_tensor src) {
    return guarded("ttpipe_tensor_copy", [&] {
        TensorObj *o = T_(dst, "dst"), *x = T_(src, "src");
        require(numel(o->dims) == numel(x->dims), "dst and src differ in element count");
        if (o->sub == x->sub) {
            store(x->value, o);
        } else if (o->dtype == TTPIPE_INT32 && x->dtype == TTPIPE_INT32) {  // ids to another submesh, as ints
            require(o->sub->rows == x->sub->rows && o->sub->cols == x->sub->cols, "submesh shapes differ");
            store(int_shards_on_host(o->sub, device_to_int_shards(x), o->dims).to_device(o->sub->device.get()), o);
        } else {  // another submesh: device i to device i, through the host (see README: not the fabric)
            require(o->sub->rows == x->sub->rows && o->sub->cols == x->sub->cols, "submesh shapes differ");
            store(shards_to_device(o->sub, device_to_shards(x), o->dims, o->dtype), o);
        }
    });
}

TTPIPE_API int32_t ttpipe_permute(ttpipe_tensor out, ttpipe_tensor x, int32_t rank, const int32_t* perm) {
    return guarded("ttpipe_permute", [&] {
        TensorObj *o = T_(out, "out"), *t = T_(x, "x");
        require(rank == static_cast<int32_t>(t->dims.size()) && (rank == 0 || perm), "perm does not fit x");
        store(ttnn::permute(t->value, ttsl::SmallVector<int64_t>(perm, perm + rank)), o);
    });
}

// ---- matmul -----------------------------------------------------------------------------------------

TTPIPE_API int32_t ttpipe_matmul(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b, int32_t transpose_a,
                                 int32_t transpose_b, float alpha, float beta) {
    return guarded("ttpipe_matmul", [&] {
        TensorObj *o = T_(out, "out"), *ta = T_(a, "a"), *tb = T_(b, "b");
        // The ABI's contract: a matmul with a BF16 operand multiplies in bf16 (the FP32 operand, a master
        // weight, is rounded to BFLOAT16); the device accumulates in fp32 and store() casts to out's dtype.
        Tensor av = ta->value, bv = tb->value;
        if (av.dtype() != bv.dtype()) {
            if (av.dtype() == ttnn::DataType::FLOAT32) av = ttnn::typecast(av, ttnn::DataType::BFLOAT16);
            if (bv.dtype() == ttnn::DataType::FLOAT32) bv = ttnn::typecast(bv, ttnn::DataType::BFLOAT16);
        }
        Tensor r = ttnn::matmul(av, bv, transpose_a != 0, transpose_b != 0);
        if (alpha != 1.0f) r = ttnn::multiply(r, alpha);
        if (beta != 0.0f) r = ttnn::add(r, ttnn::multiply(o->value, beta));
        store(r, o);
    });
}

// ---- embedding ----------------------------------------------------------------------------------------

TTPIPE_API int32_t ttpipe_embedding(ttpipe_tensor out, ttpipe_tensor ids, ttpipe_tensor table, int32_t p0, int32_t p1) {
    return guarded("ttpipe_embedding", [&] {
        TensorObj *o = T_(out, "out"), *ti = T_(ids, "ids"), *tt = T_(table, "table");
        int32_t axis = axis_of_dim(p0, p1, 0);
        check_ids(ti, tt->dims[0] * (axis < 0 ? 1 : axis_size(ti->sub, axis)), false, 0, "id");
        auto [local, mask] = local_ids(ti, tt, p0, p1);
        Tensor rows = ttnn::embedding(local, ttnn::to_layout(tt->value, ttnn::Layout::ROW_MAJOR), std::nullopt,
                                      ttnn::Layout::TILE);
        if (mask.is_allocated()) rows = ttnn::multiply(rows, with_trailing_one(mask, ti));
        store(rows, o);
    });
}

TTPIPE_API int32_t ttpipe_embedding_backward(ttpipe_tensor ids, ttpipe_tensor d_out, ttpipe_tensor d_table, int32_t p0,
                                             int32_t p1, int32_t accumulate) {
    return guarded("ttpipe_embedding_backward", [&] {
        TensorObj *ti = T_(ids, "ids"), *tdo = T_(d_out, "d_out"), *tdt = T_(d_table, "d_table");
        int32_t axis = axis_of_dim(p0, p1, 0);
        check_ids(ti, tdt->dims[0] * (axis < 0 ? 1 : axis_size(ti->sub, axis)), false, 0, "id");
        auto [local, mask] = local_ids(ti, tdt, p0, p1);
        Tensor g = mask.is_allocated() ? ttnn::multiply(tdo->value, with_trailing_one(mask, ti)) : tdo->value;
        Tensor grad = ttnn::embedding_bw(local, tdt->value, g);
        store(accumulate ? ttnn::add(tdt->value, grad) : grad, tdt);
    });
}

// ---- normalisation: moreh_layer_norm(_backward), rmsnorm composed as tt-train's rmsnorm_composite ----------

TTPIPE_API int32_t ttpipe_layernorm(ttpipe_tensor y, ttpipe_tensor mean, ttpipe_tensor rstd, ttpipe_tensor x,
                                    ttpipe_tensor gamma, ttpipe_tensor beta, float eps) {
    return guarded("ttpipe_layernorm", [&] {
        TensorObj *ty = T_(y, "y"), *tm = T_(mean, "mean"), *tr = T_(rstd, "rstd"), *tx = T_(x, "x"),
                  *tg = T_(gamma, "gamma");
        std::optional<const Tensor> b = beta ? std::optional<const Tensor>(T_(beta, "beta")->value) : std::nullopt;
        auto r = ttnn::moreh_layer_norm(tx->value, 1, eps, tg->value, b, std::nullopt, std::nullopt, std::nullopt,
                                        std::nullopt, std::nullopt);
        publish({stage(r[0].value(), ty), stage(r[1].value(), tm), stage(r[2].value(), tr)});
    });
}

TTPIPE_API int32_t ttpipe_layernorm_backward_input(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x,
                                                   ttpipe_tensor gamma, ttpipe_tensor mean, ttpipe_tensor rstd) {
    return guarded("ttpipe_layernorm_backward_input", [&] {
        TensorObj *tdx = T_(dx, "dx"), *tdy = T_(dy, "dy"), *tx = T_(x, "x"), *tg = T_(gamma, "gamma"),
                  *tm = T_(mean, "mean"), *tr = T_(rstd, "rstd");
        auto r = ttnn::moreh_layer_norm_backward(tdy->value, tx->value, keep_last_as_one(tm->value, tx),
                                                 keep_last_as_one(tr->value, tx), 1, tg->value, tdx->value);
        store(r[0].value(), tdx);
    });
}

TTPIPE_API int32_t ttpipe_layernorm_backward_weight(ttpipe_tensor dy, ttpipe_tensor x, ttpipe_tensor mean,
                                                    ttpipe_tensor rstd, ttpipe_tensor d_gamma, ttpipe_tensor d_beta,
                                                    int32_t accumulate) {
    return guarded("ttpipe_layernorm_backward_weight", [&] {
        TensorObj *tdy = T_(dy, "dy"), *tx = T_(x, "x"), *tm = T_(mean, "mean"), *tr = T_(rstd, "rstd");
        TensorObj* tdg = d_gamma ? T_(d_gamma, "d_gamma") : nullptr;
        TensorObj* tdb = d_beta ? T_(d_beta, "d_beta") : nullptr;
        require(tdg || tdb, "d_gamma and d_beta are both null");
        auto r = ttnn::moreh_layer_norm_backward(
            tdy->value, tx->value, keep_last_as_one(tm->value, tx), keep_last_as_one(tr->value, tx), 1, std::nullopt,
            std::nullopt, tdg ? std::optional<const Tensor>(ttnn::empty_like(tdg->value)) : std::nullopt,
            tdb ? std::optional<const Tensor>(ttnn::empty_like(tdb->value)) : std::nullopt);
        auto grad = [&](const Tensor& g, TensorObj* o) {
            return stage(accumulate ? ttnn::add(o->value, ttnn::reshape(g, shape_of(o->dims))) : g, o);
        };
        if (tdg && tdb) {
            publish({grad(r[1].value(), tdg), grad(r[2].value(), tdb)});
        } else {
            publish({tdg ? grad(r[1].value(), tdg) : grad(r[2].value(), tdb)});
        }
    });
}

TTPIPE_API int32_t ttpipe_rmsnorm(ttpipe_tensor y, ttpipe_tensor rstd, ttpipe_tensor x, ttpipe_tensor gamma, float eps) {
    return guarded("ttpipe_rmsnorm", [&] {
        TensorObj *ty = T_(y, "y"), *tr = T_(rstd, "rstd"), *tx = T_(x, "x"), *tg = T_(gamma, "gamma");
        Tensor rs = ttnn::rsqrt(ttnn::add(ttnn::mean(ttnn::square(tx->value), -1, true), eps));  // [..., 1]
        publish({stage(ttnn::multiply(ttnn::multiply(tx->value, rs), tg->value), ty), stage(rs, tr)});
    });
}

TTPIPE_API int32_t ttpipe_rmsnorm_backward_input(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x,
                                                 ttpipe_tensor gamma, ttpipe_tensor rstd) {
    return guarded("ttpipe_rmsnorm_backward_input", [&] {
        TensorObj *tdx = T_(dx, "dx"), *tdy = T_(dy, "dy"), *tx = T_(x, "x"), *tg = T_(gamma, "gamma"),
                  *tr = T_(rstd, "rstd");
        Tensor rs = keep_last_as_one(tr->value, tx);
        Tensor g = ttnn::multiply(tdy->value, tg->value);                        // gamma * dy
        Tensor xhat = ttnn::multiply(tx->value, rs);
        Tensor mgx = ttnn::mean(ttnn::multiply(g, xhat), -1, true);              // mean(g * xhat)
        store(ttnn::multiply(ttnn::subtract(g, ttnn::multiply(xhat, mgx)), rs), tdx);
    });
}

TTPIPE_API int32_t ttpipe_rmsnorm_backward_weight(ttpipe_tensor dy, ttpipe_tensor x, ttpipe_tensor rstd,
                                                  ttpipe_tensor d_gamma, int32_t accumulate) {
    return guarded("ttpipe_rmsnorm_backward_weight", [&] {
        TensorObj *tdy = T_(dy, "dy"), *tx = T_(x, "x"), *tr = T_(rstd, "rstd"), *tdg = T_(d_gamma, "d_gamma");
        int64_t rows = numel(tx->dims) / tx->dims.back();
        Tensor prod = ttnn::multiply(tdy->value, ttnn::multiply(tx->value, keep_last_as_one(tr->value, tx)));
        Tensor sum = ttnn::sum(ttnn::reshape(prod, shape_of({static_cast<int32_t>(rows), tx->dims.back()})), 0);
        store(accumulate ? ttnn::add(tdg->value, ttnn::reshape(sum, shape_of(tdg->dims))) : sum, tdg);
    });
}

// ---- softmax, activations, rotary --------------------------------------------------------------------

TTPIPE_API int32_t ttpipe_softmax(ttpipe_tensor y, ttpipe_tensor x, float scale, int32_t causal, int32_t p0, int32_t p1) {
    return guarded("ttpipe_softmax", [&] {
        TensorObj *ty = T_(y, "y"), *tx = T_(x, "x");
        Tensor s = ttnn::multiply(tx->value, scale);
        if (!causal) {
            store(ttnn::softmax(s, -1), ty);
            return;
        }
        // keep[q, k] = k <= q + Tk - Tq with q global: a [Tq_local, Tk] mask per device (queries may be sharded)
        int32_t rank = static_cast<int32_t>(tx->dims.size());
        require(rank >= 2, "causal softmax needs x [..., Tq, Tk]");
        int32_t tq = tx->dims[rank - 2], tk = tx->dims[rank - 1], axis = axis_of_dim(p0, p1, rank - 2);
        int32_t tq_global = axis < 0 ? tq : tq * axis_size(tx->sub, axis);
        std::vector<std::vector<float>> keep;
        for (int32_t d = 0; d < devices(tx->sub); d++) {
            int32_t q0 = axis < 0 ? 0 : coord_along(tx->sub, d, axis) * tq;
            std::vector<float> m(static_cast<size_t>(tq) * tk);
            for (int32_t q = 0; q < tq; q++) {
                for (int32_t k = 0; k < tk; k++) m[q * tk + k] = k <= q0 + q + tk - tq_global ? 1.0f : 0.0f;
            }
            keep.push_back(std::move(m));
        }
        Tensor mask = shards_to_device(tx->sub, keep, {tq, tk}, TTPIPE_FP32);
        Tensor masked = ttnn::where(mask, s, -1e30f);
        store(ttnn::multiply(ttnn::softmax(masked, -1), mask), ty);  // masked entries (and empty rows) are 0
    });
}

TTPIPE_API int32_t ttpipe_softmax_backward(ttpipe_tensor dx, ttpipe_tensor y, ttpipe_tensor dy, float scale) {
    return guarded("ttpipe_softmax_backward", [&] {
        TensorObj *tdx = T_(dx, "dx"), *ty = T_(y, "y"), *tdy = T_(dy, "dy");
        Tensor dot = ttnn::sum(ttnn::multiply(tdy->value, ty->value), -1, true);
        store(ttnn::multiply(ttnn::multiply(ty->value, ttnn::subtract(tdy->value, dot)), scale), tdx);
    });
}

TTPIPE_API int32_t ttpipe_gelu(ttpipe_tensor out, ttpipe_tensor x) {
    return guarded("ttpipe_gelu", [&] { store(ttnn::gelu(T_(x, "x")->value, /* fast_and_approximate_mode */ true), T_(out, "out")); });
}

TTPIPE_API int32_t ttpipe_gelu_backward(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x) {
    return guarded("ttpipe_gelu_backward", [&] {
        auto r = ttnn::gelu_bw(T_(dy, "dy")->value, T_(x, "x")->value, "tanh");
        store(r[0].value(), T_(dx, "dx"));
    });
}

TTPIPE_API int32_t ttpipe_silu(ttpipe_tensor out, ttpipe_tensor x) {
    return guarded("ttpipe_silu", [&] { store(ttnn::silu(T_(x, "x")->value), T_(out, "out")); });
}

TTPIPE_API int32_t ttpipe_silu_backward(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x) {
    return guarded("ttpipe_silu_backward", [&] {
        auto r = ttnn::silu_bw(T_(dy, "dy")->value, T_(x, "x")->value);
        store(r[0].value(), T_(dx, "dx"));
    });
}

// out = x * cos + (x @ R) * sin, R turning each pair (x0, x1) into (-x1, x0); the cos/sin tables of the
// device's positions (T may be sharded) are built on the host.
TTPIPE_API int32_t ttpipe_rope(ttpipe_tensor out, ttpipe_tensor x, float theta, int32_t inverse, int32_t p0, int32_t p1) {
    return guarded("ttpipe_rope", [&] {
        TensorObj *to = T_(out, "out"), *tx = T_(x, "x");
        require(tx->dims.size() == 4 && tx->dims[3] % 2 == 0, "x must be [B, H, T, hd] with an even hd");
        int32_t t = tx->dims[2], hd = tx->dims[3], axis = axis_of_dim(p0, p1, 2);
        std::vector<std::vector<float>> cs, sn, rot(devices(tx->sub), std::vector<float>(hd * hd, 0.0f));
        for (int32_t d = 0; d < devices(tx->sub); d++) {
            int32_t t0 = axis < 0 ? 0 : coord_along(tx->sub, d, axis) * t;
            std::vector<float> c(t * hd), s(t * hd);
            for (int32_t pos = 0; pos < t; pos++) {
                for (int32_t i = 0; i < hd / 2; i++) {
                    double angle = (t0 + pos) * std::pow(static_cast<double>(theta), -2.0 * i / hd);
                    c[pos * hd + 2 * i] = c[pos * hd + 2 * i + 1] = static_cast<float>(std::cos(angle));
                    s[pos * hd + 2 * i] = s[pos * hd + 2 * i + 1] = (inverse ? -1.0f : 1.0f) * static_cast<float>(std::sin(angle));
                }
            }
            for (int32_t i = 0; i < hd / 2; i++) {  // row = input index, column = output index
                rot[d][(2 * i + 1) * hd + 2 * i] = -1.0f;
                rot[d][(2 * i) * hd + 2 * i + 1] = 1.0f;
            }
            cs.push_back(std::move(c));
            sn.push_back(std::move(s));
        }
        Tensor c = shards_to_device(tx->sub, cs, {t, hd}, TTPIPE_FP32), s = shards_to_device(tx->sub, sn, {t, hd}, TTPIPE_FP32);
        Tensor r = shards_to_device(tx->sub, rot, {hd, hd}, TTPIPE_FP32);
        store(ttnn::add(ttnn::multiply(tx->value, c), ttnn::multiply(ttnn::matmul(tx->value, r), s)), to);
    });
}

// ---- elementwise and reductions ------------------------------------------------------------------------

TTPIPE_API int32_t ttpipe_add(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b) {
    return guarded("ttpipe_add", [&] {
        TensorObj *ta = T_(a, "a"), *tb = T_(b, "b");
        store(ttnn::add(ta->value, broadcastable(tb->value, ta, tb)), T_(out, "out"));
    });
}

TTPIPE_API int32_t ttpipe_mul(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b) {
    return guarded("ttpipe_mul", [&] {
        TensorObj *ta = T_(a, "a"), *tb = T_(b, "b");
        store(ttnn::multiply(ta->value, broadcastable(tb->value, ta, tb)), T_(out, "out"));
    });
}

TTPIPE_API int32_t ttpipe_scale(ttpipe_tensor out, ttpipe_tensor a, float s) {
    return guarded("ttpipe_scale", [&] { store(ttnn::multiply(T_(a, "a")->value, s), T_(out, "out")); });
}

TTPIPE_API int32_t ttpipe_add_scaled(ttpipe_tensor a, ttpipe_tensor b, float alpha) {
    return guarded("ttpipe_add_scaled", [&] {
        TensorObj* ta = T_(a, "a");
        store(ttnn::add(ta->value, ttnn::multiply(T_(b, "b")->value, alpha)), ta);
    });
}

TTPIPE_API int32_t ttpipe_sum_rows(ttpipe_tensor x, ttpipe_tensor out, int32_t accumulate) {
    return guarded("ttpipe_sum_rows", [&] {
        TensorObj *tx = T_(x, "x"), *to = T_(out, "out");
        int32_t n = tx->dims.empty() ? 1 : tx->dims.back();
        Tensor s = ttnn::sum(ttnn::reshape(tx->value, shape_of({static_cast<int32_t>(numel(tx->dims) / std::max(n, 1)), n})), 0);
        store(accumulate ? ttnn::add(to->value, ttnn::reshape(s, shape_of(to->dims))) : s, to);
    });
}

TTPIPE_API int32_t ttpipe_sum(ttpipe_tensor out, ttpipe_tensor x, int32_t dim) {
    return guarded("ttpipe_sum", [&] { store(ttnn::sum(T_(x, "x")->value, dim, /* keepdim */ true), T_(out, "out")); });
}

// The squares are summed on each device (ttnn::square, ttnn::sum over every dim, in fp32); one number per device
// comes back and the host adds the distinct pieces' numbers (replicas once) in double.
TTPIPE_API int32_t ttpipe_sum_squares(ttpipe_tensor x, int32_t p0, int32_t p1, double* out) {
    return guarded("ttpipe_sum_squares", [&] {
        TensorObj* tx = T_(x, "x");
        require(out, "out is null");
        require(tx->dtype != TTPIPE_INT32, "x is INT32, expected FP32 or BF16");
        if (numel(tx->dims) == 0) {
            *out = 0;
            return;
        }
        auto per_device = per_device_scalars(ttnn::sum(ttnn::square(as_float_tiles(tx->value))));
        double total = 0;
        for (int32_t d = 0; d < devices(tx->sub); d++) {
            if (distinct(tx->sub, p0, p1, d)) total += per_device[d];
        }
        *out = total;
    });
}

TTPIPE_API int32_t ttpipe_repeat_interleave(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t repeats) {
    return guarded("ttpipe_repeat_interleave", [&] {
        store(ttnn::repeat_interleave(T_(x, "x")->value, static_cast<uint32_t>(repeats), dim, std::nullopt),
              T_(out, "out"));
    });
}

TTPIPE_API int32_t ttpipe_sum_groups(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t group_size) {
    return guarded("ttpipe_sum_groups", [&] {
        TensorObj* tx = T_(x, "x");
        int32_t rank = static_cast<int32_t>(tx->dims.size()), d0 = dim < 0 ? dim + rank : dim;
        require(d0 >= 0 && d0 < rank && group_size >= 1 && tx->dims[d0] % group_size == 0, "bad dim or group size");
        std::vector<int32_t> split(tx->dims.begin(), tx->dims.begin() + d0);  // [..., k / g, g, ...]
        split.push_back(tx->dims[d0] / group_size);
        split.push_back(group_size);
        split.insert(split.end(), tx->dims.begin() + d0 + 1, tx->dims.end());
        store(ttnn::sum(ttnn::reshape(tx->value, shape_of(split)), d0 + 1), T_(out, "out"));
    });
}

// ---- loss: on the device (one-hot rows from the targets, logsumexp, the sums); one loss sum and one token count
// per device come back, and the host adds the distinct pieces' (each token once) in double ----------------------

TTPIPE_API int32_t ttpipe_cross_entropy(ttpipe_tensor logits, ttpipe_tensor targets, int32_t ignore_index, int32_t p0,
                                        int32_t p1, double* sum, int64_t* count) {
    return guarded("ttpipe_cross_entropy", [&] {
        TensorObj *tl = T_(logits, "logits"), *tt = T_(targets, "targets");
        require(sum && count, "sum or count is null");
        require(!tl->dims.empty() && tt->dtype == TTPIPE_INT32, "logits [..., V] and INT32 targets [...]");
        require(axis_of_dim(p0, p1, static_cast<int32_t>(tl->dims.size()) - 1) < 0, "the last dim is sharded");
        auto [hot, keep] = one_hot_and_rows(tl, tt, ignore_index);                            // [..., V], [..., 1]
        Tensor x = as_float_tiles(tl->value);
        Tensor mx = ttnn::max(x, -1, true);
        Tensor lse = ttnn::add(ttnn::log(ttnn::sum(ttnn::exp(ttnn::subtract(x, mx)), -1, true)), mx);  // [..., 1]
        Tensor picked = ttnn::sum(ttnn::multiply(x, hot), -1, true);                             // x[target]
        Tensor losses = ttnn::where(keep, ttnn::subtract(lse, picked), 0.0f);                    // ignored rows: 0
        auto loss_sums = per_device_scalars(ttnn::sum(losses));
        auto token_counts = per_device_scalars(ttnn::sum(keep));
        double total = 0;
        int64_t n = 0;
        for (int32_t d = 0; d < devices(tl->sub); d++) {
            if (!distinct(tl->sub, p0, p1, d)) continue;
            total += loss_sums[d];
            n += std::llround(token_counts[d]);
        }
        *sum = total;
        *count = n;
    });
}

TTPIPE_API int32_t ttpipe_cross_entropy_backward(ttpipe_tensor d_logits, ttpipe_tensor logits, ttpipe_tensor targets,
                                                 int32_t ignore_index, float scale) {
    return guarded("ttpipe_cross_entropy_backward", [&] {
        TensorObj *tl = T_(logits, "logits"), *tt = T_(targets, "targets");
        require(!tl->dims.empty() && tt->dtype == TTPIPE_INT32, "logits [..., V] and INT32 targets [...]");
        auto [hot, keep] = one_hot_and_rows(tl, tt, ignore_index);
        Tensor g = ttnn::multiply(ttnn::subtract(ttnn::softmax(as_float_tiles(tl->value), -1), hot), keep);
        store(ttnn::multiply(g, scale), T_(d_logits, "d_logits"));
    });
}

// ---- dropout: the mask is a function of the logical index (layout-independent), so it is drawn on the host -----

TTPIPE_API int32_t ttpipe_dropout(ttpipe_tensor out, ttpipe_tensor x, float p, int64_t seed, int64_t element_offset,
                                  int32_t rank, const int32_t* dims, int32_t p0, int32_t p1) {
    return guarded("ttpipe_dropout", [&] {
        TensorObj* tx = T_(x, "x");
        auto logical = dims_of(rank, dims);
        check_logical(tx, logical, p0, p1);
        require(p >= 0.0f && p < 1.0f && element_offset >= 0, "bad probability or offset");
        std::vector<std::vector<float>> masks;
        for (int32_t d = 0; d < devices(tx->sub); d++) {
            Piece pc = piece(logical, tx->dims, p0, p1, tx->sub, d);
            std::vector<float> m(static_cast<size_t>(numel(tx->dims)));
            for (int64_t r = 0; r < pc.rows; r++) {
                for (int64_t j = 0; j < pc.row_length; j++) {
                    uint64_t z = static_cast<uint64_t>(seed) +
                                 (static_cast<uint64_t>(element_offset + pc.row(r) + j) + 1u) * 0x9E3779B97F4A7C15ull;
                    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
                    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
                    z ^= z >> 31;
                    m[r * pc.row_length + j] = static_cast<float>(z >> 40) * 0x1.0p-24f >= p ? 1.0f / (1.0f - p) : 0.0f;
                }
            }
            masks.push_back(std::move(m));
        }
        store(ttnn::multiply(tx->value, shards_to_device(tx->sub, masks, tx->dims, TTPIPE_FP32)), T_(out, "out"));
    });
}

// ---- optimizers (torch semantics, composed from elementwise ops) -------------------------------------------

TTPIPE_API int32_t ttpipe_adamw(ttpipe_tensor param, ttpipe_tensor grad, ttpipe_tensor exp_avg, ttpipe_tensor exp_avg_sq,
                                float lr, float beta1, float beta2, float eps, float weight_decay, int32_t step,
                                float grad_scale) {
    return guarded("ttpipe_adamw", [&] {
        TensorObj *tp = T_(param, "param"), *tg = T_(grad, "grad"), *tm = T_(exp_avg, "exp_avg"),
                  *tv = T_(exp_avg_sq, "exp_avg_sq");
        require(step >= 1, "step must be >= 1");
        float step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, step)));
        float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)));
        Tensor g = ttnn::multiply(tg->value, grad_scale);
        Tensor m = ttnn::add(ttnn::multiply(tm->value, beta1), ttnn::multiply(g, 1.0f - beta1));
        Tensor v = ttnn::add(ttnn::multiply(tv->value, beta2), ttnn::multiply(ttnn::square(g), 1.0f - beta2));
        Tensor denom = ttnn::add(ttnn::multiply(ttnn::sqrt(v), 1.0f / bc2_sqrt), eps);
        Tensor p = ttnn::subtract(ttnn::multiply(tp->value, 1.0f - lr * weight_decay),
                                  ttnn::multiply(ttnn::divide(m, denom), step_size));
        publish({stage(m, tm), stage(v, tv), stage(p, tp)});
    });
}

TTPIPE_API int32_t ttpipe_sgd(ttpipe_tensor param, ttpipe_tensor grad, ttpipe_tensor momentum_buffer, float lr,
                              float momentum, float dampening, float weight_decay, int32_t nesterov, int32_t step,
                              float grad_scale) {
    return guarded("ttpipe_sgd", [&] {
        TensorObj *tp = T_(param, "param"), *tg = T_(grad, "grad");
        require(step >= 1, "step must be >= 1");
        Tensor d = ttnn::add(ttnn::multiply(tg->value, grad_scale), ttnn::multiply(tp->value, weight_decay));
        if (momentum == 0.0f) {
            store(ttnn::subtract(tp->value, ttnn::multiply(d, lr)), tp);
            return;
        }
        TensorObj* tb = T_(momentum_buffer, "momentum_buffer");
        Tensor b = step == 1 ? d : ttnn::add(ttnn::multiply(tb->value, momentum), ttnn::multiply(d, 1.0f - dampening));
        Tensor u = nesterov ? ttnn::add(d, ttnn::multiply(b, momentum)) : b;
        publish({stage(b, tb), stage(ttnn::subtract(tp->value, ttnn::multiply(u, lr)), tp)});
    });
}

// ---- collectives (TTNN CCL over the fabric, cluster_axis = the mesh axis) ------------------------------------

TTPIPE_API int32_t ttpipe_all_gather(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t axis) {
    return guarded("ttpipe_all_gather", [&] {
        if (axis != 0 && axis != 1) fail(TTPIPE_E_OUT_OF_RANGE, "mesh axis out of range");
        store(ttnn::all_gather(T_(x, "x")->value, dim, static_cast<uint32_t>(axis)), T_(out, "out"));
    });
}

TTPIPE_API int32_t ttpipe_reduce_scatter(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t axis) {
    return guarded("ttpipe_reduce_scatter", [&] {
        if (axis != 0 && axis != 1) fail(TTPIPE_E_OUT_OF_RANGE, "mesh axis out of range");
        store(ttnn::reduce_scatter(T_(x, "x")->value, dim, static_cast<uint32_t>(axis)), T_(out, "out"));
    });
}

TTPIPE_API int32_t ttpipe_all_reduce(ttpipe_tensor out, ttpipe_tensor x, int32_t axis, int32_t op) {
    return guarded("ttpipe_all_reduce", [&] {
        if (axis != 0 && axis != 1) fail(TTPIPE_E_OUT_OF_RANGE, "mesh axis out of range");
        TensorObj* tx = T_(x, "x");
        Tensor r = ttnn::all_reduce(tx->value, static_cast<uint32_t>(axis));
        if (op == TTPIPE_REDUCE_MEAN) r = ttnn::multiply(r, 1.0f / static_cast<float>(axis_size(tx->sub, axis)));
        store(r, T_(out, "out"));
    });
}

// ---- point-to-point: a MeshSocket pair, device i of the sender to device i of the receiver ----------------------

TTPIPE_API int32_t ttpipe_socket_open(ttpipe_submesh from, ttpipe_submesh to, ttpipe_socket* out) {
    return guarded("ttpipe_socket_open", [&] {
        Submesh *f = S_(from, "from"), *t = S_(to, "to");
        require(out && f->mesh == t->mesh && f->rows == t->rows && f->cols == t->cols, "submeshes do not pair");
        std::vector<tt::tt_metal::distributed::SocketConnection> connections;
        for (const auto& coord : tt::tt_metal::distributed::MeshCoordinateRange(f->device->shape())) {
            connections.emplace_back(tt::tt_metal::distributed::MeshCoreCoord(coord, tt::tt_metal::CoreCoord(0, 0)),
                                     tt::tt_metal::distributed::MeshCoreCoord(coord, tt::tt_metal::CoreCoord(0, 0)));
        }
        tt::tt_metal::distributed::SocketConfig config(
            connections, tt::tt_metal::distributed::SocketMemoryConfig(tt::tt_metal::BufferType::L1, TTPIPE_SOCKET_FIFO_BYTES));
        auto [sender, receiver] = MeshSocket::create_socket_pair(f->device, t->device, config);
        auto socket_obj = std::make_unique<SocketObj>(SocketObj{f, t, std::move(sender), std::move(receiver), {}});
        *out = issue_owned(K_SOCKET, socket_obj);
    });
}

// send_async is enqueued on the sender's command queue; on the device it completes as the receiver's
// recv_async (enqueued by ttpipe_socket_recv) drains the socket's FIFO. Neither blocks the host (unverified).
// What was sent is queued on the host (the receiver allocates from it), which wakes a waiting receiver.
TTPIPE_API int32_t ttpipe_socket_send(ttpipe_socket socket, ttpipe_tensor tensor) {
    return guarded("ttpipe_socket_send", [&] {
        SocketObj* s = get<SocketObj>(socket, K_SOCKET, "socket");
        TensorObj* t = T_(tensor, "tensor");
        require(t->sub == s->from, "the tensor does not live on the socket's sender");
        s->in_flight.push_back(Spec{t->dtype, t->dims});
        try {
            ttnn::experimental::send_async(t->value, s->sender);
        } catch (...) {
            s->in_flight.pop_back();
            throw;
        }
        g_socket_changed.notify_all();
    });
}

// Waits (g_mutex released) until something was sent on the socket or timeout_ms passed; a socket closed meanwhile
// (ttpipe_socket_close, or its mesh's ttpipe_mesh_close) ends the wait with TTPIPE_E_CLOSED. Then the receiver's
// tensor is allocated and its handle issued before recv_async is enqueued, so a failure leaves the queue as it was.
TTPIPE_API int32_t ttpipe_socket_recv(ttpipe_socket socket, int64_t timeout_ms, ttpipe_tensor* out) {
    return guarded("ttpipe_socket_recv", [&] {
        SocketObj* s = get<SocketObj>(socket, K_SOCKET, "socket");
        require(out, "out is null");
        *out = 0;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
        while (s->in_flight.empty()) {
            if (std::chrono::steady_clock::now() >= deadline) return;  // none in time: TTPIPE_OK with *out = 0
            g_socket_changed.wait_until(*t_lock, deadline);
            s = find<SocketObj>(socket, K_SOCKET);
            if (!s) fail(TTPIPE_E_CLOSED, "the socket was closed while waiting");
        }
        on_submesh(s->to);
        Spec spec_in = s->in_flight.front();
        auto received = std::make_unique<TensorObj>(TensorObj{
            s->to, spec_in.dtype, spec_in.dims,
            tt::tt_metal::create_device_tensor(spec(spec_in.dims, spec_in.dtype), s->to->device.get())});
        TensorObj* r = received.get();
        uint64_t h = issue_owned(K_TENSOR, received);
        try {
            ttnn::experimental::recv_async(r->value, s->receiver);
        } catch (...) {
            release(h);
            delete r;
            throw;
        }
        s->in_flight.pop_front();
        *out = h;
    });
}

TTPIPE_API int32_t ttpipe_socket_close(ttpipe_socket socket) {
    return guarded("ttpipe_socket_close", [&] {
        delete get<SocketObj>(socket, K_SOCKET, "socket");
        release(socket);
        g_socket_changed.notify_all();  // a receiver waiting on it returns TTPIPE_E_CLOSED
    });
}

}  // extern "C"
