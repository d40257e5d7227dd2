// The tests a launch script branches on (megatron_shell.hpp evaluate_test, case_match): bash's
// `test` / `[` and `[[` (GNU Bash manual, "Bash Conditional Expressions" and the `test` builtin)
// and `case` patterns, over the values the script defines. What cannot be decided is unknown.
#include <cstdint>

#include "megatron_shell.hpp"

namespace preflight::megatron_script::shell {

namespace {

Truth negate(Truth t) { return t == Truth::yes ? Truth::no : t == Truth::no ? Truth::yes : Truth::unknown; }
Truth both(Truth a, Truth b) {
    if (a == Truth::no || b == Truth::no) return Truth::no;
    return a == Truth::yes && b == Truth::yes ? Truth::yes : Truth::unknown;
}
Truth either(Truth a, Truth b) {
    if (a == Truth::yes || b == Truth::yes) return Truth::yes;
    return a == Truth::no && b == Truth::no ? Truth::no : Truth::unknown;
}
Truth truth(bool b) { return b ? Truth::yes : Truth::no; }

// Recursive descent over the arguments: or := and {-o|| and}; and := not {-a|&& not};
// not := ! not | primary; primary := ( or ) | word binary word | unary word | word.
class Test {
public:
    Test(const std::vector<TestArg>& args, bool dbl, const Vars& vars) : a_(args), dbl_(dbl), vars_(vars) {}

    Status run() {
        Truth t = args_left() ? disjunction() : Truth::no;  // `[ ]` with nothing inside is false
        if (bad_ || i_ != a_.size()) t = Truth::unknown;
        return {t, branch_};
    }

private:
    bool args_left() const { return i_ < a_.size(); }
    bool is(std::size_t k, std::string_view text, bool op) const {
        return k < a_.size() && a_[k].op == op && a_[k].word.text == text;
    }
    bool is_or() const { return dbl_ ? is(i_, "||", true) : is(i_, "-o", false); }
    bool is_and() const { return dbl_ ? is(i_, "&&", true) : is(i_, "-a", false); }
    Truth disjunction() {
        Truth t = conjunction();
        while (!bad_ && is_or()) ++i_, t = either(t, conjunction());
        return t;
    }
    Truth conjunction() {
        Truth t = negation();
        while (!bad_ && is_and()) ++i_, t = both(t, negation());
        return t;
    }
    Truth negation() {
        if (++depth_ > 64 || !args_left()) return bad_ = true, Truth::unknown;
        Truth t;
        if (is(i_, "!", false) && i_ + 1 < a_.size()) ++i_, t = negate(negation());
        else t = primary();
        --depth_;
        return t;
    }
    Truth primary() {
        if (is(i_, "(", dbl_)) {
            ++i_;
            const Truth t = disjunction();
            if (!is(i_, ")", dbl_)) return bad_ = true, Truth::unknown;
            return ++i_, t;
        }
        if (i_ + 2 < a_.size() && binary(a_[i_ + 1])) {
            const Truth t = compare(a_[i_], a_[i_ + 1].word.text, a_[i_ + 2]);
            return i_ += 3, t;
        }
        if (a_[i_].word.text.size() == 2 && a_[i_].word.text[0] == '-' && !a_[i_].op && i_ + 1 < a_.size()) {
            const Truth t = unary(a_[i_].word.text, a_[i_ + 1]);
            return i_ += 2, t;
        }
        const Truth t = operand(a_[i_]) ? truth(!a_[i_].word.text.empty()) : Truth::unknown;
        return ++i_, t;
    }
    bool binary(const TestArg& a) const {
        static const std::vector<std::string_view> ops{"=", "==", "!=", "-eq", "-ne", "-lt", "-le", "-gt", "-ge",
                                                       "=~", "-nt", "-ot", "-ef", "<", ">"};
        for (const std::string_view o : ops)
            if (a.word.text == o && (a.op == (o == "<" || o == ">"))) return true;
        return false;
    }
    // An operand the script defines (its branch noted); an operator token or an unresolved word is not.
    bool operand(const TestArg& a) {
        if (a.op) return bad_ = true, false;
        if (branch_ == 0) branch_ = a.word.branch;
        return a.word.unresolved.empty();
    }
    Truth unary(const std::string& op, const TestArg& a) {
        if (!operand(a)) return Truth::unknown;
        if (op == "-n") return truth(!a.word.text.empty());
        if (op == "-z") return truth(a.word.text.empty());
        return Truth::unknown;  // file tests (-f -d -e ...), -v, -o OPTION: not decided here
    }
    Truth compare(const TestArg& l, const std::string& op, const TestArg& r) {
        const bool left = operand(l);
        if (!operand(r) || !left) return Truth::unknown;
        if (op == "=" || op == "==" || op == "!=") {
            // [[ ]]: the right side is a pattern; only a literal one is compared here.
            if (dbl_ && r.word.text.find_first_of("*?[") != std::string::npos) return Truth::unknown;
            const bool same = l.word.text == r.word.text;
            return truth(op == "!=" ? !same : same);
        }
        const auto a = arithmetic(l.word.text, vars_), b = arithmetic(r.word.text, vars_);
        if (!a || !b || op.size() != 3) return Truth::unknown;  // =~ -nt -ot -ef < >: not decided
        if (op == "-eq") return truth(*a == *b);
        if (op == "-ne") return truth(*a != *b);
        if (op == "-lt") return truth(*a < *b);
        if (op == "-le") return truth(*a <= *b);
        if (op == "-gt") return truth(*a > *b);
        if (op == "-ge") return truth(*a >= *b);
        return Truth::unknown;
    }

    const std::vector<TestArg>& a_;
    bool dbl_;
    const Vars& vars_;
    std::size_t i_ = 0;
    int depth_ = 0;
    int branch_ = 0;
    bool bad_ = false;
};

// Whether a pattern has a glob character outside quotes (bash "Pattern Matching").
bool unquoted_glob(std::string_view raw) {
    char quote = 0;
    for (std::size_t i = 0; i < raw.size(); ++i) {
        const char c = raw[i];
        if (quote) {
            if (c == quote) quote = 0;
            else if (quote == '"' && c == '\\') ++i;
        } else if (c == '\'' || c == '"') {
            quote = c;
        } else if (c == '\\') {
            ++i;
        } else if (c == '*' || c == '?' || c == '[') {
            return true;
        }
    }
    return false;
}

}  // namespace

Status evaluate_test(const std::vector<TestArg>& args, bool double_bracket, const Vars& vars) {
    return Test(args, double_bracket, vars).run();
}

Truth case_match(const Word& subject, std::string_view raw_pattern, const Vars& vars, int line) {
    if (raw_pattern == "*") return Truth::yes;
    if (unquoted_glob(raw_pattern) || !subject.unresolved.empty()) return Truth::unknown;
    const std::vector<Value> p = Expander(vars, line, false).run(raw_pattern);
    if (p.size() != 1) return p.empty() ? truth(subject.text.empty()) : Truth::unknown;
    const Word w = p[0].word();
    if (!w.unresolved.empty()) return Truth::unknown;
    return truth(w.text == subject.text);
}

}  // namespace preflight::megatron_script::shell
