#include "stage_params.hpp"

#include <algorithm>

#include "preflight/planner/extensions.hpp"

namespace preflight::throughput_detail {

StageParams stage_params(const ModelConfig& m, const Plan& p, std::int64_t layers_first, std::int64_t layers_last) {
    StageParams sp;
    const std::int64_t t = p.tp;
    for (const ParamTensor& pt : param_tensors(m)) {
        double local = 0;
        switch (pt.split) {
            case TpSplit::replicated: local = static_cast<double>(pt.numel()); break;
            case TpSplit::column: local = static_cast<double>(pt.rows / t * pt.cols * pt.copies); break;
            case TpSplit::row: local = static_cast<double>(pt.rows * (pt.cols / t) * pt.copies); break;
            case TpSplit::vocab: local = static_cast<double>((pt.rows + t - 1) / t * pt.cols * pt.copies); break;
        }
        switch (pt.place) {
            case TensorPlace::layer:
                sp.per_layer += local;
                if (pt.gemm_weight) sp.gemm_per_layer += local;
                sp.first += local * static_cast<double>(layers_first);
                if (p.pp > 1) sp.last += local * static_cast<double>(layers_last);
                break;
            case TensorPlace::embedding:
                sp.first += local;
                // Megatron keeps the tied word embedding on the last stage too for the output layer.
                if (p.pp > 1 && m.tied_embeddings && pt.name == "word_embedding") sp.last += local;
                break;
            case TensorPlace::final_norm:
            case TensorPlace::lm_head: (p.pp > 1 ? sp.last : sp.first) += local; break;
        }
    }
    if (p.pp == 1) sp.last = sp.first;
    return sp;
}

StageLayers stage_layers(const ModelConfig& model, const Plan& p, const ThroughputOptions& opt) {
    StageLayers s;
    s.first = model.layers / p.pp + (model.layers % p.pp > 0 ? 1 : 0);
    s.last = p.pp == 1 ? s.first : model.layers / p.pp;
    s.middle_max = s.first;
    s.split = opt.stage_layers.empty() ? uneven_pipeline_stage_layers(p, model.layers) : opt.stage_layers;
    s.custom = static_cast<std::int64_t>(s.split.size()) == p.pp && p.pp > 1;
    if (s.custom) {
        s.first = s.split.front();
        s.last = s.split.back();
        s.middle_max = 0;
        for (std::size_t i = 1; i + 1 < s.split.size(); ++i) s.middle_max = std::max(s.middle_max, s.split[i]);
    }
    return s;
}

BusiestStage busiest_stage(const StageParams& sp, const StageLayers& layers, const Plan& p) {
    // A middle stage holds only decoder layers; under the even split it never outweighs the first.
    const double middle = layers.custom && p.pp > 2 ? sp.per_layer * static_cast<double>(layers.middle_max) : 0.0;
    if (middle > std::max(sp.first, sp.last)) return {middle, layers.middle_max};
    return sp.first >= sp.last ? BusiestStage{sp.first, layers.first} : BusiestStage{sp.last, layers.last};
}

}  // namespace preflight::throughput_detail
