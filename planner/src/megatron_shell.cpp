// The launch-script reader's lexer, variables and word expansion (megatron_shell.hpp): bash's
// quoting, parameter expansion and word splitting as the GNU Bash manual ("Shell Expansions",
// "Quoting") describes them, for the subset launch scripts use. Our own code (no shell is run).
#include "megatron_shell.hpp"

#include <algorithm>
#include <cctype>
#include <climits>

#include "preflight/planner/error.hpp"

namespace preflight::megatron_script::shell {

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool valid_name(std::string_view w) { return !w.empty() && name_start(w[0]) && std::all_of(w.begin(), w.end(), name_char); }

namespace {

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
    void op(Tok kind, std::string text, std::size_t length) {
        flush();
        out_.push_back({kind, std::move(text), line_});
        i_ += length;
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
    void newline() {
        op(Tok::separator, "\n", 1);
        ++line_;
        if (!heredoc_.empty()) skip_heredoc();
    }
    // The lines of a here-document up to its delimiter (bash "Here Documents"; <<- strips leading tabs).
    void skip_heredoc() {
        while (i_ < s_.size()) {
            std::size_t end = s_.find('\n', i_);
            if (end == std::string_view::npos) end = s_.size();
            std::string_view line = s_.substr(i_, end - i_);
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            while (strip_tabs_ && !line.empty() && line.front() == '\t') line.remove_prefix(1);
            i_ = std::min(end + 1, s_.size());
            ++line_;
            if (line == heredoc_) break;
        }
        heredoc_.clear();
    }
    // << WORD: the delimiter (quotes removed) becomes the redirect's target word.
    void heredoc_start() {
        op(Tok::redirect, "<", 2);
        strip_tabs_ = i_ < s_.size() && s_[i_] == '-';
        if (strip_tabs_) ++i_;
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
        std::string delimiter;
        for (; i_ < s_.size() && std::string_view(" \t\r\n;&|<>()").find(s_[i_]) == std::string_view::npos; ++i_)
            if (s_[i_] != '\'' && s_[i_] != '"' && s_[i_] != '\\') delimiter += s_[i_];
        out_.push_back({Tok::word, delimiter, line_});
        heredoc_ = delimiter;
    }
    void redirect() {
        const char c = s_[i_];
        if (in_word_ && word_.find_first_not_of("0123456789") == std::string::npos) in_word_ = false, word_.clear();
        if (c == '<' && s_.substr(i_, 2) == "<<" && s_.substr(i_, 3) != "<<<" && heredoc_.empty()) return heredoc_start();
        op(Tok::redirect, std::string(1, c == '&' ? '>' : c), 1);
        while (i_ < s_.size() && (s_[i_] == '>' || s_[i_] == '<' || s_[i_] == '&')) ++i_;
    }
    void control() {
        const char c = s_[i_];
        const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
        if (c == ';') return next == ';' ? op(Tok::op, ";;", 2) : op(Tok::separator, ";", 1);
        if (c == '&' && next == '>') return redirect();
        if (c == '&') return next == '&' ? op(Tok::op, "&&", 2) : op(Tok::separator, "&", 1);
        if (next == '|') return op(Tok::op, "||", 2);
        op(Tok::op, "|", next == '&' ? 2 : 1);  // |& pipes stderr too
    }
    void step() {
        const char c = s_[i_];
        const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
        if (c == '\\' && (next == '\n' || (next == '\r' && i_ + 2 < s_.size() && s_[i_ + 2] == '\n'))) {
            i_ += next == '\n' ? 2 : 3;  // a continuation: the command goes on
            ++line_;
        } else if (c == '\n') {
            newline();
        } else if (c == ' ' || c == '\t' || c == '\r') {
            flush(), ++i_;
        } else if (c == '#' && !in_word_) {
            while (i_ < s_.size() && s_[i_] != '\n') ++i_;
        } else if (c == ';' || c == '&' || c == '|') {
            control();
        } else if (c == '>' || c == '<') {
            redirect();
        } else if (c == '(' && next == '(' && !in_word_) {
            take(group_end(s_, i_));  // (( arithmetic )): one word; its < and > are not redirects
        } else if (c == '(' || c == ')') {
            op(c == '(' ? Tok::open : Tok::close, std::string(1, c), 1);
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
    std::string heredoc_;  // the delimiter of a here-document whose body starts at the next line
    bool strip_tabs_ = false;
};

}  // namespace

std::vector<Raw> lex(std::string_view text) { return Lexer(text).run(); }

void add_piece(Value& value, Piece p, int line, Budget* budget) {
    if (budget && ((budget->chars += p.text.size()) > kMaxScriptChars || ++budget->pieces > kMaxScriptPieces))
        throw InputError(std::to_string(line), "the script's expansions pass " + std::to_string(kMaxScriptChars) +
                                                   " characters or " + std::to_string(kMaxScriptPieces) +
                                                   " parts (kMaxScriptChars, kMaxScriptPieces): it grows its "
                                                   "variables without end");
    if (value.chars + p.text.size() > kMaxValueChars)
        throw InputError(std::to_string(line), "a value grows past " + std::to_string(kMaxValueChars) +
                                                   " characters (kMaxValueChars)");
    value.chars += p.text.size();
    Piece* last = value.pieces.empty() ? nullptr : &value.pieces.back();
    const bool same_marks = last && last->unresolved == p.unresolved && last->branch == p.branch;
    if (same_marks && (last->line == p.line || value.pieces.size() >= kMaxPieces))
        last->text += p.text;
    else
        value.pieces.push_back(std::move(p));
}

std::string Value::text() const {
    std::string s;
    for (const Piece& p : pieces) s += p.text;
    return s;
}

Word Value::word() const {
    Word w{text(), line, {}, 0};
    for (const Piece& p : pieces) {
        if (w.unresolved.empty()) w.unresolved = p.unresolved;
        if (w.branch == 0) w.branch = p.branch;
    }
    return w;
}

std::vector<Value> Expander::run(std::string_view raw) {
    for (std::size_t i = 0; i < raw.size();) i = step(raw, i);
    end_word();
    return std::move(out_);
}

Value Expander::joined(std::string_view raw) {
    Value v;
    v.line = line_;
    for (Value& w : run(raw)) {
        if (!v.pieces.empty()) add_piece(v, {" ", {}, 0, w.line}, line_, budget_);
        for (Piece& p : w.pieces) add_piece(v, std::move(p), line_, budget_);
    }
    return v;
}

void Expander::end_word() {
    if (have_) {
        cur_.line = cur_line_;
        out_.push_back(std::move(cur_));
    }
    cur_ = Value{};
    cur_chars_ = 0;
    have_ = false;
    cur_line_ = line_;
}

void Expander::append(std::string_view t, int line, const std::string& unresolved, int branch) {
    if (cur_chars_ == 0) cur_line_ = line;
    cur_chars_ += t.size();
    have_ = true;
    add_piece(cur_, {std::string(t), unresolved, branch, line}, line_, budget_);
}

// Text from an expansion: unquoted, its whitespace separates words (bash "Word Splitting").
// A reference left unresolved stays one word: what it expands to is not known.
void Expander::add(std::string_view t, bool quoted, int line, const std::string& unresolved, int branch) {
    if (quoted || !split_ || !unresolved.empty()) return append(t, line, unresolved, branch);
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
        append(t.substr(i, j - i), line, unresolved, branch);
        i = j;
    }
}

// A variable's value, piece by piece: an unresolved piece marks only the words it falls in.
void Expander::add_value(const Value& v, bool quoted) {
    for (const Piece& p : v.pieces) add(p.text, quoted, p.line, p.unresolved, p.branch);
}

void Expander::literal(std::string_view t) {
    for (const char c : t) {
        append(std::string_view(&c, 1), line_);
        if (c == '\n') ++line_;
    }
}

std::size_t Expander::step(std::string_view raw, std::size_t i) {
    const char c = raw[i];
    if (c == '\'' && !dq_) {
        const std::size_t end = raw.find('\'', i + 1);
        const std::size_t stop = end == std::string_view::npos ? raw.size() : end;
        append("", line_);
        literal(raw.substr(i + 1, stop - i - 1));
        return std::min(stop + 1, raw.size());
    }
    if (c == '"') {
        dq_ = !dq_;
        append("", line_);
        return i + 1;
    }
    if (c == '\\' && i + 1 < raw.size()) {
        const char n = raw[i + 1];
        // Inside double quotes a backslash-newline is removed (bash "Double Quotes"), as outside.
        if (dq_ && (n == '\n' || (n == '\r' && raw.substr(i + 2, 1) == "\n"))) {
            ++line_;
            return i + (n == '\n' ? 2 : 3);
        }
        if (dq_ && std::string_view("$`\"\\").find(n) == std::string_view::npos) append("\\", line_);
        literal(raw.substr(i + 1, 1));
        return i + 2;
    }
    if (c == '$') return reference(raw, i);
    if (c == '`') {
        const std::size_t end = raw.find('`', i + 1);
        const std::size_t stop = end == std::string_view::npos ? raw.size() : end + 1;
        unresolved(raw.substr(i, stop - i), "`...`");
        return stop;
    }
    literal(raw.substr(i, 1));
    return i + 1;
}

// A $ reference at raw[i]: $((arithmetic)), $(command), ${parameter}, $NAME, $1.
namespace {

// The first undecided branch among a value's pieces, else `fallback`.
int first_branch(const Value& v, int fallback) {
    for (const Piece& p : v.pieces)
        if (p.branch != 0) return p.branch;
    return fallback;
}

}  // namespace

std::optional<Word> var_word(const Vars& vars, const std::string& name) {
    const auto it = vars.find(name);
    if (it == vars.end() || it->second.values.empty()) return std::nullopt;
    return it->second.values[0].word();
}

int arithmetic_names_branch(std::string_view expr, const Vars& vars) {
    for (std::size_t i = 0; i < expr.size();) {
        if (!name_start(expr[i])) {
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < expr.size() && name_char(expr[j])) ++j;
        const auto it = vars.find(std::string(expr.substr(i, j - i)));
        if (it != vars.end() && !it->second.values.empty())
            if (const int b = first_branch(it->second.values[0], 0)) return b;
        i = j;
    }
    return 0;
}

std::size_t Expander::reference(std::string_view raw, std::size_t i) {
    const char n = i + 1 < raw.size() ? raw[i + 1] : '\0';
    if (n == '(' || n == '{') {
        const std::size_t end = group_end(raw, i + 1);
        const std::string_view written = raw.substr(i, end - i);
        if (depth_ >= kMaxNesting) {
            unresolved(written, std::string(written));
        } else if (n == '{') {
            parameter(raw.substr(i + 2, end - i - 3), written);
        } else if (i + 2 < raw.size() && raw[i + 2] == '(') {
            const std::string_view inner = raw.substr(i + 3, end > i + 5 ? end - i - 5 : 0);
            const Value e = nested().joined(inner);
            std::string why;
            const auto v = arithmetic(e.text(), vars_, &why);
            const std::string inside = e.word().unresolved;
            // The result carries the undecided branch any of its operands came through.
            if (v) add(std::to_string(*v), true, line_, {}, first_branch(e, arithmetic_names_branch(e.text(), vars_)));
            else if (!inside.empty())
                unresolved(written, open_through(written, inside));
            else unresolved(written, std::string(written) + kOpenWhy + "which cannot be evaluated: " + why);
        } else {
            substitution(raw.substr(i + 2, end > i + 3 ? end - i - 3 : 0), written);
        }
        return end;
    }
    std::size_t j = i + 1;
    if (name_start(n)) {
        while (j < raw.size() && name_char(raw[j])) ++j;
    } else if (std::isdigit(static_cast<unsigned char>(n)) || std::string_view("@*#?$!-").find(n) != std::string_view::npos) {
        ++j;
    } else {
        append("$", line_);
        return i + 1;
    }
    parameter(raw.substr(i + 1, j - i - 1), raw.substr(i, j - i));
    return j;
}

Expander Expander::nested() const {
    Expander e(vars_, line_, false, depth_ + 1, budget_);
    e.args_ = args_;
    if (assign_) e.assigning(assign_, assign_branch_);
    return e;
}

// ${NAME:=word} assigns NAME when it is unset or empty, ${NAME=word} when it is unset (bash
// "Shell Parameter Expansion"); a positional or special parameter, or an element, is not assigned.
void Expander::assign_default(const std::string& name, const Value& v) {
    if (!assign_ || name.empty() || !name_start(name[0])) return;
    Value kept = v;
    for (Piece& p : kept.pieces) p.branch = p.branch != 0 ? p.branch : assign_branch_;
    assign_(name, std::move(kept));
}

// A variable, or the positional parameter $N / "$@" ("Positional Parameters"): set, unset, or
// not known (the script's own "$@"; past an unresolved word or a shift over one).
Expander::Found Expander::find(const std::string& name, bool arguments, Ref& ref) const {
    if (!arguments && (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0])) || name[0] == '0')) {
        const auto it = vars_.find(name);
        if (it == vars_.end()) return Found::unset;
        ref = {it->second.values.data(), it->second.values.data() + it->second.values.size(), it->second.array};
        return Found::set;
    }
    const std::vector<Value>* values = args_ ? &args_->values : nullptr;
    if (arguments) {
        if (!args_ || !args_->all) return Found::unknown;
        ref = {values->data(), values->data() + values->size(), true};
        return Found::set;
    }
    const std::size_t n = name.size() > 6 ? SIZE_MAX : std::stoul(name);
    if (args_ && n <= args_->sure) {
        ref = {values->data() + n - 1, values->data() + n, false};
        return Found::set;
    }
    if (!args_ || args_->script) return Found::unset;
    return args_->sure == values->size() ? Found::empty : Found::unknown;
}

namespace {

// Why ${inner} is left open: a form of parameter expansion the reader does not expand.
std::string not_expanded(std::string_view inner) {
    const std::string forms = "the reader expands ${NAME}, ${NAME[@]}, ${NAME:-word}, ${NAME:=word} and ${NAME:+word} "
                              "(also without ':')";
    if (inner.size() > 1 && inner[0] == '#') return "a length, which the reader does not expand (" + forms + ")";
    return "which the reader does not expand (" + forms + ")";
}

// A positional parameter the reader has no words for (kWordsNotGiven).
std::string positional_open(std::string_view written) { return std::string(written) + kOpenWhy + kWordsNotGiven; }

}  // namespace

// ${NAME}, ${NAME[@]}, ${NAME:-default} (also -, :=, =, :+, +); anything else stays unresolved.
// Inside a function call "$@" and "$*" are its arguments and $# their number (bash "Special
// Parameters"; both read as "$@").
void Expander::parameter(std::string_view inner, std::string_view written) {
    if (inner == "#") {
        if (args_ && !args_->script && args_->sure == args_->values.size())
            return add(std::to_string(args_->values.size()), true, line_);
        return unresolved(written, positional_open(written));
    }
    std::size_t j = 0;
    if (!inner.empty() && name_start(inner[0]))
        while (j < inner.size() && name_char(inner[j])) ++j;
    else if (!inner.empty() && std::isdigit(static_cast<unsigned char>(inner[0])))
        while (j < inner.size() && std::isdigit(static_cast<unsigned char>(inner[j]))) ++j;
    const bool arguments = inner == "@" || inner == "*";
    const std::string name = arguments ? "@" : std::string(inner.substr(0, j));
    bool all = arguments;
    if (arguments) j = 1;
    else if (inner.substr(j, 3) == "[@]" || inner.substr(j, 3) == "[*]") all = true, j += 3;
    else if (inner.substr(j, 3) == "[0]") j += 3;
    const bool element = j > name.size() && !arguments;
    const std::string_view rest = inner.substr(j);
    if (name.empty() || (!rest.empty() && rest.find_first_of("-=+") != (rest[0] == ':' ? 1u : 0u)))
        return unresolved(written, std::string(written) + kOpenWhy + not_expanded(inner));
    Ref ref;
    const Found found = find(name, arguments, ref);
    if (found == Found::unknown) return unresolved(written, positional_open(arguments ? std::string(written) : "$" + name));
    const bool set = found == Found::set;
    const bool empty = !set || ref.begin == ref.end || (ref.end - ref.begin == 1 && ref.begin->text().empty());
    if (!rest.empty()) {
        const bool colon = rest[0] == ':';
        const char opc = rest[colon ? 1 : 0];
        const bool missing = colon ? empty : !set;
        if (opc == '+' ? missing : !missing) {
            if (opc != '+') return add_var(ref, all);
            return;
        }
        // Which word stands depends on NAME: it carries the undecided branch NAME came through.
        const int branch = set && ref.begin != ref.end ? first_branch(*ref.begin, 0) : 0;
        Value v = nested().joined(rest.substr(colon ? 2 : 1));
        for (Piece& p : v.pieces)
            if (p.branch == 0) p.branch = branch;
        if (opc == '=' && !element) assign_default(name, v);
        return add_value(v, dq_);
    }
    if (found == Found::empty) return;
    if (!set) return unresolved(written, positional_reference("$" + name) ? positional_open("$" + name) : name);
    add_var(ref, all);
}

void Expander::add_var(const Ref& r, bool all_elements) {
    if (!all_elements || !r.array) {
        if (r.begin != r.end) add_value(*r.begin, dq_);
        return;
    }
    for (const Value* k = r.begin; k != r.end; ++k) {
        if (k != r.begin && (dq_ || split_)) end_word();
        else if (k != r.begin) append(" ", line_);
        add_value(*k, dq_);
    }
}

}  // namespace preflight::megatron_script::shell
