#include "preflight/runtime/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "preflight/planner/error.hpp"

namespace preflight::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// A whole number in [lo, hi] from variable `name`, or nullopt when unset.
std::optional<long> number(const std::function<const char*(const char*)>& env, const char* name, long lo, long hi) {
    const char* v = env(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
        throw InputError(name, std::string("must be a whole number in ") + std::to_string(lo) + ".." + std::to_string(hi) +
                                   ", got '" + v + "'");
    return x;
}

std::string text(const std::function<const char*(const char*)>& env, const char* name, const std::string& fallback) {
    const char* v = env(name);
    return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

constexpr long kMaxRanks = 1 << 20;

// A socket closed when it goes out of scope.
struct Socket {
    int fd = -1;
    explicit Socket(int f) : fd(f) {}
    ~Socket() {
        if (fd >= 0) ::close(fd);
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
};

std::string where(const Rendezvous& r) { return r.master_addr + ":" + std::to_string(r.master_port); }

void send_all(int fd, const char* p, std::size_t n, const std::string& what) {
    while (n > 0) {
        const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) throw std::runtime_error("rendezvous: sending the NCCL id to " + what + " failed: " + std::strerror(errno));
        p += k;
        n -= static_cast<std::size_t>(k);
    }
}

bool recv_all(int fd, char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t k = ::recv(fd, p, n, 0);
        if (k <= 0) return false;
        p += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

double seconds_left(const Clock::time_point& deadline) {
    return std::chrono::duration<double>(deadline - Clock::now()).count();
}

UniqueId serve_tcp(const Rendezvous& r, const UniqueId& id) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (s.fd < 0) throw std::runtime_error(std::string("rendezvous: socket: ") + std::strerror(errno));
    const int one = 1;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<std::uint16_t>(r.master_port));
    if (::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s.fd, 128) != 0)
        throw std::runtime_error("rendezvous: rank 0 cannot listen on port " + std::to_string(r.master_port) + ": " +
                                 std::strerror(errno) + " (MASTER_PORT)");
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r.timeout_s));
    for (int served = 1; served < r.world_size; ++served) {
        pollfd p{s.fd, POLLIN, 0};
        const double left = seconds_left(deadline);
        if (left <= 0 || ::poll(&p, 1, static_cast<int>(left * 1000)) <= 0)
            throw std::runtime_error("rendezvous: rank 0 waited " + std::to_string(static_cast<int>(r.timeout_s)) +
                                     " s on port " + std::to_string(r.master_port) + " but only " +
                                     std::to_string(served - 1) + " of " + std::to_string(r.world_size - 1) +
                                     " ranks connected");
        Socket c(::accept(s.fd, nullptr, nullptr));
        if (c.fd < 0) throw std::runtime_error(std::string("rendezvous: accept: ") + std::strerror(errno));
        send_all(c.fd, id.data(), id.size(), "a rank");
    }
    return id;
}

UniqueId fetch_tcp(const Rendezvous& r) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(r.master_port);
    if (::getaddrinfo(r.master_addr.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr)
        throw std::runtime_error("rendezvous: cannot resolve MASTER_ADDR '" + r.master_addr + "'");
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r.timeout_s));
    UniqueId id{};
    for (;;) {  // rank 0 may not listen yet: retry until the deadline
        Socket s(::socket(AF_INET, SOCK_STREAM, 0));
        if (s.fd >= 0 && ::connect(s.fd, res->ai_addr, res->ai_addrlen) == 0 && recv_all(s.fd, id.data(), id.size())) {
            ::freeaddrinfo(res);
            return id;
        }
        if (seconds_left(deadline) <= 0) {
            ::freeaddrinfo(res);
            throw std::runtime_error("rendezvous: rank " + std::to_string(r.rank) + " could not get the NCCL id from rank 0 at " +
                                     where(r) + " within " + std::to_string(static_cast<int>(r.timeout_s)) + " s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

UniqueId serve_fs(const Rendezvous& r, const UniqueId& id) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(r.file, ec))
        throw std::runtime_error("rendezvous: the NCCL id file '" + r.file +
                                 "' already exists (left by an earlier run?); remove it and start again");
    const std::string tmp = r.file + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream f(tmp, std::ios::binary);
        f.write(id.data(), static_cast<std::streamsize>(id.size()));
        if (!f) throw std::runtime_error("rendezvous: cannot write the NCCL id file '" + tmp + "'");
    }
    fs::rename(tmp, r.file, ec);
    if (ec) throw std::runtime_error("rendezvous: cannot create '" + r.file + "': " + ec.message());
    return id;
}

UniqueId fetch_fs(const Rendezvous& r) {
    namespace fs = std::filesystem;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r.timeout_s));
    for (;;) {
        std::error_code ec;
        if (fs::exists(r.file, ec) && fs::file_size(r.file, ec) == sizeof(UniqueId)) {
            UniqueId id{};
            std::ifstream f(r.file, std::ios::binary);
            if (f.read(id.data(), static_cast<std::streamsize>(id.size()))) return id;
        }
        if (seconds_left(deadline) <= 0)
            throw std::runtime_error("rendezvous: rank " + std::to_string(r.rank) + " waited " +
                                     std::to_string(static_cast<int>(r.timeout_s)) + " s for the NCCL id file '" + r.file + "'");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

}  // namespace

std::optional<Rendezvous> rendezvous_from_env(const std::function<const char*(const char*)>& env) {
    Rendezvous r;
    const auto rank = number(env, "RANK", 0, kMaxRanks), world = number(env, "WORLD_SIZE", 1, kMaxRanks);
    const auto slurm_rank = number(env, "SLURM_PROCID", 0, kMaxRanks), slurm_world = number(env, "SLURM_NTASKS", 1, kMaxRanks);
    if (rank && world) {
        r.rank = static_cast<int>(*rank);
        r.world_size = static_cast<int>(*world);
        r.local_rank = static_cast<int>(number(env, "LOCAL_RANK", 0, kMaxRanks).value_or(0));
        r.source = "torchrun";
        r.master_addr = text(env, "MASTER_ADDR", "127.0.0.1");
    } else if (slurm_rank && slurm_world) {
        r.rank = static_cast<int>(*slurm_rank);
        r.world_size = static_cast<int>(*slurm_world);
        r.local_rank = static_cast<int>(number(env, "SLURM_LOCALID", 0, kMaxRanks).value_or(0));
        r.source = "slurm";
        r.master_addr = text(env, "MASTER_ADDR", text(env, "SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"));
    } else {
        return std::nullopt;
    }
    if (r.rank >= r.world_size)
        throw InputError(r.source == "slurm" ? "SLURM_PROCID" : "RANK",
                         std::to_string(r.rank) + " is not below the world size " + std::to_string(r.world_size));
    r.master_port = static_cast<int>(number(env, "MASTER_PORT", 1, 65535).value_or(29500));
    r.method = text(env, "PREFLIGHT_COMM_INIT", "tcp");
    if (r.method != "tcp" && r.method != "fs") throw InputError("PREFLIGHT_COMM_INIT", "must be tcp or fs, got '" + r.method + "'");
    r.file = text(env, "PREFLIGHT_NCCL_ID_FILE", "");
    if (r.method == "fs" && r.file.empty())
        throw InputError("PREFLIGHT_NCCL_ID_FILE", "names the id file on a shared file system (needed with PREFLIGHT_COMM_INIT=fs)");
    r.timeout_s = static_cast<double>(number(env, "PREFLIGHT_COMM_TIMEOUT_S", 1, 86400).value_or(300));
    return r;
}

UniqueId exchange_unique_id(const Rendezvous& r, const std::function<UniqueId()>& make_id) {
    if (r.world_size == 1) return make_id();
    if (r.method == "fs") return r.rank == 0 ? serve_fs(r, make_id()) : fetch_fs(r);
    return r.rank == 0 ? serve_tcp(r, make_id()) : fetch_tcp(r);
}

void remove_unique_id_file(const Rendezvous& r) {
    if (r.method != "fs" || r.rank != 0 || r.world_size == 1) return;
    std::error_code ec;
    std::filesystem::remove(r.file, ec);
}

}  // namespace preflight::runtime
