// The launch-script reader's $(( )) (megatron_shell.hpp): bash's "Shell Arithmetic" over 64-bit
// integers for the operators launch scripts use, numbers read as bash reads them (0x hex, a
// leading 0 octal, BASE#DIGITS), and why an expression it does not evaluate is left open.
#include <algorithm>
#include <cctype>
#include <climits>

#include "megatron_shell.hpp"

namespace preflight::megatron_script::shell {

namespace {

// The value of digit `c` in `base` as bash reads BASE#DIGITS: 0-9, then a-z, A-Z, @ and _ (for a
// base up to 36 a letter's case does not matter); -1 for none.
int digit_value(char c, int base) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'z') return c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') return c - 'A' + (base <= 36 ? 10 : 36);
    if (c == '@') return 62;
    if (c == '_') return 63;
    return -1;
}

// `t` read as bash reads a number in $(( )): 0x/0X hex, a leading 0 octal (SEQ=010 is 8),
// BASE#DIGITS with a base from 2 to 64, else decimal. "" when it reads, else why not.
std::string bash_number(std::string_view t, std::int64_t& v) {
    std::string shown(1, '\'');  // appended in steps: GCC 12's -Wrestrict misreads "'" + std::string(t)
    shown.append(t).push_back('\'');
    int base = 10;
    std::string_view digits = t;
    if (const std::size_t hash = t.find('#'); hash != std::string_view::npos) {
        base = 0;
        for (char c : t.substr(0, hash))
            if (base <= 64) base = std::isdigit(static_cast<unsigned char>(c)) ? base * 10 + (c - '0') : 99;
        if (hash == 0 || base < 2 || base > 64) return shown + " has no base from 2 to 64";
        digits = t.substr(hash + 1);
    } else if (t.size() > 1 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
        base = 16, digits = t.substr(2);
    } else if (t.size() > 1 && t[0] == '0') {
        base = 8;
    }
    if (digits.empty()) return shown + " is not a number";
    v = 0;
    for (char c : digits) {
        const int d = digit_value(c, base);
        if (d < 0 || d >= base)
            return shown + " is not a number in base " + std::to_string(base) +
                   (base == 8 ? " (bash reads a leading 0 as octal)" : "");
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
            return shown + " is beyond 64-bit integers";
    }
    return "";
}

// $(( )) over integers: + - * / % and parentheses, numbers and variable names (after the $
// references in it were expanded). nullopt for anything else, a division by zero or an
// overflow, with why() saying which.
class Arithmetic {
public:
    Arithmetic(std::string_view s, const Vars& vars) : s_(s), vars_(vars) {}
    std::optional<std::int64_t> run() {
        const std::int64_t v = sum();
        skip();
        if (ok_ && i_ != s_.size()) fail(unsupported());
        if (!ok_) return std::nullopt;
        return v;
    }
    const std::string& why() const { return why_; }

private:
    void fail(std::string why) {
        if (ok_) why_ = std::move(why);
        ok_ = false;
    }
    // What stands at i_ that is not evaluated, e.g. "'<<' is not evaluated ...".
    std::string unsupported() const {
        std::size_t end = i_;
        while (end < s_.size() && end - i_ < 3 && std::ispunct(static_cast<unsigned char>(s_[end])) && s_[end] != '(' &&
               s_[end] != ')')
            ++end;
        const std::string at(s_.substr(i_, std::max<std::size_t>(end - i_, 1)));
        return "'" + at + "' is an operator the reader does not evaluate (it takes + - * / %, parentheses, numbers and names)";
    }
    void skip() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    bool eat(char c) {
        skip();
        if (i_ >= s_.size() || s_[i_] != c) return false;
        // ** (a power), ++, *= and the like are other operators, not this one.
        const bool paren = c == '(' || c == ')';
        if (!paren && i_ + 1 < s_.size() && (s_[i_ + 1] == c || s_[i_ + 1] == '=')) return false;
        return ++i_, true;
    }
    std::int64_t apply(char op, std::int64_t a, std::int64_t b) {
        std::int64_t r = 0;
        bool over = false;
        if (op == '+') over = __builtin_add_overflow(a, b, &r);
        if (op == '-') over = __builtin_sub_overflow(a, b, &r);
        if (op == '*') over = __builtin_mul_overflow(a, b, &r);
        if (op == '/' || op == '%') {
            if (b == 0) fail("it divides by zero");
            over = b == -1 && a == INT64_MIN;
            if (ok_ && !over) r = op == '/' ? a / b : a % b;
        }
        if (over) fail("its result is beyond 64-bit integers (bash would wrap it around)");
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
        if (++depth_ > 256) fail("it nests deeper than 256 levels");  // deeper than any script: not evaluated
        const std::int64_t v = ok_ ? primary() : 0;
        --depth_;
        return v;
    }
    std::int64_t primary() {
        if (eat('(')) {
            const std::int64_t v = sum();
            if (ok_ && !eat(')')) fail(i_ < s_.size() ? unsupported() : "a '(' is not closed");
            return v;
        }
        if (eat('-')) return apply('-', 0, factor());
        skip();
        const std::size_t start = i_;
        while (i_ < s_.size() && name_char(s_[i_])) ++i_;
        // BASE#DIGITS (2#101, 64#@_): a number when it starts with a digit.
        if (i_ > start && std::isdigit(static_cast<unsigned char>(s_[start])) && i_ < s_.size() && s_[i_] == '#')
            for (++i_; i_ < s_.size() && (name_char(s_[i_]) || s_[i_] == '@');) ++i_;
        const std::string token(s_.substr(start, i_ - start));
        if (token.empty()) return fail(i_ < s_.size() ? unsupported() : "a number or a name is missing at its end"), 0;
        return name_start(token[0]) ? variable(token) : number(token, "");
    }
    // NAME's value, read as bash reads a number (SEQ=010 is 8).
    std::int64_t variable(const std::string& name) {
        const auto it = vars_.find(name);
        if (it == vars_.end() || it->second.values.empty()) return fail("its " + name + " is not defined by the script"), 0;
        const Value& value = it->second.values[0];
        if (const Word w = value.word(); !w.unresolved.empty())
            return fail("its " + name + " uses " + shown_reference(w.unresolved) + ", which the script does not define"), 0;
        std::string text = value.text();
        const bool negative = !text.empty() && text[0] == '-';
        if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.erase(0, 1);
        const std::int64_t v = number(text, name + " holds ");
        return negative ? apply('-', 0, v) : v;
    }
    std::int64_t number(const std::string& text, const std::string& holder) {
        std::int64_t v = 0;
        if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
            return fail(holder + "'" + text + "', not a number"), 0;
        if (const std::string why = bash_number(text, v); !why.empty()) return fail(holder + why), 0;
        return v;
    }

    std::string_view s_;
    const Vars& vars_;
    std::size_t i_ = 0;
    int depth_ = 0;
    bool ok_ = true;
    std::string why_;
};

}  // namespace

std::optional<std::int64_t> arithmetic(std::string_view expr, const Vars& vars, std::string* why) {
    Arithmetic a(expr, vars);
    const auto v = a.run();
    if (!v && why) *why = a.why();
    return v;
}

}  // namespace preflight::megatron_script::shell
