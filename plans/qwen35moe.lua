-- qwen35moe.lua — the MoE variant shares the qwen35 script (it branches on model.arch).
return import("qwen35")
