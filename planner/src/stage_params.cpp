#include "stage_params.hpp"

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

}  // namespace preflight::throughput_detail
