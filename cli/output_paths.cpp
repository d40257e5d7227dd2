#include "output_paths.hpp"

#include <filesystem>

#include "preflight/planner/error.hpp"

namespace preflight::cli {

namespace fs = std::filesystem;

namespace {

fs::file_type type_of(const fs::path& p) {
    std::error_code ec;
    return fs::status(p, ec).type();
}

bool missing(fs::file_type t) { return t == fs::file_type::not_found || t == fs::file_type::none; }

}  // namespace

void check_output_file(const std::string& path, const std::string& flag) {
    if (path.empty()) throw InputError(flag, "must name a file, got an empty path");
    const fs::path p = path;
    if (type_of(p) == fs::file_type::directory)
        throw InputError(flag, "'" + path + "' is a directory; give the file's path");
    const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
    const fs::file_type t = type_of(folder);
    if (missing(t)) throw InputError(flag, "cannot write '" + path + "': its folder '" + folder.string() + "' does not exist");
    if (t != fs::file_type::directory)
        throw InputError(flag, "cannot write '" + path + "': '" + folder.string() + "' is not a folder");
}

void check_output_dir(const std::string& path, const std::string& flag) {
    if (path.empty()) throw InputError(flag, "must name a folder, got an empty path");
    // The nearest part of the path that exists must be a folder (the rest is created).
    for (fs::path p = fs::path(path).lexically_normal(); !p.empty(); p = p.parent_path()) {
        const fs::file_type t = type_of(p);
        if (missing(t)) {
            if (p == p.parent_path()) break;
            continue;
        }
        if (t == fs::file_type::directory) return;
        throw InputError(flag, p.string() == fs::path(path).lexically_normal().string()
                                   ? "'" + path + "' is not a folder"
                                   : "cannot make the folder '" + path + "': '" + p.string() + "' is not a folder");
    }
}

}  // namespace preflight::cli
