// A JSON config (DeepSpeed's ds_config) as a ConfigTree: nlohmann parses the values
// (parse_json_text: syntax errors and numbers beyond a double name the file and line); a small
// scanner of our own over the same text finds the line of every object key, as a JSON pointer.
#include <cctype>
#include <string>
#include <vector>

#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/user_file.hpp"

namespace preflight {

namespace {

// Appends the code point `cp` as UTF-8.
void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

unsigned hex4(std::string_view text, std::size_t at) {
    unsigned v = 0;
    for (std::size_t i = at; i < at + 4 && i < text.size(); ++i) {
        const char c = text[i];
        v = v * 16 + static_cast<unsigned>(c >= '0' && c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

// The JSON string starting at text[i] == '"', decoded; `i` ends just past the closing quote.
// The text has already parsed, so every escape is well formed.
std::string read_string(std::string_view text, std::size_t& i) {
    std::string out;
    for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] != '\\') {
            out += text[i];
            continue;
        }
        const char e = text[++i];
        switch (e) {
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                unsigned cp = hex4(text, i + 1);
                i += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < text.size() && text[i + 1] == '\\' && text[i + 2] == 'u') {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(text, i + 3) - 0xDC00);
                    i += 6;
                }
                append_utf8(out, cp);
                break;
            }
            default: out += e; break;  // \" \\ \/
        }
    }
    ++i;
    return out;
}

// An open object or array; the pointer of the innermost one is the scanner's `path`.
struct Frame {
    bool array = false;
    std::size_t path_size = 0;  // the path's length around this frame (its parent's pointer)
    std::int64_t index = 0;
    bool want_key = true;
    std::string key;  // the member being read
};

// The token of the value `top` is reading: its index or its key.
std::string child_token(const Frame& top) { return top.array ? std::to_string(top.index) : json_pointer_token(top.key); }

// Every object key's JSON pointer -> its 1-based line. Linear in the text: one path string grows
// and shrinks as arrays and objects open and close (no pointer per open frame), the scan stops
// past limits::kMaxJsonDepth levels (a text that deep is refused), and once the pointers kept
// would hold more than 4 bytes per byte of text, later keys are kept without a line.
std::map<std::string, int> key_lines(std::string_view text) {
    std::map<std::string, int> lines;
    std::vector<Frame> stack;
    std::string path;
    const std::size_t budget = 4 * text.size() + 4096;
    std::size_t kept = 0;
    int line = 1;
    for (std::size_t i = 0; i < text.size();) {
        const char c = text[i];
        if (c == '"') {
            const int at = line;
            std::string s = read_string(text, i);
            if (!stack.empty() && !stack.back().array && stack.back().want_key) {
                stack.back().key = std::move(s);
                stack.back().want_key = false;
                std::string pointer = path;  // appended in steps: GCC 12's -Wrestrict misreads path + "/" + ...
                pointer += '/';
                pointer += json_pointer_token(stack.back().key);
                kept += pointer.size();
                if (kept <= budget) lines.emplace(std::move(pointer), at);
            }
            continue;
        }
        if (c == '\n') ++line;
        if (c == '{' || c == '[') {
            if (stack.size() >= static_cast<std::size_t>(limits::kMaxJsonDepth)) break;
            Frame f;
            f.array = c == '[';
            f.path_size = path.size();
            if (!stack.empty()) {
                path += '/';
                path += child_token(stack.back());
            }
            stack.push_back(std::move(f));
        } else if ((c == '}' || c == ']') && !stack.empty()) {
            path.resize(stack.back().path_size);
            stack.pop_back();
        } else if (c == ',' && !stack.empty()) {
            if (stack.back().array)
                ++stack.back().index;
            else
                stack.back().want_key = true;
        }
        ++i;
    }
    return lines;
}

// "/zero_optimization/stage" -> "zero_optimization.stage" (~1 -> '/', ~0 -> '~').
std::string dotted(const std::string& pointer) {
    std::string s;
    for (std::size_t i = 1; i < pointer.size(); ++i) {
        if (pointer[i] == '/') s += '.';
        else if (pointer[i] == '~' && i + 1 < pointer.size()) s += pointer[++i] == '1' ? '/' : '~';
        else s += pointer[i];
    }
    return s;
}

// The line nlohmann's message names ("... at line 3, column 7: ..."; "... line 3 is not valid"), 0 if none.
int message_line(const std::string& message) {
    const std::size_t at = message.find("line ");
    if (at == std::string::npos) return 0;
    int line = 0;
    for (std::size_t i = at + 5; i < message.size() && std::isdigit(static_cast<unsigned char>(message[i])); ++i)
        line = line * 10 + (message[i] - '0');
    return line;
}

// The error as "file:line: key: ..." with the last key written at or before that line (the
// deepest on the line), so a syntax error or an overflowing number names where it is.
InputError located(const InputError& e, std::string_view text, const std::string& file) {
    const std::string message = e.what();
    const int line = message_line(message);
    std::string key;
    int best = 0;
    // Scanning stops being exact past the error, but keys before it are where they were read.
    for (const auto& [pointer, at] : key_lines(text))
        if (at <= line && (at > best || (at == best && pointer.size() > key.size()))) best = at, key = pointer;
    if (line == 0 || key.empty()) return e;
    return InputError(ConfigSpot{file, dotted(key), line}.text(), e.detail());
}

}  // namespace

ConfigTree json_config_tree(std::string_view text, const std::string& file) {
    ConfigTree tree;
    tree.file = file;
    try {
        tree.root = parse_json_text(std::string(text), file, "'" + file + "'");
    } catch (const InputError& e) {
        throw located(e, text, file);
    }
    if (!tree.root.is_object())
        throw InputError(file, "a JSON config must hold an object ({ ... }), got " + std::string(tree.root.type_name()));
    tree.lines = key_lines(text);
    return tree;
}

}  // namespace preflight
