"""Online adaptation of the drafter: hybrid loss, GGUF <-> torch, export + publish, the trainer service.

| module     | job                                                                  |
|------------|----------------------------------------------------------------------|
| `loss`     | records -> tensors; L = L_DM (reverse KL on mapped top-k) + lambda L_N-gram |
| `model`    | a llama/qwen2 GGUF (any quant) -> a transformers model; LoRA          |
| `update`   | one update's steps: the schedule, AdamW, the non-finite guards       |
| `casts`    | bf16 casts of frozen weights done once an update, not every step     |
| `export`   | torch model -> GGUF -> quantized -> checked against torch in llama.cpp |
| `store`    | the trainer's durable inbox (SQLite, dedup by record id)              |
| `service`  | the trainer: train every I prompts, publish to the registry           |
| `app`      | its HTTP face on loopback: records in, status out, behind its token   |
| `cli`      | `omnidraft trainer serve|export`, `omnidraft drafter list|rollback`   |

The trainer never imports the server or the generator: it meets them through the record schema
(:mod:`omnidraft.online.records`) and the drafter registry (:mod:`omnidraft.online.registry`).
"""
