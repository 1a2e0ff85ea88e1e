-- dsl.lua — the shared plan-building DSL every plans/<arch>.lua uses.
--
-- A script builds one tick as a list of launches over named values:
--   local p = dsl.new(opts)                       -- opts: tier, stage, n_stages, layer_begin,
--                                                 -- layer_end, kv (from memra-plan)
--   local x = p:buf("x")                          -- an activation buffer, sized later
--   p:launch("embed", {tokens = p:tick("tokens"), table = p:weight("token_embd.weight"),
--                      x = x, n_embd = D, n_vocab = V})
--   p:mmvq(h, D, {{w = p:weight(...), out = qkv}, ...})   -- merged projections
--   return p:finish()                             -- the plan table (docs/plan-format.md)
--
-- What the DSL decides so scripts do not have to:
--   * buffer sizes and dtypes come from the op catalog (runtime/ops.def, exposed as `ops`):
--     a buffer is sized by the first launch that writes it, from that arg's element-count
--     expression evaluated by the validator's own evaluator (host.eval);
--   * the arena layout: liveness-based allocation. A buffer lives from the launch that first
--     touches it to the launch that last touches it (the stage input from launch 0, the
--     stage output and the logits to the end; Plan:keep extends a life). Buffers are placed
--     largest first at the lowest
--     256-byte-aligned offset that overlaps no buffer whose live interval intersects its own,
--     so dead buffers' bytes are reused. Ties break on first use, then name: deterministic;
--   * kernel specialization keys, from the catalog's key templates;
--   * early, named errors: reading a buffer nobody wrote, a weight whose type the op does not
--     take (unsupported(), naming the tensor), a weight whose shape does not match the op.
-- The runtime validator (runtime/plan.c) checks all of it again; the DSL is only the first
-- line, there to give script-level messages.
--
-- Merging: p:mmvq() packs up to 4 projections of the same input into one launch, in the
-- order given. Different qtypes may share a launch; the key then lists each, in slot order
-- ("mmvq:qt=q4_K+q6_K:b=8"). We merge across types because it saves launches (the GDN
-- projections of a Q4_K_M file mix q4_K and q6_K in a third of the layers) and the number of
-- distinct combinations per checkpoint stays small (the summary lists them).

local M = {}

local Plan = {}
Plan.__index = Plan

local ALIGN = host.align

local function fail(level, fmt, ...)
    error(string.format(fmt, ...), level + 1)
end

local function align_up(n)
    return (n + ALIGN - 1) // ALIGN * ALIGN
end

local function split(spec)
    local out = {}
    for item in string.gmatch(spec, "[^,]+") do
        out[#out + 1] = item
    end
    return out
end

function M.new(opts)
    local p = setmetatable({}, Plan)
    p.opts = opts
    p.b = opts.tier
    p.launches = {}
    p.values, p.value_list = {}, {}
    p.weights, p.weight_list = {}, {}
    p.states, p.state_list = {}, {}
    p.kernel_set = {}
    return p
end

-- ================================ values and references ================================

-- A new activation buffer (sized by the first launch that writes it).
function Plan:buf(name)
    if self.values[name] then
        fail(2, "buffer '%s' declared twice", name)
    end
    local v = {ref = "buf", name = name}
    self.values[name] = v
    self.value_list[#self.value_list + 1] = v
    return v
end

-- The stage input: a buffer the runtime fills before launch 0 (boundary [b, n_embd] f32).
function Plan:input(name, dtype, count)
    local v = self:buf(name)
    v.dtype, v.count, v.bytes = dtype, count, host.dtype_bytes(dtype, count)
    v.defined, v.first, v.last = true, 1, 1
    self.input_v = v
    return v
end

function Plan:set_output(v) self.output_v = v end
function Plan:set_logits(v) self.logits_v = v end

function Plan:has(name)
    return model.tensors[name] ~= nil
end

-- A weight by tensor name; a missing tensor is an error naming it.
function Plan:weight(name)
    local w = self.weights[name]
    if w then
        return w
    end
    local t = model.tensors[name]
    if not t then
        fail(2, "the model has no tensor '%s'", name)
    end
    w = {ref = "weight", name = name, t = t}
    self.weights[name] = w
    return w
end

-- The NVFP4 per-tensor (or per-expert) scale companion "<name>.scale", if the file has one.
-- The NVFP4 per-tensor scale companion: llama.cpp names it "<base>.scale" for
-- "<base>.weight"; "<base>.weight.scale" is accepted too.
function Plan:scale_of(w)
    local base = w.name:gsub("%.weight$", "")
    for _, name in ipairs({base .. ".scale", w.name .. ".scale"}) do
        if self:has(name) then
            return self:weight(name)
        end
    end
    return nil
end

-- A per-sequence state region of a layer (kind, dtype and dims set by its first use).
function Plan:state(name, layer)
    local s = self.states[name]
    if not s then
        s = {ref = "state", name = name, layer = layer}
        self.states[name] = s
    end
    return s
end

function Plan:tick(field)
    return {ref = "tick", field = field}
end

-- ===================================== binding =====================================

local function eval(spec, vars, opname, argname)
    local ok, v = pcall(host.eval, spec, vars)
    if not ok then
        fail(4, "%s.%s: %s", opname, argname, tostring(v))
    end
    return v
end

-- The access of a buffer arg in this launch ("out_mode" follows its slot's mode int).
local function access_of(op, a, args)
    if a.access ~= "out_mode" then
        return a.access
    end
    for _, m in ipairs(op.args) do
        if m.req == "mode" and m.slot == a.slot then
            return args[m.name] == 1 and "inout" or "out"
        end
    end
    return "inout"
end

function Plan:bind_buf(op, a, v, vars, args, li)
    if type(v) ~= "table" or v.ref ~= "buf" then
        fail(4, "%s.%s: expected a buffer", op.name, a.name)
    end
    local count = eval(a.spec, vars, op.name, a.name)
    local acc = access_of(op, a, args)
    if not v.dtype then
        if acc == "in" or acc == "inout" then
            fail(4, "%s.%s reads buffer '%s' before any launch writes it", op.name, a.name, v.name)
        end
        v.dtype, v.count, v.bytes = a.type, count, host.dtype_bytes(a.type, count)
    elseif v.dtype ~= a.type or count > v.count then
        fail(4, "%s.%s: buffer '%s' is %s[%d], the op needs %s[%d]", op.name, a.name, v.name,
             v.dtype, v.count, a.type, count)
    end
    if (acc == "in" or acc == "inout") and not v.defined then
        fail(4, "%s.%s reads buffer '%s' before any launch writes it", op.name, a.name, v.name)
    end
    if acc == "out" or acc == "inout" then
        v.defined = true
    end
    v.first = v.first or li
    v.last = li
    return v.name
end

function Plan:bind_weight(op, a, w, vars)
    if type(w) ~= "table" or w.ref ~= "weight" then
        fail(4, "%s.%s: expected a weight", op.name, a.name)
    end
    local t = w.t
    local q = qtypes[t.type]
    if not (q and q[a.type]) then
        unsupported(string.format("%s: weight type %s is not supported by %s.%s (%s weights)",
                                  w.name, t.type, op.name, a.name, a.type))
    end
    local dims = split(a.spec)
    for d = 1, 4 do
        local want = dims[d] and eval(dims[d], vars, op.name, a.name) or 1
        if t.ne[d] ~= want then
            fail(4, "%s: ne[%d] = %d, but %s.%s needs %s = %d", w.name, d - 1, t.ne[d],
                 op.name, a.name, dims[d] or "1", want)
        end
    end
    if not w.used then
        w.used = true
        self.weight_list[#self.weight_list + 1] = w.name
    end
    return w.name
end

function Plan:bind_state(op, a, s, vars)
    if type(s) ~= "table" or s.ref ~= "state" then
        fail(4, "%s.%s: expected a state region", op.name, a.name)
    end
    local dims = {}
    local n = 1
    for i, e in ipairs(split(a.spec)) do
        dims[i] = eval(e, vars, op.name, a.name)
        n = n * dims[i]
    end
    if not s.kind then
        local kv = a.type == "kv_k" or a.type == "kv_v"
        s.kind, s.dims = a.type, dims
        s.dtype = kv and self.opts.kv or "f32"
        s.bytes = host.dtype_bytes(s.dtype, n)
        self.state_list[#self.state_list + 1] = s
    elseif s.kind ~= a.type or #s.dims ~= #dims then
        fail(4, "%s.%s: state '%s' is %s, the op needs %s", op.name, a.name, s.name, s.kind, a.type)
    else
        for i = 1, #dims do
            if s.dims[i] ~= dims[i] then
                fail(4, "%s.%s: state '%s' dims differ from its first use", op.name, a.name, s.name)
            end
        end
    end
    return s.name
end

function Plan:bind(op, a, v, vars, args, li)
    local k = a.kind
    if k == "buf" then
        return self:bind_buf(op, a, v, vars, args, li)
    elseif k == "weight" then
        return self:bind_weight(op, a, v, vars)
    elseif k == "state" then
        return self:bind_state(op, a, v, vars)
    elseif k == "tick" then
        if type(v) ~= "table" or v.ref ~= "tick" or v.field ~= a.type then
            fail(3, "%s.%s: expected tick field '%s'", op.name, a.name, a.type)
        end
        return v.field
    elseif k == "int" then
        if math.type(v) ~= "integer" then
            fail(3, "%s.%s: expected an integer, got %s", op.name, a.name, tostring(v))
        end
        return v
    end
    if type(v) ~= "number" then
        fail(3, "%s.%s: expected a number", op.name, a.name)
    end
    return v + 0.0
end

-- The specialization key from the catalog template (same rules as runtime/plan.c).
local function kernel_key(plan, op, args, vars)
    return (string.gsub(op.key, "{([%w_]+)}", function(f)
        if f == "b" then
            return tostring(plan.b)
        elseif f == "qt" then
            local qts = {}
            for _, a in ipairs(op.args) do
                if a.kind == "weight" and a.type == "qdot" and args[a.name] then
                    qts[#qts + 1] = args[a.name].t.type
                end
            end
            return table.concat(qts, "+")
        elseif f == "kv" then
            for _, a in ipairs(op.args) do
                if a.kind == "state" and args[a.name] then
                    return args[a.name].dtype
                end
            end
        end
        return tostring(vars[f])
    end))
end

-- ===================================== launches =====================================

function Plan:launch(opname, args)
    local op = ops[opname]
    if not op then
        fail(2, "unknown op '%s' (not in runtime/ops.def)", opname)
    end
    for k in pairs(args) do
        if not op.index[k] then
            fail(2, "op %s has no argument '%s'", opname, tostring(k))
        end
    end
    local li = #self.launches + 1
    local vars = {b = self.b}
    for _, a in ipairs(op.args) do
        if a.kind == "int" then
            vars[a.name] = args[a.name]
        end
    end
    local out = {}
    for _, a in ipairs(op.args) do
        local v = args[a.name]
        if v ~= nil then
            out[a.name] = self:bind(op, a, v, vars, args, li)
        end
    end
    local l = {op = opname, args = out}
    if op.key then
        l.kernel = kernel_key(self, op, args, vars)
        self.kernel_set[l.kernel] = true
    end
    self.launches[li] = l
    return l
end

-- Keep buffer v live through the latest launch, so that nothing placed there is written
-- before that launch ends. The CUDA backend folds some launch pairs into one kernel
-- (runtime/backend_cuda.c fold_pairs): the first launch's input must then outlive the
-- second's output, or CUDA blocks of the fused kernel that run after others have written
-- that output would read it as their input.
function Plan:keep(v)
    if type(v) ~= "table" or v.ref ~= "buf" or not v.last then
        fail(2, "keep: expected a buffer some launch has named")
    end
    v.last = #self.launches
end

-- Projections of the same q8_1 input a [b, k]: outs = {{w = weight, out = buf, add = bool}},
-- packed 4 per launch in the given order. `add` accumulates into out (residual).
-- At tiers up to host.mmvq_direct_max_b (2) a launch whose weights are all of direct types
-- (qtypes[..].mmvq_direct: q4_K, q6_K) streams whole rows per warp, flat, through shared
-- memory (kernels/mmvq.h memra_mmvq_direct), 1.3-1.8x faster than staging on the 9b shapes
-- at tier 1 (bench/results/mmvq-notes.md runs 6-9); one other weight would stage them all,
-- so a group that mixes direct and other types becomes two launches, the direct weights
-- first (each in given order).
function Plan:mmvq(a, k, outs)
    if self.b <= host.mmvq_direct_max_b then
        local direct, staged = {}, {}
        for _, o in ipairs(outs) do
            local q = qtypes[o.w.t.type]
            if q and q.mmvq_direct then
                direct[#direct + 1] = o
            else
                staged[#staged + 1] = o
            end
        end
        if #direct > 0 and #staged > 0 then
            self:mmvq_pack(a, k, direct)
            self:mmvq_pack(a, k, staged)
            return
        end
    end
    self:mmvq_pack(a, k, outs)
end

function Plan:mmvq_pack(a, k, outs)
    local i = 1
    while i <= #outs do
        local args = {a = a, k = k}
        for s = 0, 3 do
            local o = outs[i]
            if not o then
                break
            end
            args["w" .. s], args["out" .. s] = o.w, o.out
            args["n" .. s], args["mode" .. s] = o.w.t.ne[2], o.add and 1 or 0
            args["scale" .. s] = self:scale_of(o.w)
            i = i + 1
        end
        self:launch("mmvq", args)
    end
end

-- ===================================== finishing =====================================

-- Liveness-based placement (see the header).
local function place(values, n_launches)
    local order = {}
    for _, v in ipairs(values) do
        if not v.dtype then
            fail(3, "buffer '%s' is never written", v.name)
        end
        v.size = align_up(v.bytes)
        order[#order + 1] = v
    end
    table.sort(order, function(a, b)
        if a.size ~= b.size then return a.size > b.size end
        if a.first ~= b.first then return a.first < b.first end
        return a.name < b.name
    end)
    local placed, arena = {}, 0
    for _, v in ipairs(order) do
        local busy = {}
        for _, o in ipairs(placed) do
            if o.first <= v.last and v.first <= o.last then
                busy[#busy + 1] = o
            end
        end
        table.sort(busy, function(a, b)
            if a.offset ~= b.offset then return a.offset < b.offset end
            return a.name < b.name
        end)
        local off = 0
        for _, o in ipairs(busy) do
            if off + v.size <= o.offset then
                break
            end
            off = math.max(off, o.offset + o.size)
        end
        v.offset = off
        arena = math.max(arena, off + v.size)
        placed[#placed + 1] = v
    end
    return arena
end

function Plan:finish()
    local n = #self.launches
    if self.output_v then
        self.output_v.last = n + 1 -- read by the host after the tick
    end
    if self.logits_v then
        self.logits_v.last = n + 1
    end
    local arena = place(self.value_list, n)
    local buffers, state, kernels = {}, {}, {}
    for i, v in ipairs(self.value_list) do
        buffers[i] = {name = v.name, offset = v.offset, bytes = v.bytes, dtype = v.dtype}
    end
    for i, s in ipairs(self.state_list) do
        state[i] = {name = s.name, layer = s.layer, kind = s.kind, dtype = s.dtype,
                    dims = s.dims, bytes = s.bytes}
    end
    for k in pairs(self.kernel_set) do
        kernels[#kernels + 1] = k
    end
    table.sort(kernels)
    return {
        arena_bytes = arena,
        buffers = buffers,
        weights = self.weight_list,
        state = state,
        kernels = kernels,
        launches = self.launches,
        input = self.input_v and self.input_v.name,
        output = self.output_v and self.output_v.name,
        logits = self.logits_v and self.logits_v.name,
    }
end

-- ================================== pipeline stages ==================================

-- Cut n_layer layers into n stages of about equal weight bytes (the tick streams weights,
-- so bytes are time). Layer l weighs the bytes of its blk.l.* tensors; the last stage also
-- carries extra_last bytes (the lm head). Cut s goes where the prefix sum is closest to
-- s/n of the total, keeping at least one layer per stage. Returns {{begin, end}, ...}.
function M.split_stages(n_layer, n, extra_last)
    local w = {}
    for l = 0, n_layer - 1 do
        w[l] = 0
    end
    for _, name in ipairs(model.tensor_names) do
        local l = tonumber(string.match(name, "^blk%.(%d+)%."))
        if l and w[l] then
            w[l] = w[l] + model.tensors[name].nbytes
        end
    end
    local prefix, total = {[0] = 0}, 0
    for l = 0, n_layer - 1 do
        total = total + w[l]
        prefix[l + 1] = total
    end
    total = total + (extra_last or 0)
    local stages, begin = {}, 0
    for s = 1, n - 1 do
        local target, best, best_d = total * s / n, nil, nil
        for c = begin + 1, n_layer - (n - s) do
            local d = math.abs(prefix[c] - target)
            if not best or d < best_d then
                best, best_d = c, d
            end
        end
        stages[s] = {begin, best}
        begin = best
    end
    stages[n] = {begin, n_layer}
    return stages
end

return M
