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
    // The folder itself may be made, not the folders above it: a typo in a parent would
    // otherwise send the files into a fresh stray tree (as check_output_file refuses it).
    fs::path p = fs::path(path).lexically_normal();
    if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "out/" is "out"
    const fs::file_type t = type_of(p);
    if (t == fs::file_type::directory) return;
    if (!missing(t)) throw InputError(flag, "'" + path + "' is not a folder");
    const fs::path parent = p.has_parent_path() && p.parent_path() != p ? p.parent_path() : fs::path(".");
    const fs::file_type up = type_of(parent);
    if (missing(up))
        throw InputError(flag, "cannot make the folder '" + path + "': its parent '" + parent.string() + "' does not exist");
    if (up != fs::file_type::directory)
        throw InputError(flag, "cannot make the folder '" + path + "': '" + parent.string() + "' is not a folder");
}

}  // namespace preflight::cli
