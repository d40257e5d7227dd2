// A small reader of the shell that Megatron-LM launch scripts are written in (megatron_script.hpp):
// a lexer into words and operators with their lines, then an interpreter that keeps variables
// and arrays, expands words and finds the launch line. Our own code (no shell is run).
#include "megatron_script.hpp"

#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

namespace preflight::megatron_script {

namespace {

enum class Tok { word, separator, open, close, redirect };

struct Raw {
    Tok kind = Tok::word;
    std::string text;  // a word as written (quotes and $ references kept)
    int line = 0;
};

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The end (one past) of the group opened at s[i] ('(' or '{'), skipping quoted text.
std::size_t group_end(std::string_view s, std::size_t i) {
    const char open = s[i], close = open == '(' ? ')' : '}';
    int depth = 0;
    for (; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '\\') {
            ++i;
        } else if (c == '\'' || c == '"') {
            for (++i; i < s.size() && s[i] != c; ++i)
                if (c == '"' && s[i] == '\\') ++i;
        } else if (c == open) {
            ++depth;
        } else if (c == close && --depth == 0) {
            return i + 1;
        }
    }
    return s.size();
}

// The end (one past) of the quoted text starting at s[i] (a quote character).
std::size_t quote_end(std::string_view s, std::size_t i) {
    const char q = s[i];
    for (++i; i < s.size() && s[i] != q; ++i) {
        if (q == '"' && s[i] == '\\') ++i;
        else if (q == '"' && s[i] == '$' && i + 1 < s.size() && (s[i + 1] == '(' || s[i + 1] == '{'))
            i = group_end(s, i + 1) - 1;
    }
    return std::min(i + 1, s.size());
}

class Lexer {
public:
    explicit Lexer(std::string_view s) : s_(s) {}

    std::vector<Raw> run() {
        while (i_ < s_.size()) step();
        flush();
        return out_;
    }

private:
    void flush() {
        if (in_word_) out_.push_back({Tok::word, word_, word_line_});
        word_.clear();
        in_word_ = false;
    }
    void op(Tok kind) {
        flush();
        out_.push_back({kind, "", line_});
    }
    // Copies s[i, end) into the word, counting its newlines.
    void take(std::size_t end) {
        if (!in_word_) word_line_ = line_;
        in_word_ = true;
        for (; i_ < end; ++i_) {
            if (s_[i_] == '\n') ++line_;
            word_ += s_[i_];
        }
    }
    void step() {
        const char c = s_[i_];
        const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
        if (c == '\\' && (next == '\n' || (next == '\r' && i_ + 2 < s_.size() && s_[i_ + 2] == '\n'))) {
            i_ += next == '\n' ? 2 : 3;  // a continuation: the command goes on
            ++line_;
        } else if (c == '\n') {
            op(Tok::separator);
            ++line_, ++i_;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            flush(), ++i_;
        } else if (c == '#' && !in_word_) {
            while (i_ < s_.size() && s_[i_] != '\n') ++i_;
        } else if (c == ';' || c == '&' || c == '|') {
            op(Tok::separator), ++i_;
        } else if (c == '>' || c == '<') {
            if (in_word_ && word_.find_first_not_of("0123456789") == std::string::npos) in_word_ = false, word_.clear();
            op(Tok::redirect);
            for (++i_; i_ < s_.size() && (s_[i_] == '>' || s_[i_] == '&');) ++i_;
        } else if (c == '(' || c == ')') {
            op(c == '(' ? Tok::open : Tok::close), ++i_;
        } else if (c == '\'' || c == '"') {
            take(quote_end(s_, i_));
        } else if (c == '\\') {
            take(std::min(i_ + 2, s_.size()));
        } else if (c == '$' && (next == '(' || next == '{')) {
            take(group_end(s_, i_ + 1));
        } else if (c == '`') {
            const std::size_t end = s_.find('`', i_ + 1);
            take(end == std::string_view::npos ? s_.size() : end + 1);
        } else {
            take(i_ + 1);
        }
    }

    std::string_view s_;
    std::size_t i_ = 0;
    int line_ = 1;
    std::vector<Raw> out_;
    std::string word_;
    int word_line_ = 0;
    bool in_word_ = false;
};

struct Var {
    std::vector<Word> values;  // a scalar holds one
    bool array = false;
};
using Vars = std::map<std::string, Var>;

std::optional<std::int64_t> arithmetic(std::string_view expr, const Vars& vars);

// Expands one raw word: quotes removed, references replaced, unquoted expansions split on
// whitespace when `split` (a command's words; an assignment's value is not split).
class Expander {
public:
    Expander(const Vars& vars, int line, bool split) : vars_(vars), line_(line), split_(split), cur_line_(line) {}

    std::vector<Word> run(std::string_view raw) {
        for (std::size_t i = 0; i < raw.size();) i = step(raw, i);
        end_word();
        return out_;
    }
    // The expansion as one string (an assignment's value, a default), and what it left unresolved.
    std::string joined(std::string_view raw, std::string* unresolved = nullptr) {
        std::string s;
        for (const Word& w : run(raw)) {
            s += (s.empty() ? "" : " ") + w.text;
            if (unresolved && unresolved->empty()) *unresolved = w.unresolved;
        }
        return s;
    }

private:
    void end_word() {
        if (have_) out_.push_back({cur_, cur_line_, unresolved_});
        cur_.clear();
        unresolved_.clear();
        have_ = false;
        cur_line_ = line_;
    }
    void append(std::string_view t, int line, const std::string& unresolved) {
        if (cur_.empty()) cur_line_ = line;
        cur_ += t;
        have_ = true;
        if (unresolved_.empty()) unresolved_ = unresolved;
    }
    // Text from an expansion: unquoted, its whitespace separates words.
    void add(std::string_view t, bool quoted, int line, const std::string& unresolved = {}) {
        if (quoted || !split_) return append(t, line, unresolved);
        std::size_t i = 0;
        while (i < t.size()) {
            const bool space = t[i] == ' ' || t[i] == '\t' || t[i] == '\n';
            if (space) {
                end_word();
                while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n')) ++i;
                continue;
            }
            std::size_t j = i;
            while (j < t.size() && t[j] != ' ' && t[j] != '\t' && t[j] != '\n') ++j;
            append(t.substr(i, j - i), line, unresolved);
            i = j;
        }
    }
    void unresolved(std::string_view written, const std::string& name) { append(written, line_, name); }

    std::size_t step(std::string_view raw, std::size_t i);
    std::size_t reference(std::string_view raw, std::size_t i);
    void parameter(std::string_view inner, std::string_view written);
    void add_var(const Var& v, bool all_elements);

    const Vars& vars_;
    int line_;
    bool split_;
    bool dq_ = false;
    std::vector<Word> out_;
    std::string cur_, unresolved_;
    int cur_line_;
    bool have_ = false;
};

std::size_t Expander::step(std::string_view raw, std::size_t i) {
    const char c = raw[i];
    if (c == '\'' && !dq_) {
        const std::size_t end = raw.find('\'', i + 1);
        const std::size_t stop = end == std::string_view::npos ? raw.size() : end;
        append(raw.substr(i + 1, stop - i - 1), line_, {});
        return std::min(stop + 1, raw.size());
    }
    if (c == '"') {
        dq_ = !dq_;
        append("", line_, {});
        return i + 1;
    }
    if (c == '\\' && i + 1 < raw.size()) {
        const char n = raw[i + 1];
        if (dq_ && std::string_view("$`\"\\").find(n) == std::string_view::npos) append("\\", line_, {});
        append(std::string_view(&raw[i + 1], 1), line_, {});
        return i + 2;
    }
    if (c == '$') return reference(raw, i);
    if (c == '`') {
        const std::size_t end = raw.find('`', i + 1);
        const std::size_t stop = end == std::string_view::npos ? raw.size() : end + 1;
        unresolved(raw.substr(i, stop - i), "`...`");
        return stop;
    }
    append(std::string_view(&raw[i], 1), line_, {});
    return i + 1;
}

// A $ reference at raw[i]: $((arithmetic)), $(command), ${parameter}, $NAME, $1.
std::size_t Expander::reference(std::string_view raw, std::size_t i) {
    const char n = i + 1 < raw.size() ? raw[i + 1] : '\0';
    if (n == '(' || n == '{') {
        const std::size_t end = group_end(raw, i + 1);
        const std::string_view written = raw.substr(i, end - i);
        if (n == '{') {
            parameter(raw.substr(i + 2, end - i - 3), written);
        } else if (i + 2 < raw.size() && raw[i + 2] == '(') {
            const auto v = arithmetic(Expander(vars_, line_, false).joined(raw.substr(i + 3, end > i + 5 ? end - i - 5 : 0)), vars_);
            if (v) add(std::to_string(*v), true, line_);
            else unresolved(written, std::string(written));
        } else {
            unresolved(written, "$(...)");
        }
        return end;
    }
    std::size_t j = i + 1;
    if (name_start(n)) {
        while (j < raw.size() && name_char(raw[j])) ++j;
    } else if (std::isdigit(static_cast<unsigned char>(n)) || std::string_view("@*#?$!-").find(n) != std::string_view::npos) {
        ++j;
    } else {
        append("$", line_, {});
        return i + 1;
    }
    parameter(raw.substr(i + 1, j - i - 1), raw.substr(i, j - i));
    return j;
}

// ${NAME}, ${NAME[@]}, ${NAME:-default} (also -, :=, =, :+, +); anything else stays unresolved.
void Expander::parameter(std::string_view inner, std::string_view written) {
    std::size_t j = 0;
    if (!inner.empty() && name_start(inner[0]))
        while (j < inner.size() && name_char(inner[j])) ++j;
    else if (!inner.empty() && std::isdigit(static_cast<unsigned char>(inner[0])))
        while (j < inner.size() && std::isdigit(static_cast<unsigned char>(inner[j]))) ++j;
    const std::string name(inner.substr(0, j));
    bool all = false;
    if (inner.substr(j, 3) == "[@]" || inner.substr(j, 3) == "[*]") all = true, j += 3;
    else if (inner.substr(j, 3) == "[0]") j += 3;
    const std::string_view rest = inner.substr(j);
    const auto it = vars_.find(name);
    const bool set = it != vars_.end();
    const bool empty = !set || it->second.values.empty() || (it->second.values.size() == 1 && it->second.values[0].text.empty());
    if (name.empty() || (!rest.empty() && rest.find_first_of("-=+") != (rest[0] == ':' ? 1u : 0u))) {
        return unresolved(written, std::string(written));
    }
    if (!rest.empty()) {
        const bool colon = rest[0] == ':';
        const char opc = rest[colon ? 1 : 0];
        const std::string_view word = rest.substr(colon ? 2 : 1);
        const bool missing = colon ? empty : !set;
        if (opc == '+') {
            if (!missing) add(Expander(vars_, line_, false).joined(word), dq_, line_);
            return;
        }
        if (missing) {
            std::string why;
            const std::string v = Expander(vars_, line_, false).joined(word, &why);
            return add(v, dq_, line_, why);
        }
    }
    if (!set) return unresolved(written, name);
    add_var(it->second, all);
}

void Expander::add_var(const Var& v, bool all_elements) {
    if (!all_elements || !v.array) {
        if (!v.values.empty()) add(v.values[0].text, dq_, v.array ? v.values[0].line : line_, v.values[0].unresolved);
        return;
    }
    for (std::size_t k = 0; k < v.values.size(); ++k) {
        if (k > 0 && (dq_ || split_)) end_word();
        else if (k > 0) append(" ", line_, {});
        add(v.values[k].text, dq_, v.values[k].line, v.values[k].unresolved);
    }
}

// $(( )) over integers: + - * / % and parentheses, numbers and variable names (after the $
// references in it were expanded). nullopt for anything else, a division by zero or an overflow.
class Arithmetic {
public:
    Arithmetic(std::string_view s, const Vars& vars) : s_(s), vars_(vars) {}
    std::optional<std::int64_t> run() {
        const std::int64_t v = sum();
        skip();
        if (!ok_ || i_ != s_.size()) return std::nullopt;
        return v;
    }

private:
    void skip() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    bool eat(char c) {
        skip();
        if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
        return false;
    }
    std::int64_t apply(char op, std::int64_t a, std::int64_t b) {
        std::int64_t r = 0;
        if (op == '+') ok_ = ok_ && !__builtin_add_overflow(a, b, &r);
        if (op == '-') ok_ = ok_ && !__builtin_sub_overflow(a, b, &r);
        if (op == '*') ok_ = ok_ && !__builtin_mul_overflow(a, b, &r);
        if (op == '/' || op == '%') {
            ok_ = ok_ && b != 0 && !(a == INT64_MIN && b == -1);
            if (ok_) r = op == '/' ? a / b : a % b;
        }
        return r;
    }
    std::int64_t sum() {
        std::int64_t v = product();
        for (char op = 0; ok_ && ((op = '+', eat('+')) || (op = '-', eat('-')));) v = apply(op, v, product());
        return v;
    }
    std::int64_t product() {
        std::int64_t v = factor();
        for (char op = 0; ok_ && ((op = '*', eat('*')) || (op = '/', eat('/')) || (op = '%', eat('%')));)
            v = apply(op, v, factor());
        return v;
    }
    std::int64_t factor() {
        if (eat('(')) {
            const std::int64_t v = sum();
            ok_ = ok_ && eat(')');
            return v;
        }
        if (eat('-')) return apply('-', 0, factor());
        skip();
        const std::size_t start = i_;
        while (i_ < s_.size() && name_char(s_[i_])) ++i_;
        const std::string token(s_.substr(start, i_ - start));
        if (token.empty()) return ok_ = false, 0;
        std::string digits = token;
        if (name_start(token[0])) {
            const auto it = vars_.find(token);
            if (it == vars_.end() || it->second.values.empty()) return ok_ = false, 0;
            digits = it->second.values[0].text;
        }
        std::int64_t v = 0;
        for (char c : digits) {
            if (!std::isdigit(static_cast<unsigned char>(c))) return ok_ = false, 0;
            v = apply('+', apply('*', v, 10), c - '0');
        }
        return digits.empty() ? (ok_ = false, 0) : v;
    }

    std::string_view s_;
    const Vars& vars_;
    std::size_t i_ = 0;
    bool ok_ = true;
};

std::optional<std::int64_t> arithmetic(std::string_view expr, const Vars& vars) { return Arithmetic(expr, vars).run(); }

// NAME=value / NAME+=value: the name, whether it appends, and the value as written.
struct Assignment {
    std::string name;
    bool append = false;
    std::string_view value;
};
std::optional<Assignment> assignment(std::string_view word) {
    if (word.empty() || !name_start(word[0])) return std::nullopt;
    std::size_t j = 0;
    while (j < word.size() && name_char(word[j])) ++j;
    const bool append = word.substr(j, 2) == "+=";
    if (!append && (j >= word.size() || word[j] != '=')) return std::nullopt;
    return Assignment{std::string(word.substr(0, j)), append, word.substr(j + (append ? 2 : 1))};
}

// Words a command starts with that do not change what it runs.
bool prefix_word(const std::string& w) {
    static const std::set<std::string> words{"then", "else", "do", "done", "fi", "{", "}", "!", "export", "local",
                                             "readonly", "declare", "typeset", "time", "exec", "nohup", "env"};
    return words.count(w) > 0 || (w.size() > 1 && w[0] == '-' && w[1] != '-');
}
// Commands that never launch training (their words may still name a .py file).
bool inert_command(const std::string& w) {
    static const std::set<std::string> words{"if", "elif", "while", "until", "for", "case", "[[", "[", "test", "echo",
                                             "printf", "mkdir", "cd", "exit", "set", "source", ".", "cp", "rm", "ls",
                                             "cat", "return", "shift", "trap", "wait", "sleep", "unset", "read"};
    return words.count(w) > 0;
}

class Interpreter {
public:
    Script run(const std::vector<Raw>& toks);

private:
    void command(const std::vector<const Raw*>& words);
    void assign(const Raw& w, const Assignment& a);
    void launch(const std::vector<Word>& all, std::size_t script_at, int line);

    Vars vars_;
    Script script_;
    std::vector<Word> plain_;  // commands that are --flags (an arguments file)
};

Script Interpreter::run(const std::vector<Raw>& toks) {
    std::vector<const Raw*> cmd;
    for (std::size_t i = 0; i < toks.size(); ++i) {
        const Raw& t = toks[i];
        const auto a = t.kind == Tok::word ? assignment(t.text) : std::nullopt;
        if (a && a->value.empty() && i + 1 < toks.size() && toks[i + 1].kind == Tok::open) {
            // NAME=( ... ) / NAME+=( ... ): an array, its elements split as words are.
            // Bash expands the elements before it assigns: NAME=("${NAME[@]}" more) keeps NAME's own.
            std::vector<Word> values;
            std::size_t j = i + 2;
            for (; j < toks.size() && toks[j].kind != Tok::close; ++j)
                if (toks[j].kind == Tok::word)
                    for (Word& w : Expander(vars_, toks[j].line, true).run(toks[j].text)) values.push_back(std::move(w));
            Var& v = vars_[a->name];
            if (!a->append || !v.array) v = Var{{}, true};
            for (Word& w : values) v.values.push_back(std::move(w));
            i = j;
        } else if (t.kind == Tok::word) {
            cmd.push_back(&t);
        } else if (t.kind == Tok::redirect) {
            if (i + 1 < toks.size() && toks[i + 1].kind == Tok::word) ++i;  // its target
        } else {
            command(cmd);
            cmd.clear();
        }
    }
    command(cmd);
    if (script_.launches == 0) script_.arguments = std::move(plain_);
    return std::move(script_);
}

void Interpreter::assign(const Raw& w, const Assignment& a) {
    std::string unresolved;
    std::string value = Expander(vars_, w.line, false).joined(a.value, &unresolved);
    Var& v = vars_[a.name];
    if (a.append && v.array) {
        v.values.push_back({value, w.line, unresolved});
        return;
    }
    if (a.append && !v.values.empty()) value = v.values[0].text + value;
    v = Var{{Word{value, w.line, unresolved}}, false};
}

void Interpreter::command(const std::vector<const Raw*>& words) {
    std::size_t k = 0;
    while (k < words.size() && prefix_word(words[k]->text)) ++k;
    if (k < words.size() && inert_command(words[k]->text)) return;
    for (std::optional<Assignment> a; k < words.size() && (a = assignment(words[k]->text)); ++k) assign(*words[k], *a);
    if (k == words.size()) return;
    std::vector<Word> all;
    for (std::size_t i = k; i < words.size(); ++i)
        for (Word& w : Expander(vars_, words[i]->line, true).run(words[i]->text)) all.push_back(std::move(w));
    if (all.empty()) return;
    if (all[0].text.rfind("--", 0) == 0) {
        plain_.insert(plain_.end(), all.begin(), all.end());
        return;
    }
    for (std::size_t p = 0; p < all.size(); ++p) {
        const std::string& t = all[p].text;
        if (t.size() > 3 && t.compare(t.size() - 3, 3, ".py") == 0 && t[0] != '-' &&
            t.find_first_of(" \t") == std::string::npos)
            return launch(all, p, words[k]->line);
    }
}

void Interpreter::launch(const std::vector<Word>& all, std::size_t script_at, int line) {
    if (script_.launches++ > 0) return;
    std::string name = all[0].text.substr(all[0].text.find_last_of('/') + 1);
    // The words between the launcher and the script (none when the line starts with the script:
    // "pretrain_gpt.py --num-layers ..."; fuzz finding: that range was reversed).
    script_.launcher.clear();
    if (script_at > 0) script_.launcher.assign(all.begin() + 1, all.begin() + static_cast<std::ptrdiff_t>(script_at));
    for (const Word& w : script_.launcher)
        if (w.text == "torch.distributed.run" || w.text == "torch.distributed.launch") name = "torchrun";
    script_.launcher_name = script_at == 0 ? "python" : name;
    script_.launch_line = line;
    script_.arguments.assign(all.begin() + static_cast<std::ptrdiff_t>(script_at) + 1, all.end());
}

}  // namespace

Script read_script(std::string_view text) { return Interpreter().run(Lexer(text).run()); }

}  // namespace preflight::megatron_script
