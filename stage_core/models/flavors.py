"""Named model flavors with their published dimensions.

Contents:

- :func:`get_flavor`: the :class:`~stage_core.models.spec.ModelSpec` of a named flavor.
- :func:`list_flavors`: every flavor name, grouped by family.

Each family cites where its numbers come from. Where a source is internally inconsistent the
comment says which number was kept and why.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_core.models.hf_ssm import hybrid_pattern
from stage_core.models.spec import Activation, Family, ModelSpec, Norm, Position


def _gpt3(size: str, layers: int, hidden: int, heads: int, head_dim: int) -> ModelSpec:
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1: n_layers, d_model,
    # n_heads, d_head; d_ff = 4·d_model; n_ctx = 2048; GPT-2's 50257-token BPE vocabulary,
    # learned positions, pre-LN layer norm, GELU, biases, dropout and tied input/output embedding.
    return ModelSpec(
        name=f"gpt3-{size}",
        family=Family.GPT,
        layers=layers,
        hidden=hidden,
        ffn=4 * hidden,
        heads=heads,
        head_dim=head_dim,
        vocab=50257,
        seq_len=2048,
        dropout=True,
        tied_embeddings=True,
        bias=True,
    )


_GPT3 = (
    _gpt3("125m", 12, 768, 12, 64),
    _gpt3("350m", 24, 1024, 16, 64),
    _gpt3("760m", 24, 1536, 16, 96),
    # Table 2.1 prints n_heads = 24 with d_head = 128 (24·128 = 3072 ≠ d_model = 2048), which
    # also contradicts the 1.3B total; we keep d_model and d_head and use 16 heads (2048/128).
    _gpt3("1.3b", 24, 2048, 16, 128),
    _gpt3("2.7b", 32, 2560, 32, 80),
    _gpt3("6.7b", 32, 4096, 32, 128),
    # Table 2.1 prints d_model = 5140, inconsistent with n_heads·d_head = 40·128 = 5120; we
    # use 5120, as Megatron-LM and NeMo do for this size.
    _gpt3("13b", 40, 5120, 40, 128),
    _gpt3("175b", 96, 12288, 96, 128),
)


def _megatron(size: str, layers: int, hidden: int, ffn: int, heads: int) -> ModelSpec:
    # Narayanan et al. SC'21 (arXiv 2104.04473) Table 1 and Korthikanti et al. 2022
    # (arXiv 2205.05198) Table 3, as in stage_explore/data/published_runs.csv: GPT blocks
    # with vocabulary 51200, sequence 2048, learned positions, biases, dropout, tied embedding.
    return ModelSpec(
        name=f"megatron-gpt-{size}",
        family=Family.GPT,
        layers=layers,
        hidden=hidden,
        ffn=ffn,
        heads=heads,
        vocab=51200,
        seq_len=2048,
        dropout=True,
        tied_embeddings=True,
        bias=True,
    )


# One flavor per distinct row of published_runs.csv. Narayanan's "GPT-529.6B" and
# "GPT-1008.0B" have exactly the dims of Korthikanti's "GPT-530B" and "GPT-1T".
_MEGATRON = (
    _megatron("1.7b", 24, 2304, 9216, 24),
    _megatron("3.6b", 30, 3072, 12288, 32),
    _megatron("7.5b", 36, 4096, 16384, 32),
    _megatron("18.4b", 40, 6144, 24576, 48),
    _megatron("22b", 48, 6144, 24576, 64),
    _megatron("39.1b", 48, 8192, 32768, 64),
    _megatron("76.1b", 60, 10240, 40960, 80),
    _megatron("145.6b", 80, 12288, 49152, 96),
    _megatron("175b", 96, 12288, 49152, 96),
    _megatron("310.1b", 96, 16384, 65536, 128),
    _megatron("530b", 105, 20480, 81920, 128),
    _megatron("1t", 128, 25600, 102400, 160),
)


def _llama(
    name: str,
    layers: int,
    hidden: int,
    ffn: int,
    heads: int,
    kv_heads: int,
    *,
    vocab: int,
    seq_len: int,
    max_position: int = 0,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        family=Family.LLAMA,
        layers=layers,
        hidden=hidden,
        ffn=ffn,
        heads=heads,
        kv_heads=kv_heads,
        vocab=vocab,
        seq_len=seq_len,
        max_position=max_position,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
    )


_LLAMA = (
    # Touvron et al. 2023, "Llama 2" (arXiv 2307.09288) Table 1 (4k context, GQA for 70B) and
    # the config.json of meta-llama/Llama-2-{7b,13b,70b}-hf for ffn and kv heads.
    _llama("llama2-7b", 32, 4096, 11008, 32, 32, vocab=32000, seq_len=4096),
    _llama("llama2-13b", 40, 5120, 13824, 40, 40, vocab=32000, seq_len=4096),
    _llama("llama2-70b", 80, 8192, 28672, 64, 8, vocab=32000, seq_len=4096),
    # Llama Team 2024, "The Llama 3 Herd of Models" (arXiv 2407.21783) Table 3, pre-training
    # sequence 8192; vocab 128256 is config.json's (the paper's 128K plus special tokens).
    # 405B exists only as Llama 3.1, whose config allows 131072 positions.
    _llama("llama3-8b", 32, 4096, 14336, 32, 8, vocab=128256, seq_len=8192),
    _llama("llama3-70b", 80, 8192, 28672, 64, 8, vocab=128256, seq_len=8192),
    _llama(
        "llama3-405b", 126, 16384, 53248, 128, 8, vocab=128256, seq_len=8192, max_position=131072
    ),
    # The same model under its release name (meta-llama/Llama-3.1-405B config.json: 126 layers,
    # hidden 16384, intermediate 53248, 128 heads, 8 KV heads, vocab 128256, 131072 positions,
    # rope_scaling.original_max_position_embeddings 8192 = the pre-training sequence).
    _llama(
        "llama3.1-405b", 126, 16384, 53248, 128, 8, vocab=128256, seq_len=8192, max_position=131072
    ),
)


def _mixtral(
    name: str, layers: int, hidden: int, expert_ffn: int, heads: int, seq_len: int
) -> ModelSpec:
    return ModelSpec(
        name=name,
        family=Family.MIXTRAL,
        layers=layers,
        hidden=hidden,
        ffn=expert_ffn,
        heads=heads,
        kv_heads=8,
        vocab=32000,
        seq_len=seq_len,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
        num_experts=8,
        top_k=2,
        expert_ffn=expert_ffn,
    )


_MIXTRAL = (
    # Jiang et al. 2024, "Mixtral of Experts" (arXiv 2401.04088) Table 1; trained with a 32k
    # context; dropless top-2 of 8 experts in every layer.
    _mixtral("mixtral-8x7b", 32, 4096, 14336, 32, 32768),
    # Mistral AI's release of Mixtral-8x22B-v0.1 (config.json; 64k context window).
    _mixtral("mixtral-8x22b", 56, 6144, 16384, 48, 65536),
)

_OTHERS = (
    # Dai et al. 2024, "DeepSeekMoE" (arXiv 2401.06066) Section 5 and the config.json of
    # deepseek-ai/deepseek-moe-16b-base: 64 fine-grained routed experts (top-6) plus 2 shared
    # ones, each 1408 wide; the first layer is dense with ffn 10944.
    ModelSpec(
        name="deepseek-moe-16b",
        family=Family.DEEPSEEK_MOE,
        layers=28,
        hidden=2048,
        ffn=10944,
        heads=16,
        vocab=102400,
        seq_len=4096,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
        num_experts=64,
        top_k=6,
        expert_ffn=1408,
        num_shared_experts=2,
        first_k_dense=1,
    ),
    # DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437) Section 4.2 and the
    # config.json of deepseek-ai/DeepSeek-V3: 61 layers, d_model 7168, 128 heads with multi-head
    # latent attention (query latent 1536, key-value latent 512, 128 + 64 RoPE query/key dims,
    # 128 value dims), the first 3 layers dense (FFN 18432), then 256 routed experts (top-8,
    # each 2048 wide) and 1 shared expert; 129,280-token vocabulary, untied; 4K pre-training
    # sequences. 671B parameters, 37B active per token (the report's figures), plus one
    # multi-token-prediction module (report Section 2.2 and Section 4.2 "we set the MTP depth D
    # to 1"; config.json num_nextn_predict_layers = 1; the README's 685B = 671B main + 14B MTP).
    # Node-limited routing: the 256 experts in 8 groups, a token's 8 among the best 4 groups
    # (report Section 2.1.2, "at most M nodes", M = 4; config.json n_group 8, topk_group 4).
    ModelSpec(
        name="deepseek-v3",
        family=Family.DEEPSEEK_MOE,
        layers=61,
        hidden=7168,
        ffn=18432,
        heads=128,
        head_dim=128,
        vocab=129280,
        seq_len=4096,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
        num_experts=256,
        top_k=8,
        expert_ffn=2048,
        num_shared_experts=1,
        first_k_dense=3,
        router_groups=8,
        router_group_topk=4,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        v_head_dim=128,
        mtp_layers=1,
    ),
    # DeepSeek-AI 2024, "DeepSeek-V2" (arXiv 2405.04434) Appendix B and the config.json of
    # deepseek-ai/DeepSeek-V2-Lite: 27 layers, d_model 2048, 16 heads with latent attention
    # (no query latent, key-value latent 512, 128 + 64 RoPE dims, 128 value dims), the first
    # layer dense (FFN 10944), then 64 routed experts (top-6, each 1408 wide) and 2 shared;
    # 102,400-token vocabulary. 15.7B parameters, 2.4B active per token.
    ModelSpec(
        name="deepseek-v2-lite",
        family=Family.DEEPSEEK_MOE,
        layers=27,
        hidden=2048,
        ffn=10944,
        heads=16,
        head_dim=128,
        vocab=102400,
        seq_len=4096,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
        num_experts=64,
        top_k=6,
        expert_ffn=1408,
        num_shared_experts=2,
        first_k_dense=1,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        v_head_dim=128,
    ),
    # Chowdhery et al. 2022, "PaLM" (arXiv 2204.02311) Table 1 and Section 2: d_ff = 4·d_model
    # with SwiGLU, multi-query attention, d_head 256 (48·256 ≠ d_model), RoPE, shared
    # input/output embedding, no biases (layer norms have a scale only), 256k vocabulary,
    # 2048-token sequences. Modelled with the serial block (the parallel block is not needed).
    ModelSpec(
        name="palm-540b",
        family=Family.PALM,
        layers=118,
        hidden=18432,
        ffn=73728,
        heads=48,
        kv_heads=1,
        head_dim=256,
        vocab=256000,
        seq_len=2048,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
        tied_embeddings=True,
    ),
)

_FRONTIER = (
    # Nvidia 2024, "Nemotron-4 340B Technical Report" (arXiv 2406.11704) Table 1: 96 layers,
    # hidden 18432, 96 attention heads, 8 KV heads, sequence 4096, vocabulary 256,000; the
    # architecture of Nemotron-4 15B (Parmar et al. 2024, arXiv 2402.16819, Section 2): squared
    # ReLU MLP (not gated) of width 4·hidden = 73728, RoPE, no biases, no dropout, untied
    # embeddings. Not modelled: RoPE on half of each head (partial_rotary_factor 0.5 in the
    # nvidia/Nemotron-4-340B config, an element-wise cost) and the layer norms' shift
    # (LayerNorm1p has one; 2·h per layer, 0.001 % of the parameters).
    ModelSpec(
        name="nemotron-4-340b",
        family=Family.NEMOTRON,
        layers=96,
        hidden=18432,
        ffn=73728,
        heads=96,
        kv_heads=8,
        vocab=256000,
        seq_len=4096,
        norm=Norm.LAYERNORM,
        activation=Activation.SQUARED_RELU,
        position=Position.ROTARY,
    ),
    # Qwen Team 2025, "Qwen3 Technical Report" (arXiv 2505.09388) Table 2: 48 / 94 layers,
    # 32 / 64 query heads and 4 KV heads, 128 experts of which 8 are active, no shared experts,
    # QK-norm (Section 2); config.json of Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B: hidden
    # 2048 / 4096, head_dim 128, moe_intermediate_size 768 / 1536, vocab 151936, untied
    # embeddings, every layer MoE (decoder_sparse_step 1, no mlp_only_layers). Pre-training
    # sequence 4096 (report Section 3.2, stages S1 and S2). ``ffn`` (config intermediate_size)
    # is unused: no layer is dense.
    *(
        ModelSpec(
            name=name,
            family=Family.QWEN3,
            layers=layers,
            hidden=hidden,
            ffn=dense_ffn,
            heads=heads,
            kv_heads=4,
            head_dim=128,
            vocab=151936,
            seq_len=4096,
            max_position=40960,
            norm=Norm.RMSNORM,
            activation=Activation.SWIGLU,
            position=Position.ROTARY,
            num_experts=128,
            top_k=8,
            expert_ffn=expert_ffn,
            qk_norm=True,
        )
        for name, layers, hidden, dense_ffn, heads, expert_ffn in (
            ("qwen3-30b-a3b", 48, 2048, 6144, 32, 768),
            ("qwen3-235b-a22b", 94, 4096, 12288, 64, 1536),
        )
    ),
)

#: Nemotron-H's ``hybrid_layer_pattern`` strings (Megatron-Bridge's providers, module comment
#: below; the 8B's is also its Hugging Face config's ``hybrid_override_pattern``).
NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
NEMOTRON_H_47B_PATTERN = (
    "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-"
    "M-M-M-M-M-"
)
NEMOTRON_H_56B_PATTERN = (
    "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
    "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
)
#: Nemotron 3 Nano 4B's (NVIDIA-NeMo/Megatron-Bridge 9cb11608, src/megatron/bridge/recipes/
#: nemotronh/h100/nemotron_3_nano_4b.py ``_model_config``): 21 Mamba-2, 4 attention, 17 MLP.
NEMOTRON_3_NANO_4B_PATTERN = "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-"

_HYBRID = (
    # NVIDIA 2025, "Nemotron-H: A Family of Accurate and Efficient Hybrid Mamba-Transformer
    # Models" (arXiv 2504.03624), Nemotron-H-8B: 52 layers (24 Mamba-2, 24 FFN, 4 self-attention)
    # and the config.json of nvidia/Nemotron-H-8B-Base-8K (as in Megatron-Bridge's
    # tests/unit_tests/models/nemotronh): hidden_size 4096, hybrid_override_pattern
    # "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-" (M Mamba-2, * attention, - MLP;
    # written below in STAGE's pattern language), intermediate_size 21504 with relu2 (squared
    # ReLU, not gated), 32 attention heads, 8 KV heads, attention_head_dim 128, mamba_num_heads
    # 128, mamba_head_dim 64, ssm_state_size 128, n_groups 8, conv_kernel 4, chunk_size 128
    # (TensorRT-LLM's copy of the config says 256), vocab 131072, untied embeddings, RMSNorm,
    # no biases, no position encoding (Megatron-Bridge: position_embedding_type "none"),
    # 8K-token pre-training sequences. 8,100,852,736 parameters: the checkpoint's tensor shapes.
    ModelSpec(
        name="nemotron-h-8b",
        family=Family.NEMOTRON,
        layers=52,
        hidden=4096,
        ffn=21504,
        heads=32,
        kv_heads=8,
        head_dim=128,
        vocab=131072,
        seq_len=8192,
        norm=Norm.RMSNORM,
        activation=Activation.SQUARED_RELU,
        position=Position.NONE,
        layer_pattern=(
            "(mamba, mlp)*3, mamba, attn, mlp, ((mamba, mlp)*4, mamba, attn, mlp)*3, (mamba, mlp)*5"
        ),
        ssm_heads=128,
        ssm_head_dim=64,
        ssm_state=128,
        ssm_groups=8,
        ssm_conv=4,
        ssm_chunk=128,
    ),
    *(
        # The other published Nemotron-H sizes, from Megatron-Bridge's Nemotron-H providers
        # (NVIDIA-NeMo/Megatron-Bridge 160ccccb, src/megatron/bridge/models/nemotronh/
        # nemotron_h_provider.py: NemotronHModelProvider4B / 47B / 56B and their base
        # NemotronHModelProvider) and the Nemotron-H paper (arXiv 2504.03624, Section 2 and its
        # architecture table). Common to all (the base provider): seq_length 8192,
        # mamba_num_groups 8, mamba_head_dim 64, num_query_groups 8 (8 KV heads), squared-ReLU
        # MLP (activation_func squared_relu, not gated), vocabulary 131072 (the NullTokenizer's
        # vocab_size of NeMo's pretrain_nemotronh_56b.py; make_vocab_size_divisible_by 128),
        # untied embeddings, RMSNorm, no biases, no position encoding; Megatron-Core's
        # MambaMixer defaults d_conv 4 and chunk_size 128 (megatron/core/ssm/mamba_mixer.py; the
        # 56B README's FLOP notes of dgxc-benchmarking 1f6d9f40 assume chunk_size 256, a count,
        # not what the mixer runs). Per size (hybrid_layer_pattern verbatim: M Mamba-2,
        # * attention, - MLP, each its own layer; hidden_size, ffn_hidden_size,
        # num_attention_heads, mamba_num_heads, mamba_state_dim; kv_channels 128, stated for 4B
        # and hidden/heads = 8192/64 for 47B/56B):
        # - 4B: 52 layers, the 8B's pattern (24 Mamba-2, 24 MLP, 4 attention), hidden 3072,
        #   FFN 12288, 32 heads, 112 Mamba heads (d_inner 7168), state 128;
        # - 47B: 98 layers (45 Mamba-2, 48 MLP, 5 attention: MiniPuzzle's pruning of the 56B,
        #   paper Section 2.5), hidden 8192, FFN 30720, 64 heads, 256 Mamba heads, state 256;
        # - 56B: 118 layers (54 Mamba-2, 54 MLP, 10 attention, as the paper and the DGX Cloud
        #   README's FLOP notes count them), hidden 8192, FFN 32768, 64 heads, 256 Mamba
        #   heads, state 256.
        ModelSpec(
            name=name,
            family=Family.NEMOTRON,
            layers=len(pattern),
            hidden=hidden,
            ffn=ffn,
            heads=heads,
            kv_heads=8,
            head_dim=128,
            vocab=131072,
            seq_len=8192,
            norm=Norm.RMSNORM,
            activation=Activation.SQUARED_RELU,
            position=Position.NONE,
            layer_pattern=hybrid_pattern(pattern, name),
            ssm_heads=ssm_heads,
            ssm_head_dim=64,
            ssm_state=state,
            ssm_groups=8,
            ssm_conv=4,
            ssm_chunk=128,
        )
        for name, pattern, hidden, ffn, heads, ssm_heads, state in (
            ("nemotron-h-4b", NEMOTRON_H_8B_PATTERN, 3072, 12288, 32, 112, 128),
            ("nemotron-h-47b", NEMOTRON_H_47B_PATTERN, 8192, 30720, 64, 256, 256),
            ("nemotron-h-56b", NEMOTRON_H_56B_PATTERN, 8192, 32768, 64, 256, 256),
        )
    ),
    # NVIDIA Nemotron 3 Nano 4B (nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16, NemotronHForCausalLM),
    # dense: the exact architecture Megatron-Bridge's recipe builds (9cb11608, recipes/nemotronh/
    # h100/nemotron_3_nano_4b.py ``_model_config``: HybridModelProvider hybrid_layer_pattern
    # above, 42 layers, hidden_size 3136, ffn_hidden_size 12544 squared ReLU not gated,
    # num_attention_heads 40, num_query_groups 8, kv_channels 128, mamba_num_heads 96,
    # mamba_head_dim 80, mamba_state_dim 128, mamba_num_groups 8, mamba_chunk_size 256,
    # vocab_size 131072, untied, position_embedding_type "none", RMSNorm, no biases; seq_length
    # 4096 in its pre-training recipe); Megatron-Core's d_conv 4. 3,973,556,832 parameters
    # (Megatron-Bridge's model verification card, docs/model-verification/models/
    # nemotron-3-nano-4b.md at d5d8c192: its checkpoint round trip).
    ModelSpec(
        name="nemotron-3-nano-4b",
        family=Family.NEMOTRON,
        layers=len(NEMOTRON_3_NANO_4B_PATTERN),
        hidden=3136,
        ffn=12544,
        heads=40,
        kv_heads=8,
        head_dim=128,
        vocab=131072,
        seq_len=4096,
        norm=Norm.RMSNORM,
        activation=Activation.SQUARED_RELU,
        position=Position.NONE,
        layer_pattern=hybrid_pattern(NEMOTRON_3_NANO_4B_PATTERN, "nemotron-3-nano-4b"),
        ssm_heads=96,
        ssm_head_dim=80,
        ssm_state=128,
        ssm_groups=8,
        ssm_conv=4,
        ssm_chunk=256,
    ),
    # Dao & Gu 2024, "Transformers are SSMs" (arXiv 2405.21060) Section 9.2 and the config.json
    # of state-spaces/mamba2-2.7b (mamba_ssm): d_model 2560, n_layer 64, d_intermediate 0 (no
    # MLP), ssm_cfg {"layer": "Mamba2"} with the Mamba2 module's defaults d_state 128, d_conv 4,
    # expand 2, headdim 64 (80 heads), ngroups 1, chunk_size 256; vocab_size 50277 (GPT-NeoX
    # tokenizer) padded to a multiple of pad_vocab_size_multiple 16: 50288; tie_embeddings true;
    # RMSNorm; trained on the Pile at 2048 tokens. No attention and no MLP: `heads`/`head_dim`
    # repeat the Mamba heads, `ffn` the inner width and `activation` is the default only because
    # a ModelSpec needs them (no layer reads them). 2,702,599,680 parameters (the checkpoint's
    # in_proj 10576×2560, conv1d 5376×4 + 5376, A_log, D, dt_bias, norm 5120, out_proj 2560×5120
    # per layer).
    ModelSpec(
        name="mamba2-2.7b",
        family=Family.MAMBA2,
        layers=64,
        hidden=2560,
        ffn=5120,
        heads=80,
        head_dim=64,
        vocab=50288,
        seq_len=2048,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.NONE,
        tied_embeddings=True,
        layer_pattern="mamba*",
        ssm_heads=80,
        ssm_head_dim=64,
        ssm_state=128,
        ssm_groups=1,
        ssm_conv=4,
        ssm_chunk=256,
    ),
)

# OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card" (arXiv 2508.10925), Section 2.1 and
# Table 1, and the config.json of openai/gpt-oss-120b and openai/gpt-oss-20b: 36 / 24 layers,
# residual width 2880, 64 query heads and 8 KV heads of 64 dims (GQA), biases on the attention
# and expert projections (attention_bias true; the experts' gate_up_proj_bias, down_proj_bias),
# a learned attention sink per head, layers alternating a 128-token banded (sliding) window
# (even layers: layer_types "sliding_attention") and dense attention, 128 / 32 experts of
# width 2880 (intermediate_size) with top-4 routing, a SwiGLU variant with clamping and a
# residual connection (swiglu_limit 7; FLOPs counted as SwiGLU), RMSNorm, RoPE (YaRN, 4,096
# -token initial context: the training sequence here), o200k_harmony vocabulary 201,088,
# untied embedding. Totals: 116.83B / 20.91B parameters (card: 116.8B / 20.9B; the 128 / 32
# router biases per layer are not counted: 4,608 / 768 parameters).
_GPT_OSS = tuple(
    ModelSpec(
        name=name,
        family=Family.GPT_OSS,
        layers=layers,
        hidden=2880,
        ffn=2880,
        heads=64,
        kv_heads=8,
        head_dim=64,
        vocab=201088,
        seq_len=4096,
        max_position=131072,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
        bias=True,
        num_experts=experts,
        top_k=4,
        expert_ffn=2880,
        layer_pattern="(swa+moe, attn+moe)*",
        sliding_window=128,
        attention_sinks=True,
    )
    for name, layers, experts in (("gpt-oss-120b", 36, 128), ("gpt-oss-20b", 24, 32))
)


_REGISTRY: Mapping[str, ModelSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            *_GPT3,
            *_MEGATRON,
            *_LLAMA,
            *_MIXTRAL,
            *_OTHERS,
            *_FRONTIER,
            *_GPT_OSS,
            *_HYBRID,
        )
    }
)


def list_flavors() -> tuple[str, ...]:
    """Every flavor name, grouped by family."""
    return tuple(_REGISTRY)


def get_flavor(name: str) -> ModelSpec:
    """The flavor called ``name`` (case-insensitive); a one-line :class:`ConfigError` if unknown."""
    expect(name, str, "flavor name", "one of list_flavors(), e.g. 'llama3-8b'")
    spec = _REGISTRY.get(name.strip().lower())
    if spec is not None:
        return spec
    close = difflib.get_close_matches(name.strip().lower(), _REGISTRY, n=5, cutoff=0.6)
    hint = f"close names: {', '.join(close)}" if close else f"known: {', '.join(_REGISTRY)}"
    raise ConfigError(f"unknown model flavor {name!r}; {hint}")
