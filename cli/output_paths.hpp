// Files and folders the commands write, checked before any work: a path that cannot be
// written is exit 2 naming the flag and the path (docs/interface.md), never an internal error
// after the work is done, and nothing is written elsewhere instead.
#pragma once

#include <string>

namespace preflight::cli {

// `path`, given with `flag`, can be written as a file: not empty, not a folder, and its
// folder exists (it is not created).
void check_output_file(const std::string& path, const std::string& flag);

// `path`, given with `flag`, is a folder or can be made one: not empty, not a file, and its
// parent folder exists (only the last part is created).
void check_output_dir(const std::string& path, const std::string& flag);

}  // namespace preflight::cli
