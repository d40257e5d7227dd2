// Input robustness (audit of fix60): values nested past any config's depth, values shown in
// messages, numbers cast past an integer's range, names echoed into emitted files, numbers
// with a leading zero read as the framework reads them, and messages that say what happened.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/config_import.hpp"
#include "preflight/planner/emit.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/gpu.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/shown_value.hpp"
#include "preflight/planner/user_file.hpp"
#include "tree_import_helpers.hpp"

using namespace preflight;
using nlohmann::json;
using test::tree_import::expect_input_error;
using test::tree_import::int_field;

namespace {

const std::filesystem::path kData = PREFLIGHT_TEST_DATA_DIR;

std::string nested(std::size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

json llama() {
    std::ifstream in(kData / "models" / "llama-3-8b.json");
    return json::parse(in);
}

std::string message_of(const std::function<void()>& run) {
    try {
        run();
    } catch (const InputError& e) {
        return e.what();
    }
    ADD_FAILURE() << "no InputError";
    return "";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// --- 1. Deep nesting and the values messages show ---------------------------------------------

TEST(InputRobustness, JsonNestedPastTheLimitIsRefusedWhenParsed) {
    // 100,000 levels: nlohmann's dump() of it recursed until the stack overflowed (exit 139).
    const std::string text = "{\"hidden_size\": " + nested(100000) + "}";
    const std::string m = message_of([&] { parse_json_text(text, "--model", "'deep.json'"); });
    EXPECT_NE(m.find("'deep.json'"), std::string::npos) << m;
    EXPECT_NE(m.find("deeper than 64 levels (limits::kMaxJsonDepth)"), std::string::npos) << m;
    EXPECT_NE(m.find("hidden_size"), std::string::npos) << m;
    EXPECT_LT(m.size(), 400u) << m;
    // 64 levels are read (the top-level object is one of them); 65 are not.
    EXPECT_NO_THROW(parse_json_text("{\"a\": " + nested(63) + "}", "f", "'f'"));
    EXPECT_THROW(parse_json_text("{\"a\": " + nested(64) + "}", "f", "'f'"), InputError);
    // Brackets inside strings are no nesting.
    EXPECT_NO_THROW(parse_json_text("{\"a\": \"" + nested(1000) + "\"}", "f", "'f'"));
}

TEST(InputRobustness, ValuesInMessagesAreShownBoundedly) {
    EXPECT_EQ(shown_json(json(42)), "42");
    EXPECT_EQ(shown_json(json("a\nb")), "\"a\\nb\"");  // control characters escaped
    EXPECT_EQ(shown_json(json::parse(nested(60))), "[[[[...]]]]");  // walked 3 levels deep
    json wide = json::array();
    for (int i = 0; i < 100000; ++i) wide.push_back(i);
    const std::string w = shown_json(wide);
    EXPECT_LT(w.size(), 100u) << w;
    EXPECT_EQ(w.rfind("[0, 1, 2, ", 0), 0u) << w;
    EXPECT_NE(w.find(", ...] (an array of 100000 values)"), std::string::npos) << w;
    EXPECT_LT(shown_json(json(std::string(100000, 'x'))).size(), 80u);
    EXPECT_EQ(shown_json(json(std::numeric_limits<double>::infinity())), "inf");  // JSON would write null
    EXPECT_EQ(shown_json(json(std::nan(""))), "nan");
    // A model key holding a wide array: the message stays one short line.
    json cfg = llama();
    cfg["hidden_size"] = wide;
    const std::string m = message_of([&] { model_from_hf_config(cfg, "wide"); });
    EXPECT_NE(m.find("hidden_size: must be an integer, got [0, 1, 2"), std::string::npos) << m;
    EXPECT_LT(m.size(), 200u) << m;
}

TEST(InputRobustness, DeepJsonConfigIsRefusedInLinearTime) {
    // A ds_config 100,000 levels deep: a JSON pointer kept per open level made this quadratic
    // (60 s and 5 GB); refused at the depth limit naming the file.
    const std::string text = "{\"train_micro_batch_size_per_gpu\": " + nested(100000) + "}";
    const auto t0 = std::chrono::steady_clock::now();
    expect_input_error([&] { import_config_text(text, "ds.json", std::nullopt, {}); },
                       {"ds.json", "deeper than 64 levels", "kMaxJsonDepth"});
    EXPECT_LT(seconds_since(t0), 5.0);
    // A syntax error after deep nesting: its line search stops at the limit too.
    const std::string broken = "{\"a\": " + std::string(200000, '[') + "x";
    const auto t1 = std::chrono::steady_clock::now();
    expect_input_error([&] { import_config_text(broken, "ds.json", std::nullopt, {}); }, {"ds.json"});
    EXPECT_LT(seconds_since(t1), 5.0);
    // Keys under nesting keep their lines.
    const ConfigTree t = json_config_tree("{\n\"a\": {\n\"b\": [1, {\n\"c\": 2}]}}\n", "ok.json");
    EXPECT_EQ(t.line_of("/a"), 2);
    EXPECT_EQ(t.line_of("/a/b"), 3);
    EXPECT_EQ(t.line_of("/a/b/1/c"), 4);
}

// --- 3. Numbers beyond an integer's range ---------------------------------------------------

TEST(InputRobustness, ModelLoaderBoundsRopeValues) {
    json cfg = llama();
    cfg["rope_theta"] = 1e20;  // was cast to int64: --rotary-base -9223372036854775808
    expect_input_error([&] { model_from_hf_config(cfg, "m"); }, {"rope_theta", "at most 1e12", "1e+20"});
    for (const json& bad : {json(1e300), json(8192.5), json(0), json("8192")}) {
        json c = llama();
        c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}, {"original_max_position_embeddings", bad}};
        expect_input_error([&] { model_from_hf_config(c, "m"); },
                           {"rope_scaling.original_max_position_embeddings", "whole number"});
    }
    json ok = llama();
    ok["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}, {"original_max_position_embeddings", 8192.0}};
    EXPECT_EQ(model_from_hf_config(ok, "m").rope_scaling.original_max_positions, 8192);
}

// transformers 5 write RoPE into one rope_parameters object (modeling_rope_utils.py): Llama-3.1's
// base and scaling read from it equal the top-level form's; read from the top level alone, such a
// config was planned and run at the default base 10,000.
TEST(InputRobustness, Transformers5RopeParametersAreRead) {
    json v5;
    std::ifstream(kData / "models" / "llama-3.1-405b.json") >> v5;
    const ModelConfig legacy = model_from_hf_config(v5, "legacy");
    v5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                             {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
    v5.erase("rope_scaling");
    v5["rope_theta"] = nullptr;  // as some exporters leave it
    const ModelConfig m = model_from_hf_config(v5, "v5");
    EXPECT_EQ(m.rope_theta, 500000.0);
    EXPECT_EQ(m.rope_scaling.type, "llama3");
    EXPECT_EQ(m.rope_scaling.factor, legacy.rope_scaling.factor);
    EXPECT_EQ(m.rope_scaling.original_max_positions, 8192);
    // "default": unscaled.
    json plain = llama();
    plain.erase("rope_theta");
    plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
    const ModelConfig d = model_from_hf_config(plain, "d");
    EXPECT_EQ(d.rope_theta, 1e6);
    EXPECT_TRUE(d.rope_scaling.type.empty());
    // Given twice and different, or per layer type: refused, naming the key.
    json twice = llama();  // rope_theta 500000 at the top level
    twice["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
    expect_input_error([&] { model_from_hf_config(twice, "m"); }, {"rope_parameters.rope_theta", "differs from rope_theta"});
    json hybrid = llama();
    hybrid["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}}}, {"sliding_attention", {{"rope_theta", 1e4}}}};
    expect_input_error([&] { model_from_hf_config(hybrid, "m"); }, {"rope_parameters", "per layer type"});
    json bad = llama();
    bad["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8}, {"original_max_position_embeddings", 8192.5}};
    expect_input_error([&] { model_from_hf_config(bad, "m"); }, {"rope_parameters.original_max_position_embeddings"});
}

// partial_rotary_factor (top level or in rope_parameters): Megatron-LM's --rotary-percent both ways;
// `preflight run` rotates that share of each head (since 2026-12-03) and refuses, by name, a share
// that leaves an odd number of dimensions.
TEST(InputRobustness, PartialRotaryFactorIsCarriedOrRefused) {
    json cfg = llama();
    cfg["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
    const ModelConfig m = model_from_hf_config(cfg, "m");
    EXPECT_EQ(m.rope_fraction, 0.5);
    EXPECT_EQ(m.rope_dims(), m.head_dim / 2);
    EXPECT_NO_THROW(check_runtime_model(m));
    ModelConfig odd = m;
    odd.rope_fraction = 3.0 / static_cast<double>(m.head_dim);  // 3 dimensions rotated
    expect_input_error([&] { check_runtime_model(odd); }, {"partial_rotary_factor", "rotates 3 of each head's"});
    Plan p;
    p.seq = 4096, p.dp = 8;
    const std::string args = megatron_arguments(m, p);
    EXPECT_NE(args.find("--rotary-percent 0.5 "), std::string::npos) << args;
    const ImportedConfig back = import_megatron(args, "emitted.args", ImportContext{8});
    ASSERT_TRUE(back.model_config);
    EXPECT_EQ(model_from_hf_config(*back.model_config, "back").rope_fraction, 0.5);
    EXPECT_EQ(megatron_arguments(load_model("llama-3-8b", kData), p).find("--rotary-percent"), std::string::npos);
    json over = llama();
    over["partial_rotary_factor"] = 1.5;
    expect_input_error([&] { model_from_hf_config(over, "m"); }, {"partial_rotary_factor", "at most 1"});
}

TEST(InputRobustness, MegatronRotaryBaseIsWrittenWithoutACast) {
    ModelConfig m = load_model("llama-3-8b", kData);
    Plan p;
    p.seq = 4096, p.dp = 8;
    m.rope_theta = 1e12;
    EXPECT_NE(megatron_arguments(m, p).find("--rotary-base 1000000000000 "), std::string::npos);
    m.rope_theta = 500000.5;  // Megatron-LM's --rotary-base is an int: rounded, and said
    std::vector<std::string> w;
    EXPECT_NE(megatron_arguments(m, p, &w).find("--rotary-base 500001 "), std::string::npos);
    EXPECT_TRUE(test::tree_import::any_contains(w, "rope_theta 500000.5: Megatron-LM's --rotary-base takes an integer"));
}

// --- 4. Names echoed into emitted files -----------------------------------------------------

TEST(InputRobustness, NamesWithControlCharactersAreRefused) {
    expect_input_error([] { model_from_hf_config(llama(), "a\ntouch pwned; #"); },
                       {"name", "\"a\\ntouch pwned; #\"", "control character"});
    expect_input_error([] { model_from_hf_config(llama(), std::string("bad\xff", 4)); }, {"not valid UTF-8"});
    json spec;
    std::ifstream(kData / "gpus" / "h100-sxm-80gb.json") >> spec;
    spec["display_name"] = "H100\nFAKE";
    expect_input_error([&] { gpu_from_json(spec, "g"); }, {"display_name", "control character"});
    json c = llama();
    c["rope_scaling"] = {{"rope_type", "llama3\nx: 1"}, {"factor", 8}};
    expect_input_error([&] { model_from_hf_config(c, "m"); }, {"rope_scaling.rope_type", "control character"});
}

TEST(InputRobustness, QuotesInNamesStayInsideTheirCommentOrString) {
    ModelConfig m = load_model("llama-3-8b", kData);
    m.name = "a\"b'c $(touch pwned)";
    Plan p;
    p.seq = 4096, p.dp = 8;
    const std::string script = megatron_arguments(m, p);
    EXPECT_EQ(script.rfind("# Megatron-LM launch (pretrain_gpt.py) from preflight plan: a\"b'c $(touch pwned) on", 0), 0u);
    EXPECT_EQ(std::count(script.begin(), script.end(), '#'), 1) << script;  // one comment line, the first
    // A rope type that is no plain YAML word is written double-quoted and reads back as itself.
    m.rope_scaling.type = "yes: no";
    m.rope_scaling.factor = 8;
    const std::string yaml = nanotron_yaml(m, p);
    EXPECT_NE(yaml.find("rope_type: \"yes: no\"\n"), std::string::npos) << yaml;
    EXPECT_EQ(yaml_config_tree(yaml, "n.yaml").root["model"]["model_config"]["rope_scaling"]["rope_type"], "yes: no");
    m.rope_scaling.type = "llama3";
    EXPECT_NE(nanotron_yaml(m, p).find("rope_type: llama3\n"), std::string::npos);
}

// --- 5. Leading zeros as the framework reads them -------------------------------------------

TEST(InputRobustness, YamlLeadingZeroIsOctalAsPyYamlReadsIt) {
    // nanotron loads its config with PyYAML's SafeLoader (YAML 1.1): 010 is 8, 08 a string.
    const ConfigTree t = yaml_config_tree("a: 010\nb: -07\nc: 08\nd: 0\ne: 00\nf: '010'\ng: 10\n", "s.yaml");
    EXPECT_EQ(t.root.at("a"), 8);
    EXPECT_EQ(t.root.at("b"), -7);
    EXPECT_EQ(t.root.at("c"), "08");
    EXPECT_EQ(t.root.at("d"), 0);
    EXPECT_EQ(t.root.at("e"), 0);
    EXPECT_EQ(t.root.at("f"), "010");
    EXPECT_EQ(t.root.at("g"), 10);
    const std::string config = "parallelism:\n  dp: 2\n  tp: 1\n  pp: 1\n"
                               "tokens:\n  sequence_length: 1024\n  micro_batch_size: 1\n";
    const ImportedConfig c =
        import_nanotron(yaml_config_tree(config + "  batch_accumulation_per_replica: 010\n", "n.yaml"), {});
    EXPECT_EQ(int_field(c, "grad_acc"), 8);
    expect_input_error(
        [&] { import_nanotron(yaml_config_tree(config + "  batch_accumulation_per_replica: 09\n", "n.yaml"), {}); },
        {"n.yaml:8", "batch_accumulation_per_replica", "\"09\""});
}

// PyYAML's resolver (YAML 1.1) beyond leading zeros: yes/no/on/off are booleans, and a float needs a
// dot and a signed exponent, so 1e-4 and 1.0e4 stay text (nanotron would get a str there); a numeric
// read of such text says why it is text.
TEST(InputRobustness, YamlScalarsResolveAsPyYamlResolvesThem) {
    const ConfigTree t = yaml_config_tree(
        "a: yes\nb: Off\nc: ON\nd: 1e-4\ne: 1.0e4\nf: 1.0e-4\ng: 1.5\nh: .5\ni: -.5\nj: 2.\nk: y\nl: 1.0e+3\n", "s.yaml");
    EXPECT_EQ(t.root.at("a"), true);
    EXPECT_EQ(t.root.at("b"), false);
    EXPECT_EQ(t.root.at("c"), true);
    EXPECT_EQ(t.root.at("d"), "1e-4");
    EXPECT_EQ(t.root.at("e"), "1.0e4");
    EXPECT_DOUBLE_EQ(t.root.at("f").get<double>(), 1.0e-4);
    EXPECT_DOUBLE_EQ(t.root.at("g").get<double>(), 1.5);
    EXPECT_DOUBLE_EQ(t.root.at("h").get<double>(), 0.5);
    EXPECT_EQ(t.root.at("i"), "-.5");
    EXPECT_DOUBLE_EQ(t.root.at("j").get<double>(), 2.0);
    EXPECT_EQ(t.root.at("k"), "y");  // not in PyYAML's bool resolver
    EXPECT_DOUBLE_EQ(t.root.at("l").get<double>(), 1000.0);
    // Underscores between digits (PyYAML's constructor drops them), hex, binary, +.inf; -08 stays
    // text with its sign; sexagesimal (base 60) ints and floats as PyYAML's constructor reads them:
    // 1:30 = 90, -1:0:0 = -3600, 1:30.5 = 90.5; 08:30 (a leading 0) and 1:60 (a part past 59) are text.
    const ConfigTree u = yaml_config_tree(
        "a: 4_096\nb: 0x1_0\nc: 0b10_00\nd: 01_0\ne: 500_000.0\nf: +.Inf\ng: -08\nh: 1:30\ni: 0\nj: -0x8\n"
        "k: -1:0:0\nl: 1:30.5\nm: 08:30\nn: 1:60\n", "u.yaml");
    EXPECT_EQ(u.root.at("k"), -3600);
    EXPECT_DOUBLE_EQ(u.root.at("l").get<double>(), 90.5);
    EXPECT_EQ(u.root.at("m"), "08:30");
    EXPECT_EQ(u.root.at("n"), "1:60");
    EXPECT_EQ(u.root.at("a"), 4096);
    EXPECT_EQ(u.root.at("b"), 16);
    EXPECT_EQ(u.root.at("c"), 8);
    EXPECT_EQ(u.root.at("d"), 8);
    EXPECT_DOUBLE_EQ(u.root.at("e").get<double>(), 500000.0);
    EXPECT_TRUE(std::isinf(u.root.at("f").get<double>()));
    EXPECT_EQ(u.root.at("g"), "-08");
    EXPECT_EQ(u.root.at("h"), 90);
    EXPECT_EQ(u.root.at("i"), 0);
    EXPECT_EQ(u.root.at("j"), -8);
    const std::string config = "parallelism:\n  dp: 2\n  tp: 1\n  pp: 1\n"
                               "tokens:\n  sequence_length: 1024\n  micro_batch_size: 1\n";
    EXPECT_NO_THROW(import_nanotron(
        yaml_config_tree(config + "model:\n  model_config:\n    tie_word_embeddings: yes\n", "n.yaml"), {}));
    expect_input_error(
        [&] { import_nanotron(yaml_config_tree(config + "  batch_accumulation_per_replica: 1e1\n", "n.yaml"), {}); },
        {"n.yaml:8", "batch_accumulation_per_replica", "\"1e1\"", "PyYAML"});
}

TEST(InputRobustness, MegatronArithmeticReadsNumbersAsBashDoes) {
    const auto seq = [](const std::string& script) {
        return int_field(import_megatron(script + "--micro-batch-size 1 --global-batch-size 8\n", "s.sh", ImportContext{8}),
                         "seq");
    };
    EXPECT_EQ(seq("SEQ=010\n--seq-length $((SEQ*1))\n"), 8);  // bash: a leading 0 is octal
    EXPECT_EQ(seq("SEQ=010\n--seq-length $SEQ\n"), 10);        // argparse's int("010") is 10
    EXPECT_EQ(seq("--seq-length $((0x100))\n"), 256);
    EXPECT_EQ(seq("--seq-length $((2#1000000000))\n"), 512);
    EXPECT_EQ(seq("--seq-length $((10#0128))\n"), 128);
    EXPECT_EQ(seq("--seq-length $((64#g0))\n"), 16 * 64);
    expect_input_error([] { import_megatron("SEQ=08\n--seq-length $((SEQ*1))\n", "s.sh", ImportContext{8}); },
                       {"s.sh:2", "--seq-length", "'08' is not a number in base 8 (bash reads a leading 0 as octal)"});
}

// --- 7. Messages that say what happened -------------------------------------------------------

TEST(InputRobustness, MegatronSaysWhyAnExpansionIsOpen) {
    const std::pair<std::string, std::string> cases[] = {
        {"--seq-length $((2**63))", "'**' is an operator the reader does not evaluate"},
        {"--seq-length $((9223372036854775807+1))", "its result is beyond 64-bit integers"},
        {"SEQ=4096\n--seq-length $((SEQ<<1))", "'<<' is an operator the reader does not evaluate"},
        {"SEQ=4096\n--seq-length $((SEQ/0))", "it divides by zero"},
        {"--seq-length $((SEQ*2))", "its SEQ is not defined by the script"},
        {"SEQ=4096\n--seq-length ${SEQ%96}", "${SEQ%96}, which the reader does not expand"},
        {"SEQ=4096\n--seq-length ${#SEQ}", "${#SEQ}, a length, which the reader does not expand"},
        {"--seq-length $((1 + $N))", "whose $N the script does not define"},
    };
    for (const auto& [script, why] : cases) {
        const std::string m = message_of([&] { import_megatron(script + "\n", "s.sh", ImportContext{8}); });
        EXPECT_NE(m.find("--seq-length"), std::string::npos) << m;
        EXPECT_NE(m.find(why), std::string::npos) << script << "\n" << m;
        if (script.find("$N") == std::string::npos && script.find("SEQ*2") == std::string::npos) {
            EXPECT_EQ(m.find("does not define"), std::string::npos) << m;
        }
    }
}

TEST(InputRobustness, InfinityAndNanAreNamedNotNull) {
    const std::string m = message_of([] {
        import_nanotron(yaml_config_tree("parallelism:\n  dp: 2\n  tp: 1\n  pp: 1\n"
                                         "tokens:\n  sequence_length: 1024\n  micro_batch_size: .inf\n",
                                         "n.yaml"),
                        {});
    });
    EXPECT_NE(m.find("got inf"), std::string::npos) << m;
    EXPECT_EQ(m.find("null"), std::string::npos) << m;
    EXPECT_TRUE(yaml_config_tree("a: .nan\n", "n.yaml").root.at("a").is_number_float());
    const std::string t = message_of([] {
        import_torchtitan(toml_config_tree("[training]\nlocal_batch_size = nan\n", "t.toml"), ImportContext{8});
    });
    EXPECT_NE(t.find("got nan"), std::string::npos) << t;
}

TEST(InputRobustness, DeepSpeedBatchNamesItsOwnBound) {
    const std::string m = message_of([] {
        import_config_text("{\"train_batch_size\": -64}", "ds.json", std::nullopt, {});
    });
    EXPECT_NE(m.find("ds.json:1: train_batch_size"), std::string::npos) << m;
    EXPECT_NE(m.find("limits::kMaxGlobalBatchTokens"), std::string::npos) << m;
    EXPECT_EQ(m.find("kMaxGpus"), std::string::npos) << m;
}

TEST(InputRobustness, TopLevelJsonArrayIsJsonNotToml) {
    for (const char* text : {"[]", "[\n  {\"a\": 1}\n]", "[4, 8]", "[[1, 2]]"}) {
        EXPECT_EQ(detect_config_format(text), ConfigFormat::deepspeed) << text;
        expect_input_error([&] { import_config_text(text, "top.json", std::nullopt, {}); },
                           {"top.json", "must hold an object", "array"});
    }
    EXPECT_EQ(detect_config_format("[training]\nseq_len = 8\n"), ConfigFormat::torchtitan);
    EXPECT_EQ(detect_config_format("[[a.b]]\nx = 1\n"), ConfigFormat::torchtitan);
}
