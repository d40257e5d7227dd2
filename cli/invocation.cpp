#include "invocation.hpp"

#include <chrono>
#include <cstdlib>
#include <ctime>

#ifndef PREFLIGHT_VERSION
#define PREFLIGHT_VERSION "unknown"
#endif

namespace preflight::cli {

std::string utc_now(const char* strftime_format) {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, strftime_format, &tm);
    return buf;
}

nlohmann::json invocation_json(const CLI::App& sub, const std::filesystem::path& data_dir) {
    nlohmann::json args = nlohmann::json::array({sub.get_name()});
    for (const CLI::Option* o : sub.get_options()) {
        if (o->count() == 0 || o->get_name() == "--help") continue;
        if (o->get_expected_max() == 0) {  // a switch (takes no value): its name alone
            args.push_back(o->get_name());
            continue;
        }
        for (const std::string& v : o->results()) {
            args.push_back(o->get_name());
            args.push_back(v);
        }
    }
    const char* env = std::getenv("PREFLIGHT_DATA_DIR");
    return {{"preflight_version", PREFLIGHT_VERSION},
            {"arguments", args},
            {"environment",
             {{"PREFLIGHT_DATA_DIR", env ? nlohmann::json(env) : nlohmann::json()},
              {"data_dir", data_dir.string()},
              {"date_utc", utc_now("%Y-%m-%dT%H:%M:%SZ")}}}};
}

}  // namespace preflight::cli
