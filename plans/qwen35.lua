-- qwen35.lua — one decode tick of the Qwen3.5 hybrid (qwen35 dense, qwen35moe) as ops.
--
-- Math: spec/qwen35.md section 3; op semantics: runtime/ops.def. Every dimension comes from
-- the GGUF metadata and tensor table (`model`), never from a preset.
--
-- Launches per tick (B rows; L layers, of which A are full attention):
--   stage 0:  embed                                                           1
--   GDN layer:   rms_norm_q8 -> mmvq{attn_qkv, attn_gate, ssm_beta, ssm_alpha} -> gdn_step
--                -> mmvq{ssm_out, += x}                                       4
--   attn layer:  rms_norm_q8 -> mmvq{attn_q (q|gate), attn_k, attn_v} -> attn_prep
--                -> attn_decode -> mmvq{attn_output, += x}                    5
--   dense FFN:   rms_norm_q8 -> mmvq{ffn_gate, ffn_up} -> silu_mul_q8 -> mmvq{ffn_down, += x}  4
--   MoE FFN:     rms_norm_q8 -> mmvq{router, shexp gate, shexp gate/up} -> moe_route
--                -> mmvq_moe{gate_exps, up_exps} -> silu_mul_q8{experts, shared}
--                -> moe_down{down_exps, shared, += x}                         6
--   last stage:  rms_norm_q8(output_norm) -> mmvq{output} -> sample           3
-- Dense: 1 + 8 (L - A) + 9 A + 3; the 9B shape (L = 32, A = 8) gives 268, the tiny test
-- model (L = 8, A = 2) 70. (notes/ops-design.md counted 7 and 8 per layer; its FFN is four
-- launches, not three, so the real counts are 8 and 9.)
--
-- Plan decisions:
--   * attn_decode max_split = 128: the kernel picks a row's split count (<= 128, one per 64
--     keys) from that row's own length, so a short row finishes in a few key steps and a deep
--     one at B = 1 still has 128 x n_head_kv split CTAs. It is part of attention's summation
--     order, so it is the same at every tier (and in the reference model). Scratch
--     [b, n_head, 128, dh + 2] f32 (34 MB at B = 16 for the 9B), reused across layers.
--   * The residual stream x [b, n_embd] f32 lives the whole tick; the o-proj, ssm_out,
--     ffn_down and moe_down launches add into it in their epilogues.
--   * KV cache dtype from --kv (f16 default, q8_0); recurrent state f32.

local dsl = import("dsl")

local M = {}

local MAX_SPLIT = host.attn_max_split -- MEMRA_ATTN_MAX_SPLIT (kernels/attn_decode.h)

-- =================================== hyperparameters ===================================

local function hparams()
    local arch = model.arch
    if arch ~= "qwen35" and arch ~= "qwen35moe" then
        unsupported(string.format("architecture '%s' is not handled by qwen35.lua", tostring(arch)))
    end
    local kv = model.kv
    local function req(suffix)
        local v = kv[arch .. "." .. suffix]
        if v == nil then
            error(string.format("missing metadata key %s.%s", arch, suffix), 2)
        end
        return v
    end
    local function opt(suffix, default)
        local v = kv[arch .. "." .. suffix]
        if v == nil then return default end
        return v
    end
    local hp = {arch = arch, moe = arch == "qwen35moe"}
    hp.L, hp.D = req("block_count"), req("embedding_length")
    hp.n_head = req("attention.head_count")
    hp.n_head_kv = opt("attention.head_count_kv", hp.n_head)
    hp.eps = req("attention.layer_norm_rms_epsilon")
    hp.rope_base = opt("rope.freq_base", 10000.0)
    hp.sections = req("rope.dimension_sections")
    hp.conv_k = req("ssm.conv_kernel")
    hp.d_inner, hp.d_state = req("ssm.inner_size"), req("ssm.state_size")
    hp.n_v_head, hp.n_k_head = req("ssm.time_step_rank"), req("ssm.group_count")
    hp.interval = opt("full_attention_interval", 4)
    hp.n_expert, hp.n_used = opt("expert_count", 0), opt("expert_used_count", 0)
    return hp
end

local function per_layer(v, il, what)
    if type(v) == "table" then
        v = v[il + 1]
    end
    if math.type(v) ~= "integer" then
        error(string.format("metadata %s has no integer value for layer %d", what, il), 3)
    end
    return v
end

-- Derived, checked geometry (spec/qwen35.md section 1 and pitfalls 13, 15).
local function geometry(hp, il)
    local g = {}
    g.n_head = per_layer(hp.n_head, il, "attention.head_count")
    g.n_head_kv = per_layer(hp.n_head_kv, il, "attention.head_count_kv")
    g.head_dim = model.kv[hp.arch .. ".attention.key_length"] or hp.D // g.n_head
    local vlen = model.kv[hp.arch .. ".attention.value_length"] or g.head_dim
    if vlen ~= g.head_dim then
        unsupported(string.format("layer %d: attention key_length %d != value_length %d", il,
                                  g.head_dim, vlen))
    end
    g.n_rot = model.kv[hp.arch .. ".rope.dimension_count"] or g.head_dim
    g.head_v_dim = hp.d_inner // hp.n_v_head
    if g.head_v_dim * hp.n_v_head ~= hp.d_inner or g.head_v_dim ~= hp.d_state then
        unsupported(string.format("GDN value head dim %d/%d must equal state size %d",
                                  hp.d_inner, hp.n_v_head, hp.d_state))
    end
    return g
end

local function freq_scale(hp)
    local kind = model.kv[hp.arch .. ".rope.scaling.type"]
    local factor = model.kv[hp.arch .. ".rope.scaling.factor"]
    if kind == nil or kind == "none" or (kind == "linear" and factor == nil) then
        return 1.0
    end
    if kind == "linear" and factor > 0 then
        return 1.0 / factor
    end
    unsupported(string.format("rope scaling '%s' (%s.rope.scaling.type)", tostring(kind), hp.arch))
end

local function is_attention(hp, il)
    return (il + 1) % hp.interval == 0
end

-- ======================================= mixers =======================================

local function gdn(p, hp, il, h, x)
    local pre = "blk." .. il .. "."
    local g = geometry(hp, il)
    local W = function(n) return p:weight(pre .. n) end
    local qkv, z, beta, alpha = p:buf(pre .. "qkv"), p:buf(pre .. "z"), p:buf(pre .. "beta"),
                                p:buf(pre .. "alpha")
    p:mmvq(h, hp.D, {{w = W("attn_qkv.weight"), out = qkv}, {w = W("attn_gate.weight"), out = z},
                     {w = W("ssm_beta.weight"), out = beta},
                     {w = W("ssm_alpha.weight"), out = alpha}})
    local o = p:buf(pre .. "gdn_out")
    p:launch("gdn_step", {
        qkv = qkv, z = z, beta = beta, alpha = alpha,
        conv_w = W("ssm_conv1d.weight"), dt_bias = W("ssm_dt.bias"), ssm_a = W("ssm_a"),
        norm = W("ssm_norm.weight"),
        conv_state = p:state(pre .. "conv", il), ssm_state = p:state(pre .. "ssm", il),
        o = o, n_k_head = hp.n_k_head, n_v_head = hp.n_v_head, head_k_dim = hp.d_state,
        head_v_dim = g.head_v_dim, conv_k = hp.conv_k, head_map = 0, eps = hp.eps,
    })
    p:mmvq(o, hp.d_inner, {{w = W("ssm_out.weight"), out = x, add = true}})
end

local function attention(p, hp, il, h, x)
    local pre = "blk." .. il .. "."
    local g = geometry(hp, il)
    local W = function(n) return p:weight(pre .. n) end
    local qg, k, v = p:buf(pre .. "qg"), p:buf(pre .. "k"), p:buf(pre .. "v")
    p:mmvq(h, hp.D, {{w = W("attn_q.weight"), out = qg}, {w = W("attn_k.weight"), out = k},
                     {w = W("attn_v.weight"), out = v}})
    local kc, vc = p:state(pre .. "kv_k", il), p:state(pre .. "kv_v", il)
    local q = p:buf(pre .. "q")
    local s = hp.sections
    p:launch("attn_prep", {
        qg = qg, k = k, v = v, q_norm = W("attn_q_norm.weight"), k_norm = W("attn_k_norm.weight"),
        positions = p:tick("positions"), k_cache = kc, v_cache = vc, q = q,
        n_head = g.n_head, n_head_kv = g.n_head_kv, head_dim = g.head_dim, n_rot = g.n_rot,
        sect0 = s[1], sect1 = s[2], sect2 = s[3], sect3 = s[4],
        rope_base = hp.rope_base, freq_scale = freq_scale(hp), eps = hp.eps,
    })
    local o = p:buf(pre .. "attn_out")
    p:launch("attn_decode", {
        q = q, qg = qg, positions = p:tick("positions"), k_cache = kc, v_cache = vc,
        scratch = p:buf(pre .. "attn_scratch"), o = o,
        n_head = g.n_head, n_head_kv = g.n_head_kv, head_dim = g.head_dim,
        max_split = MAX_SPLIT, scale = 1.0 / math.sqrt(g.head_dim),
    })
    p:mmvq(o, g.n_head * g.head_dim, {{w = W("attn_output.weight"), out = x, add = true}})
end

-- ========================================= FFN =========================================

local function dense_ffn(p, hp, il, h2, x)
    local pre = "blk." .. il .. "."
    local gate, up = p:weight(pre .. "ffn_gate.weight"), p:weight(pre .. "ffn_up.weight")
    local n_ff = gate.t.ne[2]
    local gb, ub, a = p:buf(pre .. "ffn_g"), p:buf(pre .. "ffn_u"), p:buf(pre .. "ffn_act")
    p:mmvq(h2, hp.D, {{w = gate, out = gb}, {w = up, out = ub}})
    p:launch("silu_mul_q8", {g0 = gb, u0 = ub, y0 = a, n0 = n_ff, m0 = 1})
    p:keep(h2) -- the backend may fuse the pair: a must not be placed over h2 (Plan:keep)
    p:mmvq(a, n_ff, {{w = p:weight(pre .. "ffn_down.weight"), out = x, add = true}})
end

local function moe_ffn(p, hp, il, h2, x)
    local pre = "blk." .. il .. "."
    local W = function(n) return p:weight(pre .. n) end
    if p:has(pre .. "ffn_gate_up_exps.weight") then
        unsupported(pre .. "ffn_gate_up_exps.weight: fused expert gate/up tensors are not " ..
                    "supported yet (expected ffn_gate_exps + ffn_up_exps)")
    end
    local E, k = hp.n_expert, hp.n_used
    if E < 1 or k < 1 or k > E then
        error(string.format("qwen35moe needs expert_count >= expert_used_count >= 1 (%d, %d)", E, k))
    end
    local shared = p:has(pre .. "ffn_gate_shexp.weight")
    local logits = p:buf(pre .. "router")
    local proj = {{w = W("ffn_gate_inp.weight"), out = logits}}
    local sh_gate, sg, su, sa
    if shared then
        sh_gate, sg, su = p:buf(pre .. "sh_gate"), p:buf(pre .. "sh_g"), p:buf(pre .. "sh_u")
        proj[2] = {w = W("ffn_gate_inp_shexp.weight"), out = sh_gate}
        proj[3] = {w = W("ffn_gate_shexp.weight"), out = sg}
        proj[4] = {w = W("ffn_up_shexp.weight"), out = su}
    end
    p:mmvq(h2, hp.D, proj)
    local ids, wts = p:buf(pre .. "moe_ids"), p:buf(pre .. "moe_wts")
    p:launch("moe_route", {logits = logits, ids = ids, wts = wts, n_expert = E, n_used = k})
    local gate_e, up_e = W("ffn_gate_exps.weight"), W("ffn_up_exps.weight")
    local n_ff = gate_e.t.ne[2]
    local eg, eu, ea = p:buf(pre .. "exp_g"), p:buf(pre .. "exp_u"), p:buf(pre .. "exp_act")
    p:launch("mmvq_moe", {
        a = h2, ids = ids, k = hp.D, n_used = k, n_expert = E,
        w0 = gate_e, out0 = eg, n0 = n_ff, scale0 = p:scale_of(gate_e),
        w1 = up_e, out1 = eu, n1 = up_e.t.ne[2], scale1 = p:scale_of(up_e),
    })
    local act = {g0 = eg, u0 = eu, y0 = ea, n0 = n_ff, m0 = k}
    local n_sh
    if shared then
        sa, n_sh = p:buf(pre .. "sh_act"), W("ffn_gate_shexp.weight").t.ne[2]
        act.g1, act.u1, act.y1, act.n1, act.m1 = sg, su, sa, n_sh, 1
    end
    p:launch("silu_mul_q8", act)
    local down = W("ffn_down_exps.weight")
    local args = {a = ea, ids = ids, wts = wts, w = down, scale = p:scale_of(down), x = x,
                  k = n_ff, n = hp.D, n_used = k, n_expert = E}
    if shared then
        local sd = W("ffn_down_shexp.weight")
        args.sh_a, args.sh_w, args.sh_scale, args.sh_gate, args.k_sh = sa, sd, p:scale_of(sd),
                                                                       sh_gate, n_sh
    end
    p:launch("moe_down", args)
end

-- ====================================== the tick ======================================

local function layer(p, hp, il, x)
    local pre = "blk." .. il .. "."
    local h = p:buf(pre .. "attn_in")
    p:launch("rms_norm_q8", {x = x, w = p:weight(pre .. "attn_norm.weight"), y = h, n = hp.D,
                             eps = hp.eps})
    if is_attention(hp, il) then
        attention(p, hp, il, h, x)
    else
        gdn(p, hp, il, h, x)
    end
    local h2 = p:buf(pre .. "ffn_in")
    p:launch("rms_norm_q8", {x = x, w = p:weight(pre .. "post_attention_norm.weight"), y = h2,
                             n = hp.D, eps = hp.eps})
    if hp.moe then
        moe_ffn(p, hp, il, h2, x)
    else
        dense_ffn(p, hp, il, h2, x)
    end
end

local function epilogue(p, hp, x)
    local hf = p:buf("out_norm")
    p:launch("rms_norm_q8", {x = x, w = p:weight("output_norm.weight"), y = hf, n = hp.D,
                             eps = hp.eps})
    -- tied embeddings: without output.weight the lm head is token_embd (spec pitfall 14)
    local head = p:has("output.weight") and p:weight("output.weight") or
                 p:weight("token_embd.weight")
    local logits = p:buf("logits")
    p:mmvq(hf, hp.D, {{w = head, out = logits}})
    p:launch("sample", {logits = logits, params = p:tick("sampling"),
                        out_tokens = p:tick("out_tokens"), scratch = p:buf("sample_scratch"),
                        n_vocab = head.t.ne[2]})
    p:set_logits(logits)
end

function M.tick(opts)
    local hp = hparams()
    local p = dsl.new(opts)
    local x
    if opts.stage == 0 then
        x = p:buf("x")
        local te = p:weight("token_embd.weight")
        if p:has("token_embd.scale") or p:has("token_embd.weight.scale") then
            -- the embed op dequantizes rows and applies no per-tensor scale: refuse, do not
            -- run with unscaled embeddings (the mat-vecs, a tied lm_head included, apply it)
            unsupported("token_embd.weight has an NVFP4 scale companion (token_embd.scale); " ..
                        "the embed op does not apply one yet")
        end
        p:launch("embed", {tokens = p:tick("tokens"), table = te, x = x, n_embd = hp.D,
                           n_vocab = te.t.ne[2]})
    else
        x = p:input("x", "f32", p.b * hp.D)
    end
    for il = opts.layer_begin, opts.layer_end - 1 do
        layer(p, hp, il, x)
    end
    if opts.stage == opts.n_stages - 1 then
        epilogue(p, hp, x)
    else
        p:set_output(x)
    end
    return p:finish()
end

-- Stage cuts balanced on weight bytes; the last stage also streams the lm head.
function M.stages(n)
    local hp = hparams()
    local head = model.tensors["output.weight"] or model.tensors["token_embd.weight"]
    return dsl.split_stages(hp.L, n, head.nbytes)
end

return M
