// NCCL, loaded at run time (dlopen, as cuDNN is): the library's version, a communicator over
// a rendezvous, and the three collectives (comm.hpp).
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "comm.hpp"

#if defined(PREFLIGHT_HAVE_NCCL)
#include <nccl.h>
#endif

namespace preflight::runtime::cuda {

namespace {

#if defined(PREFLIGHT_HAVE_NCCL)
// The entry points the runtime uses, resolved from libnccl.
struct NcclApi {
    void* lib = nullptr;
    decltype(&ncclGetVersion) get_version = nullptr;
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) init_rank = nullptr;
    decltype(&ncclCommDestroy) destroy = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclReduceScatter) reduce_scatter = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    decltype(&ncclCommCount) count = nullptr;
    decltype(&ncclCommUserRank) user_rank = nullptr;
    decltype(&ncclCommSplit) split = nullptr;
    decltype(&ncclSend) send = nullptr;
    decltype(&ncclRecv) recv = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;  // optional: NCCL >= 2.18 (tensor parallelism with dp > 1)
};
static_assert(sizeof(ncclUniqueId) == sizeof(UniqueId), "rendezvous.hpp's UniqueId is NCCL's unique id");
static_assert(NcclComm::kNoColor == NCCL_SPLIT_NOCOLOR, "comm.hpp's kNoColor is NCCL's");

NcclApi& api() {
    static NcclApi a;
    return a;
}

template <class F>
bool resolve(void* lib, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
}

void check(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return;
    throw DeviceError(FailureKind::library, static_cast<int>(r), call,
                      api().error_string ? api().error_string(r) : "NCCL error");
}

ncclDataType_t nccl_type(DType t) {
    switch (t) {
        case DType::f32: return ncclFloat32;
        case DType::bf16: return ncclBfloat16;
        default: break;
    }
    throw std::logic_error("NCCL collectives on f32 or bf16 buffers only");
}

ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum: return ncclSum;
        case ReduceOp::max: return ncclMax;
        case ReduceOp::mean: break;
    }
    return ncclAvg;
}
#endif

}  // namespace

const NcclLibrary& nccl_library() {
    static NcclLibrary lib;
    static std::once_flag once;
    std::call_once(once, [] {
#if !defined(PREFLIGHT_HAVE_NCCL)
        lib.version_or_error = "this build has no NCCL header (nccl.h was not found at configure time)";
#else
        std::string tried;
        for (const char* name : {static_cast<const char*>(std::getenv("PREFLIGHT_NCCL_LIB")), "libnccl.so.2", "libnccl.so"}) {
            if (name == nullptr || *name == '\0') continue;
            api().lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
            if (api().lib) break;
            tried += std::string(tried.empty() ? "" : "; ") + name + ": " + dlerror();
        }
        NcclApi& a = api();
        if (!a.lib) {
            lib.version_or_error = "libnccl not loadable (" + tried + "; set PREFLIGHT_NCCL_LIB or LD_LIBRARY_PATH)";
            return;
        }
        const bool all = resolve(a.lib, "ncclGetVersion", a.get_version) &&
                         resolve(a.lib, "ncclGetUniqueId", a.get_unique_id) &&
                         resolve(a.lib, "ncclCommInitRank", a.init_rank) && resolve(a.lib, "ncclCommDestroy", a.destroy) &&
                         resolve(a.lib, "ncclAllReduce", a.all_reduce) &&
                         resolve(a.lib, "ncclReduceScatter", a.reduce_scatter) &&
                         resolve(a.lib, "ncclAllGather", a.all_gather) &&
                         resolve(a.lib, "ncclGetErrorString", a.error_string) &&
                         resolve(a.lib, "ncclCommCount", a.count) && resolve(a.lib, "ncclCommUserRank", a.user_rank) &&
                         resolve(a.lib, "ncclSend", a.send) && resolve(a.lib, "ncclRecv", a.recv) &&
                         resolve(a.lib, "ncclGroupStart", a.group_start) && resolve(a.lib, "ncclGroupEnd", a.group_end);
        if (!all) {
            lib.version_or_error = "libnccl lacks an entry point the runtime needs";
            return;
        }
        resolve(a.lib, "ncclCommSplit", a.split);
        int v = 0;
        if (a.get_version(&v) != ncclSuccess || v < 21000) {  // ncclAvg and ncclBfloat16: NCCL 2.10
            lib.version_or_error = "NCCL " + std::to_string(v) + " is older than 2.10 (ncclAvg, bf16)";
            return;
        }
        lib.ok = true;
        lib.version_or_error = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
#endif
    });
    return lib;
}

#if defined(PREFLIGHT_HAVE_NCCL)
NcclComm::NcclComm(const Rendezvous& r) : rank_(r.rank), world_(r.world_size) {
    if (!nccl_library().ok) throw DeviceError(FailureKind::library, 0, "NCCL", nccl_library().version_or_error);
    const UniqueId raw = exchange_unique_id(r, [] {
        ncclUniqueId id;
        check(api().get_unique_id(&id), "ncclGetUniqueId");
        UniqueId out;
        std::memcpy(out.data(), id.internal, out.size());
        return out;
    });
    ncclUniqueId id;
    std::memcpy(id.internal, raw.data(), raw.size());
    ncclComm_t c = nullptr;
    check(api().init_rank(&c, world_, id, rank_), "ncclCommInitRank");
    comm_ = c;
    remove_unique_id_file(r);
}

NcclComm::~NcclComm() {
    if (comm_) api().destroy(static_cast<ncclComm_t>(comm_));
}

void NcclComm::all_reduce(void* buf, i64 count, DType t, ReduceOp op, cudaStream_t s) {
    check(api().all_reduce(buf, buf, static_cast<std::size_t>(count), nccl_type(t), nccl_op(op), static_cast<ncclComm_t>(comm_), s),
          "ncclAllReduce");
}

void NcclComm::reduce_scatter(void* buf, i64 chunk, DType t, ReduceOp op, cudaStream_t s) {
    char* mine = static_cast<char*>(buf) + static_cast<std::size_t>(rank_) * static_cast<std::size_t>(chunk) * dtype_bytes(t);
    check(api().reduce_scatter(buf, mine, static_cast<std::size_t>(chunk), nccl_type(t), nccl_op(op),
                               static_cast<ncclComm_t>(comm_), s),
          "ncclReduceScatter");
}

void NcclComm::all_gather(const void* in, void* out, i64 chunk, DType t, cudaStream_t s) {
    check(api().all_gather(in, out, static_cast<std::size_t>(chunk), nccl_type(t), static_cast<ncclComm_t>(comm_), s),
          "ncclAllGather");
}

void NcclComm::p2p(const P2pParts& sends, const P2pParts& recvs, DType t, cudaStream_t s) {
    auto* c = static_cast<ncclComm_t>(comm_);
    check(api().group_start(), "ncclGroupStart");
    for (const P2pPart& o : sends)
        if (o.data)
            check(api().send(o.data, static_cast<std::size_t>(o.count), nccl_type(t), ring_rank(rank_, o.peer, world_), c, s),
                  "ncclSend");
    for (const P2pPart& i : recvs)
        if (i.data)
            check(api().recv(i.data, static_cast<std::size_t>(i.count), nccl_type(t), ring_rank(rank_, i.peer, world_), c, s),
                  "ncclRecv");
    check(api().group_end(), "ncclGroupEnd");
}

std::unique_ptr<NcclComm> NcclComm::split(int color, int key) {
    if (api().split == nullptr)
        throw DeviceError(FailureKind::library, 0, "ncclCommSplit",
                          "this NCCL (" + nccl_library().version_or_error + ") has no ncclCommSplit (NCCL 2.18 or newer)");
    std::unique_ptr<NcclComm> out(new NcclComm());
    ncclComm_t c = nullptr;
    check(api().split(static_cast<ncclComm_t>(comm_), color, key, &c, nullptr), "ncclCommSplit");
    if (color == kNoColor) return nullptr;
    out->comm_ = c;
    check(api().count(c, &out->world_), "ncclCommCount");
    check(api().user_rank(c, &out->rank_), "ncclCommUserRank");
    return out;
}
#else
NcclComm::NcclComm(const Rendezvous&) { throw DeviceError(FailureKind::library, 0, "NCCL", nccl_library().version_or_error); }
NcclComm::~NcclComm() = default;
void NcclComm::all_reduce(void*, i64, DType, ReduceOp, cudaStream_t) {}
void NcclComm::reduce_scatter(void*, i64, DType, ReduceOp, cudaStream_t) {}
void NcclComm::all_gather(const void*, void*, i64, DType, cudaStream_t) {}
void NcclComm::p2p(const P2pParts&, const P2pParts&, DType, cudaStream_t) {}
std::unique_ptr<NcclComm> NcclComm::split(int, int) { return nullptr; }
#endif

}  // namespace preflight::runtime::cuda
